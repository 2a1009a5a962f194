"""The parts that keep a dump from being more than data, one by one: the allow-list of APIs, the
escapes of untrusted text, the CSV cells and their reader, the scan of a dump's bytes, the
bounds on rebuilt inputs, and reading a dump file."""

from __future__ import annotations

import csv
import json
import os
import re
import threading
import time
from pathlib import Path

import numpy as np
import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from conftest import DUMPS
from pytest_msprobe.dumps import apis
from pytest_msprobe.dumps import scan as dump_scan
from pytest_msprobe.dumps.dump import DumpError, parse_entry_name, read_dump
from pytest_msprobe.frameworks import Unsupported
from pytest_msprobe.frameworks.ms_mapping import PRIMITIVE
from pytest_msprobe.frameworks.torch_engine import CODEC
from pytest_msprobe.inputs.rebuild import InputError, Rebuilder, element_budget
from pytest_msprobe.reports import resume
from pytest_msprobe.reports.baseline import Baseline
from pytest_msprobe.reports.csv_files import (
    MAX_CELL,
    CsvWriter,
    ReportError,
    details_path_for,
    read_result_rows,
    text_cell,
)
from pytest_msprobe.reports.messages import api_message
from pytest_msprobe.results import EntryResult, OutputResult
from pytest_msprobe.untrusted import escape, printable, unescape

ROOT = Path(__file__).resolve().parent.parent
ANY_TEXT = st.text(st.characters(exclude_categories=()), max_size=60)  # surrogates and controls too
CONTROL = re.compile("[\x00-\x1f\x7f-\x9f\u202a-\u202e\u2066-\u2069\ud800-\udfff]")


# -- only the APIs msprobe records -------------------------------------------------------


def shipped_entries():
    for name, folder in DUMPS.items():
        path = folder / "dump.json"
        if path.is_file():
            for entry in json.loads(path.read_text())["data"]:
                yield name, entry


def test_every_api_the_shipped_dumps_record_is_listed():
    """msprobe wrote these dumps: every API in them is in its lists, and resolves (PyTorch)."""
    seen = 0
    for dump, entry in shipped_entries():
        parsed = parse_entry_name(entry)
        if parsed is None or parsed.api_type in ("Primitive", "Distributed", "MintDistributed"):
            continue
        framework = apis.MINDSPORE if dump.startswith("ms_") else apis.PYTORCH
        listed = apis.listed(framework, parsed.api_type, parsed.api)
        if framework == apis.PYTORCH and parsed.api_type != "NPU":
            root = {"Functional": torch.nn.functional, "Tensor": torch.Tensor, "Torch": torch}[parsed.api_type]
            assert callable(apis.resolve(root, listed, "torch"))
        seen += 1
    assert seen > 300


@pytest.mark.parametrize(
    "framework, api_type, api, says",
    [
        ("pytorch", "Torch", "os.system", "not one of the APIs msprobe records"),
        ("pytorch", "Functional", "torch.os.system", "not one of the APIs msprobe records"),
        ("pytorch", "Torch", "load", "not one of the APIs msprobe records"),
        ("pytorch", "Torch", "ctypes.string_at", "not one of the APIs msprobe records"),
        ("pytorch", "Aten", "__loader__", "is a module's attribute"),
        ("pytorch", "Aten", "add.__class__", "is interpreter machinery"),
        ("pytorch", "Aten", "add.Tensor.__call__", "not one of the APIs msprobe records"),
        ("pytorch", "Aten", "_unsafe_index", "reads or shares raw memory"),
        ("pytorch", "Tensor", "untyped_storage", "reads or shares raw memory"),
        ("pytorch", "Torch", "linalg", "not one of the APIs msprobe records"),
        ("pytorch", "NPU", "npu_change_data_ptr", "reads or shares raw memory"),
        ("pytorch", "Os", "system", "msprobe has no pytorch API type 'Os'"),
        ("mindspore", "Mint", "nn", "is a module"),
        ("mindspore", "Mint", "absolute_import", "is a module's attribute"),
        ("mindspore", "Tensor", "__class__", "not one of the APIs msprobe records"),
        ("mindspore", "Primitive", "x.Dense", "msprobe has no mindspore API type 'Primitive'"),
    ],
)
def test_a_name_outside_the_lists_is_never_followed(framework, api_type, api, says):
    with pytest.raises(Unsupported, match=re.escape(says)):
        apis.listed(framework, api_type, api)


