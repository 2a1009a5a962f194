"""Text that does not encode, and clear errors instead of tracebacks (issue 26, items 6 and 9).

Any string of a dump (an entry name, a keyword's name, a dtype, a shape written as a string, a
data_name, a header field, stack.json's frames) may hold a lone surrogate (`"\\ud800"`, which no
UTF-8 file or pipe holds), an undecodable byte, a NUL or a terminal's escape sequence. Each must
reach every sink (the journal, the CSVs, an xdist worker's report, the terminal, junitxml)
escaped, and the run go on. A mistyped --msprobe-dump, a dump.json that is a link loop, a
baseline that is a FIFO, a field of the wrong type, a tensor folder that links out of the dump:
each a one-line refusal naming what is wrong, and the item's outcome agrees with its row.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

import execnet
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from conftest import read_csv, run_msprobe
from pytest_msprobe.checking.check import Checker
from pytest_msprobe.dumps.dump import DumpPathError, find_dump_files, parse_entry_name, read_dump
from pytest_msprobe.dumps.stack import parse_frame, read_stacks
from pytest_msprobe.frameworks import RunOptions, Tested
from pytest_msprobe.glue.remote import SharedDump
from pytest_msprobe.judging.standards import make_standard
from pytest_msprobe.options import Options
from pytest_msprobe.reports.csv_files import CsvWriter, read_result_rows
from pytest_msprobe.reports.messages import api_message, entry_message
from pytest_msprobe.reports.summary import failure_text, metric_properties, summary_lines
from pytest_msprobe.results import SKIP, EntryResult
from pytest_msprobe.untrusted import cut, encodable, escape, printable

# What a terminal obeys or no UTF-8 holds: printable() must leave none of it.
UNSAFE = re.compile("[\x00-\x1f\x7f-\x9f\u202a-\u202e\u2066-\u2069\ud800-\udfff]")
# A character that makes a string hostile: a lone surrogate, a NUL, a control, a bidi override.
HOSTILE = st.sampled_from(["\ud800", "\udfff", "\udcff", "\x00", "\x1b[2J", "\n", "\r", "\u202e", "\x7f", "\x85"])
# Bytes that are no UTF-8: a stray continuation, a cut sequence, an encoded surrogate, 0xff.
UNDECODABLE = st.sampled_from([b"\xff", b"\x80", b"\xc3(", b"\xed\xa0\x80", b"\xe2\x82"])
PLAIN = st.text(alphabet=st.characters(blacklist_categories=("Cs", "Cc")), max_size=4)


def tensor(dtype: str = "torch.float32", shape: Any = (2, 3)) -> dict:
    return {
        "type": "torch.Tensor",
        "dtype": dtype,
        "shape": list(shape) if isinstance(shape, tuple) else shape,
        "Max": 1.0,
        "Min": -1.0,
        "Mean": 0.0,
        "Norm": 1.0,
        "requires_grad": False,
    }


P = "@@PAYLOAD@@"  # where the hostile bytes go in the JSON text


def relu(**kwargs: Any) -> dict:
    return {"input_args": [tensor()], "input_kwargs": kwargs, "output": [tensor()]}


# field -> (the dump's document with P where the text goes, what a refusal names, or "" where
# the text may be taken as it is: a str argument, a header field).
FIELDS: dict[str, tuple[dict, str]] = {
    "entry name": ({"data": {f"Functional.relu{P}.0.forward": relu()}}, "not an API entry name"),
    "keyword name": (
        {"data": {"Functional.relu.0.forward": relu(**{P: {"type": "bool", "value": False}})}},
        "input_kwargs",
    ),
    "dtype": (
        {"data": {"Functional.relu.0.forward": {**relu(), "input_args": [tensor(dtype=P)]}}},
        "input_args[0].dtype",
    ),
    "shape as a string": (
        {"data": {"Functional.relu.0.forward": {**relu(), "input_args": [tensor(shape=P)]}}},
        "input_args[0].shape",
    ),
    "type": (
        {"data": {"Functional.relu.0.forward": {**relu(), "input_args": [{**tensor(), "type": P}]}}},
        "input_args[0].type",
    ),
    "data_name": (
        {"data": {"Functional.relu.0.forward": {**relu(), "input_args": [{**tensor(), "data_name": P}]}}},
        "input_args[0].data_name",
    ),
    "output dtype": ({"data": {"Functional.relu.0.forward": {**relu(), "output": [tensor(dtype=P)]}}}, ""),
    "str argument": (
        {
            "data": {
                "Functional.gelu.0.forward": {**relu(), "input_kwargs": {"approximate": {"type": "str", "value": P}}}
            }
        },
        "",
    ),
    "task": ({"task": P, "data": {"Functional.relu.0.forward": relu()}}, ""),
    "level": ({"level": P, "data": {"Functional.relu.0.forward": relu()}}, ""),
    "framework": ({"framework": P, "data": {"Functional.relu.0.forward": relu()}}, "framework"),
}


def dump_bytes(document: dict, payload: list[str | bytes]) -> bytes:
    """The document's JSON with the payload in place of P: text as JSON escapes (`\\ud800`,
    `\\u0000`), bytes as they are (no UTF-8)."""
    header = {"task": "statistics", "level": "L1", "framework": "pytorch"}
    return json.dumps({**header, **document}).encode().replace(P.encode(), spliced(payload))


def payloads() -> st.SearchStrategy[list[str | bytes]]:
    """Text around at least one hostile character or undecodable byte."""
    part = st.one_of(PLAIN, HOSTILE, UNDECODABLE)
    return (
        st.tuples(st.lists(part, max_size=3), st.one_of(HOSTILE, UNDECODABLE), st.lists(part, max_size=3))
        .map(lambda t: [*t[0], t[1], *t[2]])
        .filter(hostile)
    )


def hostile(payload: list[str | bytes]) -> bool:
    """Still hostile once spliced: two undecodable parts side by side may make a character
    (`\\xe2\\x82` then `\\x80` is `₀`), a name the plugin rightly takes as it is."""
    try:
        text = json.loads(b'"' + spliced(payload) + b'"')
    except ValueError:  # no UTF-8, or no JSON string: hostile as bytes
        return True
    return bool(UNSAFE.search(text))


CHECKER = Checker(RunOptions("cpu", Tested.DEVICE, "auto", 1234), make_standard(Options()))


def check_all(path: Path) -> list[EntryResult]:
    """Every entry of a dump as its item makes it: checked, or a SKIP under its escaped name."""
    dump = read_dump(path)
    results = []
    for name in dump.entries:
        parsed = parse_entry_name(name)
        if parsed is None:  # items.py: its row under the test's name, the entry's escaped
            results.append(
                EntryResult(escape(name), "forward", SKIP, f"{cut(escape(name), 200)}: not an API entry name")
            )
        else:
            results.append(CHECKER.check(dump, parsed))
    return results


def shown(line: str) -> str:
    """A line as the terminal gets it (reporter.py, items.py): escaped, and UTF-8 takes it."""
    text = printable(line)
    text.encode("utf-8")
    assert not UNSAFE.search(text), text
    return text


def through_every_sink(result: EntryResult, folder: Path) -> None:
    """The result as the journal, an xdist worker, the CSVs, the terminal and junitxml take it."""
    data = result.to_dict()
    json.dumps(data, ensure_ascii=False).encode("utf-8")  # the journal, or any JSON file
    sent = EntryResult.from_dict(execnet.loads(execnet.dumps(data)))  # a worker's report to its controller
    assert json.dumps(sent.to_dict()) == json.dumps(data)
    writer = CsvWriter.in_folder(folder)
    forward = result if result.direction == "forward" else None
    backward = result if result.direction == "backward" else None
    writer.write_api(sent.api, forward and sent, backward and sent)
    writer.close()
    (row,) = read_result_rows(writer.result_path)
    assert row[0] == result.api and result.status.value in row[1:3]
    writer.details_path.read_text(encoding="utf-8-sig")
    for line in [
        *summary_lines([sent]),
        *failure_text(sent, "basic"),
        entry_message(sent),
        api_message(forward, backward),
    ]:
        shown(line)
    for name, value in metric_properties(sent):
        (name + value).encode("utf-8")


def test_encodable_leaves_text_that_encodes_alone_and_shows_as_printable():
    assert encodable("Functional.relu.0 é 😀 \x00") == "Functional.relu.0 é 😀 \x00"
    assert encodable("a\ud800b\udcff") == "a\\ud800b\\udcff"


@given(st.text())
def test_encodable_text_encodes_and_is_shown_as_the_text_it_came_from(text):
    encodable(text).encode("utf-8")
    assert printable(encodable(text)) == printable(text)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(field=st.sampled_from(sorted(FIELDS)), payload=payloads())
def test_hostile_text_in_any_field_reaches_every_sink_escaped(tmp_path, field, payload):
    document, names = FIELDS[field]
    folder = Path(tempfile.mkdtemp(dir=tmp_path))
    (folder / "dump.json").write_bytes(dump_bytes(document, payload))
    dump = read_dump(folder / "dump.json")  # the whole dump reads: only the field is odd
    for value in (dump.task, dump.level, dump.framework):
        assert shown(value) == value
    results = check_all(folder / "dump.json")
    assert len(results) == len(dump.entries) == 1
    (result,) = results
    if names:  # refused, naming the field
        assert result.status == SKIP and names in entry_message(result), entry_message(result)
    through_every_sink(result, folder / "out")


def spliced(payload: list[str | bytes]) -> bytes:
    return b"".join(part if isinstance(part, bytes) else json.dumps(part)[1:-1].encode() for part in payload)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(payload=payloads())
def test_hostile_text_in_stack_json_gives_a_call_site_shown_escaped_or_none(tmp_path, payload):
    frame = ["File /home/u/train", *payload, ".py, line 7, in forward,\n loss = model(", *payload, ")"]
    folder = Path(tempfile.mkdtemp(dir=tmp_path))
    stack = json.dumps({"0": [["Functional.relu.0.forward"], [P]]}).encode().replace(P.encode(), spliced(frame))
    (folder / "stack.json").write_bytes(stack)
    frames = read_stacks(folder / "stack.json").get("Functional.relu.0.forward")  # unreadable: none, nothing else
    text = frames[0] if frames else spliced(frame).decode("utf-8", "surrogateescape")
    result = EntryResult("Functional.relu.0", "forward", "error", "the tested run raised", call_site=parse_frame(text))
    through_every_sink(result, folder / "out")


def test_names_shipped_to_a_worker_on_another_host_travel_whole():
    names = ("Functional.relu.0.forward", "Functional.relu\ud800.0.forward", "a\\b\x00\udcff")
    shared = SharedDump("/d/dump.json", "d/dump.json", names)
    assert SharedDump.from_dict(execnet.loads(execnet.dumps(shared.to_dict()))) == shared


# -- wrong types, named -------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("spec", "says"),
    [
        ({"type": [], "value": 1}, "input_args[1].type: not a type name"),
        ({"type": {}, "value": 1}, "input_args[1].type: not a type name"),
        ({"type": "float", "value": 10**400}, "input_args[1].value: cannot read"),
        ({"type": "int", "value": [1]}, "input_args[1].value"),
        ({**tensor(), "dtype": ["torch.float32"]}, "input_args[1].dtype: not a dtype name"),
        ({**tensor(), "shape": {"0": 2}}, "input_args[1].shape: not a list of sizes: a dict"),
        ({**tensor(), "shape": "[2, 3]"}, "input_args[1].shape: not a list of sizes: a str"),
        ({**tensor(), "Max": [1.0]}, "input_args[1].Max: not a number: a list"),
        ({**tensor(), "requires_grad": "yes"}, "input_args[1].requires_grad: not a bool"),
        ({**tensor(), "data_name": {"a": 1}}, "input_args[1].data_name: not a file name"),
    ],
)
def test_a_field_of_the_wrong_type_is_a_skip_naming_it(tmp_path, spec, says):
    document = {"data": {"Functional.leaky_relu.0.forward": {**relu(), "input_args": [tensor(), spec]}}}
    (tmp_path / "dump.json").write_bytes(dump_bytes(document, []))
    (result,) = check_all(tmp_path / "dump.json")
    assert result.status == SKIP and says in result.reason, result.reason
    assert result.reason.startswith("Functional.leaky_relu.0.forward: ")


def test_an_output_spec_of_the_wrong_type_is_named_too(tmp_path):
    document = {"data": {"Functional.relu.0.forward": {**relu(), "output": [{**tensor(), "dtype": []}]}}}
    (tmp_path / "dump.json").write_bytes(dump_bytes(document, []))
    (result,) = check_all(tmp_path / "dump.json")
    assert result.status == SKIP and "output[0].dtype: not a dtype name" in result.reason


def test_no_field_of_a_shipped_dump_is_of_the_wrong_type():
    from conftest import DUMPS
    from pytest_msprobe.dumps.dump import field_fault

    for folder in DUMPS.values():
        for path in find_dump_files(folder):
            dump = read_dump(path)
            assert [(n, field_fault(b)) for n, b in dump.entries.items() if field_fault(b)] == []


# -- paths that lead nowhere ---------------------------------------------------------------------


def test_a_path_that_leads_nowhere_is_refused_naming_why(tmp_path):
    with pytest.raises(DumpPathError, match="no such file or folder"):
        find_dump_files(tmp_path / "mistyped" / "dump.json")
    (tmp_path / "loop").symlink_to(tmp_path / "loop")
    with pytest.raises(DumpPathError, match="leads back to itself"):
        find_dump_files(tmp_path / "loop")
    folder = tmp_path / "dumps"
    (folder / "rank0").mkdir(parents=True)
    (folder / "rank0" / "dump.json").symlink_to(folder / "rank0" / "dump.json")
    (folder / "rank1").mkdir()
    (folder / "rank1" / "dump.json").symlink_to(folder / "gone.json")
    refused: list[str] = []
    assert find_dump_files(folder, refused) == []
    assert len(refused) == 2 and "leads back to itself" in refused[0] and "a link to nothing" in refused[1]


def test_a_tensor_folder_that_links_out_of_the_dump_is_not_followed(tmp_path):
    from pytest_msprobe.frameworks.torch_engine import CODEC
    from pytest_msprobe.inputs.rebuild import InputError, Rebuilder

    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (elsewhere / "x.pt").write_bytes(b"secret")
    dump = tmp_path / "dump"
    dump.mkdir()
    (dump / "dump_tensor_data").symlink_to(elsewhere)
    rebuilder = Rebuilder(CODEC, "Functional.relu.0.forward", dump / "dump_tensor_data", "auto", 1)
    with pytest.raises(
        InputError, match=r"input_args\[0\].data_name: dump_tensor_data is a link to .*outside the dump"
    ):
        rebuilder.tensor_path({**tensor(), "data_name": "x.pt"}, "input_args[0]")
    with pytest.raises(InputError, match=r"input_args\[0\].data_name: 'x+.*File name too long"):
        Rebuilder(CODEC, "e", elsewhere, "auto", 1).tensor_path({**tensor(), "data_name": "x" * 300}, "input_args[0]")


# -- end to end -----------------------------------------------------------------------------------


ENTRY_FIELDS = [field for field in FIELDS if field not in ("task", "level", "framework")]


def hostile_dump(folder: Path) -> Path:
    """Hostile text in every field, one entry a field (`Functional.relu.<i>`, `.gelu.<i>`), beside
    an entry that passes, as bytes no JSON writer makes."""
    data = {}
    for i, field in enumerate(ENTRY_FIELDS):
        ((name, body),) = FIELDS[field][0]["data"].items()
        data[name.replace(".0.", f".{i}.")] = body
    data["Functional.relu.99.forward"] = relu()
    text: list[str | bytes] = ["\ud800", "\x00\x1b[2J", b"\xff", "\u202e\n"]
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "dump.json").write_bytes(dump_bytes({"level": P, "data": data}, text))
    stack = {"0": [["Functional.relu.0.forward"], [f"File /u/t{P}.py, line 3, in f{P},\n y = g({P})"]]}
    (folder / "stack.json").write_bytes(json.dumps(stack).encode().replace(P.encode(), spliced(text)))
    return folder / "dump.json"


def rows_by_api(folder: Path) -> dict[str, dict[str, str]]:
    return {row["API Name"]: row for row in read_csv(folder, "result")}


def no_raw_text(output: str) -> None:
    assert "INTERNALERROR" not in output and "Traceback" not in output
    assert not re.search("[\x00\x1b\u202e\ud800-\udfff]", output), output[-2000:]


def outcomes(result: pytest.RunResult) -> dict[str, str]:
    """-rA's lines: node id -> PASSED, FAILED, SKIPPED (the short summary says each)."""
    found = {}
    for line in result.outlines:
        match = re.match(r"(PASSED|FAILED|SKIPPED|ERROR) (?:\[\d+\] )?(\S+)", line)
        if match:
            found[match.group(2)] = match.group(1)
    return found


