"""Which device this process tests on: the choice, the id, the binding.

No pytest. torch and torch_npu are imported only here and only when the
choice needs them: on a machine without the CANN toolkit, importing torch_npu
breaks `import torch` itself.
"""

from __future__ import annotations

import importlib
import importlib.util
from typing import List, Optional

AUTO, NPU, CUDA, CPU, RECORDED = "auto", "npu", "cuda", "cpu", "recorded"
CHOICES = (AUTO, NPU, CUDA, CPU, RECORDED)

CANN_HINT = (
    "torch_npu needs the CANN toolkit: run `source /usr/local/Ascend/ascend-toolkit/set_env.sh` "
    "(it sets LD_LIBRARY_PATH and ASCEND_HOME_PATH) before pytest, or, to use another device on "
    "this machine, set TORCH_DEVICE_BACKEND_AUTOLOAD=0 so that `import torch` does not load torch_npu"
)


class DeviceError(Exception):
    """A device choice that cannot be honoured on this machine (a usage error)."""


def has_module(name: str) -> bool:
    try:
        return importlib.util.find_spec(name) is not None
    except (ImportError, ValueError):
        return False


def import_torch():
    try:
        return importlib.import_module("torch")
    except ImportError as exc:
        if has_module("torch_npu"):
            raise DeviceError(f"`import torch` fails because torch_npu is installed but broken ({exc}); {CANN_HINT}")
        raise DeviceError(f"PyTorch is not installed ({exc}): pip install 'pytest-msprobe[torch]'") from None
    except OSError as exc:  # a missing libhccl.so and friends
        raise DeviceError(f"`import torch` fails: {exc}; {CANN_HINT}") from None


def import_torch_npu():
    if not has_module("torch_npu"):
        raise DeviceError("--msprobe-device npu needs torch_npu, which is not installed here "
                          "(pip install torch_npu matching your torch, on a machine with the CANN toolkit)")
    import_torch()
    try:
        return importlib.import_module("torch_npu")
    except (ImportError, OSError, RuntimeError) as exc:
        raise DeviceError(f"torch_npu is installed but cannot be imported ({exc}); {CANN_HINT}") from None


def choose(requested: str, notes: Optional[List[str]] = None) -> str:
    """The kind of device under test: auto picks npu, else cuda, else cpu.

    `notes` collects why auto passed over a device that is installed but broken.
    """
    if requested not in CHOICES:
        raise DeviceError(f"--msprobe-device must be one of {', '.join(CHOICES)}, not {requested!r}")
    if requested in (CPU, RECORDED):
        return requested
    if requested == NPU:
        import_torch_npu()
        return NPU
    if requested == AUTO and has_module("torch_npu"):
        try:
            import_torch_npu()
            return NPU
        except DeviceError as exc:
            if notes is not None:
                notes.append(f"auto did not choose npu: {exc}")
    cuda_ready = has_module("torch") and import_torch().cuda.is_available()
    if requested == CUDA and not cuda_ready:
        raise DeviceError("--msprobe-device cuda: torch sees no CUDA device here")
    return CUDA if cuda_ready else CPU


def parse_ids(text: Optional[str]) -> List[int]:
    """`0,1,2,3`, `0-7` or `0-3,6` -> [ids]."""
    ids: List[int] = []
    for part in (text or "").replace(" ", "").split(","):
        if not part:
            continue
        try:
            if "-" in part:
                first, last = (int(x) for x in part.split("-", 1))
                ids.extend(range(first, last + 1))
            else:
                ids.append(int(part))
        except ValueError:
            raise DeviceError(f"--msprobe-devices: {part!r} is not an id or a range like 0-7") from None
    if len(set(ids)) != len(ids):
        raise DeviceError(f"--msprobe-devices names an id twice: {text!r}")
    return ids


def bind(kind: str, device_id: int) -> str:
    """Make `device_id` the current device of this process; the device string to run on."""
    if kind == NPU:
        torch = import_torch()
        import_torch_npu()
        torch.npu.set_device(device_id)
        return f"npu:{device_id}"
    if kind == CUDA:
        torch = import_torch()
        torch.cuda.set_device(device_id)
        return f"cuda:{device_id}"
    return kind
