"""Side files never follow links: a link planted at the name of a file or folder the run will write
(in a shared --msprobe-out, error-data or repro folder) is refused or passed by, with a message
naming the path, and what it points to is left as it was."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest

from conftest import read_csv, run_msprobe
from pytest_msprobe import readback
from pytest_msprobe.reports import files, manifest
from pytest_msprobe.reports.csv_files import RESULT_PREFIX, CsvWriter, details_path_for
from pytest_msprobe.reports.journal import JOURNAL_PREFIX, Journal, journal_path_for, read_contents
from pytest_msprobe.results import EntryResult


@pytest.fixture
def victim(tmp_path) -> Path:
    """Somebody's file that a planted link points to."""
    path = tmp_path / "victim"
    path.write_text("theirs\n")
    return path


def plant(at: Path, target: Path) -> Path:
    at.parent.mkdir(parents=True, exist_ok=True)
    at.symlink_to(target)
    return at


def test_a_new_journal_is_not_written_through_a_link(tmp_path, victim):
    path = plant(tmp_path / "accuracy_checking_journal_1.jsonl", victim)
    with pytest.raises(files.FileRefused, match=f"{path}: a symbolic link to {victim} is already there"):
        Journal(path, fresh=True)
    with pytest.raises(files.FileRefused, match=f"{path}: a symbolic link to {victim}: not followed"):
        Journal(path)  # a resumed pair's, appended to
    with pytest.raises(readback.Unreadable, match=f"{path}: a symbolic link to {victim}: not followed"):
        read_contents(path)  # a resume reads it and cuts a torn line: not through the link
    assert victim.read_text() == "theirs\n"


def test_a_journal_that_is_another_name_of_a_file_is_not_appended_to(tmp_path, victim):
    path = tmp_path / "accuracy_checking_journal_1.jsonl"
    path.hardlink_to(victim)
    with pytest.raises(files.FileRefused, match="2 hard links"):
        Journal(path)
    assert victim.read_text() == "theirs\n"


def test_the_manifest_is_not_written_through_a_link(tmp_path, victim):
    result_csv = tmp_path / f"{RESULT_PREFIX}1.csv"
    plant(manifest.path_for(result_csv), victim)
    with pytest.raises(files.FileRefused, match=f"{manifest.path_for(result_csv)}: a symbolic link to {victim}"):
        manifest.write(result_csv, {"format": manifest.FORMAT})
    assert victim.read_text() == "theirs\n"


def test_a_csv_name_taken_by_a_link_is_passed_by(tmp_path, victim):
    plant(tmp_path / f"{RESULT_PREFIX}7.csv", victim)
    plant(details_path_for(tmp_path / f"{RESULT_PREFIX}7_1.csv"), victim)
    writer = CsvWriter.in_folder(tmp_path, "7")
    writer.close()
    assert writer.result_path.name == f"{RESULT_PREFIX}7_2.csv"
    assert not (tmp_path / f"{RESULT_PREFIX}7_1.csv").exists()  # the half of a pair it could not have
    assert victim.read_text() == "theirs\n"


def test_a_folder_below_the_root_is_never_entered_through_a_link(tmp_path):
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    root = tmp_path / "error_data"
    plant(root / "step0", elsewhere)
    with pytest.raises(files.FileRefused, match=f"{root / 'step0'}: a symbolic link to {elsewhere}"):
        files.Folder.make(root, ["step0", "rank0", "Functional.relu.0.forward"])
    assert list(elsewhere.iterdir()) == []
    with pytest.raises(files.FileRefused, match="not a folder name"):
        files.Folder.make(root, ["..", "x"])


def test_a_file_in_a_made_folder_replaces_an_earlier_runs_and_refuses_a_link(tmp_path, victim):
    with files.Folder.make(tmp_path / "repro", ["d", "Functional.relu.0.forward"]) as folder:
        folder.write_text("verdict.json", "first")
        folder.write_text("verdict.json", "second")  # a run again of the entry
        assert (folder.path / "verdict.json").read_text() == "second"
        plant(folder.path / "repro.py", victim)
        with pytest.raises(files.FileRefused, match=f"{folder.path / 'repro.py'}: a symbolic link to {victim}"):
            folder.write_text("repro.py", "print('x')")
    assert victim.read_text() == "theirs\n"


def test_a_resumes_temporary_copy_is_not_written_through_a_link(tmp_path, victim):
    result_csv = tmp_path / f"{RESULT_PREFIX}1.csv"
    plant(result_csv.with_name(result_csv.name + ".resume"), victim)
    temporary = files.replace_temporary(result_csv)  # the link goes, not what it points to
    files.write_new(temporary, b"rows")
    assert temporary.read_bytes() == b"rows" and victim.read_text() == "theirs\n"


