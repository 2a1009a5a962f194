"""--lf and --ff after a run made under other settings: the header says which changed."""

from __future__ import annotations

import pytest

from pytest_msprobe.glue.last_failed import differences, verdict_settings
from pytest_msprobe.options import Options


def test_only_the_settings_a_verdict_depends_on_count():
    before = verdict_settings(Options(dumps=("d.json",), device="cpu", out="a"))
    assert differences(before, verdict_settings(Options(dumps=("d.json",), device="cpu", out="b"))) == []
    now = verdict_settings(Options(dumps=("d.json",), device="recorded", standard="dtype"))
    assert differences(before, now) == ["device cpu -> recorded", "standard basic -> dtype"]


@pytest.mark.slow
def test_a_last_failed_run_under_other_settings_says_so(pytester, copy_dump):
    dump = copy_dump("pt_tensor_L1")
    common = ["--msprobe-dump", str(dump), "--msprobe-out", "out", "--msprobe-device", "recorded"]
    first = pytester.runpytest(*common)  # the cache is on: pytest keeps the failures
    assert first.ret == 1
    changed = pytester.runpytest(*common, "--lf", "--msprobe-standard", "dtype")
    changed.stdout.fnmatch_lines(["msprobe: --lf/--ff re-run the failures of a run made with other settings "
                                  "(standard basic -> dtype)*"])
    same = pytester.runpytest(*common, "--lf", "--msprobe-standard", "dtype")
    assert "made with other settings" not in same.stdout.str()
