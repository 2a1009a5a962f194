"""Reductions over a tested output and its benchmark, block by block: one pass over memory each.

An output of a real model's entry holds 10^7 to 10^8 elements. Whole-array numpy expressions
(|t - b|, finiteness masks, scaled copies) each allocate hundreds of MB, fault them in and pass
over them again. Here every quantity is computed on blocks of BLOCK elements, small enough to stay
in the cache, with the same float64 operations element by element: the values are those of the
whole-array expressions. Maxima, their first index and counts do not depend on the blocking; the
one sum whose rounding depends on its order, the cosine's dot products, is still taken by numpy
over whole arrays, as before.

Arrays of any real dtype are read as float64 a block at a time (a float32 output is never copied
whole). No framework here: numpy arrays in, floats out.
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from dataclasses import dataclass

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
        yield start, [as_float64(a[start : start + BLOCK]) for a in arrays]


def finite_pairs(t: np.ndarray, b: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray | None]:
    """The elements of a block where both sides are finite, and their positions (None: all of them)."""
    finite = np.isfinite(t)
    finite &= np.isfinite(b)
    if finite.all():
        return t, b, None
    where = np.flatnonzero(finite)
    return t[where], b[where], where


@dataclass
class Errors:
    """What one pass over the finite pairs of an output finds."""

    count: int = 0  # finite pairs
    max_abs: float = -1.0  # max |t - b| (-1 before the first pair)
    worst: int = 0  # the flat index of its first occurrence
    worst_tested: float = 0.0
    worst_bench: float = 0.0
    max_rel: float = 0.0  # max |t - b| / |b| (REL_EPS where b is 0)
    scale: float = 0.0  # max |t|, |b|: the cosine's scale


def errors(tested: np.ndarray, bench: np.ndarray) -> Errors:
    """MaxAbsErr (where first), MaxRelativeErr and the largest magnitude over the finite pairs."""
    found = Errors()
    for start, (t, b) in blocks(flat(tested), flat(bench)):
        t, b, where = finite_pairs(t, b)
        if not t.size:
            continue
        found.count += t.size
        diff = np.subtract(t, b)
        np.abs(diff, out=diff)
        i = int(np.argmax(diff))
        if diff[i] > found.max_abs:  # strictly: the first occurrence over the whole output
            found.max_abs = float(diff[i])
            found.worst = start + (i if where is None else int(where[i]))
            found.worst_tested, found.worst_bench = float(t[i]), float(b[i])
        magnitude = np.abs(b)
        found.scale = max(found.scale, float(magnitude.max()))
        np.copyto(magnitude, REL_EPS, where=magnitude == 0)
        with np.errstate(over="ignore"):  # a huge error over a tiny bench value: MaxRelativeErr inf
            np.divide(diff, magnitude, out=diff)
        found.max_rel = max(found.max_rel, float(diff.max()))
        found.scale = max(found.scale, float(np.abs(t, out=magnitude).max()))
    return found


def cosine(tested: np.ndarray, bench: np.ndarray, found: Errors) -> float | None:
    """Cosine similarity of the finite pairs (`found` by `errors`); None where undefined (one
    element, a zero vector). Scaled first: the squares of large fp32 values overflow float64 sums.
    The scaled copies are whole arrays so that numpy's dot products sum in the order they always did."""
    if found.count <= 1 or found.scale == 0.0:
        return None
    scaled_t, scaled_b = np.empty(found.count), np.empty(found.count)
    at = 0
    for _, (t, b) in blocks(flat(tested), flat(bench)):
        t, b, _ = finite_pairs(t, b)
        np.divide(t, found.scale, out=scaled_t[at : at + t.size])
        np.divide(b, found.scale, out=scaled_b[at : at + t.size])
        at += t.size
    norm_t, norm_b = float(np.sqrt(np.dot(scaled_t, scaled_t))), float(np.sqrt(np.dot(scaled_b, scaled_b)))
    if norm_t == 0.0 or norm_b == 0.0:
        return None
    return float(np.clip(np.dot(scaled_t, scaled_b) / (norm_t * norm_b), -1.0, 1.0))


def nonfinite_offsets(tested: np.ndarray, bench: np.ndarray) -> tuple[int, int]:
    """(NaN where the other side has none, inf where the other side differs): element counts."""
    nan_off = inf_off = 0
    for _, (t, b) in blocks(flat(tested), flat(bench)):
        if np.isfinite(t).all() and np.isfinite(b).all():
            continue
        t_nan, b_nan = np.isnan(t), np.isnan(b)
        t_inf, b_inf = np.isinf(t), np.isinf(b)
        nan_off += int(np.count_nonzero(t_nan != b_nan))
        inf_off += int(np.count_nonzero((t_inf | b_inf) & ~(t_nan | b_nan) & (t != b)))
    return nan_off, inf_off


def first_max(best: tuple[int, float] | None, index: int, value: float) -> tuple[int, float]:
    """np.argmax's choice over blocks taken in order: the first NaN, else the first largest."""
    if best is None or (not math.isnan(best[1]) and (math.isnan(value) or value > best[1])):
        return index, value
    return best
