"""Block by block, the same values as whole arrays: the metrics, the dtype budget's reading, the ULP
and the random inputs drawn in place (blocks made tiny here, so that every output spans many).

The references below are the whole-array numpy expressions the block-by-block code replaced: a
row of a run must not change with the blocking, to the last digit. The cosine's dot products are
the one exception (their sum's order is the blocks'): it is held to the exact cosine instead.
"""

from __future__ import annotations

import math
from fractions import Fraction

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra.numpy import arrays

from pytest_msprobe.frameworks.torch_engine import CODEC
from pytest_msprobe.inputs import rebuild as inputs
from pytest_msprobe.inputs.rebuild import Rebuilder, random_array
from pytest_msprobe.judging import compare, reductions
from pytest_msprobe.judging.compare import ExtraRuns
from pytest_msprobe.judging.standards import budget
from pytest_msprobe.judging.standards.budget import FORMATS, Constants, read


@pytest.fixture(autouse=True)
def tiny_blocks(monkeypatch):
    monkeypatch.setattr(reductions, "BLOCK", 7)
    monkeypatch.setattr(inputs, "DRAW_BLOCK", 5)


# -- the whole-array references ------------------------------------------------


def reference_metrics(tested, bench):
    t = np.asarray(tested, dtype=np.float64).reshape(-1)
    b = np.asarray(bench, dtype=np.float64).reshape(-1)
    finite = np.isfinite(t) & np.isfinite(b)
    if not finite.all():
        t, b = t[finite], b[finite]
    if t.size == 0:
        return (None, 0.0, 0.0, None, None, None)
    diff = np.abs(t - b)
    worst = int(np.argmax(diff))
    abs_b = np.abs(b)
    with np.errstate(over="ignore"):
        rel = diff / np.where(abs_b == 0, compare.REL_EPS, abs_b)
    index = np.unravel_index(np.flatnonzero(finite)[worst], np.shape(tested)) if np.ndim(tested) else ()
    where = tuple(int(i) for i in index)
    return exact_cosine(t, b), float(diff[worst]), float(rel.max()), where, float(t[worst]), float(b[worst])


def exact_cosine(t, b):
    """The cosine in exact arithmetic (None where undefined), and the rounding float64 dot products
    of that many terms may add to it (gamma_n |t| |b| over |t| |b|, n the terms, and the square
    roots and the division)."""
    if t.size <= 1:
        return None
    t, b = ([Fraction(float(x)) for x in v] for v in (t, b))
    tb, tt, bb = (sum(x * y for x, y in zip(u, v)) for u, v in ((t, b), (t, t), (b, b)))
    if tt == 0 or bb == 0:
        return None
    return math.copysign(math.sqrt(tb * tb / (tt * bb)), 1 if tb >= 0 else -1), 4 * (len(t) + 4) * 2.0**-53


def same_cosine(found, expected):
    if expected is None or found is None:
        return found is None and expected is None
    value, rounding = expected
    return abs(found - value) <= rounding


def reference_spacing(fmt, values):
    def power(exponent):
        return np.ldexp(1.0, np.maximum(exponent - 1, fmt.min_exponent) - fmt.mantissa_bits)

    values = np.asarray(values, dtype=np.float64)
    _, exponent = np.frexp(np.abs(values))
    out = np.round(values / power(exponent)) * power(exponent)
    largest = (2 - math.ldexp(1.0, -fmt.mantissa_bits)) * math.ldexp(1.0, fmt.max_exponent)
    rounded = np.abs(np.where(np.abs(out) > largest, np.copysign(np.inf, values), out))
    exponent = np.frexp(rounded)[1]
    return power(np.where(rounded == 0, fmt.min_exponent, exponent))  # 0: the smallest subnormal spacing


