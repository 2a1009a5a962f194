"""msprobe's white and black lists carried over (issue 45, item 3): `--msprobe-config` reads msprobe's own
config.json (its acc_check section) or config.yaml, `--msprobe-white-list` / `--msprobe-black-list` (and
their ini keys) name the same, and the entries left out are deselected as `-k` deselects them.

tests/data/select_stats/acc_check/selection.json holds what msprobe 26.2.0's own acc_check checked on
that dump under acc_check/config.json (make/acc_check_msprobe.py ran it on the CPU): the run here must
check those calls and no other."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from conftest import DATA, read_csv, run_msprobe
from pytest_msprobe.dumps.acc_check_config import (
    FIXED_BLACK_LIST,
    ApiLists,
    ConfigError,
    api_lists,
    check_names,
    known_names,
    read_config,
)
from pytest_msprobe.dumps.dump import parse_entry_name

SELECTION = json.loads((DATA / "select_stats" / "acc_check" / "selection.json").read_text())
USAGE_ERROR = pytest.ExitCode.USAGE_ERROR


def entry(name: str):
    parsed = parse_entry_name(name)
    assert parsed is not None
    return parsed


def checked_calls(folder: Path) -> list[str]:
    return [row["API Name"] for row in read_csv(folder, "result")]


# -- msprobe's rule, as data ----------------------------------------------------


def test_a_list_names_an_api_without_its_type_exactly_and_the_black_list_wins():
    lists = ApiLists(white=("add", "linalg.norm", "dropout"), black=("dropout",))
    assert lists.why_left_out(entry("Tensor.add.0.forward")) is None
    assert lists.why_left_out(entry("Torch.add.3.backward")) is None  # Tensor or Torch alike
    assert lists.why_left_out(entry("Torch.linalg.norm.0.forward")) is None  # what lies between type and number
    assert lists.why_left_out(entry("Tensor.add_.0.forward")) == "not in the white list"  # exact
    assert lists.why_left_out(entry("Tensor.Add.0.forward")) == "not in the white list"  # case-sensitive
    assert lists.why_left_out(entry("Functional.dropout.0.forward")) == "in the black list"
    assert lists.why_left_out(None) == "not in the white list"  # no API name: in no list


def test_msprobes_fixed_black_list_applies_with_any_list_even_over_the_white_list():
    assert FIXED_BLACK_LIST == ("to", "empty", "empty_like", "empty_strided", "new_empty", "new_empty_strided",
                                "empty_with_format")
    assert ApiLists(white=("to",)).why_left_out(entry("Tensor.to.0.forward")) == "in msprobe's fixed black list"
    assert ApiLists(black=("relu",)).why_left_out(entry("Tensor.empty_like.0.forward")) == (
        "in msprobe's fixed black list"
    )
    assert ApiLists(black=("relu",)).why_left_out(entry("Tensor.add.0.forward")) is None
    assert ApiLists(black=("relu",)).why_left_out(None) is None  # no white list: it stays


def test_names_are_checked_against_the_apis_msprobe_wraps():
    assert {"conv2d", "__add__", "linalg.norm", "npu_fusion_attention"} <= known_names()
    assert "atb.npu_mla_preprocess" in known_names()  # 26.2.0's own list, newer than the union of older ones
    assert check_names(["conv2d", "conv2d", "add"], "white_list", "here") == ("conv2d", "add")
    with pytest.raises(ConfigError, match=r"here: white_list names 'Functional.conv2d', 'convv2d', not an API"):
        check_names(["conv2d", "Functional.conv2d", "convv2d"], "white_list", "here")
    with pytest.raises(ConfigError, match="here: black_list must be a list of API names"):
        check_names("conv2d", "black_list", "here")
    with pytest.raises(ConfigError, match="must be a list of API names"):
        check_names(["conv2d", 3], "black_list", "here")


def test_config_json_is_read_from_its_acc_check_section_and_says_what_it_leaves_aside(tmp_path):
    path = tmp_path / "config.json"
    path.write_text(json.dumps({"task": "acc_check", "level": "L1", "acc_check": {
        "white_list": ["conv2d"], "error_data_path": "./", "scope": []}}))
    config = read_config(path)
    assert (config.white, config.black) == (("conv2d",), ())
    assert config.not_used == ("error_data_path (--msprobe-save-error-data DIR says where error data goes)", "scope")
    path.write_text(json.dumps({"task": "statistics"}))  # no acc_check section: every API, as msprobe
    assert (read_config(path).white, read_config(path).black) == ((), ())


def test_config_yaml_takes_msprobes_five_keys_and_no_other(tmp_path):
    pytest.importorskip("yaml")
    path = tmp_path / "config.yaml"
    path.write_text("white_list: [matmul]\nblack_list:\n  - add\nprecision: 14\n")
    config = read_config(path)
    assert (config.white, config.black) == (("matmul",), ("add",))
    assert config.not_used == ("precision (the CSVs' number format is the layout's)",)
    path.write_text("white_list: []\nwhite_lists: [add]\n")
    with pytest.raises(ConfigError, match=r"config.yaml: white_lists is not a key of msprobe's config.yaml"):
        read_config(path)
    path.write_text("")  # an empty file: every API
    assert read_config(path).white is None


@pytest.mark.parametrize(
    ("name", "text", "match"),
    [
        ("config.json", "{not json", "not valid JSON"),
        ("config.json", "[1]", "is a JSON object, not a list"),
        ("config.json", '{"acc_check": []}', "its acc_check section must be an object"),
        ("config.toml", "", r"not msprobe's config.json or config.yaml"),
    ],
)
def test_a_config_that_is_none_is_refused_naming_it(tmp_path, name, text, match):
    path = tmp_path / name
    path.write_text(text)
    with pytest.raises(ConfigError, match=match) as caught:
        read_config(path)
    assert str(path) in str(caught.value)


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="no FIFOs here")
def test_a_fifo_named_config_json_is_refused_not_waited_on(tmp_path):
    os.mkfifo(tmp_path / "config.json")
    with pytest.raises(ConfigError, match="not a regular file"):
        read_config(tmp_path / "config.json")


def test_an_option_list_replaces_the_config_files_own(tmp_path):
    path = tmp_path / "config.json"
    path.write_text(json.dumps({"acc_check": {"white_list": ["conv2d"], "black_list": ["relu"]}}))
    config = read_config(path)
    assert api_lists(config, None, None) == ApiLists(("conv2d",), ("relu",))
    assert api_lists(config, ("add",), None) == ApiLists(("add",), ("relu",))
    assert api_lists(None, None, ("add",)) == ApiLists((), ("add",))
    assert api_lists(None, None, None) is None  # no list at all: msprobe's fixed one is not applied either


# -- what a user sees ------------------------------------------------------------


def test_config_json_white_list_checks_what_msprobe_checks(pytester, copy_dump):
    """msprobe's own acc_check, run on this dump with this config.json, checked these calls and wrote a
    `not in white list` SKIP row for every other (selection.json); here the others are deselected."""
    dump = copy_dump("select_stats")
    config = dump.parent / "acc_check" / "config.json"
    result = run_msprobe(pytester, dump, "--msprobe-config", str(config), device="cpu")
    assert result.ret == 0
    assert sorted(checked_calls(pytester.path / "out")) == sorted(SELECTION["listed"])
    assert set(SELECTION["listed"]) >= {"Torch.add.0", "Tensor.add.0", "Torch.matmul.0", "Tensor.matmul.0"}
    assert not any(name.startswith(("Tensor.to.", "Functional.dropout.")) for name in checked_calls(pytester.path / "out"))
    result.stdout.fnmatch_lines([
        "msprobe: API lists as msprobe's acc_check takes them (*config.json): white list add, matmul, softmax, to, "
        "dropout, linalg.norm; black list dropout, and msprobe's fixed one (to, empty, *)",
        "msprobe: config.json: not used here: error_data_path (--msprobe-save-error-data DIR says where error data goes)",
        "collected 209 items / 179 deselected / 30 selected",
        "msprobe: entries deselected by the API lists: 164 not in the white list, 13 in the black list, "
        "2 in msprobe's fixed black list",
    ])
    result.assert_outcomes(passed=30, deselected=179)


def test_config_yaml_selects_as_config_json(pytester, copy_dump):
    pytest.importorskip("yaml")
    dump = copy_dump("select_stats")
    lists = json.loads((dump.parent / "acc_check" / "config.json").read_text())["acc_check"]
    (pytester.path / "config.yaml").write_text(
        f"white_list: {json.dumps(lists['white_list'])}\nblack_list: {json.dumps(lists['black_list'])}\n"
        "error_data_path: './'\nprecision: 14\nquantization_api_list: []\n"
    )
    result = run_msprobe(pytester, dump, "--msprobe-config", "config.yaml", "--co", device="cpu")
    assert result.ret == 0
    result.stdout.fnmatch_lines(["collected 209 items / 179 deselected / 30 selected"])


def test_an_unknown_name_is_a_usage_error_naming_it_and_the_file(pytester, copy_dump):
    dump = copy_dump("select_stats")
    (pytester.path / "config.json").write_text(json.dumps({"acc_check": {"white_list": ["add", "Torch.matmul"]}}))
    result = run_msprobe(pytester, dump, "--msprobe-config", "config.json", device="cpu")
    assert result.ret == USAGE_ERROR
    result.stderr.fnmatch_lines([
        f"ERROR: {pytester.path / 'config.json'}: acc_check: white_list names 'Torch.matmul', not an API msprobe "
        "wraps: a list names an API without its type*"
    ])
    assert not list((pytester.path / "out").glob("*.csv"))  # nothing ran, nothing written


def test_ini_keys_and_options_name_the_lists_the_command_line_first(pytester, copy_dump):
    dump = copy_dump("select_stats")
    pytester.makeini("[pytest]\nmsprobe_white_list = add\n    matmul\nmsprobe_black_list = matmul\n")
    result = run_msprobe(pytester, dump, "--co", device="cpu")
    result.stdout.fnmatch_lines(["collected 209 items / 197 deselected / 12 selected"])  # add alone: 6 + 6
    result = run_msprobe(pytester, dump, "--co", "--msprobe-black-list", "add,softmax", device="cpu")
    result.stdout.fnmatch_lines(["collected 209 items / 197 deselected / 12 selected"])  # matmul alone now
    assert "Torch.matmul.0.forward" in result.stdout.str() and "Torch.add.0.forward" not in result.stdout.str()
    result = run_msprobe(pytester, dump, "--msprobe-white-list", "add,Add", device="cpu")
    assert result.ret == USAGE_ERROR
    result.stderr.fnmatch_lines(["ERROR: --msprobe-white-list (ini msprobe_white_list): white_list names 'Add', *"])


@pytest.mark.slow
def test_the_lists_deselect_alike_on_xdist_workers(pytester, copy_dump):
    """The controller reads the config and ships the lists: every worker deselects the same items
    (xdist stops on a collection that differs), even where the config is not on its host."""
    dump = copy_dump("select_stats")
    config = dump.parent / "acc_check" / "config.json"
    result = run_msprobe(pytester, dump, "--msprobe-config", str(config), "-n", "2", device="cpu")
    assert result.ret == 0
    assert sorted(checked_calls(pytester.path / "out")) == sorted(SELECTION["listed"])
