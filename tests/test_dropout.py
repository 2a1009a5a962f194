"""Dropout as msprobe judges it (issue 45, item 4): with p 0 or in eval mode compared as any API; a dropout
that draws a mask by msprobe's share rule (N >= 100: |dropped(bench) - dropped(tested)| / N < 0.1), its
channels for a feature dropout, alpha dropout's constant for its dropped elements, and the elements both
sides kept by the run's standard. tests/data/select_tensor is a real msprobe 26.2.0 dump of them
(make/acc_check_dumps.py): F.dropout on masked attention probabilities (p 0.1), with p 0, in eval mode,
F.dropout2d (p 0.5, 256 channels), F.alpha_dropout (p 0.2), torch.dropout (p 0.3)."""

from __future__ import annotations

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from conftest import read_csv, run_msprobe
from pytest_msprobe.frameworks import dropout as framework
from pytest_msprobe.judging.compare import Comparison
from pytest_msprobe.judging.dropout import DropoutRule, dropped_units, judge, share_verdict
from pytest_msprobe.judging.standards.basic import BasicStandard

RANDOM = ["Functional.dropout.0", "Functional.dropout.2", "Functional.dropout.4", "Functional.dropout2d.0",
          "Functional.alpha_dropout.0", "Torch.dropout.0"]
DETERMINISTIC = ["Functional.dropout.1", "Functional.dropout.3", "Functional.dropout.5", "Functional.dropout.6"]


# -- the rule ---------------------------------------------------------------------


def test_msprobes_share_rule_at_its_edges():
    rule = DropoutRule("dropout", 0.5)
    assert share_verdict(50, 0, 99, rule).status == "pass"  # fewer than 100 draws: not judged, as msprobe
    assert "fewer than 100, so the share dropped is not judged" in share_verdict(50, 0, 99, rule).reasons[0]
    assert share_verdict(60, 50, 100, rule).status == "error"  # 10% apart: not under 10%
    assert share_verdict(59, 50, 100, rule).status == "pass"
    rule = DropoutRule("dropout", 0.1, zeros=0.4375)
    assert share_verdict(50, 49, 100, rule).reasons == [
        "dropout p=0.1 draws over 100 elements: 50.0% dropped on the tested side, 49.0% on the bench "
        "(p and the 43.8% already zero give 49.4%), 1.0% apart (under msprobe's 10%)"
    ]


def test_a_feature_dropout_draws_channels_and_alpha_dropout_a_constant():
    torch.manual_seed(0)
    x = torch.randn(4, 32, 5, 5, dtype=torch.float64) + 3  # no element 0 of its own
    out = F.dropout2d(x, 0.5)
    _, channels = dropped_units(out.numpy(), DropoutRule("dropout2d", 0.5, channel_dims=2))
    assert channels.size == 128 and channels.sum() == int((out.flatten(2) == 0).all(-1).sum())
    draw = framework.draw_of("Functional", "alpha_dropout", [x, 0.2, True], {})
    assert draw is not None
    out = F.alpha_dropout(x, 0.2, True)
    values, counts = torch.unique(out, return_counts=True)
    assert float(values[counts.argmax()]) == pytest.approx(draw.dropped_value(), rel=1e-12)  # every dropped one
    elements, _ = dropped_units(out.numpy(), draw.rule(forward=True))
    assert elements.sum() == counts.max()


@pytest.mark.parametrize(
    ("api_type", "api", "args", "kwargs", "draws"),
    [
        ("Functional", "dropout", ["x"], {}, True),  # p 0.5, training by default
        ("Functional", "dropout", ["x"], {"p": 0.0}, False),
        ("Functional", "dropout", ["x", 0.5, False], {}, False),
        ("Functional", "dropout", ["x", 1.0], {}, False),  # all zero: deterministic
        ("Functional", "alpha_dropout", ["x", 0.2], {}, False),  # training defaults to False here
        ("Functional", "alpha_dropout", ["x", 0.2], {"training": True}, True),
        ("Torch", "dropout", ["x", 0.3, True], {}, True),
        ("Torch", "dropout", ["x", 0.3, False], {}, False),
        ("Functional", "relu", ["x"], {}, False),
    ],
)
def test_which_calls_draw_a_mask(api_type, api, args, kwargs, draws):
    assert (framework.draw_of(api_type, api, args, kwargs) is not None) == draws