def test_a_listed_path_is_followed_from_its_root_and_nowhere_else():
    # msprobe names an API by its last part: Torch.vector_norm is the listed linalg.vector_norm.
    assert apis.listed("pytorch", "Torch", "vector_norm").dotted == "torch.linalg.vector_norm"
    assert apis.listed("pytorch", "Torch", "linalg.norm").dotted == "torch.linalg.norm"
    assert apis.resolve(torch, apis.listed("pytorch", "Torch", "vector_norm"), "torch") is torch.linalg.vector_norm
    overload = apis.listed("pytorch", "Aten", "add.Tensor")
    assert apis.resolve(torch.ops.aten, overload, "torch") is torch.ops.aten.add.Tensor
    with pytest.raises(Unsupported, match=re.escape("torch.ops.aten.add.nosuch does not exist in torch")):
        apis.resolve(torch.ops.aten, apis.listed("pytorch", "Aten", "add.nosuch"), "torch")


def test_the_deny_list_holds_whatever_a_list_names(monkeypatch):
    lists = apis._read_lists()
    poisoned = {**lists, ("pytorch", "torch"): lists[("pytorch", "torch")] | {"load", "set_default_dtype", "save"}}
    monkeypatch.setattr(apis, "_read_lists", lambda: poisoned)
    apis.wrapped.cache_clear()
    try:
        for api, why in (
            ("load", "reads or writes files"),
            ("set_default_dtype", "changes the state"),
            ("save", "reads or writes files"),
        ):
            with pytest.raises(Unsupported, match=why):
                apis.listed("pytorch", "Torch", api)
    finally:
        apis.wrapped.cache_clear()


def test_primitives_are_the_mapped_classes_only():
    assert apis.primitive("dense.Dense", PRIMITIVE).dotted == "mindspore.ops.Dense"
    for api in ("custom.Custom", "dump.TensorDump", "x.PyFunc"):
        with pytest.raises(Unsupported, match="is not a primitive pytest-msprobe maps"):
            apis.primitive(api, PRIMITIVE)


@pytest.mark.parametrize(
    "name",
    [None, 3, {}, "float32", "torch.os", "torch.Tensor", "torch.load", "torch.", "torch.__class__", "torch.float32 "],
)
def test_a_dtype_is_read_from_a_table_never_from_torch(name):
    with pytest.raises(KeyError):
        CODEC.dtype(name)


def test_the_dtypes_msprobe_writes_are_in_the_table():
    for dtype in (
        torch.float64,
        torch.float32,
        torch.float16,
        torch.bfloat16,
        torch.int64,
        torch.int8,
        torch.uint8,
        torch.bool,
        torch.complex64,
    ):
        assert CODEC.dtype(str(dtype)) is dtype
    assert CODEC.dtype("torch.float") is torch.float32 and CODEC.dtype("torch.half") is torch.float16


def test_no_framework_attribute_is_named_by_dump_text():
    """The check of shared/hooks/before-stop: no getattr on a framework module in the package."""
    pattern = re.compile(r"getattr\((torch|module|mod|namespace)[^)]*\)")
    found = [
        f"{path}:{n}"
        for path in (ROOT / "pytest_msprobe").rglob("*.py")
        for n, line in enumerate(path.read_text().splitlines(), 1)
        if pattern.search(line)
    ]
    assert found == []


def test_the_lists_ship_with_the_package():
    assert "wrapped_apis.txt" in (ROOT / "pyproject.toml").read_text()
    sections = {key for key in apis._read_lists()}
    assert {("pytorch", s) for s in ("functional", "tensor", "torch", "_VF", "aten", "torch_npu")} <= sections
    assert {("mindspore", s) for s in ("ops", "tensor", "mint.ops", "mint.nn.functional")} <= sections
    assert len(apis.wrapped("pytorch", "aten")) > 500


# -- untrusted text ------------------------------------------------------------------------


@given(ANY_TEXT)
def test_escape_is_undone_by_unescape_and_leaves_nothing_a_terminal_obeys(text):
    escaped = escape(text)
    assert unescape(escaped) == text
    assert not CONTROL.search(escaped) and not CONTROL.search(printable(text))
    escaped.encode("utf-8")  # no lone surrogate left