@pytest.mark.slow
def test_hostile_text_in_every_field_serial_resumed_and_distributed(pytester):
    dump = hostile_dump(pytester.path / "hostile")
    serial = run_msprobe(pytester, dump, "--junitxml", "serial.xml", out="serial", device="cpu", subprocess=True)
    no_raw_text(serial.stdout.str() + serial.stderr.str())
    assert serial.ret in (pytest.ExitCode.OK, pytest.ExitCode.TESTS_FAILED)
    rows = rows_by_api(pytester.path / "serial")
    assert len(rows) == len(ENTRY_FIELDS) + 1  # one row an entry
    assert rows["Functional.relu.99"]["Forward Test Success"] == "pass"
    assert "input_kwargs: '\\\\ud800" in rows[f"Functional.relu.{ENTRY_FIELDS.index('keyword name')}"]["Message"]
    merged = subprocess.run(
        [sys.executable, "-m", "pytest_msprobe.merge", "serial", "--out", "merged"],
        cwd=pytester.path,
        capture_output=True,
        text=True,
        timeout=300,
    )
    no_raw_text(merged.stdout + merged.stderr)
    assert merged.returncode in (0, 1) and rows_by_api(pytester.path / "merged").keys() == rows.keys()
    journal = next((pytester.path / "serial").glob("accuracy_checking_journal_*.jsonl"))
    assert all(json.loads(line) for line in journal.read_text(encoding="utf-8").splitlines())
    (pytester.path / "serial.xml").read_text(encoding="utf-8")

    # A run cut short (-x at its first failure, or -k), then resumed: the journal's text read back.
    first = run_msprobe(pytester, dump, "-k", "relu and not 99", out="cut", device="cpu", subprocess=True)
    no_raw_text(first.stdout.str() + first.stderr.str())
    result_csv = next((pytester.path / "cut").glob("accuracy_checking_result_*.csv"))
    resumed = run_msprobe(pytester, dump, "--msprobe-resume", str(result_csv), device="cpu", subprocess=True)
    no_raw_text(resumed.stdout.str() + resumed.stderr.str())
    assert rows_by_api(pytester.path / "cut") == rows

    distributed = run_msprobe(pytester, dump, "-n", "2", out="xdist", device="cpu", subprocess=True)
    no_raw_text(distributed.stdout.str() + distributed.stderr.str())
    assert distributed.ret == serial.ret
    assert rows_by_api(pytester.path / "xdist") == rows


