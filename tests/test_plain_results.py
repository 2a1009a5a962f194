"""A journal line and a manifest are read back field by field (reports/plain_results.py, manifest.checked):
what a run writes reads back as it was; a field of the wrong kind is refused naming the file, the line
and the field, before anything formats, sorts or draws it."""

from __future__ import annotations

import json
import math

import pytest
from test_html_report import MANIFEST, results

from pytest_msprobe.reports import journal, manifest
from pytest_msprobe.reports.csv_files import ReportError
from pytest_msprobe.reports.plain_results import FieldError, entry_result
from pytest_msprobe.results import EntryResult, MsprobeMetrics, OutputResult, ProbeResult, Status


def rich() -> list[EntryResult]:
    found = results()
    probe = ProbeResult("Functional.linear", "cpu", True, Status.ERROR, [OutputResult(0, Status.ERROR, cosine=0.5)])
    found[1].probe = probe
    found[1].notes = ["benchmark ran in torch.float32: float64 raised", "\ud800 a lone surrogate"]
    found[1].outputs[0].msprobe = MsprobeMetrics(cosine_sim=0.5, rule="benchmark", single=("rmse",))
    return found


def same(a: EntryResult, b: EntryResult) -> bool:
    """Equal, NaN equal to NaN (a forged NaN reads back as the NaN it was)."""
    return json.dumps(a.to_dict(), sort_keys=True) == json.dumps(b.to_dict(), sort_keys=True)


def test_what_a_run_writes_reads_back_as_it_was():
    for result in rich():
        line = json.loads(json.dumps(result.to_dict()))  # as the journal writes and reads it
        assert same(entry_result(line), result), result.entry


def forged(path: str, value) -> dict:
    data = json.loads(json.dumps(rich()[1].to_dict()))
    *parents, last = path.split(".")
    target = data
    for part in parents:
        target = target[int(part)] if part.isdigit() else target[part]
    if value is KeyError:
        del target[last]
    else:
        target[last] = value
    return data


@pytest.mark.parametrize(
    "path, value, says",
    [
        ("outputs.0.severity", "high", "outputs[0].severity: expected a number, found str 'high'"),
        ("position", "</td><script>", "position: expected an integer, found str '</td><script>'"),
        ("position", 2**70, "position: expected an integer, found an int of 71 bits"),
        ("outputs.0.samples.worst.0.index", ["<b>"], "outputs[0].samples.worst: expected a list of elements"),
        ("outputs.0.samples.ulp_edges", [0.0, math.inf, None], "ulp_edges: expected finite numbers, the last null"),
        ("outputs.0.samples.total", "many", "outputs[0].samples.total: expected an integer"),
        ("outputs.0.shape", "[2, 3]", "outputs[0].shape: expected a list"),
        ("outputs.0.status", "passed", "outputs[0].status: expected one of pass, warning, error, SKIP"),
        ("status", "pass ", "status: expected one of"),
        ("direction", "sideways", "direction: expected forward or backward"),
        ("call_site.line", "12", "call_site.line: expected an integer"),
        ("probe.outputs.0.cosine", [0.5], "probe.outputs[0].cosine: expected a number, found a list"),
        ("outputs.0.msprobe.single", "rmse", "outputs[0].msprobe.single: expected a list"),
        ("notes", "one note", "notes: expected a list"),
        ("api", KeyError, "api: missing"),
        ("injected", 1, "injected: not a field of EntryResult"),
        ("outputs.0.nonfinite", 0, "outputs[0].nonfinite: expected true or false"),
    ],
)
def test_a_field_of_the_wrong_kind_is_named(path, value, says):
    with pytest.raises(FieldError) as raised:
        entry_result(forged(path, value))
    assert says in str(raised.value)


def test_a_journal_line_of_the_wrong_kind_names_the_file_and_the_line(tmp_path):
    path = tmp_path / "accuracy_checking_journal_1.jsonl"
    lines = [json.dumps(result.to_dict()) for result in rich()]
    lines.insert(3, json.dumps(forged("outputs.0.severity", "high")))
    path.write_text("\n".join(lines) + '\n{"api": "torn')
    with pytest.raises(ReportError, match=r"journal_1.jsonl: line 4: outputs\[0\].severity: expected a number"):
        journal.read_contents(path)
    path.write_text("\n".join(lines[:3] + ["{not json", *lines[4:]]) + "\n")
    with pytest.raises(ReportError, match=r"journal_1.jsonl: line 4: not JSON"):
        journal.peek(path)
    path.write_text('{"running": {"api": "Functional.relu.0", "direction": "forward", "pid": "me"}}\n')
    with pytest.raises(ReportError, match=r"line 1: running.pid: expected an integer"):
        journal.read_contents(path)


def test_a_torn_last_line_is_cut_and_the_rest_read(tmp_path):
    path = tmp_path / "accuracy_checking_journal_1.jsonl"
    lines = [json.dumps(result.to_dict()) for result in rich()]
    path.write_text("\n".join(lines) + "\n" + lines[0][:20])
    assert len(journal.peek(path).results) == len(lines)  # read only: nothing cut
    assert path.read_text().endswith(lines[0][:20])
    assert len(journal.read_contents(path).results) == len(lines)
    assert path.read_text().endswith("\n")  # resume cuts it


