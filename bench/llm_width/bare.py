"""The bare work of an LLM-width dump (issue 32): what a check of each entry cannot do without.

For every API entry of a dump, in dump order: random inputs of the recorded shapes and dtypes (floats
uniform in the recorded [Min, Max], integers in [Min, Max], drawn in place), the API run by torch in
the recorded dtype (the tested side) and again on float64 copies of the same inputs (the benchmark);
a forward entry runs the forward, a backward entry the forward with its floating inputs requiring grad,
then the backward (torch.autograd.grad) from a random grad_output of each output's shape. Nothing else:
no metrics, no comparison, no files, no pytest. One line per entry: wall and CPU seconds of the inputs,
the tested side and the float64 side, and the entry's peak RSS above the RSS before it (VmHWM, reset
through /proc/self/clear_refs); the sums, the sums by API, and the process's peak RSS.

    python -m bench.llm_width.bare [DUMP] [--threads 1] [--only REGEX] [--out bench/llm_width/results_bare.md]

DUMP defaults to bench/llm_width/dumps/llama7b/dump.json (make_dump.py writes it). It is read with the
plugin's own reader (pytest_msprobe.dumps.dump.read_dump), so run it with the interpreter that has the
plugin installed. One intra-op thread and torch's huge pages by default, as the plugin runs a serial
check (frameworks/devices.py: cpu_threads, use_huge_pages); --threads N for more.
"""

from __future__ import annotations

import os
import sys

if __name__ == "__main__":  # before torch is imported, as the plugin sets them
    threads_arg = sys.argv[sys.argv.index("--threads") + 1] if "--threads" in sys.argv else "1"
    os.environ.setdefault("OMP_NUM_THREADS", threads_arg)
    os.environ.setdefault("MKL_NUM_THREADS", threads_arg)
    os.environ.setdefault("THP_MEM_ALLOC_ENABLE", "1")

import argparse
import gc
import math
import platform
import re
import resource
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

from pytest_msprobe.dumps.dump import read_dump

HERE = Path(__file__).resolve().parent
DEFAULT_DUMP = HERE / "dumps" / "llama7b" / "dump.json"
DTYPES = {f"torch.{name}": getattr(torch, name) for name in ("float16", "bfloat16", "float32", "float64",
          "int8", "uint8", "int16", "int32", "int64", "bool")}  # fmt: skip


class NotRun(Exception):
    """An entry the bare work cannot run: why."""


@dataclass
class Timing:
    wall: float = 0.0
    cpu: float = 0.0

    def add(self, other: Timing) -> None:
        self.wall += other.wall
        self.cpu += other.cpu


@dataclass
class Row:
    name: str
    shapes: str = ""
    inputs: Timing = field(default_factory=Timing)
    tested: Timing = field(default_factory=Timing)
    float64: Timing = field(default_factory=Timing)
    peak_mib: float = 0.0
    hwm: int = 0  # VmHWM at the entry's end: the process's peak during it
    not_run: str = ""

    @property
    def total(self) -> Timing:
        t = Timing()
        for part in (self.inputs, self.tested, self.float64):
            t.add(part)
        return t


class Clock:
    """Wall and CPU time since the last lap."""

    def __init__(self) -> None:
        self.wall, self.cpu = time.perf_counter(), time.process_time()

    def lap(self, into: Timing) -> None:
        wall, cpu = time.perf_counter(), time.process_time()
        into.wall += wall - self.wall
        into.cpu += cpu - self.cpu
        self.wall, self.cpu = wall, cpu


def resolve(api_type: str, api: str) -> Callable:
    """The torch callable of `<Type>.<api>`."""
    owners = {"Functional": torch.nn.functional, "Torch": torch, "Tensor": torch.Tensor}
    owner: Any = owners.get(api_type)
    if owner is None:
        raise NotRun(f"API type {api_type} has no torch counterpart here")
    for part in api.split("."):
        owner = getattr(owner, part, None)
        if owner is None:
            raise NotRun(f"torch has no {api_type}.{api}")
    return owner


