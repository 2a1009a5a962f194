"""CI shards (pytest-split) of one dump, each with its CSV pair and manifest, merged into one pair:
the rows and the terminal summary of one serial run; pairs that cannot be one run's are refused."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from conftest import read_csv, run_msprobe
from pytest_msprobe.reports import merge
from pytest_msprobe.reports.messages import api_message
from pytest_msprobe.results import PASS, EntryResult

pytest.importorskip("pytest_split")


def by_api(folder: Path, kind: str) -> dict:
    rows: dict = {}
    for row in read_csv(folder, kind):
        rows.setdefault(row["API Name"], []).append(row)
    return rows


def section(lines: list) -> list:
    """The msprobe section of a run's terminal, without the CSV paths."""
    start = next(i for i, line in enumerate(lines) if " msprobe " in line and line.startswith("="))
    end = next(i for i in range(start, len(lines)) if lines[i].startswith("result:"))
    return lines[start:end]


def merged_lines(capsys, *args: str) -> tuple[int, list, str]:
    status = merge.main(list(args))
    captured = capsys.readouterr()
    return status, captured.out.splitlines(), captured.err


@pytest.mark.slow
def test_three_shards_merged_are_one_serial_runs_rows_and_summary(pytester, copy_dump, capsys):
    dump = copy_dump("pt_tensor_L1")
    durations = pytester.path / "durations.json"
    serial = run_msprobe(pytester, dump, "--store-durations", f"--durations-path={durations}", out="serial",
                         device="cpu")
    assert durations.is_file()
    shards = []
    for group in (1, 2, 3):
        result = run_msprobe(pytester, dump, "--splits", "3", "--group", str(group),
                             f"--durations-path={durations}", out=f"shard{group}", device="cpu")
        assert result.ret in (0, 1)
        shards.append(str(pytester.path / f"shard{group}"))
    sizes = [len(read_csv(Path(shard), "result")) for shard in shards]
    assert all(sizes) and sum(sizes) > 37  # each shard has rows, and some APIs are split between shards
    status, out, err = merged_lines(capsys, *shards, "--out", str(pytester.path / "merged"))
    assert status == 1, err  # the bf16 rounding failures, as in the serial run
    for kind in ("result", "details"):
        assert by_api(pytester.path / "merged", kind) == by_api(pytester.path / "serial", kind)
    assert section(out) == section(serial.outlines)
    assert out[-3].startswith("merged 3 pair(s) of ") and out[-3].endswith("pt_tensor_L1/dump.json")
    (manifest_file,) = (pytester.path / "merged").glob("accuracy_checking_run_*.json")
    assert len(json.loads(manifest_file.read_text())["merged_from"]) == 3


def shard(pytester, copy_dump, name: str, dump_name: str = "pt_tensor_L1", *args: str) -> str:
    dump = pytester.path / dump_name / "dump.json"
    if not dump.exists():
        dump = copy_dump(dump_name)
    run_msprobe(pytester, dump, "-k", "relu", *args, out=name, device="cpu")
    return str(pytester.path / name)


def test_pairs_of_different_dumps_are_refused(pytester, copy_dump, capsys):
    one = shard(pytester, copy_dump, "one")
    other = shard(pytester, copy_dump, "other", "pt_tensor_mix")
    status, _, err = merged_lines(capsys, one, other, "--out", str(pytester.path / "merged"))
    assert status == 2
    assert "are pairs of different dumps" in err and "sha256 differs" in err
    assert not (pytester.path / "merged").exists()


def test_pairs_written_under_different_settings_are_refused(pytester, copy_dump, capsys):
    one = shard(pytester, copy_dump, "one")
    other = shard(pytester, copy_dump, "other", "pt_tensor_L1", "--msprobe-max-abs-err", "1e-3")
    status, _, err = merged_lines(capsys, one, other, "--out", str(pytester.path / "merged"))
    assert status == 2
    assert "were written under different settings: max_abs_err 0.001 / 0.0001" in err


def test_a_pair_without_its_manifest_is_refused(pytester, copy_dump, capsys):
    one = shard(pytester, copy_dump, "one")
    (manifest_file,) = Path(one).glob("accuracy_checking_run_*.json")
    manifest_file.unlink()
    status, _, err = merged_lines(capsys, one, "--out", str(pytester.path / "merged"))
    assert status == 2
    assert f"no manifest {manifest_file.name} beside it, so its dump and settings are unknown" in err


def test_a_shard_missing_from_the_merge_is_said_and_fails(pytester, copy_dump, capsys):
    one = shard(pytester, copy_dump, "one")  # relu's API only: the dump has 37
    status, out, _ = merged_lines(capsys, one, "--out", str(pytester.path / "merged"))
    assert status == 1
    assert "1 of the dump's 37 APIs have rows: no shard ran the other 36 (a shard missing from the merge?)" in out


texts = st.text(alphabet=st.characters(blacklist_categories=("Cs",)), max_size=30)


@given(texts, texts, st.booleans(), st.booleans())
def test_a_result_message_splits_back_into_its_directions(forward_text, backward_text, has_forward, has_backward):
    forward = EntryResult("A.b.0", "forward", PASS, forward_text) if has_forward else None
    backward = EntryResult("A.b.0", "backward", PASS, backward_text) if has_backward else None
    message = api_message(forward, backward)
    parts = merge.split_message(message, "pass" if forward else "", "pass" if backward else "")
    # The parts join into the same Message again (where texts hold the separators themselves,
    # the split may differ, never the joined Message).
    again = api_message(
        EntryResult("A.b.0", "forward", PASS, parts[0]) if forward else None,
        EntryResult("A.b.0", "backward", PASS, parts[1]) if backward else None,
    )
    assert again == message
