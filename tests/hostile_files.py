"""What a hostile hand can make of the files a run reads back (issue 46): the CSV pair, the journal and
the manifest that --msprobe-resume, `python -m pytest_msprobe.merge` and `python -m
pytest_msprobe.report` consume, stack.json, the tensor files.

`payload(field)` is text that runs a script wherever a page takes it raw (a tag, an attribute, a
script, a link): if it ever runs it sets `data-pwned` on the page's root element, naming the field it
came in. `forge_strings(out)` writes one into every text field of a finished run's files.
"""

from __future__ import annotations

import csv
import json
import os
import re
import resource
import shutil
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from conftest import DUMPS
from pytest_msprobe.reports import manifest
from pytest_msprobe.reports.csv_files import (
    DETAILS_COLUMNS,
    DETAILS_PREFIX,
    RESULT_COLUMNS,
    RESULT_PREFIX,
    read_result_rows,
    text_cell,
)
from pytest_msprobe.reports.journal import JOURNAL_PREFIX

PWNED = "data-pwned"


def payload(field: str) -> str:
    """Script in every place a page could take text raw: a tag, the end of an attribute (either
    quote), the end of a script or a style, a comment, a link, a line separator in JSON."""
    run = f"document.documentElement.setAttribute('{PWNED}','{field}')"
    return (
        f"'\"><img src=x onerror=\"{run}\"><svg onload=\"{run}\"></svg>"
        f"</script><script>{run}</script></style><script>{run}</script>"
        f"<!--\u2028\u2029--><a href=\"javascript:{run}\">{field}</a>"
        f"<iframe srcdoc=\"<script>parent.{run}</script>\"></iframe>"
    )


def pair_files(out: Path) -> tuple[Path, Path, Path, Path]:
    """(result, details, journal, manifest) of the one pair in out."""
    (result,) = sorted(out.glob(f"{RESULT_PREFIX}*.csv"))
    stem = result.name[len(RESULT_PREFIX) : -len(".csv")]
    return (
        result,
        out / f"{DETAILS_PREFIX}{stem}.csv",
        out / f"{JOURNAL_PREFIX}{stem}.jsonl",
        manifest.path_for(result),
    )


def _strings(data: Any, where: str, keep: Callable[[str], bool]) -> Any:
    """Every str of plain data replaced by payload(its path), but where keep(path) says."""
    if isinstance(data, str):
        return data if keep(where) else payload(where)
    if isinstance(data, dict):
        return {key: _strings(value, f"{where}.{key}" if where else key, keep) for key, value in data.items()}
    if isinstance(data, list):
        return [_strings(value, f"{where}[{i}]", keep) for i, value in enumerate(data)]
    return data


WORDS = ("status", "direction")  # a status and a direction are words the reader checks, never shown raw


def _kept(path: str) -> bool:
    last = path.rsplit(".", 1)[-1]
    return last in WORDS or last == "api"


def write_csv(path: Path, columns: list[str], rows: list[list[str]]) -> None:
    with open(path, "w", newline="", encoding="utf-8-sig") as handle:
        writer = csv.writer(handle)
        writer.writerow(columns)
        writer.writerows(rows)


def forge_strings(out: Path) -> None:
    """A payload in every text field of the pair in out, its journal and its manifest; the APIs renamed
    alike in all three (a payload too). Numbers, statuses and directions stay of their kind: the rows
    still read as a run's."""
    result, details, journal, manifest_path = pair_files(out)
    apis = {row[0]: f"{row[0]}{payload('API Name')}" for row in read_result_rows(result)}

    rows = []
    for api, forward, backward, _message in read_result_rows(result):
        rows.append([text_cell(apis[api]), forward, backward, text_cell(payload("Message"))])
    write_csv(result, RESULT_COLUMNS, rows)

    with open(details, newline="", encoding="utf-8-sig") as handle:
        read = list(csv.reader(handle))[1:]
    rows = []
    for row in read:
        name = row[0]
        api = next(a for a in apis if name.startswith(a + "."))
        text = [text_cell(payload(column)) for column in DETAILS_COLUMNS[1:4]]
        rows.append([text_cell(apis[api] + name[len(api) :]), *text, *row[4:8], text_cell(payload("Message"))])
    write_csv(details, DETAILS_COLUMNS, rows)

    forge_journal(journal, apis)

    document = json.loads(manifest_path.read_text())
    # As a run that stopped early writes it: its reason is text a page shows too.
    document["stopped"] = document.get("stopped") or {"why": "interrupted", "selected": len(apis), "unchecked": {"forward": 1},
                                                      "unfinished": 1}  # fmt: skip
    document = _strings(document, "", lambda path: path in ("result", "details"))
    manifest_path.write_text(json.dumps(document))