def is_tensor_spec(spec: Any) -> bool:
    return isinstance(spec, dict) and spec.get("type") == "torch.Tensor"


def draw(spec: dict, generator: torch.Generator) -> torch.Tensor:
    """A tensor of the spec's shape and dtype: uniform in its [Min, Max] (or normal without them)."""
    dtype = DTYPES.get(spec.get("dtype", ""))
    if dtype is None:
        raise NotRun(f"dtype {spec.get('dtype')!r} not drawn here")
    shape = spec.get("shape") or []
    low, high = spec.get("Min"), spec.get("Max")
    known = all(isinstance(v, (int, float)) and math.isfinite(v) for v in (low, high))
    if dtype == torch.bool:
        return torch.rand(shape, generator=generator) < 0.5
    if not dtype.is_floating_point:
        lo, hi = (int(low), int(high)) if known else (0, 2)
        return torch.randint(lo, hi + 1, shape, dtype=dtype, generator=generator)
    if not known or high <= low:
        return torch.randn(shape, dtype=dtype, generator=generator)
    return torch.empty(shape, dtype=dtype).uniform_(low, high, generator=generator)


def build(spec: Any, generator: torch.Generator) -> Any:
    """The value of a recorded argument: tensors drawn, lists rebuilt, scalars as written."""
    if isinstance(spec, list):
        return [build(item, generator) for item in spec]
    if spec is None:
        return None
    if is_tensor_spec(spec):
        return draw(spec, generator)
    if isinstance(spec, dict) and "type" in spec:
        kind, value = spec["type"], spec.get("value")
        if kind == "torch.dtype":
            if value not in DTYPES:
                raise NotRun(f"dtype argument {value!r}")
            return DTYPES[value]
        if kind == "slice":
            return slice(*value)
        if kind == "ellipsis":
            return ...
        if kind in ("int", "float", "bool", "str"):
            return value
        if kind in ("torch.Size", "tuple"):
            return tuple(value)
        raise NotRun(f"argument of type {kind!r} not rebuilt here")
    raise NotRun(f"argument {str(spec)[:60]!r} not rebuilt here")


def widen(value: Any) -> Any:
    """The float64 copy of an argument: floating tensors converted, float dtypes made float64."""
    if isinstance(value, torch.Tensor):
        return value.to(torch.float64) if value.is_floating_point() else value
    if isinstance(value, torch.dtype):
        return torch.float64 if value.is_floating_point else value
    if isinstance(value, list):
        return [widen(item) for item in value]
    return value


def tensors(value: Any) -> list[torch.Tensor]:
    if isinstance(value, torch.Tensor):
        return [value]
    if isinstance(value, (list, tuple)):
        return [t for item in value for t in tensors(item)]
    return []


def tensor_specs(value: Any) -> list[dict]:
    """The tensor specs of recorded arguments, in the order `tensors` finds their tensors."""
    if is_tensor_spec(value):
        return [value]
    if isinstance(value, list):
        return [s for item in value for s in tensor_specs(item)]
    return []


def shapes_text(specs: list[Any]) -> str:
    found = []
    for spec in specs:
        if isinstance(spec, list):
            found.append(shapes_text(spec))
        elif is_tensor_spec(spec):
            found.append("x".join(map(str, spec.get("shape") or [])) or "()")
    return ", ".join(s for s in found if s)


@dataclass
class Call:
    function: Callable
    in_place: bool
    grad_wanted: list[bool]  # per tensor argument: did it require grad when recorded

    def run(self, args: list, kwargs: dict, backward: bool, generator: torch.Generator) -> None:
        if not backward:
            with torch.no_grad():
                self.function(*args, **kwargs)
            return
        found = tensors([args, list(kwargs.values())])
        floating = [t for t in found if t.is_floating_point()]
        wanted = [t for t, w in zip(found, self.grad_wanted) if w and t.is_floating_point()]
        leaves = [t.requires_grad_() for t in (wanted or floating)]
        if not leaves:
            raise NotRun("no floating input to differentiate")
        if self.in_place:  # a leaf that requires grad cannot be written in place: its copy is
            args = [args[0].clone(), *args[1:]]
        outputs = [t for t in tensors(self.function(*args, **kwargs)) if t.requires_grad]
        if not outputs:
            raise NotRun("no output depends on a floating input")
        grads = [torch.randn(t.shape, dtype=t.dtype, generator=generator) for t in outputs]
        torch.autograd.grad(outputs, leaves, grads, allow_unused=True)


