"""PyTorch: an entry's API resolved, run on the device under test and as the float64 benchmark.

The tested run happens on the device under test in the recorded dtypes (or is
read from the dump when the tested side is `recorded`); the benchmark runs on
the CPU with every floating tensor in float64. Both run on the torch engine.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any, Callable

import torch

from ..dumps import apis
from ..dumps.dump import BACKWARD, DISTRIBUTED_TYPES, Dump, EntryName
from ..inputs.rebuild import REAL, Rebuilder, Undescribed, element_bound, is_tensor_spec, tree_map
from . import (
    OutputPair,
    Recipe,
    Run,
    RunOptions,
    Unsupported,
    built_in_references,
    conv,
    cpu_kernels,
    devices,
    dropout,
    linear_grads,
    output_bounds,
    registered,
)
from .borrowed_gradients import Borrowed, borrowed
from .magnitudes import with_magnitudes
from .recorded_gradients import Attribution, attribute
from .references import Reference, Registry, describe, importable
from .torch_engine import (
    CODEC,
    LOW_PRECISION,
    NONDETERMINISTIC,
    RANDOM_BY_ARGUMENT,
    Call,
    NodeGradient,
    Sides,
    flat_outputs,
    flat_specs,
    floating,
    forward,
    forward_body,
    gradient_pairs,
    gradients,
    in_fp32,
    input_tensor_specs,
    pairs_of,
    recorded_values,
    run_sides,
    tensors,
    tested_side,
    watch_graph,
)

# Casts: their dtype argument is the point of the call, and never autocast.
CASTS = frozenset(
    {
        "to",
        "type",
        "type_as",
        "float",
        "double",
        "half",
        "bfloat16",
        "int",
        "long",
        "bool",
        "char",
        "byte",
        "short",
        "cpu",
        "cuda",
        "npu",
    }
)


class PyTorch:
    """Entries of dumps written by msprobe's PyTorch PrecisionDebugger."""

    name = "pytorch"

    def run(self, dump: Dump, entry: EntryName, options: RunOptions) -> Run:
        reference = options.references.find(f"{entry.api_type}.{entry.api}")
        call = build_call(
            dump,
            entry,
            resolve(entry, options.recorded, options.device, options.references),
            REAL if options.recorded else options.mode,
            options.seed,
            reference,
        )
        output_bounds.call_outputs(call, element_bound())  # before anything the call asks is allocated
        sides = (
            backward_sides(dump, call, options) if entry.direction == BACKWARD else forward_sides(dump, call, options)
        )
        if call.draw is not None:
            sides = judged_as_dropout(sides, call.draw, entry.direction != BACKWARD)
        if options.keep:
            sides.recipe = recipe(call)
        modelled = registered.with_registered_magnitude(sides, call)
        return run_sides(call, modelled or with_magnitudes(sides, entry.api, call), options)


def recipe(call: Call) -> Recipe:
    """The call as repro.py rebuilds it: the path apis.py resolved it by (msprobe's list for its
    type, never the dump's words); an NPU op's float64 reference is not rebuilt there."""
    name = call.name
    device = None if call.reference is None else call.reference.device
    if device is not None:
        path = describe(device)
    elif registered.custom(name.api_type):
        path = "torch.ops." + ".".join((name.api_type, name.api))
    else:
        path = apis.listed(apis.PYTORCH, name.api_type, name.api).dotted
    bench = (
        ""
        if registered.fused(name) or (call.reference is not None and call.reference.forward is not None)
        else f'def bench(*args, **kwargs):\n    return resolve("{path}")(*args, **kwargs)\n'
    )
    unscripted = (
        f"{name.api} p={call.draw.p:g} draws a mask on each side, judged by the share dropped: a script "
        "comparing element by element would not reproduce the verdict"
        if call.draw is not None
        else ""
    )
    return Recipe(
        "pytorch",
        path,
        bench,
        str(call.autocast or ""),
        tuple(call.grad_flags),
        call.inplace,
        magnitude_api=name.api,
        unscripted=unscripted,
        output_functions=output_functions(call),
        api=name.api,
    )


