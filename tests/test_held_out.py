"""Issue 45's "How it will be checked", on a model family none of the other tests' dumps resemble: a
Mamba-2-style state-space model (tests/data/ssm_fp32, ssm_bf16, ssm_stats; make/ssm_dump.py), each
tensor dump with a faulty copy whose recorded outputs hold planted kernel deficits (tests/held_out.py).

Each run by this plugin in msprobe's PyTorch layout, --msprobe-device recorded, the clean run standing
for the GPU and the faulty one for the NPU: msprobe 26.2.0's own api_precision_compare reads both CSVs
and calls the faulty APIs `error`; `python -m pytest_msprobe.compare` gives every row the same status
(but a dropout's, docs/compare.md) and exits 1; `--msprobe-standard benchmark --msprobe-reference
<the clean run>` fails those entries' items; msprobe's config.json white list selects what msprobe's
own acc_check checked (ssm_fp32/acc_check/selection.json); --msprobe-filter on the statistics dump
checks one call per group, the calls msprobe's own `acc_check -f` checked (ssm_stats/acc_check/), and
every entry keeps its row.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

import pytest
from compare_cases import read_rows
from compare_runs import msprobe_compare, only, ours, results, run_plugin, statuses
from held_out import ERROR, HIDDEN_FP32, PLANTS_BF16, PLANTS_FP32, SSM_BF16, SSM_FP32, SSM_STATS, Plant, build_faulty
from msprobe_venv import MsprobeVenv

pytestmark = pytest.mark.slow
LAYOUT = ("--msprobe-csv-layout", "msprobe-pytorch")
DUMPS = {"fp32": (SSM_FP32, PLANTS_FP32 + HIDDEN_FP32), "bf16": (SSM_BF16, PLANTS_BF16)}


@dataclass(frozen=True)
class Pair:
    npu: Path  # the faulty dump's run: its --msprobe-out
    gpu: Path  # the clean dump's run
    faulty: Path  # the faulty dump's dump.json
    plants: tuple[Plant, ...]


@pytest.fixture(scope="module", params=sorted(DUMPS))
def pair(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Pair:
    clean, plants = DUMPS[request.param]
    root = tmp_path_factory.mktemp(f"held_out_{request.param}")
    faulty = build_faulty(clean, root / "faulty", plants)
    run_plugin(clean / "dump.json", root / "gpu", *LAYOUT)
    run_plugin(faulty, root / "npu", *LAYOUT)
    return Pair(root / "npu", root / "gpu", faulty, plants)


def is_dropout(name: str) -> bool:
    return ".dropout." in name


def test_msprobe_calls_the_faulty_apis_error_and_the_compare_gives_every_row_its_status(
    msprobe_venv: MsprobeVenv, pair: Pair, tmp_path: Path
) -> None:
    npu_csv, gpu_csv = (only(run, "accuracy_checking_details_*.csv") for run in (pair.npu, pair.gpu))
    done = msprobe_compare(msprobe_venv, npu_csv, gpu_csv, tmp_path / "msprobe")
    assert "does not exist in the GPU data" not in done.stdout + done.stderr
    status, _ = ours(pair.npu, pair.gpu, tmp_path / "ours")
    assert status == 1
    theirs, mine = statuses(tmp_path / "msprobe"), statuses(tmp_path / "ours")
    assert list(mine) == list(theirs) == [row["API Name"] for row in read_rows(npu_csv)]  # every row, none dropped
    for plant in pair.plants:
        assert (theirs[plant.row], mine[plant.row]) == (plant.expected, plant.expected), plant
    assert {name for name, status in theirs.items() if status == "error"} == {
        plant.row for plant in pair.plants if plant.expected == ERROR
    }
    # A dropout's metrics are blank in both runs (two masks): msprobe reads 0.0 and passes; here SKIP.
    dropouts = [name for name in mine if is_dropout(name)]
    assert dropouts and {theirs[name] for name in dropouts} == {"pass"}
    assert {mine[name] for name in dropouts} == {"SKIP"}
    assert {name: s for name, s in mine.items() if not is_dropout(name)} == {
        name: s for name, s in theirs.items() if not is_dropout(name)
    }
    assert [row for row in results(tmp_path / "ours") if not is_dropout(row[0])] == [
        row for row in results(tmp_path / "msprobe") if not is_dropout(row[0])
    ]


def test_the_benchmark_standard_fails_the_faulty_entries_items(pair: Pair, tmp_path: Path) -> None:
    done = run_plugin(
        pair.faulty, tmp_path / "out", "--msprobe-standard", "benchmark", "--msprobe-reference", str(pair.gpu)
    )
    assert done.returncode == 1
    failed = {line.split("::", 1)[1].split(" ", 1)[0] for line in done.stdout.splitlines() if line.startswith("FAILED")}
    assert failed == {plant.entry for plant in pair.plants if plant.expected == ERROR}
    details = {row["API Name"]: row for row in read_rows(only(tmp_path / "out", "accuracy_checking_details_*.csv"))}
    for plant in pair.plants:
        assert details[plant.row]["Status"] == plant.expected, plant


def test_a_fast_exp_passes_msprobes_rule_and_fails_the_dtype_standard(tmp_path: Path) -> None:
    """fast_exp is 2000 times the clean run's error and still under msprobe's ratio thresholds, whose
    denominators are at least 2^-14 in fp32: this plugin's own standard sees it."""
    faulty = build_faulty(SSM_FP32, tmp_path / "faulty", HIDDEN_FP32 + PLANTS_FP32[-1:])
    chosen = " or ".join(plant.entry for plant in HIDDEN_FP32 + PLANTS_FP32[-1:])
    done = run_plugin(faulty, tmp_path / "out", "--msprobe-standard", "dtype", "-k", chosen)
    assert done.returncode == 1
    rows = {row["API Name"]: row for row in read_rows(only(tmp_path / "out", "accuracy_checking_result_*.csv"))}
    assert {api: row["Forward Test Success"] for api, row in rows.items()} == {
        "Torch.exp.1": "error",
        "Torch.exp.6": "error",
        "Torch.exp.2": "pass",  # exp within an ULP
    }


