"""Several hosts under one xdist controller, through real ssh: sshd instances on 127.0.0.1 stand
for the hosts (tests/sshd.py). The rows, each worker's host and device id, a dump a host cannot
read, a host lost mid-run. Skipped, saying why, where sshd cannot be had."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch
from sshd import Hosts

from conftest import read_csv, run_msprobe

pytest.importorskip("xdist")

RUN_S = 600  # a distributed run of a small dump on a loaded 2-core machine, workers starting over ssh

# A plugin the controller and every worker load (-p msprobe_probe; each host's chdir is on its
# workers' sys.path): each worker says which sshd it came through and the device id it was given;
# where MSPROBE_TEST_BLOCK is set (by that host's sshd), a worker stops in its first entry until
# its connection dies (its parent, the ssh session, is gone) and then exits, as a worker does on EOF;
# a worker that finished its session says so.
PROBE = '''
import os
import time
from pathlib import Path


def pytest_configure(config):
    workerinput = getattr(config, "workerinput", None)
    if workerinput is not None:
        host = os.environ.get("MSPROBE_TEST_HOST", "local")
        Path(f"worker_{workerinput['workerid']}").write_text(f"{host} {workerinput['msprobe_device_id']} {os.getpid()}")


def pytest_sessionfinish(session):
    workerinput = getattr(session.config, "workerinput", None)
    if workerinput is not None:
        Path(f"done_{workerinput['workerid']}").write_text("")


def pytest_runtest_call(item):
    workerinput = getattr(item.config, "workerinput", None)
    if workerinput is None or not os.environ.get("MSPROBE_TEST_BLOCK"):
        return
    parent, deadline = os.getppid(), time.monotonic() + 900
    Path(f"busy_{workerinput['workerid']}").write_text(str(os.getpid()))
    while os.getppid() == parent and time.monotonic() < deadline:
        time.sleep(0.05)
    os._exit(3)
'''


@pytest.fixture
def hosts(tmp_path_factory):
    started = Hosts(tmp_path_factory.mktemp("hosts"))
    yield started
    started.stop()


@pytest.fixture
def default_threads(monkeypatch):
    """The plugin's own thread count in every process (the in-process serial run sets this one's)."""
    monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
    monkeypatch.delenv("MKL_NUM_THREADS", raising=False)
    before = torch.get_num_threads()
    yield
    torch.set_num_threads(before)


def rows_by_api(folder: Path) -> dict:
    return {row["API Name"]: row for row in read_csv(folder, "result")}


def details_by_api(folder: Path) -> dict:
    by_api: dict = {}
    for row in read_csv(folder, "details"):
        by_api.setdefault(row["API Name"].rsplit(".", 3)[0], []).append(row)
    return by_api


def workers_of(folder: Path) -> dict:
    """worker -> (the host its sshd says, the device id it was given, its pid), from the probe's files."""
    found = {}
    for path in folder.glob("worker_*"):
        host, device_id, pid = path.read_text().split()
        found[path.name.split("_", 1)[1]] = (host, int(device_id), int(pid))
    return found


def distributed(pytester, hosts_specs, dump: Path, out: str, *args: str) -> list:
    """The command line of a run over ssh hosts: every path option written as one argument, as
    pytest-xdist needs for workers on other hosts."""
    tx = [arg for spec in hosts_specs for arg in ("--tx", spec)]
    return [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-p", "msprobe_probe", "--dist=load", *tx,
            f"--msprobe-dump={dump}", "--msprobe-device=cpu", f"--msprobe-out={out}", *args]


def chdirs(pytester, *names: str) -> list:
    """Each host's working folder, with the probe plugin in it (and one where the controller runs)."""
    (pytester.path / "msprobe_probe.py").write_text(PROBE)
    folders = []
    for name in names:
        folder = pytester.path / f"{name}_run"
        folder.mkdir()
        (folder / "msprobe_probe.py").write_text(PROBE)
        folders.append(folder)
    return folders


def run(command: list, cwd: Path, log: Path) -> subprocess.CompletedProcess:
    with open(log, "w") as out:
        done = subprocess.run(command, cwd=cwd, stdout=out, stderr=subprocess.STDOUT, timeout=RUN_S)
    return subprocess.CompletedProcess(command, done.returncode, log.read_text(), "")


