"""Which device this process tests on: the choice, the id, the binding.

No pytest. torch and torch_npu are imported only here and only when the
choice needs them: on a machine without the CANN toolkit, importing torch_npu
breaks `import torch` itself.
"""

from __future__ import annotations

import importlib
import importlib.util
import os
import sys
from collections.abc import Iterable

from ..options import AUTO, CPU, CUDA, NPU, RECORDED
from ..options import DEVICES as CHOICES

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
            raise DeviceError(
                f"`import torch` fails because torch_npu is installed but broken ({exc}); {CANN_HINT}"
            ) from None
        raise DeviceError(f"PyTorch is not installed ({exc}): pip install 'pytest-msprobe[torch]'") from None
    except OSError as exc:  # a missing libhccl.so and friends
        raise DeviceError(f"`import torch` fails: {exc}; {CANN_HINT}") from None


def import_torch_npu():
    if not has_module("torch_npu"):
        raise DeviceError(
            "--msprobe-device npu needs torch_npu, which is not installed here "
            "(pip install torch_npu matching your torch, on a machine with the CANN toolkit)"
        )
    import_torch()
    try:
        return importlib.import_module("torch_npu")
    except (ImportError, OSError, RuntimeError) as exc:
        raise DeviceError(f"torch_npu is installed but cannot be imported ({exc}); {CANN_HINT}") from None


def choose(requested: str, notes: list[str] | None = None, frameworks: Iterable[str] = ("pytorch",)) -> str:
    """The kind of device under test: auto picks npu, else cuda, else cpu.

    `frameworks` are those of the run's dumps: MindSpore dumps run on MindSpore,
    which needs no torch_npu on the NPU and has no CUDA path. `notes` collects
    why auto passed over a device that is installed but broken.
    """
    if requested not in CHOICES:
        raise DeviceError(f"--msprobe-device must be one of {', '.join(CHOICES)}, not {requested!r}")
    if requested in (CPU, RECORDED):
        return requested
    torch_dumps, mindspore_dumps = _torch_and_mindspore(frameworks)
    if requested == NPU:
        if torch_dumps:
            import_torch_npu()
        if mindspore_dumps and not has_module("mindspore"):
            raise DeviceError(
                "--msprobe-device npu: the MindSpore dumps need MindSpore, which is not installed "
                "here (pip install mindspore, the Ascend build, with the CANN toolkit)"
            )
        return NPU
    if requested == AUTO and torch_dumps and has_module("torch_npu"):
        try:
            import_torch_npu()
            return NPU
        except DeviceError as exc:
            if notes is not None:
                notes.append(f"auto did not choose npu: {exc}")
    if requested == AUTO and not torch_dumps:
        if notes is not None:
            notes.append("auto chose cpu for MindSpore dumps: use --msprobe-device npu on Ascend")
        return CPU
    cuda_ready = has_module("torch") and import_torch().cuda.is_available()
    if requested == CUDA and not cuda_ready:
        raise DeviceError("--msprobe-device cuda: torch sees no CUDA device here")
    return CUDA if cuda_ready else CPU


def _torch_and_mindspore(frameworks: Iterable[str]) -> tuple[bool, bool]:
    names = set(frameworks)
    return bool(names - {"mindspore"}), "mindspore" in names


MAX_DEVICE_ID = 65_535  # far past any host's devices: a range beyond it is a typo, not 10**11 ids in memory


def parse_ids(text: str | None) -> list[int]:
    """`0,1,2,3`, `0-7` or `0-3,6` -> [ids]."""
    ids: list[int] = []
    for part in (text or "").replace(" ", "").split(","):
        if not part:
            continue
        try:
            if "-" in part:
                first, last = (int(x) for x in part.split("-", 1))
            else:
                first = last = int(part)
        except ValueError:
            raise DeviceError(f"--msprobe-devices: {part[:40]!r} is not an id or a range like 0-7") from None
        if not 0 <= first <= last <= MAX_DEVICE_ID:
            raise DeviceError(
                f"--msprobe-devices: {part[:40]!r} is not an id or a range of ids from 0 to {MAX_DEVICE_ID:,}"
            )
        ids.extend(range(first, last + 1))
    if len(set(ids)) != len(ids):
        raise DeviceError(f"--msprobe-devices names an id twice: {text!r}")
    return ids


def bind(kind: str, device_id: int, frameworks: Iterable[str] = ("pytorch",)) -> str:
    """Make `device_id` the current device of this process; the device string to run on."""
    torch_dumps, mindspore_dumps = _torch_and_mindspore(frameworks)
    if kind == NPU and torch_dumps:
        torch = import_torch()
        import_torch_npu()
        torch.npu.set_device(device_id)
    elif kind == CUDA:
        import_torch().cuda.set_device(device_id)
    if kind == NPU and mindspore_dumps:
        from . import Unsupported, mindspore

        try:  # before any MindSpore op: it binds a process to one device, once
            mindspore.bind(device_name(kind, device_id))
        except Unsupported as exc:
            raise DeviceError(str(exc)) from None
    return device_name(kind, device_id)


def synchronize(device: str) -> None:
    """Wait for the kernels queued on `device` (`npu:3`, `cuda:0`; the CPU runs them at once).

    An NPU, like a GPU, runs kernels asynchronously and reports a kernel's error at the next
    synchronisation: the tested run of an entry ends with one, so that the error is that
    entry's finding, not a fault when its outputs are read, or one in the next entry.
    """
    kind, _, index = device.partition(":")
    if kind in (NPU, CUDA):
        getattr(import_torch(), kind).synchronize(int(index) if index else None)


