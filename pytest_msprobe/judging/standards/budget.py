"""What a correct kernel may get wrong at each element of an output: the dtype standard's budget.

    budget_i = c_out ulp_i + c_acc u_acc m_i + c_length u_acc sqrt(K) |b_i| + c_round R_i + c_spread S_i + c_low L_i

    ulp_i   the spacing of the tested dtype at the correctly rounded benchmark (the subnormal
            spacing below the normal range): the final rounding (0.5) and a 1-ULP math library (1)
    m_i     max(|b_i|, M_i): the magnitude of the terms a correct kernel rounds at fp32 (u_acc =
            2^-24, as Ascend's cube unit and CUDA's tensor cores accumulate fp16/bf16/fp32): M is
            the benchmark on |inputs| for sums and products (|A||B|, sum |x|), the API's formula
            on magnitudes for softmax, layer_norm, batch_norm and gelu, |grad_output| routed as the
            input chooses for pooling's gradient, else |b_i| alone. The forward of elementwise math of
            one input (exp, cos, silu, ...) sums nothing: 2 lib u_acc |b_i| instead of c_acc u_acc m_i,
            lib the ULP a correct fp32 math library's function is off (compare.ExtraRuns.library_ulps)
    K       how many terms one element sums, where the API says (conv, linear, matmul, sum, mean,
            a norm's weight gradient): where the terms share a sign a correct kernel's partial sums
            grow with the result, and what it rounds with them (no extra run)
    R_i     what a correct kernel's own roundings to the low dtype move the element by, from the
            API's formula (frameworks/magnitudes.structural): a saved fp32 output read by the gradient
            (tanh's g (1 - y^2) with y rounded: 2 |g| y^2 u_y), flash attention's probabilities
            rounded to bf16/fp16 before P V (u_low P |V|) and its dS before dS K, dS^T Q
    S_i     max over seeds of |b(inputs x (1 + u_acc r)) - b_i|, r = +-1 at random: what the
            computation's conditioning makes of intermediate rounding, for what is not a sum
            (not asked of a unary function's forward: its exact input is not perturbed)
    L_i     |the API on the CPU in the tested dtype - b_i|, bf16/fp16 only: what PyTorch's own
            kernels round in that dtype (saved activations, scalars, partial sums), the widest
            over thread counts and over oneDNN's kernels and ATen's own (which a CPU runs depends
            on its bf16 units: a dump is judged the same on any CPU)

An output's ratio is its worst element's error over that element's budget: pass up to 1, a
warning up to 1.04 (a narrow band: the study's smallest material deficit is 1.09 times its budget,
its correct outputs reach 0.67), an error beyond. M, S and L cost extra benchmark runs: they are asked one by one,
only while the output is still over its budget, which gives the verdict all of them would give
(every term only adds).

The constants come from bench/studies/kernel_bounds.md: 314 correct outputs of real GPT dumps
in fp32, bf16 and fp16 and 736 correct-but-different kernels pass (worst ratio 0.67), every
TF32/HF32 operand, fp16/bf16 accumulation, tanh GELU, missing gradient term and softmax summed
low of separation above 8 is an error. Numpy only; dtypes arrive in torch spelling.
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass, field
from typing import Callable

import numpy as np

from ..compare import ExtraRuns
from ..reductions import BlockErrors, as_float64, block_at, block_starts, finite_nonnegative, flat

U_ACC = 2.0**-24  # fp32 accumulation


@dataclass(frozen=True)
class Format:
    """A binary floating-point format, as far as its spacing goes."""

    name: str  # "bf16"
    mantissa_bits: int  # explicit fraction bits
    min_exponent: int  # exponent of the smallest normal number
    max_exponent: int
    native: str | None = None  # numpy's own type of this format, whose cast rounds to it

    @property
    def largest(self) -> float:
        """The largest finite value."""
        return (2 - math.ldexp(1.0, -self.mantissa_bits)) * math.ldexp(1.0, self.max_exponent)

    @property
    def unit_roundoff(self) -> float:
        return math.ldexp(1.0, -self.mantissa_bits - 1)

    @property
    def accumulation(self) -> float:
        """u_acc of a correct kernel: fp32 accumulation for fp32 and narrower, fp64's own for fp64."""
        return min(U_ACC, self.unit_roundoff)

    def spacing(self, values: np.ndarray) -> np.ndarray:
        """The ULP at |values| once rounded to this format (the subnormal spacing below the normal range):
        2 ** (max(e - 1, min_exponent) - mantissa_bits), e the exponent np.frexp gives the rounded
        value (0 for inf and NaN; 0 itself, below the normal range, gets the smallest subnormal spacing).

        Read from the float64 bits, without rounding, np.frexp or np.ldexp (several times slower):
        the biased exponent less 1023 is e - 1 (-1023 for float64's subnormals, below any format's
        min_exponent as e - 1 is), and rounding changes it only where it carries into the next
        binade (the fraction's top mantissa_bits all ones and the rest at least half an ULP: ties
        go to even, which is up there), or beyond the largest value, to inf. What rounds to 0 has an
        exponent below min_exponent, as 0 itself (-1023), and so the smallest subnormal spacing."""
        if self.native is not None:
            return self._native_spacing(values)
        values = np.ascontiguousarray(values, dtype=np.float64)
        bits = values.view(np.int64)
        exponent = ((bits >> 52) & 0x7FF) - 1023  # e - 1; 1024 for inf and NaN
        if self.mantissa_bits < 52:
            fraction = bits & ((1 << 52) - 1)
            # (below min_exponent a carry changes nothing: the subnormal spacing holds on either side)
            exponent += fraction >= (1 << 52) - (1 << (51 - self.mantissa_bits))
        exponent[exponent > self.max_exponent] = -1  # inf and NaN: frexp's 0
        np.maximum(exponent, self.min_exponent, out=exponent)
        exponent -= self.mantissa_bits
        if self.min_exponent - self.mantissa_bits < -1022:  # fp64's subnormal spacings
            return np.ldexp(1.0, exponent)
        exponent += 1023
        exponent <<= 52
        return exponent.view(np.float64)

    def _native_spacing(self, values: np.ndarray) -> np.ndarray:
        """`spacing` where numpy has the format: its cast rounds (to nearest, ties to even, inf
        beyond the largest value), and the rounded value's sign and biased exponent pick the
        spacing from a table. Three passes, where the bits of float64 take a dozen."""
        with np.errstate(over="ignore", invalid="ignore"):
            rounded = np.asarray(values, dtype=np.float64).astype(self.native)
        fields = rounded.view(f"u{rounded.itemsize}") >> self.mantissa_bits
        return _spacings(self)[fields]

    def rounded(self, values: np.ndarray) -> np.ndarray:
        """float64 values rounded to this format, to nearest with ties to even, subnormals included."""
        values = np.asarray(values, dtype=np.float64)
        _, exponent = np.frexp(np.abs(values))
        step = np.ldexp(1.0, np.maximum(exponent - 1, self.min_exponent) - self.mantissa_bits)
        out = np.round(values / step) * step  # the quotient is exact; np.round rounds half to even
        return np.where(np.abs(out) > self.largest, np.copysign(np.inf, values), out)


