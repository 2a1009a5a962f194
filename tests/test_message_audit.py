"""What a run says, read as a user reads it (issue 28.4): no message that contradicts itself or
its row, each with the entry, the field and the number it is about. On the shipped dumps and
on dumps derived from them (an output zeroed, its gradient made tiny, a field of the wrong
kind, a tensor folder left behind).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from conftest import read_csv, run_msprobe

# Tensor.float.1.backward of the example: the gradient reaching `y.half()` through `.float()`,
# an fp32 gradient cast to fp16 (the output, [2, 32]); its grad_output peaks at 0.406.
CAST = "Tensor.float.1.backward"
ZERO_AT_FLOOR = (
    "every bench value rounds to 0 in fp16 (none is above half its smallest step, 2.98e-08): "
    "a correct fp16 result is all zero too; within the fp16 rounding budget (--msprobe-standard dtype passes it)"
)


def zero_output(dump: Path, scale: float) -> None:
    """The cast's recorded output all zero, its recorded grad_output scaled by `scale`."""
    folder = dump.parent / "dump_tensor_data"
    grad = torch.load(folder / f"{CAST}.input.0.pt", weights_only=True)
    torch.save(grad * scale, folder / f"{CAST}.input.0.pt")
    output = torch.load(folder / f"{CAST}.output.0.pt", weights_only=True)
    torch.save(torch.zeros_like(output), folder / f"{CAST}.output.0.pt")


def details_message(pytester, out: str, name: str) -> dict[str, str]:
    return next(row for row in read_csv(pytester.path / out, "details") if row["API Name"] == name)


def test_an_all_zero_output_whose_bench_rounds_to_zero_says_so(pytester, copy_dump):
    """The bench's values are below what fp16 can hold: a correct fp16 cast gives all zeros. The
    message says that, with the largest value and its place, rather than "all zero and the
    other is not; within the fp16 rounding budget", and the dtype standard does pass it."""
    dump = copy_dump("pt_tensor_L1")
    zero_output(dump, 1e-8)
    basic = run_msprobe(pytester, dump, "-k", CAST, device="recorded", out="basic")
    row = details_message(pytester, "basic", f"{CAST}.output.0")
    assert row["Status"] == "error"
    assert row["Message"].startswith(
        "the tested output is all zero and the bench is not: the largest in magnitude at [0, 3] "
        "(tested 0, bench 4.0578079e-09); " + ZERO_AT_FLOOR
    )
    basic.stdout.fnmatch_lines(
        [f"{CAST}: output.0: the tested output is all zero and the bench is not: *; {ZERO_AT_FLOOR}"]
    )
    basic.stdout.fnmatch_lines(["1 of 1 failing outputs are at the rounding floor of their dtype (1 float16); *"])
    run_msprobe(pytester, dump, "-k", CAST, "--msprobe-standard", "dtype", device="recorded", out="dtype")
    assert details_message(pytester, "dtype", f"{CAST}.output.0")["Status"] == "pass"  # the claim holds


def test_an_all_zero_output_fp16_could_hold_is_no_rounding(pytester, copy_dump):
    """Zeros where the bench's values are 4e-6 (68 of fp16's smallest steps): no floor, and the
    message names the value missed, though MaxAbsErr stayed under 1e-4. The dtype standard
    fails it too."""
    dump = copy_dump("pt_tensor_L1")
    zero_output(dump, 1e-5)
    run_msprobe(pytester, dump, "-k", CAST, device="recorded", out="basic")
    message = details_message(pytester, "basic", f"{CAST}.output.0")["Message"]
    assert message.startswith(
        "the tested output is all zero and the bench is not: the largest in magnitude at [0, 3] "
        "(tested 0, bench 4.0578079e-06)"
    )
    assert "rounding budget" not in message and "rounds to 0" not in message
    run_msprobe(pytester, dump, "-k", CAST, "--msprobe-standard", "dtype", device="recorded", out="dtype")
    assert details_message(pytester, "dtype", f"{CAST}.output.0")["Status"] == "error"


def test_an_all_zero_output_of_a_real_gradient_says_its_number_once(pytester, copy_dump):
    dump = copy_dump("pt_tensor_L1")
    zero_output(dump, 1.0)
    run_msprobe(pytester, dump, "-k", CAST, device="recorded")
    message = details_message(pytester, "out", f"{CAST}.output.0")["Message"]
    assert message.startswith(
        "the tested output is all zero and the bench is not; MaxAbsErr 0.406 >= 0.0001 at [0, 3] "
        "(tested 0, bench 0.40578079)"
    )
    assert "rounding budget" not in message and message.count("at [0, 3]") == 1


