"""The per-element judgement that bench/studies/kernel_bounds.md recommends, in numpy alone.

Each element of an output is judged against what a correct kernel could do at that element:

    budget_i = c_out * ulp_i  +  c_acc * u_acc * m_i  +  c_spread * S_i  +  c_low * L_i

    ulp_i  the spacing of the tested dtype at the correctly rounded benchmark (the subnormal spacing
           below the normal range): the final rounding (0.5) and a 1-ULP math library (1)
    m_i    max(|b_i|, M_i): the magnitude of the terms a correct kernel rounds at fp32 (u_acc = 2^-24),
           M from the "abs" probe (the API on |inputs|, grad_outputs included: |A||B|, sum |x|) for sums
           and products, from the API's magnitude formula for softmax, layer_norm and gelu, else |b_i|
    S_i    max over the seeds of |b(inputs x (1 + u_acc r)) - b_i|, r = +-1 at random: conditioning,
           for the APIs that are not sums or products
    L_i    |the API on the CPU in the tested dtype - b_i|, bf16/fp16 only: what PyTorch's own kernel
           rounds in that dtype (saved activations, scalars like alpha, partial sums)

ratio = max_i |t_i - b_i| / budget_i: pass at most 1, warning at most `band` (2), error beyond. The
ratio's maximum does not depend on the order of the elements. Probes are only needed for outputs that
fail the strict budget (no probes: m_i = |b_i|), see `needs_probes`.

Constants from the study (`python -m bench.studies.kernel_bounds`): c_out 1.5, c_acc 32, c_spread 8,
c_low 2, band 2.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

PASS, WARNING, ERROR = "pass", "warning", "error"
U_ACC = 2.0**-24  # fp32 accumulation, as the cube unit and tensor cores do for fp16/bf16/fp32


@dataclass(frozen=True)
class Format:
    name: str
    mantissa_bits: int  # explicit fraction bits
    min_exponent: int  # exponent of the smallest normal number
    max_exponent: int

    @property
    def eps(self) -> float:
        return math.ldexp(1.0, -self.mantissa_bits)

    @property
    def tiny(self) -> float:
        return math.ldexp(1.0, self.min_exponent)

    @property
    def accumulation(self) -> float:
        """u_acc: fp32 accumulation for fp32 and narrower formats, fp64's own for fp64."""
        return min(U_ACC, self.eps / 2)