def forge_journal(journal: Path, apis: dict[str, str] | None = None, keep: Callable[[str], bool] = _kept) -> None:
    """A payload in every text field of every result line of a journal (its path where the field is),
    its `running` lines dropped; statuses and directions kept (and the fields `keep` names), and the API
    names but where `apis` renames them (the CSV pair renamed alike)."""
    lines = []
    for line in journal.read_text().splitlines():
        record = json.loads(line)
        if "running" in record:
            continue
        record = _strings(record, "", keep)
        record["api"] = (apis or {}).get(record["api"], record["api"])
        lines.append(json.dumps(record))
    journal.write_text("\n".join(lines) + "\n")


# -- the corpus: one case a trick, each run alone under a memory cap and a time limit ----------------

MEMORY = 3 * 1024**3  # address space of each command (torch's own import takes about 1.5 GiB of it)
SECONDS = 180  # a command past it hung


@dataclass
class Root:
    """A finished run of pt_stats_L1 (cpu, --msprobe-html) to forge: the dump, its pair, a victim."""

    path: Path
    before: dict[str, bytes] | None = None  # the run's files once forged

    @property
    def dump(self) -> Path:
        return self.path / "dump" / "dump.json"

    @property
    def out(self) -> Path:
        return self.path / "out"

    @property
    def victim(self) -> Path:
        """Somebody's file outside the run's folders, which no command may change."""
        return self.path / "victim.txt"

    @property
    def tensors(self) -> Path:
        return self.path / "tensor" / "dump_tensor_data"

    def files(self) -> tuple[Path, Path, Path, Path]:
        return pair_files(self.out)

    def result_rows(self) -> list[list[str]]:
        return read_result_rows(self.files()[0])


@dataclass
class Case:
    """One trick: the class of the issue it is of, the file it forges, the command it is run through,
    what that command must end with (its exit status, a line naming the file and the field)."""

    what: str
    kind: str  # the class: script, host, rows, traceback, hang, bound, message
    file: str  # result CSV, details CSV, journal, manifest, stack.json, .pt, option
    command: str  # resume, merge, merge-html, report, run
    forge: Callable[[Root], Any]
    exits: tuple[int, ...]
    says: str = ""  # a regex the command's output must hold
    check: Callable[[Root, str], None] | None = None
    args: tuple[str, ...] = ()

    @property
    def id(self) -> str:
        return f"{self.kind}-{self.file}-{self.what}".replace(" ", "_")


def base_run(root: Path) -> Root:
    """The finished run every case forges a copy of."""
    shutil.copytree(DUMPS["pt_stats_L1"], root / "dump")
    shutil.copytree(DUMPS["pt_tensor_L1"], root / "tensor")  # for the tensor files' cases: never run here
    found = Root(root)
    found.victim.write_text("theirs\n")
    command = ["-p", "no:cacheprovider", "-q", "--msprobe-dump", str(found.dump), "--msprobe-device", "cpu",
               "--msprobe-out", "out", "--msprobe-html", "run.html"]  # fmt: skip
    done = subprocess.run([sys.executable, "-m", "pytest", *command], cwd=root, capture_output=True, text=True,
                          timeout=600)  # fmt: skip
    assert done.returncode == 1, done.stdout[-2000:]  # its bf16 rounding errors under basic
    return found


def snapshot(folder: Path) -> dict[str, bytes]:
    """Every regular file under folder by its relative path, with its bytes (FIFOs and links by kind)."""
    found = {}
    for path in sorted(folder.rglob("*")):
        name = str(path.relative_to(folder))
        if path.is_symlink():
            found[name] = b"link to " + os.readlink(path).encode()
        elif path.is_fifo():
            found[name] = b"fifo"
        elif path.is_file():
            found[name] = path.read_bytes()
    return found


def _limits() -> None:
    resource.setrlimit(resource.RLIMIT_AS, (MEMORY, MEMORY))
    resource.setrlimit(resource.RLIMIT_CPU, (SECONDS, SECONDS))


def command_line(case: Case, root: Root) -> list[str]:
    result = root.files()[0] if list(root.out.glob(f"{RESULT_PREFIX}*.csv")) else root.out / "none.csv"
    pytest_run = [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-rfs", "--msprobe-dump",
                  str(root.dump), "--msprobe-device", "cpu"]  # fmt: skip
    return {
        "run": [*pytest_run, "--msprobe-out", "fresh"],
        "run-npu": [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-rfs", "--msprobe-dump",
                    str(root.path / "npu" / "dump.json"), "--msprobe-device", "recorded", "--msprobe-out", "fresh"],
        "run-tensor": [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-rfs", "--msprobe-dump",
                       str(root.path / "tensor" / "dump.json"), "--msprobe-device", "cpu", "--msprobe-mode", "real",
                       "--msprobe-out", "fresh", "--msprobe-max-elements", "1000000"],
        "resume": [*pytest_run, "--msprobe-out", "out", "--msprobe-resume", str(result)],
        "merge": [sys.executable, "-m", "pytest_msprobe.merge", "out", "--out", "merged"],
        "merge-html": [sys.executable, "-m", "pytest_msprobe.merge", "out", "--out", "merged", "--html", "m.html"],
        "report": [sys.executable, "-m", "pytest_msprobe.report", str(result), "--html", "page.html"],
    }[case.command] + list(case.args)


