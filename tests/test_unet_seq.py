"""Issue 47's held-out check, on two model families nobody had dumped here: a diffusion-style U-Net (group_norm,
silu, conv2d and conv_transpose2d, avg and max pooling, a timestep embedding by exp, sin and cos, self- and
cross-attention by SDPA, a GEGLU, bilinear and nearest upsampling, skip concatenation; tests/data/make/unet_dump.py)
and a recurrent-convolutional sequence model (index_select and embedding_bag, a causal dilated depthwise conv1d, a
GLU gate, cumsum and cumprod scans, a GRU written out with sigmoid and tanh, softplus, log_softmax and nll_loss;
tests/data/make/seq_dump.py), each dumped by msprobe 26.2.0 in fp32, bf16 and under CPU autocast.

What a user sees, end to end: the clean dumps have no error in recorded and cpu mode under dtype; the entries msprobe
recorded at a view of the gradient arriving at the output are SKIPs saying what to run, and judged by it; an input
whose gradient is taken from its producer's recorded incoming gradient is judged there only where that gradient
proves itself the input's (a call msprobe did not record may read the producer's output too: then the gradient is a
sum, and a correct kernel is no error); resampling deficits planted in the U-Net are errors. (The planted GEMM, norm,
attention, scan and math kernels of tests/deficits.py: test_deficits_e2e.py's UNET and SEQ corpora.)"""

from __future__ import annotations

import json

import deficits_resample as r
import pytest
import resample_runs
import torch

from conftest import DUMPS, read_csv, run_msprobe
from pytest_msprobe.results import RUN_THE_CALL

UNET = ("unet_fp32", "unet_bf16", "unet_autocast")
SEQ = ("seq_fp32", "seq_bf16", "seq_autocast")
# Backward entries of 3-D linears whose recorded gradient is the one arriving at the output through a view and
# none of whose inputs' gradients another entry recorded (weights and biases in an L1 dump: only the module has
# them), by family: every 3-D linear of the U-Net's transformer block, the sequence model's step sizes, decay and head.
SKIPPED = {"unet": 7, "seq": 3}
TAKEN = "recorded incoming gradient (this input is"  # an input's gradient borrowed from its producer's entry


def rows(pytester, out: str, kind: str = "details") -> dict[str, dict[str, str]]:
    return {row["API Name"]: row for row in read_csv(pytester.path / out, kind)}


# PyTorch's CPU layer_norm of bf16 activations with fp32 weight and bias (CPU autocast casts neither) returns their
# fp32 gradients at bf16 precision: a deficit of the CPU's own kernel, kept as an error (bench/studies/clean_dumps.md,
# bert_amp; tests/test_type_promotion.py). On CUDA and Ascend autocast runs layer_norm in fp32.
MIXED_LAYER_NORM = ("Functional.layer_norm.", (".backward.output.1", ".backward.output.2"))


def mixed_layer_norm_gradient(name: str) -> bool:
    prefix, outputs = MIXED_LAYER_NORM
    return name.startswith(prefix) and name.endswith(outputs)


@pytest.mark.slow
@pytest.mark.parametrize("device", ["recorded", "cpu"])
def test_the_clean_dumps_have_no_error_under_dtype(pytester, copy_dump, device):
    """Every entry of the six dumps passes but, under CPU autocast, the weight and bias gradients of layer_norm's
    mixed-dtype CPU kernel (MIXED_LAYER_NORM: summed at bf16 precision, errors); recorded mode SKIPs only what
    msprobe recorded at a view, saying what to run."""
    names = [*UNET, *SEQ]
    run_msprobe(pytester, [copy_dump(name) for name in names], "--msprobe-standard", "dtype", device=device)
    for name in names:
        details = rows(pytester, f"out/{name}")
        assert len(details) > 200, name
        errors = {key for key, row in details.items() if row["Status"] not in ("pass", "SKIP")}
        assert all(mixed_layer_norm_gradient(key) for key in errors), (name, errors)
        # Each says whose deficit it is: PyTorch's CPU kernel's (issue 47: no error on a clean dump but one the
        # message names).
        assert all("the CPU kernel's own deficit" in details[key]["Message"] for key in errors), (name, errors)
        assert bool(errors) == name.endswith("_autocast"), (name, errors)
        skipped = {key.rsplit(".output.", 1)[0] for key, row in details.items() if row["Status"] == "SKIP"}
        assert len(skipped) == (SKIPPED[name.split("_")[0]] if device == "recorded" else 0), (name, skipped)
        assert all(RUN_THE_CALL in row["Message"] for row in details.values() if row["Status"] == "SKIP")
        taken = [row for row in details.values() if TAKEN in row["Message"]]
        assert len(taken) == ({"unet": 6, "seq": 1}[name.split("_")[0]] if device == "recorded" else 0), name


@pytest.mark.slow
@pytest.mark.parametrize("name", ["unet_fp32", "seq_fp32"])
def test_recorded_and_cpu_judges_what_msprobe_recorded_at_a_view(pytester, copy_dump, name):
    """Every entry's result passes: what the recorded side SKIPs, the CPU side judges by running the call."""
    result = run_msprobe(pytester, copy_dump(name), "--msprobe-standard", "dtype", device="recorded,cpu")
    assert result.ret == 0
    results = rows(pytester, "out", "result")
    linears = [key for key in results if key.startswith("Functional.linear.")]
    assert len(linears) >= SKIPPED[name.split("_")[0]]
    assert {
        row[column] for row in results.values() for column in ("Forward Test Success", "Backward Test Success")
    } <= {
        "pass",
        " ",
        "",
    }
    assert {results[key]["Backward Test Success"] for key in linears} == {"pass"}


