"""Device ids of a distributed run: the pool the xdist controller owns, the ids named, the threads."""

from __future__ import annotations

import os
import sys
import types

import pytest
from hypothesis import given
from hypothesis import strategies as st

from pytest_msprobe.frameworks import devices
from pytest_msprobe.reports.csv_files import ApiBook, crash_result
from pytest_msprobe.results import ERROR, EntryResult


def test_workers_take_the_ids_in_order_and_keep_them():
    pool = devices.DevicePool([4, 5, 6, 7])
    assert [pool.allocate(w) for w in ("gw0", "gw1", "gw2", "gw3")] == [4, 5, 6, 7]
    assert pool.allocate("gw2") == 6  # asked again: the same id


def test_a_restarted_worker_takes_the_id_its_crashed_predecessor_freed():
    pool = devices.DevicePool([0, 1, 2])
    for worker in ("gw0", "gw1", "gw2"):
        pool.allocate(worker)
    assert pool.release("gw1") == 1  # gw1 crashed: xdist calls testnodedown, then starts gw3
    assert pool.allocate("gw3") == 1
    assert sorted(pool.holders.values()) == [0, 1, 2]


def test_a_replacement_takes_its_predecessors_id_even_when_another_worker_finished_first():
    """Near the end of a run xdist tells every worker to finish while one still runs its last
    entry: gw2 finishing (giving id 0 back) and gw1 crashing (id 1) arrive in either order. The
    replacement started at gw1's crash takes gw1's id in both (it took 0 when gw2's came first)."""
    for finished_first in (True, False):
        pool = devices.DevicePool([0, 1])
        pool.allocate("gw2"), pool.allocate("gw1")
        events = [("gw2", False), ("gw1", True)] if finished_first else [("gw1", True), ("gw2", False)]
        for worker, crashed in events:
            pool.release(worker)
            if crashed:  # xdist: pytest_testnodedown, then the replacement's pytest_configure_node
                assert pool.allocate("gw3") == 1


def test_no_id_is_handed_out_twice_while_held():
    pool = devices.DevicePool([0, 1])
    pool.allocate("gw0")
    pool.allocate("gw1")
    with pytest.raises(devices.DeviceError, match="no free device id for worker gw2.*gw0: 0, gw1: 1"):
        pool.allocate("gw2")
    assert pool.release("gw9") is None  # a worker that held nothing


@given(st.lists(st.tuples(st.booleans(), st.integers(0, 7)), max_size=60), st.integers(1, 8))
def test_live_workers_always_hold_distinct_named_ids(events, size):
    """Any order of workers starting and going down (restarts get new names, as in xdist)."""
    ids = list(range(10, 10 + size))
    pool = devices.DevicePool(ids)
    live, next_name = [], 0
    for start, pick in events:
        if start and len(live) < size:
            worker = f"gw{next_name}"
            next_name += 1
            pool.allocate(worker)
            live.append(worker)
        elif live:
            pool.release(live.pop(pick % len(live)))
        held = [pool.holders[w] for w in live]
        assert set(pool.holders) == set(live)
        assert len(set(held)) == len(held) and set(held) <= set(ids)


@pytest.mark.parametrize("text, workers, ids", [
    ("auto", 8, list(range(8))),
    ("auto", 1, [0]),
    (None, 3, [0, 1, 2]),
    ("0-7", 8, list(range(8))),
    ("4-7", 2, [4, 5, 6, 7]),  # more ids than workers: the first ones are used
    ("3", 1, [3]),
])
def test_ids_of_a_run(text, workers, ids):
    assert devices.ids_for(text, workers) == ids


def test_more_workers_than_ids_is_a_usage_error_that_says_what_to_do():
    with pytest.raises(devices.DeviceError, match=r"8 xdist workers but 4 device ids \(0-3\).*-n 4"):
        devices.ids_for("0-3", 8)
    with pytest.raises(devices.DeviceError, match="names no id"):
        devices.ids_for(",", 1)


def test_cpu_ids_need_no_device(monkeypatch):
    monkeypatch.setattr(devices, "import_torch", lambda: pytest.fail("torch asked about cpu ids"))
    assert devices.device_count(devices.CPU) is None
    assert devices.check_ids_exist(devices.CPU, [0, 1, 99]) is None  # any id: nothing to check


def test_each_process_checks_with_one_thread_unless_the_user_says(monkeypatch):
    monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
    assert devices.cpu_threads() == 1  # rows that do not depend on the thread count
    monkeypatch.setenv("OMP_NUM_THREADS", "3")
    assert devices.cpu_threads() is None
    assert devices.threads_text(None) == "3 intra-op thread(s) (OMP_NUM_THREADS)"


def test_threads_go_to_torch_once_imported_and_to_the_environment_before(monkeypatch):
    calls = []
    monkeypatch.setitem(sys.modules, "torch", types.SimpleNamespace(set_num_threads=calls.append))
    for name in ("OMP_NUM_THREADS", "MKL_NUM_THREADS"):  # set first, so that teardown removes what the test sets
        monkeypatch.setenv(name, "0")
        monkeypatch.delenv(name)
    devices.limit_threads(2)
    assert calls == [2] and "OMP_NUM_THREADS" not in os.environ
    monkeypatch.delitem(sys.modules, "torch")
    devices.limit_threads(1)
    assert (os.environ["OMP_NUM_THREADS"], os.environ["MKL_NUM_THREADS"]) == ("1", "1")


def test_torch_gets_huge_pages_before_it_is_imported_unless_the_user_says(monkeypatch):
    monkeypatch.setenv("THP_MEM_ALLOC_ENABLE", "0")  # set first, so that teardown removes what the test sets
    monkeypatch.delenv("THP_MEM_ALLOC_ENABLE")
    monkeypatch.setitem(sys.modules, "torch", types.SimpleNamespace())
    devices.use_huge_pages()
    assert "THP_MEM_ALLOC_ENABLE" not in os.environ  # torch has allocated: too late, and this process's own
    monkeypatch.delitem(sys.modules, "torch")
    devices.use_huge_pages()
    assert os.environ["THP_MEM_ALLOC_ENABLE"] == "1"
    monkeypatch.setenv("THP_MEM_ALLOC_ENABLE", "0")
    devices.use_huge_pages()
    assert os.environ["THP_MEM_ALLOC_ENABLE"] == "0"


def test_a_crashed_entry_is_an_error_paired_with_the_other_direction():
    node_id = "run/dump.json::Functional.relu.0.backward"
    crashed = crash_result(node_id, "the xdist worker gw1 crashed")
    assert (crashed.api, crashed.direction, crashed.status) == ("Functional.relu.0", "backward", ERROR)
    assert crashed.dump == "run/dump.json"
    book = ApiBook()
    book.expect(["run/dump.json::Functional.relu.0.forward", node_id])
    assert book.add("run/dump.json", crashed) is None  # the forward result is still to come
    forward = EntryResult("Functional.relu.0", "forward", "pass")
    assert book.add("run/dump.json", forward) == ("run/dump.json", "Functional.relu.0", forward, crashed)
    assert crash_result("run/dump.json::dump", "crashed") is None  # not an entry: no row


@pytest.mark.parametrize("tx, workers", [(["popen"] * 4, 4), (["3*popen"], 3), (["2*popen", "ssh=host"], 3)])
def test_workers_are_counted_as_xdist_counts_them(tx, workers):
    from pytest_msprobe.glue.workers import planned_workers

    config = types.SimpleNamespace(option=types.SimpleNamespace(dist="load", tx=tx, collectonly=False))
    assert planned_workers(config) == workers