def test_escape_leaves_ordinary_names_alone():
    for name in ("Functional.relu.0.forward", "Tensor.__add__.1.backward", "数值 µ", "a b"):
        assert escape(name) == name == printable(name)


# -- the CSV cells and their reader ----------------------------------------------------------

STATUSES = st.sampled_from(["pass", "error", "warning", "SKIP"])
LONG = st.integers(0, 3).map(lambda n: "x" * (0, 1, 32_000, 140_000)[n])
CELL_TEXT = st.builds(lambda a, b: a + b, ANY_TEXT, LONG)


@st.composite
def entries(draw):
    api = draw(ANY_TEXT | st.sampled_from(["'=cmd|' /C calc'!A0", "\n=1+2", "=1+1", "-2", "@SUM(A1)", "'", "''x"]))
    results = []
    for direction in ("forward", "backward"):
        if draw(st.booleans()):
            outputs = [
                OutputResult(
                    i, draw(STATUSES), "torch.float64", draw(ANY_TEXT), [2, 3], 0.5, 1e-3, 2.0, [draw(CELL_TEXT)]
                )
                for i in range(draw(st.integers(0, 2)))
            ]
            results.append(EntryResult(api, direction, draw(STATUSES), draw(CELL_TEXT), outputs, [draw(ANY_TEXT)]))
        else:
            results.append(None)
    return api, results[0], results[1]


@settings(
    max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow]
)
@given(st.lists(entries(), min_size=1, max_size=4, unique_by=lambda row: row[0]))
def test_every_row_the_writer_writes_reads_back(tmp_path_factory, rows):
    """Whatever an entry's name and messages hold: its row reads back whole, resume keeps it,
    a baseline reads it, and no cell starts a formula or holds a control character."""
    folder = tmp_path_factory.mktemp("rows")
    writer = CsvWriter.in_folder(folder, "1")
    for api, forward, backward in rows:
        writer.write_api(api, forward, backward)
    writer.close()
    path = writer.result_path
    read = read_result_rows(path)
    assert [row[0] for row in read] == [api for api, _, _ in rows]
    for (_, forward, backward), row in zip(rows, read):
        assert row[1:3] == [forward.status.value if forward else "", backward.status.value if backward else ""]
        message = api_message(forward, backward)
        if len(escape(message)) < MAX_CELL:
            assert row[3] == message
        else:  # cut, and said so
            assert len(text_cell(message, MAX_CELL)) <= MAX_CELL and row[3].endswith("message is in its details row]")
    before = path.read_bytes(), writer.details_path.read_bytes()
    assert resume.prepare(path) == {api for api, _, _ in rows}
    assert (path.read_bytes(), writer.details_path.read_bytes()) == before  # nothing cut
    Baseline.read(path)
    for file in (path, writer.details_path):
        text = file.read_text(encoding="utf-8-sig")
        assert not CONTROL.search(text.replace("\n", "").replace("\r", ""))
        with open(file, newline="", encoding="utf-8-sig") as handle, resume.any_field_size():
            for record in csv.reader(handle):
                assert not any(cell.startswith(("=", "+", "-", "@")) for cell in record)


def test_a_message_is_cut_in_its_cell_and_whole_in_the_details(tmp_path):
    outputs = [
        OutputResult(i, "error", "torch.float64", "torch.bfloat16", [4], 0.9, 1e-2, 1.0, ["e" * 150])
        for i in range(1200)
    ]
    forward = EntryResult("Aten._foreach_mul.0", "forward", "error", "", outputs)
    writer = CsvWriter.in_folder(tmp_path, "1")
    writer.write_api(forward.api, forward, None)
    writer.close()
    message = read_result_rows(writer.result_path)[0][3]
    assert len(message) <= MAX_CELL and message.endswith(
        "characters cut: every output's message is in its details row]"
    )
    with open(writer.details_path, newline="", encoding="utf-8-sig") as handle:
        details = list(csv.DictReader(handle))
    assert len(details) == 1200 and all(row["Message"] == "e" * 150 for row in details)