def _without(dump, api: str) -> None:
    """The dump as msprobe writes it with `api` left out of its config's list: none of its entries."""
    path = dump.parent / "dump.json"
    written = json.loads(path.read_text())
    written["data"] = {name: body for name, body in written["data"].items() if not name.startswith(f"{api}.")}
    path.write_text(json.dumps(written))


def _scale(dump, data_name: str, factor: float) -> None:
    path = dump.parent / "dump_tensor_data" / data_name
    tensor = torch.load(path, weights_only=True)
    torch.save((tensor.double() * factor).to(tensor.dtype), path)


STEP_SIZES = "Functional.linear.0"  # softplus(linear(x)) of the first layer_norm's output, on 3-D tokens


@pytest.mark.slow
def test_an_input_another_unrecorded_call_reads_keeps_its_skip_and_says_why(pytester, copy_dump):
    """The first layer_norm's output is read by the step sizes' linear and, through a transpose msprobe does not
    record, by F.pad before the convolution. With pad in the dump's API list, pad's input has the output's size
    and extremes: nothing is borrowed. With pad left out of it (as a config list may leave any call out), no
    recorded call but the linear reads that output, yet layer_norm's incoming gradient sums the linear's and the
    convolution's: a correct kernel was an error at 8e6 times its budget. It is no proof of the input's gradient
    (a relative distance of 6 from it): a SKIP saying so, never an error; --msprobe-device recorded,cpu runs it."""
    dump = copy_dump("seq_fp32")
    _without(dump, "Functional.pad")
    selected = ("-k", STEP_SIZES)  # forward and backward: a run that compares nothing exits 5
    result = run_msprobe(pytester, dump, "--msprobe-standard", "dtype", *selected, device="recorded")
    assert result.ret == 0
    row = rows(pytester, "out")[f"{STEP_SIZES}.backward.output.0"]
    assert row["Status"] == "SKIP", row
    said = row["Message"]
    assert "Functional.layer_norm.0.backward's recorded incoming gradient" in said
    assert "fits not this input's float64 gradient" in said and "a call msprobe did not record" in said
    assert RUN_THE_CALL in said
    result = run_msprobe(pytester, dump, "--msprobe-standard", "dtype", *selected, device="recorded,cpu", out="both")
    assert result.ret == 0 and rows(pytester, "both")[f"{STEP_SIZES}.backward.output.0"]["Status"] == "pass"


HEAD = "Functional.linear.26"  # the logits' linear, reading the final layer_norm's output alone


@pytest.mark.slow
def test_a_borrowed_gradient_that_proves_itself_is_judged_and_a_deficit_there_is_an_error(pytester, copy_dump):
    """The head reads the final layer_norm's output alone: that layer_norm's recorded incoming gradient is the
    head's input gradient, judged, saying what else would put a share there; 0.1% off there, an error."""
    dump = copy_dump("seq_fp32")
    selected = ("-k", f"{HEAD}.backward")
    run_msprobe(pytester, dump, "--msprobe-standard", "dtype", *selected, device="recorded")
    row = rows(pytester, "out")[f"{HEAD}.backward.output.0"]
    assert row["Status"] == "pass" and "judged Functional.layer_norm.1.backward's " + TAKEN in row["Message"], row
    assert "a call msprobe did not record that reads that output too would add its gradient there" in row["Message"]
    _scale(dump, "Functional.layer_norm.1.backward.input.0.pt", 1.001)
    result = run_msprobe(pytester, dump, "--msprobe-standard", "dtype", *selected, device="recorded", out="off")
    assert result.ret == 1 and rows(pytester, "off")[f"{HEAD}.backward.output.0"]["Status"] == "error"


# (entry, kernel, direction judged): resampling kernels planted in the U-Net's upsampling.
PLANTED = [
    ("Functional.interpolate.0", "half_pixel", "forward"),  # the 4x4 features x4 (bilinear) without the half pixel
    ("Functional.interpolate.0", "half_pixel", "backward"),
    ("Functional.interpolate.1", "rounds", "forward"),  # the 8x8 map x2 (nearest), rounding not flooring
    ("Functional.interpolate.1", "rounds", "backward"),
]


@pytest.mark.slow
@pytest.mark.parametrize("name", UNET)
def test_resampling_deficits_planted_in_the_unet_are_errors_and_a_correct_kernel_passes(pytester, copy_dump, name):
    problems = resample_runs.not_errors(pytester, copy_dump, name, PLANTED)
    assert not problems, "\n".join(problems)
    dump = copy_dump(name, "fused")
    planted = r.plant(dump.parent, "Functional.interpolate.0", "fused")  # d s + (s/2 - 1/2) in fp32: correct
    run_msprobe(
        pytester, dump, "--msprobe-standard", "dtype", "-k", "Functional.interpolate.0", out="fused", device="recorded"
    )
    assert {rows(pytester, "fused")[row]["Status"] for row in planted} == {"pass"}


def test_the_dumps_hold_the_families_their_scripts_say():
    """The committed dumps' APIs: a regenerated dump still holds what the tests above and the corpora judge."""
    for name, wanted in (
        ("unet_fp32", {"group_norm", "silu", "conv_transpose2d", "avg_pool2d", "max_pool2d", "interpolate",
                       "scaled_dot_product_attention", "gelu", "exp", "sin", "cos", "mse_loss"}),
        ("seq_fp32", {"index_select", "embedding_bag", "conv1d", "cumsum", "cumprod", "sigmoid", "tanh", "softplus",
                      "log_softmax", "nll_loss"}),
    ):  # fmt: skip
        data = json.loads((DUMPS[name] / "dump.json").read_text())["data"]
        assert wanted <= {key.split(".")[1] for key in data}, name
