"""The HTML report of a run that stopped early says so, as the terminal does (issue 47.5): how many
entries it never checked, which APIs it left without a row and how to finish them; it carries the
terminal's rounding-floor line; its table's message leaves the call site to its own column."""

from __future__ import annotations

import html
import re
from pathlib import Path

import pytest

from conftest import run_msprobe

pytest.importorskip("plotly")

# Ctrl-C as a user presses it: SIGINT to the process, in the entry named.
STOP_AT = """
import os, signal, time, pytest

@pytest.hookimpl(tryfirst=True)
def pytest_runtest_call(item):
    if item.name == os.environ["STOP_AT"]:
        os.kill(os.getpid(), signal.SIGINT)
        time.sleep(5)
"""


def text_of(page: str, element_id: str) -> list[str]:
    """The text of each <p> inside the element with that id (the page's own escaping undone)."""
    found = re.search(rf"<(\w+) id='{element_id}'>(.*?)</\1>", page, re.S)
    if not found:
        return []
    return [html.unescape(re.sub(r"<[^>]+>", "", p)) for p in re.findall(r"<p>(.*?)</p>", found.group(2), re.S)]


def counts(page: str) -> dict[str, list[str]]:
    table = re.search(r"<table class='counts' id='counts'>(.*?)</table>", page, re.S).group(1)
    rows = {}
    for row in re.findall(r"<tr>(.*?)</tr>", table, re.S):
        cells = [html.unescape(re.sub(r"<[^>]+>", "", c)) for c in re.findall(r"<t[hd][^>]*>(.*?)</t[hd]>", row)]
        rows[cells[0]] = cells[1:]
    return rows


def msprobe_lines(result) -> list[str]:
    return result.stdout.str().split("= msprobe =", 1)[1].splitlines()


@pytest.mark.slow
def test_a_run_stopped_by_x_says_what_it_never_checked_in_the_terminal_and_the_page(pytester, copy_dump):
    dump = copy_dump("pt_tensor_L1")
    result = run_msprobe(pytester, dump, "-x", "--msprobe-html", "report.html", device="cpu")
    assert result.ret == pytest.ExitCode.TESTS_FAILED
    said = [line for line in msprobe_lines(result) if line.startswith(("the run stopped early", "19 APIs unfinished"))]
    assert said[0] == ("the run stopped early (stopping after 1 failures): 47 of 66 entries never checked "
                       "(18 forward, 29 backward)")
    assert said[1].startswith("19 APIs unfinished when the run stopped, not written: --msprobe-resume ")
    page = (pytester.path / "report.html").read_text(encoding="utf-8")
    assert text_of(page, "stopped") == ["A partial run.", *said]  # the terminal's words, first in the page
    assert counts(page) == {
        "forward": ["1 error", "0 warning", "18 pass", "0 SKIP", "18 not checked"],
        "backward": ["0 error", "0 warning", "0 pass", "0 SKIP", "29 not checked"],  # it had no backward line
    }
    floor = [line for line in msprobe_lines(result) if "at the rounding floor" in line]
    assert floor and text_of_floor(page) == floor


def text_of_floor(page: str) -> list[str]:
    return [html.unescape(p) for p in re.findall(r"<p id='floor'>(.*?)</p>", page, re.S)]


@pytest.mark.slow
def test_an_interrupted_run_says_so_in_its_page(pytester, copy_dump, monkeypatch):
    """Ctrl-C in the 20th entry: the page says the run was interrupted and counts the entries left.
    A process of its own: the signal is the process's."""
    dump = copy_dump("pt_tensor_L1")
    pytester.makeconftest(STOP_AT)
    monkeypatch.setenv("STOP_AT", "Tensor.float.0.forward")
    result = run_msprobe(pytester, dump, "--msprobe-html", "report.html", device="recorded", subprocess=True)
    assert result.ret == pytest.ExitCode.INTERRUPTED
    said = [line for line in msprobe_lines(result) if line.startswith("the run stopped early")]
    assert said == ["the run stopped early (interrupted): 47 of 66 entries never checked (18 forward, 29 backward)"]
    page = (pytester.path / "report.html").read_text(encoding="utf-8")
    assert text_of(page, "stopped")[:2] == ["A partial run.", *said]


@pytest.mark.slow
def test_two_workers_stopped_by_x_say_it_alike_in_the_terminal_and_the_page(pytester, copy_dump):
    dump = copy_dump("pt_tensor_L1")
    result = run_msprobe(pytester, dump, "-x", "-n", "2", "--msprobe-html", "report.html", device="recorded")
    said = [line for line in msprobe_lines(result) if line.startswith("the run stopped early")]
    assert len(said) == 1 and re.fullmatch(r"the run stopped early \(stopping after \d failures\): \d+ of 66 entries "
                                           r"never checked \(.*\)", said[0])
    page = (pytester.path / "report.html").read_text(encoding="utf-8")
    assert text_of(page, "stopped")[1] == said[0]


def test_a_whole_run_s_page_says_nothing_of_a_stop_and_leaves_the_call_site_to_its_column(pytester, copy_dump):
    dump = copy_dump("pt_tensor_L1")
    result = run_msprobe(pytester, dump, "-k", "matmul or linear", "--msprobe-html", "report.html", device="recorded")
    assert result.ret == pytest.ExitCode.TESTS_FAILED
    page = (pytester.path / "report.html").read_text(encoding="utf-8")
    assert "id='stopped'" not in page and "not checked" not in page
    table = re.search(r"<table class='sortable' id='entry-table'>(.*?)</table>", page, re.S).group(1)
    failing = 0
    for row in re.findall(r"<tr data-status='(?:error|warning)'[^>]*>(.*?)</tr>", table, re.S):
        cells = [html.unescape(re.sub(r"<[^>]+>", "", c)) for c in re.findall(r"<td[^>]*>(.*?)</td>", row, re.S)]
        site, message = cells[7], cells[8]
        assert site.startswith("at /home/user/train/pt_dump.py:") and site not in message
        assert "MaxAbsErr" in message
        failing += 1
    assert failing >= 3
    floor = [line for line in msprobe_lines(result) if "at the rounding floor" in line]
    assert floor and text_of_floor(page) == floor