def run_case(case: Case, root: Root) -> str:
    """The case's forgery on root, its command run alone (a memory cap, a time limit); returns its output,
    after checking what every case must hold: it ended in time, with one of its exit statuses, no
    traceback, the line it must say, the victim untouched."""
    case.forge(root)
    root.before = snapshot(root.out)
    try:
        done = subprocess.run(command_line(case, root), cwd=root.path, capture_output=True, text=True,
                              timeout=SECONDS, preexec_fn=_limits, env={**os.environ, "COLUMNS": "200"})  # fmt: skip
    except subprocess.TimeoutExpired:
        raise AssertionError(f"{case.what}: {case.command} hung past {SECONDS} s") from None
    output = done.stdout + done.stderr
    assert "Traceback" not in output and "INTERNALERROR" not in output, output[-6000:]
    assert "MemoryError" not in output, output[-3000:]
    assert done.returncode in case.exits, f"exit {done.returncode}, expected {case.exits}:\n{output[-4000:]}"
    assert not case.says or re.search(case.says, output), f"{case.says!r} not in:\n{output[-4000:]}"
    assert root.victim.read_text() == "theirs\n"
    if case.check is not None:
        case.check(root, output)
    return output


# -- forgeries ---------------------------------------------------------------------------------------


def raw_rows(path: Path) -> list[list[str]]:
    with open(path, newline="", encoding="utf-8-sig") as handle:
        return list(csv.reader(handle))


def write_raw(path: Path, rows: list[list[str]]) -> None:
    """rows (the header first) written as they are: no cell escaped, as a hand or another tool would."""
    path.unlink()
    with open(path, "w", newline="", encoding="utf-8-sig") as handle:
        csv.writer(handle).writerows(rows)


def edit_csv(which: int, change: Callable[[list[list[str]]], Any]) -> Callable[[Root], None]:
    """A forgery of the result (0) or details (1) CSV: change edits its rows in place (the header first)."""

    def forge(root: Root) -> None:
        path = root.files()[which]
        rows = raw_rows(path)
        change(rows)
        write_raw(path, rows)

    return forge


def edit_journal(change: Callable[[list[dict]], Any]) -> Callable[[Root], None]:
    def forge(root: Root) -> None:
        path = root.files()[2]
        records = [json.loads(line) for line in path.read_text().splitlines()]
        change(records)
        path.write_text("".join(json.dumps(record) + "\n" for record in records))

    return forge


def edit_manifest(change: Callable[[dict], Any]) -> Callable[[Root], None]:
    def forge(root: Root) -> None:
        path = root.files()[3]
        document = json.loads(path.read_text())
        change(document)
        path.write_text(json.dumps(document))

    return forge


def replace_with(which: int, kind: str) -> Callable[[Root], None]:
    """One of the pair's files (result 0, details 1, journal 2, manifest 3) replaced by a FIFO, or by a
    link to /dev/zero or to the victim."""

    def forge(root: Root) -> None:
        path = root.files()[which]
        path.unlink()
        if kind == "fifo":
            os.mkfifo(path)
        else:
            path.symlink_to("/dev/zero" if kind == "zero" else root.victim)

    return forge


def stack_json(kind: str) -> Callable[[Root], None]:
    def forge(root: Root) -> None:
        path = root.dump.parent / "stack.json"
        if kind == "digits":
            document = json.loads(path.read_text())
            for names, frames in document.values():
                frames[:] = [re.sub(r"line \d+", "line " + "9" * 5000, frame) for frame in frames]
            path.write_text(json.dumps(document))
            return
        path.unlink()
        if kind == "fifo":
            os.mkfifo(path)
        else:
            path.symlink_to("/dev/zero")

    return forge


def first_with(records: list[dict], test: Callable[[dict], bool]) -> dict:
    return next(record for record in records if "api" in record and test(record))


def sampled(record: dict) -> bool:
    return any(output.get("samples") for output in record.get("outputs", []))


def status_of(rows: list[list[str]], api: str) -> list[str]:
    return next(row for row in rows if row[0] == api)[1:3]


def no_merged_pair(root: Root, output: str) -> None:
    """Whole or not at all: a merge that refused left no file in its --out."""
    merged = root.path / "merged"
    assert not merged.exists() or not any(merged.rglob("*")), sorted(merged.rglob("*"))


