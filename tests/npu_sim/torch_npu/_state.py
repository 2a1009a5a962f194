"""What the simulated device remembers: the bound device, its random generators, errors not yet
reported, and the log a test reads back.

Environment:
  MSPROBE_NPU_SIM_DEVICES  how many NPUs the simulated host has (default 8)
  ASCEND_RT_VISIBLE_DEVICES  the ones this process sees, as on Ascend (`0,1`): ids count from 0 among them
  MSPROBE_NPU_SIM_LOG  a file this process appends to: `<pid> set_device <id> <physical id>`,
      `<pid> place <id>` (the first copy from the host to each id), `<pid> deficit <op> <kind>`
"""

from __future__ import annotations

import os
from typing import Dict, List, Optional, Set

import torch

_current = 0
_placed: Set[int] = set()
_generators: Dict[int, torch.Generator] = {}
_pending: List[str] = []  # device errors not reported yet (asynchronous execution)
probabilities_dtype: Optional[torch.dtype] = None  # a flash kernel's P, rounded to it before P V (flash_p)


def physical_ids() -> List[int]:
    """The physical ids this process sees, in the order ASCEND_RT_VISIBLE_DEVICES gives them."""
    count = int(os.environ.get("MSPROBE_NPU_SIM_DEVICES", "8"))
    visible = os.environ.get("ASCEND_RT_VISIBLE_DEVICES")
    if visible is None:
        return list(range(count))
    ids = []
    for part in visible.split(","):
        part = part.strip()
        if not part.isdigit() or int(part) >= count:
            break  # as the runtime does: the list ends at the first id that does not exist
        ids.append(int(part))
    return ids


def device_count() -> int:
    return len(physical_ids())


def index(device: object = None) -> int:
    """The id of `device` (an int, `npu:1`, a torch.device; None: the current one), checked."""
    if device is None:
        return _current
    if isinstance(device, str):
        device = torch.device(device)
    if isinstance(device, torch.device):
        if device.type != "npu":
            raise ValueError(f"npu sim: expected an npu device, got {device}")
        if device.index is None:
            return _current
        device = device.index
    if not isinstance(device, int) or not 0 <= device < device_count():
        raise RuntimeError(f"npu sim: invalid device id {device}: {device_count()} NPU(s) visible "
                           f"(ASCEND_RT_VISIBLE_DEVICES={os.environ.get('ASCEND_RT_VISIBLE_DEVICES')})")
    return device


def set_device(device: object) -> None:
    global _current
    _current = index(device)
    log(f"set_device {_current} {physical_ids()[_current]}")


def current_device() -> int:
    return _current


def place(device_index: Optional[int]) -> None:
    """Host data is copied to npu:<index> (None: the current device)."""
    resolved = index(device_index)
    if resolved not in _placed:
        _placed.add(resolved)
        log(f"place {resolved}")


def generator(device: object = None) -> torch.Generator:
    """The random generator of an NPU: its own, apart from the CPU's."""
    key = index(device)
    if key not in _generators:
        _generators[key] = torch.Generator().manual_seed(0)
    return _generators[key]


def fail_later(message: str) -> None:
    _pending.append(message)


def reading_results() -> None:
    """A synchronisation point (synchronize, a copy to the host, .item()): the device reports
    the errors of kernels that ran since the last one, as an Ascend NPU does."""
    if _pending:
        message = _pending[0]
        _pending.clear()
        raise RuntimeError(message)


def log(line: str) -> None:
    path = os.environ.get("MSPROBE_NPU_SIM_LOG")
    if path:
        with open(path, "a", encoding="utf-8") as handle:
            handle.write(f"{os.getpid()} {line}\n")