def test_an_older_file_with_a_field_past_the_csv_limit_is_resumed_whole(tmp_path):
    """131,072 characters is the csv module's default limit: a row over it is a row, not a torn tail."""
    path = tmp_path / "accuracy_checking_result_1.csv"
    long = "x" * 181_629
    rows = [
        ["Functional.relu.0", "pass", "", ""],
        ["Aten._foreach_mul.0", "error", "", long],
        ["Functional.gelu.0", "error", "pass", "short"],
    ]
    with open(path, "w", newline="", encoding="utf-8") as handle:
        handle.write("\ufeff")
        csv.writer(handle).writerows([["API Name", "Forward Test Success", "Backward Test Success", "Message"], *rows])
    details_path_for(path).write_text(
        "\ufeffAPI Name,Bench Dtype,Tested Dtype,Shape,Cosine,MaxAbsErr,MaxRelativeErr,Status,Message\n",
        encoding="utf-8",
    )
    before = path.read_bytes()
    assert resume.prepare(path) == {row[0] for row in rows}
    assert path.read_bytes() == before
    assert Baseline.read(path).failed == {("Aten._foreach_mul.0", "forward"), ("Functional.gelu.0", "forward")}


@pytest.mark.parametrize("cut", [1, 50, 0.5, -1])
def test_a_long_last_row_torn_anywhere_is_cut_alone(tmp_path, cut):
    writer = CsvWriter.in_folder(tmp_path, "1")
    short = EntryResult("Functional.relu.0", "forward", "pass")
    long = EntryResult("Functional.gelu.0", "forward", "SKIP", "r" * 40_000)
    writer.write_api(short.api, short, None)
    writer.write_api(long.api, long, None)
    writer.close()
    data = writer.result_path.read_bytes()
    last = data.rindex(b"Functional.gelu.0")
    at = {0.5: (len(data) - last) // 2, -1: len(data) - last - 1}.get(cut, cut)  # the middle, before its newline
    writer.result_path.write_bytes(data[: last + int(at)])
    assert resume.prepare(writer.result_path) == {"Functional.relu.0"}
    assert writer.result_path.read_bytes() == data[:last]


def test_a_record_that_does_not_parse_mid_file_is_refused_and_nothing_cut(tmp_path):
    path = tmp_path / "accuracy_checking_result_1.csv"
    path.write_text(
        '\ufeffAPI Name,Forward Test Success,Backward Test Success,Message\n"a"b,pass,,\nc,pass,,\n', encoding="utf-8"
    )
    before = path.read_bytes()
    with pytest.raises(ReportError, match="record 2 is not a CSV row pytest-msprobe writes"):
        resume.prepare(path)
    assert path.read_bytes() == before


def test_two_writers_into_one_folder_never_share_a_file(tmp_path):
    """The same second, the same stamp: the second run takes the next free stem, both files of a
    pair share it, and each file is created exclusively."""
    made = []
    barrier = threading.Barrier(8)

    def open_pair():
        barrier.wait()
        made.append(CsvWriter.in_folder(tmp_path, "20261123120000"))

    threads = [threading.Thread(target=open_pair) for _ in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    stems = [w.result_path.name.removeprefix("accuracy_checking_result_") for w in made]
    assert len(set(stems)) == 8 and "20261123120000.csv" in stems
    for writer in made:
        assert writer.details_path.name == writer.result_path.name.replace("result", "details", 1)
        writer.close()
    assert len(list(tmp_path.iterdir())) == 16


def test_a_stem_whose_details_file_exists_is_not_taken(tmp_path):
    (tmp_path / "accuracy_checking_details_7.csv").write_text("someone else's")
    writer = CsvWriter.in_folder(tmp_path, "7")
    writer.close()
    assert writer.result_path.name == "accuracy_checking_result_7_1.csv"
    assert not (tmp_path / "accuracy_checking_result_7.csv").exists()
    assert (tmp_path / "accuracy_checking_details_7.csv").read_text() == "someone else's"


def test_a_folder_that_cannot_hold_the_files_says_so(tmp_path):
    (tmp_path / "taken").write_text("a file")
    with pytest.raises(ReportError, match="taken: cannot write the CSV files there"):
        CsvWriter.in_folder(tmp_path / "taken", "1")
    with pytest.raises(ReportError, match="cannot write the CSV files there"):
        CsvWriter.in_folder(tmp_path / "taken" / "below", "1")


# -- a dump's bytes --------------------------------------------------------------------------


def document(entries_text: str, indent: bool) -> bytes:
    gap = "\n  " if indent else ""
    return ('{"task": "statistics", "framework": "pytorch", "data": {' + gap + entries_text + "}}").encode()


@pytest.mark.parametrize("indent", [True, False])
def test_an_entry_written_twice_is_named(indent):
    gap = ",\n  " if indent else ", "
    text = gap.join(
        [
            '"Functional.relu.0.forward": {"a": 1}',
            '"Functional.relu.0.backward": {}',
            '"Functional.relu.0.forward": {"a": 2}',
        ]
    )
    raw = document(text, indent)
    assert dump_scan.duplicate_entries(raw, json.loads(raw)["data"]) == ["Functional.relu.0.forward"]


def test_a_duplicate_hidden_behind_an_escape_is_named():
    raw = document(
        '"Functional.relu.0.forward": {}, "Functional.relu.0.forwar\\u0064": {}, "x": {"Functional.relu.0.forward": 1}',
        False,
    )
    assert dump_scan.duplicate_entries(raw, json.loads(raw)["data"]) == ["Functional.relu.0.forward"]


def test_no_duplicate_in_a_real_dump():
    for name in ("pt_stats_L1", "pt_tensor_L1", "ms_stats_L1"):
        raw = (DUMPS[name] / "dump.json").read_bytes()
        assert dump_scan.duplicate_entries(raw, json.loads(raw.replace(b"NaN", b"0"))["data"]) == []


@settings(max_examples=50, deadline=None)
@given(
    st.dictionaries(
        st.text(max_size=8),
        st.recursive(
            st.none() | st.integers() | st.text(max_size=5),
            lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=4), inner, max_size=3),
            max_leaves=10,
        ),
        max_size=6,
    ),
    st.booleans(),
)
def test_the_layout_of_the_bytes_finds_the_keys_json_finds(data, indent):
    raw = json.dumps({"task": "t", "data": data}, indent=1 if indent else None).encode()
    assert sorted(dump_scan.Layout(raw).data_keys()) == sorted(data)


