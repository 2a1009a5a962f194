"""tests/data/select_stats and tests/data/select_tensor: what msprobe's acc_check chooses and how it
judges dropout (issue 45), one training step of a tiny three-layer decoder dumped by msprobe 26.2.0
(L1, no API list, risk level ALL), as statistics and as tensors:

- each layer computes its rotary cos and sin again (arange, outer, cat, cos, sin: the same values in
  every layer, as transformers' LLaMA did up to 4.35), and a softmax over scores with an additive
  causal mask of finfo.min, whose recorded Mean is -inf and Norm inf in every layer: calls that differ
  in Max and Min only, the groups of msprobe's `acc_check -f`;
- one API name under two types: `Torch.add` and `Tensor.add`, `Torch.matmul` and `Tensor.matmul`
  (msprobe's lists name an API without its type); `Tensor.to`, on msprobe's fixed black list;
- dropout as a training step calls it: F.dropout on the attention probabilities (p 0.1, training; the
  masked half of them already zero), F.dropout with p 0 and with training=False, F.dropout2d (p 0.5,
  256 channels), F.alpha_dropout (p 0.2, training), torch.dropout (p 0.3, train), each forward and
  backward.

    python acc_check_dumps.py   (in msprobe's venv; see ../README.md; one process a dump, msprobe's
                                 debugger is one per process)
"""

import json
import math
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import torch
import torch.nn.functional as F
from msprobe.pytorch import PrecisionDebugger, seed_all

DATA = Path(__file__).resolve().parent.parent
B, T, D, H, LAYERS = 2, 8, 16, 2, 3
HD = D // H


def rotate_half(x):
    return torch.cat((-x[..., HD // 2 :], x[..., : HD // 2]), dim=-1)


def step(weights):
    mask = torch.full((T, T), torch.finfo(torch.float32).min).triu(1)
    h = weights["embed"][torch.arange(B * T).remainder(32).view(B, T)]
    for wq, wk, wv, wo in weights["layers"]:
        inv_freq = 1.0 / (10000 ** (torch.arange(0, HD, 2).float() / HD))
        freqs = torch.outer(torch.arange(T).float(), inv_freq)
        emb = torch.cat((freqs, freqs), dim=-1)
        cos, sin = emb.cos(), emb.sin()
        q = F.linear(h, wq).view(B, T, H, HD).transpose(1, 2)
        k = F.linear(h, wk).view(B, T, H, HD).transpose(1, 2)
        v = F.linear(h, wv).view(B, T, H, HD).transpose(1, 2)
        q = q * cos + rotate_half(q) * sin
        scores = torch.matmul(q, k.transpose(-1, -2)) / math.sqrt(HD) + mask
        probs = F.dropout(F.softmax(scores, dim=-1), p=0.1, training=True)
        attended = probs.matmul(v).transpose(1, 2).reshape(B, T, D)
        h = torch.add(h, F.linear(attended, wo))
        h = h.add(F.dropout(F.gelu(h), p=0.0))
    h = F.dropout(h, 0.5, training=False)
    features = F.dropout2d(weights["features"], p=0.5)
    selu = F.alpha_dropout(torch.selu(weights["selu"]), p=0.2, training=True)
    dropped = torch.dropout(weights["plain"], 0.3, True)
    loss = h.to(torch.float64).pow(2).mean() + features.sum() + selu.sum() + dropped.sum()
    loss.backward()


def main(task, name):
    seed_all(1234, mode=False)
    torch.manual_seed(0)
    weights = {
        "embed": torch.randn(32, D, requires_grad=True),
        "layers": [[(torch.randn(D, D) * D**-0.5).requires_grad_() for _ in range(4)] for _ in range(LAYERS)],
        "features": torch.randn(B, 128, 2, 2, requires_grad=True),
        "selu": torch.randn(4, 64, requires_grad=True),
        "plain": torch.randn(4, 64, requires_grad=True),
    }
    with tempfile.TemporaryDirectory() as work:
        config = {"task": task, "dump_path": work, "rank": [], "step": [], "level": "L1", "async_dump": False,
                  task: {"scope": [], "list": [], "data_mode": ["all"]}, "risk_level": "ALL"}
        if task == "statistics":
            config[task]["summary_mode"] = "statistics"
        path = Path(work) / "config.json"
        path.write_text(json.dumps(config))
        debugger = PrecisionDebugger(config_path=str(path))
        torch.manual_seed(1)  # the same dropout masks in both dumps
        debugger.start()
        step(weights)
        debugger.stop()
        debugger.step()
        written = next(Path(work).glob("step0/*/dump.json")).parent
        target = DATA / name  # acc_check/ beside the dump stays (acc_check_msprobe.py)
        target.mkdir(exist_ok=True)
        for item in ("dump.json", "stack.json", "dump_tensor_data"):
            if (target / item).is_dir():
                shutil.rmtree(target / item)
            if (written / item).is_dir():
                shutil.copytree(written / item, target / item)
            elif (written / item).is_file():
                shutil.copy(written / item, target / item)
        entries = json.loads((target / "dump.json").read_text())["data"]
        print(name, len(entries), "entries", file=sys.stderr)


if __name__ == "__main__":
    if len(sys.argv) == 3:
        main(*sys.argv[1:])
    else:
        for task, name in (("statistics", "select_stats"), ("tensor", "select_tensor")):
            subprocess.run([sys.executable, __file__, task, name], check=True)
