"""Bad input: a clear error naming file, entry and field; the other entries and dumps go on."""

from __future__ import annotations

import json

import pytest

from conftest import read_csv, run_msprobe


def edit(dump_json, fn):
    document = json.loads(dump_json.read_text())
    fn(document["data"])
    dump_json.write_text(json.dumps(document))


def test_a_file_that_is_not_json_is_one_failed_item_and_the_others_run(pytester, copy_dump):
    good = copy_dump("pt_stats_L1")
    broken = pytester.path / "broken" / "dump.json"
    broken.parent.mkdir()
    broken.write_text('{"task": "statistics", "data": {')
    result = run_msprobe(pytester, [broken, good], "-rs", device="cpu")
    outcomes = result.parseoutcomes()
    assert outcomes["failed"] >= 1 and outcomes["passed"] >= 30
    assert "INTERNALERROR" not in result.stdout.str()
    result.stdout.fnmatch_lines(["*broken/dump.json: not valid JSON*"])
    assert len(read_csv(pytester.path / "out" / "pt_stats_L1", "result")) == 26  # a folder per dump


def test_a_json_file_without_data_names_the_file(pytester):
    path = pytester.path / "dump.json"
    path.write_text('{"task": "tensor"}')
    result = run_msprobe(pytester, path, "-rs", device="cpu")
    assert result.parseoutcomes() == {"failed": 1}
    result.stdout.fnmatch_lines(["*dump.json: not an msprobe dump: no 'data' object*"])


@pytest.mark.slow
def test_malformed_entries_skip_naming_entry_and_field(pytester, copy_dump):
    dump = copy_dump("pt_tensor_L1")

    def damage(data):
        data["Functional.relu.0.forward"]["input_args"][0]["dtype"] = "torch.float17"
        data["Functional.gelu.0.forward"]["input_args"][0]["shape"] = [3, 3]
        del data["Torch.cat.0.forward"]["input_args"][0][1]["shape"]
        data["Tensor.t.0.forward"]["input_args"][0]["data_name"] = "../../etc/passwd"

    edit(dump, damage)
    result = run_msprobe(pytester, dump, "-rs", device="cpu")
    assert "INTERNALERROR" not in result.stdout.str()
    result.stdout.fnmatch_lines_random([
        "*Functional.relu.0.forward: input_args[[]0[]].dtype: unknown dtype 'torch.float17'*",
        "*Functional.gelu.0.forward: input_args[[]0[]].shape: recorded [[]3, 3[]] but *holds [[]2, 32[]]*",
        "*Torch.cat.0.forward: input_args[[]0[]][[]1[]]*",
        "*Tensor.t.0.forward: input_args[[]0[]].data_name: '../../etc/passwd' points outside*",
    ])
    rows = {row["API Name"]: row for row in read_csv(pytester.path / "out", "result")}
    assert len(rows) == 37  # no lost row
    assert rows["Functional.relu.0"]["Forward Test Success"] == "SKIP"
    assert "unknown dtype" in rows["Functional.relu.0"]["Message"]


def test_an_api_name_that_looks_like_a_formula_stays_text(pytester, copy_dump):
    dump = copy_dump("pt_stats_L1")

    def rename(data):
        data['=HYPERLINK("http://x").0.forward'] = data.pop("Functional.relu.0.forward")

    edit(dump, rename)
    result = run_msprobe(pytester, dump, "-rs", device="cpu")
    assert "INTERNALERROR" not in result.stdout.str()
    names = [row["API Name"] for row in read_csv(pytester.path / "out", "result")]
    formula = [name for name in names if "HYPERLINK" in name]
    assert formula and all(name.startswith("'=") for name in formula)


def test_bare_nan_and_infinity_are_read(pytester, copy_dump):
    dump = copy_dump("pt_stats_L1")
    text = dump.read_text()
    first = json.loads(text)["data"]["Functional.relu.0.forward"]["input_args"][0]
    text = text.replace(f'"Max": {first["Max"]!r}', '"Max": Infinity', 1).replace(
        f'"Min": {first["Min"]!r}', '"Min": NaN', 1)
    assert "Infinity" in text and "NaN" in text
    dump.write_text(text)
    result = run_msprobe(pytester, dump, "-rs", device="cpu")
    assert "INTERNALERROR" not in result.stdout.str()
    assert len(read_csv(pytester.path / "out", "result")) == 26