@pytest.mark.slow
def test_a_note_made_per_input_is_said_once(pytester, copy_dump):
    """A dump.json copied without its tensors, run on the CPU: each entry's inputs are random,
    and the entry says so once, not once per input."""
    dump = copy_dump("pt_tensor_L1")
    (dump.parent / "dump_tensor_data").rename(dump.parent / "elsewhere")
    result = run_msprobe(pytester, dump, device="cpu")
    note = "dump_tensor_data: the tensor folder is missing, random data used"
    rows = [row for row in read_csv(pytester.path / "out", "result") if note in row["Message"]]
    assert rows
    for row in rows:
        for half in row["Message"].split(" | "):
            assert half.count(note) <= 1, row
    linear = next(row for row in rows if row["API Name"] == "Functional.linear.1")  # three inputs
    assert linear["Message"].count(note) == 2  # forward and backward
    failures = result.stdout.str().split("= FAILURES =", 1)[1].split("= msprobe =", 1)[0]
    items = [
        block for block in failures.split("\n_") if " breaks the basic standard" in block or " break the " in block
    ]
    assert items and all(block.count(f"  note: {note}") == 1 for block in items)  # each failed item's own message


def test_a_skip_reason_group_keeps_the_digits_of_api_names(pytester, copy_dump):
    """Numbers fold into N so that one reason groups its entries; the 2 of conv2d is no number
    (it read `Primitive.convNd.ConvND has no PyTorch equivalent`, an API no dump has)."""
    dump = copy_dump("ms_cnn_mix")
    result = run_msprobe(pytester, dump, device="recorded")
    skips = result.stdout.str().split("SKIP reasons:", 1)[1]
    assert "   2 x Primitive.conv2d.Conv2D has no PyTorch equivalent" in skips
    assert "convNd" not in skips and "ConvND" not in skips


def test_a_shape_with_a_bad_size_names_it(pytester, copy_dump):
    """`not a list of sizes: a list ([2, 'x'])` contradicted itself: the element is named."""
    dump = copy_dump("pt_tensor_L1")
    data = json.loads(dump.read_text())
    data["data"]["Functional.relu.0.forward"]["input_args"][0]["shape"] = [2, "x"]
    dump.write_text(json.dumps(data))
    result = run_msprobe(pytester, dump, "-k", "Functional.relu.0", device="cpu")
    row = next(row for row in read_csv(pytester.path / "out", "result") if row["API Name"] == "Functional.relu.0")
    assert "input_args[0].shape: not a list of sizes: element 1 of [2, 'x'] is a str ('x')" in row["Message"]
    result.stdout.fnmatch_lines(["*x input_args[[]...[]].shape: not a list of sizes: element N of [[]...[]] is a str*"])


def test_a_statistics_dump_says_its_inputs_are_random(pytester, copy_dump):
    dump = copy_dump("pt_stats_L1")
    note = (
        "msprobe: */dump.json: a statistics dump records no tensors: every entry runs on random data drawn "
        "from its inputs' recorded shape, dtype, Min and Max, not on the step's own values"
    )
    run_msprobe(pytester, dump, "-k", "relu", device="cpu").stdout.fnmatch_lines([note])
    real = run_msprobe(pytester, dump, "-k", "relu", "--msprobe-mode", "real", device="cpu", out="real")
    assert real.ret == pytest.ExitCode.USAGE_ERROR  # real mode runs none on random data: it refuses the dump


def test_a_side_not_judged_says_so(pytester, copy_dump):
    """recorded,cpu with a tensor file missing: the recorded side SKIPs, the CPU side runs on
    random data. The row passes on the CPU's verdict; its message says the recorded outputs were
    not judged (it read `recorded: <why>`, as though the reason of the pass)."""
    dump = copy_dump("pt_tensor_L1")
    (dump.parent / "dump_tensor_data" / "Functional.linear.0.forward.input.0.pt").unlink()
    run_msprobe(pytester, dump, "-k", "Functional.linear.0", device="recorded,cpu")
    row = next(row for row in read_csv(pytester.path / "out", "result") if row["API Name"] == "Functional.linear.0")
    assert row["Forward Test Success"] == "pass"
    assert row["Message"].startswith("forward: recorded: not judged: Functional.linear.0.forward: input_args[0]")


def test_a_nan_fault_names_its_side_and_place(pytester, copy_dump):
    """`NaN at 1 position(s) where the other side has none` did not say which side had it, nor
    where: the first such element is named with both sides' values."""
    dump = copy_dump("pt_tensor_L1")
    path = dump.parent / "dump_tensor_data" / "Functional.relu.0.forward.output.0.pt"
    output = torch.load(path, weights_only=True)
    output.view(-1)[5] = float("inf")
    output.view(-1)[3] = float("nan")
    torch.save(output, path)
    result = run_msprobe(pytester, dump, "-k", "Functional.relu.0.forward", device="recorded")
    message = details_message(pytester, "out", "Functional.relu.0.forward.output.0")["Message"]
    bench = torch.load(dump.parent / "dump_tensor_data" / "Functional.relu.0.forward.input.0.pt", weights_only=True)
    at = [int(k) for k in torch.unravel_index(torch.tensor(3), output.shape)]
    assert message.startswith(
        f"NaN at 1 position(s) where the other side has none (the first at {at}: tested nan, "
        f"bench {max(float(bench.view(-1)[3]), 0.0):.8g}); inf at 1 position(s) where the other side differs "
        "(the first at "
    )
    result.stdout.fnmatch_lines(
        ["Functional.relu.0.forward: output.0: NaN at 1 position(s) * (the first at [[]*]: tested nan, *"]
    )


