"""The torch engine: a rebuilt call placed on a side and run, forward or backward, back as numpy.

Both frameworks run on it: PyTorch for its tested side and its benchmark,
MindSpore for its benchmark (its PyTorch equivalent in float64). A framework
describes one entry as `Sides` (how the bench and the tested side compute it,
how their outputs pair) and `run_sides` is the one driver for both directions.
Imported only when an entry is checked.
"""

from __future__ import annotations

import functools
import itertools
import re
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Callable

import numpy as np
import torch

from ..dumps import apis
from ..dumps.dump import Dump, EntryName
from ..inputs.rebuild import REAL, Codec, Device, IndexBound, Rebuilder, is_tensor_spec, tree_map
from ..judging.compare import ExtraRuns
from ..judging.reductions import finite_nonnegative
from ..results import BENCH_FALLBACK
from . import BenchmarkFailed, Kept, OutputPair, Probe, Recipe, Run, RunOptions, Unsupported, index_checks
from .references import Reference, ReferenceFailed

# Random by design: two runs never agree, so there is nothing to check.
NONDETERMINISTIC = re.compile(
    r"dropout|^rand|bernoulli|multinomial|^normal_?$|poisson|^uniform_$|exponential_|geometric_"
    r"|cauchy_|log_normal_|^random_$|rrelu|^empty|new_empty|gumbel_softmax"
)
# Random only by an argument: its name, its position, its default, and whether a value draws.
RANDOM_BY_ARGUMENT: dict[str, tuple[str, int, Any, Callable[[Any], bool]]] = {
    "scaled_dot_product_attention": ("dropout_p", 4, 0.0, bool),  # BERT's attention dropout in training
    "fractional_max_pool2d": ("_random_samples", 5, None, lambda samples: samples is None),
    "fractional_max_pool3d": ("_random_samples", 5, None, lambda samples: samples is None),
}
LOW_PRECISION = (torch.float16, torch.bfloat16)
DRAWN_IN_FLOAT32 = (torch.float32, *LOW_PRECISION)
# By the names of apis.TORCH_DTYPES: a dtype named by a dump is looked up, never an attribute of torch.
DTYPES = {name: vars(torch)[name] for name in apis.TORCH_DTYPES if isinstance(vars(torch).get(name), torch.dtype)}


class TorchCodec:
    """Specs -> torch values (see inputs.Codec)."""

    def dtype(self, name: str) -> torch.dtype:
        return DTYPES[apis.torch_dtype_name(name)]

    def dtype_kind(self, name: str) -> str:
        dtype = self.dtype(name)
        if dtype == torch.bool:
            return "b"
        if dtype.is_complex:
            return "c"
        return "f" if dtype.is_floating_point else "i"

    def load(self, path: Path) -> torch.Tensor:
        tensor = torch.load(path, map_location="cpu", weights_only=True)
        if not isinstance(tensor, torch.Tensor):
            raise TypeError(f"holds a {type(tensor).__name__}, not a tensor")
        return tensor

    def from_array(self, array: np.ndarray, dtype: torch.dtype) -> torch.Tensor:
        array = np.asarray(array)
        if not array.flags.c_contiguous:
            array = array.copy()
        return torch.from_numpy(array).to(dtype)

    def drawn_dtype(self, dtype: torch.dtype) -> type[np.floating]:
        """float32 for float32, and for bfloat16 and float16, which torch rounds from float64 through
        float32 anyway: random floats are rounded once, into memory the tensor then takes over."""
        return np.float32 if dtype in DRAWN_IN_FLOAT32 else np.float64

    def shape_of(self, tensor: torch.Tensor) -> list[int]:
        return list(tensor.shape)

    def size(self, dims: list[int]) -> Any:
        return torch.Size(dims)

    def index_bounds(self, entry: str, args: list, kwargs: dict) -> list[IndexBound]:
        """The index arguments of the call and their valid ranges (index_checks.py)."""
        return index_checks.bounds(entry, args, kwargs)

    def index_refusal(self, entry: str, args: list, kwargs: dict) -> tuple[str, str] | None:
        """(field, why) of an index argument outside its range: the call is never made."""
        return index_checks.refusal(entry, args, kwargs)


CODEC = TorchCodec()


# -- the call ------------------------------------------------------------------