def test_missing_tensor_files_fall_back_to_random_and_say_so(pytester):
    public = pytester.path / "public"
    public.mkdir()
    from conftest import DATA

    (public / "dump.json").write_text(
        (DATA / "public" / "vllm-ascend__docs_msprobe_guide__L1_tensor_example_dump.json").read_text())
    result = run_msprobe(pytester, public / "dump.json", "-rs", device="cpu")
    assert "INTERNALERROR" not in result.stdout.str()
    rows = read_csv(pytester.path / "out", "result")
    assert rows and all("missing, random data used" in row["Message"] for row in rows if row["Message"])
    recorded = run_msprobe(pytester, public / "dump.json", "-rs", device="recorded", out="recorded")
    assert recorded.ret == pytest.ExitCode.USAGE_ERROR  # no recorded output to judge (test_coverage_gate.py)
    recorded.stderr.fnmatch_lines(["ERROR: *dump.json is a tensor dump without its dump_tensor_data/ folder*"])


@pytest.mark.parametrize("option, value, text", [
    ("--msprobe-mode", "guess", "--msprobe-mode must be one of auto, real, random"),
    ("--msprobe-device", "tpu", "--msprobe-device must be one of auto, npu, cuda, cpu, recorded"),
    ("--msprobe-standard", "strict", "--msprobe-standard must be one of basic, dtype, benchmark, not 'strict'"),
])
def test_bad_options_are_usage_errors(pytester, copy_dump, option, value, text):
    dump = copy_dump("pt_stats_L1")
    result = pytester.runpytest("--msprobe-dump", str(dump), option, value)
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines([f"*{text}*"])


def usage_line(result) -> str:
    """The one line a usage error ends with (pytest's `ERROR: ...` on stderr)."""
    lines = [line for line in result.stderr.lines if line.strip()]
    assert result.ret == pytest.ExitCode.USAGE_ERROR and len(lines) == 1, result.stderr.lines
    return lines[0]


@pytest.mark.parametrize("given", ["pt_tensor_L1/dump.json", "pt_tensor_L1/dump.json::Functional.relu.0.forward"])
def test_a_dump_given_to_pytest_itself_says_what_to_type(pytester, copy_dump, given):
    """`pytest dump.json` collects nothing (pytest said `not found`): one line names --msprobe-dump."""
    copy_dump("pt_tensor_L1")
    result = pytester.runpytest("-p", "no:cacheprovider", given)
    assert usage_line(result) == ("ERROR: pt_tensor_L1/dump.json is an msprobe dump, not a test file: check it with "
                                  "pytest --msprobe-dump pt_tensor_L1/dump.json")
    beside = pytester.runpytest("-p", "no:cacheprovider", "pt_tensor_L1/stack.json")
    assert usage_line(beside) == ("ERROR: pt_tensor_L1/stack.json is msprobe's record of the call stacks of a dump, "
                                  "not a test file: check the dump.json beside it with pytest --msprobe-dump "
                                  "pt_tensor_L1/dump.json")


def test_a_json_file_that_is_no_dump_is_left_to_pytest(pytester):
    (pytester.path / "settings.json").write_text('{"learning_rate": 0.1}')
    result = pytester.runpytest("-p", "no:cacheprovider", "settings.json")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["ERROR: not found: *settings.json"])  # pytest's own word


def test_stack_json_given_as_the_dump_names_the_dump_beside_it(pytester, copy_dump):
    """msprobe writes stack.json beside dump.json: given to --msprobe-dump it was one failed item
    and a pair of empty CSVs. A usage error now, naming the file to give; nothing written."""
    copy_dump("pt_tensor_L1")
    result = run_msprobe(pytester, pytester.path / "pt_tensor_L1" / "stack.json")
    assert usage_line(result) == (
        f"ERROR: --msprobe-dump {pytester.path}/pt_tensor_L1/stack.json: stack.json is msprobe's record of the call "
        f"stacks of a dump, not a dump: check the dump.json beside it: pytest --msprobe-dump "
        f"{pytester.path}/pt_tensor_L1/dump.json"
    )
    assert not (pytester.path / "out").exists()
    relative = pytester.runpytest("-p", "no:cacheprovider", "--msprobe-dump", "pt_tensor_L1/stack.json")
    assert usage_line(relative).endswith(": pytest --msprobe-dump pt_tensor_L1/dump.json")  # as the user wrote it
