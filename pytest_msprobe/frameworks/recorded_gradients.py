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
it bit for bit, as it is or through a view) is a SKIP saying so, unless an
input's gradient fits it (a pass-through API's does). Otherwise one closest to
its own input's gradient is judged there, however far (a gross deficit is a
finding); one closer to another gradient is judged there only when it fits it
(within FIT), or when that is the one node of its shape and the gradient is
nearer it than zero is (UNRELATED), and said so; one that fits nothing is a
SKIP saying what it is: a misattributed gradient is never an error.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

import torch

from .torch_engine import NodeGradient, input_of, shapes_of

# How close (relative L2 distance) a recorded gradient must be to a float64 gradient other than
# its own input's to be judged there: recorded gradients of correct kernels sit within 0.015 of
# their node (bf16), two different gradients of one shape 0.53 and more apart (layer_norm's
# weight and bias): bench/studies/gradient_attribution.md.
FIT = 0.1
# A recorded gradient at least this far from a node's float64 gradient is no closer to it than zero
# is: nothing of it proves it was taken there (a tensor of another place is about 1.4 away).
UNRELATED = 1.0


@dataclass
class Attribution:
    """Where each recorded gradient was judged."""

    matched: dict[int, Any] = field(default_factory=dict)  # input index -> the recorded gradient
    # input index -> (the float64 gradient at the node it was recorded at, what to say)
    elsewhere: dict[int, tuple[torch.Tensor, str]] = field(default_factory=dict)
    nodes: dict[int, NodeGradient] = field(default_factory=dict)  # input index -> that node
    strays: list[str] = field(default_factory=list)  # the recorded gradients that fit nothing, described

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


def attribute(recorded: list, specs: list, bench: list, nodes: list[NodeGradient], grad_outputs: list) -> Attribution:
    """Each recorded gradient against the closest float64 gradient of its shape."""
    passed_on = [g for g in grad_outputs if isinstance(g, torch.Tensor)]
    found = Attribution()
    for position, (value, spec) in enumerate(zip(recorded, specs)):
        if spec is None or value is None:
            continue
        candidates = candidates_of(position, list(value.shape), bench, nodes, found.matched)
        distances = [distance(value, c.value) for c in candidates]
        best = min(range(len(candidates)), key=distances.__getitem__, default=None)  # a tie: the input's own
        incoming = passed_on_as(value, passed_on)
        if incoming and (best is None or distances[best] > FIT):
            # Proven to be the gradient arriving at the output, not the gradient of any input (those
            # that fit it, as a pass-through API's do, are judged): never judged as an input's.
            found.strays.append(incoming)
            continue
        if best is None or distances[best] > FIT:
            why = _unfitting(value, candidates, distances, best)
            if why:  # several places and none fits, or nowhere: no guess
                found.strays.append(why)
                continue
        assert best is not None
        chosen = candidates[best]
        found.matched[chosen.index] = value
        if chosen.node is not None:
            found.nodes[chosen.index] = chosen.node
            found.elsewhere[chosen.index] = (
                chosen.value,
                f"msprobe recorded this gradient at {chosen.node.describe()} inside the API, not at its input: "
                "judged against the float64 gradient there",
            )
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


def _unfitting(value: torch.Tensor, candidates: list[Candidate], distances: list[float], best: int | None) -> str:
    """What a recorded gradient that fits no candidate is, or "" to judge it at its only candidate."""
    shape = list(value.shape)
    if best is None:
        return f"{shape}, which no input or node of the float64 graph has"
    if candidates[best].own:
        return ""  # closest to its own input, where msprobe records it: a gross deficit is a finding
    if len(candidates) == 1 and distances[best] < UNRELATED:
        return ""  # the one place it can be, and it carries that gradient: a gross deficit is a finding
    return (
        f"{shape}, which fits none of the {len(candidates)} float64 gradients of that shape "
        f"(nearest: {candidates[best].describe()}, at a relative distance of {distances[best]:.2g})"
    )


def passed_on_as(value: torch.Tensor, passed_on: list) -> str:
    """What a recorded gradient is when it is, bit for bit, the gradient arriving at the output, as it
    is or through a view (msprobe 26.2.0's hook on linear, matmul or bmm of 3 or more dimensions records
    the grad_output flattened to the 2-D or 3-D shape of the GEMM that ran): "" when it is not."""
    shape = list(value.shape)
    for index, g in enumerate(passed_on):
        if same_values(value, g):
            return f"{shape} equal to the gradient arriving at the output (its hook passed it on)"
        if value.numel() == g.numel() and same_values(value.reshape(-1), g.reshape(-1)):
            return (
                f"{shape}: the gradient arriving at output {index} {list(g.shape)} through a view, "
                "bit for bit (its hook passed it on), no input's gradient"
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
