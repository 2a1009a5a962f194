"""The xdist workers' allocator: tcmalloc where it is installed and the user chose none."""

from __future__ import annotations

import os

import pytest

from conftest import run_msprobe
from pytest_msprobe.distributed import allocator

pytest.importorskip("xdist")
TCMALLOC = allocator.choose({}).library  # None where it is not installed


def test_the_users_ld_preload_is_their_choice_even_empty():
    assert allocator.choose({"LD_PRELOAD": "libjemalloc.so.2"}).library is None
    assert "libjemalloc.so.2" in allocator.choose({"LD_PRELOAD": "libjemalloc.so.2"}).text
    assert allocator.choose({"LD_PRELOAD": ""}) == allocator.Choice(None, "glibc's malloc (LD_PRELOAD is empty)")
    assert allocator.choose({}, platform="darwin").library is None


def test_the_preload_is_added_for_the_workers_and_taken_out_again():
    environ = {"PATH": "/bin"}
    allocator.preload(allocator.Choice("libtcmalloc_minimal.so.4", "tcmalloc"), environ)
    assert environ["LD_PRELOAD"] == "libtcmalloc_minimal.so.4"
    assert int(environ["TCMALLOC_LARGE_ALLOC_REPORT_THRESHOLD"]) > 2**40  # no line on stderr per large buffer
    allocator.unload(environ)
    assert environ == {"PATH": "/bin"}


def test_nothing_is_added_without_a_library_and_a_users_preload_is_never_taken_out():
    environ = {"LD_PRELOAD": "libmine.so"}
    allocator.preload(allocator.choose(environ), environ)
    allocator.unload(environ)
    assert environ == {"LD_PRELOAD": "libmine.so"}


RECORD_WORKER_ENVIRONMENT = """
import os


def pytest_sessionfinish(session):
    if hasattr(session.config, "workerinput"):
        with open("/proc/self/maps") as maps:
            mapped = any("libtcmalloc" in line for line in maps)
        with open(f"env_{os.getpid()}", "w") as handle:
            values = [os.environ.get(name, "unset") for name in ("LD_PRELOAD", "THP_MEM_ALLOC_ENABLE")]
            handle.write(" ".join([str(mapped), *values]))
"""


@pytest.mark.slow
@pytest.mark.parametrize(
    "user, seen",
    [
        ({}, f"{TCMALLOC is not None} unset 1"),
        ({"LD_PRELOAD": "", "THP_MEM_ALLOC_ENABLE": "0"}, "False  0"),
    ],
    ids=["defaults", "the user says"],
)
def test_workers_run_on_tcmalloc_and_huge_pages_unless_the_user_says(pytester, copy_dump, monkeypatch, user, seen):
    """What each worker has in effect: tcmalloc mapped (where installed) and torch's huge pages,
    unless the user's LD_PRELOAD (even empty) and THP_MEM_ALLOC_ENABLE say otherwise; and the
    preload out of its environment again, so nothing the entries would start inherits it. One
    run for both: a nested -n 2 run costs 11 CPU s."""
    for name in ("LD_PRELOAD", "THP_MEM_ALLOC_ENABLE"):
        monkeypatch.delenv(name, raising=False)
    for name, value in user.items():
        monkeypatch.setenv(name, value)
    pytester.makeconftest(RECORD_WORKER_ENVIRONMENT)  # imports no torch: the workers' plugin comes first
    result = run_msprobe(pytester, copy_dump("pt_tensor_L1"), "-n", "2", "-k", "relu", out="xdist", device="cpu")
    result.assert_outcomes(passed=2)
    if "LD_PRELOAD" in user:
        expected = "glibc's malloc (LD_PRELOAD is empty)"
    else:
        expected = f"tcmalloc ({TCMALLOC}, preloaded*" if TCMALLOC else allocator.choose({}).text
    result.stdout.fnmatch_lines([f"msprobe: the workers' allocator: {expected}"])
    values = [path.read_text() for path in pytester.path.glob("env_*")]
    assert len(values) == 2 and set(values) == {seen}
    assert os.environ.get("LD_PRELOAD") == user.get("LD_PRELOAD")  # the controller's environment as it was