def output_functions(call: Call) -> tuple[tuple[str, str, str], ...]:
    """The functions the run applied to a forward's tested outputs before comparing them (msprobe's
    target post-processing, the registered mask), as a script imports them again: (role, file, name),
    or (role, "", why not) where a script cannot find one again (it says so if it runs the op)."""
    reference = call.reference
    if reference is None or call.name.direction == BACKWARD:
        return ()
    given = [("target", reference.postprocess.target if reference.postprocess else None)]
    given.append(("unwritten", reference.unwritten))
    found = []
    for role, fn in given:
        if fn is None:
            continue
        try:
            found.append((role, *importable(fn)))
        except ValueError as exc:
            found.append((role, "", str(exc)))
    return tuple(found)


# -- resolving an entry --------------------------------------------------------


def resolve(
    name: EntryName, recorded: bool, device: str, references: Registry | None = None
) -> tuple[Callable | None, Callable]:
    """(tested callable, bench callable) of an entry; Unsupported says why there is none."""
    api_type, api = name.api_type, name.api
    if api_type in DISTRIBUTED_TYPES:
        raise Unsupported(f"{api_type} collective: it cannot be re-run alone, on one device")
    if NONDETERMINISTIC.search(api) and not dropout.is_dropout(api_type, api):
        raise Unsupported(f"non-deterministic API {api}: two runs never agree")
    reference = (references or built_in_references()).find(f"{api_type}.{api}")
    if api_type == "NPU":
        return resolve_npu(api, recorded, device, reference)
    if registered.custom(api_type):
        return registered.resolve_custom(name, reference, recorded)
    target = resolve_torch(api_type, api)
    bench = target if reference is None or reference.forward is None else registered.bench_of(reference, name)
    return registered.device_of(reference, name) or target, bench


def resolve_npu(
    api: str, recorded: bool, device: str, reference: Reference | None = None
) -> tuple[Callable | None, Callable]:
    """torch_npu's fused op on the NPU, its float64 CPU reference as the bench."""
    listed = apis.listed(apis.PYTORCH, "NPU", api)  # before anything else: only msprobe's APIs
    if reference is None or reference.forward is None:
        raise Unsupported(f"NPU op {api} has no CPU reference to benchmark it with")
    name = EntryName(f"NPU.{api}", "NPU", api, 0, "forward")
    bench = registered.bench_of(reference, name)
    if recorded:
        return None, bench
    tested = registered.device_of(reference, name)
    if tested is not None:
        return tested, bench
    if not device.startswith("npu"):
        raise Unsupported(
            f"NPU op {api} runs only on an NPU: use --msprobe-device npu, or recorded "
            "to check the outputs a tensor dump recorded"
        )
    import torch_npu

    return apis.resolve(torch_npu, listed, f"torch_npu {torch_npu.__version__}"), bench


def resolve_torch(api_type: str, api: str) -> Callable:
    """Only what msprobe's list for the type names, and only along the listed path (apis.py)."""
    roots = {
        "Functional": lambda: torch.nn.functional,
        "Tensor": lambda: torch.Tensor,
        "Torch": lambda: torch,
        "VF": lambda: torch._VF,
        "Aten": lambda: torch.ops.aten,
    }
    listed = apis.listed(apis.PYTORCH, api_type, api)
    if api_type not in roots:
        raise Unsupported(f"unknown API type {api_type!r}")
    return apis.resolve(roots[api_type](), listed, f"torch {torch.__version__}")


# -- the call ------------------------------------------------------------------