@pytest.mark.parametrize(
    "change, says",
    [
        (lambda d: d.pop("dump"), "dump: expected an object, found null"),
        (lambda d: d["dump"].pop("sha256"), "dump.sha256: missing"),
        (lambda d: d["dump"].update(path=["/d"]), "dump.path: expected a string, found a list"),
        (lambda d: d["dump"].update(api_calls="many"), "dump.api_calls: expected an integer"),
        (lambda d: d["dump"].update(api_calls=-1), "dump.api_calls: expected a count"),
        (lambda d: d["settings"].update(max_abs_err="tiny"), "settings.max_abs_err: expected a number"),
        (lambda d: d["settings"].update(tolerances="all"), "settings.tolerances: expected a list"),
        (lambda d: d["settings"].update(seed=1.5), "settings.seed: expected an integer"),
        (lambda d: d.update(settings=[]), "settings: expected an object"),
        (lambda d: d.update(plugin=1), "plugin: expected a string"),
        (lambda d: d.update(shard="1/2"), "shard: expected an object or null"),
        (lambda d: d.update(stopped="yes"), "stopped: expected an object or null, found str"),
        (lambda d: d.update(stopped={**STOPPED, "selected": "66"}), "stopped.selected: expected an integer"),
        (lambda d: d.update(stopped={**STOPPED, "why": 1}), "stopped.why: expected a string"),
        (lambda d: d.update(stopped={k: v for k, v in STOPPED.items() if k != "unfinished"}),
         "stopped.unfinished: missing"),
        (lambda d: d.update(stopped={**STOPPED, "unfinished": -1}), "stopped.unfinished: expected a count"),
        (lambda d: d.update(stopped={**STOPPED, "unchecked": [18]}), "stopped.unchecked: expected an object"),
        (lambda d: d.update(stopped={**STOPPED, "unchecked": {"sideways": 1}}),
         "stopped.unchecked: 'sideways' is no direction"),
        (lambda d: d.update(stopped={**STOPPED, "unchecked": {"forward": 1.5}}),
         "stopped.unchecked.forward: expected an integer"),
        (lambda d: d.update(stopped={**STOPPED, "unchecked": {"forward": True}}),
         "stopped.unchecked.forward: expected an integer"),
        (lambda d: d.update(stopped={**STOPPED, "unchecked": {"forward": 10**30}}),
         "stopped.unchecked.forward: expected an integer"),
        (lambda d: d.update(stopped={**STOPPED, "unchecked": {"backward": -2}}),
         "stopped.unchecked.backward: expected a count"),
        (lambda d: d.update(stopped={**STOPPED, "unchecked": {"forward": 60, "backward": 29}}),
         "stopped.unchecked: 89 entries never checked, more than the 66 selected"),
    ],
)
def test_a_manifest_field_of_the_wrong_kind_is_named(tmp_path, change, says):
    result_csv = tmp_path / "accuracy_checking_result_1.csv"
    document = json.loads(json.dumps({**MANIFEST, "format": manifest.FORMAT}))
    change(document)
    manifest.path_for(result_csv).write_text(json.dumps(document))
    with pytest.raises(manifest.ManifestError) as raised:
        manifest.read(result_csv)
    assert str(raised.value).startswith(str(manifest.path_for(result_csv)))
    assert says in str(raised.value)


STOPPED = {"why": "interrupted", "selected": 66, "unchecked": {"forward": 18, "backward": 29}, "unfinished": 19}


def test_a_manifest_s_stopped_reads_back_and_an_older_one_without_it_is_a_whole_run_s(tmp_path):
    result_csv = tmp_path / "accuracy_checking_result_1.csv"
    manifest.write(result_csv, {**MANIFEST, "format": manifest.FORMAT, "stopped": STOPPED})
    found = manifest.stopped_of(manifest.read(result_csv))
    assert found == manifest.Stopped("interrupted", 66, {"forward": 18, "backward": 29}, 19)
    lines, unchecked = manifest.stopped_lines([(result_csv, found)])
    assert lines == [
        "the run stopped early (interrupted): 47 of 66 entries never checked (18 forward, 29 backward)",
        f"19 APIs unfinished when the run stopped, not written: --msprobe-resume {result_csv} runs them",
    ]
    assert unchecked == {"forward": 18, "backward": 29}
    assert manifest.restate(result_csv, None) and manifest.stopped_of(manifest.read(result_csv)) is None
    assert not manifest.restate(result_csv, None)  # nothing changed: not written again
    older = tmp_path / "accuracy_checking_result_2.csv"
    manifest.write(older, {**MANIFEST, "format": manifest.FORMAT})  # no `stopped`: written before there was one
    assert manifest.stopped_of(manifest.read(older)) is None
    assert manifest.stopped_lines([(older, None)]) == ([], {})


def test_a_manifest_a_run_writes_reads_back(tmp_path):
    result_csv = tmp_path / "accuracy_checking_result_1.csv"
    manifest.write(result_csv, {**MANIFEST, "format": manifest.FORMAT, "shard": {"splits": 2, "group": 1}})
    assert manifest.read(result_csv)["dump"] == MANIFEST["dump"]
