"""Recorded gradients that msprobe took inside an API's graph, judged where it took them (recorded mode).

On the real GPT dumps: cross_entropy's gradient is recorded at log_softmax's output,
linear's weight gradient transposed as addmm sees it, and 3-D matmul's as the gradient
arriving at its output (msprobe's hook passing it on).
"""

from __future__ import annotations

import re

import pytest
import torch

from conftest import read_csv, run_msprobe
from pytest_msprobe.frameworks.borrowed_gradients import Borrowed
from pytest_msprobe.frameworks.pytorch import lend
from pytest_msprobe.frameworks.recorded_gradients import Attribution, attribute
from pytest_msprobe.frameworks.torch_engine import NodeGradient, gradient_pairs
from pytest_msprobe.results import RUN_THE_CALL


def recorded(pytester, copy_dump, name, *args, standard="dtype"):
    dump = copy_dump(name)
    result = run_msprobe(pytester, dump, "--msprobe-standard", standard, *args, device="recorded")
    rows = {row["API Name"]: row for row in read_csv(pytester.path / "out", "result")}
    details = {row["API Name"]: row for row in read_csv(pytester.path / "out", "details")}
    return dump, result, rows, details


@pytest.mark.slow
@pytest.mark.parametrize("name", ["gpt_fp32", "gpt_bf16", "gpt_fp16"])
def test_a_clean_dump_has_no_error_and_each_odd_gradient_says_where_it_was_judged(pytester, copy_dump, name):
    _, result, rows, details = recorded(pytester, copy_dump, name)
    assert result.ret == 0, result.stdout.str()[-3000:]
    assert rows["Functional.cross_entropy.0"]["Backward Test Success"] == "pass"
    assert "at NllLossBackward0 (its input 0)" in rows["Functional.cross_entropy.0"]["Message"]
    # linear's weight gradient, recorded transposed: judged at addmm's (or mm's) input, in the weight's row.
    weight = details["Functional.linear.3.backward.output.1"]
    assert (weight["Status"], weight["Shape"]) == ("pass", "[1024, 256]")
    assert "AddmmBackward0 (its input 2)" in weight["Message"]
    assert "MmBackward0 (its input 1)" in details["Functional.linear.4.backward.output.1"]["Message"]
    # 3-D matmul records the gradient arriving at its output: Q.K^T's inputs are slices of one projection
    # (no gradient of them anywhere: a SKIP saying what to run); P.V's P is softmax's whole output, read by
    # it alone, so softmax's recorded incoming gradient is P's, judged (V's stays a SKIP).
    assert rows["Torch.matmul.0"]["Backward Test Success"] == "SKIP"
    assert "equal to the gradient arriving at the output" in rows["Torch.matmul.0"]["Message"]
    assert RUN_THE_CALL in rows["Torch.matmul.0"]["Message"]
    assert rows["Torch.matmul.1"]["Backward Test Success"] == "pass"
    taken = details["Torch.matmul.1.backward.output.0"]
    assert (
        taken["Status"] == "pass" and "judged Torch.softmax.0.backward's recorded incoming gradient" in taken["Message"]
    )
    assert details["Torch.matmul.1.backward.output.1"]["Status"] == "SKIP"


def scale_recorded(dump, data_name, factor):
    path = dump.parent / "dump_tensor_data" / data_name
    tensor = torch.load(path, weights_only=True)
    torch.save((tensor.double() * factor).to(tensor.dtype), path)


@pytest.mark.parametrize(
    "entry, data_name",
    [
        ("Functional.cross_entropy.0", "Functional.cross_entropy.0.backward.output.0.pt"),
        ("Functional.linear.3", "Functional.linear.3.backward.output.2.pt"),  # the weight's, transposed
    ],
)
def test_a_deficit_in_a_gradient_recorded_inside_the_graph_is_an_error(pytester, copy_dump, entry, data_name):
    dump = copy_dump("gpt_bf16")
    scale_recorded(dump, data_name, 1.05)
    result = run_msprobe(pytester, dump, "--msprobe-standard", "dtype", "-k", f"{entry}.backward", device="recorded")
    assert result.parseoutcomes() == {"failed": 1, "deselected": 37}
    message = read_csv(pytester.path / "out", "result")[0]["Message"]
    assert "judged against the float64 gradient there" in message and "budget" in message