def reference_read(tested, bench, fmt, extra, constants, accumulation):
    """budget.read as whole arrays (the terms, their sum, the ratio, np.argmax)."""
    t, b = np.asarray(tested, dtype=np.float64), np.asarray(bench, dtype=np.float64)
    finite = np.isfinite(t) & np.isfinite(b)
    with np.errstate(invalid="ignore", over="ignore"):
        error = np.where(finite, np.abs(t - b), 0.0)
    u_acc = max(fmt.accumulation, accumulation or 0.0)
    unit = reference_spacing(fmt, b)
    magnitude = np.abs(np.where(finite, b, 0.0))
    terms = {"rounding": constants.c_out * unit, "fp32 accumulation": constants.c_acc * u_acc * magnitude}
    k = extra.terms()
    if k:
        terms[f"partial sums of {k} terms"] = constants.c_length * u_acc * math.sqrt(k) * magnitude

    def worst():
        total = sum(terms.values())
        with np.errstate(divide="ignore", invalid="ignore"):
            ratio = np.where(error > 0, error / total, 0.0)
        i = int(np.argmax(ratio))
        return i, float(ratio.flat[i])

    asked = []
    asks = [
        ("magnitude", extra.magnitude),
        ("structural", extra.structural),
        ("spread", lambda: extra.spread(budget.U_ACC)),
    ]
    if fmt.mantissa_bits < 23:
        asks.append(("low", extra.low))
    for name, ask in asks:
        if worst()[1] <= 1:
            break
        answer = ask()
        asked.append(name)
        if answer is None:
            continue
        answer = np.abs(np.asarray(answer, dtype=np.float64))
        answer = np.where(np.isfinite(answer), answer, 0.0)
        if name == "magnitude":
            terms["fp32 accumulation"] = constants.c_acc * u_acc * np.maximum(magnitude, answer)
        elif name == "structural":
            terms["rounded intermediates"] = constants.c_round * answer
        elif name == "spread":
            terms["conditioning"] = constants.c_spread * answer
        else:
            terms[f"the CPU's {fmt.name} kernel"] = constants.c_low * answer
    i, ratio = worst()
    at_unit = float(unit.flat[i])
    parts = {name: float(values.flat[i]) / at_unit for name, values in terms.items() if values.flat[i] > 0}
    over = int(np.count_nonzero(error > sum(terms.values())))
    index = tuple(int(j) for j in np.unravel_index(i, b.shape))
    return ratio, index, float(t.flat[i]), float(b.flat[i]), float(error.flat[i]) / at_unit, parts, over, asked


# -- the metrics ---------------------------------------------------------------

special = st.sampled_from([0.0, -0.0, math.inf, -math.inf, math.nan, 1e-300, 5e-324])
values = st.one_of(st.floats(-1e6, 1e6), special, st.floats(allow_nan=True, allow_infinity=True))
outputs = st.integers(1, 40).flatmap(
    lambda n: st.tuples(arrays(np.float64, n, elements=values), arrays(np.float64, n, elements=values))
)


def same(a, b):
    if isinstance(a, float) and isinstance(b, float):
        return (math.isnan(a) and math.isnan(b)) or a == b
    return a == b


@settings(max_examples=300)
@given(outputs, st.booleans())
def test_metrics_are_the_whole_array_ones_to_the_last_bit(pair, as_float32):
    tested, bench = pair
    if as_float32:
        with np.errstate(over="ignore"):
            tested = tested.astype(np.float32)  # a float32 output read a block at a time
    m = compare.metrics(tested, bench)
    found = (m.cosine, m.max_abs_err, m.max_rel_err, m.worst_index, m.worst_tested, m.worst_bench)
    if m.worst_index is None:
        found = (m.cosine, m.max_abs_err, m.max_rel_err, None, None, None)
    expected = reference_metrics(tested, bench)
    assert same_cosine(found[0], expected[0])
    assert all(same(a, b) for a, b in zip(found[1:], expected[1:]))
    assert m.all_zero == (not np.any(tested), not np.any(bench))  # what the basic standard's rule reads


@pytest.mark.parametrize("zero_side", [0, 1])
def test_all_zero_is_every_element_0_subnormals_counted(zero_side):
    """A block's sum of squares says an output holds more than zeros, but 5e-324 squared is 0 too."""
    zeros, tiny = np.zeros(20), np.zeros(20)
    tiny[17] = 5e-324
    pair = (zeros, tiny) if zero_side == 0 else (tiny, zeros)
    assert compare.metrics(*pair).all_zero == (zero_side == 0, zero_side == 1)
    assert compare.metrics(np.zeros(0), np.zeros(0)).all_zero == (False, False)


