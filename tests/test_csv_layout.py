"""--msprobe-csv-layout msprobe-pytorch: msprobe 26.2's PyTorch CSV layout (23 details columns, its
metrics, its blanks and numbering), and every reader of a run's CSVs reading both layouts.

Unit tests of the rows (reports/msprobe_pytorch.py), then runs of the plugin on real dumps
(pytester): the columns and cells a user reads, beside the pair msprobe's own acc_check wrote for
the same dump (tests/data/msprobe_acc_check); resume, merge, the baseline and the HTML report of
pairs in that layout; a MindSpore dump keeping the 9 columns.
"""

from __future__ import annotations

import csv
import math
import sys
from pathlib import Path

import pytest

from conftest import DATA, read_csv, run_msprobe
from pytest_msprobe import options as options_module
from pytest_msprobe.reports import csv_files, layouts, msprobe_pytorch
from pytest_msprobe.reports.csv_files import CsvWriter, output_of_row, read_result_rows
from pytest_msprobe.results import ERROR, METRIC_FIELDS, PASS, SKIP, EntryResult, MsprobeMetrics, OutputResult

MSPROBE = layouts.MSPROBE_PYTORCH
ACC_CHECK = DATA / "msprobe_acc_check" / "pt_tensor_L1"


def rows_of(path: Path) -> list[list[str]]:
    with open(path, newline="", encoding="utf-8-sig") as handle:
        return list(csv.reader(handle))


def the(folder: Path, kind: str) -> Path:
    (found,) = sorted(folder.glob(f"accuracy_checking_{kind}_*.csv"))
    return found


def write(tmp_path: Path, api: str, forward: EntryResult | None, backward: EntryResult | None = None) -> tuple:
    writer = CsvWriter.in_folder(tmp_path, "20260101000000", MSPROBE)
    writer.write_api(api, forward, backward)
    writer.close()
    return rows_of(writer.result_path), rows_of(writer.details_path)


# -- the option -----------------------------------------------------------------------------


def test_the_options_words_are_the_layouts_names() -> None:
    assert tuple(layouts.BY_NAME) == options_module.CSV_LAYOUTS
    assert options_module.Options().csv_layout == layouts.DEFAULT.name  # the default run is unchanged


def test_a_layout_that_is_none_is_a_usage_error_naming_the_choices(pytester, copy_dump) -> None:
    result = run_msprobe(pytester, copy_dump("pt_tensor_L1"), "--msprobe-csv-layout", "msprobe", device="cpu")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["*--msprobe-csv-layout must be default or msprobe-pytorch, not 'msprobe'*"])


def test_a_mindspore_dump_keeps_its_nine_columns_and_says_so_once(pytester, copy_dump) -> None:
    result = run_msprobe(
        pytester, copy_dump("ms_tensor_L1"), "-k", "relu", "--msprobe-csv-layout", "msprobe-pytorch", device="cpu"
    )
    assert result.ret == 0
    assert rows_of(the(pytester.path / "out", "details"))[0] == list(layouts.DEFAULT.details_columns)
    said = [line for line in result.outlines if "a MindSpore dump keeps the 9 columns" in line]
    assert len(said) == 1 and "--msprobe-csv-layout msprobe-pytorch is its PyTorch one" in said[0]


# -- the rows ----------------------------------------------------------------------------------


def test_numbers_are_written_as_msprobes_types_write_them() -> None:
    assert msprobe_pytorch.number_cell(None) == " "
    assert msprobe_pytorch.number_cell(0) == "0"  # msprobe's int 0 (a ratio over an empty set)
    assert msprobe_pytorch.number_cell(1 / 3) == "0.33333333333333"  # its precision: 14 decimals
    assert msprobe_pytorch.number_cell(0.0012207031, single=True) == "0.0012207031"  # numpy float32's str()
    assert msprobe_pytorch.number_cell(4.9591064e-05, single=True) == "4.9591064e-05"
    assert msprobe_pytorch.number_cell(float("nan")) == "nan"
    assert msprobe_pytorch.number_cell(-0.5) == "-0.50000000000000"