def test_the_extra_runs_of_a_gradient_judged_at_a_node_are_that_nodes(pytester, copy_dump):
    """cross_entropy's gradient, recorded at NllLossBackward0's input, 3% off: 5.3 bf16 ULP, an error.
    Its budget's spread and low terms are the node's own runs against the node's float64 value
    (measured against the input's gradient instead, they were 0.98 and 0.91 ULP: a warning)."""
    dump = copy_dump("gpt_bf16")
    scale_recorded(dump, "Functional.cross_entropy.0.backward.output.0.pt", 1.03)
    result = run_msprobe(
        pytester, dump, "--msprobe-standard", "dtype", "-k", "Functional.cross_entropy.0.backward", device="recorded"
    )
    assert result.parseoutcomes() == {"failed": 1, "deselected": 37}
    message = read_csv(pytester.path / "out", "result")[0]["Message"]
    conditioning = re.search(r"conditioning ([-+.e0-9]+)", message)
    assert "elements over budget" in message and conditioning and float(conditioning.group(1)) < 0.01, message


def grad(*values):
    return torch.tensor(values, dtype=torch.float64)


def test_a_gradient_that_fits_none_of_several_places_is_judged_at_the_nearest_saying_so():
    """Two inputs of its shape, neither at the recorded position, and it fits neither: no proof that it is
    anything but an input's gradient, so it is judged (at the nearest), never a SKIP."""
    bench = [grad(1.0, 0.0), grad(0.0, 1.0)]
    far = torch.tensor([5.0, -5.0])
    found = attribute([None, None, far], [None, None, {"shape": [2]}], bench, [], [grad(9.0, 9.0)])
    assert list(found.matched) == [0] and not found.strays
    value, note = found.elsewhere[0]
    assert torch.equal(value, bench[0])
    assert "fits none of the 2 float64 gradients of its shape [2]" in note and "judged at the nearest" in note


def test_a_gradient_that_fits_nothing_is_judged_in_its_own_inputs_place_not_at_a_nearer_one():
    """SDPA's dQ without the rowsum(dO O) correction is nearer dV's gradient than its own (cosine 0.26 with
    it): it was a SKIP ("fits none of the 6 float64 gradients"). It is q's gradient, judged there."""
    bench = [grad(1.0, 0.0, 0.0), grad(0.0, 1.0, 0.0), grad(0.0, 0.2, 1.0)]
    wrong_dq = torch.tensor([0.2, 0.4, 1.0])  # nearer input 2's gradient than input 0's, fits neither
    found = attribute([wrong_dq, None, None], [{"shape": [3]}, None, None], bench, [], [grad(1.0, 1.0)])
    assert list(found.matched) == [0] and not found.strays and not found.elsewhere


def test_a_gradient_nearest_its_own_input_is_judged_there_however_far():
    bench = [grad(1.0, 2.0), grad(-3.0, 1.0)]
    gross = torch.tensor([2.0, 3.0])  # far from input 0, farther from input 1
    found = attribute([gross], [{"shape": [2]}], bench, [], [])
    assert list(found.matched) == [0] and not found.elsewhere and not found.strays


def test_a_gradient_closer_to_a_node_is_judged_at_that_node():
    bench = [grad(1.0, 2.0)]
    node = NodeGradient("NllLossBackward0", 0, grad(-0.5, 0.0), frozenset({0}))
    found = attribute([torch.tensor([-0.5, 0.0])], [{"shape": [2]}], bench, [node], [])
    assert list(found.matched) == [0]
    value, note = found.elsewhere[0]
    assert torch.equal(value, node.value) and "NllLossBackward0 (its input 0)" in note


