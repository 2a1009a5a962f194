"""resume.prepare against a kill at every byte of the writes: resuming gives the full files, byte for byte."""

from __future__ import annotations

from pathlib import Path

import pytest

from pytest_msprobe.reports import resume
from pytest_msprobe.reports.csv_files import CsvWriter, ReportError, details_path_for
from pytest_msprobe.reports.journal import Journal, journal_path_for, read_journal
from pytest_msprobe.results import EntryResult, OutputResult

# Messages that need quoting: commas, quotes, a newline inside a field, multi-byte text, a formula start.
MESSAGES = ["", "plain", 'say "quoted", with commas', "two\nlines", "数值误差 µ", "=HYPERLINK(x)", "-1e-4"]


def api_rows(count: int):
    """(api, forward, backward) of count APIs; some with no backward, some with no outputs."""
    rows = []
    for i in range(count):
        api = f"Functional.op{i}.0"
        outputs = [OutputResult(k, "error", "torch.float64", "torch.bfloat16", [2, k + 1], 0.99 - k / 7,
                                1e-3 * (i + 1), 0.5, [MESSAGES[(i + k) % len(MESSAGES)]])
                   for k in range(i % 3)]
        forward = EntryResult(api, "forward", "error" if outputs else "SKIP", MESSAGES[i % len(MESSAGES)], outputs)
        backward = None if i % 4 == 3 else EntryResult(api, "backward", "pass", "", [
            OutputResult(0, "pass", "torch.float64", "torch.float32", [3], 1.0, 0.0, 0.0)])
        rows.append((api, forward, backward))
    return rows


def write_all(result_path: Path, rows, sizes=None):
    writer = CsvWriter(result_path)
    for row in rows:
        writer.write_api(*row)
        if sizes is not None:
            sizes.append((writer.details_path.stat().st_size, writer.result_path.stat().st_size))
    writer.close()


@pytest.fixture(scope="module")
def full(tmp_path_factory):
    folder = tmp_path_factory.mktemp("full")
    rows = api_rows(8)
    sizes = []
    write_all(folder / "accuracy_checking_result_1.csv", rows, sizes)
    result = (folder / "accuracy_checking_result_1.csv").read_bytes()
    details = (folder / "accuracy_checking_details_1.csv").read_bytes()
    return rows, sizes, result, details


def kill_points(sizes):
    """Every (details length, result length) a kill can leave: the writer flushes the details of
    API i, then its result row, the headers going out with the first API's rows."""
    points = []
    for api, (after_d, after_r) in enumerate(sizes):
        before_d, before_r = sizes[api - 1] if api else (0, 0)
        points += [(api, cut, before_r) for cut in range(before_d, after_d + 1)]
        points += [(api, after_d, cut) for cut in range(before_r, after_r + 1)]
    return points


def test_resume_after_a_kill_at_any_byte_rebuilds_the_full_files(full, tmp_path):
    rows, sizes, full_result, full_details = full
    result_path = tmp_path / "accuracy_checking_result_1.csv"
    points = kill_points(sizes)
    assert len(points) > len(full_result) + len(full_details)
    for api, cut_d, cut_r in points:
        # Files written afresh, not truncated: ext4 flushes a file truncated to 0 and rewritten at
        # its close (auto_da_alloc), 3 ms of waiting per write on this machine's disk.
        for path, data in ((result_path, full_result[:cut_r]), (details_path_for(result_path), full_details[:cut_d])):
            path.unlink(missing_ok=True)
            path.write_bytes(data)
        finished = resume.prepare(result_path)
        done = api + (1 if cut_r == sizes[api][1] else 0)
        assert finished == {row[0] for row in rows[:done]}, (api, cut_d, cut_r)
        write_all(result_path, [row for row in rows if row[0] not in finished])
        assert result_path.read_bytes() == full_result, (api, cut_d, cut_r)
        assert details_path_for(result_path).read_bytes() == full_details, (api, cut_d, cut_r)


def test_a_file_killed_before_its_header_is_started_afresh(tmp_path):
    result_path = tmp_path / "accuracy_checking_result_1.csv"
    result_path.write_bytes(b"")
    assert resume.prepare(result_path) == set()
    write_all(result_path, api_rows(1))
    assert result_path.read_text(encoding="utf-8-sig").startswith("API Name,")


@pytest.mark.parametrize("content", [b"a,b\n1,2\n", b"\xef\xbb\xbfAPI Name,Status\n", b"not a csv at all"])
def test_a_foreign_file_is_refused_naming_it(tmp_path, content):
    path = tmp_path / "other.csv"
    path.write_bytes(content)
    with pytest.raises(ReportError, match="other.csv: not an accuracy_checking"):
        resume.prepare(path)



def test_a_journal_torn_by_a_kill_loses_only_its_last_line(tmp_path):
    path = tmp_path / "accuracy_checking_journal_1.jsonl"
    journal = Journal(path)
    rows = api_rows(3)
    for _, forward, _ in rows:
        journal.add(forward)
    journal.close()
    with open(path, "ab") as handle:
        handle.write(b'{"api": "Functional.op9.0", "dire')  # killed mid-line
    found = read_journal(path)
    assert [r.to_dict() for r in found] == [forward.to_dict() for _, forward, _ in rows]
    assert path.read_bytes().endswith(b"\n") and read_journal(path) == found  # the torn line is cut


def test_resume_writes_again_the_rows_that_lack_a_direction_the_dump_has(tmp_path):
    """Rows of APIs with no backward (every fourth) whose dump has one: cut from both files, every other
    byte kept; from the journal where it holds their forward, else run again whole."""
    rows = api_rows(8)
    result_path = tmp_path / "accuracy_checking_result_1.csv"
    write_all(result_path, rows)
    full_result, full_details = result_path.read_bytes(), details_path_for(result_path).read_bytes()
    journal = Journal(journal_path_for(result_path))
    journal.add(rows[3][1])  # Functional.op3.0's forward; op7's is not in the journal
    journal.close()
    entries = {(api, direction) for api, _, _ in rows for direction in ("forward", "backward")}
    state = resume.resume(result_path, entries)
    assert state.reopened == ["Functional.op3.0", "Functional.op7.0"]
    assert set(state.waiting) == {"Functional.op3.0"} and ("Functional.op3.0", "forward") in state.finished
    assert not {("Functional.op7.0", "forward"), ("Functional.op7.0", "backward")} & state.finished
    assert state.complete == {api for api, _, _ in rows} - set(state.reopened)
    kept = [row for row in rows if row[0] not in state.reopened]
    write_all(tmp_path / "accuracy_checking_result_2.csv", kept)
    assert result_path.read_bytes() == (tmp_path / "accuracy_checking_result_2.csv").read_bytes() != full_result
    assert details_path_for(result_path).read_bytes() == (tmp_path / "accuracy_checking_details_2.csv").read_bytes()
    assert len(full_details) > len(details_path_for(result_path).read_bytes())
    # What the file held, for the verdict: every entry not run again, errors included.
    held = {(r.api, r.direction): r.status for r in state.earlier}
    assert held[("Functional.op3.0", "forward")] == rows[3][1].status
    expected = {("Functional.op3.0", "forward")} | {(api, "forward") for api, _, _ in kept} | {
        (api, "backward") for api, _, backward in kept if backward is not None}
    assert set(held) == expected  # op7, which runs again whole, is not among them
