"""`python -m pytest_msprobe.compare` beside msprobe 26.2.0's own `api_precision_compare`, on the same
pairs: hand-written rows on both sides of every rule's thresholds (tests/compare_cases.py), and the
CSV pairs msprobe's own acc_check writes (its CPU run) for a clean device and a faulty one. The two
give every row the same status, but where msprobe's code hides a fault (docs/compare.md): there
the difference is asserted, case by case. msprobe runs in its own environment (tests/msprobe_venv.py).
"""

from __future__ import annotations

import subprocess
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
from compare_cases import API_RESULTS, CASES, read_rows, write_pair
from compare_runs import msprobe_compare, only, ours, results, run_plugin, statuses
from msprobe_venv import MsprobeVenv

from pytest_msprobe.reports import compare

pytestmark = pytest.mark.slow
ROOT = Path(__file__).resolve().parent.parent
DUMP = ROOT / "examples" / "pt_tensor_L1" / "dump.json"
FAULTY = ("gelu", "softmax", "matmul")  # msprobe's names of the APIs the faulty device gets wrong


def test_msprobe_gives_the_cases_our_status_but_where_it_hides_a_fault(
    msprobe_venv: MsprobeVenv, tmp_path: Path
) -> None:
    npu, gpu = write_pair(tmp_path, CASES)
    done = msprobe_compare(msprobe_venv, npu, gpu, tmp_path / "msprobe")
    status, _ = ours(npu, gpu, tmp_path / "ours")
    assert status == 1
    theirs, mine = statuses(tmp_path / "msprobe"), statuses(tmp_path / "ours")
    assert mine == {case.name: case.ours for case in CASES}
    expected = {case.name: case.msprobe_status for case in CASES if case.msprobe != "dropped"}
    assert theirs == expected
    # the one msprobe drops, it drops without a word but a log line
    dropped = [case.name for case in CASES if case.msprobe == "dropped"]
    assert dropped and all(
        f"This API : {name} does not exist in the GPU data." in done.stdout + done.stderr for name in dropped
    )

    their_rows, our_rows = results(tmp_path / "msprobe"), results(tmp_path / "ours")
    assert len({api for api, *_ in our_rows}) == len(our_rows)
    for api, forward, backward in our_rows:
        ours_expected, msprobe_rows = API_RESULTS.get(api, ((forward, backward), None))
        assert (forward, backward) == ours_expected, api
        theirs_of_api = [(f, b) for name, f, b in their_rows if name == api]
        assert theirs_of_api == ([(forward, backward)] if msprobe_rows is None else msprobe_rows), api
    # the output msprobe raised on gets a result row of its own name, SKIP both ways
    assert ("Tensor.item.0.forward.output.0", "SKIP", "SKIP") in their_rows