@dataclass
class Call:
    """A recorded call rebuilt: the callables and their arguments (recorded dtypes, CPU)."""

    name: EntryName
    fn: Callable | None  # the tested callable (None where the framework runs the tested side itself)
    bench_fn: Callable
    args: list
    kwargs: dict
    output_specs: list
    notes: list[str] = field(default_factory=list)
    grad_flags: list[bool] = field(default_factory=list)  # per floating input: took a gradient
    autocast: torch.dtype | None = None
    draw: Any = None  # a dropout that draws a mask (dropout.Draw): judged by its share dropped
    # What the reference registry holds for the API (references.py): its masks, model, backward.
    reference: Reference | None = None

    @property
    def inplace(self) -> bool:
        api = self.name.api.rsplit(".", 1)[-1]
        return (
            (api.endswith("_") and not api.endswith("__"))
            or api.startswith("__i")
            or self.kwargs.get("inplace") is True
        )


def forward_body(dump: Dump, name: EntryName) -> dict:
    """The forward entry a call is rebuilt from (a backward entry records no inputs)."""
    forward = dump.entries.get(f"{name.prefix}.forward")
    if forward is None:
        raise Unsupported(f"no forward entry {name.prefix}.forward in the dump to rebuild the call from")
    return forward


def flat_specs(specs: Any) -> list:
    """Output specs in order, nested lists flattened (spec dicts and None are leaves)."""
    if isinstance(specs, list):
        return [leaf for item in specs for leaf in flat_specs(item)]
    return [specs]


def input_tensor_specs(body: dict) -> list:
    """The tensor specs of a forward entry's inputs, in argument order (kwargs after args)."""
    specs = flat_specs(body.get("input_args", [])) + flat_specs(list(body.get("input_kwargs", {}).values()))
    return [spec for spec in specs if is_tensor_spec(spec)]


def tensors(*trees: Any) -> list[torch.Tensor]:
    found: list[torch.Tensor] = []
    for tree in trees:
        tree_map(lambda v: found.append(v) if isinstance(v, torch.Tensor) else None, tree)
    return found


def floating(*trees: Any) -> list[torch.Tensor]:
    return [t for t in tensors(*trees) if t.is_floating_point()]


def recorded_values(codec: Codec, dump: Dump, entry: str, specs: list, key: str) -> list:
    """The values a tensor dump recorded, loaded from its files (None stays None)."""
    rebuilder = Rebuilder(codec, entry, dump.tensor_dir, REAL, 0)
    return [None if spec is None else rebuilder.value(spec, f"{key}[{i}]") for i, spec in enumerate(specs)]


def in_fp32(call: Call) -> Call:
    """The call with its fp16/bf16 inputs in fp32 and no autocast: the fp32 probe's call."""

    def widen(value: Any) -> Any:
        return value.float() if isinstance(value, torch.Tensor) and value.dtype in LOW_PRECISION else value

    return replace(call, args=tree_map(widen, call.args), kwargs=tree_map(widen, call.kwargs), autocast=None)


def round_like(value: Any, recorded: Any) -> Any:
    """A probe's output back in the dtype of the output it stands for."""
    if isinstance(value, torch.Tensor) and isinstance(recorded, torch.Tensor) and value.is_floating_point():
        return value.to(recorded.dtype) if recorded.is_floating_point() else value
    return value


# -- the two sides -------------------------------------------------------------


@dataclass
class Side:
    """How one side places its tensors and which callable it runs: tested (the device, the
    recorded dtypes) or bench (the CPU, the reference callable, every floating tensor in float64)."""

    device: str
    floating: torch.dtype | None = None  # every floating tensor in this dtype; None keeps the recorded one
    # Floating inputs rounded to this dtype first, as autocast does: what the kernel really took.
    autocast: torch.dtype | None = None
    reference: bool = False  # run the bench callable (for torch_npu ops, the CPU reference)
    transform: Callable[[torch.Tensor], torch.Tensor] | None = None  # on every floating tensor placed (extra runs)
    grad_transform: Callable[[torch.Tensor], torch.Tensor] | None = None  # then on the grad_outputs alone

    def place(self, value: Any) -> Any:
        if isinstance(value, Device):
            return torch.device(self.device)
        if not isinstance(value, torch.Tensor):
            return value
        if not value.is_floating_point():
            return value.detach().to(device=self.device, copy=True)
        if self.autocast is not None:
            value = value.detach().to(self.autocast)
        placed = value.detach().to(device=self.device, dtype=self.floating or value.dtype, copy=True)
        return placed if self.transform is None else self.transform(placed)

    def place_grad(self, value: Any) -> Any:
        placed = self.place(value)
        return (
            placed
            if self.grad_transform is None or not isinstance(placed, torch.Tensor)
            else self.grad_transform(placed)
        )