def test_batch_norms_gradients_are_its_inputs_that_take_one_however_far():
    """msprobe records batch_norm's (input, weight, bias) gradients at positions 0, 1, 2: the running
    statistics (inputs 1 and 2) take none. A gross weight gradient (a cnn_bf16 one summed in bf16 is
    0.34 away) is the weight's, judged there, not a stray that fits neither weight nor bias."""
    bench = [torch.ones(3, 2, dtype=torch.float64), None, None, grad(1.0, 2.0), grad(-3.0, 1.0)]
    recorded = [torch.ones(3, 2), torch.tensor([1.5, 2.5]), torch.tensor([-3.0, 1.0])]
    specs = [{"shape": [3, 2]}, {"shape": [2]}, {"shape": [2]}]
    found = attribute(recorded, specs, bench, [], [])
    assert sorted(found.matched) == [0, 3, 4] and not found.strays and not found.elsewhere
    assert torch.equal(found.matched[3], recorded[1])


def test_a_gradient_that_is_the_incoming_one_through_a_view_is_skipped_naming_it():
    """linear on a (1, 2, 2) input with a square weight: msprobe records grad_output viewed as (2, 2),
    the shape of the gradient mm passes on to the flattened input (g @ W), its only candidate; the
    float64 graph's view passes that very gradient on (the node msprobe's hook sat on)."""
    g = torch.tensor([[[1.0, -2.0], [0.5, 3.0]]], dtype=torch.float64)
    weight = torch.tensor([[0.0, 1.0], [1.0, 0.5]], dtype=torch.float64)
    bench = [g @ weight, g.reshape(2, 2).T @ torch.ones(2, 2, dtype=torch.float64), None]
    node = NodeGradient("MmBackward0", 0, g.reshape(2, 2) @ weight, frozenset({0}))
    view = NodeGradient("ViewBackward0", 0, g.reshape(2, 2), frozenset({0, 1, 2}))
    for nodes, api in (([node, view], ""), ([node], "linear")):  # the graph shows it, or the API is msprobe's GEMM
        found = attribute([g.reshape(2, 2).float()], [{"shape": [2, 2]}], bench, nodes, [g.float()], api)
        assert found.matched == {} and not found.elsewhere
        assert "the gradient arriving at output 0 [1, 2, 2] through a view, bit for bit" in found.strays[0]


def test_a_gradient_equal_to_the_incoming_one_where_nothing_passes_it_on_is_judged():
    """log_softmax's gradient without its exp(y) sum(g) term is the incoming gradient itself, bit for bit:
    no node of log_softmax's graph passes the incoming gradient on, so nothing proves msprobe recorded it
    there. It is the input's gradient, far from the float64 one: judged (an error), never a SKIP."""
    g = grad(-0.5, 0.0, 0.0)
    y = torch.log_softmax(grad(1.0, 2.0, 0.5), 0)
    bench = [g - torch.exp(y) * g.sum()]
    found = attribute([g.float()], [{"shape": [3]}], bench, [], [g.float()], "log_softmax")
    assert list(found.matched) == [0] and not found.strays


def test_a_pass_through_apis_gradient_equal_to_the_incoming_one_is_its_inputs():
    """x + y: each input's gradient is the incoming one, bit for bit: judged at the input, not skipped."""
    g = grad(1.0, -2.0)
    found = attribute([g.float(), g.float()], [{"shape": [2]}, {"shape": [2]}], [g, g], [], [g.float()])
    assert sorted(found.matched) == [0, 1] and not found.strays


