"""A small CNN in mindspore.nn's older API (Conv2d, BatchNorm2d, MaxPool2d, Dense, Dropout) at level mix:
Primitive and Cell entries, ops.gather, ops.flatten, Tensor.var. Run: python ms_cnn_mix.py ms_cnn_mix.json (msprobe 26.2.0)."""
import sys
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

class CNN(nn.Cell):
    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(3, 4, 3, pad_mode="valid")
        self.bn = nn.BatchNorm2d(4)
        self.relu = nn.ReLU()
        self.pool = nn.MaxPool2d(2, 2)
        self.flat = nn.Flatten()
        self.fc = nn.Dense(4 * 3 * 3, 5)
        self.drop = nn.Dropout(p=0.1)
    def construct(self, x):
        y = self.pool(self.relu(self.bn(self.conv(x))))
        y = self.drop(self.flat(y))
        y = self.fc(y)
        y = ops.gelu(y) + ops.exp(-y) * 0.1
        y = y.clip(-3.0, 3.0)
        idx = Tensor(np.array([0, 2, 1, 0], np.int32))
        w = ops.gather(y, idx, 0)
        return ops.reduce_mean(ops.square(w)) + ops.log_softmax(y, 1).mean() * 0.01 + y.var() * 0.0

net = CNN()
opt = nn.Momentum(net.trainable_params(), learning_rate=0.01, momentum=0.9)
loss_fn = lambda x: net(x)
grad_fn = ms.value_and_grad(loss_fn, None, opt.parameters)
debugger = PrecisionDebugger(config_path=cfg)
debugger.start(net)
x = Tensor(np.random.randn(4, 3, 8, 8).astype(np.float32))
loss, grads = grad_fn(x)
opt(grads)
debugger.stop()
debugger.step()
print("loss", float(loss.asnumpy()))