def device_name(kind: str, device_id: int) -> str:
    """`npu:3`, `cuda:0`; `cpu` and `recorded` have no ids."""
    return f"{kind}:{device_id}" if kind in (NPU, CUDA) else kind


def ids_for(text: str | None, workers: int) -> list[int]:
    """The device ids of a run of `workers` processes: those named, or 0..workers-1 for `auto`."""
    if (text or AUTO).strip() == AUTO:
        return list(range(max(1, workers)))
    ids = parse_ids(text)
    if not ids:
        raise DeviceError(f"--msprobe-devices names no id: {text!r}")
    if len(ids) < workers:
        # Not shared: two workers on one NPU compete for its memory and streams and
        # the run reads as if each had its own; a user who asks for 8 ids wants 8 devices.
        raise DeviceError(
            f"{workers} xdist workers but {len(ids)} device ids ({text}): each worker needs "
            f"its own device; run with -n {len(ids)} or name {workers} ids"
        )
    return ids


def device_count(kind: str, frameworks: Iterable[str] = ("pytorch",)) -> int | None:
    """How many devices of `kind` torch sees (None where ids mean nothing, or torch has no say)."""
    if kind == NPU and not _torch_and_mindspore(frameworks)[0]:
        return None  # MindSpore alone: it says so itself when it binds
    if kind == NPU:
        import_torch_npu()
        return import_torch().npu.device_count()
    if kind == CUDA:
        return import_torch().cuda.device_count()
    return None


def check_ids_exist(kind: str, ids: list[int], frameworks: Iterable[str] = ("pytorch",)) -> None:
    count = device_count(kind, frameworks)
    missing = [i for i in ids if count is not None and not 0 <= i < count]
    if missing:
        seen = f"ids 0-{count - 1}" if count else "none"
        raise DeviceError(
            f"--msprobe-devices: {kind} ids {', '.join(map(str, missing))} do not exist: "
            f"torch sees {count} {kind} device(s) ({seen})"
        )


class DevicePool:
    """The device ids of a distributed run, each held by at most one worker at a time.

    A worker keeps its id until it goes down; a worker that replaces a crashed one
    gets a free id, never one another worker holds: the one released last. xdist starts
    the replacement right after its predecessor's node-down, so that is the crashed
    worker's id, even where another worker finished (freeing its own) just before.
    """

    def __init__(self, ids: list[int]):
        self.ids = list(ids)
        self.holders: dict[str, int] = {}
        self.released: list[int] = []  # freed ids, last released last

    def allocate(self, worker: str) -> int:
        if worker in self.holders:
            return self.holders[worker]
        if self.released:
            device_id = self.released.pop()
        else:
            busy = set(self.holders.values())
            never_held = [i for i in self.ids if i not in busy]
            if not never_held:
                held = ", ".join(f"{w}: {i}" for w, i in self.holders.items())
                raise DeviceError(f"no free device id for worker {worker}: every id is held ({held})")
            device_id = never_held[0]
        self.holders[worker] = device_id
        return device_id

    def release(self, worker: str) -> int | None:
        device_id = self.holders.pop(worker, None)
        if device_id is not None:
            self.released.append(device_id)
        return device_id


def cpu_cores() -> int:
    """The cores this process may run on (taskset and cgroup cpusets included)."""
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return os.cpu_count() or 1


def cpu_threads() -> int | None:
    """Intra-op threads of a process that checks entries: one, and -n N for the cores.

    A float sum on the CPU rounds differently with the thread count, so a row would
    depend on it: one thread everywhere gives a -n run the rows of a serial run, and
    any machine the rows of any other. None where the user fixed OMP_NUM_THREADS
    (their choice wins: more speed for big float64 benchmarks, same rows only at
    the same count).
    """
    return None if os.environ.get("OMP_NUM_THREADS") else 1


def threads_text(threads: int | None) -> str:
    if threads is None:
        return f"{os.environ.get('OMP_NUM_THREADS')} intra-op thread(s) (OMP_NUM_THREADS)"
    return f"{threads} intra-op thread(s) of {cpu_cores()} cores"


def limit_threads(threads: int | None) -> None:
    """Make the CPU side (the float64 benchmark, and the cpu device) use `threads` threads.

    Before torch is imported the environment does it, for OpenMP and MKL alike; once it is
    imported (by a conftest, say), torch.set_num_threads. torch is not imported for this.
    """
    if threads is None:
        return
    torch = sys.modules.get("torch")
    if torch is not None:
        torch.set_num_threads(threads)
    else:
        os.environ["OMP_NUM_THREADS"] = os.environ["MKL_NUM_THREADS"] = str(threads)


def use_huge_pages() -> None:
    """Let torch's CPU allocator back buffers of 2 MiB and up with transparent huge pages.

    A real model's entry allocates hundreds of MB in float64, and with 4 KiB pages the
    kernel's page faults cost more CPU than the arithmetic: a ResNet step ran 1.5x faster,
    rows unchanged (bench/timing/results_xdist.md). torch reads THP_MEM_ALLOC_ENABLE at its first
    allocation, so only before it is imported; the user's value wins, and a kernel with
    THP off ignores it.
    """
    if "torch" not in sys.modules:
        os.environ.setdefault("THP_MEM_ALLOC_ENABLE", "1")