def test_the_incoming_gradient_near_an_inputs_gradient_is_still_the_incoming_one():
    """einsum's graph ends in a view: msprobe records the incoming gradient through it, bit for bit (einsum is
    one of VIEWED_GEMMS). Near an operand's gradient (within FIT of it) it is still not that gradient: a SKIP
    naming it, never judged there."""
    g = grad(1.0, -2.0, 0.5)
    near = g + grad(0.05, 0.0, 0.0)  # the operand's float64 gradient, 2% from the incoming one
    node = NodeGradient("PermuteBackward0", 0, near.reshape(3, 1), frozenset({1}))
    found = attribute([g.float().reshape(3, 1)], [{"shape": [3, 1]}], [None, near], [node], [g.float()], "einsum")
    assert found.matched == {} and "through a view, bit for bit" in found.strays[0]


def test_a_producers_incoming_gradient_is_judged_as_an_input_only_where_it_proves_itself():
    """borrowed_gradients: the producer's recorded incoming gradient is this input's only where no call msprobe
    did not record reads that output too. Within FIT of the input's float64 gradient it is judged, saying what
    else would put a share there; beyond it (a second, unrecorded reader's share: here as large as this call's)
    it is no proof: the SKIP stays and says why (a backward that far off would look the same: it says so too),
    never a false error. A module's recorded gradient of its own
    input is proven: judged however far."""
    reference = grad(1.0, -2.0, 0.5)
    off = reference * 1.01  # a realistic deficit of the call's backward: 1% off, judged (and an error there)
    summed = reference + grad(0.7, 1.5, -0.4)  # the unrecorded reader's gradient added: 0.74 away
    source = "Functional.layer_norm.0.backward's recorded incoming gradient (this input is ...)"
    cases = (
        (Borrowed(off.float(), source, inferred=True), True),
        (Borrowed(summed.float(), source, inferred=True), False),
        (Borrowed(summed.float(), "Module.linear.backward's input gradient"), True),
    )
    for taken, judged in cases:
        found = Attribution()
        lend(found, {0: taken}, [reference], None)
        assert (0 in found.matched) is judged and (0 in found.unjudged) is not judged
        pairs = gradient_pairs(found.matched, [reference], "the gradient arriving at output 0", found.elsewhere,
                               found.unjudged)  # fmt: skip
        if judged:
            assert pairs[0].skip is None or not pairs[0].skip
            said = found.elsewhere[0][1]
            assert taken.source in said
            assert ("a call msprobe did not record that reads that output too" in said) is taken.inferred
        else:
            assert "fits not this input's float64 gradient (a relative distance of 0.74, beyond 0.1)" in pairs[0].skip
            assert (
                "a call msprobe did not record" in pairs[0].skip and "that far off would look the same" in pairs[0].skip
            )


# Where msprobe 26.2.0 recorded the gradients of GEMMs on the real LLaMA-style and MoE dumps
# (make/llama_dump.py): on 3-D and 4-D inputs the gradient arriving at the output through a view to the
# shape of the GEMM that ran (a SKIP naming it and what to run, never an error, square weight or not),
# but where another entry recorded the input's gradient bit for bit (the producer of the input, read by
# this call alone: borrowed_gradients.py), judged from there; on 2-D and 3-D bmm inputs the inputs' own.
VIEW, TAKEN, JUDGED = "view", "taken", "judged"
GEMM_CASES = {
    "llama_bf16": {
        # q and k read one RMSNorm output with v: its incoming gradient sums three; nothing to take
        "Functional.linear.0": {0: VIEW, 1: VIEW},
        "Functional.linear.1": {0: VIEW, 1: VIEW},
        "Functional.linear.3": {0: TAKEN, 1: VIEW},  # o: SDPA's output, permuted and reshaped
        "Functional.linear.14": {0: TAKEN, 1: VIEW},  # the head, after the final norm
        "Torch.matmul.0": {0: TAKEN, 1: VIEW},  # 4-D Q.K^T: Q is RoPE's sum, K^T a slice
        "Torch.matmul.1": {0: VIEW, 1: TAKEN},  # 4-D P.V: P a cast of softmax's (not recorded), V expand's
        "Functional.scaled_dot_product_attention.0": {0: JUDGED, 1: JUDGED, 2: JUDGED},
    },
    "moe_bf16": {
        "Functional.linear.0": {0: VIEW, 1: VIEW, 2: VIEW},  # q with bias, square, one of three readers
        "Functional.linear.1": {0: VIEW, 1: VIEW, 2: VIEW},  # k with bias, non-square
        "Functional.linear.3": {0: TAKEN, 1: VIEW},
        "Torch.einsum.0": {0: TAKEN, 1: VIEW},  # btd,vd->btv: recorded as (1, 16, 64, 1)
        "Torch.baddbmm.0": {1: JUDGED, 2: JUDGED},  # 3-D: the scores, the mask its additive input
        "Torch.bmm.0": {0: JUDGED, 1: JUDGED},  # 3-D P.V
        "Functional.linear.5": {0: JUDGED, 1: JUDGED},  # an expert's gate on its gathered 2-D tokens: mm's
    },
}


