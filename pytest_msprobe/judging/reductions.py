"""Reductions over a tested output and its benchmark, block by block: one pass over memory.

An output of a real model's entry holds 10^7 to 10^8 elements. Whole-array numpy expressions
(|t - b|, finiteness masks, scaled copies) each allocate hundreds of MB, fault them in and pass
over them again. Here one pass computes every quantity on blocks of BLOCK elements, small enough
to stay in the cache, with the same float64 operations element by element: the values are those
of the whole-array expressions. Maxima, their first index and counts do not depend on the
blocking. The cosine's dot products are sums whose rounding depends on their order: each block's
by numpy's own loop (einsum), then the blocks' in order, so a row does not depend on the
machine (BLAS's dot split its sum by its thread count, which moved the last digits).

Arrays of any real dtype are read as float64 a block at a time (a float32 output is never copied
whole). No framework here: numpy arrays in, floats out.
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from dataclasses import dataclass, field

import numpy as np

BLOCK = 1 << 16  # elements: a float64 block is 512 KiB, the few a pass holds stay in the cache

# The denominator of MaxRelativeErr where the bench value is exactly zero
# (msprobe's MindSpore checker uses the same constant).
REL_EPS = 1e-8


def flat(array: np.ndarray) -> np.ndarray:
    """A 1-D view of the array (a copy only where it is not contiguous)."""
    return np.asarray(array).reshape(-1)


def as_float64(block: np.ndarray) -> np.ndarray:
    return block if block.dtype == np.float64 else np.asarray(block, dtype=np.float64)


def blocks(*arrays: np.ndarray) -> Iterator[tuple[int, list[np.ndarray]]]:
    """(start, the arrays' blocks from there as float64) over flat arrays of one size."""
    size = arrays[0].size
    for start in range(0, size, BLOCK):
        yield start, block_at(start, *arrays)


def block_starts(size: int) -> np.ndarray:
    """Where each block of a flat array of `size` elements starts."""
    return np.arange(0, size, BLOCK)


def block_at(start: int, *arrays: np.ndarray) -> list[np.ndarray]:
    """The arrays' block from `start` as float64."""
    return [as_float64(a[start : start + BLOCK]) for a in arrays]


# The bits of +inf as unsigned integers of the float's width: every finite nonnegative float is below.
_INF_BITS = {np.dtype(np.float64): (np.uint64, 0x7FF0000000000000), np.dtype(np.float32): (np.uint32, 0x7F800000)}


def finite_nonnegative(values: np.ndarray) -> bool:
    """Whether every element is finite and not negative (-0.0 counts as negative), in one pass for
    float64 and float32: read as unsigned integers, their bits are exactly those below +inf's (a
    sign bit or an all-ones exponent is above)."""
    values = np.asarray(values)
    if values.dtype not in _INF_BITS:
        return bool(np.all(np.isfinite(values) & ~np.signbit(values)))
    unsigned, inf = _INF_BITS[values.dtype]
    return values.size == 0 or int(values.view(unsigned).max()) < inf


def finite_pairs(t: np.ndarray, b: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray | None]:
    """The elements of a block where both sides are finite, and their positions (None: all of them)."""
    finite = np.isfinite(t)
    finite &= np.isfinite(b)
    if finite.all():
        return t, b, None
    where = np.flatnonzero(finite)
    return t[where], b[where], where


# Sums of squares from here up (and finite) hold their largest terms as normal numbers: the cosine
# needs no scaling.
SAFE_SQUARES = 2.0**-900


@dataclass
class BlockErrors:
    """What the pass found of each block of BLOCK elements, in order: a later look at the same
    output bounds a block's elements by them without reading it (standards/budget.py)."""

    # The largest |t - b| / |b| where b is not 0: inf where t is not 0 where b is, or a pair is not finite.
    relative: list[float] = field(default_factory=list)
    # sqrt(sum b^2), at least the largest |b|: inf where a pair is not finite.
    bench_norm: list[float] = field(default_factory=list)

    def add(self, relative: float, bench_norm: float) -> None:
        self.relative.append(relative)
        self.bench_norm.append(bench_norm)


@dataclass
class Errors:
    """What one pass over an output and its bench finds."""

    count: int = 0  # finite pairs
    max_abs: float = -1.0  # max |t - b| (-1 before the first pair)
    worst: int = 0  # the flat index of its first occurrence
    worst_tested: float = 0.0
    worst_bench: float = 0.0
    max_rel: float = 0.0  # max |t - b| / |b| (REL_EPS where b is 0)
    dots: tuple[float, float, float] = (0.0, 0.0, 0.0)  # t.b, t.t, b.b over the finite pairs
    nan_off: int = 0  # NaN where the other side has none
    inf_off: int = 0  # inf where the other side differs
    nonzero: tuple[bool, bool] = (False, False)  # (tested, bench) hold an element other than 0 (NaN is one)
    blocks: BlockErrors = field(default_factory=BlockErrors)


def errors(tested: np.ndarray, bench: np.ndarray) -> Errors:
    """MaxAbsErr (where first), MaxRelativeErr and the cosine's dot products over the finite pairs,
    and the NaN and inf that do not match, in one pass.

    A block's sums of squares come first: finite, they say every element of it is, and the masks
    of finite pairs are left out (the common case)."""
    found = Errors()
    tb = tt = bb = 0.0
    for start, (t, b) in blocks(flat(tested), flat(bench)):
        squares = float(np.einsum("i,i->", t, t)), float(np.einsum("i,i->", b, b))
        # A sum of squares other than 0 (NaN and inf included) says so; 0 may be subnormals squared.
        found.nonzero = (
            found.nonzero[0] or squares[0] != 0 or bool(np.any(t)),
            found.nonzero[1] or squares[1] != 0 or bool(np.any(b)),
        )
        where = None
        if not (math.isfinite(squares[0]) and math.isfinite(squares[1])):  # NaN, inf, or squares beyond float64
            whole_t, whole_b = t, b
            t, b, where = finite_pairs(t, b)
            if where is not None:
                found.nan_off, found.inf_off = _nonfinite(whole_t, whole_b, found.nan_off, found.inf_off)
                squares = float(np.einsum("i,i->", t, t)), float(np.einsum("i,i->", b, b))
        if not t.size:
            found.blocks.add(math.inf, math.inf)
            continue
        found.count += t.size
        tt, bb = tt + squares[0], bb + squares[1]
        tb += float(np.einsum("i,i->", t, b))
        diff = np.subtract(t, b)
        np.abs(diff, out=diff)
        i = int(np.argmax(diff))
        if diff[i] > found.max_abs:  # strictly: the first occurrence over the whole output
            found.max_abs = float(diff[i])
            found.worst = start + (i if where is None else int(where[i]))
            found.worst_tested, found.worst_bench = float(t[i]), float(b[i])
        relative, bounds_block = _max_relative(diff, b)
        found.max_rel = max(found.max_rel, relative)
        if where is None and bounds_block:
            found.blocks.add(relative, math.sqrt(squares[1]))
        else:
            found.blocks.add(math.inf, math.inf)
    found.dots = (tb, tt, bb)
    return found


def _max_relative(diff: np.ndarray, b: np.ndarray) -> tuple[float, bool]:
    """(max |t - b| / |b| with REL_EPS for |b| where b is 0, whether that is the largest |t - b| / |b|
    where b is not 0 and t is b where it is: no error at a zero, no quotient overflowed); diff is
    overwritten."""
    magnitude = np.abs(b)
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        quotients = np.divide(diff, magnitude, out=magnitude)
    largest = float(quotients.max())
    if largest < math.inf:  # no zero in b (it gives inf or NaN here), the common case
        return largest, True
    # A zero of b with no error there gives 0 / 0, NaN: fmax leaves it out (its 0 / REL_EPS is 0).
    largest = float(np.fmax.reduce(quotients))
    if largest < math.inf:  # every zero of b matched (a ReLU's output): no inf, no pass more
        return largest, True
    magnitude = np.abs(b)
    np.copyto(magnitude, REL_EPS, where=magnitude == 0)
    with np.errstate(over="ignore"):  # a huge error over a tiny bench value: MaxRelativeErr inf
        return float(np.divide(diff, magnitude, out=diff).max()), False


def _nonfinite(t: np.ndarray, b: np.ndarray, nan_off: int, inf_off: int) -> tuple[int, int]:
    t_nan, b_nan = np.isnan(t), np.isnan(b)
    t_inf, b_inf = np.isinf(t), np.isinf(b)
    nan_off += int(np.count_nonzero(t_nan != b_nan))
    inf_off += int(np.count_nonzero((t_inf | b_inf) & ~(t_nan | b_nan) & (t != b)))
    return nan_off, inf_off


def cosine(tested: np.ndarray, bench: np.ndarray, found: Errors) -> float | None:
    """Cosine similarity of the finite pairs (`found` by `errors`); None where undefined (one
    element, a zero vector). Where a sum of squares overflowed or is below SAFE_SQUARES, each side
    is scaled by a power of two first, in two more passes: exactly, and the cosine does not change
    with it."""
    if found.count <= 1:
        return None
    tb, tt, bb = found.dots
    if not (SAFE_SQUARES <= tt < math.inf and SAFE_SQUARES <= bb < math.inf):
        tb, tt, bb = _scaled_dots(tested, bench)
    norm_t, norm_b = math.sqrt(tt), math.sqrt(bb)
    if norm_t == 0.0 or norm_b == 0.0:
        return None
    return float(np.clip(tb / (norm_t * norm_b), -1.0, 1.0))


def _scaled_dots(tested: np.ndarray, bench: np.ndarray) -> tuple[float, float, float]:
    """The dot products of the finite pairs, each side scaled by the power of two that brings its
    largest value into [0.5, 1)."""
    largest = [0.0, 0.0]
    for _, (t, b) in blocks(flat(tested), flat(bench)):
        t, b, _ = finite_pairs(t, b)
        if t.size:
            largest = [max(largest[0], float(np.abs(t).max())), max(largest[1], float(np.abs(b).max()))]
    shift_t, shift_b = (-math.frexp(value)[1] for value in largest)
    tb = tt = bb = 0.0
    for _, (t, b) in blocks(flat(tested), flat(bench)):
        t, b, _ = finite_pairs(t, b)
        t, b = np.ldexp(t, shift_t), np.ldexp(b, shift_b)
        tb += float(np.einsum("i,i->", t, b))
        tt += float(np.einsum("i,i->", t, t))
        bb += float(np.einsum("i,i->", b, b))
    return tb, tt, bb