def test_kept_elements_are_judged_so_a_wrong_scale_fails():
    rng = np.random.default_rng(0)
    x = rng.uniform(1, 2, 1000)
    keep_t, keep_b = rng.random(1000) > 0.3, rng.random(1000) > 0.3
    bench = np.where(keep_b, x / 0.7, 0.0)
    rule = DropoutRule("dropout", 0.3, zeros=0.0)
    right = Comparison(np.where(keep_t, x / 0.7, 0.0).astype(np.float32), bench, "torch.float32")
    assert judge(right, rule, BasicStandard())[1].status == "pass"
    unscaled = Comparison(np.where(keep_t, x, 0.0).astype(np.float32), bench, "torch.float32")
    metrics, verdict = judge(unscaled, rule, BasicStandard())
    assert verdict.status == "error" and verdict.reasons[0].endswith("apart (under msprobe's 10%)")
    assert verdict.reasons[1].startswith(f"the {int((keep_t & keep_b).sum())} elements both sides kept: MaxAbsErr")
    nan = Comparison(np.where(keep_t, np.nan, 0.0), bench, "torch.float32")
    assert judge(nan, rule, BasicStandard())[1].reasons[0].startswith("NaN or inf at ")

    class AgainstAReference:  # --msprobe-standard benchmark: whole outputs' metrics over a reference run's
        name, uses_reference = "benchmark", True

    verdict = judge(unscaled, rule, AgainstAReference())[1]  # type: ignore[arg-type]
    assert verdict.status == "pass" and verdict.reasons[1] == (
        "the elements both sides kept are not judged: --msprobe-standard benchmark compares whole outputs with "
        "a reference run"
    )


# -- what a user sees -------------------------------------------------------------


def rows_of(pytester, kind):
    return {row["API Name"]: row for row in read_csv(pytester.path / "out", kind)}


@pytest.mark.parametrize("device", ["recorded", "cpu"])
def test_dropout_is_compared_as_msprobe_judges_it(pytester, copy_dump, device):
    result = run_msprobe(pytester, copy_dump("select_tensor"), "-k", "dropout", device=device)
    assert result.ret == 0
    rows, details = rows_of(pytester, "result"), rows_of(pytester, "details")
    assert sorted(rows) == sorted(RANDOM + DETERMINISTIC)
    for api in DETERMINISTIC:  # p 0, eval mode: the input itself, compared element by element
        assert rows[api]["Forward Test Success"] == "pass"
        output = details[f"{api}.forward.output.0"]
        assert (output["MaxAbsErr"], output["Message"]) == ("0.0", "")
    for api in RANDOM:
        assert (rows[api]["Forward Test Success"], rows[api]["Backward Test Success"]) == ("pass", "pass")
        assert "draws a mask: judged by the share dropped (msprobe's rule)" in rows[api]["Message"]
    masked = details["Functional.dropout.0.forward.output.0"]["Message"]
    assert masked.startswith("dropout p=0.1 draws over 256 elements: ")
    assert "(p and the 43.8% already zero give 49.4%)" in masked  # the causal mask's zeros, as recorded
    assert details["Functional.dropout2d.0.forward.output.0"]["Message"].startswith(
        "dropout2d p=0.5 draws over 256 channels: "
    )
    assert "(p gives 20.0%)" in details["Functional.alpha_dropout.0.forward.output.0"]["Message"]
    assert "(p gives 30.0%)" in details["Torch.dropout.0.backward.output.0"]["Message"]
    result.assert_outcomes(passed=17)


