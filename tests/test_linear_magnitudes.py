"""A linear backward entry's magnitudes, gradient by gradient without the forward (issue 32:
frameworks/linear_grads.py): the same values, to the bit, as the float32 and float64 runs through
autograd they replace (the benchmark's gradients too, all at once), and the same rows on real dumps
with the shortcut switched off."""

from __future__ import annotations

import dataclasses
import itertools
from pathlib import Path

import pytest
import torch

from pytest_msprobe.checking.check import Checker
from pytest_msprobe.dumps.dump import parse_entry_name, read_dump
from pytest_msprobe.frameworks import RunOptions, Tested, linear_grads
from pytest_msprobe.frameworks.torch_engine import Call, Side, absolute, gradients
from pytest_msprobe.judging.standards import Standard
from pytest_msprobe.judging.standards.basic import BasicStandard
from pytest_msprobe.judging.standards.dtype import DtypeStandard

DATA = Path(__file__).parent / "data"


def linear_call(shape, out, bias, dtype, flags, autocast=None, by_keyword=False) -> tuple[Call, list]:
    generator = torch.Generator().manual_seed(len(shape) * 100 + out)
    x = torch.randn(shape, generator=generator).to(dtype)
    w = torch.randn(out, shape[-1], generator=generator).to(dtype)
    b = torch.randn(out, generator=generator).to(dtype) if bias else None
    g = torch.randn(*shape[:-1], out, generator=generator).to(dtype)
    name = parse_entry_name("Functional.linear.0.backward")
    assert name is not None
    f = torch.nn.functional.linear
    args, kwargs = ([x], {"weight": w, "bias": b}) if by_keyword else ([x, w, b], {})
    return Call(name, f, f, args, kwargs, [], grad_flags=list(flags), autocast=autocast), [g]


CASES = [
    (shape, out, bias, flags)
    for shape in [(7,), (5, 7), (3, 5, 7), (2, 3, 5, 7), (1, 1, 7), (4, 1)]
    for out in (1, 6, 33)
    for bias in (False, True)
    for flags in itertools.product([True, False], repeat=3 if bias else 2)
    if any(flags)
]


@pytest.mark.parametrize("floating", [torch.float32, torch.float64], ids=["float32", "float64"])
@pytest.mark.parametrize(
    ("dtype", "autocast"),
    [(torch.float32, None), (torch.bfloat16, None), (torch.float32, torch.bfloat16)],
    ids=["fp32", "bf16", "fp32-autocast-bf16"],
)
def test_each_gradient_is_autograd_s_to_the_bit(floating, dtype, autocast):
    compared = 0
    for shape, out, bias, flags in CASES:
        call, grads = linear_call(shape, out, bias, dtype, flags, autocast)
        assert linear_grads.takes(call, grads)
        side = absolute(Side("cpu", floating, autocast, True))
        through_autograd = gradients(side, call, grads)
        for index, expected in enumerate(through_autograd):
            found = linear_grads.gradients(call, grads, side, index)
            assert [i for i, f in enumerate(found) if f is not None] == ([index] if expected is not None else [])
            if expected is not None:
                assert found[index].dtype == expected.dtype == floating
                assert found[index].shape == expected.shape
                assert torch.equal(found[index], expected), (shape, out, bias, flags, index)
                compared += 1
        # The benchmark's: every gradient the call took, at once.
        together = linear_grads.bench_gradients(call, grads, side)
        assert together is not None
        assert [g is None for g in together] == [g is None for g in through_autograd]
        assert all(g is None or torch.equal(g, e) for g, e in zip(together, through_autograd))
    assert compared > len(CASES)


def test_calls_it_does_not_take_run_through_autograd():
    call, grads = linear_call((3, 5, 7), 6, True, torch.float32, [True] * 3)
    assert linear_grads.takes(call, grads)
    x, w, b = call.args
    strided = x.transpose(0, 1).contiguous().transpose(0, 1)  # x's shape, not its layout
    assert not linear_grads.takes(dataclasses.replace(call, args=[strided, w, b]), grads)
    assert not linear_grads.takes(dataclasses.replace(call, args=[x, w.t().contiguous().t(), b]), grads)
    assert not linear_grads.takes(call, [grads[0].transpose(0, 1)])
    assert not linear_grads.takes(dataclasses.replace(call, bench_fn=lambda *a: None), grads)
    keyword, _ = linear_call((3, 5, 7), 6, True, torch.float32, [True] * 3, by_keyword=True)
    assert linear_grads.takes(keyword, grads)
    swapped = dataclasses.replace(keyword, kwargs={"bias": b, "weight": w})  # floating tensors out of order
    assert not linear_grads.takes(swapped, grads)


def rows(dump_path: Path, tested: Tested, standard: Standard) -> tuple[dict[str, str], int]:
    """Each entry's result as text (every field a CSV row is written from), and how many gradients
    linear_grads computed."""
    dump = read_dump(dump_path)
    checker = Checker(RunOptions("cpu", tested, "auto", 1234), standard)
    used = 0
    original = linear_grads.gradients

    def counted(*args, **kwargs):
        nonlocal used
        used += 1
        return original(*args, **kwargs)

    linear_grads.gradients = counted
    try:
        found = {name.full: repr(dataclasses.asdict(checker.check(dump, name))) for name in dump.api_names()}
    finally:
        linear_grads.gradients = original
    return found, used


@pytest.mark.slow
@pytest.mark.parametrize(
    ("dump", "tested", "standard", "shortcut_used"),
    [
        ("llama_fp32", Tested.DEVICE, DtypeStandard(), True),
        ("gpt_fp32", Tested.DEVICE, DtypeStandard(), True),
        # recorded: gradients judged at a node of the graph keep autograd's run
        ("gpt_fp32", Tested.RECORDED, DtypeStandard(), False),
        # basic asks no magnitude, but the benchmark's gradients are computed so too
        ("llama_fp32", Tested.DEVICE, BasicStandard(), True),
        ("moe_bf16", Tested.DEVICE, DtypeStandard(), True),
    ],
    ids=["llama_fp32-dtype", "gpt_fp32-dtype", "gpt_fp32-recorded-dtype", "llama_fp32-basic", "moe_bf16-dtype"],
)
def test_rows_are_the_same_without_the_shortcut(dump, tested, standard, shortcut_used, monkeypatch):
    path = DATA / dump / "dump.json"
    with_shortcut, used = rows(path, tested, standard)
    assert (used > 0) is shortcut_used
    monkeypatch.setattr(linear_grads, "takes", lambda call, grad_outputs: False)
    without, unused = rows(path, tested, standard)
    assert unused == 0
    assert list(with_shortcut) == list(without)
    different = [name for name in without if with_shortcut[name] != without[name]]
    assert not different, different
