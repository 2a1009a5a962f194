"""--msprobe-standard benchmark --msprobe-reference B: msprobe's api_precision_compare inside a run.

Each output of this run is judged by its msprobe metrics over those of the reference run's row of
the same name (judging/standards/benchmark.py). The reference here is this plugin's own run of the
example dump in msprobe's layout; the run judged is a copy of the dump with deficient kernels
planted in its recorded outputs (tests/deficits.py), --msprobe-device recorded. A few entries each
(-k), so that the runs stay short; tests/test_compare_msprobe.py takes msprobe's own acc_check run
for the reference.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import deficits
import pytest

from conftest import DUMPS, read_csv, run_msprobe

ENTRIES = "linear.0 or matmul.0 or matmul.1 or gelu.0 or layer_norm.0"
PLANTED = [
    ("Functional.linear.0.forward", "tf32"),
    ("Torch.matmul.0.forward", "tf32"),
    ("Torch.matmul.1.forward", "accumulate_low"),
    ("Functional.gelu.0.forward", "gelu_tanh"),
    ("Functional.layer_norm.0.backward", "missing_term"),
    ("Functional.layer_norm.0.forward", "welford"),  # a correct kernel that computes otherwise
]
PLANTED_ERRORS = {tuple(entry.rsplit(".", 1)) for entry, kind in PLANTED if kind != "welford"}


@pytest.fixture
def reference(pytester: pytest.Pytester, copy_dump) -> Path:
    """This plugin's run of the example dump (ENTRIES only) in msprobe's layout: the reference run."""
    dump = copy_dump("pt_tensor_L1")
    run_msprobe(
        pytester, dump, "-k", ENTRIES, "--msprobe-csv-layout", "msprobe-pytorch", out="reference", device="recorded"
    )
    return pytester.path / "reference"


@pytest.fixture
def faulty(pytester: pytest.Pytester) -> Path:
    deficits.build_corpus(DUMPS["pt_tensor_L1"], pytester.path / "faulty", PLANTED)
    for path in (pytester.path / "faulty").rglob("*"):
        path.chmod(0o644 if path.is_file() else 0o755)
    return pytester.path / "faulty" / "dump.json"


def judged(pytester: pytest.Pytester, dumps, reference, *args: str, out: str = "out") -> pytest.RunResult:
    """A run of dumps under --msprobe-standard benchmark against reference, their recorded outputs judged."""
    benchmark = ("--msprobe-standard", "benchmark", "--msprobe-reference", str(reference))
    return run_msprobe(pytester, dumps, *benchmark, *args, out=out, device="recorded")


def errors_of(folder: Path) -> set[tuple[str, str]]:
    """(API, direction) of every entry whose result row in folder says error."""
    return {
        (row["API Name"], direction)
        for row in read_csv(folder, "result")
        for direction, status in (("forward", row["Forward Test Success"]), ("backward", row["Backward Test Success"]))
        if status == "error"
    }


def test_the_planted_deficits_fail_by_their_ratios_to_the_reference(pytester, reference, faulty) -> None:
    result = judged(pytester, faulty, reference, "-k", ENTRIES)
    assert errors_of(pytester.path / "out") == {
        tuple(entry.rsplit(".", 1)) for entry, kind in PLANTED if kind != "welford"
    }
    assert result.parseoutcomes()["failed"] == 5
    assert result.ret == pytest.ExitCode.TESTS_FAILED
    details = {row["API Name"]: row for row in read_csv(pytester.path / "out", "details")}
    matmul = details["Torch.matmul.0.forward.output.0"]
    assert matmul["Status"] == "error"
    assert "均方根误差比值" in matmul["Message"] and "> 1.2 (L2)" in matmul["Message"]  # matmul is L2
    assert "> 2 (L0)" in details["Functional.gelu.0.forward.output.0"]["Message"]  # gelu is L0
    assert details["Functional.layer_norm.0.forward.output.0"]["Status"] == "pass"  # Welford's
    result.stdout.fnmatch_lines(["*benchmark (msprobe's api_precision_compare*", "*reference run: *reference*"])


def test_the_reference_run_judged_against_itself_passes(pytester, reference, copy_dump) -> None:
    dump = pytester.path / "pt_tensor_L1" / "dump.json"
    result = judged(pytester, dump, reference, "-k", ENTRIES)
    outcomes = result.parseoutcomes()
    assert result.ret == pytest.ExitCode.OK and outcomes["passed"] >= 10 and "failed" not in outcomes


def test_an_output_the_reference_lacks_is_a_skip_naming_its_file(pytester, reference) -> None:
    dump = pytester.path / "pt_tensor_L1" / "dump.json"
    result = judged(pytester, dump, reference, "-k", "relu.0 or gelu.0", out="judged")
    (details,) = sorted(reference.glob("accuracy_checking_details_*.csv"))
    rows = {row["API Name"]: row for row in read_csv(pytester.path / "judged", "details")}
    relu = rows["Functional.relu.0.forward.output.0"]
    assert relu["Status"] == "SKIP"
    assert relu["Message"] == (
        f"no row Functional.relu.0.forward.output.0 in {details}: the reference run has no such output"
    )
    assert rows["Functional.gelu.0.forward.output.0"]["Status"] == "pass"
    outcomes = result.parseoutcomes()
    assert outcomes["skipped"] == 2 and outcomes["passed"] == 2  # relu.0's forward and backward: one item each


@pytest.mark.parametrize(
    ("args", "says"),
    [
        (
            ("--msprobe-standard", "benchmark"),
            "*benchmark judges against a reference run: name it with --msprobe-reference*",
        ),
        (
            ("--msprobe-reference", "reference"),
            "*--msprobe-reference reference is read by --msprobe-standard benchmark only*",
        ),
        (("--msprobe-standard", "benchmark", "--msprobe-reference", "nowhere"), "*nowhere: no such file or folder*"),
        (
            ("--msprobe-standard", "benchmark", "--msprobe-reference", "default"),
            "*--msprobe-csv-layout msprobe-pytorch*",
        ),
    ],
    ids=["no-reference", "not-benchmark", "missing", "default-layout"],
)
def test_a_reference_that_cannot_be_used_is_a_usage_error(pytester, copy_dump, args, says) -> None:
    dump = copy_dump("pt_tensor_L1")
    (pytester.path / "reference").mkdir()
    if "default" in args:  # a run of this plugin's default layout: no msprobe metrics in it
        run_msprobe(pytester, dump, "-k", "relu.0", out="default", device="recorded")
    result = run_msprobe(pytester, dump, *args, device="recorded")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines([says])


def test_a_run_of_several_dumps_judges_each_against_the_reference_folder_of_its_name(pytester, faulty) -> None:
    """The reference run of a folder of ranks has a folder per rank (rank0/, rank1/): each rank's entries
    are judged against their own. Here rank0's reference is the clean run and rank1's the faulty run
    itself, both ranks the faulty dump: rank0 fails where the deficits are planted, rank1 passes."""
    for rank in ("rank0", "rank1"):
        shutil.copytree(faulty.parent, pytester.path / "ranks" / rank)
        shutil.copytree(DUMPS["pt_tensor_L1"] if rank == "rank0" else faulty.parent, pytester.path / "gpu" / rank)
    layout = ("--msprobe-csv-layout", "msprobe-pytorch")
    gpu = run_msprobe(pytester, pytester.path / "gpu", "-k", ENTRIES, *layout, out="reference", device="recorded")
    assert sorted(p.name for p in (pytester.path / "reference").iterdir()) == ["rank0", "rank1"], gpu.stdout.str()
    result = judged(pytester, pytester.path / "ranks", "reference", "-k", ENTRIES)
    assert result.ret == pytest.ExitCode.TESTS_FAILED
    assert errors_of(pytester.path / "out" / "rank0") == PLANTED_ERRORS
    assert errors_of(pytester.path / "out" / "rank1") == set()
    for rank in ("rank0", "rank1"):
        result.stdout.fnmatch_lines([f"*reference run: *reference/{rank}/accuracy_checking_details_*.csv (* outputs)"])

    # A reference run without rank1's folder: rank1's outputs SKIP, saying so; rank0's are judged as before.
    shutil.rmtree(pytester.path / "reference" / "rank1")
    result = judged(pytester, pytester.path / "ranks", "reference", "-k", ENTRIES, out="half")
    assert errors_of(pytester.path / "half" / "rank0") == errors_of(pytester.path / "out" / "rank0")
    rank1 = read_csv(pytester.path / "half" / "rank1", "details")
    assert {row["Status"] for row in rank1} == {"SKIP"}
    says = (
        f"the reference run {pytester.path / 'reference'} has no folder rank1: nothing to compare this dump's "
        "outputs with"
    )
    assert says in {row["Message"] for row in rank1}
    result.stdout.fnmatch_lines([f"*reference run: {says}"])


def test_a_reference_without_a_folder_of_the_dumps_is_a_usage_error(pytester, copy_dump, reference) -> None:
    second = copy_dump("pt_tensor_L1", "rank1")
    result = judged(pytester, [pytester.path / "pt_tensor_L1", second.parent], reference)
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(
        [
            f"*--msprobe-reference {reference}: a run of 2 dumps takes the reference run of the same dumps, a folder "
            "with one of theirs (theirs: pt_tensor_L1, rank1; it holds: .)*"
        ]
    )


def test_a_reference_folder_of_several_runs_is_a_usage_error(pytester, copy_dump, reference) -> None:
    dump = pytester.path / "pt_tensor_L1" / "dump.json"
    for rank in ("rank0", "rank1"):
        shutil.copytree(reference, pytester.path / "both" / rank)
    result = judged(pytester, dump, "both")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["*the runs of 2 folders are in it (rank0, rank1)*"])


@pytest.mark.parametrize("numbering", [None, [0, None, 1], [None, 0], [0, 1, 2]])
def test_an_output_is_looked_up_by_the_number_its_msprobe_row_has(numbering) -> None:
    """The name the benchmark standard looks up is the one the msprobe layout writes the row under."""
    from pytest_msprobe.reports.msprobe_pytorch import msprobe_numbers, numbered
    from pytest_msprobe.results import PASS, EntryResult, OutputResult

    outputs = [OutputResult(index, PASS, "torch.float64", "torch.float32", [2]) for index in (0, 1, 2)]
    result = EntryResult("Functional.linear.0", "backward", PASS, outputs=outputs, msprobe_outputs=numbering)
    written = {output.index: number for number, output in numbered(result) if output is not None}
    assert msprobe_numbers(numbering, (0, 1, 2)) == written
