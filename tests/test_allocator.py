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


RECORD_ALLOCATOR = """
import os


def pytest_sessionfinish(session):
    if hasattr(session.config, "workerinput"):
        with open("/proc/self/maps") as maps:
            mapped = any("libtcmalloc" in line for line in maps)
        with open(f"alloc_{os.getpid()}", "w") as handle:
            handle.write(f"{mapped} {os.environ.get('LD_PRELOAD', 'unset')}")
"""


@pytest.mark.slow
@pytest.mark.skipif(TCMALLOC is None, reason="tcmalloc is not installed")
@pytest.mark.parametrize("user, seen", [(None, "True unset"), ("", "False ")])
def test_workers_run_on_tcmalloc_unless_the_user_says(pytester, copy_dump, monkeypatch, user, seen):
    monkeypatch.delenv("LD_PRELOAD", raising=False)
    if user is not None:
        monkeypatch.setenv("LD_PRELOAD", user)
    pytester.makeconftest(RECORD_ALLOCATOR)
    result = run_msprobe(pytester, copy_dump("pt_tensor_L1"), "-n", "2", "-k", "relu", out="xdist", device="cpu")
    result.assert_outcomes(passed=2)
    expected = f"tcmalloc ({TCMALLOC}, preloaded*" if user is None else "glibc's malloc (LD_PRELOAD is empty)"
    result.stdout.fnmatch_lines([f"msprobe: the workers' allocator: {expected}"])
    values = [path.read_text() for path in pytester.path.glob("alloc_*")]
    assert len(values) == 2 and set(values) == {seen}  # in effect, and out of what the entries would start
    assert os.environ.get("LD_PRELOAD") == user  # the controller's environment as it was
