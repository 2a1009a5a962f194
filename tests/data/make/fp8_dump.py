"""Write tests/data/fp8_casts: casts into float8_e4m3fn and float8_e5m2 and back, by msprobe 26.2.0 on CPU.

Run in an environment with torch 2.13 and mindstudio-probe 26.2.0 (../../../shared/dumps/README.md):
    python tests/data/make/fp8_dump.py tests/data/make/fp8_tensor_L1.json
then copy out/fp8_casts/step0/rank/ to tests/data/fp8_casts/. Forward only (no gradient flows
through a float8 tensor on the CPU): each cast's input, its float8 output, and the float8 values
read back in float32 and used (a product, a matmul), with values in each format's normal range,
its subnormals and beyond its largest finite value (e4m3fn's cast saturates there on the CPU).
The fnuz formats are left out: msprobe 26.2.0's statistics of an e4m3fnuz tensor raise on the CPU
('"max_all" not implemented for Float8_e4m3fnuz'), which stops the run.
"""

import sys

import torch
from msprobe.core.dump.data_dump.data_processor.pytorch_processor import TensorHandler
from msprobe.pytorch import PrecisionDebugger, seed_all

# msprobe 26.2.0 saves a float8 tensor as `tensor.detach().to("cpu")` and then frees that storage:
# on a CPU that is the model's own tensor, and the next op on it crashes (a segmentation fault).
# Keep float8 storages: what is written does not change.
_free = TensorHandler.free_tensor


def _keep_float8(tensor, name):
    if "float8" not in str(tensor.dtype):
        _free(tensor, name)


TensorHandler.free_tensor = staticmethod(_keep_float8)

seed_all(1234, mode=False)
torch.manual_seed(0)
debugger = PrecisionDebugger(config_path=sys.argv[1])
debugger.start()
x = torch.randn(4, 16) * 3
e4 = x.to(torch.float8_e4m3fn)  # normal range
wide = (x * 200).to(torch.float8_e4m3fn)  # some beyond 448: saturated
tiny = (x * 1e-3).to(torch.float8_e4m3fn)  # subnormals (below 2^-6)
e5 = (x * 1000).to(torch.float8_e5m2)  # beyond e4m3's range
e5_wide = (x * 2e4).to(torch.float8_e5m2)  # some beyond 57344: inf
e5_tiny = (x * 1e-5).to(torch.float8_e5m2)  # e5m2's subnormals (below 2^-14)
back = e4.float()
scale = torch.tensor(0.25)
dequant = wide.to(torch.float32) * scale
y = torch.matmul(back, e5.to(torch.float32).t())
z = tiny.float() + e5_tiny.float()
debugger.stop()
debugger.step()
print("done", y.shape, z.shape, dequant.shape)
