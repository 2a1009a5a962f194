"""`python -m pytest_msprobe.compare`: msprobe's api_precision_compare rules on two runs' details CSVs.

The cases (tests/compare_cases.py) are hand-written rows on both sides of every threshold; the
slow tests in test_compare_msprobe.py feed the same pairs to msprobe's own tool.
"""

from __future__ import annotations

import json
import math
import shutil
from pathlib import Path

import pytest
from compare_cases import API_RESULTS, BASE, CASES, Case, Side, bench, read_rows, write_details, write_pair

from pytest_msprobe.judging import precision_compare as rules
from pytest_msprobe.reports import compare
from pytest_msprobe.reports.layouts import DEFAULT


def run(capsys: pytest.CaptureFixture, *args: object) -> tuple[int, str, str]:
    status = compare.main([str(arg) for arg in args])
    captured = capsys.readouterr()
    return status, captured.out, captured.err


def written(out: Path, kind: str) -> list[dict[str, str]]:
    files = sorted(out.glob(f"api_precision_compare_{kind}_*.csv"))
    assert len(files) == 1, files
    return read_rows(files[0])


@pytest.fixture
def compared(tmp_path: Path, capsys: pytest.CaptureFixture) -> tuple[int, str, Path]:
    npu, gpu = write_pair(tmp_path, CASES)
    status, out, err = run(capsys, "--npu", npu, "--gpu", gpu, "-o", tmp_path / "out")
    assert not err
    return status, out, tmp_path / "out"


def test_every_case_gets_its_status(compared: tuple[int, str, Path]) -> None:
    _, _, out = compared
    statuses = {row["API Name"]: row["比对结果"] for row in written(out, "details")}
    assert statuses == {case.name: case.ours for case in CASES}


def test_one_result_row_per_api_rolled_up(compared: tuple[int, str, Path]) -> None:
    _, _, out = compared
    rows = written(out, "result")
    names = [row["API Name"] for row in rows]
    assert len(names) == len(set(names))  # an API's rows apart from each other still make one row
    results = {row["API Name"]: (row["Forward Test Success"], row["Backward Test Success"]) for row in rows}
    for api, (ours, _msprobe) in API_RESULTS.items():
        assert results[api] == ours, api


def test_an_error_fails_the_command_and_says_why(compared: tuple[int, str, Path]) -> None:
    status, out, path = compared
    assert status == 1
    assert "Functional.relu.1: forward.output.0: 均方根误差比值 2.1 > 2 (L0)" in out
    assert "Torch.matmul.1: forward.output.0: 均方根误差比值 1.3 > 1.2 (L2)" in out
    result = {row["API Name"]: row["Message"] for row in written(path, "result")}
    assert result["Functional.embedding.1"] == "forward.output.0: 相对误差最大值比值 6 > 5 (L1)"
    assert "no row Functional.softmax.0.forward.output.0 in " in result["Functional.softmax.0"]


def test_the_details_carry_msprobe_columns_and_cells(compared: tuple[int, str, Path]) -> None:
    _, _, out = compared
    files = sorted(out.glob("api_precision_compare_details_*.csv"))
    header = files[0].read_text(encoding="utf-8-sig").splitlines()[0].split(",")
    assert tuple(header) == compare.DETAILS_COLUMNS and len(header) == 28
    rows = {row["API Name"]: row for row in written(out, "details")}
    relu = rows["Functional.relu.1.forward.output.0"]
    assert relu["均方根误差比值"] == "2.10000000000000" and relu["均方根误差判定结果"] == "error"
    assert relu["比对算法"] == "标杆比对法" and relu["Message"] == "ERROR: 均方根误差比值超过阈值"
    assert relu["inf/nan错误率"] == " "  # msprobe's blank
    assert rows["Tensor.to.1.forward.output.0"]["比对算法"] == "ULP误差比对法"
    assert rows["Torch.matmul.3.forward.output.0"]["相对误差判定结果"] == "error"
    assert rows["Torch.argmax.1.forward.output.0"]["比对算法"] == "二进制一致法"
    assert "inf或nan不一致" in rows["Torch.exp.1.forward.output.0"]["Message"]