def error_back(api: str, direction: int = 1) -> Callable[[Root, str], None]:
    """The API a forgery turned to pass is an error again (it ran again), and once."""

    def check(root: Root, output: str) -> None:
        rows = root.result_rows()
        assert [row[0] for row in rows].count(api) == 1
        assert status_of(rows, api)[direction - 1] == "error", status_of(rows, api)

    return check


def unchanged(root: Root, output: str) -> None:
    """A command that refused changed none of the run's files (its forged ones included)."""
    assert snapshot(root.out) == root.before


def merged_cells_are_text(root: Root, output: str) -> None:
    """Every text cell of the merged pair as a run writes it: no formula start, one line a row."""
    for path in sorted((root.path / "merged").glob("accuracy_checking_*.csv")):
        lines = path.read_text(encoding="utf-8-sig").splitlines()
        rows = raw_rows(path)
        assert len(lines) == len(rows), f"{path.name}: a row spans lines"
        for row in rows[1:]:
            for cell in row:
                assert (not cell.startswith(("=", "+", "@")) and not cell.startswith("-")) or _number(cell), cell
                assert "\n" not in cell and "\r" not in cell


def _number(cell: str) -> bool:
    try:
        float(cell)
    except ValueError:
        return False
    return True


def message_cut(root: Root, output: str) -> None:
    (merged,) = (root.path / "merged").glob(f"{RESULT_PREFIX}*.csv")
    longest = max(len(row[3]) for row in raw_rows(merged)[1:])
    assert 30_000 < longest <= 32_000


def page_without_payload(page: str) -> Callable[[Root, str], None]:
    def check(root: Root, output: str) -> None:
        text = (root.path / page).read_text(encoding="utf-8")
        assert "<img src=x" not in text and "<script>document" not in text
        assert "&lt;img src=x" in text  # shown as text

    return check


def plant_links_at_merged_names(root: Root) -> None:
    """A link at every name the merge may give its pair and manifest in the next three minutes."""
    merged = root.path / "merged"
    merged.mkdir()
    now = time.time()
    for second in range(-5, 180):
        stamp = time.strftime("%Y%m%d%H%M%S", time.localtime(now + second))
        for prefix, suffix in ((RESULT_PREFIX, ".csv"), (DETAILS_PREFIX, ".csv"), ("accuracy_checking_run_", ".json")):
            (merged / f"{prefix}{stamp}{suffix}").symlink_to(root.victim)


def fifo_dump_in_manifest(root: Root) -> None:
    os.mkfifo(root.path / "fifo.json")
    edit_manifest(lambda d: d["dump"].update(path=str(root.path / "fifo.json")))(root)


def second_shard_fifo(root: Root) -> None:
    """A second shard whose manifest reads, and whose result CSV is a FIFO."""
    shard = root.out / "shard2"
    shard.mkdir()
    os.mkfifo(shard / f"{RESULT_PREFIX}1.csv")
    shutil.copy(root.files()[3], shard / "accuracy_checking_run_1.json")


def foreign_journal_entry(records: list[dict]) -> None:
    record = json.loads(json.dumps(records[0]))
    record.update(api="Functional.nothere.0", direction="forward", status="pass")
    records.append(record)


def long_message(rows: list[list[str]]) -> None:
    rows[1][3] = "x" * 40_000


STOPPED = {"why": "interrupted", "selected": 66, "unchecked": {"forward": 18, "backward": 29}, "unfinished": 19}


