"""--msprobe-filter, msprobe's `acc_check -f` (issue 45, item 3): of the calls of an API equal but for the
Max and Min of their tensors, the first is checked and stands for the others, which keep their item and
their row: a SKIP naming it, never counted as compared.

tests/data/select_stats/acc_check/selection.json holds the calls msprobe 26.2.0's own acc_check -f
checked on that dump (make/acc_check_msprobe.py)."""

from __future__ import annotations

import json

import pytest

from conftest import DATA, read_csv, run_msprobe
from pytest_msprobe.dumps.call_groups import group_key, without_extremes
from pytest_msprobe.dumps.dump import parse_entry_name

SELECTION = json.loads((DATA / "select_stats" / "acc_check" / "selection.json").read_text())
DUMP = json.loads((DATA / "select_stats" / "dump.json").read_text())["data"]
STOOD_FOR = "not checked (--msprobe-filter): the same call as {} but for the Max and Min of its tensors"
# msprobe compares no list argument (acc_check.py keeps `arg for arg in input_args if isinstance(arg,
# dict)`): every torch.cat of this dump is one call to it. These join other tensors than Torch.cat.0.
CATS_MSPROBE_HIDES = ["Torch.cat.1", "Torch.cat.3", "Torch.cat.5"]


def spec(shape, low, high, mean=0.5):
    return {"type": "torch.Tensor", "dtype": "torch.float32", "shape": shape, "Max": high, "Min": low, "Mean": mean}


def key(entries, name):
    parsed = parse_entry_name(name)
    assert parsed is not None
    return group_key(entries, parsed)


def test_calls_equal_but_for_max_and_min_share_a_key_and_lists_and_keywords_count():
    entries = {
        "Torch.cat.0.forward": {"input_args": [[spec([2], 0, 1)]], "input_kwargs": {"dim": 0}},
        "Torch.cat.1.forward": {"input_args": [[spec([2], -5, 9)]], "input_kwargs": {"dim": 0}},
        "Torch.cat.2.forward": {"input_args": [[spec([3], 0, 1)]], "input_kwargs": {"dim": 0}},
        "Torch.cat.3.forward": {"input_args": [[spec([2], 0, 1, mean=0.7)]], "input_kwargs": {"dim": 0}},
        "Torch.where.0.forward": {"input_args": [], "input_kwargs": {"other": spec([2], 0, 1)}},
        "Torch.where.1.forward": {"input_args": [], "input_kwargs": {"other": spec([2], 3, 4)}},
    }
    cat = [key(entries, f"Torch.cat.{n}.forward") for n in range(4)]
    assert cat[0] == cat[1]  # Max and Min alone differ
    assert cat[0] != cat[2]  # a list argument's shape (msprobe leaves lists out: one group)
    assert cat[0] != cat[3]  # Mean still counts, as in msprobe
    assert key(entries, "Torch.where.0.forward") == key(entries, "Torch.where.1.forward")  # by keyword too
    assert without_extremes({"input_kwargs": {"Max": 3}}) == {"input_kwargs": {"Max": 3}}  # only a tensor's


def test_a_backward_stands_for_another_only_where_its_gradients_agree_too():
    forward = {"input_args": [spec([2], 0, 1)], "input_kwargs": {}}
    entries = {
        "Tensor.exp.0.forward": forward,
        "Tensor.exp.1.forward": forward,
        "Tensor.exp.0.backward": {"input": [spec([2], 0, 1)]},
        "Tensor.exp.1.backward": {"input": [spec([2], 0, 1, mean=0.1)]},
    }
    assert key(entries, "Tensor.exp.0.forward") == key(entries, "Tensor.exp.1.forward")
    assert key(entries, "Tensor.exp.0.backward") != key(entries, "Tensor.exp.1.backward")
    assert key({"Tensor.exp.0.forward": "text"}, "Tensor.exp.0.forward") is None  # its check says what is wrong


def checked_forward(rows):
    return sorted(row["API Name"] for row in rows if STOOD_FOR.format("")[:40] not in row["Message"].split(" | ")[0])