@pytest.mark.parametrize(("shape", "cell"), [([2, 8], "(2, 8)"), ([5], "(5,)"), ([0], "(0,)"), ([], "()"), (None, " ")])
def test_shapes_are_python_tuples(shape, cell) -> None:
    assert msprobe_pytorch.shape_cell(shape) == cell


def test_a_row_has_23_cells_blanks_as_a_space_and_a_negative_cosine_stays_a_number(tmp_path: Path) -> None:
    metrics = MsprobeMetrics(
        cosine_sim=-0.5, max_abs_err=2.0, eb=1.0, rmse=1.5, small_value_err_ratio=0, rule="benchmark"
    )
    output = OutputResult(0, ERROR, "torch.float64", "torch.float32", [2, 8], -0.5, 2.0, 1.0, ["Cosine -0.5 <= 0.99"])
    output.msprobe = metrics
    result, details = write(tmp_path, "=Torch.sub.0", EntryResult("=Torch.sub.0", "forward", ERROR, outputs=[output]))
    assert details[0] == list(MSPROBE.details_columns) and result[0] == list(MSPROBE.result_columns)
    row = dict(zip(details[0], details[1]))
    assert len(details[1]) == 23
    assert row["API Name"] == "'=Torch.sub.0.forward.output.0"  # a formula start neutralised, as in the default layout
    assert row["余弦相似度"] == "-0.50000000000000"  # a number: never a `'`
    assert (row["Bench Dtype"], row["DEVICE Dtype"], row["Shape"]) == ("torch.float64", "torch.float32", "(2, 8)")
    assert (row["误差均衡性"], row["小值域错误占比"], row["双千指标"], row["ULP误差最大值"]) == (
        "1.00000000000000",
        "0",
        " ",
        " ",
    )
    assert (row["Status"], row["Message"]) == ("error", "Cosine -0.5 <= 0.99")
    assert result[1] == ["'=Torch.sub.0", "error", " ", "output.0: Cosine -0.5 <= 0.99"]  # no backward: a blank


def test_a_direction_without_outputs_is_one_row_of_blanks_as_msprobe_writes_a_skip(tmp_path: Path) -> None:
    skipped = EntryResult("Torch.nonzero.0", "forward", SKIP, reason="the API is not supported")
    _, details = write(tmp_path, "Torch.nonzero.0", skipped)
    assert details[1] == ["Torch.nonzero.0.forward.output.0", *[" "] * 20, "SKIP", "the API is not supported"]


def test_backward_outputs_are_numbered_by_every_positional_tensor(tmp_path: Path) -> None:
    # index_add(x, dim, index, source, alpha=a) with a floating `weight=` tensor passed by keyword:
    # msprobe counts x, index, source (its output.1 is the integer index, a SKIP row); the keyword
    # tensor's gradient comes after them.
    forward = {
        "input_args": [
            {"type": "torch.Tensor", "dtype": "torch.float32", "shape": [4, 3]},
            {"type": "int", "value": 0},
            {"type": "torch.Tensor", "dtype": "torch.int64", "shape": [2]},
            [{"type": "torch.Tensor", "dtype": "torch.float32", "shape": [2, 3]}],
        ],
        "input_kwargs": {"weight": {"type": "torch.Tensor", "dtype": "torch.float32", "shape": [3]}},
    }
    numbering = msprobe_pytorch.backward_numbering(forward)
    assert numbering == [0, None, 1]
    outputs = [OutputResult(i, PASS, "torch.float64", "torch.float32", [1]) for i in (0, 1, 2)]
    backward = EntryResult("Torch.index_add.0", "backward", PASS, outputs=outputs, msprobe_outputs=numbering)
    _, details = write(tmp_path, "Torch.index_add.0", None, backward)
    named = [(row[0].rsplit(".", 1)[-1], row[21], row[2]) for row in details[1:]]
    assert named == [
        ("0", "pass", "torch.float32"),
        ("1", "SKIP", " "),
        ("2", "pass", "torch.float32"),
        ("3", "pass", "torch.float32"),
    ]
    assert details[2][22] == msprobe_pytorch.NO_GRADIENT


