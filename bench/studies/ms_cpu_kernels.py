"""Which mapped mint APIs have a CPU kernel in the installed MindSpore (float32).

Each API is called with small float32 tensors in a few common shapes of
arguments; the first call that runs proves a kernel, a "kernel unregistered"
error names the missing one, and an API no probe call fits stays unknown.
Prints a table and records it in ms_cpu_kernels.txt beside this script.

    python -m bench.studies.ms_cpu_kernels
"""

from __future__ import annotations

import os
import warnings
from pathlib import Path

import numpy as np

from pytest_msprobe.frameworks import mindspore as framework
from pytest_msprobe.frameworks import ms_mapping


def probes(ms):
    x = ms.Tensor(np.linspace(0.1, 0.9, 6, dtype=np.float32).reshape(2, 3))
    m = ms.Tensor(np.linspace(0.1, 0.9, 9, dtype=np.float32).reshape(3, 3))
    b3 = ms.Tensor(np.linspace(0.1, 0.9, 18, dtype=np.float32).reshape(2, 3, 3))
    img = ms.Tensor(np.linspace(0.1, 0.9, 48, dtype=np.float32).reshape(1, 3, 4, 4))
    w = ms.Tensor(np.linspace(0.1, 0.9, 54, dtype=np.float32).reshape(2, 3, 3, 3))
    idx = ms.Tensor(np.array([[0, 1, 0], [1, 0, 1]], dtype=np.int64))
    return [
        (x,),
        (m, m),
        (x, x),
        (x, 1),
        (x, 0),
        (b3, b3, b3),
        (img, w),
        (img, 2),
        (x, (3,)),
        (idx, 2),
        (x, idx.astype(ms.bool_), 0.0),
        (x, 0, idx),
        (m, 0),
        (2, 3),
        (x, [1, 2]),
    ]


def classify(fn, calls) -> str:
    missing = None
    for args in calls:
        try:
            fn(*args)
            return "kernel"
        except Exception as exc:  # noqa: BLE001 - a probe that does not fit the signature
            missing = missing or framework.missing_kernel(exc)
    return f"missing: {missing}" if missing else "unknown (no probe call fits)"


def main() -> None:
    warnings.filterwarnings("ignore")
    os.environ.setdefault("GLOG_v", "3")  # MindSpore logs every probe that does not fit
    ms = framework.mindspore()
    framework.bind("cpu")
    calls = probes(ms)
    rows = []
    for kind, root in (("Mint", ms.mint), ("MintFunctional", ms.mint.nn.functional)):
        for name in sorted(ms_mapping.TABLES[kind]):
            fn = getattr(root, name, None)
            rows.append((f"{kind}.{name}", "absent" if fn is None else classify(fn, calls)))
    lines = [f"MindSpore {ms.__version__}, CPU, float32", "", f"{'API':45} result"]
    lines += [f"{api:45} {result}" for api, result in rows]
    counts = {}
    for _, result in rows:
        counts[result.split(":")[0]] = counts.get(result.split(":")[0], 0) + 1
    lines += ["", ", ".join(f"{n} {k}" for k, n in sorted(counts.items()))]
    text = "\n".join(lines)
    print(text)
    (Path(__file__).with_suffix(".txt")).write_text(text + "\n")


if __name__ == "__main__":
    main()