def judged_as_dropout(sides: Sides, draw: dropout.Draw, forward: bool) -> Sides:
    """Every output of a dropout that drew a mask judged by the share dropped (judging/dropout.py)."""
    fed_back = flat_outputs(sides.grad_outputs)[0] if sides.grad_outputs else None
    rule = draw.rule(forward, fed_back)

    def ruled(pair: Callable[[list, list], list[OutputPair]]) -> Callable[[list, list], list[OutputPair]]:
        def pairs(tested: list, bench: list) -> list[OutputPair]:
            found = pair(tested, bench)
            for output in found:
                # A gradient judged at another node of the graph (its note says which) may hold no mask.
                output.dropout = None if output.skip else replace(rule, zeros=None) if output.note else rule
            return found

        return pairs

    return replace(sides, pair=ruled(sides.pair), probe_pair=ruled(sides.probe_pair))


def build_call(
    dump: Dump,
    name: EntryName,
    fns: tuple[Callable | None, Callable],
    mode: str,
    seed: int,
    reference: Reference | None = None,
) -> Call:
    forward_entry = forward_body(dump, name)
    rebuilt = Rebuilder(CODEC, f"{name.prefix}.forward", dump.tensor_dir, mode, seed).rebuild(forward_entry)
    output_specs = flat_specs(forward_entry.get("output", []))
    call = Call(name, fns[0], fns[1], rebuilt.args, rebuilt.kwargs, output_specs, list(rebuilt.notes))
    call.reference = reference
    call.grad_flags = [
        spec.get("requires_grad") is not False
        for spec in input_tensor_specs(forward_entry)
        if CODEC.dtype_kind(spec["dtype"]) == "f"
    ]
    recover_undescribed(call)
    random_by_argument(call)
    call.draw = dropout.draw_of(name.api_type, name.api, call.args, call.kwargs)
    if call.draw is not None:
        # Two masks, as two devices draw them; each the same in every run of the entry.
        tested, bench = (dropout.seed_of(seed, name.prefix, side) for side in ("tested", "bench"))
        call.fn = None if call.fn is None else dropout.seeded(call.fn, tested)
        call.bench_fn = dropout.seeded(call.bench_fn, bench)
        call.notes.append(
            f"{name.api} p={call.draw.p:g} draws a mask: judged by the share dropped (msprobe's rule) "
            "and by the elements both sides kept"
        )
    call.autocast = autocast_dtype(call)
    if call.autocast is not None and call.autocast in LOW_PRECISION:
        call.notes.append(f"autocast to {call.autocast} applied: recorded inputs are wider than the output")
    elif call.autocast is not None:
        low = "/".join(low_inputs(call))
        call.notes.append(f"its {low} inputs taken in {call.autocast}, as its output: autocast's fp32 ops")
    return call


def recover_undescribed(call: Call) -> None:
    """msprobe 26.x writes `{}` for some dtype arguments: the output dtype tells which."""
    out_dtype = next((s.get("dtype") for s in call.output_specs if is_tensor_spec(s)), None)

    def recover(value: Any) -> Any:
        if not isinstance(value, Undescribed):
            return value
        if out_dtype is None:
            raise Unsupported(f"{value.field} is {{}}: msprobe could not describe it")
        try:
            dtype = CODEC.dtype(out_dtype)
        except (KeyError, TypeError):
            raise Unsupported(f"{value.field} is {{}}, and the recorded output dtype {out_dtype!r} is none") from None
        call.notes.append(f"{value.field} was {{}}: read as {out_dtype}, the recorded output dtype")
        return dtype

    call.args = tree_map(recover, call.args)
    call.kwargs = tree_map(recover, call.kwargs)


def random_by_argument(call: Call) -> None:
    """An API random only by an argument (SDPA's dropout_p): two runs never agree, nothing to check."""
    known = RANDOM_BY_ARGUMENT.get(call.name.api)
    if known is None:
        return
    argument, position, default, draws = known
    value = call.kwargs.get(argument, call.args[position] if len(call.args) > position else default)
    if draws(value):
        shown = "not given" if value is None else f"{value}"
        raise Unsupported(f"{call.name.api} with {argument} {shown} is random: two runs never agree")


