"""The HTML report of a run that stopped early says so, as the terminal does (issue 47.5): how many
entries it never checked, which APIs it left without a row and how to finish them; it carries the
terminal's rounding-floor line; its table's message leaves the call site to its own column."""

from __future__ import annotations

import html
import re
import sys

import pytest

from conftest import run_msprobe
from pytest_msprobe.reports import manifest

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
    # A report written later from its files says the same (its manifest's `stopped`).
    (result_csv,) = (pytester.path / "out").glob("accuracy_checking_result_*.csv")
    reported = later(pytester, "report", str(result_csv), "--html", "later.html")
    assert reported.ret == 0 and reported.outlines[0] == said[0]
    assert text_of((pytester.path / "later.html").read_text(encoding="utf-8"), "stopped")[:2] == ["A partial run.", *said]


@pytest.mark.slow
def test_two_workers_stopped_by_x_say_it_alike_in_the_terminal_and_the_page(pytester, copy_dump):
    dump = copy_dump("pt_tensor_L1")
    result = run_msprobe(pytester, dump, "-x", "-n", "2", "--msprobe-html", "report.html", device="recorded")
    said = [line for line in msprobe_lines(result) if line.startswith("the run stopped early")]
    assert len(said) == 1 and re.fullmatch(r"the run stopped early \(stopping after \d failures\): \d+ of 66 entries "
                                           r"never checked \(.*\)", said[0])
    page = (pytester.path / "report.html").read_text(encoding="utf-8")
    assert text_of(page, "stopped")[1] == said[0]
    (result_csv,) = (pytester.path / "out").glob("accuracy_checking_result_*.csv")  # the controller's manifest
    assert later(pytester, "report", str(result_csv), "--html", "later.html").outlines[0] == said[0]


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


def later(pytester, module: str, *args: str):
    """`python -m pytest_msprobe.<module> ...` in the pytester folder, as a user runs it after the run."""
    return pytester.run(sys.executable, "-m", f"pytest_msprobe.{module}", *args)


@pytest.mark.slow
def test_a_report_and_a_merge_written_later_say_the_run_was_partial_until_a_resume_completes_it(pytester, copy_dump):
    """The files an interrupted run leaves (its manifest's `stopped`) carry what its terminal said: a report
    or a merge written from them afterwards says the run was partial and how many entries it never
    checked; once --msprobe-resume has run the rest, neither says it any more."""
    dump = copy_dump("pt_tensor_L1")
    result = run_msprobe(pytester, dump, "-x", device="cpu")
    assert result.ret == pytest.ExitCode.TESTS_FAILED
    said = [line for line in msprobe_lines(result) if line.startswith(("the run stopped early", "19 APIs unfinished"))]
    assert said[0].endswith(": 47 of 66 entries never checked (18 forward, 29 backward)") and len(said) == 2
    (result_csv,) = (pytester.path / "out").glob("accuracy_checking_result_*.csv")
    document = manifest.read(result_csv)
    assert document["stopped"] == {"why": "stopping after 1 failures", "selected": 66,
                                   "unchecked": {"forward": 18, "backward": 29}, "unfinished": 19}

    reported = later(pytester, "report", str(result_csv), "--html", "later.html")
    assert reported.ret == 0
    assert reported.outlines[:2] == said  # the terminal's words (the pair named as the run named it)
    assert reported.outlines[2] == "html: later.html (0 entries, a partial run)"  # every API cut short: no row
    page = (pytester.path / "later.html").read_text(encoding="utf-8")
    assert text_of(page, "stopped") == ["A partial run.", *said]
    assert counts(page)["backward"][-1] == "29 not checked" and counts(page)["forward"][-1] == "18 not checked"

    merged = later(pytester, "merge", "out", "--out", "merged", "--html", "merged.html")
    assert merged.ret == 1  # a partial merged run does not pass
    shard = said[1].replace(str(result_csv), f"out/{result_csv.name}")  # the pair as the merge found it
    assert said[0] in merged.outlines and shard in merged.outlines
    # The APIs without a row are the stopped shard's, not a lost shard's alone: the coverage line says both.
    coverage = "(a shard that stopped early, below, or one missing from the merge?)"
    assert any(line.endswith(coverage) for line in merged.outlines), merged.outlines
    merged_page = (pytester.path / "merged.html").read_text(encoding="utf-8")
    assert text_of(merged_page, "stopped") == ["A partial run.", said[0], shard]
    (merged_csv,) = (pytester.path / "merged").glob("accuracy_checking_result_*.csv")
    assert manifest.read(merged_csv)["stopped"] == document["stopped"]  # and so is a report of the merged pair
    of_merged = later(pytester, "report", str(merged_csv), "--html", "of-merged.html")
    assert of_merged.outlines[0] == said[0] and of_merged.outlines[1].endswith(f"--msprobe-resume {merged_csv} runs them")

    resumed = run_msprobe(pytester, dump, "--msprobe-resume", str(result_csv), device="cpu")
    assert resumed.ret == pytest.ExitCode.TESTS_FAILED  # its errors, none unchecked
    assert not [line for line in msprobe_lines(resumed) if "stopped early" in line]
    assert manifest.read(result_csv)["stopped"] is None
    whole = later(pytester, "report", str(result_csv), "--html", "whole.html")
    assert whole.ret == 0 and whole.outlines[-1].endswith("(66 entries)") and len(whole.outlines) == 1
    page = (pytester.path / "whole.html").read_text(encoding="utf-8")
    assert "id='stopped'" not in page and "not checked" not in page
    merged = later(pytester, "merge", "out", "--out", "merged-whole", "--html", "merged-whole.html")
    assert not [line for line in merged.outlines if "stopped early" in line or "unfinished" in line]
    assert "id='stopped'" not in (pytester.path / "merged-whole.html").read_text(encoding="utf-8")


