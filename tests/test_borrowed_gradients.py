"""An input's gradient that another entry recorded, where msprobe recorded none in the call's own entry
(frameworks/borrowed_gradients.py): on 3-D inputs msprobe 26.2.0 records for linear and matmul the
gradient arriving at the output. The module's gradient in a mix dump, the producer's recorded incoming
gradient where the input is its whole output and no other call reads it: judged from there, a deficit
there an error; an input read by several calls keeps its SKIP."""

from __future__ import annotations

import pytest
import torch

from conftest import read_csv, run_msprobe
from pytest_msprobe.frameworks.borrowed_gradients import _view_of


def details(pytester, out: str = "out") -> dict[str, dict[str, str]]:
    return {row["API Name"]: row for row in read_csv(pytester.path / out, "details")}


def scale(dump, data_name: str, factor: float) -> None:
    path = dump.parent / "dump_tensor_data" / data_name
    tensor = torch.load(path, weights_only=True)
    torch.save((tensor.double() * factor).to(tensor.dtype), path)


@pytest.mark.parametrize(
    "order", [(0, 1, 2), (0, 2, 1, 3), (1, 0, 2, 3)], ids=["reshaped", "transposed heads", "swapped batch"]
)
def test_an_input_that_is_another_calls_output_through_a_view_is_found_and_its_gradient_viewed_alike(order):
    made = torch.randn(2, 3, 4, 5) if len(order) == 4 else torch.randn(2, 12, 5)
    value = made.permute(order).reshape(made.shape[0], -1) if len(order) == 4 else made.reshape(2, 60)
    view = _view_of(made, value)
    assert view is not None and torch.equal(view(made), value)
    assert _view_of(made, value + 1) is None and _view_of(made.double(), value) is None


def test_a_mix_dumps_linear_modules_give_their_calls_input_weight_and_bias_gradients(pytester, copy_dump):
    dump = copy_dump("linear3d_mix")
    result = run_msprobe(pytester, dump, "--msprobe-standard", "dtype", "-k", "linear", device="recorded")
    assert result.ret == 0
    rows = details(pytester)
    for index, source in ((0, "Module.fc2.Linear.backward.0"), (1, "Module.fc2.Linear.parameters_grad.0"),
                          (2, "Module.fc2.Linear.parameters_grad.0")):  # fmt: skip
        row = rows[f"Functional.linear.1.backward.output.{index}"]
        assert row["Status"] == "pass" and f"judged {source}" in row["Message"], row
    assert not any(row["Status"] == "SKIP" for row in rows.values())


def test_a_deficit_in_the_modules_recorded_gradient_is_the_calls_error(pytester, copy_dump):
    dump = copy_dump("linear3d_mix")
    scale(dump, "Module.fc2.Linear.backward.0.output.0.pt", 1.001)
    result = run_msprobe(pytester, dump, "--msprobe-standard", "dtype", "-k", "linear", device="recorded")
    assert result.ret == 1
    assert details(pytester)["Functional.linear.1.backward.output.0"]["Status"] == "error"


@pytest.mark.slow
def test_the_producers_incoming_gradient_is_the_inputs_and_a_deficit_there_an_error(pytester, copy_dump):
    """hybrid_fp32's fused q/k/v projection reads layer_norm.0's output alone: layer_norm's recorded incoming
    gradient is the projection's input gradient. 0.1% off there, the projection's input gradient is an error
    (its weight's and bias's stay SKIPs: no other entry recorded them in an L1 dump)."""
    dump = copy_dump("hybrid_fp32")
    run_msprobe(pytester, dump, "--msprobe-standard", "dtype", "-k", "Functional.linear.1.backward", device="recorded")
    row = details(pytester)["Functional.linear.1.backward.output.0"]
    assert row["Status"] == "pass" and "judged Functional.layer_norm.0.backward's recorded incoming" in row["Message"]
    assert {details(pytester)[f"Functional.linear.1.backward.output.{i}"]["Status"] for i in (1, 2)} == {"SKIP"}
    scale(dump, "Functional.layer_norm.0.backward.input.0.pt", 1.001)
    result = run_msprobe(
        pytester, dump, "--msprobe-standard", "dtype", "-k", "Functional.linear.1.backward", device="recorded", out="o2"
    )
    assert result.ret == 1
    assert details(pytester, "o2")["Functional.linear.1.backward.output.0"]["Status"] == "error"