@pytest.mark.parametrize("given", ["mistyped/dump.json", "mistyped", "loop/dump.json", "loops"])
def test_a_dump_path_that_leads_nowhere_is_a_one_line_usage_error_writing_nothing(pytester, given):
    (pytester.path / "loop").mkdir()
    (pytester.path / "loop" / "dump.json").symlink_to(pytester.path / "loop" / "dump.json")
    (pytester.path / "loops" / "rank0").mkdir(parents=True)
    (pytester.path / "loops" / "rank0" / "dump.json").symlink_to("dump.json")
    result = run_msprobe(pytester, pytester.path / given, out="out", device="cpu")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    errors = [line for line in result.stderr.lines if line.strip()]
    assert len(errors) == 1 and errors[0].startswith("ERROR: --msprobe-dump: ") and given.split("/")[0] in errors[0]
    assert "Traceback" not in result.stdout.str() + result.stderr.str()
    assert not (pytester.path / "out").exists()


def test_a_baseline_that_is_a_fifo_is_refused_not_waited_on(pytester, copy_dump):
    dump = copy_dump("pt_stats_L1")
    os.mkfifo(pytester.path / "baseline.csv")
    result = run_msprobe(pytester, dump, "--msprobe-baseline", "baseline.csv", out="out", device="cpu")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["ERROR: --msprobe-baseline: *baseline.csv: not a regular file (a FIFO*"])
    assert not (pytester.path / "out").exists()


