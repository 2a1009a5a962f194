"""The terminal summary's lines: SKIP reasons grouped, failures worst first."""

from __future__ import annotations

import math

import pytest

from pytest_msprobe.judging.figures import beside
from pytest_msprobe.reports.summary import dump_labels, failure_lines, skip_lines
from pytest_msprobe.results import EntryResult, OutputResult


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


def row(cosine, max_abs_err, severity, nonfinite=False) -> OutputResult:
    return OutputResult(0, "error", "torch.float64", "torch.float32", [2], cosine, max_abs_err, max_abs_err,
                        severity=severity, nonfinite=nonfinite)


def test_failures_come_worst_first_by_severity_nonfinite_before_all():
    mild = EntryResult("Torch.add.0", "forward", "error", "mild", [row(0.5, 1e-3, 2.0)])
    large = EntryResult("Torch.sub.0", "forward", "error", "large", [row(0.999, 1.0, 1e4)])
    nan = EntryResult("Torch.mul.0", "forward", "error", "nan", [row(0.9999, 1e-5, math.inf, nonfinite=True)])
    raised = EntryResult("Torch.div.0", "forward", "error", "the tested run raised RuntimeError")
    assert failure_lines([mild, large, nan, raised]) == [
        "Torch.mul.0.forward: nan",
        "Torch.div.0.forward: the tested run raised RuntimeError",
        "Torch.sub.0.forward: large",
        "Torch.add.0.forward: mild",
    ]


def test_failures_of_equal_severity_list_in_dump_order_whatever_order_they_came_in():
    """Under xdist results come in the order workers finish them: the list must not follow it."""
    import itertools

    equal = [EntryResult(f"Torch.matmul.{i}", "forward", "error", f"e{i}", [row(0.999, 1e-3, 10.0)],
                         dump="/d/dump.json", position=10 * i) for i in range(4)]
    other = EntryResult("Torch.addmm.0", "forward", "error", "x", [row(0.999, 1e-3, 10.0)], dump="/a/dump.json",
                        position=99)
    worse = EntryResult("Torch.bmm.0", "forward", "error", "w", [row(0.9, 1e-2, 100.0)], dump="/d/dump.json",
                        position=50)
    expected = failure_lines([worse, other, *equal])
    assert [line.rsplit(": ", 1)[1] for line in expected] == ["w", "x", "e0", "e1", "e2", "e3"]  # worst, then dump order
    for shuffled in itertools.permutations([worse, other, *equal]):
        assert failure_lines(list(shuffled)) == expected


def test_a_line_names_its_dump_where_there_are_several():
    results = [EntryResult("Torch.add.0", "forward", "error", "x", dump=f"/data/step0/rank{i}/dump.json")
               for i in (0, 1)]
    assert failure_lines(results) == ["rank0: Torch.add.0.forward: x", "rank1: Torch.add.0.forward: x"]
    assert failure_lines(results[:1]) == ["Torch.add.0.forward: x"]


@pytest.mark.parametrize("value, bound, shown", [
    (0.0001001, 1e-4, "0.0001001"), (0.00214, 1e-4, "0.00214"), (1e-4, 1e-4, "0.0001"),
    (0.98999999, 0.99, "0.98999999"), (float("nan"), 1e-4, "nan"),
])
def test_a_value_beside_its_bound_shows_which_side_it_is_on(value, bound, shown):
    assert beside(value, bound, 6 if bound == 0.99 else 3) == shown


def test_a_long_failure_line_is_cut_with_a_visible_mark():
    long = EntryResult("Torch.mul.0", "forward", "error", "x" * 1000, [row(0.5, 1.0, 10.0)])
    line = failure_lines([long])[0]
    assert len(line) <= 400 and line.endswith("more characters in the CSV]")


def test_dumps_named_by_an_absolute_and_a_relative_path_are_labelled_whole():
    """A dump path read back from a file (a journal line, a manifest) may be relative beside an absolute one:
    they share no folder, and each is labelled by its whole path (os.path.commonpath raised ValueError)."""
    results = [EntryResult("Functional.relu.0", "forward", "pass", dump=dump) for dump in ("/a/rank0/dump.json", "x/dump.json")]
    assert dump_labels(results) == {"/a/rank0/dump.json": "/a/rank0: ", "x/dump.json": "x: "}
