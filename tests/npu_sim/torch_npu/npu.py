"""torch.npu: the device module of the simulated NPU (what torch_npu.npu offers, the part tests use)."""

from __future__ import annotations

from typing import List

import torch

from . import _state


def is_available() -> bool:
    return _state.device_count() > 0


def is_initialized() -> bool:
    return True


def _is_in_bad_fork() -> bool:
    return False


def device_count() -> int:
    """NPUs this process sees: ASCEND_RT_VISIBLE_DEVICES, else every one of the host."""
    return _state.device_count()


def set_device(device) -> None:
    _state.set_device(device)


def current_device() -> int:
    return _state.current_device()


def get_device_name(device=None) -> str:
    return f"Ascend910B4 (simulated on the CPU, physical id {_state.physical_ids()[_state.index(device)]})"


def synchronize(device=None) -> None:
    """Wait for the device's kernels: this is where it reports their errors."""
    _state.index(device)
    _state.reading_results()


def manual_seed(seed: int) -> None:
    _state.generator().manual_seed(seed)


def manual_seed_all(seed: int) -> None:
    for device in range(_state.device_count()):
        _state.generator(device).manual_seed(seed)


def get_rng_state(device="npu") -> torch.Tensor:
    return _state.generator(device).get_state()


def set_rng_state(new_state: torch.Tensor, device="npu") -> None:
    _state.generator(device).set_state(new_state)


def get_amp_supported_dtype() -> List[torch.dtype]:
    """What torch.autocast(device_type="npu") asks of the backend."""
    return [torch.float16, torch.bfloat16]


def is_bf16_supported() -> bool:
    return True