@pytest.mark.parametrize("name", sorted(GEMM_CASES))
def test_gemm_gradients_recorded_through_a_view_are_never_an_error(pytester, copy_dump, name):
    cases = GEMM_CASES[name]
    selected = " or ".join(f"{entry}.backward" for entry in cases)
    _, result, rows, details = recorded(pytester, copy_dump, name, "-k", selected)
    assert result.ret == 0, result.stdout.str()[-3000:]
    for entry, outputs in cases.items():
        found = {
            int(key.rsplit(".", 1)[1]): row for key, row in details.items() if key.startswith(f"{entry}.backward.")
        }
        assert sorted(found) == sorted(outputs), entry
        for index, how in outputs.items():
            row = found[index]
            if how == VIEW:
                assert row["Status"] == "SKIP" and "bit for bit" in row["Message"], (entry, index)
                assert RUN_THE_CALL in row["Message"]
            else:
                assert row["Status"] == "pass", (entry, index, row["Message"])
                assert ("recorded incoming gradient" in row["Message"]) is (how == TAKEN), (entry, index)
        expected = "SKIP" if set(outputs.values()) == {VIEW} else "pass"
        assert rows[entry]["Backward Test Success"] == expected, entry


@pytest.mark.parametrize("scale", [1.3, -1.0])
def test_a_gradient_far_from_the_one_node_of_its_shape_is_judged_there(scale):
    """linear's weight gradient recorded transposed has one candidate, a node: 30% off it is a gross deficit,
    and so is its negation (a sign lost, 2 away): each judged there, an error, never a SKIP."""
    bench = [grad(1.0, 2.0, 3.0), torch.zeros(3, 2, dtype=torch.float64)]
    node = NodeGradient(
        "TBackward0", 0, torch.tensor([[1.0, -1.0, 0.5], [2.0, 0.0, 1.0]], dtype=torch.float64), frozenset({1})
    )
    found = attribute([(node.value * scale).float()], [{"shape": [2, 3]}], bench, [node], [grad(9.0, 9.0)])
    assert list(found.matched) == [1] and not found.strays
    assert torch.equal(found.elsewhere[1][0], node.value) and "TBackward0" in found.elsewhere[1][1]


# Mamba-2's chunk recurrence (tests/data/ssm_fp32, make/ssm_dump.py): einsum("bhzc,bchpn->bzhpn", decay, states).
# einsum's graph ends in a view, and msprobe hooks the node that made the output: it records the gradient
# arriving at the output viewed as (1, 3, 4, 16, 16, 1), bit for bit. The decay is lower triangular with a
# unit diagonal, so that gradient is 0.05 from the states' own gradient (at a PermuteBackward0 of that shape):
# it fitted there and was judged, an error (tested -0.00124, bench 0.00051) on a clean dump.
SCAN = "Torch.einsum.2"
SCAN_RECORDED = f"{SCAN}.backward.output.0.pt"


