"""What a checking process imports before its first entry is frozen out of the collector's sight while
its entries run, and handed back when the run ends (issue 48: the full collections between entries
and pytest's five at its end walked torch's objects; bench/timing/results_fixed_costs.md).
"""

from __future__ import annotations

import gc

from conftest import run_msprobe
from pytest_msprobe.glue import warmup

RECORD_FREEZE = """
import gc

def pytest_runtest_call(item):
    with open("frozen", "a") as handle:
        handle.write(f"{gc.get_freeze_count()}\\n")
"""


def test_the_frameworks_objects_are_frozen_while_entries_run_and_thawed_after(pytester, copy_dump):
    pytester.makeconftest(RECORD_FREEZE)
    result = run_msprobe(pytester, copy_dump("pt_stats_L1"), "-k", "relu", device="cpu")
    result.assert_outcomes(passed=2)
    counts = [int(line) for line in (pytester.path / "frozen").read_text().split()]
    assert len(counts) == 2 and min(counts) > 10_000  # torch's objects and this process's, at least
    # In process: the run's session, items and dump are the collector's again, not kept for the
    # process's life (nor what an earlier run in this process left frozen).
    assert gc.get_freeze_count() == 0


def test_a_collect_only_run_leaves_nothing_frozen_either(pytester, copy_dump):
    result = run_msprobe(pytester, copy_dump("pt_stats_L1"), "--co", device="cpu")  # the dump's parse freezes
    assert result.ret == 0
    assert gc.get_freeze_count() == 0


def test_the_warm_up_freezes_what_it_imported_and_thaw_hands_it_back():
    warmup.thaw()  # what an earlier test's run may have left
    warmup.warm_up([], recorded=False)  # nothing selected: nothing imported, nothing frozen
    assert gc.get_freeze_count() == 0
    warmup.warm_up([("pytorch", "Functional.relu")], recorded=False)
    assert gc.get_freeze_count() > 10_000
    warmup.thaw()
    assert gc.get_freeze_count() == 0
    warmup.thaw()  # once the run ends: a second call has nothing to hand back
    assert gc.get_freeze_count() == 0