def work(dump_entries: dict, name: Any, generator: torch.Generator) -> Row:
    forward = dump_entries.get(f"{name.prefix}.forward")
    row = Row(name.full)
    if not isinstance(forward, dict):
        row.not_run = "no forward entry to rebuild the call from"
        return row
    specs = list(forward.get("input_args") or [])
    kwarg_specs = dict(forward.get("input_kwargs") or {})
    row.shapes = shapes_text(specs + list(kwarg_specs.values()))
    backward = name.direction == "backward"
    gc.collect()
    with open("/proc/self/clear_refs", "w") as refs:
        refs.write("5")  # the peak RSS starts again from the RSS now
    before = status("VmRSS")
    try:
        clock = Clock()
        in_place = name.api.endswith("_") and not name.api.endswith("__")
        wanted = [s.get("requires_grad") is True for s in tensor_specs(specs + list(kwarg_specs.values()))]
        call = Call(resolve(name.api_type, name.api), in_place, wanted)
        args = [build(s, generator) for s in specs]
        kwargs = {k: build(s, generator) for k, s in kwarg_specs.items()}
        clock.lap(row.inputs)
        call.run(args, kwargs, backward, generator)
        clock.lap(row.tested)
        wide_args, wide_kwargs = (
            widen([t.detach() if isinstance(t, torch.Tensor) else t for t in args]),
            {k: widen(v.detach() if isinstance(v, torch.Tensor) else v) for k, v in kwargs.items()},
        )
        call.run(wide_args, wide_kwargs, backward, generator)
        clock.lap(row.float64)
    except NotRun as why:
        row.not_run = str(why)
    except (RuntimeError, TypeError, ValueError, IndexError) as exc:
        row.not_run = f"{type(exc).__name__}: {str(exc).splitlines()[0][:120]}"
    row.hwm = status("VmHWM")
    row.peak_mib = (row.hwm - before) / 2**20
    return row


def status(field_name: str) -> int:
    """A size line of /proc/self/status (VmRSS, VmHWM), in bytes."""
    with open("/proc/self/status") as lines:
        for line in lines:
            if line.startswith(field_name + ":"):
                return int(line.split()[1]) * 1024
    raise KeyError(field_name)


def machine() -> str:
    model = platform.processor() or platform.machine()
    try:
        with open("/proc/cpuinfo") as info:
            model = next(line.split(":", 1)[1].strip() for line in info if line.startswith("model name"))
    except (OSError, StopIteration):
        pass
    return f"{model}, {os.cpu_count()} CPUs, {platform.system()} {platform.release()}"