def tested_side(device: str, call: Call) -> Side:
    return Side(device, None, call.autocast)


def bench_sides(call: Call) -> Sequence[Side]:
    """float64 first; float32 where the API has no float64 kernel."""
    return Side("cpu", torch.float64, call.autocast, True), Side("cpu", torch.float32, call.autocast, True)


def low_side(call: Call) -> Side:
    """The reference on the CPU in the tested dtypes: what PyTorch's own kernel rounds there."""
    return Side("cpu", None, call.autocast, True)


def call_on(side: Side, call: Call, grad: bool = False) -> tuple[Any, list[torch.Tensor]]:
    """(output, floating input tensors in argument order) of the call placed on one side."""
    args = tree_map(side.place, call.args)
    kwargs = tree_map(side.place, call.kwargs)
    leaves = floating(args, kwargs)
    if grad:
        # Only what took a gradient in the training step (running stats of
        # batch_norm, say, did not and cannot).
        wanted = call.grad_flags[: len(leaves)] + [True] * (len(leaves) - len(call.grad_flags))
        for leaf, grad_wanted in zip(leaves, wanted):
            leaf.requires_grad_(grad_wanted)
    if grad and call.inplace:
        # An in-place op may not write into a leaf that requires grad.
        args, kwargs = tree_map(_clone_tensor, args), tree_map(_clone_tensor, kwargs)
    fn = call.bench_fn if side.reference else call.fn
    if fn is None:
        raise Unsupported(f"{call.name.full}: no tested callable on {side.device}")
    with torch.set_grad_enabled(grad):
        return fn(*args, **kwargs), leaves


def _clone_tensor(value: Any) -> Any:
    return value.clone() if isinstance(value, torch.Tensor) else value


def run_bench(compute: Callable[[Side], list], call: Call) -> tuple[list, Side, str]:
    """(outputs, side, note) of the first bench side that runs; the note says when it is not float64."""
    errors: list[str] = []
    failed: ReferenceFailed | None = None
    for side in bench_sides(call):
        try:
            return (
                compute(side),
                side,
                (
                    ""
                    if side.floating == torch.float64
                    else f"{BENCH_FALLBACK} {side.floating}: float64 raised {errors[0]}"
                ),
            )
        except Unsupported:
            raise
        except Exception as exc:  # noqa: BLE001 - any failure of the bench is reported
            errors.append(f"{type(exc).__name__}: {first_line(exc)}")
            failed = failed or (exc if isinstance(exc, ReferenceFailed) else None)
    if failed is not None:
        raise failed  # a user's reference: its error row names it, whatever float32 did
    raise BenchmarkFailed(f"the benchmark cannot run on CPU: {errors[-1]}")