# The ops autocast runs in its low dtype (PyTorch's CUDA and CPU lists, torch_npu's follows CUDA's).
# fmt: off
AUTOCAST_TO_LOW = frozenset((
    "conv1d", "conv2d", "conv3d", "conv_tbc", "conv_transpose1d", "conv_transpose2d", "conv_transpose3d",
    "convolution", "prelu", "addmm", "addmv", "addr", "matmul", "einsum", "mm", "mv", "linalg_vecdot",
    "linear", "addbmm", "baddbmm", "bmm", "chain_matmul", "linalg_multi_dot", "scaled_dot_product_attention",
    "__matmul__", "__rmatmul__",  # `a @ b` dispatches to matmul
))
# fmt: on


def low_inputs(call: Call) -> list[str]:
    """The short names of the call's bf16/fp16 floating input dtypes."""
    found = {t.dtype for t in tensors(call.args, call.kwargs) if t.is_floating_point() and t.dtype in LOW_PRECISION}
    return sorted(str(dtype).replace("torch.", "") for dtype in found)


def autocast_dtype(call: Call) -> torch.dtype | None:
    """Wider floating inputs but a bf16/fp16 output: the call ran under autocast.

    Every floating input wider: autocast, whatever the op. Some in the low dtype beside wider ones
    (an fp32 weight and bias beside a bf16 activation: `addmm` in a GPT-2 block) only for the ops
    autocast casts to its low dtype: layer_norm's and batch_norm's CPU kernels take a bf16 input with
    an fp32 weight as they are, and an in-place op writes into its own dtype by type promotion.
    torch_npu's own ops (`NPU.`) are in no autocast list: their fp32 side inputs (npu_quant_matmul's
    scales, a norm's weight) beside a bf16/fp16 output are the op's signature, not autocast. An fp32
    output of bf16/fp16 inputs: float32, autocast's fp32 policy (the low inputs cast up, exactly)."""
    if call.name.api in CASTS or call.inplace or registered.fused(call.name):
        return None
    inputs = {t.dtype for t in tensors(call.args, call.kwargs) if t.is_floating_point()}
    out = output_dtype(call)
    if out is None or not inputs:
        return None
    if out == torch.float32 and inputs.intersection(LOW_PRECISION):
        # An fp32 output of bf16/fp16 inputs: autocast's fp32 list (grid_sample of an autocast model's
        # bf16 grid) or type promotion; either computes in fp32 what the low inputs hold exactly, and the
        # first needs them cast (its kernel takes one dtype).
        return out
    wider = {d for d in inputs if d not in LOW_PRECISION and d.itemsize > out.itemsize}
    if out not in LOW_PRECISION or not wider:
        return None
    if inputs == wider or (inputs - wider == {out} and call.name.api in AUTOCAST_TO_LOW):
        return out
    return None


# -- forward and backward ------------------------------------------------------


def forward_sides(dump: Dump, call: Call, options: RunOptions) -> Sides:
    name = call.name
    if options.recorded:

        def tested() -> list:
            return recorded_values(CODEC, dump, f"{name.prefix}.forward", call.output_specs, "output")
    else:

        def tested() -> list:
            outputs = forward(tested_side(options.device, call), call)
            devices.synchronize(options.device)  # a device kernel's error is this entry's
            return outputs

    def pair(tested: list, bench: list) -> list[OutputPair]:
        # msprobe's post-processing (its YAML's handlers) first, on the outputs as the op gave them.
        tested, bench, said = registered.postprocessed(call, tested, bench)
        return registered.left_out(call, pairs_of(tested, bench), bench, said)

    def probe() -> list:
        widened = in_fp32(call)
        outputs = forward(tested_side(options.probe_device, widened), widened)
        devices.synchronize(options.probe_device)
        return outputs

    def bench(side: Any) -> list:
        return registered.checked_bench(call, side, forward(side, call))

    def compared(tested: list, bench: list) -> tuple[list, list]:
        return registered.compared(call, tested, bench)

    return Sides(bench, tested, pair, call.notes, options.recorded, compared=compared, probe=probe, probe_pair=pair)


