"""The 8-bit floating-point formats, each as its definition gives it: float8 and HiFloat8.

The constants are the formats' own, none tuned:

- float8_e4m3fn and float8_e5m2: the OCP 8-bit floating point specification (OFP8, rev. 1.0,
  2023), which torch.float8_e4m3fn and torch.float8_e5m2 follow. E4M3: bias 7, 3 mantissa bits,
  smallest normal 2^-6, subnormals down to 2^-9, largest finite 448 = 1.75 x 2^8 (S.1111.111 is
  NaN, the only one: no infinity). E5M2: IEEE 754's layout, bias 15, 2 mantissa bits, smallest
  normal 2^-14, subnormals down to 2^-16, largest finite 57344 = 1.75 x 2^15, inf S.11111.00 and
  NaN S.11111.{01,10,11}.
- float8_e4m3fnuz and float8_e5m2fnuz (LLVM's Float8E4M3FNUZ and Float8E5M2FNUZ, torch's
  dtypes of those names): bias 8 and 16, no infinity, no negative zero, one NaN at 0x80. e4m3fnuz:
  smallest normal 2^-7, subnormals down to 2^-10, largest 240 = 1.875 x 2^7; e5m2fnuz: smallest
  normal 2^-15, subnormals down to 2^-17, largest 57344.
- HiFloat8 (Luo et al., "Ascend HiFloat8 Format for Deep Learning", arXiv:2409.16626; decoded so
  by MindSpore's hifloat8.h, and tapered so by msprobe's fp8 ULP error, calc_ulp_err_fp8; msprobe's
  msaccucmp decoder, conversion/dtype_conversion.py, reads the 49 encodings of D = 0 and D = 1
  otherwise, 0x08 as 1.25 where MindSpore's `true_value` 0x08 is 1.0): a sign,
  a prefix code (the "dot") giving the exponent's width D, the exponent in sign-magnitude with an
  implicit leading 1, the rest mantissa. The mantissa tapers with the exponent: 3 bits for
  |e| <= 3, 2 for 4 <= |e| <= 7, 1 for 8 <= |e| <= 15; below 2^-15 the denormals 2^-22 ... 2^-16
  (one value a binade); largest finite 2^15 (0x6F, e = 15 with mantissa 1, is inf); NaN 0x80;
  one zero. msprobe's dumps name it `torch_npu.HiFloat8Tensor` (PyTorch) and `HiFloat8` (MindSpore).

budget.format_of does not know them: formats8.format_of does (the dtype standard's lookup).

What a cast does beyond the largest finite value is the caller's: torch 2.13's CPU cast (measured,
tests/test_fp8.py) saturates into e4m3fn (inf too: +-448), gives inf in e5m2 and NaN in the fnuz
formats, each after rounding to nearest, ties to even. `Float8.cast` models exactly that;
`rounded` keeps Format's meaning (to nearest, ties to even, overflow to the format's own).

Numpy only: the values arrive as float64 (torch's float8 dtypes widen exactly).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from .budget import Format
from .budget import format_of as binary_format_of

SATURATE = "saturate"  # +-largest
INF = "inf"
NAN = "nan"


def _exponents(values: np.ndarray) -> np.ndarray:
    """floor(log2 |values|) of finite nonzero values (np.frexp's exponent less 1); 0 elsewhere."""
    _, exponent = np.frexp(np.abs(values))
    return exponent.astype(np.int64) - 1


@dataclass(frozen=True)
class Float8(Format):
    """A float8 format: Format's spacing (mantissa bits, smallest normal exponent, subnormals), and
    its own largest finite value, infinity, negative zero and what torch's cast gives beyond it."""

    max_finite: float = 0.0
    infinity: bool = True  # has inf (e5m2); else an overflow is NaN or saturates
    negative_zero: bool = True  # fnuz: -0 is the NaN encoding, a negative value rounding to 0 gives +0
    cast_overflow: str = INF  # what torch's CPU cast gives beyond the largest finite value

    @property
    def largest(self) -> float:
        return self.max_finite

    def rounded(self, values: np.ndarray) -> np.ndarray:
        """float64 values rounded to this format, to nearest with ties to even, beyond the largest
        finite value the format's own overflow: inf where it has one, else NaN."""
        return self.cast(values, INF if self.infinity else NAN)

    def cast(self, values: np.ndarray, overflow: str | None = None) -> np.ndarray:
        """float64 values as a cast into this format gives them: to nearest, ties to even (at the
        smallest normal exponent's spacing below it: the subnormals), then what is beyond the
        largest finite value (inf included) as `overflow` says (SATURATE, INF or NAN; torch's
        CPU cast by default). NaN stays NaN."""
        overflow = overflow or self.cast_overflow
        given = np.asarray(values, dtype=np.float64)
        values = given.reshape(-1)
        with np.errstate(invalid="ignore", over="ignore"):
            exponent = np.maximum(_exponents(values), self.min_exponent) - self.mantissa_bits
            step = np.ldexp(1.0, exponent)
            out = np.round(values / step) * step  # the quotient is exact; np.round rounds half to even
            beyond = np.abs(out) > self.largest  # inf included; NaN is not
            out[beyond] = _overflowed(values[beyond], self.largest, overflow)
        if not self.negative_zero:
            out[out == 0] = 0.0
        return out.reshape(given.shape)

    def cast_rule(self) -> str:
        """How a cast into it rounds, for a message."""
        beyond = {SATURATE: "saturated", INF: "inf", NAN: "NaN"}[self.cast_overflow]
        return f"to nearest (ties to even), beyond +-{self.largest:g} {beyond}"

    def values(self) -> np.ndarray:
        """Every finite value of the format, ascending (for the tests: 2 x 2^(e+m) of them or so)."""
        top = self.max_exponent
        grid = [np.arange(0, 1 << self.mantissa_bits) * math.ldexp(1.0, self.min_exponent - self.mantissa_bits)]
        for e in range(self.min_exponent, top + 1):
            grid.append((1 + np.arange(1 << self.mantissa_bits) / (1 << self.mantissa_bits)) * math.ldexp(1.0, e))
        positive = np.concatenate(grid)
        positive = positive[positive <= self.largest]
        return np.concatenate([-positive[:0:-1], positive])


# The mantissa bits of HiFloat8 by |exponent| (0 ... 15): the taper.
_HIF8_MANTISSA = np.array([3, 3, 3, 3, 2, 2, 2, 2, 1, 1, 1, 1, 1, 1, 1, 1])
HIF8_SMALLEST = -22  # the exponent of its smallest value (the denormals 2^-22 ... 2^-16)
HIF8_NORMAL = -15  # the smallest exponent with a mantissa


@dataclass(frozen=True)
class HiFloat8(Format):
    """HiFloat8: its spacing and rounding from its tapered mantissa (see the module docstring).

    Format's fields as the budget reads them: mantissa_bits 3, the widest (the ULP at |b| is more
    than |b| 2^-4 wherever |b| is within the format, as the budget's bounds assume); min_exponent
    -19, so that 2^(min_exponent - mantissa_bits) is its smallest value, 2^-22, as for the binary
    formats; max_exponent 15."""

    @property
    def largest(self) -> float:
        return math.ldexp(1.0, self.max_exponent)

    def spacing(self, values: np.ndarray) -> np.ndarray:
        """The ULP at |values| once rounded: 2^(e - m(e)) with the tapered m, 2^e among the
        denormals (one value a binade), 2^-22 at 0; 1 for inf and NaN (never compared)."""
        rounded = self.rounded(values)
        exponent = _exponents(rounded)
        mantissa = _HIF8_MANTISSA[np.clip(np.abs(exponent), 0, 15)]
        mantissa = np.where(exponent < HIF8_NORMAL, 0, mantissa)
        exponent = np.maximum(exponent, HIF8_SMALLEST)
        spacing = np.ldexp(1.0, exponent - mantissa)
        spacing[~np.isfinite(rounded)] = 1.0
        spacing[rounded == 0] = math.ldexp(1.0, HIF8_SMALLEST)
        return spacing

    def rounded(self, values: np.ndarray, overflow: str = INF) -> np.ndarray:
        """float64 values rounded to HiFloat8, to nearest, ties away from zero (the paper's "TA"),
        among the denormals to the nearest power of two (ties up) and below 2^-22 to 0 or
        2^-22; beyond the largest finite value inf (or as `overflow` says)."""
        given = np.asarray(values, dtype=np.float64)
        values = given.reshape(-1)
        size = np.abs(values)
        with np.errstate(invalid="ignore", over="ignore", divide="ignore"):
            exponent = _exponents(values)
            mantissa = _HIF8_MANTISSA[np.clip(np.abs(exponent), 0, 15)]
            step = np.ldexp(1.0, exponent - mantissa)
            out = np.floor(size / step + 0.5) * step
            # The denormals: 2^k or 2^(k+1), whichever is nearer (1.5 x 2^k the tie); below 2^-22, 0 or 2^-22.
            low = size < math.ldexp(1.0, HIF8_NORMAL)
            power = np.ldexp(1.0, np.maximum(exponent, HIF8_SMALLEST))
            nearer = np.where(size >= 1.5 * power, 2 * power, power)
            nearer = np.where(size < math.ldexp(1.0, HIF8_SMALLEST - 1), 0.0, nearer)
            out = np.where(low, nearer, out)
            out = np.copysign(out, values)
            beyond = size > self.largest
            beyond &= np.abs(out) > self.largest
            out[beyond] = _overflowed(values[beyond], self.largest, overflow)
        out[out == 0] = 0.0
        return out.reshape(given.shape)

    def cast_rule(self) -> str:
        """How a cast into it rounds, for a message."""
        return f"to nearest (ties away from zero), beyond +-{self.largest:g} inf"

    def values(self) -> np.ndarray:
        """Every finite value of HiFloat8, ascending."""
        positive = [math.ldexp(1.0, k) for k in range(HIF8_SMALLEST, HIF8_NORMAL)]
        for e in range(HIF8_NORMAL, self.max_exponent + 1):
            m = int(_HIF8_MANTISSA[abs(e)])
            positive += [(1 + i / (1 << m)) * math.ldexp(1.0, e) for i in range(1 << m)]
        grid = np.array([p for p in positive if p <= self.largest])
        return np.concatenate([-grid[::-1], [0.0], grid])


# By the names dumps give them (the part after the last dot, lower case): torch's, msprobe's
# PyTorch HiFloat8 type (torch_npu.HiFloat8Tensor) and MindSpore's (Float8E4M3FN, HiFloat8).
EIGHT_BIT: dict[str, Format] = {
    "float8_e4m3fn": Float8("e4m3fn", 3, -6, 8, max_finite=448.0, infinity=False, cast_overflow=SATURATE),
    "float8_e5m2": Float8("e5m2", 2, -14, 15, max_finite=57344.0, cast_overflow=INF),
    "float8_e4m3fnuz": Float8(
        "e4m3fnuz", 3, -7, 7, max_finite=240.0, infinity=False, negative_zero=False, cast_overflow=NAN
    ),
    "float8_e5m2fnuz": Float8(
        "e5m2fnuz", 2, -15, 15, max_finite=57344.0, infinity=False, negative_zero=False, cast_overflow=NAN
    ),
    "hifloat8": HiFloat8("hif8", 3, HIF8_SMALLEST + 3, 15),
}
EIGHT_BIT["float8e4m3fn"] = EIGHT_BIT["float8_e4m3fn"]  # MindSpore's spelling
EIGHT_BIT["float8e5m2"] = EIGHT_BIT["float8_e5m2"]
EIGHT_BIT["hifloat8tensor"] = EIGHT_BIT["hifloat8"]  # torch_npu.HiFloat8Tensor


def format_of(dtype: str) -> Format | None:
    """budget.format_of, the 8-bit formats too ("torch.float8_e4m3fn", "torch_npu.HiFloat8Tensor").
    (They are kept here, not in budget.FORMATS: budget.py is run standalone by repro.py, which
    has no 8-bit formats yet.)"""
    return binary_format_of(dtype) or EIGHT_BIT.get(dtype.rsplit(".", 1)[-1].lower())


def is_eight_bit(fmt: Format) -> bool:
    return isinstance(fmt, (Float8, HiFloat8))


def cast_rule(fmt: Format) -> str:
    """How a cast into an 8-bit format rounds ("to nearest (ties to even), beyond +-448 saturated")."""
    return fmt.cast_rule() if isinstance(fmt, (Float8, HiFloat8)) else "to nearest (ties to even)"


def _overflowed(values: np.ndarray, largest: float, overflow: str) -> np.ndarray | float:
    """What a cast gives the values beyond the largest finite one: +-largest (saturating), +-inf or NaN."""
    if overflow == SATURATE:
        return np.copysign(largest, values)
    if overflow == INF:
        return np.copysign(np.inf, values)
    return np.nan
