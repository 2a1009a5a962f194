"""Which host a worker's gateway spec names, and a device pool per host."""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from pytest_msprobe.distributed import hosts


def test_the_ssh_value_names_the_host_and_popen_is_the_controllers():
    assert hosts.host_of("ssh=npu1//python=/opt/venv/bin/python//chdir=/shared/run") == "npu1"
    assert hosts.host_of("execmodel=main_thread_only//ssh_config=/c//ssh=-p 2202 npu1//python=p") == "npu1:2202"


@pytest.mark.parametrize("ssh, host", [
    ("-F cfg host0", "host0"),
    ("-F cfg -p2202 -o StrictHostKeyChecking=no root@npu1", "root@npu1:2202"),
    ("-vCp 2201 npu2", "npu2:2201"),
    ("-i key -l admin npu3", "npu3"),
    ("npu4", "npu4"),
    ("-p 2202", "-p 2202"),  # no destination: the text itself still names it
])
def test_a_host_is_named_by_its_ssh_destination(ssh, host):
    assert hosts.host_of(f"ssh={ssh}//python=p") == host
    assert hosts.host_of("popen") == hosts.host_of("popen//chdir=/tmp/x") == hosts.LOCAL
    assert hosts.host_of("socket=10.0.0.5:8888") == "socket 10.0.0.5:8888"
    assert hosts.is_remote("ssh=npu1") and not hosts.is_remote("popen//chdir=/x")


def test_workers_are_counted_per_host_as_xdist_expands_tx():
    tx = ["8*ssh=npu1//python=p", "4*ssh=npu2//python=p", "ssh=npu1//python=q", "2*popen"]
    assert hosts.plan(tx) == {"npu1": 9, "npu2": 4, hosts.LOCAL: 2}
    assert len(hosts.expand(tx)) == 15


def test_each_host_hands_out_its_own_ids():
    pools = hosts.HostPools([0, 1])
    assert [pools.allocate("npu1", w) for w in ("gw0", "gw1")] == [0, 1]
    assert [pools.allocate("npu2", w) for w in ("gw2", "gw3")] == [0, 1]  # the same ids, of another host
    assert pools.release("gw1") == 1
    assert pools.allocate("npu1", "gw4") == 1  # gw1's replacement, on gw1's host
    assert pools.host("gw4") == "npu1" and pools.release("gw9") is None


@given(st.lists(st.tuples(st.booleans(), st.sampled_from(["a", "b", "c"]), st.integers(0, 20)), max_size=80))
def test_live_workers_of_one_host_never_share_an_id(events):
    pools = hosts.HostPools([0, 1, 2])
    live: dict[str, str] = {}
    for n, (start, host, pick) in enumerate(events):
        on_host = [w for w, h in live.items() if h == host]
        if start and len(on_host) < 3:
            pools.allocate(host, f"gw{n}")
            live[f"gw{n}"] = host
        elif live:
            worker = sorted(live)[pick % len(live)]
            pools.release(worker)
            del live[worker]
        for host_name in "abc":
            held = [pools.pools[host_name].holders[w] for w, h in live.items() if h == host_name]
            assert len(set(held)) == len(held)


def test_local_paths_outside_the_rsync_roots_are_the_arguments_xdist_refuses(tmp_path):
    dump = tmp_path / "dump.json"
    dump.write_text("{}")
    root = Path(hosts.__file__).parent
    args = ["--msprobe-dump", str(dump), f"--msprobe-dump={dump}", str(root / "hosts.py"), "-k", "relu"]
    assert hosts.rewritten_paths(args, [root]) == [str(dump)]