def test_wrong_types_skip_their_items_and_rows_alike(pytester):
    specs = {
        "type_list": {"type": [], "value": 0.01},
        "float_400_digits": {"type": "float", "value": 10**400},
        "dtype_dict": {**tensor(), "dtype": {"name": "torch.float32"}},
        "shape_dict": {**tensor(), "shape": {"0": 2}},
        "max_list": {**tensor(), "Max": [1.0]},
    }
    data = {
        f"Functional.leaky_relu.{i}.forward": {**relu(), "input_args": [tensor(), s]}
        for i, s in enumerate(specs.values())
    }
    data["Functional.relu.9.forward"] = relu()
    folder = pytester.path / "typed"
    folder.mkdir()
    (folder / "dump.json").write_text(
        json.dumps({"task": "statistics", "level": "L1", "framework": "pytorch", "data": data})
    )
    result = run_msprobe(pytester, folder / "dump.json", "-rA", device="cpu")
    no_raw_text(result.stdout.str() + result.stderr.str())
    assert result.ret == pytest.ExitCode.OK
    rows = rows_by_api(pytester.path / "out")
    seen = outcomes(result)
    words = {"PASSED": "pass", "SKIPPED": "SKIP", "FAILED": "error"}
    for i, field in enumerate(("type", "value", "dtype", "shape", "Max")):
        row = rows[f"Functional.leaky_relu.{i}"]
        assert row["Forward Test Success"] == "SKIP" and f"input_args[1].{field}" in row["Message"], row
    for node, outcome in seen.items():
        api = node.rpartition("::")[2].rsplit(".", 1)[0]
        if api in rows:
            assert words[outcome] == rows[api]["Forward Test Success"], (node, rows[api])