@pytest.fixture(scope="module")
def acc_check_pair(msprobe_venv: MsprobeVenv, tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """msprobe's acc_check on one dump twice, its CPU as the device: clean (the GPU run) and with
    FAULTY's outputs off by a relative 1e-3 (the NPU run). Their folders (npu, gpu)."""
    root = tmp_path_factory.mktemp("acc_check")
    runs = {"gpu": (), "npu": FAULTY}
    with ThreadPoolExecutor(2) as pool:
        done = dict(zip(runs, pool.map(lambda side: msprobe_venv.acc_check_cpu(DUMP, root / side, runs[side]), runs)))
    for side, run in done.items():
        assert run.returncode == 0, f"{side}: {run.stdout[-2000:]}{run.stderr[-2000:]}"
    return root / "npu", root / "gpu"


def test_msprobe_acc_check_pairs_are_read_and_judged_alike(
    msprobe_venv: MsprobeVenv, acc_check_pair: tuple[Path, Path], tmp_path: Path, capsys: pytest.CaptureFixture
) -> None:
    npu, gpu = acc_check_pair
    msprobe_compare(
        msprobe_venv,
        only(npu, "accuracy_checking_details_*.csv"),
        only(gpu, "accuracy_checking_details_*.csv"),
        tmp_path / "msprobe",
    )
    status, _ = ours(npu, gpu, tmp_path / "ours")  # the run folders, as acc_check left them
    out = capsys.readouterr().out
    assert status == 1
    assert statuses(tmp_path / "ours") == statuses(tmp_path / "msprobe")
    assert results(tmp_path / "ours") == results(tmp_path / "msprobe")
    failed = sorted(api for api, forward, backward in results(tmp_path / "ours") if "error" in (forward, backward))
    assert failed == ["Functional.gelu.0", "Torch.matmul.0", "Torch.softmax.0"]  # matmul.1 is bf16: 1e-3 is its noise
    assert "Torch.matmul.0: forward.output.0: 均方根误差比值" in out


def test_a_clean_acc_check_pair_passes(acc_check_pair: tuple[Path, Path], tmp_path: Path) -> None:
    _, gpu = acc_check_pair
    status, out = ours(gpu, gpu, tmp_path / "ours")
    assert status == 0
    assert set(statuses(out).values()) == {"pass", "SKIP"}


def test_an_output_twice_in_the_gpu_run_stops_msprobe_silently_and_is_a_usage_error_here(
    msprobe_venv: MsprobeVenv, tmp_path: Path, capsys: pytest.CaptureFixture
) -> None:
    cases = [case for case in CASES if case.msprobe is None and case.gpu is not None][:6]
    npu, gpu = write_pair(tmp_path, cases)
    rows = gpu.read_text(encoding="utf-8-sig").splitlines()
    gpu.write_text("\n".join([*rows, rows[4]]) + "\n", encoding="utf-8-sig")  # the 4th output twice
    done = msprobe_compare_anyway(msprobe_venv, npu, gpu, tmp_path / "msprobe")
    assert done.returncode == 0  # msprobe: exit 0, and the rows before the duplicate only
    assert list(statuses(tmp_path / "msprobe")) == [case.name for case in cases[:3]]
    assert compare.main(["--npu", str(npu), "--gpu", str(gpu), "-o", str(tmp_path / "ours")]) == 2
    assert f"{gpu} line {len(rows) + 1}: {cases[3].name} has a row already (line 5)" in capsys.readouterr().err
    assert not (tmp_path / "ours").exists()


def msprobe_compare_anyway(msprobe_venv: MsprobeVenv, npu: Path, gpu: Path, out: Path) -> subprocess.CompletedProcess:
    return msprobe_venv.msprobe("api_precision_compare", "-npu", str(npu), "-gpu", str(gpu), "-o", str(out))


# -- the round trip: two runs of this plugin in msprobe's layout -----------------------------------

# The faulty run's deficits (tests/deficits.py, planted in the recorded outputs) and a control, a
# correct kernel that merely computes otherwise: (entry, kind, its output row, the status it must get).
PLANTED = (
    ("Functional.linear.0.forward", "tf32", "Functional.linear.0.forward.output.0", "error"),
    ("Torch.matmul.0.forward", "tf32", "Torch.matmul.0.forward.output.0", "error"),
    ("Torch.matmul.1.forward", "accumulate_low", "Torch.matmul.1.forward.output.0", "error"),
    ("Functional.gelu.0.forward", "gelu_tanh", "Functional.gelu.0.forward.output.0", "error"),
    ("Functional.layer_norm.0.backward", "missing_term", "Functional.layer_norm.0.backward.output.0", "error"),
    ("Functional.layer_norm.0.forward", "welford", "Functional.layer_norm.0.forward.output.0", "pass"),
)


@pytest.fixture(scope="module")
def faulty_dump(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The example dump with PLANTED's recorded outputs replaced: the NPU's."""
    import deficits

    root = tmp_path_factory.mktemp("faulty") / "dump"  # build_corpus makes the folder
    deficits.build_corpus(DUMP.parent, root, [(entry, kind) for entry, kind, *_ in PLANTED])
    return root / "dump.json"


@pytest.fixture(scope="module")
def plugin_pair(tmp_path_factory: pytest.TempPathFactory, faulty_dump: Path) -> tuple[Path, Path]:
    """This plugin's runs in msprobe's PyTorch layout, --msprobe-device recorded: the example dump as
    recorded (the GPU run) and the faulty copy (the NPU run). Their out folders."""
    root = tmp_path_factory.mktemp("plugin_pair")
    for side, dump in (("gpu", DUMP), ("npu", faulty_dump)):
        run_plugin(dump, root / side, "--msprobe-csv-layout", "msprobe-pytorch")
    return root / "npu", root / "gpu"


def test_msprobe_reads_this_plugins_runs_and_judges_them_alike(
    msprobe_venv: MsprobeVenv, plugin_pair: tuple[Path, Path], tmp_path: Path
) -> None:
    npu, gpu = plugin_pair
    npu_csv, gpu_csv = (only(folder, "accuracy_checking_details_*.csv") for folder in (npu, gpu))
    done = msprobe_compare(msprobe_venv, npu_csv, gpu_csv, tmp_path / "msprobe")
    assert "does not exist in the GPU data" not in done.stdout + done.stderr
    status, _ = ours(npu, gpu, tmp_path / "ours")
    assert status == 1
    theirs, mine = statuses(tmp_path / "msprobe"), statuses(tmp_path / "ours")
    assert mine == theirs
    assert len(mine) == len(read_rows(npu_csv))  # every output of the NPU run judged, none dropped
    assert results(tmp_path / "ours") == results(tmp_path / "msprobe")
    assert {row: mine[row] for *_, row, _ in PLANTED} == {row: expected for *_, row, expected in PLANTED}
    assert {name for name, status in mine.items() if status == "error"} == {
        row for *_, row, expected in PLANTED if expected == "error"
    }


def test_the_details_say_which_run_is_nearer_float64_and_pandas_reads_msprobe_columns_first(
    msprobe_venv: MsprobeVenv, plugin_pair: tuple[Path, Path], tmp_path: Path
) -> None:
    npu, gpu = plugin_pair
    ours(npu, gpu, tmp_path / "ours")
    details = only(tmp_path / "ours", "api_precision_compare_details_*.csv")
    closer = {row["API Name"]: row[compare.CLOSER] for row in read_rows(details)}
    for *_, row, expected in PLANTED:
        assert closer[row].startswith("GPU (RMSE " if expected == "error" else "NPU (RMSE "), (row, closer[row])
    # a reader by column name (msprobe's read_csv is pandas') finds msprobe's 28 columns first
    code = "import sys, pandas; print('|'.join(pandas.read_csv(sys.argv[1]).columns))"
    columns = msprobe_venv.run("-c", code, str(details)).stdout.strip().split("|")
    assert columns == [*compare.DETAILS_COLUMNS, compare.CLOSER]


def test_msprobes_own_run_is_a_reference_for_the_benchmark_standard(
    acc_check_pair: tuple[Path, Path], faulty_dump: Path, tmp_path: Path
) -> None:
    """--msprobe-standard benchmark against the clean run of msprobe's own acc_check: every output
    found by its name in msprobe's numbering (a backward's counts every positional tensor)."""
    _, gpu = acc_check_pair
    done = run_plugin(faulty_dump, tmp_path / "out", "--msprobe-standard", "benchmark", "--msprobe-reference", str(gpu))
    assert done.returncode == 1
    rows = {row["API Name"]: row for row in read_rows(only(tmp_path / "out", "accuracy_checking_details_*.csv"))}
    status = {name: row["Status"] for name, row in rows.items()}
    assert {name for name, s in status.items() if s == "error"} == {
        row for *_, row, expected in PLANTED if expected == "error"
    }
    # msprobe never checks Tensor.to (its fixed black list): its rows of it are blank, or none
    skipped = {name for name, s in status.items() if s == "SKIP"}
    assert skipped and all(name.startswith("Tensor.to.") for name in skipped), skipped
    assert any("the reference run has no such output" in rows[name]["Message"] for name in skipped)
