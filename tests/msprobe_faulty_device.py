"""msprobe's own acc_check, its CPU run (bench/timing/msprobe_cpu_acc_check.py), with a faulty device:
the tested outputs of the APIs named in $MSPROBE_FAULTY_APIS (comma separated, msprobe's API names:
`gelu,softmax`) come out off by a relative 1e-3, the bench untouched. The NPU run that
test_compare_msprobe.py judges against a clean run standing for the GPU. Run by msprobe's interpreter:

    MSPROBE_FAULTY_APIS=gelu VENV/bin/python tests/msprobe_faulty_device.py acc_check -api_info DUMP -o OUT
"""

import os
import sys
from pathlib import Path

FAULTY = frozenset(filter(None, os.environ.get("MSPROBE_FAULTY_APIS", "").split(",")))
RELATIVE_ERROR = 1e-3


def main() -> int:
    import torch

    torch.cuda.set_device = lambda *args, **kwargs: None  # as the CPU run does, before msprobe loads
    import msprobe.pytorch.api_accuracy_checker.acc_check.acc_check as acc_check

    original = acc_check.exec_api

    def exec_api(params):  # type: ignore[no-untyped-def]
        out = original(params)
        # run_torch_api runs the bench first, then the device: the device's call is the one whose
        # parameters its caller holds as device_exec_params (both run on the CPU here).
        tested = sys._getframe(1).f_locals.get("device_exec_params") is params
        if tested and params.api_name in FAULTY and isinstance(out, torch.Tensor) and out.is_floating_point():
            return out * (1 + RELATIVE_ERROR)
        return out

    acc_check.exec_api = exec_api
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "bench" / "timing"))
    from msprobe_cpu_acc_check import main as cpu_run

    return cpu_run()


if __name__ == "__main__":
    sys.exit(main())
