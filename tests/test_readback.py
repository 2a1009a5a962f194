"""Every file a run reads back goes through one read (pytest_msprobe/readback.py): no link at its name
followed, a regular file only (a FIFO never waited on, /dev/zero never read), a size bound, and a
refusal that names the file. Each reader of the CSV pair, the journal, the manifest and stack.json
is tried with each such file: it refuses at once, naming it, and reads nothing else."""

from __future__ import annotations

import os
import threading
from pathlib import Path

import pytest

from pytest_msprobe import readback
from pytest_msprobe.dumps import stack
from pytest_msprobe.reports import journal, manifest, pair_rows, resume
from pytest_msprobe.reports.baseline import Baseline
from pytest_msprobe.reports.csv_files import DETAILS_COLUMNS, RESULT_COLUMNS, ReportError, read_result_rows

ZERO = Path("/dev/zero")


def fifo(path: Path) -> Path:
    os.mkfifo(path)
    return path


def link(path: Path, target: Path) -> Path:
    path.symlink_to(target)
    return path


def at_once(call, *args):
    """call(*args) in a thread: it must return (or raise) within seconds, never wait on a writer."""
    outcome: list = []

    def run():
        try:
            outcome.append(("returned", call(*args)))
        except BaseException as exc:  # noqa: BLE001 - handed to the test
            outcome.append(("raised", exc))

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    thread.join(10)
    assert outcome, f"{call.__name__} waited on {args[0]}"
    return outcome[0]


@pytest.mark.parametrize("kind", ["a FIFO", "a link to /dev/zero", "/dev/zero itself", "a folder", "a link"])
def test_a_file_read_back_is_a_regular_file_at_its_own_name(tmp_path, kind):
    target = tmp_path / "target.csv"
    target.write_text("theirs\n")
    path = {
        "a FIFO": lambda: fifo(tmp_path / "x.csv"),
        "a link to /dev/zero": lambda: link(tmp_path / "x.csv", ZERO),
        "/dev/zero itself": lambda: ZERO,
        "a folder": lambda: (tmp_path / "x.csv").mkdir() or tmp_path / "x.csv",
        "a link": lambda: link(tmp_path / "x.csv", target),
    }[kind]()
    how, found = at_once(readback.read_bytes, path, 100)
    assert how == "raised" and isinstance(found, readback.Unreadable), found
    assert str(found).startswith(f"{path}: ")
    expected = {
        "a FIFO": "not a regular file (a FIFO): not read",
        "a link to /dev/zero": "a symbolic link to /dev/zero: not followed",
        "/dev/zero itself": "not a regular file (a device): not read",
        "a folder": "not a regular file (a folder): not read",
        "a link": f"a symbolic link to {target}: not followed",
    }[kind]
    assert expected in str(found)


def test_a_file_past_its_bound_is_refused_before_it_is_read(tmp_path):
    path = tmp_path / "big.jsonl"
    with open(path, "wb") as handle:
        handle.truncate(10**12)  # a sparse terabyte: nothing of it read
    with pytest.raises(readback.Unreadable, match=r"big.jsonl: 1,000,000,000,000 bytes, more than the 100 such"):
        readback.read_bytes(path, 100)
    path.write_bytes(b"x" * 100)
    assert readback.read_bytes(path, 100) == b"x" * 100


def test_a_link_the_user_named_is_followed_where_the_reader_says_so(tmp_path):
    (tmp_path / "dump.json").write_text("{}")
    named = link(tmp_path / "named.json", tmp_path / "dump.json")
    assert readback.read_bytes(named, None, follow_links=True) == b"{}"
    with pytest.raises(readback.Unreadable, match="not a regular file"):
        readback.read_bytes(link(tmp_path / "zero.json", ZERO), None, follow_links=True)


def test_text_that_is_no_utf8_names_the_byte(tmp_path):
    path = tmp_path / "x.csv"
    path.write_bytes(b"API Name\n\xff\n")
    with pytest.raises(readback.Unreadable, match=r"x.csv: not utf-8 text \(byte 9 is b'\\xff'\)"):
        readback.read_text(path, 100)


def result_pair(folder: Path) -> Path:
    """A result CSV with its details, as a run writes them (one row each)."""
    result = folder / "accuracy_checking_result_1.csv"
    result.write_text("\ufeff" + ",".join(RESULT_COLUMNS) + "\nFunctional.relu.0,pass,,\n", encoding="utf-8")
    details = folder / "accuracy_checking_details_1.csv"
    row = "Functional.relu.0.forward.output.0,torch.float64,torch.float32,\"[2, 3]\",1.0,0.0,0.0,pass,"
    details.write_text("\ufeff" + ",".join(DETAILS_COLUMNS) + "\n" + row + "\n", encoding="utf-8")
    return result


def readers(result: Path) -> dict:
    """Each reader of a file a run reads back, by the file it reads."""
    details = result.with_name(result.name.replace("result", "details"))
    return {
        "result CSV": (result, lambda: read_result_rows(result)),
        "result CSV (resume)": (result, lambda: resume.prepare(result)),
        "result CSV (baseline)": (result, lambda: Baseline.read(result)),
        "details CSV (merge)": (details, lambda: pair_rows.details_rows(details)),
        "details CSV (resume)": (details, lambda: resume.read_details_outputs(details)),
        "journal": (journal.journal_path_for(result), lambda: journal.read_contents(journal.journal_path_for(result))),
        "journal (report)": (journal.journal_path_for(result), lambda: journal.peek(journal.journal_path_for(result))),
        "manifest": (manifest.path_for(result), lambda: manifest.read(result)),
    }


@pytest.mark.parametrize("plant", ["a FIFO", "a link to /dev/zero"])
@pytest.mark.parametrize(
    "reader", ["result CSV", "result CSV (resume)", "result CSV (baseline)", "details CSV (merge)",
               "details CSV (resume)", "journal", "journal (report)", "manifest"],
)
def test_every_reader_of_a_runs_files_refuses_at_once_naming_the_file(tmp_path, reader, plant):
    result = result_pair(tmp_path)
    path, read = readers(result)[reader]
    path.unlink(missing_ok=True)
    fifo(path) if plant == "a FIFO" else link(path, ZERO)
    how, found = at_once(read)
    assert how == "raised" and isinstance(found, (ReportError, OSError, manifest.ManifestError)), found
    assert str(path) in str(found)
    assert ("not a regular file (a FIFO)" if plant == "a FIFO" else "a symbolic link to /dev/zero") in str(found)


@pytest.mark.parametrize("plant", ["a FIFO", "a link to /dev/zero", "a link to a big file"])
def test_stack_json_of_any_kind_gives_no_call_site_at_once(tmp_path, plant):
    path = tmp_path / stack.STACK_FILE_NAME
    if plant == "a FIFO":
        fifo(path)
    elif plant == "a link to /dev/zero":
        link(path, ZERO)
    else:
        big = tmp_path / "big"
        with open(big, "wb") as handle:
            handle.truncate(stack.MAX_BYTES + 1)
        big.rename(path)
    assert at_once(stack.read_stacks, path) == ("returned", {})


def test_a_manifests_dump_that_is_a_fifo_is_not_hashed(tmp_path):
    how, found = at_once(manifest.sha256, fifo(tmp_path / "dump.json"))
    assert how == "raised" and "not a regular file (a FIFO)" in str(found)