def test_in_msprobes_layout_a_drawing_dropouts_metric_cells_are_blank_saying_why(pytester, copy_dump):
    """Its metrics would compare two masks element by element: msprobe's acc_check writes no details row
    for a dropout, and its api_precision_compare reads a blank as no metric."""
    result = run_msprobe(pytester, copy_dump("select_tensor"), "-k", "dropout", "--msprobe-csv-layout",
                         "msprobe-pytorch", device="recorded")
    assert result.ret == 0
    details = rows_of(pytester, "details")
    metrics = list(details["Functional.dropout.0.forward.output.0"])[4:21]
    assert metrics[0] == "余弦相似度" and metrics[-1] == "ULP误差大于阈值占比"
    for api in RANDOM:
        for direction in ("forward", "backward"):
            row = details[f"{api}.{direction}.output.0"]
            assert [row[column] for column in metrics] == [" "] * 17, (api, direction)
            assert (row["DEVICE Dtype"], row["Status"]) == ("torch.float32", "pass")
            assert (
                "draws over 256 " in row["Message"]
                and "; msprobe's metrics left blank: each side drew its own mask, so they would compare two "
                "masks element by element (msprobe's acc_check writes no details row for a dropout)" in row["Message"]
            ), row["Message"]
    for api in DETERMINISTIC:  # one mask, or none: compared as any API, every metric written
        row = details[f"{api}.forward.output.0"]
        assert (row["余弦相似度"], row["最大绝对误差"], row["Message"]) == ("1.00000000000000", "0.00000000000000", " ")


def planted(dump, name, change):
    path = dump.parent / "dump_tensor_data" / f"{name}.pt"
    torch.save(change(torch.load(path, weights_only=True)), path)


def test_a_dropout_that_drops_nothing_and_one_that_does_not_scale_are_errors(pytester, copy_dump):
    """Recorded outputs replaced by a faulty kernel's: torch.dropout's input kept whole (scaled by 1/(1-p)),
    and dropout2d's kept channels left unscaled. msprobe's rule finds the first alone: the second drops the
    right share, and only its kept values say it is wrong."""
    dump = copy_dump("select_tensor")
    data = dump.parent / "dump_tensor_data"
    kept_whole = torch.load(data / "Torch.dropout.0.forward.input.0.pt", weights_only=True) / 0.7
    planted(dump, "Torch.dropout.0.forward.output.0", lambda _: kept_whole)
    planted(dump, "Functional.dropout2d.0.forward.output.0", lambda out: out * 0.5)
    result = run_msprobe(pytester, dump, "-k", "dropout and forward", "--msprobe-repro", "repro",
                         "--msprobe-save-error-data", device="recorded")
    assert result.ret == 1
    message = rows_of(pytester, "result")["Torch.dropout.0"]["Message"]
    # No script compares two masks element by element as if they were one: none is written, and it says why.
    assert "repro not saved: ValueError: dropout p=0.3 draws a mask on each side, judged by the share dropped" in message
    assert "error data in " in message
    assert not (pytester.path / "repro").exists() or not any((pytester.path / "repro").rglob("repro.py"))
    details = rows_of(pytester, "details")
    whole = details["Torch.dropout.0.forward.output.0"]
    assert whole["Status"] == "error"
    assert whole["Message"].startswith("dropout p=0.3 draws over 256 elements: 0.0% dropped on the tested side, ")
    assert "apart: not under msprobe's 10%" in whole["Message"]
    unscaled = details["Functional.dropout2d.0.forward.output.0"]
    assert unscaled["Status"] == "error"
    assert "apart (under msprobe's 10%)" in unscaled["Message"]
    assert "elements both sides kept: Cosine" not in unscaled["Message"]  # the cosine holds: a scale alone
    assert "elements both sides kept: MaxAbsErr" in unscaled["Message"]
    result.assert_outcomes(passed=8, failed=2)