def test_a_python_scalar_output_is_msprobes_class_name_without_a_shape() -> None:
    assert msprobe_pytorch.dtype_cell("int") == "<class 'int'>"
    assert msprobe_pytorch.shape_cell([], "int") == " "


def test_fp8_inputs_are_told_from_the_forward_entry() -> None:
    spec = {"type": "torch.Tensor", "shape": [2]}
    assert msprobe_pytorch.has_fp8_input({"input_args": [{**spec, "dtype": "torch.float8_e4m3fn"}]})
    assert msprobe_pytorch.has_fp8_input(
        {"input_args": [], "input_kwargs": {"scale": {**spec, "dtype": "torch.float8_e5m2"}}}
    )
    assert not msprobe_pytorch.has_fp8_input(
        {"input_args": [{**spec, "dtype": "torch.float8_e4m3fnuz"}]}
    )  # not msprobe's


def test_metric_cells_read_back_as_written() -> None:
    single = ("max_abs_err", "max_rel_error", "mean_rel_error")
    metrics = MsprobeMetrics(
        cosine_sim=0.999, max_abs_err=0.0012207031, rel_err_hundredth=1.0, eb=0.25, rmse=1e-7,
        small_value_err_ratio=0, max_rel_error=0.0029205019, mean_rel_error=0.0013641664, single=single,
    )  # fmt: skip
    cells = msprobe_pytorch.metric_cells(metrics)
    back = msprobe_pytorch.metrics_of_cells(cells)
    assert msprobe_pytorch.metric_cells(back) == cells
    assert set(back.single) == set(metrics.single) and back.small_value_err_ratio == 0


def test_each_reader_takes_either_layouts_rows(tmp_path: Path) -> None:
    output = OutputResult(1, ERROR, "torch.float64", "torch.bfloat16", [2, 8], 0.98, 0.01, 0.1, ["over"])
    output.msprobe = MsprobeMetrics(cosine_sim=0.98, max_abs_err=0.01, single=("max_abs_err",))
    _, details = write(tmp_path, "Torch.mul.0", EntryResult("Torch.mul.0", "forward", ERROR, outputs=[output]))
    name, found = output_of_row(MSPROBE, details[1])
    assert name == "Torch.mul.0.forward.output.1" and found.status == ERROR and found.shape == [2, 8]
    assert found.cosine == pytest.approx(0.98) and found.max_abs_err == pytest.approx(0.01, rel=1e-6)
    assert found.msprobe is not None and found.reasons == ["over"]
    assert read_result_rows(the(tmp_path, "result")) == [["Torch.mul.0", "error", "", "output.1: over"]]
    assert csv_files.result_layout(the(tmp_path, "result")) is MSPROBE


def test_msprobes_own_rows_read_as_a_pair_of_this_layout() -> None:
    """A pair msprobe's acc_check wrote: three cells where it has no Message, blank statuses."""
    rows = read_result_rows(the(ACC_CHECK, "result"))
    assert ["Functional.conv2d.0", "pass", "pass", ""] in rows
    assert ["Tensor.add_.0", "pass", "", ""] in rows
    outputs = csv_files.read_result(the(ACC_CHECK, "result"))[0]
    assert outputs is MSPROBE


# -- runs of the plugin ------------------------------------------------------------------------


def run(pytester, copy_dump, *args: str, out: str = "out", dump: str = "pt_tensor_L1"):
    path = pytester.path / dump / "dump.json"
    if not path.exists():
        path = copy_dump(dump)
    return run_msprobe(pytester, path, "--msprobe-csv-layout", "msprobe-pytorch", *args, out=out, device="cpu")