def test_a_config_white_list_selects_what_msprobes_acc_check_checked(tmp_path: Path) -> None:
    config = SSM_FP32 / "acc_check" / "config.json"
    listed = json.loads((SSM_FP32 / "acc_check" / "selection.json").read_text())["listed"]
    done = run_plugin(SSM_FP32 / "dump.json", tmp_path / "out", *LAYOUT, "--msprobe-config", str(config))
    assert done.returncode == 0, done.stdout[-2000:]
    rows = read_rows(only(tmp_path / "out", "accuracy_checking_result_*.csv"))
    assert sorted(row["API name"] for row in rows) == sorted(listed)
    assert "112 deselected" in done.stdout


def test_the_filter_checks_one_call_per_group_and_every_entry_keeps_its_row(tmp_path: Path) -> None:
    dump = json.loads((SSM_STATS / "dump.json").read_text())["data"]
    filtered = json.loads((SSM_STATS / "acc_check" / "selection.json").read_text())["filtered"]
    done = run_plugin(SSM_STATS / "dump.json", tmp_path / "out", *LAYOUT, "--msprobe-filter", device="cpu")
    assert done.returncode == 0, done.stdout[-2000:]
    rows = {row["API name"]: row for row in read_rows(only(tmp_path / "out", "accuracy_checking_result_*.csv"))}
    assert sorted(rows) == sorted({name.rsplit(".", 1)[0] for name in dump})  # every API call its row
    stood_for = {api: row["Message"] for api, row in rows.items() if row["Forward Test Success"] == "SKIP"}
    checked = sorted(set(rows) - set(stood_for))
    # msprobe's own -f, and the cats it takes for Torch.cat.0 (it compares no list argument) although
    # each joins other tensors: their Mean differs, as the recorded statistics say.
    hidden = [f"Torch.cat.{n}" for n in range(1, 6)]
    assert checked == sorted(filtered + hidden)
    for name in hidden:
        means = [arg["Mean"] for arg in dump[f"{name}.forward"]["input_args"][0]]
        assert means != [arg["Mean"] for arg in dump["Torch.cat.0.forward"]["input_args"][0]]
    for api, message in stood_for.items():
        representative = message.split("the same call as ", 1)[1].split(" ", 1)[0]
        assert representative.rsplit(".", 2)[0] == api.rsplit(".", 1)[0]  # a call of the same API
        assert representative.rsplit(".", 1)[0] in checked
    details = {row["API Name"]: row for row in read_rows(only(tmp_path / "out", "accuracy_checking_details_*.csv"))}
    for api in stood_for:  # one row of blanks, its Status and Message, as msprobe writes a SKIP
        row = details[f"{api}.forward.output.0"]
        assert (row["Status"], row["均方根误差"]) == ("SKIP", " ")
        assert row["Message"].startswith("not checked (--msprobe-filter): the same call as ")
    assert f"{len(stood_for)} filtered" in done.stdout
