"""Reading dump.json: entry names, the header, bare NaN, framework inference, finding dumps."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from conftest import DATA, DUMPS
from pytest_msprobe.dumps.dump import (
    DumpError,
    entry_kind,
    find_dump_files,
    parse_entry_name,
    parse_json,
    peek_task,
    read_dump,
)


@pytest.mark.parametrize("name, parts", [
    ("Functional.linear.0.forward", ("Functional", "linear", 0, "forward", "Functional.linear.0")),
    ("Torch.linalg.inv.12.backward", ("Torch", "linalg.inv", 12, "backward", "Torch.linalg.inv.12")),
    ("Tensor.__mul__.0.forward", ("Tensor", "__mul__", 0, "forward", "Tensor.__mul__.0")),
    ("Primitive.dense.Dense.0.forward", ("Primitive", "dense.Dense", 0, "forward", "Primitive.dense.Dense.0")),
])
def test_api_entry_names(name, parts):
    parsed = parse_entry_name(name)
    assert (parsed.api_type, parsed.api, parsed.index, parsed.direction, parsed.prefix) == parts


@pytest.mark.parametrize("name, kind", [
    ("Module.conv.Conv2d.forward.0", "module"),
    ("Module.fc2.Linear.parameters_grad", "module"),
    ("Cell.dense.Dense.backward.0", "module"),
    ("Functional.relu.0.backward", "backward"),
    ("garbage", "unknown"),
    ("Functional.relu.x.forward", "unknown"),
])
def test_entry_kinds(name, kind):
    assert entry_kind(name) == kind


def test_a_real_mix_dump_counts_its_kinds():
    dump = read_dump(DATA / "pt_tensor_mix" / "dump.json")
    assert (dump.task, dump.level, dump.framework) == ("tensor", "mix", "pytorch")
    assert dump.counts() == {"forward": 26, "backward": 18, "module": 14, "unknown": 0}
    assert dump.tensor_dir == DATA / "pt_tensor_mix" / "dump_tensor_data"


def test_bare_nan_and_infinity_parse(tmp_path):
    path = tmp_path / "dump.json"
    path.write_text('{"task": "statistics", "data": {"Torch.x.0.forward": {"input_args": '
                    '[{"type": "torch.Tensor", "dtype": "torch.float32", "shape": [2], "Max": Infinity, '
                    '"Min": -Infinity, "Mean": NaN, "Norm": NaN}], "input_kwargs": {}, "output": []}}}')
    spec = read_dump(path).entries["Torch.x.0.forward"]["input_args"][0]
    assert float(spec["Max"]) == math.inf and float(spec["Min"]) == -math.inf and math.isnan(float(spec["Mean"]))


def test_nan_inside_a_string_is_left_alone(tmp_path):
    path = tmp_path / "dump.json"
    path.write_text('{"task": "tensor", "data": {"Torch.x.0.forward": {"input_args": [{"type": "str", '
                    '"value": "a, NaN]"}], "output": [], "Max": NaN}}}')
    entry = read_dump(path).entries["Torch.x.0.forward"]
    assert entry["input_args"][0]["value"] == "a, NaN]" and math.isnan(float(entry["Max"]))


@pytest.mark.parametrize("text, error", [
    ("{not json", "not valid JSON"),
    ('{"task": "tensor"}', "no 'data' object"),
    ("[1, 2]", "no 'data' object"),
])
def test_unreadable_dumps_name_the_file(tmp_path, text, error):
    path = tmp_path / "dump.json"
    path.write_text(text)
    with pytest.raises(DumpError, match=error) as info:
        read_dump(path)
    assert str(path) in str(info.value)


def test_framework_is_inferred_when_the_key_is_missing():
    public = DATA / "public"
    torch_dump = read_dump(public / "ascend-mstt__msprobe_test_pytorch_ut_api_accuracy_checker_run_ut__dump.json")
    ms_dump = read_dump(public / "ascend-mstt__msprobe_test_mindspore_ut_api_accuracy_checker_files__api_info_statistics.json")
    assert torch_dump.framework == "pytorch" and ms_dump.framework == "mindspore"


def test_folders_are_searched_recursively(tmp_path):
    for step in ("step0", "step1"):
        (tmp_path / step / "rank0").mkdir(parents=True)
        (tmp_path / step / "rank0" / "dump.json").write_text("{}")
    assert find_dump_files(tmp_path) == [tmp_path / "step0/rank0/dump.json", tmp_path / "step1/rank0/dump.json"]


def test_peek_task_reads_the_header_only():
    assert peek_task(DUMPS["pt_stats_L1"] / "dump.json") == ("statistics", "pytorch")
    assert peek_task(DUMPS["pt_tensor_L1"] / "dump.json") == ("tensor", "pytorch")


def test_entries_keep_dump_order():
    path = DUMPS["pt_tensor_L1"] / "dump.json"
    assert list(read_dump(path).entries) == list(json.loads(path.read_text())["data"])


_json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.sampled_from(["NaN", "a, NaN]", "-Infinity", ": NaN,"]),
    lambda children: st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=5), children, max_size=4),
    max_leaves=20,
)


@settings(deadline=None)  # parse time is not the point, and CI machines are busy
@given(document=st.dictionaries(st.sampled_from(["Max", "Min", "x"]), _json_values), indent=st.sampled_from([None, 1]))
def test_bare_constants_read_as_python_json_reads_them(document, indent):
    raw = json.dumps({"data": document}, indent=indent).encode()
    parsed = parse_json(raw, Path("dump.json"))
    expected = json.loads(raw)
    # Quoted bare words come back as strings that float() reads as the same value.
    assert _normalised(parsed) == _normalised(expected)


def _normalised(node):
    if isinstance(node, dict):
        return {key: _normalised(value) for key, value in node.items()}
    if isinstance(node, list):
        return [_normalised(value) for value in node]
    if isinstance(node, float) and not math.isfinite(node):
        return "NaN" if math.isnan(node) else ("Infinity" if node > 0 else "-Infinity")
    return node