@pytest.mark.slow
def test_two_hosts_write_the_rows_of_a_serial_run_each_worker_on_its_hosts_devices(
        pytester, copy_dump, hosts, default_threads):
    dump = copy_dump("pt_tensor_L1")
    serial = run_msprobe(pytester, dump, out="serial", device="cpu")
    host1, host2 = hosts.start("host1"), hosts.start("host2")
    one, two = chdirs(pytester, "host1", "host2")
    python = sys.executable
    command = distributed(pytester, [host1.spec(2, python, one), host2.spec(2, python, two)], dump, "hosts",
                          "--msprobe-devices=0,1")
    done = run(command, pytester.path, pytester.path / "hosts.log")
    assert done.returncode == serial.ret == 1, done.stdout[-3000:]  # the bf16 rounding failures, as serially
    assert "INTERNALERROR" not in done.stdout
    assert rows_by_api(pytester.path / "hosts") == rows_by_api(pytester.path / "serial")
    assert details_by_api(pytester.path / "hosts") == details_by_api(pytester.path / "serial")
    # The header lists the hosts, their workers and devices; each worker's line its host.
    lines = pytest.LineMatcher(done.stdout.splitlines())
    lines.fnmatch_lines([
        "msprobe: 4 xdist workers on 2 host(s), one device each from ids 0,1 of its own host",
        "msprobe: host host1: 2 workers, device ids 0,1",
        "msprobe: host host2: 2 workers, device ids 0,1",
    ])
    for worker, host in (("gw0", "host1"), ("gw1", "host1"), ("gw2", "host2"), ("gw3", "host2")):
        lines.fnmatch_lines([f"msprobe: [[]{worker}[]] host {host}, device cpu (id ?, unused on cpu), *"])
    # Each worker came through its own host's sshd and holds one of that host's ids, none twice there.
    seen = {**workers_of(one), **workers_of(two)}
    assert {worker: host for worker, (host, _, _) in seen.items()} == {
        "gw0": "host1", "gw1": "host1", "gw2": "host2", "gw3": "host2"}
    for host in ("host1", "host2"):
        assert sorted(device for h, device, _ in seen.values() if h == host) == [0, 1]


@pytest.mark.slow
@pytest.mark.parametrize("what", ["missing", "another dump"])
def test_a_dump_a_host_cannot_read_fails_the_entries_run_there_naming_host_and_path(
        pytester, copy_dump, hosts, default_threads, what):
    dump = copy_dump("pt_tensor_L1")
    run_msprobe(pytester, dump, out="serial", device="cpu")
    other = copy_dump("pt_stats_L1").parent if what == "another dump" else None
    host1 = hosts.start("host1")
    host2 = hosts.start("host2", hide=dump.parent, hide_with=other)  # host2 sees nothing, or pt_stats_L1, there
    one, two = chdirs(pytester, "host1", "host2")
    python = sys.executable
    command = distributed(pytester, [host1.spec(1, python, one), host2.spec(1, python, two)], dump, "hosts")
    done = run(command, pytester.path, pytester.path / "hosts.log")
    assert done.returncode == 1, done.stdout[-3000:]
    assert "INTERNALERROR" not in done.stdout and "Different tests" not in done.stdout
    serial, spread = rows_by_api(pytester.path / "serial"), rows_by_api(pytester.path / "hosts")
    assert set(spread) == set(serial)  # every API has its row, once
    on_host2 = {api for api, row in spread.items() if "on host host2" in row["Message"]}
    assert on_host2, "host2's worker ran entries"
    reason = (f"the dump cannot be read on host host2: {dump}: cannot be read: No such file or directory"
              if what == "missing" else f"{dump} on host host2 is not the dump the controller read there")
    for api in on_host2:
        assert reason in spread[api]["Message"]
        assert "error" in (spread[api]["Forward Test Success"], spread[api]["Backward Test Success"])
    for api in set(serial) - on_host2:
        assert spread[api] == serial[api]  # host1 checked them as a serial run does
    pytest.LineMatcher(done.stdout.splitlines()).fnmatch_lines([f"*: {reason}*"])


def wait_for(condition, deadline_s: float, what: str, process: subprocess.Popen, log: Path) -> None:
    deadline = time.monotonic() + deadline_s
    while not condition():
        if process.poll() is not None:
            raise AssertionError(f"the run ended before {what}:\n{log.read_text()[-3000:]}")
        if time.monotonic() > deadline:
            raise AssertionError(f"no {what} in {deadline_s} s:\n{log.read_text()[-3000:]}")
        time.sleep(0.1)  # between looks at a condition, not a wait for it