@pytest.mark.slow
def test_a_run_writes_msprobes_columns_names_and_blanks_as_its_acc_check_does(pytester, copy_dump) -> None:
    """The whole example dump beside msprobe's own acc_check pair of it: the same headers, every
    row name msprobe wrote (its backward numbering), and, where both ran the output in float32
    against a float64 bench, the same cells filled and left blank, the numbers close (the tested
    side is this machine's run, msprobe's was its own)."""
    result = run(pytester, copy_dump)
    assert result.ret == 1  # the bf16 rounding failures, as in the default layout
    ours = {row[0]: row for row in rows_of(the(pytester.path / "out", "details"))}
    theirs = {row[0]: row for row in rows_of(the(ACC_CHECK, "details"))}
    assert ours.pop("API Name") == theirs.pop("API Name") == list(MSPROBE.details_columns)
    assert rows_of(the(pytester.path / "out", "result"))[0] == rows_of(the(ACC_CHECK, "result"))[0]
    assert set(theirs) <= set(ours)
    assert ours["Functional.conv2d.0.backward.output.0"][21:] == ["SKIP", msprobe_pytorch.NO_GRADIENT]
    compared = 0
    for name, row in theirs.items():
        mine = ours[name]
        if row[1:3] != ["torch.float64", "torch.float32"] or mine[1:3] != row[1:3] or mine[21] == "SKIP":
            # msprobe's bench in float32 (HF32 conv, casts), autocast it does not model, a gradient not recorded
            continue
        assert mine[3] == row[3], name
        assert [cell == " " for cell in mine[4:21]] == [cell == " " for cell in row[4:21]], name
        for header, a, b in zip(MSPROBE.details_columns[4:21], mine[4:21], row[4:21]):
            if a != " " and header in ("余弦相似度", "最大绝对误差", "均方根误差"):
                assert math.isclose(float(a), float(b), rel_tol=1e-3, abs_tol=1e-6), (name, header, a, b)
        compared += 1
    assert compared > 40
    passing = next(row for name, row in ours.items() if name == "Functional.layer_norm.0.forward.output.0")
    assert passing[21:] == ["pass", " "]


@pytest.mark.parametrize("device", ["recorded", pytest.param("recorded,cpu", marks=pytest.mark.slow)])
def test_the_recorded_outputs_judged_are_numbered_as_msprobe_numbers_them(pytester, copy_dump, device) -> None:
    """msprobe recorded linear's gradients at its addmm node (bias, input, weight) and conv2d's
    without its data input's: the rows still number them by the call's arguments, as its acc_check."""
    dump = copy_dump("pt_tensor_L1")
    result = run_msprobe(
        pytester, dump, "-k", "conv2d or Functional.linear.0 or cat", "--msprobe-csv-layout", "msprobe-pytorch",
        device=device,
    )  # fmt: skip
    assert result.ret == 0
    ours = [row for row in rows_of(the(pytester.path / "out", "details"))[1:] if ".backward." in row[0]]
    theirs = {row[0] for row in rows_of(the(ACC_CHECK, "details")) if ".backward." in row[0]}
    assert {row[0] for row in ours} == {
        n for n in theirs if n.startswith(("Functional.conv2d.0", "Functional.linear.0", "Torch.cat"))
    }
    sides = 2 if "," in device else 1  # recorded,cpu: each output's row once a side, the side in its Message
    assert len(ours) == sides * 7 + 1  # conv2d's data input: one SKIP row, whatever the sides
    shapes = {row[0]: row[3] for row in ours}
    assert shapes["Functional.linear.0.backward.output.0"] == "(2, 64)"  # the input's, not the bias's
    assert shapes["Functional.linear.0.backward.output.2"] == "(32,)"
    skipped = [row for row in ours if row[21] == "SKIP"]
    assert {row[0] for row in skipped} == {"Functional.conv2d.0.backward.output.0"}
    assert all(cell != " " for row in ours if row[21] != "SKIP" for cell in (row[5], row[11]))  # MaxAbsErr, RMSE


@pytest.mark.slow
def test_a_killed_run_resumed_keeps_the_layout_and_every_api_once(pytester, copy_dump) -> None:
    first = run(pytester, copy_dump, "-k", "forward and (conv2d or linear or matmul)")
    assert first.ret == 1
    result_csv = the(pytester.path / "out", "result")
    # The resumed run is not told the layout again: it appends in its file's.
    resumed = run_msprobe(
        pytester, pytester.path / "pt_tensor_L1" / "dump.json", "-k", "conv2d or linear or matmul",
        "--msprobe-resume", str(result_csv), device="cpu",
    )  # fmt: skip
    assert resumed.ret == 1
    results = rows_of(result_csv)
    assert results[0] == list(MSPROBE.result_columns)
    apis = [row[0] for row in results[1:]]
    assert len(apis) == len(set(apis)) == 5  # conv2d, linear x2, matmul x2: each once, both directions
    assert all(row[2] in ("pass", "error") for row in results[1:])
    details = rows_of(the(pytester.path / "out", "details"))
    assert details[0] == list(MSPROBE.details_columns) and all(len(row) == 23 for row in details)
    conv = [row for row in details if row[0].startswith("Functional.conv2d.0.backward")]
    assert [row[0][-1] for row in conv] == ["0", "1", "2"] and conv[1][11] != " "  # RMSE computed on resume too


