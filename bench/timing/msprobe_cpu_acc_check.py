"""msprobe's own PyTorch pre-check (`msprobe acc_check`) with the CPU as its device under test.

Not part of msprobe: msprobe has no CPU mode, and sets its device to 'cuda' (no torch_npu) or
'npu'. This forces it to 'cpu' and makes the CUDA calls it would make no-ops, so that speed.py
can time msprobe beside pytest-msprobe on one machine. Run by msprobe's own interpreter:

    VENV/bin/python bench/timing/msprobe_cpu_acc_check.py acc_check -api_info DUMP -o OUT

in a venv with torch==2.13.0 mindstudio-probe==26.2.0 "numpy<2" "pandas<3" "ml_dtypes<0.6".
"""

import sys


def main() -> int:
    # torch patched before msprobe is imported: msprobe reads the device when it loads.
    import torch

    torch.cuda.set_device = lambda *args, **kwargs: None
    torch.cuda.empty_cache = lambda *args, **kwargs: None
    import msprobe.pytorch.api_accuracy_checker.acc_check.acc_check as acc_check
    import msprobe.pytorch.api_accuracy_checker.acc_check.acc_check_utils as acc_check_utils

    acc_check.current_device = "cpu"
    acc_check_utils.current_device = "cpu"
    from msprobe.msprobe import main as msprobe_main

    sys.argv = ["msprobe", *sys.argv[1:]]
    return msprobe_main()


if __name__ == "__main__":
    sys.exit(main())
