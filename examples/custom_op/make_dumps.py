"""Writes clean/ and faulty/: one training step of a small block that calls the team's ops, dumped by
msprobe 26.2.0 (task tensor, level L1, every API at risk level ALL). `custom_op_namespaces` makes
msprobe record torch.ops.myteam.* (it records `_C_ascend` alone by default), and
`register_custom_api` the Python launcher fused_rms_norm, under the prefix MyTeam.

faulty/ is the same step with a faulty device kernel: its up projection reads its operands rounded
to bfloat16 (a kernel fed the wrong dtype), everything else as in clean/.

    python make_dumps.py clean     # in a virtual environment with msprobe, torch 2.13 (CPU)
    python make_dumps.py faulty
"""

import json
import os
import shutil
import sys
import tempfile

import torch
import torch.nn.functional as F
from msprobe.pytorch import PrecisionDebugger, seed_all

import myteam_ops

KIND = sys.argv[1]
assert KIND in ("clean", "faulty"), "python make_dumps.py clean|faulty"
HERE = os.path.dirname(os.path.abspath(__file__))
H, FFN, T, VALID = 32, 64, 16, 12


def faulty_gated_silu(x, w_gate, w_up, valid_rows):
    out = torch.full((x.shape[0], w_gate.shape[0]), float("nan"), dtype=x.dtype)
    rows = x[:valid_rows]
    up = (rows.bfloat16() @ w_up.t().bfloat16()).to(x.dtype)  # the fault
    out[:valid_rows] = F.silu(rows @ w_gate.t()) * up
    return out


if KIND == "faulty":
    torch.library.register_kernel(f"{myteam_ops.NAMESPACE}::gated_silu", "cpu", faulty_gated_silu)

work = tempfile.mkdtemp()
config = {"task": "tensor", "dump_path": work, "rank": [], "step": [], "level": "L1", "async_dump": False,
          "tensor": {"scope": [], "list": [], "data_mode": ["all"]}, "risk_level": "ALL",
          "custom_op_namespaces": [myteam_ops.NAMESPACE]}
with open(os.path.join(work, "config.json"), "w") as f:
    json.dump(config, f)
debugger = PrecisionDebugger(config_path=os.path.join(work, "config.json"))
debugger.register_custom_api(myteam_ops, "fused_rms_norm", "MyTeam")

seed_all(1234, mode=False)
norm_weight = torch.nn.Parameter(1 + 0.1 * torch.randn(H))
w_gate = torch.nn.Parameter(torch.randn(FFN, H) / H ** 0.5)
w_up = torch.nn.Parameter(torch.randn(FFN, H) / H ** 0.5)
down = torch.nn.Linear(FFN, H)
x = torch.randn(T, H)  # T tokens, the last T - VALID of them padding

debugger.start()
h = myteam_ops.fused_rms_norm(x, norm_weight, 1e-6)
g = torch.ops.myteam.gated_silu(h, w_gate, w_up, VALID)
y = down(g[:VALID])  # the padding rows are never read
y.pow(2).mean().backward()
debugger.stop()
debugger.step()

# msprobe writes <work>/step0/proc<pid>/: the folder's contents become KIND/.
written = next(os.path.join(root) for root, _, files in os.walk(work) if "dump.json" in files)
target = os.path.join(HERE, KIND)
shutil.rmtree(target, ignore_errors=True)
shutil.copytree(written, target)
shutil.rmtree(work)