def test_an_entry_nested_past_the_parser_is_cut_alone(tmp_path):
    deep = "[" * 10_000 + "]" * 10_000
    path = tmp_path / "dump.json"
    path.write_text(
        '{"task": "statistics", "framework": "pytorch", "data": {'
        '"Functional.relu.0.forward": {"input_args": [], "output": []}, '
        f'"Functional.gelu.0.forward": {{"input_args": {deep}, "output": []}}, '
        '"Functional.gelu.1.forward": {"input_args": [NaN], "output": []}}}'
    )
    dump = read_dump(path)
    assert list(dump.entries) == ["Functional.relu.0.forward", "Functional.gelu.0.forward", "Functional.gelu.1.forward"]
    assert dump.entries["Functional.gelu.0.forward"] is None
    assert dump.fault(parse_entry_name("Functional.gelu.0.forward")) == (
        "Functional.gelu.0.forward: input_args: nested deeper than 500 levels, more than a JSON parser takes"
    )
    assert dump.fault(parse_entry_name("Functional.relu.0.forward")) is None


def test_a_fifo_named_dump_json_is_refused_at_once(tmp_path):
    os.mkfifo(tmp_path / "dump.json")
    start = time.monotonic()
    with pytest.raises(DumpError, match="not a regular file"):
        read_dump(tmp_path / "dump.json")
    assert time.monotonic() - start < 5


@pytest.mark.parametrize(
    "key, value", [("framework", {"x": 1}), ("framework", ["pytorch"]), ("task", 3), ("level", {"a": "b"})]
)
def test_a_header_that_is_no_string_names_its_key(tmp_path, key, value):
    path = tmp_path / "dump.json"
    path.write_text(json.dumps({"task": "statistics", "framework": "pytorch", key: value, "data": {}}))
    with pytest.raises(DumpError, match=f"{key}: expected a string"):
        read_dump(path)


@pytest.mark.parametrize(
    "name",
    [
        "Torch.a/b.0.forward",
        "Torch..x.0.forward",
        "Functional.relu::x.0.forward",
        "Functional.re lu.0.forward",
        "Functional.relu\x1b.0.forward",
        "Functional.relu.\u0663.forward",
        "Torch." + "a" * 1000 + ".0.forward",
    ],
)
def test_a_name_that_is_no_python_path_is_no_api_name(name):
    assert parse_entry_name(name) is None


# -- rebuilt inputs --------------------------------------------------------------------------