@functools.cache
def _spacings(fmt: Format) -> np.ndarray:
    """The spacing of each sign and biased exponent of a native format, as `spacing` defines it:
    the subnormal spacing for 0 and the subnormals (biased exponent 0), frexp's 0 for inf and NaN
    (all ones)."""
    ones = fmt.max_exponent * 2 + 1  # the biased exponent of inf and NaN
    exponents = np.arange(2 * (ones + 1)) & ones
    e_less_1 = np.where(exponents == ones, -1, np.maximum(exponents - fmt.max_exponent, fmt.min_exponent))
    return np.ldexp(1.0, e_less_1 - fmt.mantissa_bits)


FORMATS = {
    "bfloat16": Format("bf16", 7, -126, 127),
    "float16": Format("fp16", 10, -14, 15, "float16"),
    "float32": Format("fp32", 23, -126, 127, "float32"),
    "float64": Format("fp64", 52, -1022, 1023),
    "tf32": Format("tf32", 10, -126, 127),  # an fp32 GEMM's operands on tensor cores
    "hf32": Format("hf32", 10, -126, 127),  # the same on Ascend's cube unit
}
_ALIASES = {
    "bf16": "bfloat16",
    "half": "float16",
    "fp16": "float16",
    "float": "float32",
    "fp32": "float32",
    "double": "float64",
    "fp64": "float64",
}