# A disk that fills while the manifest is written: the file is whole or not there (merge would
# refuse an empty one), and the error is the caller's to say (reporter.py: one summary line).
FULL_AT_MANIFEST = """
import json, resource, signal, sys
from pathlib import Path
from pytest_msprobe.reports import manifest
signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
resource.setrlimit(resource.RLIMIT_FSIZE, (int(sys.argv[2]), int(sys.argv[2])))
try:
    manifest.write(Path(sys.argv[1]), {"format": manifest.FORMAT, "settings": {"pad": "x" * 20000}})
except OSError as exc:
    print("refused:", exc.strerror)
"""


@pytest.mark.slow
@pytest.mark.parametrize("room", [0, 100, 8192])
def test_a_manifest_the_disk_cannot_hold_is_not_written_at_all(tmp_path, room):
    result_csv = tmp_path / "accuracy_checking_result_1.csv"
    run = subprocess.run(
        [sys.executable, "-c", FULL_AT_MANIFEST, str(result_csv), str(room)], capture_output=True, text=True
    )
    assert run.returncode == 0 and run.stdout.startswith("refused: File too large"), run.stdout + run.stderr
    assert list(tmp_path.iterdir()) == []


# A fault of the plugin itself on one entry, its message quoting a dump's text.
PLUGIN_FAULT = """
import pytest_msprobe.checking.check

def judge(self, result, name, run, *rest):
    if name.full == "Functional.relu.1.forward":
        raise RuntimeError("a fault quoting \\ud800 and \\x1b[2J")
    return JUDGE(self, result, name, run, *rest)

JUDGE = pytest_msprobe.checking.check.Checker.judge
pytest_msprobe.checking.check.Checker.judge = judge
"""