def table(rows: list[Row]) -> list[str]:
    lines = [
        "| entry | input shapes | inputs wall / CPU s | tested (recorded dtype) wall / CPU s "
        "| float64 wall / CPU s | total wall / CPU s | peak RSS above before, MiB |",
        "|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        if r.not_run:
            lines.append(f"| {r.name} | {r.shapes} | not run: {r.not_run} | | | | |")
            continue
        cells = [f"{t.wall:.3f} / {t.cpu:.3f}" for t in (r.inputs, r.tested, r.float64, r.total)]
        lines.append(f"| {r.name} | {r.shapes} | {' | '.join(cells)} | {r.peak_mib:.0f} |")
    return lines


def sums(rows: list[Row], key: Callable[[Row], str]) -> dict[str, tuple[int, Row]]:
    found: dict[str, tuple[int, Row]] = {}
    for r in rows:
        if r.not_run:
            continue
        count, acc = found.get(key(r), (0, Row(key(r))))
        for part in ("inputs", "tested", "float64"):
            getattr(acc, part).add(getattr(r, part))
        acc.peak_mib = max(acc.peak_mib, r.peak_mib)
        found[key(r)] = (count + 1, acc)
    return found


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("dump", nargs="?", type=Path, default=DEFAULT_DUMP)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--out", type=Path, default=HERE / "results_bare.md")
    parser.add_argument("--seed", type=int, default=1234)
    parser.add_argument("--only", default="", help="a regular expression: only the entries it finds (re.search)")
    args = parser.parse_args(argv)
    torch.set_num_threads(args.threads)
    generator = torch.Generator().manual_seed(args.seed)
    dump = read_dump(args.dump)
    start = Clock()
    rows = []
    for name in dump.api_names():
        if args.only and not re.search(args.only, name.full):
            continue
        row = work(dump.entries, name, generator)
        rows.append(row)
        print(f"{row.name}: {row.total.wall:.2f}s wall {row.not_run}", file=sys.stderr, flush=True)
    whole = Timing()
    start.lap(whole)
    # clear_refs resets the kernel's high-water mark that getrusage and time -v read too: the
    # process's peak is the highest of the entries' own.
    peak = max([r.hwm for r in rows] + [resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024]) / 2**30
    ran = [r for r in rows if not r.not_run]
    total = sums(ran, lambda r: "all")["all"][1] if ran else Row("all")
    by_api = sums(ran, lambda r: r.name.rsplit(".", 2)[0] + " " + r.name.rsplit(".", 1)[1])
    command = "python -m bench.llm_width.bare " + " ".join(argv)
    out = [
        f"# Bare work of {args.dump}",
        "",
        f"`{command.strip()}` ({time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())})",
        "",
        f"Machine: {machine()}; torch {torch.__version__}; {torch.get_num_threads()} intra-op thread(s); "
        f"THP_MEM_ALLOC_ENABLE={os.environ.get('THP_MEM_ALLOC_ENABLE')}; allocator: "
        f"{os.environ.get('LD_PRELOAD') or 'glibc malloc (no LD_PRELOAD)'}.",
        f"Dump: task {dump.task}, level {dump.level}, {len(rows)} API entries ({len(ran)} run, "
        f"{len(rows) - len(ran)} not run).",
        "",
        f"**Sum over the {len(ran)} entries run: {total.total.wall:.1f} s wall, {total.total.cpu:.1f} s CPU** "
        f"(inputs {total.inputs.wall:.1f} / {total.inputs.cpu:.1f}, tested side {total.tested.wall:.1f} / "
        f"{total.tested.cpu:.1f}, float64 {total.float64.wall:.1f} / {total.float64.cpu:.1f}; wall / CPU s). "
        f"The whole loop, reading aside: {whole.wall:.1f} s wall, {whole.cpu:.1f} s CPU. "
        f"Peak RSS of the process: {peak:.2f} GiB (the highest VmHWM at an entry's end: the reset before each "
        f"entry also resets what getrusage and time -v report); the largest entry's peak above the RSS before it: "
        f"{max((r.peak_mib for r in ran), default=0):.0f} MiB.",
        "",
        "## By API and direction",
        "",
        "| API | entries | inputs wall / CPU s | tested wall / CPU s | float64 wall / CPU s "
        "| total wall / CPU s | largest peak MiB |",
        "|---|---|---|---|---|---|---|",
    ]
    for key, (count, acc) in sorted(by_api.items(), key=lambda kv: -kv[1][1].total.wall):
        cells = [f"{t.wall:.2f} / {t.cpu:.2f}" for t in (acc.inputs, acc.tested, acc.float64, acc.total)]
        out.append(f"| {key} | {count} | {' | '.join(cells)} | {acc.peak_mib:.0f} |")
    out += ["", "## Per entry", "", *table(rows)]
    text = "\n".join(out) + "\n"
    print(text)
    args.out.write_text(text)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