def backward_sides(dump: Dump, call: Call, options: RunOptions) -> Sides:
    name = call.name
    body = dump.entries[name.full]
    rebuilder = Rebuilder(CODEC, name.full, dump.tensor_dir, REAL if options.recorded else options.mode, options.seed)
    grad_outputs = rebuilder.rebuild(body, "input", "").args
    grad_specs = flat_specs(body.get("output", []))
    notes = call.notes + rebuilder.notes

    explicit = call.reference is not None and call.reference.backward is not None

    def bench(side: Any) -> list:
        # A conv's and a linear's from their backward kernels alone (the tested side runs through
        # autograd, as the step did); a registered backward where autograd cannot derive one.
        if explicit:
            return registered.explicit_gradients(side, call, grad_outputs)
        return (
            conv.bench_gradients(call, grad_outputs, side)
            or linear_grads.bench_gradients(call, grad_outputs, side)
            or gradients(side, call, grad_outputs)
        )

    def probe() -> list:
        widened = in_fp32(call)
        grads = gradients(tested_side(options.probe_device, widened), widened, grad_outputs)
        devices.synchronize(options.probe_device)
        return grads

    if options.recorded:
        if returns_its_input(call):
            raise Unsupported(
                f"{name.api} returned its input unchanged (a no-op cast), so it has no backward "
                "node of its own: the gradients msprobe recorded for it belong to other calls"
            )

        # The bench's graph, watched for the gradients msprobe may have recorded inside it. A fused
        # NPU op is one kernel, one node of the step's graph: msprobe saw nothing inside it, so the
        # nodes of its composed float64 reference are no place to judge what it recorded at.
        nodes: list[NodeGradient] = []
        shapes: set[tuple[int, ...]] = (
            set()
            if registered.fused(name)
            else {tuple(s["shape"]) for s in grad_specs if is_tensor_spec(s) and isinstance(s["shape"], list)}
        )

        def watched_bench(side: Any) -> list:
            nodes.clear()
            if explicit:
                return registered.explicit_gradients(side, call, grad_outputs)
            return gradients(side, call, grad_outputs, lambda outs, leaves: watch_graph(outs, leaves, shapes, nodes))

        def recorded() -> list:
            return recorded_values(CODEC, dump, name.full, grad_specs, "output")

        attributed: list[Attribution] = []  # the last one, for the extra runs

        lent: dict[int, Borrowed] = {}

        def attribution(tested: list, bench: list) -> Attribution:
            found = attribute(tested, grad_specs, bench, nodes, flat_outputs(grad_outputs), name.api)
            if found.strays:  # what msprobe recorded here is no input's gradient: another entry's may be
                missing = [i for i, g in enumerate(bench) if isinstance(g, torch.Tensor) and i not in found.matched]
                if not lent:
                    lent.update(borrowed(CODEC, dump, name, floating(call.args, call.kwargs), missing))
                lend(found, lent, bench, call.autocast)
            attributed[:] = [found]
            return found

        def compared_bench_run(side: Any) -> list:
            found = watched_bench(side)
            return attributed[0].rebased(found, nodes) if attributed else found

        def compared(tested: list, bench: list) -> tuple[list, list]:
            return attribution(tested, bench).compared(bench)

        def recorded_pairs(tested: list, bench: list) -> list[OutputPair]:
            found = attribution(tested, bench)
            strays = "; ".join(found.strays)
            pairs = gradient_pairs(found.matched, bench, strays, found.elsewhere, found.unjudged)
            return cpu_kernels.named(call, promoted(call, pairs))

        return Sides(
            watched_bench,
            recorded,
            recorded_pairs,
            notes,
            True,
            grad_outputs,
            compared,
            probe,
            compared_bench=compared_bench_run,
        )

    call = compared_gradients_only(call, grad_specs)

    def tested() -> list:
        grads = gradients(tested_side(options.device, call), call, grad_outputs)
        devices.synchronize(options.device)  # a device kernel's error is this entry's
        return grads

    def pair(tested: list, bench: list) -> list[OutputPair]:
        # Only the gradients msprobe recorded: an input it recorded none for took none in the step.
        expected = [i < len(grad_specs) and grad_specs[i] is not None for i in range(len(bench))]
        pairs = [p for p in pairs_of(tested, bench) if p.index < len(expected) and expected[p.index]]
        return cpu_kernels.named(call, promoted(call, pairs))

    return Sides(bench, tested, pair, notes, False, grad_outputs, probe=probe)