@pytest.mark.slow
@pytest.mark.parametrize("workers", [[], ["-n", "2"]])
def test_a_plugin_fault_fails_its_item_and_its_row_says_error(pytester, workers):
    folder = pytester.path / "d"
    folder.mkdir()
    data = {f"Functional.relu.{i}.forward": relu() for i in range(3)}
    (folder / "dump.json").write_text(json.dumps({"task": "statistics", "framework": "pytorch", "data": data}))
    pytester.makeconftest(PLUGIN_FAULT)
    result = run_msprobe(pytester, folder / "dump.json", "-rA", *workers, device="cpu", subprocess=True)
    output = result.stdout.str() + result.stderr.str()
    assert "INTERNALERROR" not in output and not re.search("[\x1b\ud800-\udfff]", output)
    assert result.ret == pytest.ExitCode.TESTS_FAILED and "RuntimeError: a fault quoting \\ud800 and \\x1b[2J" in output
    rows = rows_by_api(pytester.path / "out")
    assert [rows[f"Functional.relu.{i}"]["Forward Test Success"] for i in range(3)] == ["pass", "error", "pass"]
    assert "pytest-msprobe failed on this entry: RuntimeError" in rows["Functional.relu.1"]["Message"]
    assert outcomes(result)["d/dump.json::Functional.relu.1.forward"] == "FAILED"


def test_names_a_hand_made_csv_holds_are_shown_escaped_in_the_header():
    from pytest_msprobe.reports.provenance import check_csv_of_dump

    entries = {(f"Functional.relu.{i}", "forward") for i in range(10)}
    apis = {api for api, _ in entries} | {"Functional.relu\x1b[2J\ud800.0"}
    note = check_csv_of_dump("--msprobe-baseline", Path("b.csv"), apis, Path("dump.json"), entries)
    assert "Functional.relu\\x1b[2J\\ud800.0" in note and shown(note) == note


def test_a_skip_reason_keeps_its_escapes_whole_where_numbers_fold():
    from pytest_msprobe.reports.summary import skip_lines

    reasons = [
        f"Functional.gelu.{i}.forward: input_kwargs.approximate.value: cannot read '\ud800\x1b[2J' as str"
        for i in range(2)
    ]
    results = [EntryResult(f"Functional.gelu.{i}", "forward", SKIP, reason) for i, reason in enumerate(reasons)]
    (line,) = skip_lines(results)
    # `2J` stays: digits joined to letters are a name's (conv2d), not a number to fold
    assert "   2 x input_kwargs.approximate.value: cannot read '\\ud800\\x1b[2J' as str" in line and shown(line) == line
