"""The terminal summary's lines: SKIP reasons grouped, failures worst first."""

from __future__ import annotations

from pytest_msprobe.results import EntryResult, OutputResult
from pytest_msprobe.summary import failure_lines, skip_lines


def skipped(api: str, message: str) -> EntryResult:
    return EntryResult(api, "backward", "SKIP", message)


def test_skip_reasons_differing_only_in_names_and_shapes_are_one_group():
    results = [
        skipped("Torch.matmul.0", "output.1: no recorded gradient has this input's shape [2, 8, 32]: "
                                  "msprobe recorded [[16, 64], [16, 32]], which match no input"),
        skipped("Functional.linear.3", "output.0: no recorded gradient has this input's shape [4, 8, 64]: "
                                       "msprobe recorded [[32, 64]], which match no input"),
        skipped("Distributed.all_reduce.0", "Distributed collective: it cannot be re-run alone, on one device"),
    ]
    lines = skip_lines(results)
    assert lines == [
        "   2 x output.N: no recorded gradient has this input's shape [...]: msprobe recorded [...], "
        "which match no input  (Torch.matmul.0.backward, Functional.linear.3.backward)",
        "   1 x Distributed collective: it cannot be re-run alone, on one device  (Distributed.all_reduce.0.backward)",
    ]


def row(cosine, max_abs_err) -> OutputResult:
    return OutputResult(0, "error", "torch.float64", "torch.float32", [2], cosine, max_abs_err, max_abs_err)


def test_failures_come_worst_first():
    mild = EntryResult("Torch.add.0", "forward", "error", "mild", [row(0.999, 1e-3)])
    bad = EntryResult("Torch.mul.0", "forward", "error", "bad", [row(0.5, 1e-3)])
    large = EntryResult("Torch.sub.0", "forward", "error", "large", [row(0.999, 1.0)])
    assert failure_lines([mild, bad, large]) == [
        "Torch.mul.0.forward: bad", "Torch.sub.0.forward: large", "Torch.add.0.forward: mild"]
