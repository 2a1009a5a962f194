"""Recorded gradients put back at the place of the API's graph where msprobe took them.

Item i of a backward entry's `output` is usually the gradient of the call's
i-th floating input. For some APIs msprobe's hook sits on a node inside the
API's own autograd graph: `F.cross_entropy` records the gradient at
log_softmax's output (-1/N at each target, 0 elsewhere), `F.linear` records
(bias, input, weight transposed) as addmm sees them, and on 3-D inputs the
input flattened to 2-D. On inputs of 3 or more dimensions `F.linear`,
`matmul` and `bmm` record instead the gradient arriving at the output, bit for
bit, through a view to the 2-D or 3-D shape of the GEMM that ran: where the
weight is square that has the input's (flattened) shape. Each recorded gradient
is therefore matched to the closest of the float64 gradients of the same shape:
the call's input gradients and the gradient passed on by every node of its
float64 graph.

A recorded gradient proven to be the gradient arriving at the output (equal to
it bit for bit, as it is or through a view, where something in the API passes
that gradient on: a node of the API's own float64 graph passes it on unchanged
at the recorded shape, or the API is one msprobe records so, VIEWED_GEMMS) is a
SKIP saying so, unless the gradient it fits is, in float64 too, that same
incoming gradient (a pass-through API's input gradient): the one thing
attribution may explain away. msprobe hooks the node that made the call's first
output; where that node is a view (einsum's, linear's and matmul's on 3 or more
dimensions) it records what the view passes on, whatever gradient of the call it
happens to be near. Equal to the incoming gradient where nothing in the API
passes it on (log_softmax's gradient without its exp(y) sum(g) term is the
incoming gradient itself) proves nothing: it is judged.

Any other is judged. One that fits a gradient of its shape (within FIT) is
judged there, at a node of the graph said so. One that fits none is judged in
the place msprobe records it, its own input's row (at the nearest of that
input's gradient and the nodes flowing to it alone), or, where no input of its
shape sits at its position, at the nearest of all: a gradient too wrong to fit
anything is a deficit to report, never a reason to look away (the worse the
fault, the surer it would hide). Only a shape that no input or node has leaves
nothing to judge it against.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

import torch

from ..results import RUN_THE_CALL
from .torch_engine import NodeGradient, input_of, shapes_of

# How close (relative L2 distance) a recorded gradient must be to a float64 gradient to fit it, and be
# judged there rather than in its own input's place: recorded gradients of correct kernels sit within 0.015 of
# their node (bf16), two different gradients of one shape 0.53 and more apart (layer_norm's
# weight and bias): bench/studies/gradient_attribution.md.
FIT = 0.1
# The APIs msprobe 26.2.0 records the gradient arriving at the output for (on inputs of 3 or more
# dimensions): proof enough where the float64 graph of another device's run has no such view.
VIEWED_GEMMS = frozenset({"linear", "matmul", "__matmul__", "bmm", "baddbmm", "einsum"})


@dataclass
class Attribution:
    """Where each recorded gradient was judged."""

    matched: dict[int, Any] = field(default_factory=dict)  # input index -> the recorded gradient
    # input index -> (the float64 gradient at the node it was recorded at, what to say)
    elsewhere: dict[int, tuple[torch.Tensor, str]] = field(default_factory=dict)
    nodes: dict[int, NodeGradient] = field(default_factory=dict)  # input index -> that node
    strays: list[str] = field(default_factory=list)  # the recorded gradients that fit nothing, described
    # input index -> why a gradient another entry recorded was not judged as this input's (borrowed_gradients)
    unjudged: dict[int, str] = field(default_factory=dict)

    def compared(self, bench: list) -> tuple[list, list]:
        """(recorded, float64) as they were compared, in the order of the inputs."""
        recorded = [self.matched.get(i) for i in range(len(bench))]
        return recorded, [self.elsewhere[i][0] if i in self.elsewhere else b for i, b in enumerate(bench)]

    def rebased(self, gradients: list, nodes: list[NodeGradient]) -> list:
        """Another run of the same graph (an extra run's) as it compares: its gradients, with the
        values its own nodes pass on where this attribution judged at a node."""
        found = list(gradients)
        for index, node in self.nodes.items():
            same = (n for n in nodes if (n.node, n.slot, n.value.shape) == (node.node, node.slot, node.value.shape))
            found[index] = next((n.value for n in same), None)
        return found


@dataclass(frozen=True)
class Candidate:
    index: int  # the input whose row the gradient is judged in
    value: torch.Tensor  # its float64 value
    node: NodeGradient | None = None  # None: an input's gradient
    own: bool = False  # the gradient of the input at the recorded position (or of the one input of its shape)

    def describe(self) -> str:
        return self.node.describe() if self.node else f"the gradient of input {self.index}"


def attribute(
    recorded: list, specs: list, bench: list, nodes: list[NodeGradient], grad_outputs: list, api: str = ""
) -> Attribution:
    """Each recorded gradient against the closest float64 gradient of its shape."""
    passed_on = [g for g in grad_outputs if isinstance(g, torch.Tensor)]
    found = Attribution()
    for position, (value, spec) in enumerate(zip(recorded, specs)):
        if spec is None or value is None:
            continue
        candidates = candidates_of(position, list(value.shape), bench, nodes, found.matched)
        distances = [distance(value, c.value) for c in candidates]
        best = min(range(len(candidates)), key=distances.__getitem__, default=None)  # a tie: the input's own
        fits = best is not None and distances[best] <= FIT
        incoming = passed_on_as(value, passed_on) if api in VIEWED_GEMMS or passes_on(value, nodes) else ""
        if incoming and not (best is not None and fits and passed_on_as(candidates[best].value, passed_on)):
            # Proven to be the gradient arriving at the output, not the gradient of any input: never judged
            # as one. Only a gradient that is, in float64 too, the one arriving (a pass-through API's) is
            # judged; one that merely fits (einsum's operand gradient where its other operand is near the
            # identity: 0.05 from the incoming one) is not what msprobe's hook on a view saw.
            found.strays.append(incoming)
            continue
        if best is None:
            found.strays.append(f"{list(value.shape)}, which no input or node of the float64 graph has")
            continue
        unfitting = ""
        if not fits:
            best, unfitting = _place(value, candidates, distances)
        chosen = candidates[best]
        found.matched[chosen.index] = value
        if chosen.node is not None:
            found.nodes[chosen.index] = chosen.node
            found.elsewhere[chosen.index] = (
                chosen.value,
                f"msprobe recorded this gradient at {chosen.node.describe()} inside the API, not at its input: "
                "judged against the float64 gradient there" + (f"; {unfitting}" if unfitting else ""),
            )
        elif unfitting and not chosen.own:
            # Its own input's gradient, where msprobe records one, needs no word (a dropout's, whose mask is
            # random, fits nothing either); another input's does.
            found.elsewhere[chosen.index] = (chosen.value, unfitting)
    return found


def candidates_of(
    position: int, shape: list[int], bench: list, nodes: list[NodeGradient], taken: dict[int, Any]
) -> list[Candidate]:
    """The float64 gradients of `shape`: the input at `position` first, the other inputs, then
    the nodes of the graph whose gradient flows on to one input only (its row)."""
    shapes = shapes_of(bench)
    first = input_of(position, shape, shapes, taken)
    candidates = [Candidate(first, bench[first], own=True)] if first is not None else []
    candidates += [Candidate(i, bench[i]) for i, s in enumerate(shapes) if s == shape and i != first and i not in taken]
    for node in nodes:
        if list(node.value.shape) != shape or len(node.inputs) != 1:
            continue
        (index,) = node.inputs
        if index not in taken:
            candidates.append(Candidate(index, node.value, node))
    return candidates


def _place(value: torch.Tensor, candidates: list[Candidate], distances: list[float]) -> tuple[int, str]:
    """Where a recorded gradient that fits no candidate is judged, and what to say: the nearest
    candidate in its own input's row (where msprobe records it), else the nearest of all."""
    own = next((c.index for c in candidates if c.own), None)
    row = [i for i, c in enumerate(candidates) if own is None or c.index == own]
    best = min(row, key=distances.__getitem__)
    where = "in its own input's place" if own is not None else "at the nearest"
    return best, (
        f"it fits none of the {len(candidates)} float64 gradients of its shape {list(value.shape)} (the nearest at a "
        f"relative distance of {min(distances):.2g}): judged {where}, {candidates[best].describe()}"
    )


def passes_on(value: torch.Tensor, nodes: list[NodeGradient]) -> bool:
    """Whether a node of the API's float64 graph passes on, at the recorded shape, the very values
    recorded (a view or an add passes the gradient arriving at the output on unchanged: where msprobe's
    hook sits on such a node it records that gradient, not an input's)."""
    return any(node.value.shape == value.shape and same_values(node.value, value) for node in nodes)


def passed_on_as(value: torch.Tensor, passed_on: list) -> str:
    """What a recorded gradient is when it is, bit for bit, the gradient arriving at the output, as it
    is or through a view (msprobe 26.2.0's hook on linear, matmul or bmm of 3 or more dimensions records
    the grad_output flattened to the 2-D or 3-D shape of the GEMM that ran): "" when it is not."""
    shape = list(value.shape)
    for index, g in enumerate(passed_on):
        if same_values(value, g):
            return f"{shape} equal to the gradient arriving at the output (its hook passed it on): {RUN_THE_CALL}"
        if value.numel() == g.numel() and same_values(value.reshape(-1), g.reshape(-1)):
            return (
                f"{shape}: the gradient arriving at output {index} {list(g.shape)} through a view, "
                f"bit for bit (its hook passed it on), no input's gradient: {RUN_THE_CALL}"
            )
    return ""


def distance(value: torch.Tensor, reference: torch.Tensor) -> float:
    """The relative L2 distance; over the finite elements where both hold their inf and NaN at the
    same places (an fp16 step's overflowed loss scale), else inf: NaN fits nothing better."""
    value, reference = value.detach().to(torch.float64), reference.detach().to(torch.float64)
    diff = torch.linalg.vector_norm(value - reference)
    scale = torch.linalg.vector_norm(reference)
    if not (math.isfinite(diff) and math.isfinite(scale)):
        finite = torch.isfinite(value)
        same = torch.equal(finite, torch.isfinite(reference)) and torch.equal(
            torch.isnan(value), torch.isnan(reference)
        )
        infinite = ~finite & ~torch.isnan(value)
        if not same or not torch.equal(value[infinite], reference[infinite]):
            return float("inf")
        value, reference = value[finite], reference[finite]
        diff, scale = torch.linalg.vector_norm(value - reference), torch.linalg.vector_norm(reference)
    distance = float(diff / scale) if scale > 0 else (0.0 if diff == 0 else float("inf"))
    return distance if math.isfinite(distance) else float("inf")


def same_values(a: torch.Tensor, b: torch.Tensor) -> bool:
    return a.shape == b.shape and bool(torch.equal(a.detach().to(torch.float64), b.detach().to(torch.float64)))