def format_of(dtype: str) -> Format | None:
    """The format of a dtype in torch or short spelling ("torch.bfloat16", "bf16"); None without one."""
    name = dtype.rsplit(".", 1)[-1].lower()
    return FORMATS.get(_ALIASES.get(name, name))


@dataclass(frozen=True)
class Constants:
    """The budget's constants: bench/studies/kernel_bounds.md, "Why these constants"."""

    c_out: float = 1.5  # ULP of each element: 0.5 rounding and a 1-ULP math library
    c_acc: float = 32.0  # correct kernels need 18.8 at most (fp32 sums in order, K = 1024); TF32 636
    c_spread: float = 8.0  # correct kernels need 2.4 at most
    c_low: float = 2.0  # correct kernels need 1.0 at most
    c_round: float = 2.0  # a bound at 1 forward; flash's backward counts dS and the saved output's rounding: 2
    c_length: float = 2.0  # correct kernels need 1.34 at most (fp32 sums in order of 262,144 same-sign terms)
    band: float = 1.04  # a warning up to this many times the budget: half the width that holds no deficit


@dataclass(frozen=True)
class Reading:
    """An output's worst element against its budget."""

    format: Format
    ratio: float  # max_i |t_i - b_i| / budget_i
    index: tuple[int, ...]
    tested: float
    bench: float
    error_ulps: float  # |t - b| at the worst element, in its ULP
    parts: dict[str, float]  # the budget's terms at the worst element, in its ULP
    over: int  # elements over their budget
    size: int
    asked: tuple[str, ...]  # the extra runs that were asked
    # The magnitude in force is of a part of the terms: every element is within `ratio` of its
    # budget, the full magnitude would give less (a pass only: anything over asks the full one).
    bounded: bool = False

    def status(self, band: float) -> str:
        return "pass" if self.ratio <= 1 else "warning" if self.ratio <= band else "error"

    @property
    def budget_ulps(self) -> float:
        return sum(self.parts.values())


def read(
    tested: np.ndarray,
    bench: np.ndarray,
    fmt: Format,
    extra: ExtraRuns,
    constants: Constants = Constants(),
    accumulation: float | None = None,
    seen: BlockErrors | None = None,
) -> Reading:
    """The output against its budget, asking the extra runs one by one while it is over it.

    tested and bench: the same shape, finite where compared (NaN and inf are judged before:
    compare.compare). accumulation: u_acc where the user declared a coarser one (an allowance).
    seen: what the metrics' pass over these arrays found of each block (reductions.errors), which
    lets a look pass blocks by unread. Each look at the whole output is one pass block by block
    (reductions.py); the terms of the worst element are computed again for it alone, with the
    same operations.
    """
    t, b = flat(tested), flat(bench)
    shape = np.shape(bench)
    budget = _Budget(fmt, constants, max(fmt.accumulation, accumulation or 0.0), extra.terms(), extra.library_ulps)
    if seen is not None and len(seen.relative) == block_starts(b.size).size:
        budget.ceilings = budget.ceilings_of(seen)
    # While an extra run may still be asked, a look stops at the first element over its budget: it
    # is asked then whatever the rest holds. The last look reads the whole output.
    worst = budget.worst(t, b, stop_over=True)
    asked: list[str] = []
    bounded = False
    # Each kind's cheaper answer first: it is at most the full one, so stopping after it gives the
    # same verdict.
    asks: list[tuple[str, tuple[Callable[[], np.ndarray | None], ...]]] = [
        ("magnitude", (extra.sampled_magnitude, extra.lower_magnitude, extra.magnitude)),
        ("structural", (extra.structural,)),
        ("spread", (lambda: extra.spread_once(U_ACC), lambda: extra.spread(U_ACC))),
    ]
    if fmt.mantissa_bits < 23:
        asks.append(("low", (extra.low,)))
    for name, answers in asks:
        if worst.ratio <= 1:
            break
        asked.append(name)
        for ask in answers:
            if worst.ratio <= 1:
                break
            answer = ask()
            if answer is None:
                continue
            budget.answered(name, flat(np.broadcast_to(_floating(answer), shape)))
            bounded = name == "magnitude" and ask is extra.sampled_magnitude
            worst = budget.worst(t, b, stop_over=True)
    if worst.partial:
        worst = budget.worst(t, b)
    index = tuple(int(i) for i in np.unravel_index(worst.index, shape)) if shape else ()
    at = slice(worst.index, worst.index + 1)
    t_at, b_at = as_float64(t[at]), as_float64(b[at])
    error, unit, terms = budget.elements(t_at, b_at, at)
    at_unit = float(unit[0]) if unit.size else 1.0
    parts = {name: float(values[0]) / at_unit for name, values in terms.items() if values[0] > 0}
    return Reading(
        fmt,
        worst.ratio,
        index,
        float(t_at[0]) if t.size else 0.0,
        float(b_at[0]) if b.size else 0.0,
        float(error[0]) / at_unit if error.size else 0.0,
        parts,
        worst.over,
        int(b.size),
        tuple(asked),
        bounded,
    )


