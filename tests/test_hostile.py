"""The hostile corpus (hostile_corpus.py), run as a user runs pytest-msprobe: serial and under -n 2,
random and real data, and recorded outputs. No code runs, no INTERNALERROR, every bad thing is
named in its row or in the run's output, every good entry beside them gets the row a clean run
gives it, and the counts of the terminal, the exit status and the CSV agree."""

from __future__ import annotations

import re
from collections import Counter
from pathlib import Path

import hostile_corpus
import pytest

from pytest_msprobe.dumps.dump import parse_entry_name
from pytest_msprobe.reports.csv_files import read_result_rows
from pytest_msprobe.untrusted import escape

pytestmark = pytest.mark.slow  # subprocesses, and xdist

WORKERS = pytest.mark.parametrize("workers", [[], ["-n", "2"]], ids=["serial", "xdist"])
RAW_CONTROL = re.compile("[\x00-\x08\x0b-\x1f\x7f\u202e\ud800-\udfff]")


@pytest.fixture
def corpus(pytester) -> hostile_corpus.Corpus:
    return hostile_corpus.build(pytester.path / "corpus", pytester.path / "marks")


def run(pytester, *args):
    return pytester.runpytest_subprocess(
        "-p",
        "no:cacheprovider",
        "--msprobe-out",
        "out",
        "-rfs",
        "--msprobe-max-elements",
        str(hostile_corpus.MAX_ELEMENTS),
        *args,
    )


def rows(folder: Path) -> dict[str, list[str]]:
    """The result rows of the one pair in folder, by API Name (as written: names are decoded)."""
    files = sorted(folder.glob("accuracy_checking_result_*.csv"))
    assert len(files) == 1, files
    found = read_result_rows(files[0])
    names = Counter(row[0] for row in found)
    assert max(names.values(), default=1) == 1, [name for name, n in names.items() if n > 1]  # no row twice
    return {row[0]: row for row in found}


def row_name(case: hostile_corpus.Case) -> str:
    """A name that is no API name has its row under the test's name: the entry's, escaped."""
    return case.api if parse_entry_name(case.entry) else escape(case.row or case.entry)


def check(pytester, result, corpus: hostile_corpus.Corpus, folders: list[str], files: list[hostile_corpus.FileCase]):
    output = result.stdout.str() + result.stderr.str()
    assert "INTERNALERROR" not in output and "Traceback" not in output
    assert not RAW_CONTROL.search(output), RAW_CONTROL.search(output)  # escaped, never obeyed
    assert sorted(path.name for path in corpus.marks.iterdir()) == []  # no code ran
    out = pytester.path / "out"
    for folder in folders:
        written = rows(out / folder)
        for case in corpus.cases[folder]:
            name = row_name(case)
            assert name in written, (case.what, name[:200])
            assert case.says in written[name][3], (case.what, written[name])
        # Every good entry beside them: the row a clean run of the same dump gives it.
        clean = rows(out / f"clean_{folder}")
        assert {api: written.get(api) for api in clean} == clean, folder
    for case in files:
        if case.where == "header":
            assert re.search(rf"msprobe: .*{case.folder}/dump.json: {case.says}", output), case.what
        else:
            assert re.search(rf"{case.folder}/dump.json\S*:.*{re.escape(case.says)}", output) or all(
                case.says in row[3] for row in rows(out / case.folder).values()
            ), case.what
    check_counts(result, out)


def check_counts(result, out: Path) -> None:
    """The msprobe summary, pytest's outcomes and the CSV rows say the same."""
    statuses = Counter()
    for path in out.rglob("accuracy_checking_result_*.csv"):
        for row in read_result_rows(path):
            statuses.update({("forward", row[1]): 1, ("backward", row[2]): 1})
    for direction in ("forward", "backward"):
        line = re.search(
            rf"^{direction} +(\d+) pass, (\d+) error, (\d+) warning, (\d+) SKIP", result.stdout.str(), re.MULTILINE
        )
        assert line, direction
        said = dict(zip(("pass", "error", "warning", "SKIP"), map(int, line.groups())))
        assert said == {status: statuses[(direction, status)] for status in said}, (direction, said)
    outcomes = result.parseoutcomes()
    unreadable = len(re.findall(r"^FAILED \S+::dump ", result.stdout.str(), re.MULTILINE))
    errors = statuses[("forward", "error")] + statuses[("backward", "error")]
    assert outcomes.get("failed", 0) == errors + unreadable
    assert outcomes.get("skipped", 0) == statuses[("forward", "SKIP")] + statuses[("backward", "SKIP")]
    assert result.ret == (1 if errors + unreadable else 0)


@WORKERS
def test_hostile_corpus_random_and_real_data(pytester, corpus, workers):
    """Statistics dumps (random data) and a tensor dump (real data), MindSpore's too, and the
    whole-file cases, in one run over the corpus folder."""
    result = run(pytester, "--msprobe-dump", "corpus", "--msprobe-device", "cpu", *workers)
    check(pytester, result, corpus, ["stats", "tensor", "ms"], corpus.files)
    assert corpus.count() >= 100


@WORKERS
def test_hostile_corpus_recorded_outputs(pytester, corpus, workers):
    """A tensor dump judged by its recorded outputs: the same entries, the same refusals."""
    result = run(
        pytester,
        "--msprobe-dump",
        "corpus/tensor",
        "--msprobe-dump",
        "corpus/clean_tensor",
        "--msprobe-device",
        "recorded",
        *workers,
    )
    check(pytester, result, corpus, ["tensor"], [])