def first_line(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return text[0][:300] if text else ""


def forward(side: Side, call: Call) -> list:
    """The call's outputs on one side, flattened."""
    return flat_outputs(call_on(side, call)[0])


def gradients(side: Side, call: Call, grad_outputs: list, watch: Callable[[list, list], None] | None = None) -> list:
    """Gradients of every floating input tensor, in argument order (None where unused).

    `watch(outputs, leaves)` is called once the graph stands, before the backward
    runs: the place to hook its nodes (`watch_graph`)."""
    out, leaves = call_on(side, call, grad=True)
    outs = [o for o in flat_outputs(out) if isinstance(o, torch.Tensor) and o.requires_grad]
    if not outs:
        raise Unsupported("the forward outputs take no grad")
    grads = [side.place_grad(g) if isinstance(g, torch.Tensor) else None for g in flat_outputs(grad_outputs)]
    chosen = [(o, g) for o, g in zip(outs, grads) if g is not None]
    if not chosen:
        raise Unsupported("the backward entry records no grad_output for a differentiable output")
    for i, (o, g) in enumerate(chosen):
        if o.shape != g.shape:
            raise Unsupported(f"grad_output {i} has shape {list(g.shape)}, its output {list(o.shape)}")
    wanted = [leaf for leaf in leaves if leaf.requires_grad]
    if watch is not None:
        watch([o for o, _ in chosen], leaves)
    if any(o.is_complex() for o, _ in chosen):  # a complex loss has no implicit grad
        found = iter(
            torch.autograd.grad([o for o, _ in chosen], wanted, [g.to(o.dtype) for o, g in chosen], allow_unused=True)
        )
    else:
        loss = sum(_Fed.apply(o, g.to(o.dtype)) for o, g in chosen)
        found = iter(torch.autograd.grad(loss, wanted, allow_unused=True))
    return [next(found) if leaf.requires_grad else None for leaf in leaves]


class _Fed(torch.autograd.Function):
    """A zero whose backward hands `grad` to `output` as it is: a scalar to call backward on, as
    if with grad_outputs. autograd.grad(..., grad_outputs=) imports sympy on first use (0.25-1.3 s
    a process); sum(output * grad), whose gradient is grad too, costs a product and its backward
    the size of the output."""

    @staticmethod
    def forward(ctx: Any, output: torch.Tensor, grad: torch.Tensor) -> torch.Tensor:
        ctx.save_for_backward(grad)
        return output.new_zeros(())

    @staticmethod
    def backward(ctx: Any, _: torch.Tensor) -> tuple[torch.Tensor, None]:
        return ctx.saved_tensors[0], None


@dataclass(frozen=True)
class NodeGradient:
    """The gradient arriving at one input of one node of a call's backward graph."""

    node: str  # "NllLossBackward0"
    slot: int  # which of the node's inputs
    value: torch.Tensor
    inputs: frozenset[int]  # the floating inputs of the call (argument order) it flows on to

    def describe(self) -> str:
        return f"{self.node} (its input {self.slot})"


def watch_graph(outputs: list, leaves: list, shapes: set[tuple[int, ...]], found: list[NodeGradient]) -> None:
    """Hook every node below `outputs` so that the backward appends to `found` each gradient it
    passes on whose shape is in `shapes` (msprobe records some APIs' gradients at such nodes)."""
    leaf_index = {id(leaf): i for i, leaf in enumerate(leaves)}
    reached: dict[int, frozenset[int]] = {}

    def reach(fn: Any) -> frozenset[int]:
        if fn is None:
            return frozenset()
        if id(fn) not in reached:
            variable = getattr(fn, "variable", None)  # an AccumulateGrad: a leaf
            if variable is not None:
                reached[id(fn)] = frozenset({leaf_index[id(variable)]} if id(variable) in leaf_index else ())
            else:
                reached[id(fn)] = frozenset().union(*(reach(f) for f, _ in fn.next_functions))
        return reached[id(fn)]

    def hook_for(fn: Any) -> Callable[[tuple, tuple], None]:
        targets = [reach(f) for f, _ in fn.next_functions]

        def hook(grad_inputs: tuple, grad_outputs: tuple) -> None:
            for slot, grad in enumerate(grad_inputs):
                if isinstance(grad, torch.Tensor) and tuple(grad.shape) in shapes:
                    found.append(NodeGradient(fn.name(), slot, grad.detach(), targets[slot]))

        return hook

    stack, seen = [o.grad_fn for o in outputs if o.grad_fn is not None], set()
    while stack:
        fn = stack.pop()
        if id(fn) in seen or getattr(fn, "variable", None) is not None:
            continue
        seen.add(id(fn))
        fn.register_hook(hook_for(fn))
        stack.extend(f for f, _ in fn.next_functions if f is not None)


# -- outputs -------------------------------------------------------------------


def flat_outputs(out: Any) -> list:
    """Outputs in order: tuples (named ones too) and lists flattened."""
    if isinstance(out, (tuple, list)) and not isinstance(out, torch.Size):
        return [leaf for item in out for leaf in flat_outputs(item)]
    return [out]


def to_array(value: Any) -> tuple[np.ndarray, str, list[int]] | None:
    """(array, dtype name, shape) of one output; None for outputs not compared."""
    if isinstance(value, torch.Tensor):
        t = value.detach().cpu()
        if t.is_floating_point():
            array = t.to(torch.float64).numpy()
        elif t.is_complex():
            array = t.to(torch.complex128).numpy()
        else:
            array = t.numpy()
        return array, str(value.dtype), list(value.shape)
    if isinstance(value, torch.Size):
        return np.asarray(list(value), dtype=np.int64), "torch.Size", [len(value)]
    if isinstance(value, bool):
        return np.asarray(value), "bool", []
    if isinstance(value, int):
        return np.asarray(value, dtype=np.int64), "int", []
    if isinstance(value, float):
        return np.asarray(value, dtype=np.float64), "float", []
    return None


def pairs_of(tested: Sequence[Any], bench: Sequence[Any]) -> list[OutputPair]:
    pairs = []
    for index, (t, b) in enumerate(zip(tested, bench)):
        if t is None and b is None:
            continue
        t_arr, b_arr = to_array(t), to_array(b)
        if t_arr is None or b_arr is None:
            what = type(t if t_arr is None else b).__name__
            pairs.append(OutputPair(index, skip=f"output of type {what} is not compared"))
            continue
        pairs.append(OutputPair(index, t_arr[0], b_arr[0], t_arr[1], b_arr[1], t_arr[2]))
    if len(tested) != len(bench):
        pairs.append(OutputPair(len(pairs), skip=f"the tested side gave {len(tested)} outputs, the bench {len(bench)}"))
    return pairs


# -- gradients recorded at other places ----------------------------------------


def gradient_pairs(
    matched: dict[int, Any],
    bench: list,
    unfitting: str = "",
    elsewhere: dict[int, tuple[Any, str]] | None = None,
    unjudged: dict[int, str] | None = None,
) -> list[OutputPair]:
    """The matched gradients against the bench's, and, when `unfitting` says what msprobe
    recorded that fits no input, a SKIP for each input left without one. `elsewhere` holds,
    by input, a bench value taken at another node of the graph and what to say about it;
    `unjudged`, by input, why a gradient found elsewhere in the dump was not judged as its."""
    shapes = shapes_of(bench)
    elsewhere = elsewhere or {}
    unjudged = unjudged or {}
    pairs = []
    for index in sorted(matched):
        bench_value, note = elsewhere.get(index, (bench[index], ""))
        pair = pairs_of([matched[index]], [bench_value])[0]
        pair.index = index
        pair.note = note
        pairs.append(pair)
    if unfitting:
        for index in (i for i, s in enumerate(shapes) if s is not None and i not in matched):
            why = f"no recorded gradient fits this input's gradient {shapes[index]}: msprobe recorded {unfitting}"
            if index in unjudged:
                why += f"; {unjudged[index]}"
            pairs.append(OutputPair(index, skip=why))
    return sorted(pairs, key=lambda p: p.index)


def shapes_of(values: list) -> list[list[int] | None]:
    return [None if v is None else list(v.shape) for v in values]


def input_of(position: int, shape: list, shapes: list, taken: dict) -> int | None:
    """The input a gradient recorded at `position` with `shape` belongs to: the input at
    that position when the shape agrees, else the position-th of the inputs that take a gradient
    (msprobe records batch_norm's as input, weight, bias: its running statistics take none), else
    the one free input of that shape."""
    if position < len(shapes) and shapes[position] == shape and position not in taken:
        return position
    taking = [i for i, s in enumerate(shapes) if s is not None]
    if position < len(taking) and shapes[taking[position]] == shape and taking[position] not in taken:
        return taking[position]
    candidates = [i for i, s in enumerate(shapes) if s == shape and i not in taken]
    return candidates[0] if len(candidates) == 1 else None


# -- the driver ----------------------------------------------------------------


def _as_compared(tested: list, bench: list) -> tuple[list, list]:
    return tested, bench


@dataclass
class Sides:
    """One entry as a framework describes it to `run_sides`: both computations and their pairing."""

    bench: Callable[[Side], list]  # the bench's outputs (backward: input gradients) on a CPU side
    tested: Callable[[], list]  # the tested outputs: run on the device, or read from the dump
    pair: Callable[[list, list], list[OutputPair]]  # (tested, bench) -> what the standard judges
    notes: list[str] = field(default_factory=list)
    recorded: bool = False  # tested values read from the dump: failing to read them is a SKIP, not a finding
    grad_outputs: list | None = None  # backward: the gradients fed to the outputs
    # (tested, bench) as they were compared, tested in the order of the bench's, for the error data.
    compared: Callable[[list, list], tuple[list, list]] = _as_compared
    # The tested side again with its fp16/bf16 inputs in fp32, its outputs in the bench's order.
    probe: Callable[[], list] | None = None
    # (probe's outputs, bench) -> pairs: by index, less what the run leaves out of the comparison
    # (an NPU op's padded rows beyond group_list: registered.left_out).
    probe_pair: Callable[[list, list], list[OutputPair]] = pairs_of
    recipe: Recipe | None = None  # how a standalone script rebuilds the call
    # For the standard's extra runs: the magnitude of the terms of each output on a bench side (the
    # bench on |inputs| for sums and products, the API's formula), and whether the spread of the
    # bench under perturbed inputs says anything (not for sums and products: the magnitude does).
    magnitude: Callable[[Side], list] | None = None
    # A lower bound of magnitude, cheaper (a contraction's |A||B| in float32: magnitudes.py).
    lower_magnitude: Callable[[Side], list] | None = None
    # The same two, one output's alone where the API computes it so ((side, index) -> the outputs,
    # None but at index; a conv's backward kernel takes a mask): asked once per output, not per entry.
    magnitude_of: Callable[[Side, int], list] | None = None
    lower_magnitude_of: Callable[[Side, int], list] | None = None
    # A lower bound again, of a part of the terms (a conv's gradient over a quarter of the channels
    # or samples): cheaper still, asked first (magnitudes.py).
    sampled_magnitude_of: Callable[[Side, int], list] | None = None
    spread: bool = True
    # (output index, its size) -> how many terms one element sums at most, where the API says (magnitudes.terms_of).
    terms: Callable[[int, int], int | None] | None = None
    # What a correct kernel's roundings in a low dtype move each output by (magnitudes.structural).
    structural: Callable[[Side], list] | None = None
    # Another correct kernel's call, run on the bench's side, and its description (compare.ExtraRuns).
    alternative: Call | None = None
    alternative_kernel: str = ""
    # The forward of elementwise math of one input: a correct library's error in ULP (compare.ExtraRuns).
    library_ulps: float | None = None
    # The bench as the pairs compare it, for the extra runs: where a gradient was judged at a
    # node of the graph, that node's value (by default the bench itself).
    compared_bench: Callable[[Side], list] | None = None

    def compared_run(self, side: Side) -> list:
        return (self.compared_bench or self.bench)(side)


def run_sides(call: Call, sides: Sides, options: RunOptions) -> Run:
    """The bench, then the tested side; an exception of the tested run is a finding."""
    bench, side, note = run_bench(sides.bench, call)
    run = Run([], [*sides.notes, *([note] if note else [])])
    tested = None
    if sides.recorded:
        tested = sides.tested()
    else:
        try:
            tested = sides.tested()
        except Unsupported:
            raise
        except Exception as exc:  # noqa: BLE001 - a device that raises is a finding
            run.tested_error = f"{type(exc).__name__}: {first_line(exc)}"
    compared_tested, compared_bench = (None, bench) if tested is None else sides.compared(tested, bench)
    # Gradients msprobe took inside the API's graph are judged against the float64 gradient at
    # that node of the graph, not the input's: a rerun of the call (a script, the probe) has no such value.
    at_nodes = frozenset(i for i, (k, b) in enumerate(zip(compared_bench, bench)) if k is not b)
    if options.keep:
        grads = None if sides.grad_outputs is None else flat_outputs(sides.grad_outputs)
        inputs = {"args": call.args, "kwargs": call.kwargs}
        run.kept = Kept(inputs, compared_tested, compared_bench, grads, sides.recipe, at_nodes)
    if tested is not None:
        run.pairs = sides.pair(tested, bench)
        # The extra runs against the bench as it was compared (a node's value where judged at a node).
        extra = ExtraBenchRuns(call, sides, side, compared_bench)
        for pair in run.pairs:
            if not pair.skip:
                pair.extra = extra.for_output(pair.index)
        if run.kept is not None:
            run.kept.extra = extra
        if options.probe and sides.probe is not None:
            assert compared_tested is not None
            run.probe = probe_of(
                call, sides, sides.probe, compared_tested, (bench, extra), run.pairs, at_nodes, options
            )
            run.low_precision = call.autocast is not None or any(
                t.dtype in LOW_PRECISION for t in floating(call.args, call.kwargs)
            )
    return run


def probe_of(
    call: Call,
    sides: Sides,
    rerun: Callable[[], list],
    recorded: list,
    benched: tuple[list, ExtraBenchRuns],
    pairs: list[OutputPair],
    at_nodes: frozenset[int],
    options: RunOptions,
) -> Probe:
    """The fp32 probe, to run later: the tested side again with its fp16/bf16 inputs in fp32 and no
    autocast, its outputs rounded back to the recorded dtypes and paired with the bench's as the
    run paired the tested ones (by index), each with the standard's extra runs of that output.

    An autocast entry's bench took its inputs rounded to the autocast dtype, as the kernel did; run
    in fp32 the call takes them as recorded, so its bench (and extra runs) are the bench's again
    without that rounding. A gradient judged at a node of the graph is not probed (`at_nodes`)."""
    compared = {pair.index for pair in pairs if not pair.skip and pair.index not in at_nodes}

    def probe_pairs() -> list[OutputPair]:
        bench, extra = benched
        if call.autocast is not None:
            plain = replace(call, autocast=None)
            bench, side, _ = run_bench(sides.bench, plain)
            extra = ExtraBenchRuns(plain, sides, side, bench)
        rounded = [round_like(value, like) for value, like in zip(rerun(), recorded)]
        found = [pair for pair in sides.probe_pair(rounded, bench) if pair.index in compared]
        for pair in found:
            if not pair.skip:
                pair.extra = extra.for_output(pair.index)
        return found

    return Probe(options.probe_device, probe_pairs, at_nodes)


def absolute(side: Side) -> Side:
    """The side with every floating tensor (inputs and grad_outputs) made |x|: a sum's or a
    product's benchmark then gives the magnitude of the terms it adds (|A||B|, sum |x|)."""
    return replace(side, transform=torch.Tensor.abs_)  # in place: `place` hands over a fresh copy


def perturbed(side: Side, relative: float, seed: int) -> Side:
    """The side with every floating tensor multiplied by 1 + relative x (+-1 at random)."""
    generator = torch.Generator().manual_seed(seed)

    def transform(t: torch.Tensor) -> torch.Tensor:
        # 1 - relative + 2 relative {0, 1}: the same factors as 1 + relative (+-1), drawn in t's dtype
        # and scaled in place (the same stream as int64 draws; a third of the passes over the tensor).
        factor = torch.randint(0, 2, t.shape, generator=generator, dtype=t.dtype)
        return factor.mul_(2 * relative).add_(1 - relative).mul_(t)

    return replace(side, transform=transform)


SPREAD_SEEDS = 3  # one seed needs 10x the constant to pass every correct output (kernel_bounds.md)
LOW_THREADS = (1, 2, 4, 8)
# Where the CPU has bf16/fp16 units (AMX, AVX512-BF16), PyTorch runs oneDNN's kernels in those dtypes;
# elsewhere ATen's own, which round otherwise (a conv's weight gradient summed sample by sample in
# bf16). A dump recorded on one CPU is judged on another: both. (torch.backends.mkldnn.enabled)
LOW_ONEDNN = (True, False)


class ExtraBenchRuns:
    """The extra benchmark runs of one entry, each run once, on the first output's ask.

    On the side the benchmark ran on; a run that raises answers None (the standard then
    judges without it)."""

    def __init__(self, call: Call, sides: Sides, side: Side, bench: list):
        self.call, self.sides, self.side, self.bench = call, sides, side, bench
        self.runs: dict[tuple, list | None] = {}

    def for_output(self, index: int) -> ExtraRuns:
        return ExtraRuns(
            magnitude=lambda: self.magnitude(index),
            spread=lambda relative: self.spread(index, relative),
            low=lambda: self.low(index),
            lower_magnitude=lambda: self.lower_magnitude(index),
            sampled_magnitude=lambda: self.sampled_magnitude(index),
            spread_once=lambda relative: self.spread(index, relative, 1),
            terms=lambda: self.terms(index),
            structural=lambda: self.run_of("structural", self.sides.structural, None, index),
            alternative=lambda: self.alternative(index),
            alternative_kernel=self.sides.alternative_kernel,
            library_ulps=self.sides.library_ulps,
        )

    def alternative(self, index: int) -> np.ndarray | None:
        if self.sides.alternative is None:
            return None
        return self.output(("alternative",), functools.partial(forward, self.side, self.sides.alternative), index)

    def terms(self, index: int) -> int | None:
        bench = self.bench[index] if index < len(self.bench) else None
        if self.sides.terms is None or not isinstance(bench, torch.Tensor):
            return None
        return self.sides.terms(index, bench.numel())

    def magnitude(self, index: int) -> np.ndarray | None:
        return self.run_of("magnitude", self.sides.magnitude, self.sides.magnitude_of, index)

    def lower_magnitude(self, index: int) -> np.ndarray | None:
        return self.lower_bound("lower magnitude", self.sides.lower_magnitude, self.sides.lower_magnitude_of, index)

    def sampled_magnitude(self, index: int) -> np.ndarray | None:
        """The lower bound of a part of the terms."""
        return self.lower_bound("sampled magnitude", None, self.sides.sampled_magnitude_of, index)

    def lower_bound(
        self,
        name: str,
        every: Callable[[Side], list] | None,
        one: Callable[[Side, int], list] | None,
        index: int,
    ) -> np.ndarray | None:
        """A cheaper lower bound of the magnitude, only beside a float64 benchmark (a float32 one is
        the bound's own precision) and where it is finite at every element (float32 overflows sooner)."""
        if self.side.floating != torch.float64:
            return None
        found = self.run_of(name, every, one, index)
        return found if found is not None and finite_nonnegative(found) else None

    def run_of(
        self,
        name: str,
        every: Callable[[Side], list] | None,
        one: Callable[[Side, int], list] | None,
        index: int,
    ) -> np.ndarray | None:
        """Output `index` of a run: of that output alone where the sides compute it so, else of the
        run of every output (once an entry)."""
        if one is not None:
            return self.output((name, index), functools.partial(one, self.side, index), index, magnitude=True)
        if every is None:
            return None
        return self.output((name,), functools.partial(every, self.side), index, magnitude=True)

    def spread(self, index: int, relative: float, seeds: int = SPREAD_SEEDS) -> np.ndarray | None:
        bench = self.output(("bench",), lambda: self.bench, index)
        if not self.sides.spread or bench is None:
            return None
        widest: np.ndarray | None = None
        for seed in range(seeds):
            side = perturbed(self.side, relative, seed)
            run = self.output(("spread", relative, seed), functools.partial(self.sides.compared_run, side), index)
            if run is None or run.shape != bench.shape:
                return None
            gap = np.abs(run - bench)
            widest = gap if widest is None else np.maximum(widest, gap)
        return widest

    def low(self, index: int) -> np.ndarray | None:
        """The widest gap over the thread counts machines commonly run and the kernels their CPUs
        get: PyTorch's low-precision CPU kernels sum per-thread partials in that precision
        (layer_norm's weight gradient), so what they round depends on the thread count of the
        machine that ran them, and on whether its CPU runs oneDNN's kernels (LOW_ONEDNN)."""
        bench = self.output(("bench",), lambda: self.bench, index)
        widest: np.ndarray | None = None
        for threads, onednn in itertools.product(LOW_THREADS, LOW_ONEDNN):
            run = self.output(("low", threads, onednn), functools.partial(self.low_run, threads, onednn), index)
            if run is None or bench is None or run.shape != bench.shape:
                return None
            gap = np.abs(run - bench)
            widest = gap if widest is None else np.maximum(widest, gap)
        return widest

    def low_run(self, threads: int, onednn: bool) -> list:
        threads_before, onednn_before = torch.get_num_threads(), torch.backends.mkldnn.enabled
        torch.set_num_threads(threads)
        torch.backends.mkldnn.enabled = onednn  # type: ignore[assignment]  # a property of the module
        try:
            return self.sides.compared_run(low_side(self.call))
        finally:
            torch.set_num_threads(threads_before)
            torch.backends.mkldnn.enabled = onednn_before

    def output(self, key: tuple, compute: Callable[[], list], index: int, magnitude: bool = False) -> np.ndarray | None:
        """Output `index` of a run (once an entry) in float64; a magnitude in float32 stays float32
        (a lower bound's own precision: half the memory the standard's looks read)."""
        if key not in self.runs:
            try:
                self.runs[key] = compute()
            except ReferenceFailed:
                if key[0] == "magnitude":
                    raise  # the user's magnitude model that fails: its error row names it
                self.runs[key] = None  # the reference in another dtype (the low run): an extra
            except Exception:  # noqa: BLE001 - a probe is an extra: the standard judges without it
                self.runs[key] = None
        outputs = self.runs[key]
        if outputs is None or index >= len(outputs):
            return None
        value = outputs[index]
        if magnitude and isinstance(value, torch.Tensor) and value.dtype == torch.float32:
            return value.detach().cpu().numpy()
        found = to_array(value)
        return None if found is None else np.asarray(found[0], dtype=np.float64)
