"""The bare work of a dump's `Functional.conv2d` backward entries: what a check cannot do without.

For each backward entry, in dump order: random float32 inputs, weight, bias and grad_output of the
recorded shapes, drawn in place (uniform in the recorded [Min, Max]); the convolution forward and
backward in float32; the same in float64 (the float32 tensors converted); one thread, torch's
huge pages on, as the plugin runs it. Nothing else: no comparison, no report, no pytest. It prints
one JSON line: the entries and the CPU seconds of each part of the work (inputs, float32, float64).

    python -m bench.timing.conv_bare DUMP                  # every conv2d backward entry
    python -m bench.timing.conv_bare DUMP --backward-alone # float64: the backward kernel alone
    python -m bench.timing.conv_bare DUMP --working-set    # the largest entry's float64 working set

`--backward-alone`: the float64 part is the gradients from aten's convolution_backward alone, without
the forward autograd runs first, as the plugin's benchmark of a conv's backward entry computes them
(pytest_msprobe/frameworks/conv.py): the same work as the plugin's, so the plugin's own cost shows.

`--working-set` runs only the float64 forward and backward of each entry, its inputs drawn in
float64, and prints one JSON line on the entry that raised the RSS the most: by how much (its
float64 working set: the tensors and the kernels' workspace), the bytes of its float64 tensors
(inputs, output, grad_output, input gradients) and the process's RSS before it.
"""

from __future__ import annotations

import os

# As the plugin sets them in a process that checks entries (devices.limit_threads, use_huge_pages).
os.environ.setdefault("OMP_NUM_THREADS", "1")
os.environ.setdefault("MKL_NUM_THREADS", "1")
os.environ.setdefault("THP_MEM_ALLOC_ENABLE", "1")

import argparse
import gc
import json
import math
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import torch

CONV = "Functional.conv2d."
PARAMETERS = ("input", "weight", "bias", "stride", "padding", "dilation", "groups")


@dataclass
class Entry:
    name: str
    tensors: dict[str, dict]  # input, weight, bias (when given) -> spec
    grad_output: dict
    options: dict  # stride, padding, dilation, groups
    output: dict

    def float64_bytes(self) -> int:
        """The float64 tensors of the work: inputs, output, grad_output, and a gradient per input."""
        sizes = [math.prod(s["shape"]) for s in self.tensors.values()]
        return 8 * (2 * sum(sizes) + math.prod(self.output["shape"]) + math.prod(self.grad_output["shape"]))


def value(spec):
    if isinstance(spec, list):
        return [value(item) for item in spec]
    return spec["value"]


def entries(dump: Path) -> list[Entry]:
    data = json.loads(dump.read_text())["data"]
    found = []
    for name, body in data.items():
        if not (name.startswith(CONV) and name.endswith(".backward")):
            continue
        forward = data[name[: -len("backward")] + "forward"]
        given = dict(zip(PARAMETERS, forward["input_args"]))
        given.update(forward.get("input_kwargs", {}))
        tensors = {key: given[key] for key in ("input", "weight", "bias") if given.get(key) is not None}
        options = {key: value(given[key]) for key in PARAMETERS[3:] if key in given}
        found.append(Entry(name, tensors, body["input"][0], options, forward["output"][0]))
    return found


def uniform(spec: dict, dtype: torch.dtype, generator: torch.Generator) -> torch.Tensor:
    return torch.empty(spec["shape"], dtype=dtype).uniform_(spec["Min"], spec["Max"], generator=generator)


def forward_backward(entry: Entry, tensors: dict[str, torch.Tensor], grad_output: torch.Tensor) -> tuple:
    leaves = {key: t.requires_grad_() for key, t in tensors.items()}
    output = torch.nn.functional.conv2d(**leaves, **entry.options)
    # The engine itself: torch.autograd.grad's argument checks import sympy (a second a process).
    return torch.autograd.graph._engine_run_backward(
        (output,), (grad_output,), False, False, tuple(leaves.values()), True, False
    )


def backward_alone(entry: Entry, tensors: dict[str, torch.Tensor], grad_output: torch.Tensor) -> tuple:
    x, w, bias = tensors["input"], tensors["weight"], tensors.get("bias")
    pair = [entry.options.get(key, default) for key, default in (("stride", 1), ("padding", 0), ("dilation", 1))]
    stride, padding, dilation = ([*v] if isinstance(v, (list, tuple)) else [v] * 2 for v in pair)
    return torch.ops.aten.convolution_backward(
        grad_output, x, w, None if bias is None else [w.shape[0]], stride, padding, dilation, False, [0, 0],
        entry.options.get("groups", 1), [True, True, bias is not None],
    )  # fmt: skip


def work(entry: Entry, generator: torch.Generator, spent: dict[str, float], alone: bool = False) -> None:
    """The entry's work; `spent` gathers its CPU seconds by part (the inputs, float32, float64)."""
    clock = time.process_time()
    inputs = {key: uniform(spec, torch.float32, generator) for key, spec in entry.tensors.items()}
    grad_output = uniform(entry.grad_output, torch.float32, generator)
    clock = lap(spent, "inputs", clock)
    forward_backward(entry, {key: t.detach() for key, t in inputs.items()}, grad_output)
    clock = lap(spent, "float32", clock)
    wide = {key: t.detach().to(torch.float64) for key, t in inputs.items()}
    (backward_alone if alone else forward_backward)(entry, wide, grad_output.to(torch.float64))
    lap(spent, "float64", clock)


def lap(spent: dict[str, float], part: str, since: float) -> float:
    now = time.process_time()
    spent[part] = spent.get(part, 0.0) + now - since
    return now


def status(field: str) -> int:
    """A size line of /proc/self/status (VmRSS, VmHWM), in bytes."""
    with open("/proc/self/status") as lines:
        for line in lines:
            if line.startswith(field + ":"):
                return int(line.split()[1]) * 1024
    raise KeyError(field)


def working_set(found: list[Entry], generator: torch.Generator) -> dict:
    """The entry whose float64 forward and backward raise the RSS the most, alone: each entry's
    peak (VmHWM, reset by /proc/self/clear_refs before it) above the RSS before it."""
    largest: dict = {}
    for entry in found:
        gc.collect()
        with open("/proc/self/clear_refs", "w") as refs:
            refs.write("5")  # the peak RSS starts again from the RSS now
        before = status("VmRSS")
        inputs = {key: uniform(spec, torch.float64, generator) for key, spec in entry.tensors.items()}
        forward_backward(entry, inputs, uniform(entry.grad_output, torch.float64, generator))
        grown = status("VmHWM") - before
        if grown > largest.get("working_set", -1):
            largest = {
                "entry": entry.name,
                "working_set": grown,
                "float64_bytes": entry.float64_bytes(),
                "rss_before": before,
                "largest_float64_bytes": max(e.float64_bytes() for e in found),
            }
    return largest


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("dump", type=Path)
    parser.add_argument("--working-set", action="store_true")
    parser.add_argument("--backward-alone", action="store_true")
    args = parser.parse_args(argv)
    torch.set_num_threads(1)
    generator = torch.Generator().manual_seed(1234)
    found = entries(args.dump)
    if args.working_set:
        print(json.dumps(working_set(found, generator)))
        return 0
    spent: dict[str, float] = {}
    for entry in found:
        work(entry, generator, spent, args.backward_alone)
    print(json.dumps({"entries": len(found), "cpu": spent}))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