def cases() -> list[Case]:
    usage, refused = (4,), (2,)
    journal, result_csv, details_csv, manifest_file = "journal", "result CSV", "details CSV", "manifest"
    return [
        # 1. Script in the browser: every text a page takes is escaped (the browser test runs them);
        # values of the wrong kind never reach it.
        Case("a payload in every text field", "script", "all", "report", lambda root: forge_strings(root.out), (0,),
             check=page_without_payload("page.html")),
        Case("a payload in every text field, merged", "script", "all", "merge-html", lambda root: forge_strings(root.out),
             (0, 1),
             check=page_without_payload("m.html")),
        Case("a payload as an element's index", "script", journal, "report",
             edit_journal(lambda r: first_with(r, sampled)["outputs"][0]["samples"]["worst"][0].update(
                 index=[payload("index")])),
             refused, r"journal_\d+\.jsonl: line \d+: outputs\[0\]\.samples\.worst: expected a list of elements"),
        Case("a payload as an entry's position", "script", journal, "report",
             edit_journal(lambda r: first_with(r, sampled).update(position=payload("position"))),
             refused, r"journal_\d+\.jsonl: line \d+: position: expected an integer, found str"),
        Case("a payload in a resumed run's own page", "script", journal, "resume",
             edit_journal(lambda r: [x.update(reason=payload("reason")) for x in r if "api" in x]), (1,),
             check=page_without_payload("resumed.html"), args=("--msprobe-html", "resumed.html")),
        # 2. Files on the host.
        Case("links at the merged pair's names", "host", "merged pair", "merge", plant_links_at_merged_names,
             refused, r"merged/accuracy_checking_\w+\.\w+: a symbolic link to .*victim\.txt"),
        Case("formula cells in a shard", "host", result_csv, "merge",
             edit_csv(0, lambda rows: rows[1].__setitem__(3, '=HYPERLINK("http://evil","x")')), (0, 1),
             check=merged_cells_are_text),
        Case("formula cells in a shard's details", "host", details_csv, "merge",
             edit_csv(1, lambda rows: [rows[1].__setitem__(i, "+cmd|' /C calc'!A0") for i in (1, 2, 8)]), (0, 1),
             check=merged_cells_are_text),
        Case("a raw newline in a shard's Message", "host", result_csv, "merge",
             edit_csv(0, lambda rows: rows[1].__setitem__(3, "one\nrow\r\n=1+2")), (0, 1),
             check=merged_cells_are_text),
        # 3. Rows added, doubled or dropped.
        Case("a journal entry the dump lacks", "rows", journal, "resume", edit_journal(foreign_journal_entry),
             usage, r"journal_\d+\.jsonl: line \d+: Functional\.nothere\.0\.forward is no entry of", check=unchanged),
        Case("a details row twice in one shard", "rows", details_csv, "merge",
             edit_csv(1, lambda rows: rows.insert(2, list(rows[1]))), refused,
             r"details_\d+\.csv: row 3: .* also in row 2", check=no_merged_pair),
        Case("a result row twice in one shard", "rows", result_csv, "merge",
             edit_csv(0, lambda rows: rows.append(list(rows[1]))), refused,
             r"result_\d+\.csv: row \d+: .* also in row 2", check=no_merged_pair),
        Case("an error edited to pass, its journal gone", "rows", result_csv, "resume",
             lambda root: (edit_csv(0, lambda rows: [row.__setitem__(1, "pass") for row in rows
                                                     if row[0] == "Torch.matmul.1"])(root), root.files()[2].unlink()),
             (1,), r"1 rows? that disagree", check=error_back("Torch.matmul.1")),
        Case("an error edited to pass beside its journal", "rows", result_csv, "resume",
             edit_csv(0, lambda rows: [row.__setitem__(1, "pass") for row in rows if row[0] == "Torch.matmul.1"]),
             (1,), r"1 rows? that disagree", check=error_back("Torch.matmul.1")),
        Case("an unknown status word", "rows", result_csv, "resume",
             edit_csv(0, lambda rows: [row.__setitem__(1, "passed") for row in rows if row[0] == "Torch.matmul.1"]),
             (1,), r"1 rows? that disagree", check=error_back("Torch.matmul.1")),
        Case("an unknown status word, merged", "rows", result_csv, "merge",
             edit_csv(0, lambda rows: rows[1].__setitem__(1, "passed")), refused,
             r"result_\d+\.csv: row 2: Forward Test Success: 'passed' is not one of", check=no_merged_pair),
        Case("an unknown status word, reported", "rows", result_csv, "report",
             edit_csv(0, lambda rows: rows[1].__setitem__(1, "passed")), refused,
             r"result_\d+\.csv: row 2: Forward Test Success: 'passed' is not one of"),
        Case("a result row that disagrees with its details", "rows", result_csv, "merge",
             edit_csv(0, lambda rows: [row.__setitem__(1, "pass") for row in rows if row[0] == "Torch.matmul.1"]),
             refused, r"result_\d+\.csv: row \d+: 'Torch\.matmul\.1' forward: pass in the result row, and its details rows hold error",
             check=no_merged_pair),
        Case("a malformed details row", "rows", details_csv, "merge",
             edit_csv(1, lambda rows: rows.__setitem__(5, rows[5][:3])), refused,
             r"details_\d+\.csv: row 6: 3 cells, not 9", check=no_merged_pair),
        # 4. Tracebacks.
        Case("a severity that is a word", "traceback", journal, "report",
             edit_journal(lambda r: first_with(r, sampled)["outputs"][0].update(severity="high")), refused,
             r"journal_\d+\.jsonl: line \d+: outputs\[0\]\.severity: expected a number"),
        Case("a severity that is a word, resumed", "traceback", journal, "resume",
             edit_journal(lambda r: first_with(r, sampled)["outputs"][0].update(severity="high")), usage,
             r"journal_\d+\.jsonl: line \d+: outputs\[0\]\.severity: expected a number", check=unchanged),
        Case("a manifest without its dump", "traceback", manifest_file, "merge",
             edit_manifest(lambda d: d.pop("dump")), refused, r"run_\d+\.json: dump: expected an object",
             check=no_merged_pair),
        Case("a manifest without its dump, reported", "traceback", manifest_file, "report",
             edit_manifest(lambda d: d.pop("dump")), refused, r"run_\d+\.json: dump: expected an object"),
        Case("a threshold that is text", "traceback", manifest_file, "report",
             edit_manifest(lambda d: d["settings"].update(max_abs_err="tiny")), refused,
             r"run_\d+\.json: settings\.max_abs_err: expected a number"),
        Case("a count never checked that is text", "traceback", manifest_file, "report",
             edit_manifest(lambda d: d.update(stopped={**STOPPED, "unchecked": {"forward": "many"}})), refused,
             r"run_\d+\.json: stopped\.unchecked\.forward: expected an integer"),
        Case("more entries never checked than selected", "traceback", manifest_file, "merge",
             edit_manifest(lambda d: d.update(stopped={**STOPPED, "unchecked": {"forward": 60, "backward": 30}})),
             refused, r"run_\d+\.json: stopped\.unchecked: 90 entries never checked, more than the 66 selected",
             check=no_merged_pair),
        Case("a stop that is a word, resumed", "traceback", manifest_file, "resume",
             edit_manifest(lambda d: d.update(stopped="yes")), (1,),
             r"run_\d+\.json: stopped: expected an object or null, found str 'yes': not read; what this run left "
             r"unchecked is not written into it"),
        Case("a count of calls that is text", "traceback", manifest_file, "merge",
             edit_manifest(lambda d: d["dump"].update(api_calls="many")), refused,
             r"run_\d+\.json: dump\.api_calls: expected an integer"),
        Case("a timeout past the alarm's range", "traceback", "option", "run", lambda root: None, usage,
             r"--msprobe-timeout must be a number of seconds from 0 \(no limit\) up to", args=("--msprobe-timeout",
                                                                                             "1e10")),
        Case("a device range of 10**11 ids", "traceback", "option", "run", lambda root: None, usage,
             r"--msprobe-devices: '0-99999999999' is not an id or a range of ids from 0 to 65,535",
             args=("--msprobe-devices", "0-99999999999")),
        Case("a line number of 5,000 digits", "traceback", "stack.json", "run", stack_json("digits"), (1,),
             check=lambda root, output: _failures_as_ever(root)),
        Case("a shape of 40 dimensions", "traceback", "dump.json", "run",
             with_entries({"Functional.relu.990.forward": relu_of([1] * 40)}), (1,),
             check=row_says("Functional.relu.990", "SKIP", "input_args[0].shape")),
        Case("a shape past numpy's size", "traceback", "dump.json", "run",
             with_entries({"Functional.relu.991.forward": relu_of([0, 2**62, 2**62])}), (1,),
             check=row_says("Functional.relu.991", "SKIP", "input_args[0].shape")),
        Case("a shape of one dimension past 2**63", "traceback", "dump.json", "run",
             with_entries({"Functional.relu.992.forward": relu_of([0, 2**70])}), (1,),
             check=row_says("Functional.relu.992", "SKIP", "output[0].shape: not a list of sizes")),
        # 5. Hangs and unbounded reads.
        Case("a manifest naming a FIFO as its dump", "hang", manifest_file, "merge", fifo_dump_in_manifest, (0, 1)),
        Case("a manifest naming a FIFO as its dump, reported", "hang", manifest_file, "report",
             fifo_dump_in_manifest, (0,)),
        Case("a shard's result CSV a FIFO", "hang", result_csv, "merge", second_shard_fifo, refused,
             r"shard2/accuracy_checking_result_1\.csv: not a regular file \(a FIFO\)", check=no_merged_pair),
        Case("a result CSV a FIFO, resumed", "hang", result_csv, "resume", replace_with(0, "fifo"), usage,
             r"result_\d+\.csv: not a regular file \(a FIFO\)"),
        Case("details linked to /dev/zero", "hang", details_csv, "merge", replace_with(1, "zero"), refused,
             r"details_\d+\.csv: a symbolic link to /dev/zero: not followed", check=no_merged_pair),
        Case("details linked to /dev/zero, reported", "hang", details_csv, "report", replace_with(1, "zero"),
             refused, r"details_\d+\.csv: a symbolic link to /dev/zero: not followed"),
        Case("a journal linked to /dev/zero", "hang", journal, "resume", replace_with(2, "zero"), usage,
             r"journal_\d+\.jsonl: a symbolic link to /dev/zero: not followed"),
        Case("a journal a FIFO, reported", "hang", journal, "report", replace_with(2, "fifo"), refused,
             r"journal_\d+\.jsonl: not a regular file \(a FIFO\)"),
        Case("a manifest linked to /dev/zero", "hang", manifest_file, "merge", replace_with(3, "zero"), refused,
             r"run_\d+\.json: a symbolic link to /dev/zero: not followed", check=no_merged_pair),
        Case("stack.json a FIFO", "hang", "stack.json", "run", stack_json("fifo"), (1,),
             check=lambda root, output: _failures_as_ever(root, sites=False)),
        Case("stack.json a FIFO under --msprobe-timeout", "hang", "stack.json", "run", stack_json("fifo"), (1,),
             check=lambda root, output: _failures_as_ever(root, sites=False), args=("--msprobe-timeout", "20")),
        Case("stack.json linked to /dev/zero", "hang", "stack.json", "run", stack_json("zero"), (1,),
             check=lambda root, output: _failures_as_ever(root, sites=False)),
        # 6. Bounds that can be walked around.
        Case("a .pt zip with two data.pkl records", "bound", ".pt", "run-tensor", two_pickles, (1,),
             check=row_says("Functional.relu.0", "SKIP", "data.pkl' twice: which record torch.load reads", "fresh")),
        # 7. Messages.
        Case("a Message of 40,000 characters, merged", "message", result_csv, "merge", edit_csv(0, long_message),
             (0, 1), check=message_cut),
        *npu_cases(),
    ]