def test_one_check_per_group_and_every_entry_keeps_its_row(pytester, copy_dump):
    dump = copy_dump("select_stats")
    result = run_msprobe(pytester, dump, "--msprobe-filter", "--msprobe-max-skip-ratio", "0", device="cpu")
    assert result.ret == 0  # the filtered entries are no SKIPs the coverage gate counts
    rows = read_csv(pytester.path / "out", "result")
    assert len(rows) == len({name.rsplit(".", 1)[0] for name in DUMP})  # every API call its row
    # The calls msprobe checks with -f, and the cats it takes for Torch.cat.0 although they join other tensors.
    assert checked_forward(rows) == sorted(SELECTION["filtered"] + CATS_MSPROBE_HIDES)
    for name in CATS_MSPROBE_HIDES:
        assert [arg["shape"] for arg in DUMP[f"{name}.forward"]["input_args"][0]] == [[2, 2, 8, 4]] * 2
    assert [arg["shape"] for arg in DUMP["Torch.cat.0.forward"]["input_args"][0]] == [[8, 4]] * 2

    by_name = {row["API Name"]: row for row in rows}
    softmax = by_name["Functional.softmax.2"]
    # Its forward stood for (the recorded Mean -inf and Norm inf of masked scores, as in every layer);
    # its backward receives other gradients: checked.
    assert (softmax["Forward Test Success"], softmax["Backward Test Success"]) == ("SKIP", "pass")
    assert softmax["Message"].startswith(STOOD_FOR.format("Functional.softmax.0.forward"))
    assert by_name["Functional.softmax.0"]["Forward Test Success"] == "pass"
    details = {row["API Name"]: row for row in read_csv(pytester.path / "out", "details")}
    assert "Functional.softmax.2.forward.output.0" not in details  # no output compared, as any whole-entry SKIP
    assert details["Functional.softmax.2.backward.output.0"]["Status"] == "pass"
    result.stdout.fnmatch_lines([
        "msprobe: --msprobe-filter: of the calls of an API equal but for the Max and Min of their tensors, the "
        "first stands for the others, which SKIP naming it (msprobe's acc_check -f)",
        "msprobe: --msprobe-filter: 26 entries stood for by 13 checked ones",
        "forward  100 pass, 0 error, 0 warning, 0 SKIP, 26 filtered",
        "backward 83 pass, 0 error, 0 warning, 0 SKIP",
        "filtered (--msprobe-filter):",
        "26 entries not compared: each the same call as the first of its group but for the Max and Min of its "
        "tensors, which 13 checked entries stand for (their rows name them)",
    ])
    assert "SKIP reasons" not in result.stdout.str()
    result.assert_outcomes(passed=183, skipped=26)


def test_the_first_call_this_run_checks_stands_for_its_group(pytester, copy_dump):
    """-k leaves Functional.softmax.0 out: of its group, Functional.softmax.1 is checked."""
    dump = copy_dump("select_stats")
    result = run_msprobe(pytester, dump, "--msprobe-filter", "-k", "softmax and forward and not softmax.0",
                         device="cpu")
    assert result.ret == 0
    rows = {row["API Name"]: row for row in read_csv(pytester.path / "out", "result")}
    assert rows["Functional.softmax.1"]["Forward Test Success"] == "pass"
    assert rows["Functional.softmax.2"]["Message"] == STOOD_FOR.format("Functional.softmax.1.forward") + (
        ", whose check stands for it"
    )


def test_without_the_option_every_call_is_checked(pytester, copy_dump):
    dump = copy_dump("select_stats")
    result = run_msprobe(pytester, dump, "-k", "softmax and forward", device="cpu")
    assert result.ret == 0
    assert [row["Forward Test Success"] for row in read_csv(pytester.path / "out", "result")] == ["pass"] * 3


@pytest.mark.slow
def test_members_on_other_workers_name_the_same_entry(pytester, copy_dump):
    """Each xdist worker decides from the dump and the items alone, all the same: the rows are a serial run's."""
    dump = copy_dump("select_stats")
    serial = run_msprobe(pytester, dump, "--msprobe-filter", out="serial", device="cpu")
    spread = run_msprobe(pytester, dump, "--msprobe-filter", "-n", "2", out="xdist", device="cpu")
    assert serial.ret == spread.ret == 0
    key_columns = ("API Name", "Forward Test Success", "Backward Test Success", "Message")

    def rows(folder):
        return sorted(tuple(row[c] for c in key_columns) for row in read_csv(pytester.path / folder, "result"))

    assert rows("serial") == rows("xdist")
    spread.stdout.fnmatch_lines(["forward  100 pass, 0 error, 0 warning, 0 SKIP, 26 filtered"])