def scan_gradients(dump):
    """(the incoming gradient, the states' float64 gradient, the decay) of the scan's einsum."""
    load = lambda kind, i: torch.load(dump.parent / "dump_tensor_data" / f"{SCAN}.{kind}.{i}.pt", weights_only=True)  # noqa: E731
    decay, states, incoming = load("forward.input", 1), load("forward.input", 2), load("backward.input", 0)
    d, s = decay.double().requires_grad_(), states.double().requires_grad_()
    (ds,) = torch.autograd.grad(torch.einsum("bhzc,bchpn->bzhpn", d, s), [s], incoming.double())
    return incoming, ds, decay


def plant_scan(dump, value):
    torch.save(value.unsqueeze(-1).contiguous(), dump.parent / "dump_tensor_data" / SCAN_RECORDED)


@pytest.mark.slow
def test_the_incoming_gradient_einsum_passes_on_through_a_view_is_no_operands_gradient(pytester, copy_dump):
    dump, result, rows, details = recorded(pytester, copy_dump, "ssm_fp32", "-k", f"{SCAN}.backward", standard="basic")
    assert result.ret == 0, result.stdout.str()[-3000:]
    incoming, ds, _ = scan_gradients(dump)
    recorded_value = torch.load(dump.parent / "dump_tensor_data" / SCAN_RECORDED, weights_only=True)
    assert torch.equal(recorded_value, incoming.unsqueeze(-1))  # what msprobe recorded, bit for bit
    assert 0.01 < float((incoming.double() - ds).norm() / ds.norm()) < 0.1  # near the states' gradient
    decay, states = details[f"{SCAN}.backward.output.0"], details[f"{SCAN}.backward.output.1"]
    assert decay["Status"] == "SKIP" and "through a view, bit for bit" in decay["Message"]
    # The states' gradient is in the dump all the same: torch.cat's recorded incoming gradient.
    assert states["Status"] == "pass" and "Torch.cat.0.backward's recorded incoming gradient" in states["Message"]
    assert rows[SCAN]["Backward Test Success"] == "pass"


def tf32(x):
    from deficits import round_mantissa

    return round_mantissa(x.double(), 10)


@pytest.mark.slow
@pytest.mark.parametrize(
    "kernel, standard, expected",
    [
        # A fused einsum kernel that records the states' gradient there: correct in fp32, judged at the node.
        ("fp32", "dtype", "passed"),
        ("fp32", "basic", "passed"),
        # The same on TF32 operands (10 mantissa bits): 1e-3 relative, far beyond an fp32 budget.
        ("tf32", "dtype", "failed"),
        # The recorded gradient 5% off the incoming one: no longer what the view passed on, judged, an error.
        ("scaled", "basic", "failed"),
        ("scaled", "dtype", "failed"),
    ],
)
def test_a_fault_in_the_scans_recorded_gradient_is_judged(pytester, copy_dump, kernel, standard, expected):
    dump = copy_dump("ssm_fp32")
    incoming, ds, decay = scan_gradients(dump)
    if kernel == "fp32":
        value = ds.float()
    elif kernel == "tf32":
        g, d = tf32(incoming), tf32(decay)
        # d states[b,c,h,p,n] = sum_z decay[b,h,z,c] g[b,z,h,p,n] of the rounded operands, then rounded to fp32
        value = torch.einsum("bhzc,bzhpn->bchpn", d, g).float()
    else:
        value = (incoming.double() * 1.05).float()
    plant_scan(dump, value)
    result = run_msprobe(pytester, dump, "--msprobe-standard", standard, "-k", f"{SCAN}.backward", device="recorded")
    assert result.parseoutcomes()[expected] == 1, result.stdout.str()[-3000:]
    row = {r["API Name"]: r for r in read_csv(pytester.path / "out", "details")}[f"{SCAN}.backward.output.1"]
    assert row["Status"] == ("pass" if expected == "passed" else "error"), row
    assert "PermuteBackward0" in row["Message"]
