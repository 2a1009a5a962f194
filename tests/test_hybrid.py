"""A model family the standard's constants were not measured on: a hybrid CNN + ViT (a conv stem with
batch_norm, a patch embedding, attention blocks on 3-D tokens, a bicubic resize of its position
embedding, a bilinear resize of its input at 64 -> 56, a spatial transformer's affine_grid and
grid_sample, a nearest upsampling, adaptive pooling), dumped by msprobe 26.2.0 in fp32, bf16 and under
CPU autocast (tests/data/make/hybrid_dump.py). What a user sees, end to end: the clean dumps have no
error in recorded and cpu mode under dtype, and fail under basic only at their dtype's rounding floor;
the entries msprobe recorded at a view of the gradient arriving at the output are a SKIP saying what to
run, once in the summary, and judged by it; resampling deficits planted in the real dump are errors, a
correct kernel computing its coordinates otherwise passes. (The planted GEMM, norm and softmax kernels of
tests/deficits.py: test_deficits_e2e.py's HYBRID corpora.)"""

from __future__ import annotations

import deficits_resample as r
import pytest
import resample_runs

from conftest import read_csv, run_msprobe
from pytest_msprobe.results import RUN_THE_CALL

HYBRID = ("hybrid_fp32", "hybrid_bf16", "hybrid_autocast")
VIEWS = 10  # backward entries msprobe recorded at a view of the gradient arriving at the output: 3-D linear, matmul
SUMMARY = "backward entries SKIP gradients msprobe recorded only as the gradient arriving at the output"


def rows(pytester, out: str, kind: str = "details") -> dict[str, dict[str, str]]:
    return {row["API Name"]: row for row in read_csv(pytester.path / out, kind)}


@pytest.mark.slow
@pytest.mark.parametrize("device", ["recorded", "cpu"])
def test_the_clean_hybrid_dumps_have_no_error_under_dtype(pytester, copy_dump, device):
    dumps = [copy_dump(name) for name in HYBRID]
    result = run_msprobe(pytester, dumps, "--msprobe-standard", "dtype", device=device)
    assert result.parseoutcomes().get("failed", 0) == 0, [line for line in result.outlines if "FAILED" in line]
    for name in HYBRID:
        details = rows(pytester, f"out/{name}")
        assert len(details) > 80 and {row["Status"] for row in details.values()} <= {"pass", "SKIP"}
        skipped = {key.rsplit(".output.", 1)[0] for key, row in details.items() if row["Status"] == "SKIP"}
        assert len(skipped) == (VIEWS if device == "recorded" else 0), name
        assert all(RUN_THE_CALL in row["Message"] for row in details.values() if row["Status"] == "SKIP")
    said = [line for line in result.outlines if SUMMARY in line]
    if device == "recorded":  # once, for the three dumps
        assert said == [
            f"{3 * VIEWS} {SUMMARY}, no input's: --msprobe-device recorded,cpu judges them by running the calls"
        ]
    else:
        assert not said


@pytest.mark.slow
@pytest.mark.parametrize("device", ["recorded", "cpu"])
def test_basic_fails_the_clean_hybrid_dumps_only_at_the_rounding_floor(pytester, copy_dump, device):
    """Cosine > 0.99 and MaxAbsErr < 1e-4: the fp32 dump passes; every bf16 output basic fails (the bf16
    model and autocast's bf16 GEMMs) is at its dtype's rounding floor and says so."""
    dumps = [copy_dump(name) for name in HYBRID]
    run_msprobe(pytester, dumps, "--msprobe-standard", "basic", device=device)
    for name in HYBRID:
        failing = [row for row in rows(pytester, f"out/{name}").values() if row["Status"] == "error"]
        if name == "hybrid_fp32":
            assert not failing, [row["API Name"] for row in failing]
            continue
        assert failing and all(row["Tested Dtype"] == "torch.bfloat16" for row in failing), name
        assert all("rounding budget (--msprobe-standard dtype passes it)" in row["Message"] for row in failing)


@pytest.mark.slow
def test_recorded_and_cpu_judges_what_msprobe_recorded_at_a_view(pytester, copy_dump):
    dump = copy_dump("hybrid_fp32")
    result = run_msprobe(pytester, dump, "--msprobe-standard", "dtype", device="recorded,cpu")
    assert result.ret == 0
    results = rows(pytester, "out", "result")
    linears = [name for name in results if name.startswith("Functional.linear.") and name != "Functional.linear.0"]
    assert len(linears) == 9 and {results[n]["Backward Test Success"] for n in linears} == {"pass"}
    assert not any(SUMMARY in line for line in result.outlines)


# (entry, kernel, direction judged): resampling kernels planted in the real fp32 and bf16 dumps.
PLANTED = [
    ("Functional.interpolate.0", "half_pixel", "forward"),  # the input resized 64 -> 56 without the half pixel
    ("Functional.interpolate.0", "weights_bf16", "forward"),
    ("Functional.interpolate.0", "coords_bf16", "forward"),
    ("Functional.interpolate.2", "rounds", "forward"),  # the tokens' nearest x2, rounding not flooring
    ("Functional.interpolate.2", "rounds", "backward"),
    ("Functional.grid_sample.0", "half_pixel", "forward"),
    ("Functional.grid_sample.0", "half_pixel", "backward"),
    ("Functional.grid_sample.0", "grid_bf16", "forward"),
    ("Functional.grid_sample.0", "grid_bf16", "backward"),
]


@pytest.mark.slow
@pytest.mark.parametrize("name", ["hybrid_fp32", "hybrid_bf16"])
def test_resampling_deficits_planted_in_the_hybrid_dumps_are_errors(pytester, copy_dump, name):
    """Each deficit in its own copy of the dump, recorded mode, dtype: its rows are errors, its entry fails.
    In fp32, bilinear weights, coordinates or a grid in bf16 are too; in the bf16 model they are its own
    rounding (its grid is bf16 as recorded)."""
    own_rounding = ("weights_bf16", "coords_bf16", "grid_bf16") if name == "hybrid_bf16" else ()
    problems = resample_runs.not_errors(pytester, copy_dump, name, PLANTED, skip=own_rounding)
    assert not problems, "\n".join(problems)


@pytest.mark.slow
def test_a_bilinear_kernel_computing_its_coordinates_otherwise_passes_in_the_hybrid_dump(pytester, copy_dump):
    """The input's resize 64 -> 56, planted as a kernel whose coordinate is d s + (s/2 - 1/2) in fp32 (a
    fused offset: 2.75 u (|src| + 1) off the exact one at most, bench/studies/coordinate_rounding.md)."""
    dump = copy_dump("hybrid_fp32")
    (row,) = r.plant(dump.parent, "Functional.interpolate.0", "fused")
    run_msprobe(pytester, dump, "--msprobe-standard", "dtype", "-k", "Functional.interpolate.0", device="recorded")
    assert rows(pytester, "out")[row]["Status"] == "pass"
