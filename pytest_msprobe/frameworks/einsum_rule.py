"""torch.einsum's output shape, read from its equation and its operands' shapes (shape_rules.py).

`einsum("bhqd,bhkd->bhqk", q, k)`: each letter names a dim, the same letter the same size (a 1
broadcasts), `...` the dims no letter names, broadcast across the operands; the output is the
letters after `->`, or, with no arrow, the ellipsis' dims and then the letters that appear once,
in alphabetical order (capitals first). An equation or shapes einsum refuses answer None.
"""

from __future__ import annotations

from .size_rules import tensor_shape

Shape = list[int]
ELLIPSIS = "..."


def einsum(args: list, kwargs: dict) -> Shape | None:
    equation = args[0] if args else kwargs["equation"]
    operands = list(args[1:])
    if len(operands) == 1 and isinstance(operands[0], (list, tuple)):
        operands = list(operands[0])  # einsum("ij,jk", [a, b])
    if not isinstance(equation, str) or not operands:
        return None
    inputs, arrow, output = equation.replace(" ", "").partition("->")
    terms = inputs.split(",")
    if len(terms) != len(operands):
        return None
    shapes = [tensor_shape(operand) for operand in operands]
    sizes: dict[str, int] = {}
    ellipses: list[Shape] = []
    for term, shape in zip(terms, shapes):
        found = _term(term, shape, sizes)
        if found is None:
            return None
        ellipses.append(found)
    batch = _broadcast(ellipses)
    if batch is None:
        return None
    if not arrow:
        once = sorted(c for c in sizes if inputs.count(c) == 1)
        output = (ELLIPSIS if any(ELLIPSIS in t for t in terms) else "") + "".join(once)
    return _output(output, sizes, batch, any(ELLIPSIS in t for t in terms))


def _term(term: str, shape: Shape, sizes: dict[str, int]) -> Shape | None:
    """The dims `...` stands for in one operand (recording each letter's size), None where it does not fit."""
    head, dots, tail = term.partition(ELLIPSIS)
    letters = head + tail
    if not all(c.isascii() and c.isalpha() for c in letters) or ELLIPSIS in tail or "." in letters:
        return None
    if (not dots and len(letters) != len(shape)) or len(letters) > len(shape):
        return None
    named = list(zip(head, shape)) + list(zip(tail, shape[len(shape) - len(tail) :]))
    seen: dict[str, int] = {}
    for letter, size in named:
        if letter in seen and seen[letter] != size:
            return None  # a diagonal of unequal dims
        seen[letter] = size
        known = sizes.get(letter, size)
        if size != known and 1 not in (size, known):
            return None
        sizes[letter] = max(size, known) if 1 in (size, known) else size
    return shape[len(head) : len(shape) - len(tail)] if dots else []


def _broadcast(shapes: list[Shape]) -> Shape | None:
    rank = max((len(s) for s in shapes), default=0)
    out = [1] * rank
    for shape in shapes:
        for at, size in enumerate(shape, start=rank - len(shape)):
            if size != 1 and out[at] not in (1, size):
                return None
            out[at] = size if size != 1 else out[at]
    return out


def _output(output: str, sizes: dict[str, int], batch: Shape, dotted: bool) -> Shape | None:
    head, dots, tail = output.partition(ELLIPSIS)
    letters = head + tail
    if len(set(letters)) != len(letters) or any(c not in sizes for c in letters) or ELLIPSIS in tail:
        return None
    if (dots and not dotted) or (dotted and not dots and batch):
        return None  # an ellipsis on one side only: left to the meta device
    return [*(sizes[c] for c in head), *(batch if dots else []), *(sizes[c] for c in tail)]