def test_the_first_of_equal_worst_errors_is_named_across_blocks():
    bench = np.zeros(30)
    tested = np.zeros(30)
    tested[[9, 16, 29]] = 2.0  # in the second, third and fifth blocks of 7
    assert compare.metrics(tested.reshape(5, 6), bench.reshape(5, 6)).worst_index == (1, 3)


@given(outputs)
def test_nonfinite_mismatches_are_counted_as_over_whole_arrays(pair):
    tested, bench = pair
    t_nan, b_nan, t_inf, b_inf = np.isnan(tested), np.isnan(bench), np.isinf(tested), np.isinf(bench)
    nan_off = int((t_nan != b_nan).sum())
    inf_off = int(((t_inf | b_inf) & ~(t_nan | b_nan) & (tested != bench)).sum())
    assert compare.metrics(tested, bench).nonfinite == (nan_off, inf_off)  # the same pass as the metrics


# -- the dtype standard's budget -----------------------------------------------


def edges(fmt):
    """Values where the rounding to fmt carries, overflows, or goes to zero or the subnormals."""
    largest = (2 - math.ldexp(1.0, -fmt.mantissa_bits)) * math.ldexp(1.0, fmt.max_exponent)
    ulp_top = math.ldexp(1.0, fmt.max_exponent - fmt.mantissa_bits)
    points = [
        largest,
        largest + ulp_top / 2,
        largest + ulp_top / 4,
        math.ldexp(1.0, fmt.min_exponent - fmt.mantissa_bits - 1),
        math.ldexp(1.0, fmt.min_exponent - fmt.mantissa_bits),
        math.ldexp(1.0, fmt.min_exponent),
        1 + math.ldexp(1.0, -fmt.mantissa_bits - 1),
        2 - math.ldexp(1.0, -fmt.mantissa_bits - 1),
        2 - math.ldexp(1.0, -fmt.mantissa_bits - 2),
        0.0,
        5e-324,
        math.inf,
        math.nan,
    ]
    points = np.array([p for p in points if math.isfinite(p) or p != p or p == math.inf], dtype=np.float64)
    with np.errstate(over="ignore"):
        near = np.concatenate([points, np.nextafter(points, 0), np.nextafter(points, np.inf)])
    return np.concatenate([near, -near])


@pytest.mark.parametrize("name", sorted(FORMATS))
def test_the_spacing_read_from_the_bits_is_the_frexp_one(name):
    fmt = FORMATS[name]
    rng = np.random.default_rng(1)
    powers = np.ldexp(1.0, np.arange(-1074, 1024))
    values = np.concatenate(
        [
            edges(fmt),
            powers,
            np.nextafter(powers, 0),
            np.nextafter(powers, np.inf),
            rng.standard_normal(20_000) * 10.0 ** rng.integers(-320, 300, 20_000),
        ]
    )
    with np.errstate(over="ignore", invalid="ignore"):
        expected = reference_spacing(fmt, values)
    assert np.array_equal(fmt.spacing(values), expected)


budget_cases = st.tuples(
    st.sampled_from(sorted(FORMATS)),
    st.integers(1, 40),
    st.integers(0, 2**32 - 1),
    st.lists(st.sampled_from(["none", "small", "large", "nan", "negative"]), min_size=4, max_size=4),
    st.sampled_from([None, 2.0**-11, 2.0**-8]),
)