FORMATS = {
    "bfloat16": Format("bf16", 7, -126, 127),
    "float16": Format("fp16", 10, -14, 15),
    "float32": Format("fp32", 23, -126, 127),
    "float64": Format("fp64", 52, -1022, 1023),
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

# Sums and products: every floating input enters linearly, so the API on |inputs| is the magnitude of
# the terms its kernel adds (matmul: |A||B|; sum: sum |x|).
SUMS_AND_PRODUCTS: frozenset[str] = frozenset(
    {
        "linear",
        "matmul",
        "__matmul__",
        "mm",
        "bmm",
        "baddbmm",
        "addmm",
        "conv1d",
        "conv2d",
        "conv3d",
        "einsum",
        "mean",
        "sum",
        "embedding",
        "add",
        "__add__",
        "add_",
        "sub",
        "__sub__",
        "mul",
        "__mul__",
        "cat",
        "masked_fill",
    }
)
# APIs whose formula subtracts: the magnitude comes from the formula with every difference made a sum.
MAGNITUDE_FORMULA: frozenset[str] = frozenset({"softmax", "layer_norm", "gelu"})


def format_of(dtype: str) -> Format | None:
    """The format of a dtype in torch or short spelling ("torch.bfloat16", "bf16"); None without one."""
    name = dtype.rsplit(".", 1)[-1].lower()
    return FORMATS.get(_ALIASES.get(name, name))


def rounded(values: np.ndarray, fmt: Format) -> np.ndarray:
    """values (float64) rounded to the format, to nearest with ties to even, subnormals included."""
    values = np.asarray(values, dtype=np.float64)
    _, exponent = np.frexp(np.abs(values))  # |v| = m 2^e, 0.5 <= m < 1
    spacing = np.ldexp(1.0, np.maximum(exponent - 1, fmt.min_exponent) - fmt.mantissa_bits)
    out = np.round(values / spacing) * spacing  # np.round: half to even; the quotient is exact
    largest = (2 - fmt.eps) * math.ldexp(1.0, fmt.max_exponent)
    return np.where(np.abs(out) > largest, np.copysign(np.inf, values), np.where(values == 0, values, out))


def ulp(values: np.ndarray, fmt: Format) -> np.ndarray:
    """The spacing of the format at |values| (the subnormal spacing below the normal range)."""
    _, exponent = np.frexp(np.maximum(np.abs(values), fmt.tiny))
    return np.ldexp(1.0, exponent - 1 - fmt.mantissa_bits)


@dataclass(frozen=True)
class Constants:
    c_out: float = 1.5
    c_acc: float = 32.0
    c_spread: float = 8.0
    c_low: float = 2.0
    band: float = 2.0  # warning up to band x the budget


@dataclass(frozen=True)
class Probes:
    """What the lazily computed probes answered, float64 arrays of the output's shape (None: not asked)."""

    magnitude: np.ndarray | None = None  # M: the abs probe, or the API's magnitude formula
    perturbed: Sequence[np.ndarray] = ()  # the benchmark on inputs x (1 + u_acc r), one per seed
    low: np.ndarray | None = None  # the API's output on the CPU in the tested dtype


def probes_for(api: str, dtype: str) -> tuple[str, ...]:
    """The probes the rule asks for an API's outputs ("Torch.matmul", "matmul"), once they fail the
    strict budget: abs for sums and products, the magnitude formula and the perturbed benchmark for
    the rest, and the API in the tested dtype for bf16/fp16."""
    name = api.rsplit(".", 1)[-1] if api.count(".") < 2 else api.split(".")[1]
    wanted: tuple[str, ...] = (
        ("abs",)
        if name in SUMS_AND_PRODUCTS
        else (("formula", "perturbed") if name in MAGNITUDE_FORMULA else ("perturbed",))
    )
    fmt = format_of(dtype)
    return wanted + (("low",) if fmt is not None and fmt.mantissa_bits < 23 else ())


@dataclass(frozen=True)
class Judgement:
    status: str  # pass, warning, error
    ratio: float  # the worst element's error over its budget
    index: tuple[int, ...] | None  # the worst element
    tested: float | None
    bench: float | None
    budget: float | None
    message: str


@dataclass(frozen=True)
class Budget:
    """The parts of each element's budget, for the message."""

    rounding: np.ndarray
    accumulation: np.ndarray
    conditioning: np.ndarray
    low_kernel: np.ndarray

    @property
    def total(self) -> np.ndarray:
        return self.rounding + self.accumulation + self.conditioning + self.low_kernel


def budget(bench: np.ndarray, dtype: str, probes: Probes = Probes(), constants: Constants = Constants()) -> Budget:
    fmt = _format(dtype)
    bench = np.asarray(bench, dtype=np.float64)
    unit = ulp(rounded(bench, fmt), fmt)
    magnitude = np.abs(bench)
    if probes.magnitude is not None:
        magnitude = np.maximum(magnitude, _finite(np.abs(probes.magnitude)))
    zero = np.zeros_like(bench)
    spread = zero
    for other in probes.perturbed:
        spread = np.maximum(spread, _finite(np.abs(np.asarray(other, dtype=np.float64) - bench)))
    low = (
        zero
        if probes.low is None or fmt.mantissa_bits >= 23
        else _finite(np.abs(np.asarray(probes.low, dtype=np.float64) - bench))
    )
    return Budget(
        constants.c_out * unit,
        constants.c_acc * fmt.accumulation * magnitude,
        constants.c_spread * spread,
        constants.c_low * low,
    )


def needs_probes(tested: np.ndarray, bench: np.ndarray, dtype: str, constants: Constants = Constants()) -> bool:
    """Whether the output fails the strict budget (no probes: m = |b|): only then are probes asked."""
    return judge(tested, bench, dtype, Probes(), constants).status != PASS


def judge(
    tested: np.ndarray, bench: np.ndarray, dtype: str, probes: Probes = Probes(), constants: Constants = Constants()
) -> Judgement:
    """Judge one output: tested (the kernel's output) and bench (float64) of the same shape."""
    fmt = _format(dtype)
    t = np.asarray(tested, dtype=np.float64)
    b = np.asarray(bench, dtype=np.float64)
    if t.shape != b.shape:
        raise ValueError(f"tested has shape {t.shape}, bench {b.shape}")
    nonfinite = ~np.isfinite(t) | ~np.isfinite(b)
    misplaced = nonfinite & ~((t == b) | (np.isnan(t) & np.isnan(b)))
    if misplaced.any():
        where = _index(int(np.argmax(misplaced)), b.shape)
        return Judgement(
            ERROR,
            math.inf,
            where,
            float(t[where]),
            float(b[where]),
            None,
            f"{fmt.name}: tested {t[where]:.8g} where the bench has {b[where]:.8g}, at [{_at(where)}]",
        )
    if not b.size:
        return Judgement(PASS, 0.0, None, None, None, None, f"within budget ({fmt.name}): no elements")
    parts = budget(b, dtype, probes, constants)
    with np.errstate(divide="ignore", invalid="ignore"):
        error = np.where(nonfinite, 0.0, np.abs(t - b))
        ratio = np.where(error > 0, error / parts.total, 0.0)
    worst = int(np.argmax(ratio))
    where = _index(worst, b.shape)
    value = float(ratio.flat[worst])
    status = PASS if value <= 1 else WARNING if value <= constants.band else ERROR
    unit = float(ulp(rounded(b.flat[worst : worst + 1], fmt), fmt)[0])
    message = _message(
        status,
        value,
        where,
        float(t.flat[worst]),
        float(b.flat[worst]),
        unit,
        parts,
        worst,
        fmt,
        constants,
        int(np.count_nonzero(ratio > 1)),
        ratio.size,
    )
    return Judgement(
        status, value, where, float(t.flat[worst]), float(b.flat[worst]), float(parts.total.flat[worst]), message
    )


def _message(
    status: str,
    value: float,
    where: tuple[int, ...],
    t: float,
    b: float,
    unit: float,
    parts: Budget,
    i: int,
    fmt: Format,
    constants: Constants,
    over: int,
    size: int,
) -> str:
    allowed = float(parts.total.flat[i])
    names = (
        ("rounding", parts.rounding),
        ("fp32 accumulation", parts.accumulation),
        ("conditioning", parts.conditioning),
        (f"the CPU's {fmt.name} kernel", parts.low_kernel),
    )
    shares = ", ".join(f"{name} {float(array.flat[i]) / unit:.3g}" for name, array in names if array.flat[i] > 0)
    budget_text = f"budget {allowed / unit:.3g} ULP ({shares})"
    off = abs(t - b) / unit
    if status == PASS:
        return f"within budget ({fmt.name}): worst element at {value:.2g} of its budget, at [{_at(where)}]"
    head = (
        f"{fmt.name}: element [{_at(where)}] is {off:.3g} ULP off (tested {t:.8g}, bench {b:.8g}), "
        f"{value:.3g}x its {budget_text}"
    )
    if status == WARNING:
        return f"{head}, within the warning band {constants.band:g}x"
    return f"{head}; {over} of {size} elements over budget"


def _format(dtype: str) -> Format:
    fmt = format_of(dtype)
    if fmt is None:
        raise ValueError(f"no floating format for {dtype!r}")
    return fmt


def _finite(values: np.ndarray) -> np.ndarray:
    return np.where(np.isfinite(values), values, 0.0)


def _index(flat: int, shape: tuple[int, ...]) -> tuple[int, ...]:
    return tuple(int(i) for i in np.unravel_index(flat, shape)) if shape else ()


def _at(where: tuple[int, ...]) -> str:
    return ", ".join(str(i) for i in where)