def _floating(answer: np.ndarray) -> np.ndarray:
    """An extra run's answer as float64, or float32 as it is (its float64 values are exact)."""
    answer = np.asarray(answer)
    return answer if answer.dtype == np.float32 else answer.astype(np.float64, copy=False)


@dataclass(frozen=True)
class _Worst:
    index: int  # flat
    ratio: float  # error over budget there (np.argmax's choice: the first NaN, else the first largest)
    over: int  # elements over their budget
    partial: bool = False  # the look stopped at `index`, the first element over its budget


@dataclass
class _Budget:
    """The budget of an output's elements, a block at a time, with the extra runs answered so far."""

    fmt: Format
    constants: Constants
    u_acc: float
    terms: int | None = None  # K: how many terms one element sums at most
    # Elementwise math of one exact input: a correct library's ULP (compare.ExtraRuns.library_ulps), whose
    # 2 lib u_acc |b| (lib to 2 lib ULP of fp32 at b; lib of its subnormal spacing added for an underflow)
    # takes the accumulation term's place: nothing is summed.
    library: float | None = None
    answers: dict[str, np.ndarray] = field(default_factory=dict)  # flat float64 (or float32), by the run's name
    ceilings: np.ndarray | None = None  # each block's largest ratio at most, whatever is answered (ceilings_of)

    def elements(
        self, t: np.ndarray, b: np.ndarray, at: slice | np.ndarray, finite: bool = False
    ) -> tuple[np.ndarray, np.ndarray, dict]:
        """(|t - b| where both are finite else 0, the ULP, the budget's terms) of the elements `at`;
        `finite`: the caller knows both are finite everywhere."""
        with np.errstate(invalid="ignore", over="ignore"):  # inf - inf where both are inf: not compared
            error = np.subtract(t, b)
            np.abs(error, out=error)
        size = np.abs(b)
        if not finite and not math.isfinite(float(error.sum())):  # a NaN or inf (or a huge sum): which, then
            finite = np.isfinite(t)
            finite &= np.isfinite(b)
            error[~finite] = 0.0
            size[~finite] = 0.0
        c = self.constants
        unit = self.fmt.spacing(b)
        per_magnitude = self.shares()[2]
        if "magnitude" in self.answers:
            magnitude = np.maximum(size, self.answer("magnitude", at))
            magnitude *= per_magnitude
        else:
            magnitude = size * per_magnitude
        if self.library:  # lib ULP of the computing format below its normal range too (an exp's underflow)
            magnitude += self.library * (2.0**-149 if self.u_acc >= U_ACC else 2.0**-1074)
        summed = "fp32 accumulation" if self.library is None else "math library"
        terms = {"rounding": c.c_out * unit, summed: magnitude}
        if self.terms:
            terms[f"partial sums of {self.terms} terms"] = c.c_length * self.u_acc * math.sqrt(self.terms) * size
        if "structural" in self.answers:
            terms["rounded intermediates"] = c.c_round * self.answer("structural", at)
        if "spread" in self.answers:
            terms["conditioning"] = c.c_spread * self.answer("spread", at)
        if "low" in self.answers:
            terms[f"the CPU's {self.fmt.name} kernel"] = c.c_low * self.answer("low", at)
        return error, unit, terms

    def answer(self, name: str, at: slice | np.ndarray) -> np.ndarray:
        return self.answers[name][at]

    def answered(self, name: str, values: np.ndarray) -> None:
        """Keep an extra run's answer as its magnitude, NaN and inf made 0: once, not at each look
        (a run's magnitudes are nonnegative and finite but where one overflowed)."""
        if not finite_nonnegative(values):
            values = np.abs(values)
            values[~np.isfinite(values)] = 0.0
        self.answers[name] = values

    def ratios(
        self, t: np.ndarray, b: np.ndarray, at: slice | np.ndarray, finite: bool = False
    ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(error, budget, error / budget) of the elements `at`, as `elements` has them."""
        error, _, terms = self.elements(t, b, at, finite)
        parts = iter(terms.values())
        total = next(parts)  # a fresh array: the terms summed into it in their order, as sum() would
        for part in parts:
            total += part
        # total > 0 (the rounding term is), so error / total is 0 where the error is
        with np.errstate(over="ignore", invalid="ignore"):  # inf: far over a subnormal budget
            return error, total, np.divide(error, total)

    def lows(self, t: np.ndarray, b: np.ndarray, at: slice, scale: float) -> tuple[np.ndarray, np.ndarray, float]:
        """(|t - b|, `scale` times a lower bound of each element's budget, the largest |b|), in about
        half the passes of the budget and no division: an element whose error is at most its scaled
        bound is under `scale` times its budget.

        The ULP at |b| is more than |b| 2^-(p+1) (p the mantissa bits) where |b| is within the
        format, and the runs' other terms only add. Where a magnitude is answered and its term
        outweighs the ULP's share (fp32, fp64), that term alone: a third of the passes, and a
        bound beyond the format's range too (the largest |b| is then not looked for: 0). Shrunk by 2^-30
        against the rounding of either sum; not a bound where |b| is beyond the format's largest
        value or t or b is not finite (NaN or inf there)."""
        error = np.subtract(t, b)
        np.abs(error, out=error)
        scale *= 1 - 2.0**-30
        per_ulp, per_length, per_magnitude = self.shares()
        if "magnitude" in self.answers and per_ulp < per_magnitude:
            # c_acc u_acc M alone: max(|b|, M) is at least M, and the terms' magnitude is mostly
            # far above |b| where it was asked (what the output cancelled).
            return error, np.multiply(self.answer("magnitude", at), per_magnitude * scale, dtype=np.float64), 0.0
        size = np.abs(b)
        widest = float(size.max(initial=0.0))
        per_size = per_ulp + per_length
        if "magnitude" in self.answers:
            low = size * (per_size * scale)
            magnitude = np.maximum(size, self.answer("magnitude", at), out=size)
            magnitude *= per_magnitude * scale
            low += magnitude
        else:
            low = size * ((per_size + per_magnitude) * scale)
        return error, low, widest

    def ceilings_of(self, seen: BlockErrors) -> np.ndarray:
        """Each block's largest ratio at most, from the metrics' pass: the budget is at least
        |b| (2^-(p+1) c_out + (c_acc + c_length sqrt K) u_acc) (the ULP is more than |b| 2^-(p+1)
        where |b| is within the format, the runs' other terms only add), so a ratio is at most
        the block's largest |t - b| / |b| over that factor (where b is 0 the pass found t to be
        0: the ratio is 0). Without the ULP's share where the block's |b| may be beyond the
        format; inf where the pass found no such bound. Shrunk by 2^-30 against the rounding of
        either side."""
        per_ulp, per_length, per_magnitude = self.shares()
        per_size = per_magnitude + per_length
        within = np.asarray(seen.bench_norm) <= self.fmt.largest
        factor = np.where(within, per_size + per_ulp, per_size) * (1 - 2.0**-30)
        return np.asarray(seen.relative) / factor

    def shares(self) -> tuple[float, float, float]:
        """The budget's least shares, per unit of |b| (the ULP's, more than |b| 2^-(p+1) within the
        format, and the length term's) and per unit of the magnitude max(|b|, M) (accumulation's):
        what `lows` and `ceilings_of` bound the budget by."""
        c = self.constants
        per_ulp = c.c_out * 2.0 ** -(self.fmt.mantissa_bits + 1)
        per_length = c.c_length * self.u_acc * math.sqrt(self.terms) if self.terms else 0.0
        return per_ulp, per_length, (c.c_acc if self.library is None else 2 * self.library) * self.u_acc

    def worst(self, t: np.ndarray, b: np.ndarray, stop_over: bool = False) -> _Worst:
        """The worst element (np.argmax's choice: the first largest); with stop_over, only whether
        one is over its budget where one is.

        With ceilings, the blocks are looked at from the highest ceiling down, until one under 1
        and under the worst ratio so far: no element after it is over its budget or worse. The
        first block looked at has its whole budget computed. In the others, the budget is
        computed only where the error reaches `lows`' bound scaled by the least that matters (the
        worst so far, at most 1): only there can an element be over its budget or worse; none,
        and the block is passed by. Where that is over an eighth of the block (bf16's and fp16's
        loose rounding share), or the bound does not hold (|b| beyond the format), the whole
        block's budget is computed."""
        starts = block_starts(t.size)
        ceilings = self.ceilings
        if ceilings is not None:
            order = np.argsort(-ceilings, kind="stable")
            starts, ceilings = starts[order], ceilings[order]
        best: tuple[int, float] | None = None
        over = 0
        for j, start in enumerate(int(s) for s in starts):
            if (
                ceilings is not None
                and best is not None
                and ceilings[j] < 1
                and not _first_max(best, start, ceilings[j])
            ):
                break  # the blocks left are no higher, and start later where as high
            t_block, b_block = block_at(start, t, b)
            at = slice(start, start + t_block.size)
            if best is not None:
                with np.errstate(invalid="ignore", over="ignore"):
                    error, low, widest = self.lows(t_block, b_block, at, min(1.0, best[1]))
                    # A bound is above its ratio (shrunk), so a tie with the worst so far is at 0 alone:
                    # no error, in a block after it (ceilings of 0 come in order). NaN is left out:
                    # where t or b is not finite nothing is compared (ratio 0), answers are finite.
                    where = np.flatnonzero(np.greater(error, low))
                if widest <= self.fmt.largest and where.size <= t_block.size // 8:
                    if where.size:
                        error, total, found = self.ratios(t_block[where], b_block[where], start + where)
                        w = int(np.argmax(found))
                        if stop_over and not found[w] <= 1:
                            return _Worst(start + int(where[w]), float(found[w]), 0, partial=True)
                        if _first_max(best, start + int(where[w]), float(found[w])):
                            best = start + int(where[w]), float(found[w])
                        over += int(np.count_nonzero(error > total))
                    continue
            error, total, ratios = self.ratios(t_block, b_block, at, finite=True)
            i = int(np.argmax(ratios))
            if not math.isfinite(ratios[i]):  # a NaN or inf in t or b makes its ratio NaN or inf: leave them out
                error, total, ratios = self.ratios(t_block, b_block, at)
                i = int(np.argmax(ratios))
            if stop_over and not ratios[i] <= 1:
                return _Worst(start + i, float(ratios[i]), 0, partial=True)
            if best is None or _first_max(best, start + i, float(ratios[i])):
                best = start + i, float(ratios[i])
            if ratios[i] >= 1:  # error > total makes error / total at least 1
                over += int(np.count_nonzero(error > total))
        index, ratio = best or (0, 0.0)
        return _Worst(index, ratio, over)


def _first_max(best: tuple[int, float], index: int, ratio: float) -> bool:
    """Whether (index, ratio) comes before the worst so far as np.argmax would choose over the
    whole output: a larger ratio, or the same at a lower index (blocks are looked at in any
    order; a ratio is never NaN: the bounds' NaN look at the whole block, which leaves NaN out)."""
    return ratio > best[1] or (ratio == best[1] and index < best[0])