@pytest.mark.slow
def test_a_report_of_every_pair_of_a_run_over_two_dumps_that_stopped_says_what_its_terminal_said(
    pytester, copy_dump, monkeypatch
):
    """Ctrl-C in the second dump: the first's pair lacks nothing, the second's most of its entries. The
    manifests together count every entry of both dumps, as the terminal did; the first pair alone is whole."""
    dumps = [copy_dump("pt_tensor_L1", "step0/rank0"), copy_dump("pt_tensor_L1", "step0/rank1")]
    # A plugin, not a conftest: a conftest above the dumps' folders is refused (a dump is data, never code).
    pytester.makepyfile(stop_at=STOP_AT.replace('item.name == os.environ["STOP_AT"]',
                                                '"rank1/" in item.nodeid and item.name == os.environ["STOP_AT"]'))
    monkeypatch.setenv("STOP_AT", "Tensor.float.0.forward")
    monkeypatch.setenv("PYTHONPATH", str(pytester.path))
    result = run_msprobe(pytester, dumps, "-p", "stop_at", device="recorded", subprocess=True)
    assert result.ret == pytest.ExitCode.INTERRUPTED
    said = [line for line in msprobe_lines(result) if line.startswith("the run stopped early")]
    assert said[0] == "the run stopped early (interrupted): 47 of 132 entries never checked (18 forward, 29 backward)"
    pairs = {pair.parent.name: pair for pair in (pytester.path / "out").rglob("accuracy_checking_result_*.csv")}
    assert manifest.read(pairs["rank0"])["stopped"] == {"why": "interrupted", "selected": 66, "unchecked": {},
                                                        "unfinished": 0}
    reported = later(pytester, "report", str(pairs["rank0"]), str(pairs["rank1"]), "--html", "both.html")
    assert reported.ret == 0 and reported.outlines[0] == said[0]
    assert reported.outlines[1].endswith(f"APIs unfinished when the run stopped, not written: --msprobe-resume "
                                         f"{pairs['rank1']} runs them")
    assert text_of((pytester.path / "both.html").read_text(encoding="utf-8"), "stopped")[1] == said[0]
    alone = later(pytester, "report", str(pairs["rank0"]), "--html", "rank0.html")  # that pair is whole
    assert alone.ret == 0 and alone.outlines == ["html: rank0.html (66 entries)"]
