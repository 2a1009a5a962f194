"""A failing item's row in pytest-html's report (--html): its entry alone, no script, no frame of the
msprobe page (which the browser loaded once per failure), a link to it instead."""

from __future__ import annotations

import json
from html.parser import HTMLParser

import numpy as np
import pytest

from pytest_msprobe.judging.samples import figure_samples
from pytest_msprobe.reports.html_extras import pytest_html_extras, ulp_chart
from pytest_msprobe.results import ERROR, PASS, CallSite, EntryResult, OutputResult

HOSTILE = "</table><script>alert(1)</script><iframe src=x>"


class Tags(HTMLParser):
    def __init__(self, text: str):
        super().__init__()
        self.tags: list[tuple[str, dict[str, str]]] = []
        self.texts: list[str] = []
        self.feed(text)

    def handle_starttag(self, tag, attrs):
        self.tags.append((tag, {k: v or "" for k, v in attrs}))

    def handle_data(self, data):
        self.texts.append(data)


def failing(samples=True) -> EntryResult:
    rng = np.random.default_rng(0)
    bench = rng.normal(size=(256, 64))
    tested = (bench + rng.normal(scale=1e-2, size=bench.shape)).astype(np.float32)
    drawn = figure_samples(tested, bench, "torch.bfloat16") if samples else None
    bad = OutputResult(0, ERROR, "torch.float64", "torch.bfloat16", [256, 64], 0.9999, 0.04, 0.3,
                       ["MaxAbsErr 0.04 >= 0.0001"], severity=400.0, samples=drawn)
    good = OutputResult(1, PASS, "torch.float64", "torch.bfloat16", [64], 1.0, 1e-6, 1e-6, severity=0.01)
    site = CallSite("/home/user/train/model.py", 31, "forward", f"z = self.fc2(y)  # {HOSTILE}")
    return EntryResult("Functional.linear.1", "forward", ERROR, outputs=[bad, good], call_site=site,
                       notes=[f"autocast applied {HOSTILE}"], dump="/d/dump.json", position=3)


def test_a_row_holds_its_outputs_figure_and_a_link_to_the_report_and_no_frame_or_script():
    (extra,) = pytest_html_extras(failing(), "../m/report.html")
    assert (extra["name"], extra["format_type"]) == ("msprobe", "html")
    tags = Tags(extra["content"])
    names = [tag for tag, _ in tags.tags]
    assert "iframe" not in names and "script" not in names
    assert HOSTILE in "".join(tags.texts)  # dump text shown as text, never markup
    (link,) = [attrs for tag, attrs in tags.tags if tag == "a"]
    assert link["href"].startswith("../m/report.html#d-")
    assert names.count("svg") == 1 and names.count("rect") == 11  # the failing output's ULP bins; none for the pass
    rows = [attrs for tag, attrs in tags.tags if tag == "tr"]
    assert len(rows) == 1 + 2 + 1 + 10  # outputs' head and rows, worst elements' head and rows
    assert "MaxAbsErr 0.04 >= 0.0001" in "".join(tags.texts) and "400x" in tags.texts
    assert len(extra["content"].encode()) < 12_000  # a few kB, whatever the output's size


def test_without_samples_or_a_page_a_row_holds_the_outputs_alone():
    (extra,) = pytest_html_extras(failing(samples=False), "")
    names = [tag for tag, _ in Tags(extra["content"]).tags]
    assert "svg" not in names and "a" not in names and "table" in names


def test_the_ulp_chart_counts_every_bin_and_labels_its_lower_edge():
    samples = {"ulp_edges": [0.0, 0.5, 1.0, 2.0**14, None], "ulp_counts": [5, 0, 3, 250_000]}
    tags = Tags(ulp_chart(samples))
    heights = [float(attrs["height"]) for tag, attrs in tags.tags if tag == "rect"]
    assert heights[1] == 0 and 0 < heights[0] < heights[3] and heights[2] < heights[0]  # log scale
    labels = [t for t in tags.texts if "ULP:" not in t]
    assert labels == ["0", "5", "0.5", "1", "3", "16k", "2e+05"]  # each bin's lower edge, the count above its bar
    titles = [t for t in tags.texts if "ULP:" in t]
    assert titles == ["0-0.5 ULP: 5 elements", "0.5-1 ULP: 0 elements", "1-16k ULP: 3 elements",
                      "16k-inf ULP: 250000 elements"]
    assert ulp_chart({}) == "" and ulp_chart({"ulp_edges": [0, 1], "ulp_counts": [1, 2]}) == ""


def test_the_extras_are_json_as_pytest_html_stores_them():
    json.dumps(pytest_html_extras(failing(), "r.html"))


@pytest.mark.slow
def test_pytest_html_rows_of_200_failures_stay_small(pytester, copy_dump):
    """The example's bf16 matmul called 200 times more: 206 failing rows, each its own few kB."""
    pytest.importorskip("pytest_html")
    pytest.importorskip("plotly")
    from conftest import run_msprobe

    many_failures(copy_dump("pt_tensor_L1"), 200)
    result = run_msprobe(pytester, pytester.path / "pt_tensor_L1" / "dump.json", "--html", "pytest.html",
                         "--msprobe-html", "report.html", device="recorded")
    assert result.ret == 1 and result.parseoutcomes()["failed"] == 206
    page = (pytester.path / "pytest.html").read_text(encoding="utf-8")
    assert "<iframe" not in page and len(page) < 206 * 12_000 + 500_000


def many_failures(dump, copies: int) -> None:
    """Torch.matmul.1.forward (bf16, over MaxAbsErr on rounding alone) called `copies` times more on
    the same tensors: real data, a failure each."""
    document = json.loads(dump.read_text())
    matmul = document["data"]["Torch.matmul.1.forward"]
    document["data"].update({f"Torch.matmul.{k}.forward": matmul for k in range(2, 2 + copies)})
    dump.write_text(json.dumps(document))