@pytest.mark.slow
def test_shards_in_this_layout_merge_into_one_pair_of_it(pytester, copy_dump, capsys) -> None:
    pytest.importorskip("pytest_split")
    from pytest_msprobe.reports import merge

    serial = run(pytester, copy_dump, "-k", "conv2d or linear", out="serial")
    for group in (1, 2):
        run(pytester, copy_dump, "-k", "conv2d or linear", "--splits", "2", "--group", str(group), out=f"shard{group}")
    status = merge.main(
        [str(pytester.path / "shard1"), str(pytester.path / "shard2"), "--out", str(pytester.path / "merged")]
    )
    out = capsys.readouterr().out
    assert status == 1 and serial.ret == 1
    for kind in ("result", "details"):
        merged = rows_of(the(pytester.path / "merged", kind))
        single = rows_of(the(pytester.path / "serial", kind))
        assert merged[0] == single[0] and sorted(merged[1:]) == sorted(single[1:])
    assert "failures, worst first:" in out


@pytest.mark.slow
def test_shards_of_two_layouts_are_refused(pytester, copy_dump, capsys) -> None:
    from pytest_msprobe.reports import merge

    run(pytester, copy_dump, "-k", "relu", out="one")
    run_msprobe(pytester, pytester.path / "pt_tensor_L1" / "dump.json", "-k", "relu", out="other", device="cpu")
    status = merge.main(
        [str(pytester.path / "one"), str(pytester.path / "other"), "--out", str(pytester.path / "merged")]
    )
    assert status == 2
    assert "CSV layout" in capsys.readouterr().err


@pytest.mark.slow
def test_a_baseline_and_the_html_report_read_a_pair_of_this_layout(pytester, copy_dump) -> None:
    pytest.importorskip("plotly")
    first = run(pytester, copy_dump, "-k", "matmul", out="before")
    assert first.ret == 1
    result_csv = the(pytester.path / "before", "result")
    again = run(pytester, copy_dump, "-k", "matmul", "--msprobe-baseline", str(result_csv), out="after")
    assert again.ret == 0  # its errors are the baseline's: expected failures
    again.assert_outcomes(xfailed=2, passed=2)
    page = pytester.path / "report.html"
    report = pytester.run(sys.executable, "-m", "pytest_msprobe.report", str(result_csv), "--html", str(page))
    assert report.ret == 0, report.stderr.str()
    assert "(4 entries)" in report.stdout.str()
    assert "Torch.matmul.1" in page.read_text(encoding="utf-8")


@pytest.mark.slow
def test_xdist_workers_send_the_metrics_the_controller_writes(pytester, copy_dump) -> None:
    run(pytester, copy_dump, "-k", "linear or layer_norm", out="serial")
    run(pytester, copy_dump, "-k", "linear or layer_norm", "-n", "2", out="xdist")
    for kind in ("result", "details"):
        assert sorted(rows_of(the(pytester.path / "xdist", kind))) == sorted(
            rows_of(the(pytester.path / "serial", kind))
        )


def test_the_default_layout_is_unchanged_by_the_option_table(pytester, copy_dump) -> None:
    result = run_msprobe(pytester, copy_dump("pt_tensor_L1"), "-k", "relu", device="cpu")
    assert result.ret == 0
    rows = read_csv(pytester.path / "out", "details")
    assert list(rows[0]) == list(layouts.DEFAULT.details_columns)


def test_metric_fields_are_the_layouts_metric_columns() -> None:
    assert len(METRIC_FIELDS) == len(MSPROBE.details_columns[4:21]) == 17