def test_a_clean_pair_passes(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    npu, gpu = write_pair(tmp_path, [c for c in CASES if c.ours == "pass"])
    status, out, _ = run(capsys, "-npu", npu, "-gpu", gpu, "-o", tmp_path / "out")  # msprobe's spelling too
    assert status == 0, out
    assert "error" not in {row["比对结果"] for row in written(tmp_path / "out", "details")}


def test_folders_are_matched_by_name_as_the_merge_does(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    passing = [c for c in CASES if c.ours == "pass"]
    failing = [c for c in CASES if c.ours == "error"]
    for rank, cases in (("rank0", passing), ("rank1", failing)):
        npu, gpu = write_pair(tmp_path / "pairs" / rank, cases)
        for side, path in (("npu", npu), ("gpu", gpu)):
            (tmp_path / side / rank).mkdir(parents=True)
            shutil.copy(path, tmp_path / side / rank / path.name)
    status, out, _ = run(capsys, "--npu", tmp_path / "npu", "--gpu", tmp_path / "gpu", "-o", tmp_path / "out")
    assert status == 1
    assert {row["比对结果"] for row in written(tmp_path / "out" / "rank0", "details")} == {"pass"}
    assert {row["比对结果"] for row in written(tmp_path / "out" / "rank1", "details")} == {"error"}
    assert str(tmp_path / "out" / "rank1") in out


def test_a_result_csv_names_its_details(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    npu, gpu = write_pair(tmp_path, CASES[:3])
    result = npu.with_name(npu.name.replace("details", "result"))
    result.write_text("\ufeffAPI name,Forward Test Success,Backward Test Success,Message\n", encoding="utf-8")
    status, _, err = run(capsys, "--npu", result, "--gpu", gpu, "-o", tmp_path / "out")
    assert status == 1 and not err


@pytest.mark.parametrize(
    ("make", "says"),
    [
        (
            lambda p: write_details(p, []).write_text(",".join(DEFAULT.details_columns) + "\n"),
            "--msprobe-csv-layout msprobe-pytorch",
        ),
        (lambda p: p.write_text("API Name,DEVICE Dtype\nx,y\n"), "no column Bench Dtype, Shape"),
        (lambda p: p.write_bytes(b"\xff\xfe\x00bad"), "not utf-8-sig text (byte 0 is"),
        (lambda p: None, "no such file or folder"),
    ],
    ids=["default-layout", "other-csv", "not-text", "missing"],
)
def test_a_usage_error_names_the_file_and_what_is_wrong(
    tmp_path: Path, capsys: pytest.CaptureFixture, make, says
) -> None:
    _, gpu = write_pair(tmp_path, CASES[:2])
    npu = tmp_path / "accuracy_checking_details_20260101000001.csv"
    make(npu)
    status, _, err = run(capsys, "--npu", npu, "--gpu", gpu, "-o", tmp_path / "out")
    assert status == 2
    assert f"--npu {npu}" in err or str(npu) in err
    assert says in err
    assert not (tmp_path / "out").exists()


def test_an_output_twice_in_one_run_is_a_usage_error(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    npu, gpu = write_pair(tmp_path, CASES[:2])
    write_details(gpu, [CASES[0].gpu.cells(CASES[0].name)] * 2)
    status, _, err = run(capsys, "--npu", npu, "--gpu", gpu, "-o", tmp_path / "out")
    assert status == 2
    assert f"{gpu} line 3: {CASES[0].name} has a row already (line 2)" in err


def test_a_cell_that_is_no_number_skips_that_output_naming_it(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    npu, gpu = write_pair(tmp_path, [CASES[1]])
    cells = CASES[1].npu.cells(CASES[1].name)
    cells[11] = "abc"  # 均方根误差
    write_details(npu, [cells])
    status, _, _ = run(capsys, "--npu", npu, "--gpu", gpu, "-o", tmp_path / "out")
    (row,) = written(tmp_path / "out", "details")
    assert status == 0 and row["比对结果"] == "SKIP"
    assert row["Message"] == f"{npu} line 2: 均方根误差 'abc' is not a number"


def test_no_folder_in_common_is_a_usage_error(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    npu, _gpu = write_pair(tmp_path / "a" / "rank0", CASES[:1])
    write_pair(tmp_path / "b" / "rank1", CASES[:1])
    status, _, err = run(capsys, "--npu", npu.parent, "--gpu", tmp_path / "b", "-o", tmp_path / "out")
    assert status == 2 and "have no folder in common" in err


# -- the rules, one by one -----------------------------------------------------


def test_ratio_takes_the_dtype_minimum_denominator() -> None:
    assert rules.ratio(1e-3, 0.0, "torch.float32")[0] == pytest.approx(1e-3 / 2**-14)
    assert rules.ratio(1e-3, 0.0, "torch.float16")[0] == pytest.approx(1e-3 / 2**-11)
    assert rules.ratio(-3.0, 1.5, "torch.bfloat16") == (2.0, True, "")
    value, same, _ = rules.ratio(math.inf, math.inf, "torch.float32")
    assert math.isnan(value) and same
    assert not rules.ratio(math.inf, -math.inf, "torch.float32")[1]
    assert not rules.ratio(math.nan, math.inf, "torch.float32")[1]
    assert rules.ratio(math.nan, math.nan, "torch.float32")[1]


@pytest.mark.parametrize(
    ("api", "level"),
    [("matmul", "L2"), ("layer_norm", "L2"), ("embedding", "L1"), ("relu", "L0"), ("linalg.norm", "L0")],
)
def test_api_levels(api: str, level: str) -> None:
    assert rules.api_level(api) == level


@pytest.mark.parametrize(
    ("side", "rule"),
    [
        (Side(dtype="torch.bfloat16"), rules.BENCHMARK),
        (Side(dtype="torch.float8_e5m2"), rules.ULP),
        (Side(metrics={"rel_err_ratio": 0.0}), rules.ABSOLUTE_THRESHOLD),
        (Side(dtype="torch.uint8"), rules.BINARY),
        (Side(dtype="<class 'bool'>"), rules.BINARY),
    ],
)
def test_the_rule_an_output_gets(side: Side, rule: str) -> None:
    (output,) = compare.read_details(_one(side), "--npu")
    assert rules.rule_of(output.row) == rule


def _one(side: Side, path: Path = Path("/tmp")) -> Path:
    import tempfile

    folder = Path(tempfile.mkdtemp())
    return write_details(
        folder / "accuracy_checking_details_20260101000000.csv", [side.cells("Functional.relu.0.forward.output.0")]
    )


def test_base_metrics_pass_against_themselves() -> None:
    assert set(BASE) <= {f for f in compare.METRIC_COLUMNS}
    (npu,) = compare.read_details(_one(bench()), "--npu")
    judged = rules.judge("relu", npu.row, npu.row)
    assert judged.status == "pass" and judged.algorithm == rules.BENCHMARK


# -- beyond msprobe: which run is nearer float64 -------------------------------


def by_this_plugin(details: Path) -> None:
    """A manifest beside the pair's result CSV, as this plugin writes one."""
    stamp = details.stem.rsplit("_", 1)[-1]
    manifest = {"format": 1, "plugin": "0.1.0", "dump": {"path": "dump.json", "sha256": "00" * 32}}
    (details.parent / f"accuracy_checking_run_{stamp}.json").write_text(json.dumps(manifest) + "\n")


def test_where_both_runs_are_this_plugins_each_output_says_which_is_nearer_float64(
    tmp_path: Path, capsys: pytest.CaptureFixture
) -> None:
    cases = [
        Case("Functional.relu.1.forward.output.0", bench(rmse=2.5), bench(), "error"),
        Case("Functional.relu.2.forward.output.0", bench(rmse=0.5), bench(), "pass"),
        Case("Functional.relu.3.forward.output.0", bench(), bench(), "pass"),
        Case(
            "Torch.argmax.0.forward.output.0",
            Side("torch.int64", metrics={"error_rate": 0.0}),
            Side("torch.int64", metrics={"error_rate": 0.5}),
            "pass",
        ),
        Case("Functional.relu.4.forward.output.0", Side(dtype=" "), Side(dtype=" "), "SKIP"),
    ]
    npu, gpu = write_pair(tmp_path, cases)
    by_this_plugin(npu)
    by_this_plugin(gpu)
    run(capsys, "--npu", npu, "--gpu", gpu, "-o", tmp_path / "out")
    rows = {row["API Name"]: row for row in written(tmp_path / "out", "details")}
    closer = {name: row[compare.CLOSER] for name, row in rows.items()}
    assert closer == {
        "Functional.relu.1.forward.output.0": "GPU (RMSE 2.5x smaller: 0.001 against 0.0025)",
        "Functional.relu.2.forward.output.0": "NPU (RMSE 2x smaller: 0.0005 against 0.001)",
        "Functional.relu.3.forward.output.0": "as near (RMSE 0.001)",
        "Torch.argmax.0.forward.output.0": "NPU (mismatch rate 0 against 0.5)",
        "Functional.relu.4.forward.output.0": "",
    }
    assert list(rows["Functional.relu.1.forward.output.0"])[:28] == list(compare.DETAILS_COLUMNS)


def test_nearer_float64_is_said_only_where_both_runs_are_this_plugins(
    tmp_path: Path, capsys: pytest.CaptureFixture
) -> None:
    npu, gpu = write_pair(tmp_path, CASES[:3])
    by_this_plugin(npu)  # the GPU run is msprobe's acc_check's: no manifest, its bench not this plugin's
    run(capsys, "--npu", npu, "--gpu", gpu, "-o", tmp_path / "out")
    assert compare.CLOSER not in written(tmp_path / "out", "details")[0]


def test_a_bench_that_fell_back_from_float64_says_nothing_of_nearness(
    tmp_path: Path, capsys: pytest.CaptureFixture
) -> None:
    npu, gpu = write_pair(tmp_path, CASES[:1])
    cells = CASES[0].npu.cells(CASES[0].name)
    cells[1] = "torch.float32"  # Bench Dtype: float64 had no kernel
    write_details(npu, [cells])
    by_this_plugin(npu)
    by_this_plugin(gpu)
    run(capsys, "--npu", npu, "--gpu", gpu, "-o", tmp_path / "out")
    assert written(tmp_path / "out", "details")[0][compare.CLOSER] == ""


def test_a_folder_one_run_lacks_is_said(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    for rank, sides in (("rank0", ("npu", "gpu")), ("rank1", ("npu",)), ("rank2", ("gpu",))):
        npu, gpu = write_pair(tmp_path / "pairs" / rank, [c for c in CASES if c.ours == "pass"][:2])
        for side in sides:
            (tmp_path / side / rank).mkdir(parents=True)
            path = npu if side == "npu" else gpu
            shutil.copy(path, tmp_path / side / rank / path.name)
    status, out, _ = run(capsys, "--npu", tmp_path / "npu", "--gpu", tmp_path / "gpu", "-o", tmp_path / "out")
    assert status == 0
    assert {row["Message"] for row in written(tmp_path / "out" / "rank1", "details")} == {
        "the GPU run has no folder rank1: nothing to compare with"
    }
    assert "rank2: the NPU run has no such folder: not compared" in out


def test_two_comparisons_in_one_second_keep_both_pairs(
    tmp_path: Path, capsys: pytest.CaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(compare, "timestamp", lambda: "20260101000000")
    npu, gpu = write_pair(tmp_path, CASES[:3])
    (tmp_path / "out").mkdir()
    (tmp_path / "out" / "api_precision_compare_details_20260101000000_1.csv").symlink_to(tmp_path / "elsewhere")
    for _ in range(2):
        run(capsys, "--npu", npu, "--gpu", gpu, "-o", tmp_path / "out")
    names = sorted(path.name for path in (tmp_path / "out").glob("api_precision_compare_result_*.csv"))
    # the second pair's _1 details name holds a link: never written through, the pair takes _2
    assert names == [
        "api_precision_compare_result_20260101000000.csv",
        "api_precision_compare_result_20260101000000_2.csv",
    ]
    assert not (tmp_path / "elsewhere").exists()
    first = (tmp_path / "out" / "api_precision_compare_details_20260101000000.csv").read_bytes()
    assert first.startswith("\ufeffAPI Name,".encode())