def lend(found: Attribution, lent: dict[int, Borrowed], bench: list, autocast: torch.dtype | None) -> None:
    """The inputs' gradients other entries recorded, judged where this entry recorded none (in the
    autocast dtype the call computed them in, where they hold its values exactly) and where they
    prove themselves this input's (Borrowed.unproven: else the SKIP says why not)."""
    for index, taken in lent.items():
        value, reference = taken.value, bench[index] if index < len(bench) else None
        if index in found.matched or not isinstance(reference, torch.Tensor) or value.shape != reference.shape:
            continue
        if autocast is not None and value.dtype.itemsize > autocast.itemsize:
            narrowed = value.to(autocast)
            if not torch.equal(narrowed.to(value.dtype), value):
                continue
            value = narrowed
        why = taken.unproven(reference)
        if why:
            found.unjudged[index] = why
            continue
        found.matched[index] = value
        found.elsewhere[index] = (reference, taken.note())


def compared_gradients_only(call: Call, grad_specs: list) -> Call:
    """The call with only the inputs whose gradient is compared (recorded: `pair`) taking one, on
    every side and in every extra run: a gradient never compared is not computed (an LLM's linear
    entries record the input's gradient alone, and the LM head's weight gradient is 131 M elements:
    bench/llm_width/results_where.md). Each input's gradient is its own kernel's, so the compared
    ones are the same bit for bit. The call as it was where none would be left."""
    flags = call.grad_flags + [True] * (len(floating(call.args, call.kwargs)) - len(call.grad_flags))
    kept = [flag and i < len(grad_specs) and grad_specs[i] is not None for i, flag in enumerate(flags)]
    return replace(call, grad_flags=kept) if any(kept) and kept != flags else call


def output_dtype(call: Call) -> torch.dtype | None:
    """The dtype of the call's tensor outputs where they have one, and it is readable."""
    outputs = {s.get("dtype") for s in call.output_specs if is_tensor_spec(s)}
    if len(outputs) != 1:
        return None
    try:
        return CODEC.dtype(outputs.pop())
    except (KeyError, TypeError):
        return None


def promoted(call: Call, pairs: list[OutputPair]) -> list[OutputPair]:
    """The gradients of 0-dim floating inputs wider than the call's one bf16/fp16 output, marked as
    computed in that output's dtype: type promotion leaves a 0-dim tensor out of the result's dtype
    (an fp32 `logit_scale.exp()` times a bf16 tensor is bf16), so the op and its backward run in the
    output's dtype, and autograd casts the gradient up to the input's dtype only after its sum."""
    out = output_dtype(call)
    if call.autocast is not None or out is None or out not in LOW_PRECISION:
        return pairs
    inputs = floating(call.args, call.kwargs)
    for pair in pairs:
        taken = inputs[pair.index] if pair.index < len(inputs) else None
        if pair.skip or taken is None or taken.dim() != 0 or taken.dtype.itemsize <= out.itemsize:
            continue
        pair.computed_in = str(out)
        said = f"computed in {out} (a 0-dim {taken.dtype} input of a {out} result, by type promotion)"
        pair.note = f"{pair.note}; {said}" if pair.note else said
    return pairs


def returns_its_input(call: Call) -> bool:
    """A cast to the dtype it already has: torch returns the very input tensor."""
    if call.name.api not in CASTS or not call.args or not isinstance(call.args[0], torch.Tensor):
        return False
    source = call.args[0]
    outputs = [s for s in call.output_specs if is_tensor_spec(s)]
    return (
        len(outputs) == 1
        and outputs[0].get("dtype") == str(source.dtype)
        and outputs[0].get("shape") == list(source.shape)
    )