def _failures_as_ever(root: Root, sites: bool = True) -> None:
    """A fresh run beside a forged stack.json: the rows of the finished run (verdicts, Messages), call
    sites aside."""
    (fresh,) = (root.path / "fresh").glob(f"{RESULT_PREFIX}*.csv")
    ours = {row[0]: row[:3] for row in read_result_rows(fresh)}
    assert ours == {row[0]: row[:3] for row in root.result_rows()}
    assert all("Traceback" not in row[3] and "fault" not in row[3] for row in read_result_rows(fresh))


def with_entries(entries: dict[str, dict]) -> Callable[[Root], None]:
    """Entries added to the dump (statistics: random data), each an argument of the given shape."""

    def forge(root: Root) -> None:
        document = json.loads(root.dump.read_text())
        document["data"].update(entries)
        root.dump.write_text(json.dumps(document))

    return forge


def tensor(shape: list[int]) -> dict:
    return {"type": "torch.Tensor", "dtype": "torch.float32", "shape": shape, "Max": 1.0, "Min": -1.0,
            "Mean": 0.0, "Norm": 1.0, "requires_grad": False}  # fmt: skip


def relu_of(shape: list[int]) -> dict:
    return {"input_args": [tensor(shape)], "input_kwargs": {}, "output": [tensor(shape)]}


