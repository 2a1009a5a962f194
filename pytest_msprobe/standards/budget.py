"""What a correct kernel may get wrong at each element of an output: the dtype standard's budget.

    budget_i = c_out ulp_i  +  c_acc u_acc m_i  +  c_spread S_i  +  c_low L_i

    ulp_i   the spacing of the tested dtype at the correctly rounded benchmark (the subnormal
            spacing below the normal range): the final rounding (0.5) and a 1-ULP math library (1)
    m_i     max(|b_i|, M_i): the magnitude of the terms a correct kernel rounds at fp32 (u_acc =
            2^-24, as Ascend's cube unit and CUDA's tensor cores accumulate fp16/bf16/fp32): M is
            the benchmark on |inputs| for sums and products (|A||B|, sum |x|), the API's formula
            on magnitudes for softmax, layer_norm and gelu, else |b_i| alone
    S_i     max over seeds of |b(inputs x (1 + u_acc r)) - b_i|, r = +-1 at random: what the
            computation's conditioning makes of intermediate rounding, for what is not a sum
    L_i     |the API on the CPU in the tested dtype - b_i|, bf16/fp16 only: what PyTorch's own
            kernels round in that dtype (saved activations, scalars, partial sums)

An output's ratio is its worst element's error over that element's budget: pass up to 1, a
warning up to 2 (a narrow band: no deficit of the study lands in it beyond separation 4), an
error beyond. M, S and L cost extra benchmark runs: they are asked one by one,
only while the output is still over its budget, which gives the verdict all of them would give
(every term only adds).

The constants come from bench/studies/kernel_bounds.md: 314 correct outputs of real GPT dumps
in fp32, bf16 and fp16 and 736 correct-but-different kernels pass (worst ratio 0.67), every
TF32/HF32 operand, fp16/bf16 accumulation, tanh GELU, missing gradient term and softmax summed
low of separation above 8 is an error. Numpy only; dtypes arrive in torch spelling.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Callable

import numpy as np

from ..compare import ExtraRuns

U_ACC = 2.0**-24  # fp32 accumulation


@dataclass(frozen=True)
class Format:
    """A binary floating-point format, as far as its spacing goes."""

    name: str  # "bf16"
    mantissa_bits: int  # explicit fraction bits
    min_exponent: int  # exponent of the smallest normal number
    max_exponent: int

    @property
    def unit_roundoff(self) -> float:
        return math.ldexp(1.0, -self.mantissa_bits - 1)

    @property
    def accumulation(self) -> float:
        """u_acc of a correct kernel: fp32 accumulation for fp32 and narrower, fp64's own for fp64."""
        return min(U_ACC, self.unit_roundoff)

    def spacing(self, values: np.ndarray) -> np.ndarray:
        """The ULP at |values| once rounded to this format (the subnormal spacing below the normal range)."""
        rounded = np.abs(self.rounded(values))
        _, exponent = np.frexp(rounded)  # |v| = m 2^e, 0.5 <= m < 1; frexp(0) is (0, 0): 0 is below the normal range
        exponent = np.where(rounded == 0, self.min_exponent, exponent)
        return np.ldexp(1.0, np.maximum(exponent - 1, self.min_exponent) - self.mantissa_bits)

    def rounded(self, values: np.ndarray) -> np.ndarray:
        """float64 values rounded to this format, to nearest with ties to even, subnormals included."""
        values = np.asarray(values, dtype=np.float64)
        _, exponent = np.frexp(np.abs(values))
        step = np.ldexp(1.0, np.maximum(exponent - 1, self.min_exponent) - self.mantissa_bits)
        out = np.round(values / step) * step  # the quotient is exact; np.round rounds half to even
        largest = (2 - math.ldexp(1.0, -self.mantissa_bits)) * math.ldexp(1.0, self.max_exponent)
        return np.where(np.abs(out) > largest, np.copysign(np.inf, values), out)


FORMATS = {
    "bfloat16": Format("bf16", 7, -126, 127),
    "float16": Format("fp16", 10, -14, 15),
    "float32": Format("fp32", 23, -126, 127),
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
    band: float = 2.0  # a warning up to this many times the budget


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
) -> Reading:
    """The output against its budget, asking the extra runs one by one while it is over it.

    tested and bench: the same shape, finite where compared (NaN and inf are judged before:
    compare.compare). accumulation: u_acc where the user declared a coarser one (an allowance).
    """
    t = np.asarray(tested, dtype=np.float64)
    b = np.asarray(bench, dtype=np.float64)
    finite = np.isfinite(t) & np.isfinite(b)
    with np.errstate(invalid="ignore", over="ignore"):  # inf - inf where both are inf: not compared
        error = np.where(finite, np.abs(t - b), 0.0)
    u_acc = max(fmt.accumulation, accumulation or 0.0)
    unit = fmt.spacing(b)
    magnitude = np.abs(np.where(finite, b, 0.0))
    terms = {"rounding": constants.c_out * unit, "fp32 accumulation": constants.c_acc * u_acc * magnitude}
    asked: list[str] = []
    # Each cheaper answer first: it is at most the full one, so stopping after it gives the same verdict.
    asks: list[tuple[str, Callable[[], np.ndarray | None]]] = [
        ("magnitude", extra.lower_magnitude),
        ("magnitude", extra.magnitude),
        ("spread", lambda: extra.spread_once(U_ACC)),
        ("spread", lambda: extra.spread(U_ACC)),
    ]
    if fmt.mantissa_bits < 23:
        asks.append(("low", extra.low))
    for name, ask in asks:
        if _worst(error, terms)[1] <= 1:
            break
        answer = ask()
        asked.append(name)
        if answer is None:
            continue
        answer = _finite(np.abs(np.asarray(answer, dtype=np.float64)))
        if name == "magnitude":
            terms["fp32 accumulation"] = constants.c_acc * u_acc * np.maximum(magnitude, answer)
        elif name == "spread":
            terms["conditioning"] = constants.c_spread * answer
        else:
            terms[f"the CPU's {fmt.name} kernel"] = constants.c_low * answer
    worst, ratio = _worst(error, terms)
    index = tuple(int(i) for i in np.unravel_index(worst, b.shape)) if b.shape else ()
    at_unit = float(unit.flat[worst]) if unit.size else 1.0
    parts = {name: float(values.flat[worst]) / at_unit for name, values in terms.items() if values.flat[worst] > 0}
    return Reading(
        fmt,
        ratio,
        index,
        float(t.flat[worst]) if t.size else 0.0,
        float(b.flat[worst]) if b.size else 0.0,
        float(error.flat[worst]) / at_unit if error.size else 0.0,
        parts,
        int(np.count_nonzero(error > sum(terms.values()))),
        int(b.size),
        tuple(asked),
    )


def _worst(error: np.ndarray, terms: dict[str, np.ndarray]) -> tuple[int, float]:
    if not error.size:
        return 0, 0.0
    total = sum(terms.values())
    with np.errstate(divide="ignore", invalid="ignore"):
        ratio = np.where(error > 0, error / total, 0.0)
    worst = int(np.argmax(ratio))
    return worst, float(ratio.flat[worst])


def _finite(values: np.ndarray) -> np.ndarray:
    return np.where(np.isfinite(values), values, 0.0)