# -- end to end ------------------------------------------------------------------------------------


def plant_for_the_next_minutes(folder: Path, prefix: str, suffix: str, target: Path) -> None:
    """Links at the names a fresh run's side file will have, whatever second it starts in."""
    now = time.time()
    for second in range(-5, 300):
        stamp = time.strftime("%Y%m%d%H%M%S", time.localtime(now + second))
        plant(folder / f"{prefix}{stamp}{suffix}", target)


@pytest.mark.slow
@pytest.mark.parametrize("prefix, suffix", [(JOURNAL_PREFIX, ".jsonl"), (manifest.PREFIX, ".json")])
def test_a_fresh_run_refuses_a_link_at_a_side_files_name_before_any_entry(pytester, copy_dump, victim, prefix, suffix):
    dump = copy_dump("pt_stats_L1")
    plant_for_the_next_minutes(pytester.path / "out", prefix, suffix, victim)
    result = run_msprobe(pytester, dump, device="cpu")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines([f"ERROR: --msprobe-out: *out/{prefix}20*{suffix}: a symbolic link to {victim}*"])
    assert "Traceback" not in result.stderr.str()
    assert not list((pytester.path / "out").glob("*.csv*"))  # the pair it had made is gone with it
    assert victim.read_text() == "theirs\n"


@pytest.mark.slow
def test_a_resume_refuses_a_journal_that_is_a_link(pytester, copy_dump, victim):
    dump = copy_dump("pt_stats_L1")
    run_msprobe(pytester, dump, device="cpu")
    result_csv = next((pytester.path / "out").glob(f"{RESULT_PREFIX}*.csv"))
    journal = journal_path_for(result_csv)
    journal.unlink()
    plant(journal, victim)
    result = run_msprobe(pytester, dump, "--msprobe-resume", str(result_csv), device="cpu")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines([f"ERROR: --msprobe-resume: *{journal}: a symbolic link to {victim}: not followed*"])
    assert victim.read_text() == "theirs\n"


@pytest.mark.slow
def test_error_data_and_repros_are_not_written_through_links_and_the_run_goes_on(pytester, copy_dump, tmp_path):
    dump = copy_dump("pt_stats_L1")
    theirs_data, theirs_repro = tmp_path / "theirs_data", tmp_path / "theirs_repro"
    theirs_data.mkdir()
    theirs_repro.mkdir()
    plant(pytester.path / "ed" / "pt_stats_L1", theirs_data)  # the dump's folder of the error data
    plant(pytester.path / "rp" / "pt_stats_L1" / "Torch.matmul.1.forward", theirs_repro)  # one entry's
    result = run_msprobe(pytester, dump, "--msprobe-save-error-data", "ed", "--msprobe-repro", "rp", device="cpu")
    rows = read_csv(pytester.path / "out", "result")
    errors = sum(row[d] == "error" for row in rows for d in ("Forward Test Success", "Backward Test Success"))
    assert result.ret == pytest.ExitCode.TESTS_FAILED and result.parseoutcomes()["failed"] == errors > 1
    assert "INTERNALERROR" not in result.stdout.str()
    assert list(theirs_data.iterdir()) == [] and list(theirs_repro.iterdir()) == []
    messages = " ".join(row["Message"] for row in rows)
    assert f"error data not saved: FileRefused: {pytester.path / 'ed' / 'pt_stats_L1'}: a symbolic link" in messages
    repro_note = f"repro not saved: FileRefused: {pytester.path / 'rp' / 'pt_stats_L1' / 'Torch.matmul.1.forward'}"
    assert repro_note in messages
    # The other failing entries' repros were written, beside the link.
    assert (pytester.path / "rp" / "pt_stats_L1" / "Functional.linear.1.forward" / "repro.py").is_file()


def test_a_journal_line_reads_back_as_the_result_it_was(tmp_path):
    """The ASCII journal: a result's text comes back as it was sent (the round trip the resume relies on)."""
    path = tmp_path / "j.jsonl"
    journal = Journal(path, fresh=True)
    written = EntryResult("Functional.relu.0", "forward", "error", "数值 \x00 \ud800")
    journal.add(written)
    journal.close()
    sent = EntryResult.from_dict(written.to_dict())  # as an xdist worker sends it
    assert read_contents(path).results == [sent]
    assert json.loads(path.read_text(encoding="ascii"))["reason"] == sent.reason