def test_a_filtered_runs_files_read_back_as_filtered(pytester, copy_dump, capsys):
    """Where only the CSVs are left (a merge of shards, the report command), a filtered row still reads as
    one: its Message names the entry that stood for it."""
    from pytest_msprobe.reports import merge

    dump = copy_dump("select_stats")
    result = run_msprobe(pytester, dump, "--msprobe-filter", device="cpu")
    assert result.ret == 0
    status = merge.main([str(pytester.path / "out"), "--out", str(pytester.path / "merged")])
    out = capsys.readouterr().out.splitlines()
    assert status == 0
    for lines in (result.outlines, out):
        assert "forward  100 pass, 0 error, 0 warning, 0 SKIP, 26 filtered" in lines
        assert "SKIP reasons:" not in lines
    assert any(line.startswith("26 entries not compared: ") and "which 13 checked entries" in line for line in out)


def resume_rows(pytester):
    return {row["API Name"]: row for row in read_csv(pytester.path / "out", "result")}


@pytest.mark.parametrize("journal", ["kept", "deleted"])
def test_a_resume_without_the_filter_checks_the_calls_it_left_unchecked(pytester, copy_dump, journal):
    """Each filtered row is written again, whole, with its entry's own verdict; the other direction of its
    API keeps the journal's result (where the journal is gone, the row's Message still says it was
    filtered, and the API runs whole, as any API the journal lacks)."""
    dump = copy_dump("select_stats")
    first = run_msprobe(pytester, dump, "--msprobe-filter", "-k", "softmax", device="cpu")
    assert first.ret == 0
    (result_csv,) = (pytester.path / "out").glob("accuracy_checking_result_*.csv")
    before = resume_rows(pytester)
    assert [before[f"Functional.softmax.{n}"]["Forward Test Success"] for n in range(3)] == ["pass", "SKIP", "SKIP"]
    if journal == "deleted":
        for path in (pytester.path / "out").glob("accuracy_checking_journal_*.jsonl"):
            path.unlink()

    resumed = run_msprobe(pytester, dump, "-k", "softmax", "--msprobe-resume", str(result_csv), device="cpu")
    assert resumed.ret == 0
    resumed.stdout.fnmatch_lines(["*2 rows with entries --msprobe-filter left unchecked are checked now and "
                                  "written again, whole*"])
    # softmax.1 and softmax.2 forward (without the journal, their backward too); nothing else runs again
    resumed.assert_outcomes(passed=2 if journal == "kept" else 4)
    after = resume_rows(pytester)
    assert sorted(after) == sorted(before)  # one row an API, as before
    for n in range(3):
        row = after[f"Functional.softmax.{n}"]
        assert (row["Forward Test Success"], row["Backward Test Success"]) == ("pass", "pass"), row
        assert "--msprobe-filter" not in row["Message"]
    details = {row["API Name"]: row for row in read_csv(pytester.path / "out", "details")}
    assert details["Functional.softmax.2.forward.output.0"]["Status"] == "pass"  # compared now
    assert details["Functional.softmax.2.backward.output.0"]["Status"] == "pass"  # kept, once
    assert len(details) == len(read_csv(pytester.path / "out", "details"))


def test_a_resume_with_the_filter_keeps_the_filtered_rows(pytester, copy_dump):
    dump = copy_dump("select_stats")
    assert run_msprobe(pytester, dump, "--msprobe-filter", "-k", "softmax", device="cpu").ret == 0
    (result_csv,) = (pytester.path / "out").glob("accuracy_checking_result_*.csv")
    before = result_csv.read_bytes()
    resumed = run_msprobe(pytester, dump, "--msprobe-filter", "-k", "softmax", "--msprobe-resume", str(result_csv),
                          device="cpu")
    assert resumed.ret == 0
    resumed.assert_outcomes()  # every entry finished: the filtered ones stood for already
    assert result_csv.read_bytes() == before