@pytest.mark.slow
def test_a_host_lost_mid_run_costs_only_its_entries_in_flight_and_resume_runs_the_rest(
        pytester, copy_dump, hosts, default_threads):
    dump = copy_dump("pt_tensor_L1")
    run_msprobe(pytester, dump, out="serial", device="cpu")
    serial = rows_by_api(pytester.path / "serial")
    host1 = hosts.start("host1")
    host2 = hosts.start("host2", env={"MSPROBE_TEST_BLOCK": "1"})  # its workers stop in their first entry
    one, two = chdirs(pytester, "host1", "host2")
    python = sys.executable
    command = distributed(pytester, [host1.spec(2, python, one), host2.spec(2, python, two)], dump, "hosts")
    log = pytester.path / "hosts.log"
    with open(log, "w") as out:
        process = subprocess.Popen(command, cwd=pytester.path, stdout=out, stderr=subprocess.STDOUT)
        try:
            # host2's workers stop in their first entry, with more queued behind it; host1's finish the rest.
            busy = [two / "busy_gw2", two / "busy_gw3"]
            done = [one / "done_gw0", one / "done_gw1"]
            wait_for(lambda: all(path.exists() for path in busy + done), RUN_S, "host1 done, host2 busy", process, log)
            host2.started += [int(path.read_text()) for path in busy]  # killed at the end, were they left
            host2.drop()
            process.wait(timeout=RUN_S)
        finally:
            if process.poll() is None:
                process.kill()
                process.wait()
    output = log.read_text()
    assert process.returncode == 1, output[-3000:]
    assert "INTERNALERROR" not in output
    lines = pytest.LineMatcher(output.splitlines())
    lines.fnmatch_lines(["msprobe: host host2 lost: no worker starts there in place of gw* the other hosts go on"])
    match = re.search(r"hosts lost: host2; (\d+) entries never ran: --msprobe-resume \S+ runs them", output)
    assert match, output[-3000:]
    never = int(match.group(1))
    assert never > 0  # what host2 had queued: host1 had finished, nobody could take it
    spread = rows_by_api(pytester.path / "hosts")
    # The two entries in flight on host2: error rows naming the worker, its device and its host.
    lost = {api: row for api, row in spread.items() if "was lost while checking this entry" in row["Message"]}
    assert sum(row["Message"].count("was lost while checking this entry") for row in lost.values()) == 2
    for row in lost.values():
        assert "of host host2: its connection ended" in row["Message"]
    # Every other API finished on host1 as serially, once (a CSV holds one row per API).
    for api, row in spread.items():
        if api not in lost:
            assert row == serial[api]
    # Those that never ran (queued on host2 when it went) run on resume; none runs twice.
    result = next((pytester.path / "hosts").glob("accuracy_checking_result_*.csv"))
    resumed = run_msprobe(pytester, dump, f"--msprobe-resume={result}", out="hosts", device="cpu")
    assert resumed.ret in (0, 1)
    ran = sum(v for k, v in resumed.parseoutcomes().items() if k in ("passed", "failed"))
    assert ran >= never  # those, and the other half of an API cut in two, run whole
    final = rows_by_api(pytester.path / "hosts")
    assert set(final) == set(serial)
    for api, row in final.items():
        assert row == (lost[api] if api in lost else serial[api])
    with open(result, encoding="utf-8-sig") as handle:
        assert len(handle.read().splitlines()) == 1 + len(serial)  # no API twice


def test_a_dump_path_given_as_two_arguments_to_ssh_workers_is_a_usage_error(pytester, copy_dump):
    dump = copy_dump("pt_tensor_L1")
    result = pytester.runpytest("-p", "no:cacheprovider", "--dist", "load", "--tx", "ssh=nowhere//python=python3",
                                "--msprobe-dump", str(dump), "--msprobe-device", "cpu")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines([f"*pytest-xdist cannot hand the argument {dump} to workers on other hosts*"
                                 "(--msprobe-dump=/shared/dump, --msprobe-out=out)*"])


def test_devices_apply_to_each_host(pytester, copy_dump):
    """-n-style counting is per host: 2 workers on each of 2 hosts fit ids 0,1; 3 on one do not."""
    dump = copy_dump("pt_tensor_L1")
    tx = ["--dist", "load", "--tx", "2*ssh=a//python=python3", "--tx", "3*ssh=b//python=python3"]
    result = pytester.runpytest("-p", "no:cacheprovider", *tx, f"--msprobe-dump={dump}",
                                "--msprobe-device=cpu", "--msprobe-devices=0,1")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["*3 xdist workers but 2 device ids (0,1): each worker needs its own device*"])


@pytest.mark.slow
def test_dumps_outside_the_rootdir_are_named_by_their_path(pytester, tmp_path_factory):
    """Every host names a dump as the controller does; outside the rootdir that is its path from
    the rootdir (pytest alone would name every such dump alike, `::<entry>`, and two ranks would
    share rows)."""
    from conftest import DUMPS

    outside = tmp_path_factory.mktemp("elsewhere") / "step0"
    for rank in ("rank0", "rank1"):
        shutil.copytree(DUMPS["pt_tensor_L1"], outside / rank)
    args = ["-p", "no:cacheprovider", f"--msprobe-dump={outside}", "--msprobe-device=recorded", "--msprobe-out=out"]
    listed = pytester.runpytest(*args, "--co", "-q")
    named = Path(os.path.relpath(outside, pytester.path)).as_posix()
    listed.stdout.fnmatch_lines([f"{named}/rank0/dump.json::Functional.relu.0.forward",
                                 f"{named}/rank1/dump.json::Functional.relu.0.forward"])
    pytester.runpytest(*args)
    assert [len(read_csv(pytester.path / "out" / rank, "result")) for rank in ("rank0", "rank1")] == [37, 37]