def row_says(api: str, status: str, text: str, out: str = "fresh") -> Callable[[Root, str], None]:
    """The fresh run's row of api: its forward status, and text in its Message."""

    def check(root: Root, output: str) -> None:
        (fresh,) = (root.path / out).glob(f"{RESULT_PREFIX}*.csv")
        row = next(row for row in read_result_rows(fresh) if row[0] == api)
        assert row[1] == status and text in row[3], row

    return check


def two_pickles(root: Root) -> None:
    """Functional.relu.0's input as torch.save's archive with a second data.pkl and data/0 record
    each: first a pickle declaring a storage of 2.5e8 float32 (1 GB) and its record of zeros, deflated
    to 1 MB; then the file's own. zipfile reads the last of a name; torch's reader (miniz) finds
    records by a binary search over the sorted names, which with two pads before the file's own
    lands on the first: the size check and the loader read two different archives."""
    import io
    import struct
    import zipfile

    import torch

    elements = 250_000_000
    path = root.tensors / "Functional.relu.0.forward.input.0.pt"
    buffer = io.BytesIO()
    torch.save(torch.zeros(2, 4, 4, 4), buffer)
    source = zipfile.ZipFile(io.BytesIO(buffer.getvalue()))
    (pickle_name,) = [name for name in source.namelist() if name.endswith("/data.pkl")]
    (data_name,) = [name for name in source.namelist() if name.endswith("/data/0")]
    genuine = source.read(pickle_name)
    inflated = genuine.replace(b"K\x80t", b"\x8a\x08" + struct.pack("<q", elements) + b"t")  # the storage's
    assert inflated != genuine
    path.unlink()
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as out:
        out.writestr(pickle_name, inflated)
        with out.open(data_name, "w", force_zip64=True) as record:
            left = elements * 4
            while left:
                record.write(bytes(min(left, 2**24)))
                left -= min(left, 2**24)
        for pad in range(2):
            out.writestr(f"{pickle_name.split('/')[0]}/pad{pad}", b"")
        for info in source.infolist():
            out.writestr(info.filename, source.read(info))


# -- NPU references: hostile arguments of a recorded call ---------------------------------------------


