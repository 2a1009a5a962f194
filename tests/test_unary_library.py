"""The forward of elementwise math sums nothing: its fp32 budget is the final rounding and a correct math
library's error (frameworks/magnitudes.LIBRARY_ULPS), not the accumulation term's 16-32 ULP.

On held-out tests/data/ssm_fp32 (a Mamba-2-style model) `Torch.exp`'s budget was 24.2 ULP, "fp32
accumulation 22.7": an exp whose argument is rounded to fp32 before exp2 (CUDA's __expf, fast-math exps:
about |x| ULP off) passed at 0.37 of it on the chunk decays (arguments down to -11.4).
bench/studies/unary_library.md measures every function of the family.
"""

from __future__ import annotations

import json
import math

import numpy as np
import pytest
import torch

from conftest import read_csv, run_msprobe
from pytest_msprobe.frameworks.magnitudes import LIBRARY_ULPS, UNARY, library_ulps
from pytest_msprobe.judging.compare import ExtraRuns
from pytest_msprobe.judging.standards.budget import FORMATS, read

FP32 = FORMATS["float32"]
DECAYS = "Torch.exp.3.forward"  # exp(segsum(...)) of the chunk states: arguments down to -11.4


def exp2_of_rounded(x: torch.Tensor) -> torch.Tensor:
    """exp as exp2 of x log2(e) rounded to fp32, then rounded: a fast-math exp."""
    log2e = torch.tensor(math.log2(math.e), dtype=torch.float32)
    return torch.exp2((x.to(torch.float32) * log2e).double()).to(torch.float32)


def ulps_off(exact: torch.Tensor, ulps: int) -> torch.Tensor:
    """exact correctly rounded to fp32, then moved by -ulps..ulps ULP at random (a library at that bound)."""
    rounded = exact.to(torch.float32)
    step = torch.randint(-ulps, ulps + 1, exact.shape, generator=torch.Generator().manual_seed(0))
    for _ in range(ulps):
        rounded = torch.where(step > 0, torch.nextafter(rounded, rounded + 1), rounded)
        rounded = torch.where(step < 0, torch.nextafter(rounded, rounded - 1), rounded)
        step = step - step.sign()
    return rounded


def test_every_unary_function_has_a_library_bound_and_only_its_forward_uses_it():
    assert set(LIBRARY_ULPS) == set(UNARY)
    assert library_ulps("Torch.exp", forward=True) == 2 and library_ulps("Tensor.exp_", forward=True) == 2
    assert library_ulps("Torch.exp", forward=False) is None  # g exp(x): a product, the accumulation term
    assert library_ulps("Torch.matmul", forward=True) is None


@pytest.mark.parametrize("low, high, hidden_before", [(-20.0, 10.0, True), (-88.0, 88.0, False)])
def test_a_correct_exp_passes_and_a_fast_math_one_fails(low, high, hidden_before):
    x = (torch.rand(1 << 16, dtype=torch.float64, generator=torch.Generator().manual_seed(1)) * (high - low) + low).to(
        torch.float32
    )
    exact = torch.exp(x.double())
    bench, library = exact.numpy(), ExtraRuns(library_ulps=LIBRARY_ULPS["exp"])

    def ratio(tested: torch.Tensor, extra: ExtraRuns = library) -> float:
        return read(tested.double().numpy(), bench, FP32, extra).ratio

    assert ratio(torch.exp(x)) <= 0.5  # PyTorch's own
    assert ratio(ulps_off(exact, 1)) <= 0.7  # a 1-ULP library
    assert ratio(ulps_off(exact, 2)) <= 1  # CUDA's documented bound for expf
    fast = exp2_of_rounded(x)
    assert ratio(fast) > 2  # |x| ULP off at |x| up to 20 and more
    assert (ratio(fast, ExtraRuns()) < 1) is hidden_before  # the accumulation term passed it up to |x| = 20
    reading = read(fast.double().numpy(), bench, FP32, library)
    assert set(reading.parts) == {"rounding", "math library"}


def plant(dump, entry: str, make) -> None:
    data = json.loads(dump.read_text())
    spec = data["data"][entry]["input_args"][0]
    out = data["data"][entry]["output"][0]
    folder = dump.parent / "dump_tensor_data"
    x = torch.load(folder / spec["data_name"], weights_only=True)
    exact = torch.exp(x.double())
    value = torch.where(torch.isfinite(x) & (exact > 0), make(x, exact), exact.to(torch.float32))
    torch.save(value, folder / out["data_name"])
    v = value.double()
    out.update({"Max": float(v.max()), "Min": float(v.min()), "Mean": float(v.mean()), "Norm": float(v.norm())})
    dump.write_text(json.dumps(data))


@pytest.mark.parametrize(
    "kernel, expected",
    [
        ("recorded", "pass"),  # PyTorch's CPU exp, as msprobe recorded it
        ("two_ulps", "pass"),  # a library at CUDA's documented bound
        ("exp2_of_rounded", "error"),  # a fast-math exp, 2.1x its budget (0.37 of the old one)
    ],
)
def test_the_ssm_dumps_exp_is_judged_against_a_math_librarys_error(pytester, copy_dump, kernel, expected):
    dump = copy_dump("ssm_fp32")
    if kernel == "two_ulps":
        plant(dump, DECAYS, lambda x, exact: ulps_off(exact, 2))
    elif kernel == "exp2_of_rounded":
        plant(dump, DECAYS, lambda x, exact: exp2_of_rounded(x))
    result = run_msprobe(pytester, dump, "--msprobe-standard", "dtype", "-k", DECAYS, device="recorded")
    assert result.parseoutcomes()["passed" if expected == "pass" else "failed"] == 1
    (row,) = read_csv(pytester.path / "out", "details")
    assert row["Status"] == expected, row["Message"]
    if expected == "error":
        assert "(rounding 1.5, math library" in row["Message"] and "accumulation" not in row["Message"]
    else:
        ratio = float(row["Message"].split("worst element at ")[1].split(" ")[0])
        assert np.isfinite(ratio) and ratio <= 1