@settings(max_examples=300)
@given(budget_cases)
def test_the_reading_is_the_whole_array_one_to_the_last_bit(case):
    name, n, seed, answers, accumulation = case
    rng = np.random.default_rng(seed)
    fmt = FORMATS[name]
    bench = rng.standard_normal(n) * 10.0 ** rng.integers(-6, 4)
    tested = bench + rng.standard_normal(n) * np.abs(bench) * 10.0 ** rng.integers(-9, -1)
    if rng.random() < 0.3:
        index = rng.integers(0, n, 2)
        tested[index] = bench[index] = rng.choice([np.inf, -np.inf, np.nan], 2)
    if rng.random() < 0.3:
        bench[rng.integers(0, n)] = 0.0

    def answer(kind):
        if kind == "none":
            return None
        values = np.abs(bench) * rng.uniform(0, 3, n) * (1e-7 if kind == "small" else 1e-1)
        if kind == "nan":
            values[rng.integers(0, n)] = np.nan
        if kind == "negative":  # -0.0 and negative values: read as their magnitude
            values[rng.integers(0, n, 2)] *= -1
        return values.astype(np.float32) if rng.random() < 0.3 else values  # a float32 run's answer

    given_answers = [answer(kind) for kind in answers]
    extra = ExtraRuns(
        lambda: given_answers[0],
        lambda relative: given_answers[1],
        lambda: given_answers[2],
        structural=lambda: given_answers[3],
    )
    shape = (n,) if n % 2 else (n // 2, 2)
    tested, bench = tested.reshape(shape), bench.reshape(shape)
    given_answers = [None if a is None else a.reshape(shape) for a in given_answers]
    expected = reference_read(tested, bench, fmt, extra, Constants(), accumulation)
    assert_reading_is(read(tested, bench, fmt, extra, Constants(), accumulation), expected)
    seen = reductions.errors(tested, bench).blocks  # the metrics' pass, as the standard gets it
    assert_reading_is(read(tested, bench, fmt, extra, Constants(), accumulation, seen), expected)


def assert_reading_is(r, expected):
    """A budget.Reading against reference_read's, every field to the last bit."""
    found = (r.ratio, r.index, r.tested, r.bench, r.error_ulps, r.parts, r.over, list(r.asked))
    for a, b in zip(found, expected):
        if isinstance(a, dict):
            assert a.keys() == b.keys() and all(same(a[k], b[k]) for k in a)
        else:
            assert same(a, b)


@settings(max_examples=150, deadline=None)
@given(
    st.sampled_from(["float32", "float16", "bfloat16", "float64"]),
    st.integers(100, 3000),
    st.integers(0, 2**32 - 1),
    st.sampled_from([None, "small", "large"]),
    st.sampled_from([None, 7, 4096]),
)
def test_a_look_that_passes_blocks_by_on_their_bounds_finds_the_whole_array_reading(name, n, seed, magnitude, k):
    """budget._Budget.worst passes by a block whose bounds are under 1 and under the worst so far,
    and computes the budget only where the bound reaches the worst; given the metrics' pass, it
    looks at the blocks from the highest ceiling down and stops under the worst so far. Either way
    the same reading as the whole array's to the last bit (blocks of 64; errors of a few ULP at a
    few elements, zeros, subnormals, values beyond the format)."""
    rng = np.random.default_rng(seed)
    fmt = FORMATS[name]
    bench = rng.standard_normal(n) * 10.0 ** rng.integers(-8, 4, n).astype(np.float64)
    bench[rng.random(n) < 0.1] = 0.0
    if rng.random() < 0.3:
        bench[rng.integers(0, n, 3)] = rng.choice([2.0 ** (fmt.min_exponent - 3), 1e39, 7e4, 5e-324], 3)
    tested = np.asarray(fmt.rounded(bench))
    tested[bench == 0.0] = 0.0
    # Up to 10 ULP (fp32, fp64: 1000, as the accumulation term allows more): most within the budget, some not.
    off = rng.integers(0, n, rng.integers(1, n // 4))
    most = 2 if fmt.mantissa_bits < 23 else 4
    tested[off] += rng.uniform(-1, 1, off.size) * fmt.spacing(bench[off]) * 10.0 ** rng.integers(-2, most, off.size)
    spread = 10.0 ** rng.uniform(-1.5, 1.5, n)  # terms' magnitudes that differ from |b| element by element
    answer = None if magnitude is None else np.abs(bench) * spread * (1e-6 if magnitude == "small" else 50)
    if answer is not None and rng.random() < 0.5:
        with np.errstate(over="ignore"):  # beyond float32: inf, which the standard reads as 0
            answer = answer.astype(np.float32)  # a float32 run's lower bound, kept in float32
    extra = ExtraRuns(magnitude=lambda: answer, terms=lambda: k)
    before = reductions.BLOCK
    reductions.BLOCK = 64
    try:
        with np.errstate(over="ignore", invalid="ignore"):
            alone = read(tested, bench, fmt, extra, Constants())
            seen = reductions.errors(tested, bench).blocks
            after_metrics = read(tested, bench, fmt, extra, Constants(), seen=seen)
    finally:
        reductions.BLOCK = before
    expected = reference_read(tested, bench, fmt, extra, Constants(), None)
    assert_reading_is(alone, expected)
    assert_reading_is(after_metrics, expected)


def test_a_look_from_the_highest_ceiling_down_keeps_the_first_of_equal_worst_elements():
    """Blocks of 64: the second block's ceiling is the highest (an element far off but with a large
    magnitude), so it is looked at first; the same worst ratio sits in both blocks, and the first
    block's element is the reading's, as np.argmax over the whole output would have it."""
    ulp = 2.0**-23
    bench = np.ones(128)
    tested = bench.copy()
    magnitude = np.ones(128)
    tested[[10, 74]] = 1 + 40 * ulp  # 40 ULP: over 17.5 ULP without the magnitude, 0.61 of 65.5 with it
    magnitude[[10, 74]] = 4.0
    tested[84], magnitude[84] = 1 + 1000 * ulp, 1e4  # the highest ceiling, far within its budget
    extra = ExtraRuns(magnitude=lambda: magnitude)
    before = reductions.BLOCK
    reductions.BLOCK = 64
    try:
        r = read(tested, bench, FORMATS["float32"], extra, Constants(), seen=reductions.errors(tested, bench).blocks)
    finally:
        reductions.BLOCK = before
    assert r.index == (10,) and r.asked == ("magnitude",) and 0.6 < r.ratio < 0.62
    assert_reading_is(r, reference_read(tested, bench, FORMATS["float32"], extra, Constants(), None))


@given(arrays(st.sampled_from([np.float64, np.float32, np.float16]), st.integers(0, 30)))
def test_finite_nonnegative_is_every_element_finite_and_not_negative(values):
    expected = bool(np.all(np.isfinite(values) & ~np.signbit(values)))
    assert reductions.finite_nonnegative(values) is expected


# -- random inputs drawn in place ----------------------------------------------


@settings(max_examples=100)
@given(st.integers(0, 40), st.floats(-1e4, 1e4), st.floats(0, 1e4), st.integers(0, 2**64 - 1))
def test_floats_drawn_into_float32_are_the_float64_draws_rounded_once(n, lo, width, seed):
    spec = {"shape": [n], "Min": lo, "Max": lo + width}
    expected = np.random.default_rng(seed).uniform(lo, lo + width, size=n)
    if n:
        expected[0], expected[-1] = lo, lo + width
    assert np.array_equal(random_array(spec, "f", seed), expected)
    assert np.array_equal(random_array(spec, "f", seed, np.float32), expected.astype(np.float32))


def test_a_width_past_float64_still_mixes_the_ends_block_by_block():
    spec = {"shape": [23], "Min": -1e308, "Max": 1e308}
    u = np.random.default_rng(3).random(size=23)
    expected = -1e308 * (1 - u) + 1e308 * u
    expected[0], expected[-1] = -1e308, 1e308
    assert np.array_equal(random_array(spec, "f", 3), expected)


@pytest.mark.parametrize("dtype", ["torch.float32", "torch.bfloat16", "torch.float16", "torch.float64"])
def test_random_tensors_are_torch_s_rounding_of_the_float64_draws(dtype):
    """bfloat16 and float16 are drawn into float32: torch rounds float64 to them through float32."""
    spec = {"type": "torch.Tensor", "dtype": dtype, "shape": [3, 11], "Min": -3.0, "Max": 1000.0}
    tensor = Rebuilder(CODEC, "Functional.relu.0.forward", None, "random", 7).value(spec, "input_args[0]")
    wide = torch.from_numpy(
        random_array(spec, "f", inputs.tensor_seed(7, "Functional.relu.0.forward", "input_args[0]"))
    )
    assert tensor.dtype == CODEC.dtype(dtype) and torch.equal(tensor, wide.to(tensor.dtype))


def test_torch_rounds_float64_to_half_and_bfloat16_through_float32():
    """What drawing them into float32 relies on: a float64 just past a float16 tie (which float32
    cannot hold) is rounded by torch as the tie itself, to even."""
    just_past = torch.tensor([1 + 2**-11 + 2**-40, 1 + 2**-8 + 2**-40], dtype=torch.float64)
    for dtype in (torch.float16, torch.bfloat16):
        assert torch.equal(just_past.to(dtype), just_past.to(torch.float32).to(dtype))