@pytest.mark.slow
def test_the_floor_asks_the_dtype_standard_the_user_would_run(pytester, copy_dump):
    """`--msprobe-standard dtype passes it` held of the default budget only: with an ini rule
    of rtol=0, atol=0 for matmul, the dtype standard fails the bf16 matmul, and basic no longer
    says it would pass it (the other APIs keep their floor)."""
    example = copy_dump("pt_tensor_L1")
    ini = ("-o", "msprobe_tolerances=Torch.matmul.*: rtol=0, atol=0")
    basic = run_msprobe(pytester, example, *ini, device="recorded", out="basic")
    rows = {row["API Name"]: row for row in read_csv(pytester.path / "basic", "details") if row["Status"] == "error"}
    assert "rounding budget" not in rows["Torch.matmul.1.forward.output.0"]["Message"]
    assert "within the bf16 rounding budget" in rows["Functional.linear.1.forward.output.0"]["Message"]
    basic.stdout.fnmatch_lines(["6 of 9 failing outputs are at the rounding floor of their dtype (6 bfloat16); *"])
    run_msprobe(pytester, example, *ini, "--msprobe-standard", "dtype", device="recorded", out="dtype")
    judged = {row["API Name"]: row["Status"] for row in read_csv(pytester.path / "dtype", "details")}
    assert judged["Torch.matmul.1.forward.output.0"] == "error"
    assert judged["Functional.linear.1.forward.output.0"] == "pass"


def test_a_dump_without_its_tensor_folder_says_what_the_run_does_instead(pytester, copy_dump):
    """One header line: what cannot be read, what the run does instead (which depends on the
    device), and the file named as it is (a public dump is not always dump.json)."""
    dump = copy_dump("pt_tensor_L1")
    (dump.parent / "dump_tensor_data").rename(dump.parent / "elsewhere")
    dump = dump.rename(dump.parent / "step0_dump.json")
    result = run_msprobe(pytester, dump, "--collect-only", device="cpu", out="cpu")
    result.stdout.fnmatch_lines([
        "msprobe: */step0_dump.json: a tensor dump without its dump_tensor_data/ folder: no recorded tensor can be "
        "read, so every entry runs on random data drawn from the recorded statistics, not on the step's own values "
        "(copy dump_tensor_data/ beside step0_dump.json to check them)"
    ])
    for device in ("recorded", "recorded,cpu"):  # nothing it could judge: a usage error (test_coverage_gate.py)
        result = run_msprobe(pytester, dump, "--collect-only", device=device, out=device)
        result.stderr.fnmatch_lines(["ERROR: *step0_dump.json is a tensor dump without its dump_tensor_data/ folder: "
                                     "copy dump_tensor_data/ beside step0_dump.json, or *"])


@pytest.mark.slow
def test_an_all_zero_output_at_the_floor_ranks_below_the_faults(pytester, copy_dump):
    """Its message says rounding alone; the summary listed it first, as the worst failure of the
    run (severity inf, beside NaN and shape faults). It now ranks at the edge of the rule: after
    the bf16 outputs 2 to 19 times over MaxAbsErr, and after a real fault, which stays first."""
    dump = copy_dump("pt_tensor_L1")
    zero_output(dump, 1e-8)
    path = dump.parent / "dump_tensor_data" / "Torch.softmax.0.forward.output.0.pt"
    torch.save(torch.load(path, weights_only=True) * 1.01, path)
    result = run_msprobe(pytester, dump, device="recorded")
    failures = result.stdout.str().split("failures, worst first:\n", 1)[1].split("\n\n", 1)[0]
    named = [line.split(":", 1)[0] for line in failures.splitlines() if not line.startswith(" ")]
    assert named[0] == "Torch.softmax.0.forward"
    assert named.index(CAST) > named.index("Functional.linear.1.forward")


@pytest.mark.slow
def test_the_repro_script_says_the_floor_the_run_says(pytester, copy_dump, tmp_path):
    """A repro script of an entry an ini rule matches asks the same dtype standard as the run:
    no floor for the matmul the rule fails, the floor for the linear it does not match."""
    from test_repro import run_batch

    dump = copy_dump("pt_tensor_L1")
    ini = ("-o", "msprobe_tolerances=Torch.matmul.*: rtol=0, atol=0")
    run_msprobe(pytester, dump, *ini, "--msprobe-repro", "repro", device="recorded")
    details = {row["API Name"]: row["Message"] for row in read_csv(pytester.path / "out", "details")}
    folders = pytester.path / "repro" / dump.parent.name
    floors = {"Torch.matmul.1.forward": False, "Functional.linear.1.forward": True}
    reports = run_batch([(folders / entry, tmp_path, ()) for entry in floors])
    for (entry, floor), report in zip(floors.items(), reports):
        (output,) = report["outputs"]
        assert ("within the bf16 rounding budget" in output["why"]) is floor
        assert details[f"{entry}.output.0"].startswith(output["why"])
