"""A MindSpore model for tests/data/ms_ops_L1: mindspore.ops and Tensor methods in MindSpore's
conventions (axis, keep_dims, tuples), an fp16 mul. Run: python ms_ops_L1.py ms_ops_L1.json (msprobe 26.2.0)."""
import sys, os
import numpy as np
import mindspore as ms
from mindspore import nn, mint, Tensor, ops
ms.set_context(mode=ms.PYNATIVE_MODE)
ms.set_device("CPU")
from msprobe.mindspore import PrecisionDebugger
import msprobe.core.dump.data_dump.data_processor.mindspore_processor as _mp
class _MintNoNorm:
    def __getattr__(self, n):
        if n == "norm":
            raise AttributeError(n)
        return getattr(ms.mint, n)
_mp.mint = _MintNoNorm()
cfg = sys.argv[1]

class Net(nn.Cell):
    def __init__(self):
        super().__init__()
        self.fc = mint.nn.Linear(12, 8)
        self.w = ms.Parameter(Tensor(np.random.randn(8, 6).astype(np.float32) * 0.3))
    def construct(self, x):
        y = self.fc(x)                                  # Primitive Dense
        y = ops.tanh(y)
        y = ops.matmul(y, self.w)                       # [4, 6]
        m = ops.mean(y, axis=1, keep_dims=True)         # axis / keep_dims
        y = y - m
        s = y.sum(axis=-1, keepdims=True)               # Tensor.sum axis / keepdims
        y = y + s * 0.1
        z = ops.softmax(y, axis=0)
        z = ops.concat((z, y), axis=1)                  # [4, 12]
        z = ops.transpose(z, (1, 0))                    # [12, 4]
        z = mint.permute(z, (1, 0))                     # [4, 12]
        z = z.reshape(4, 3, 4)
        z = ops.expand_dims(z, 0).squeeze(0)
        z = z[:, 1:, ...]                               # getitem with a slice and ellipsis
        h = z.astype(ms.float16)
        h = mint.mul(h, h)
        z = h.astype(ms.float32)
        v, _ = mint.max(z, dim=-1)
        t = ops.tile(v, (2, 1))
        t = ops.sigmoid(t) * mint.sqrt(mint.clamp(t, 0.01, 10.0))
        return mint.mean(mint.square(t))

net = Net()
opt = nn.SGD(net.trainable_params(), learning_rate=0.01)
def loss_fn(x):
    return net(x)
grad_fn = ms.value_and_grad(loss_fn, None, opt.parameters)
debugger = PrecisionDebugger(config_path=cfg)
for step in range(1):
    debugger.start(net)
    x = Tensor(np.random.randn(4, 12).astype(np.float32))
    loss, grads = grad_fn(x)
    opt(grads)
    debugger.stop()
    debugger.step()
print("loss", float(loss.asnumpy()))