def rebuild(arg, mode="random", max_elements=10**6):
    body = {"input_args": [arg], "input_kwargs": {}}
    with element_budget(max_elements):
        return Rebuilder(CODEC, "Functional.relu.0.forward", Path("/nowhere"), mode, 1).rebuild(body).args[0]


def spec(shape=(2, 3), dtype="torch.float32", low=-1.0, high=1.0):
    return {"type": "torch.Tensor", "dtype": dtype, "shape": list(shape), "Min": low, "Max": high}


@pytest.mark.parametrize(
    "arg, says",
    [
        (spec(shape=[2**53]), "input_args[0].shape: [9007199254740992] is 9,007,199,254,740,992 elements"),
        (spec(shape=[1] * 65), "input_args[0].shape: 65 dimensions"),
        (spec(shape=[2, True]), "input_args[0].shape: not a list of sizes"),
        (spec(dtype="torch.float16", high=1e308), "input_args[0].Max: 1e+308 is beyond the largest float16"),
        (spec(dtype="torch.bfloat16", low=-1e39), "input_args[0].Min: -1e+39 is beyond the largest bfloat16"),
        (spec(dtype="torch.int64", low=0, high=1e300), "input_args[0].Max: 1e+300 is outside the range of int64"),
        (spec(dtype="torch.uint8", low=-1, high=3), "input_args[0].Min: -1 is outside the range of uint8"),
        (spec(high=10**400), "input_args[0].Max: not a number"),
        ({"type": "str", "value": "\ud800"}, "input_args[0].value: cannot read"),
        ([[[[[[spec()]]]]]] if False else "deep", "nested deeper than 100 levels"),
    ],
)
def test_an_argument_past_a_bound_is_an_input_error_naming_its_field(arg, says):
    if arg == "deep":
        arg = [spec()]
        for _ in range(120):
            arg = [arg]
    with pytest.raises(InputError, match=re.escape(says)):
        rebuild(arg)


def test_the_element_bound_counts_the_whole_entry():
    rebuild([spec(shape=[1000]) for _ in range(10)], max_elements=10_000)
    with pytest.raises(InputError, match="random data for this entry would be 11,000, more than"):
        rebuild([spec(shape=[1000]) for _ in range(11)], max_elements=10_000)


@settings(max_examples=80, deadline=None)
@given(
    st.sampled_from(
        [
            "torch.float64",
            "torch.float32",
            "torch.float16",
            "torch.bfloat16",
            "torch.int64",
            "torch.int32",
            "torch.uint8",
            "torch.bool",
        ]
    ),
    st.floats(allow_nan=True, allow_infinity=True) | st.integers(-(10**30), 10**30) | st.none(),
    st.floats(allow_nan=True, allow_infinity=True) | st.integers(-(10**30), 10**30) | st.none(),
)
def test_any_statistics_give_a_tensor_or_a_named_field(dtype, low, high):
    try:
        tensor = rebuild(spec(shape=[5], dtype=dtype, low=low, high=high))
    except InputError as exc:
        assert re.search(r"input_args\[0\]\.(Max|Min): ", str(exc)), exc
        return
    assert tensor.dtype == CODEC.dtype(dtype) and tensor.shape == (5,)
    if tensor.is_floating_point():
        inner = tensor[1:-1].double()  # Min and Max sit at the ends
        assert torch.isfinite(inner).all()


def test_a_tensor_file_of_another_dtype_is_cast_and_said(tmp_path):
    folder = tmp_path / "dump_tensor_data"
    folder.mkdir()
    torch.save(torch.arange(6, dtype=torch.float64).reshape(2, 3), folder / "x.pt")
    rebuilder = Rebuilder(CODEC, "Functional.relu.0.forward", folder, "real", 1)
    value = rebuilder.rebuild({"input_args": [{**spec(), "data_name": "x.pt"}]}).args[0]
    assert value.dtype == torch.float32
    assert rebuilder.notes == [
        "input_args[0]: x.pt holds torch.float64, dump.json records torch.float32: cast to the recorded dtype"
    ]


def test_an_npy_holding_objects_is_never_unpickled(tmp_path):
    from pytest_msprobe.frameworks.mindspore import CODEC as MS_CODEC

    np.save(tmp_path / "x.npy", np.array([object()], dtype=object), allow_pickle=True)
    with pytest.raises(ValueError, match="allow_pickle"):
        MS_CODEC.load(tmp_path / "x.npy")
