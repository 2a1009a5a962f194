"""Only the compared gradients are computed (issue 32: an LLM's linear entries record the input's
gradient alone, and the LM head's weight gradient of 131 M elements was computed on every side and in
every extra run for nothing): the rows are the same, to the bit, as where every gradient is computed."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from pytest_msprobe.checking.check import Checker
from pytest_msprobe.dumps.dump import read_dump
from pytest_msprobe.frameworks import RunOptions, Tested, pytorch
from pytest_msprobe.frameworks.torch_engine import Call
from pytest_msprobe.judging.standards import Standard
from pytest_msprobe.judging.standards.basic import BasicStandard
from pytest_msprobe.judging.standards.dtype import DtypeStandard

DATA = Path(__file__).parent / "data"


def rows(dump_path: Path, standard: Standard) -> tuple[dict[str, str], int]:
    """Each backward entry's result as text (every field a CSV row is written from: status, reasons,
    each output's metrics, ratio and message, exact floats), and how many entries left a gradient out."""
    dump = read_dump(dump_path)
    checker = Checker(RunOptions("cpu", Tested.DEVICE, "auto", 1234), standard)
    restricted = 0
    original = pytorch.compared_gradients_only

    def counted(call: Call, grad_specs: list) -> Call:
        nonlocal restricted
        found = original(call, grad_specs)
        restricted += found is not call
        return found

    pytorch.compared_gradients_only = counted
    try:
        found = {
            name.full: repr(dataclasses.asdict(checker.check(dump, name)))
            for name in dump.api_names()
            if name.direction == "backward"
        }
    finally:
        pytorch.compared_gradients_only = original
    return found, restricted


@pytest.mark.slow
@pytest.mark.parametrize(
    ("dump", "standard"),
    [("llama_fp32", DtypeStandard()), ("llama_bf16", DtypeStandard()), ("pt_stats_L1", BasicStandard())],
    ids=["llama_fp32-dtype", "llama_bf16-dtype", "pt_stats_L1-basic"],
)
def test_rows_are_the_same_with_every_gradient_computed(dump, standard, monkeypatch):
    path = DATA / dump / "dump.json"
    only_compared, restricted = rows(path, standard)
    assert restricted > 0  # some entries of the dump record fewer gradients than their inputs
    monkeypatch.setattr(pytorch, "compared_gradients_only", lambda call, grad_specs: call)
    every, none_restricted = rows(path, standard)
    assert none_restricted == 0
    assert list(only_compared) == list(every)
    different = [name for name in every if only_compared[name] != every[name]]
    assert not different, different