def npu_dump(record: Callable[[Any], None], edit: Callable[[dict], None] | None = None) -> Callable[[Root], None]:
    """A tensor dump in root/npu written by tests/dumpwriter.py (the float64 reference recording what a
    correct kernel would), its entries then edited as a hostile hand would."""

    def forge(root: Root) -> None:
        import torch  # noqa: F401 - the recording imports it; in the forging process only
        from dumpwriter import DumpWriter

        writer = DumpWriter(root.path / "npu")
        record(writer)
        path = writer.write()
        if edit is not None:
            document = json.loads(path.read_text())
            edit(document["data"])
            path.write_text(json.dumps(document))

    return forge


def _npu(op: str) -> Callable:
    from pytest_msprobe.frameworks.npu_ops import lookup

    return lookup(op)


def _randn(*shape: int, seed: int = 0) -> Any:
    import torch

    return torch.randn(*shape, generator=torch.Generator().manual_seed(seed))


def prompt_attention(writer: Any) -> None:
    q, k, v = (_randn(1, 2, 4, 8, seed=i) for i in range(3))
    kwargs = {"num_heads": 2, "input_layout": "BNSD", "scale_value": 0.3}
    writer.record("NPU.npu_prompt_flash_attention.0", _npu("npu_prompt_flash_attention"), [q, k, v], kwargs)


def grouped_matmul(writer: Any) -> None:
    import torch

    x, w = _randn(6, 4), _randn(2, 4, 3, seed=1)
    kwargs = {"group_list": [2, 6], "split_item": 2, "group_type": 0}
    writer.record("NPU.npu_grouped_matmul.0", _npu("npu_grouped_matmul"), [[x], [w]], kwargs)
    assert torch.is_tensor(x)


def tnd_attention(lengths: list[int], dim: int = 2) -> Callable[[Any], None]:
    """npu_fusion_attention in TND: one packed sequence a length, of one head."""

    def record(writer: Any) -> None:
        import itertools

        rows = sum(lengths)
        q, k, v = (_randn(rows, 1, dim, seed=i) for i in range(3))
        ends = list(itertools.accumulate(lengths))
        kwargs = {"scale": 0.5, "actual_seq_qlen": ends, "actual_seq_kvlen": ends}
        writer.record("NPU.npu_fusion_attention.0", _npu("npu_fusion_attention"), [q, k, v, 1, "TND"], kwargs)

    return record


def set_kwarg(entry: str, name: str, value: Any) -> Callable[[dict], None]:
    def edit(data: dict) -> None:
        kwargs = data[entry]["input_kwargs"]
        kwargs[name] = [{"type": "int", "value": v} for v in value] if isinstance(value, list) else {
            "type": "int", "value": value}

    return edit


def npu_cases() -> list[Case]:
    row = "NPU.npu_prompt_flash_attention.0"
    return [
        Case("num_heads 0", "message", "dump.json", "run-npu",
             npu_dump(prompt_attention, set_kwarg(f"{row}.forward", "num_heads", 0)), (5,),
             check=row_says(row, "SKIP", "npu_prompt_flash_attention: num_heads=0: an integer of at least 1")),
        Case("num_heads no divisor of the hidden size", "message", "dump.json", "run-npu",
             npu_dump(prompt_attention, set_kwarg(f"{row}.forward", "num_heads", 3)), (5,),
             check=row_says(row, "SKIP", "num_heads=3, and the BNSD query of shape [1, 2, 4, 8] holds other heads")),
        Case("group_list past the rows", "message", "dump.json", "run-npu",
             npu_dump(grouped_matmul, set_kwarg("NPU.npu_grouped_matmul.0.forward", "group_list", [2, 9])), (5,),
             check=row_says("NPU.npu_grouped_matmul.0", "SKIP", "group_list=[2, 9]: 9 rows in its groups, more than")),
        Case("a decreasing actual_seq_qlen", "message", "dump.json", "run-npu",
             npu_dump(tnd_attention([2, 2, 2]), set_kwarg("NPU.npu_fusion_attention.0.forward", "actual_seq_qlen",
                                                          [4, 2, 6])), (5,),
             check=row_says("NPU.npu_fusion_attention.0", "SKIP", "actual_seq_qlen[1] is 2, less than the 4 before it")),
        Case("a negative actual_seq_qlen", "message", "dump.json", "run-npu",
             npu_dump(tnd_attention([2, 2, 2]), set_kwarg("NPU.npu_fusion_attention.0.forward", "actual_seq_qlen",
                                                          [-2, 4, 6])), (5,),
             check=row_says("NPU.npu_fusion_attention.0", "SKIP", "actual_seq_qlen[0] is -2, negative")),
        Case("half a million one-row sequences", "bound", "dump.json", "run-npu",
             npu_dump(tnd_attention([1] * 500_000)), (0,),
             check=row_says("NPU.npu_fusion_attention.0", "pass", "")),
    ]
