"""pytest --msprobe-dump on real PyTorch dumps, read as a user reads it: outcomes, CSVs, terminal."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch

from conftest import read_csv, run_msprobe

FORWARD_APIS = 37  # examples/pt_tensor_L1: 37 forward and 29 backward API entries
ENTRIES = 66


def api_entries(dump_json):
    data = json.loads(dump_json.read_text())["data"]
    return [name for name in data if not name.startswith("Module.")]



@pytest.fixture
def example(copy_dump):
    return copy_dump("pt_tensor_L1")


# Not slow (1-2 CPU s): the quick set runs the README's main command on the example once.
@pytest.mark.parametrize("device", ["cpu", "recorded"])
def test_every_api_entry_is_an_item_with_a_verdict(pytester, example, device):
    result = run_msprobe(pytester, example, "--msprobe-device", device, "-v")
    outcomes = result.parseoutcomes()
    assert sum(outcomes.get(k, 0) for k in ("passed", "failed", "skipped")) == ENTRIES
    lines = [line.split(" ")[0] for line in result.outlines if line.startswith("pt_tensor_L1/dump.json::")]
    assert [line.split("::")[1] for line in lines] == api_entries(example)  # dump order
    rows = read_csv(pytester.path / "out", "result")
    assert len(rows) == FORWARD_APIS
    assert len({row["API Name"] for row in rows}) == FORWARD_APIS
    details = read_csv(pytester.path / "out", "details")
    assert {d["API Name"].rsplit(".output.", 1)[0].rsplit(".", 1)[0] for d in details} <= {
        row["API Name"] for row in rows}
    # Every forward API of this dump has one tensor output, hence one forward details row.
    assert sum(".forward.output." in d["API Name"] for d in details) == FORWARD_APIS
    assert result.ret == 1  # bf16 outputs fail the default rule on rounding alone
    result.stdout.fnmatch_lines([f"msprobe: device {device}, mode auto, seed 1234, standard basic*",
                                 "msprobe: pt_tensor_L1/dump.json: pytorch tensor dump, 37 forward, 29 backward*"])


@pytest.mark.slow
def test_result_rows_follow_the_contract(pytester, example):
    run_msprobe(pytester, example, "--msprobe-device", "cpu")
    rows = {row["API Name"]: row for row in read_csv(pytester.path / "out", "result")}
    assert list(next(iter(rows.values()))) == ["API Name", "Forward Test Success", "Backward Test Success", "Message"]
    assert rows["Functional.relu.0"]["Forward Test Success"] == "pass"
    assert rows["Functional.relu.0"]["Backward Test Success"] == "pass"
    assert rows["Tensor.add_.0"]["Backward Test Success"] == ""  # no backward entry in the dump
    linear = rows["Functional.linear.1"]
    assert linear["Forward Test Success"] == "error"
    assert "MaxAbsErr" in linear["Message"] and "autocast to torch.bfloat16" in linear["Message"]
    details = {d["API Name"]: d for d in read_csv(pytester.path / "out", "details")}
    row = details["Functional.linear.1.forward.output.0"]
    assert (row["Bench Dtype"], row["Tested Dtype"], row["Shape"]) == ("torch.float64", "torch.bfloat16", "[2, 8]")
    assert float(row["MaxAbsErr"]) >= 1e-4 and row["Status"] == "error"


@pytest.mark.slow
def test_recorded_metrics_agree_with_an_independent_float64_computation(pytester, example):
    run_msprobe(pytester, example, "--msprobe-device", "recorded")
    details = {d["API Name"]: d for d in read_csv(pytester.path / "out", "details")}
    tensors = example.parent / "dump_tensor_data"

    def load(name):
        return torch.load(tensors / name, weights_only=True).to(torch.float64).numpy()

    x, w, b = (load(f"Functional.linear.0.forward.input.{i}.pt") for i in range(3))
    exact = x @ w.T + b
    recorded = load("Functional.linear.0.forward.output.0.pt")
    row = details["Functional.linear.0.forward.output.0"]
    diff = np.abs(recorded - exact)
    assert float(row["MaxAbsErr"]) == pytest.approx(diff.max(), rel=1e-9, abs=1e-15)
    cosine = (recorded * exact).sum() / (np.linalg.norm(recorded) * np.linalg.norm(exact))
    assert float(row["Cosine"]) == pytest.approx(cosine, abs=1e-12)
    rel = diff / np.where(exact == 0, 1e-8, np.abs(exact))
    assert float(row["MaxRelativeErr"]) == pytest.approx(rel.max(), rel=1e-6)


def alter(path, fn):
    tensor = torch.load(path, weights_only=True)
    torch.save(fn(tensor.clone()), path)


def one_nan(t):
    t.view(-1)[3] = float("nan")
    return t


def one_off(t):
    t.view(-1)[5] += 1.0
    return t


def noised(t):
    generator = torch.Generator().manual_seed(0)
    return t * (1 + 0.03 * torch.randn(t.shape, generator=generator))


ALTERATIONS = {
    "Functional.layer_norm.0.forward": lambda t: t * 1.03,
    "Functional.gelu.0.forward": noised,
    "Torch.softmax.0.forward": one_nan,
    "Functional.relu.0.forward": one_off,
}


def failed_ids(result):
    return {line.split("::", 1)[1].split(" ")[0] for line in result.outlines if line.startswith("FAILED ")}


def test_a_failure_names_each_output_rounding_floor_once(pytester, example):
    """Each failing output says it is within the bf16 rounding budget, once; no note repeats it."""
    result = run_msprobe(pytester, example, "--msprobe-device", "cpu", "-k", "Torch.matmul.1.backward")
    failure = result.stdout.str().split(" FAILURES ", 1)[1].split(" msprobe ", 1)[0]
    assert failure.count("within the bf16 rounding budget") == 2  # output.0 and output.1
    assert "note:" not in failure
    # One line per output, as written: only newlines inside a line (the dump's) are escaped.
    result.stdout.fnmatch_lines(["Torch.matmul.1.backward: 2 of 2 outputs break the basic standard",
                                 "  output.0 torch.bfloat16 [[]2, 32]: error, Cosine *", "    MaxAbsErr *"])


@pytest.mark.slow
def test_altered_recorded_outputs_fail_and_the_untouched_pass(pytester, copy_dump):
    clean = copy_dump("pt_tensor_L1", "clean")
    baseline = failed_ids(run_msprobe(pytester, clean, "--msprobe-device", "recorded", "-rf"))
    altered = copy_dump("pt_tensor_L1", "altered")
    for entry, fn in ALTERATIONS.items():
        alter(altered.parent / "dump_tensor_data" / f"{entry}.output.0.pt", fn)
    result = run_msprobe(pytester, altered, "--msprobe-device", "recorded", "-rf")
    assert failed_ids(result) == baseline | set(ALTERATIONS)
    assert not baseline & set(ALTERATIONS)  # they passed untouched
    result.stdout.fnmatch_lines(["*Torch.softmax.0.forward*NaN at 1 position*"])


def test_statistics_dump_runs_in_random_mode(pytester, copy_dump):
    dump = copy_dump("pt_stats_L1")
    result = run_msprobe(pytester, dump, "--msprobe-device", "cpu", "--msprobe-mode", "random")
    outcomes = result.parseoutcomes()
    assert sum(outcomes.get(k, 0) for k in ("passed", "failed", "skipped")) == len(api_entries(dump))
    rows = read_csv(pytester.path / "out", "result")
    assert len(rows) == 26  # forward APIs of pt_stats_L1
    assert sum(row["Forward Test Success"] == "pass" for row in rows) >= 24


def test_recorded_device_refuses_a_statistics_dump(pytester, copy_dump):
    dump = copy_dump("pt_stats_L1")
    result = run_msprobe(pytester, dump, "--msprobe-device", "recorded")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["*--msprobe-device recorded needs a tensor dump*pt_stats_L1*statistics dump*"])


@pytest.mark.slow
def test_thresholds_from_the_command_line_and_the_ini_file(pytester, example):
    loose = run_msprobe(pytester, example, "--msprobe-device", "cpu", "--msprobe-max-abs-err", "1e-2")
    assert loose.ret == 0
    pytester.makeini("[pytest]\nmsprobe_cosine = 0.5\nmsprobe_max_abs_err = 1\n")
    ini = run_msprobe(pytester, example, "--msprobe-device", "cpu", "--msprobe-out", "ini")
    ini.stdout.fnmatch_lines(["*standard basic (Cosine > 0.5 and MaxAbsErr < 1)*"])
    assert ini.ret == 0  # the bf16 outputs that fail the default rule on their rounding pass this one
    details = read_csv(pytester.path / "ini", "details")
    assert details and all(d["Status"] in ("pass", "SKIP") for d in details)
    # A bound no output can pass (Cosine is at most 1) is refused, naming the option
    pytester.makeini("[pytest]\nmsprobe_cosine = 1.1\n")
    refused = run_msprobe(pytester, example, "--msprobe-device", "cpu")
    assert refused.ret == pytest.ExitCode.USAGE_ERROR
    refused.stderr.fnmatch_lines(["*--msprobe-cosine must be a number from -1 up to (not including) 1, not '1.1'*"])


def test_a_folder_is_searched_for_dumps(pytester, copy_dump):
    copy_dump("pt_stats_L1", "dump/step0/rank0")
    copy_dump("pt_stats_L1", "dump/step1/rank0")
    result = pytester.runpytest("-p", "no:cacheprovider", "--msprobe-dump", "dump", "--msprobe-out", "out",
                                "--msprobe-device", "cpu", "--collect-only", "-q")
    assert result.ret == 0
    ids = [line for line in result.outlines if "::" in line]
    assert len(ids) == 2 * 44
    assert ids[0].startswith("dump/step0/rank0/dump.json::Functional.conv2d.0.forward")


@pytest.mark.slow
def test_runs_are_deterministic(pytester, copy_dump):
    dump = copy_dump("pt_stats_L1")
    seen = []
    for i in range(3):
        run_msprobe(pytester, dump, "--msprobe-device", "cpu", "--msprobe-out", f"out{i}")
        seen.append(read_csv(pytester.path / f"out{i}", "details"))
    assert seen[0] == seen[1] == seen[2]
    other_seed = run_msprobe(pytester, dump, "--msprobe-device", "cpu", "--msprobe-out", "seed2", "--msprobe-seed", "7")
    assert other_seed.ret in (0, 1)
    assert read_csv(pytester.path / "seed2", "details") != seen[0]


def test_selection_does_not_change_an_entry_data(pytester, copy_dump):
    dump = copy_dump("pt_stats_L1")
    run_msprobe(pytester, dump, "--msprobe-device", "cpu", "--msprobe-out", "all")
    run_msprobe(pytester, dump, "--msprobe-device", "cpu", "--msprobe-out", "some", "-k", "matmul")
    every = {d["API Name"]: d for d in read_csv(pytester.path / "all", "details")}
    some = read_csv(pytester.path / "some", "details")
    assert some and all(every[d["API Name"]] == d for d in some)


@pytest.mark.slow
def test_summary_lists_counts_failures_and_csv_paths(pytester, example):
    result = run_msprobe(pytester, example, "--msprobe-device", "cpu")
    result.stdout.fnmatch_lines([
        "*= msprobe =*",
        "forward  35 pass, 2 error, 0 warning, 0 SKIP",
        "backward 25 pass, 4 error, 0 warning, 0 SKIP",
        "failures, worst first:",
        "Functional.linear.1.forward: output.0: MaxAbsErr*",
        "*",
        "result:  *accuracy_checking_result_*.csv",
        "details: *accuracy_checking_details_*.csv",
    ])


@pytest.mark.slow
def test_real_mode_runs_are_deterministic(pytester, example):
    seen = []
    for i in range(3):
        run_msprobe(pytester, example, "--msprobe-device", "cpu", "--msprobe-out", f"out{i}")
        seen.append((read_csv(pytester.path / f"out{i}", "result"), read_csv(pytester.path / f"out{i}", "details")))
    assert seen[0] == seen[1] == seen[2]


@pytest.mark.slow
def test_backward_items_do_not_depend_on_forward_items(pytester, example):
    run_msprobe(pytester, example, "--msprobe-device", "cpu", "--msprobe-out", "all")
    run_msprobe(pytester, example, "--msprobe-device", "cpu", "--msprobe-out", "bwd", "-k", "backward", "-p", "no:randomly")
    every = {d["API Name"]: d for d in read_csv(pytester.path / "all", "details")}
    backward = read_csv(pytester.path / "bwd", "details")
    assert len(backward) == sum(".backward." in name for name in every)
    assert all(every[d["API Name"]] == d for d in backward)
    rows = read_csv(pytester.path / "bwd", "result")
    assert all(row["Forward Test Success"] == "" and row["Backward Test Success"] for row in rows)


@pytest.mark.slow
@pytest.mark.parametrize("name, device", [("pt_tensor_L1", "cpu"), ("pt_tensor_L1", "recorded"),
                                          ("pt_tensor_mix", "cpu"), ("pt_tensor_mix", "recorded")])
def test_at_least_95_percent_of_entries_run_to_a_verdict(pytester, copy_dump, name, device):
    dump = copy_dump(name)
    outcomes = run_msprobe(pytester, dump, "--msprobe-device", device).parseoutcomes()
    total = sum(outcomes.get(k, 0) for k in ("passed", "failed", "skipped"))
    assert total == len(api_entries(dump))
    assert outcomes.get("skipped", 0) <= 0.05 * total


@pytest.mark.slow
def test_recorded_gradients_agree_with_an_independent_float64_autograd(pytester, example):
    run_msprobe(pytester, example, "--msprobe-device", "recorded")
    details = {d["API Name"]: d for d in read_csv(pytester.path / "out", "details")}
    tensors = example.parent / "dump_tensor_data"

    def load(name, grad=False):
        return torch.load(tensors / name, weights_only=True).to(torch.float64).requires_grad_(grad)

    x, w, b = (load(f"Functional.layer_norm.0.forward.input.{i}.pt", True) for i in (0, 2, 3))
    mean = x.mean(-1, keepdim=True)
    var = ((x - mean) ** 2).mean(-1, keepdim=True)
    y = (x - mean) / torch.sqrt(var + 1e-5) * w + b  # layer norm written out, not F.layer_norm
    grad_out = load("Functional.layer_norm.0.backward.input.0.pt")
    exact = torch.autograd.grad(y, [x, w, b], grad_out)
    # msprobe records layer_norm's gradients of x, weight and bias as items 0, 1, 2
    for i, grad in enumerate(exact):
        recorded = load(f"Functional.layer_norm.0.backward.output.{i}.pt")
        row = details[f"Functional.layer_norm.0.backward.output.{i}"]
        assert float(row["MaxAbsErr"]) == pytest.approx(float((recorded - grad).abs().max()), rel=1e-6, abs=1e-12)
        assert row["Status"] == "pass"
