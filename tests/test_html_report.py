"""The HTML report (--msprobe-html, python -m pytest_msprobe.report, the merge's --html): the page's
structure and content, its samples, and runs on a real dump with planted faults."""

from __future__ import annotations

import json
import math
import shutil
import subprocess
import sys
from html.parser import HTMLParser
from pathlib import Path

import deficits as d
import numpy as np
import pytest

from conftest import DUMPS, read_csv, run_msprobe
from pytest_msprobe import report as report_cli
from pytest_msprobe.judging.samples import ULP_EDGES, figure_samples, ulp
from pytest_msprobe.reports import html
from pytest_msprobe.results import ERROR, PASS, SKIP, WARNING, CallSite, EntryResult, OutputResult

pytest.importorskip("plotly")

HOSTILE = "</script><script>alert(1)</script>"
MANIFEST = {
    "plugin": "0.1.0",
    "dump": {"path": "/d/dump.json", "sha256": "ab" * 32, "api_calls": 4},
    "settings": {"standard": "basic", "cosine": 0.99, "max_abs_err": 1e-4, "device": "cpu", "mode": "real"},
}


class Page(HTMLParser):
    """The tags of a page: each start tag with its attributes, and the text inside each element with an id."""

    def __init__(self, text: str):
        super().__init__()
        self.tags: list[tuple[str, dict[str, str]]] = []
        self.feed(text)

    def handle_starttag(self, tag, attrs):
        self.tags.append((tag, {k: v or "" for k, v in attrs}))

    def ids(self) -> list[str]:
        return [attrs["id"] for _, attrs in self.tags if "id" in attrs]

    def with_attr(self, name: str) -> list[dict[str, str]]:
        return [attrs for _, attrs in self.tags if name in attrs]


def output(index, status, cosine=0.99999, mae=1e-5, severity=0.1, samples=None):
    return OutputResult(index, status, "torch.float64", "torch.float16", [4, 4], cosine, mae, mae * 10,
                        ["MaxAbsErr 0.001 >= 0.0001"] if status == ERROR else [], severity=severity, samples=samples)


def results() -> list[EntryResult]:
    rng = np.random.default_rng(1)
    bench = rng.normal(size=(64, 32))
    tested = bench + rng.normal(scale=1e-3, size=bench.shape)
    samples = figure_samples(tested, bench, "torch.float16")
    site = CallSite("train.py", 12, "forward", HOSTILE)
    return [
        EntryResult("Functional.linear.0", "forward", PASS, outputs=[output(0, PASS)], dump="/d/dump.json", position=0),
        EntryResult("Functional.linear.1", "forward", ERROR, outputs=[output(0, ERROR, 0.9, 1e-3, 12.0, samples)],
                    dump="/d/dump.json", position=2, call_site=site),
        EntryResult("Torch.matmul.0", "forward", ERROR, reason="the tested run on cpu raised RuntimeError",
                    dump="/d/dump.json", position=1),
        EntryResult("Functional.linear.1", "backward", WARNING, outputs=[output(0, WARNING, severity=0.9)],
                    dump="/d/dump.json", position=4),
        EntryResult("Functional.relu.0", "forward", SKIP, reason="unsupported", dump="/d/dump.json", position=3),
        EntryResult(f"Functional.{HOSTILE}.0", "forward", ERROR,
                    outputs=[output(0, ERROR, math.nan, math.nan, math.inf)], dump="/d/dump.json", position=5),
    ]


@pytest.fixture(scope="module")
def page() -> str:
    return html.build(html.from_results(results(), [MANIFEST], ["out/accuracy_checking_result_1.csv"]))


def figures(text: str) -> list[dict]:
    start = text.index("<script type='application/json' id='msprobe-figures'>")
    body = text[text.index(">", start) + 1 : text.index("</script>", start)]
    return json.loads(body)


def test_the_sections_come_most_telling_first(page):
    ids = Page(page).ids()
    sections = [i for i in ids if i in ("counts", "step", "apis", "entries", "details")]
    assert sections == ["counts", "step", "apis", "entries", "details"]
    assert "first-failure" in ids and "script-errors" in ids


def test_the_header_names_the_dump_settings_and_counts(page):
    assert "/d/dump.json (sha256 abababababab, 4 API calls)" in page
    assert "basic: Cosine &gt; 0.99 and MaxAbsErr &lt; 0.0001" in page
    counts = page[page.index("id='counts'") : page.index("</table>", page.index("id='counts'"))]
    assert "<th>forward</th><td class='s-error'>3 error</td>" in counts
    assert "<td class='s-SKIP'>1 SKIP</td>" in counts
    assert "<th>backward</th><td class='s-error'>0 error</td><td class='s-warning'>1 warning</td>" in counts


def test_every_failing_entry_has_a_row_linked_to_its_detail(page):
    parsed = Page(page)
    details = {attrs["id"]: attrs["data-entry"] for attrs in parsed.with_attr("data-entry")}
    links = [attrs["href"] for tag, attrs in parsed.tags if tag == "a"]
    failing = [r for r in results() if r.status in (ERROR, WARNING)]
    assert sorted(details.values()) == sorted(r.entry for r in failing)
    first = next(anchor for anchor, entry in details.items() if entry == "Torch.matmul.0.forward")
    assert sorted(links) == sorted([*(f"#{anchor}" for anchor in details), f"#{first}"])  # the first failure too
    rows = [attrs["data-status"] for attrs in parsed.with_attr("data-status")]
    assert sorted(rows) == sorted(r.status.value for r in results())  # every entry a row, SKIP and pass too


def test_the_first_failure_is_the_first_error_in_call_order(page):
    first = page[page.index("id='first-failure'") :]
    assert first.split("</p>")[0].count("Torch.matmul.0.forward") == 1  # position 1, before linear.1 at 2
    step = figures(page)[0]
    assert [shape["x0"] for shape in step["layout"]["shapes"] if shape.get("type") == "line" and shape["x0"] == 1]


def test_the_step_places_every_entry_by_its_ratio_on_a_log_axis(page):
    step = figures(page)[0]
    assert step["layout"]["yaxis"]["type"] == "log"
    by_name = {trace["name"].split(" ")[0]: trace for trace in step["data"] if trace.get("name")}
    assert set(by_name) == {"error", "warning", "pass", "SKIP"}
    error = by_name["error"]
    assert len(error["x"]) == 3 and error["marker"]["color"] == "#d62728"
    ys = dict(zip(error["x"], error["y"]))
    top = 10 ** step["layout"]["yaxis"]["range"][1]
    assert ys[2] == 12.0  # its worst output's share of its budget
    assert ys[1] > 12 and ys[5] > 12 and ys[1] < top  # no output judged, NaN: beyond any budget, at the top
    assert by_name["SKIP"]["y"] == [html.html_figures.FLOOR]
    hover = dict(zip(error["x"], error["text"]))
    assert "Functional.linear.1.forward" in hover[2] and "train.py:12 in forward" in hover[2]


def test_the_rollup_counts_calls_and_statuses_by_api(page):
    table = page[page.index("id='api-table'") : page.index("</table>", page.index("id='api-table'"))]
    row = table[table.index("<td>Functional.linear</td>") :].split("</tr>")[0]
    cells = [cell.split(">", 1)[1] for cell in row.split("</td>")[:-1]]
    assert cells == ["Functional.linear", "2", "1", "1", "1", "0", "12"]  # 2 calls, 3 entries, worst 12


def test_a_failing_output_shows_its_samples_as_figures_and_its_worst_elements(page):
    specs = figures(page)
    scatter = next(spec for spec in specs if spec["data"][0]["type"] == "scattergl")
    assert len(scatter["data"][0]["x"]) == 2000
    assert {trace["name"] for trace in scatter["data"][1:]} == {"1 ULP of float16", "MaxAbsErr < 0.0001"}
    histogram = next(spec for spec in specs if spec["data"][0]["type"] == "bar")
    assert sum(histogram["data"][0]["y"]) == 64 * 32
    assert "<caption>worst elements</caption>" in page


def test_the_page_needs_no_network_and_dump_text_stays_text(page):
    parsed = Page(page)
    assert not [tag for tag, attrs in parsed.tags if tag in ("link", "img", "iframe") or "src" in attrs]
    assert all(attrs["href"].startswith("#") for tag, attrs in parsed.tags if tag == "a")
    assert [tag for tag, _ in parsed.tags].count("script") == 4  # errors, figures, plotly, the page's own
    assert HOSTILE not in page and html.esc(HOSTILE) in page
    assert "<style>" in page and "Plotly" in page
    assert "without its journal" not in page  # every ratio is the standard's own


def test_samples_are_bounded_and_count_every_element_in_ulp():
    rng = np.random.default_rng(0)
    bench = rng.normal(size=(500, 400))
    tested = (bench + rng.normal(scale=1e-4, size=bench.shape)).astype(np.float32).astype(np.float64)
    tested[123, 45] = bench[123, 45] + 1.0
    tested[7, 0] = math.nan
    bench[8, 0] = math.nan
    found = figure_samples(tested, bench, "torch.float32", points=1500)
    assert len(found["bench"]) == len(found["error"]) == 1500
    assert found["total"] == 500 * 400 - 2 == sum(found["ulp_counts"])
    assert found["worst"][0]["index"] == [123, 45]
    assert len(json.dumps(found)) < 80_000
    assert len(found["ulp_edges"]) == len(ULP_EDGES) and found["ulp_edges"][-1] is None  # JSON has no inf


@pytest.mark.parametrize(
    "dtype, value, spacing",
    [("torch.bfloat16", 1.0, 2**-7), ("torch.float16", 1.5, 2**-10), ("torch.float16", 0.0, 2**-24),
     ("torch.float16", 2**-20, 2**-24), ("torch.float32", 3.0, 2**-22), ("torch.float64", 1.0, 2**-52)],
)
def test_ulp_is_the_dtypes_spacing_at_the_value(dtype, value, spacing):
    assert ulp(np.array([value]), dtype)[0] == spacing


def test_no_samples_where_there_is_nothing_elementwise():
    assert figure_samples(np.zeros(3), np.zeros(4), "torch.float32") is None
    assert figure_samples(np.full(3, math.nan), np.zeros(3), "torch.float32") is None
    assert figure_samples(np.arange(3), np.arange(3), "torch.int64") is None


@pytest.mark.slow
def test_a_run_without_the_option_never_imports_plotly():
    code = (
        "import sys, pytest_msprobe.plugin, pytest_msprobe.glue.reporter, pytest_msprobe.checking.check, "
        "pytest_msprobe.reports.html, pytest_msprobe.report; print('plotly' in sys.modules)"
    )
    found = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert found.stdout.strip() == "False"


# -- real runs --------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def faulty(tmp_path_factory) -> tuple[Path, list[d.Planted]]:
    """examples/pt_tensor_L1 with deficient kernels planted in three entries' recorded outputs."""
    plan = [
        ("Functional.conv2d.0.forward", "tf32"),
        ("Functional.layer_norm.0.forward", "rsqrt12"),
        ("Functional.gelu.0.forward", "gelu_tanh"),
    ]
    target = tmp_path_factory.mktemp("faulty") / "pt_tensor_L1"
    planted = d.build_corpus(DUMPS["pt_tensor_L1"], target, plan)
    return target / "dump.json", planted


def failing_entries(folder: Path) -> set[str]:
    found = set()
    for row in read_csv(folder, "result"):
        for direction, column in (("forward", "Forward Test Success"), ("backward", "Backward Test Success")):
            if row[column] == "error":
                found.add(f"{row['API Name']}.{direction}")
    return found


@pytest.mark.slow
def test_a_run_with_faults_writes_the_page_with_every_failing_entry(pytester, faulty):
    dump, planted = faulty
    result = run_msprobe(pytester, dump, "--msprobe-html", "report/run.html", device="recorded")
    assert result.ret == 1
    path = pytester.path / "report" / "run.html"
    result.stdout.fnmatch_lines([f"html:    {path}"])
    page = path.read_text(encoding="utf-8")
    failing = failing_entries(pytester.path / "out")
    assert {p.entry for p in planted if p.expected == "error"} <= failing
    details = {attrs["data-entry"] for attrs in Page(page).with_attr("data-entry")}
    assert failing <= details
    sampled = [spec for spec in figures(page) if spec["data"][0]["type"] == "scattergl"]
    assert len(sampled) >= len(failing)  # every failing output drawn from its samples
    # The same pair read back by the CLI gives the same entries, its journal the same samples; the
    # journal is left as it is, a torn last line too (a run killed while writing it).
    journal = next((pytester.path / "out").glob("accuracy_checking_journal_*.jsonl"))
    with open(journal, "ab") as handle:
        handle.write(b'{"api": "Functional.torn')
    kept = journal.read_bytes()
    target = pytester.path / "again.html"
    assert report_cli.main([str(next((pytester.path / "out").glob("accuracy_checking_result_*.csv"))),
                            "--html", str(target)]) == 0
    again = target.read_text(encoding="utf-8")
    assert {attrs["data-entry"] for attrs in Page(again).with_attr("data-entry")} == details
    assert len([s for s in figures(again) if s["data"][0]["type"] == "scattergl"]) == len(sampled)
    assert journal.read_bytes() == kept


@pytest.mark.slow
def test_the_ini_key_writes_the_page_and_a_run_without_it_keeps_no_samples(pytester, faulty):
    shutil.copytree(faulty[0].parent, pytester.path / "faulty")  # under the ini file's folder, the rootdir
    dump = pytester.path / "faulty" / "dump.json"
    pytester.makeini("[pytest]\nmsprobe_html = ini.html\n")
    run_msprobe(pytester, dump, device="recorded")
    assert (pytester.path / "ini.html").is_file()
    pytester.makeini("[pytest]\n")
    run_msprobe(pytester, dump, device="recorded", out="plain")
    journal = next((pytester.path / "plain").glob("accuracy_checking_journal_*.jsonl")).read_text()
    assert '"samples": null' in journal and '"samples": {' not in journal


@pytest.mark.slow
def test_the_cli_reads_a_pair_without_its_journal_from_the_csvs_alone(pytester, copy_dump, capsys):
    run_msprobe(pytester, copy_dump("pt_tensor_L1"), device="cpu")
    result = next((pytester.path / "out").glob("accuracy_checking_result_*.csv"))
    next((pytester.path / "out").glob("accuracy_checking_journal_*.jsonl")).unlink()
    assert report_cli.main([str(result), "--html", str(pytester.path / "r.html")]) == 0
    page = (pytester.path / "r.html").read_text(encoding="utf-8")
    details = {attrs["data-entry"] for attrs in Page(page).with_attr("data-entry")}
    assert details == failing_entries(pytester.path / "out") and len(details) == 6
    assert "read back from a CSV pair without its journal: their ratio is basic's" in page
    first = page[page.index("First failure in call order: ") :]
    link, after = first.split("</a>")[:2]
    assert link.endswith(">Torch.matmul.1.forward") and after.startswith(" (entry 19)")
    assert f"html: {pytester.path / 'r.html'} (66 entries)" in capsys.readouterr().out


def test_the_cli_refuses_what_is_not_a_result_pair_naming_the_file(pytester, copy_dump, capsys):
    target = str(pytester.path / "r.html")
    assert report_cli.main([str(pytester.path / "missing.csv"), "--html", target]) == 2
    assert "missing.csv: no such result CSV" in capsys.readouterr().err
    run_msprobe(pytester, copy_dump("pt_tensor_L1"), "-k", "relu", device="cpu")
    details = next((pytester.path / "out").glob("accuracy_checking_details_*.csv"))
    assert report_cli.main([str(details), "--html", target]) == 2
    assert f"{details}: not an accuracy_checking_result CSV" in capsys.readouterr().err
    details.unlink()
    result = next((pytester.path / "out").glob("accuracy_checking_result_*.csv"))
    assert report_cli.main([str(result), "--html", target]) == 2
    err = capsys.readouterr().err
    assert f"{details}: no details CSV beside the result CSV {result.name}" in err and "Traceback" not in err
    assert not (pytester.path / "r.html").exists()


@pytest.mark.slow
def test_the_cli_as_a_command_exits_2_without_a_traceback(tmp_path):
    found = subprocess.run([sys.executable, "-m", "pytest_msprobe.report", str(tmp_path / "x.csv"), "--html",
                            str(tmp_path / "r.html")], capture_output=True, text=True)
    assert found.returncode == 2 and "x.csv: no such result CSV" in found.stderr and "Traceback" not in found.stderr


@pytest.mark.slow
def test_under_xdist_the_samples_reach_the_controller(pytester, faulty):
    pytest.importorskip("xdist")
    dump, _ = faulty
    result = run_msprobe(pytester, dump, "-n", "2", "--msprobe-html", "x.html", device="recorded", subprocess=True)
    assert result.ret == 1
    page = (pytester.path / "x.html").read_text(encoding="utf-8")
    failing = failing_entries(pytester.path / "out")
    assert {attrs["data-entry"] for attrs in Page(page).with_attr("data-entry")} == failing
    assert len([s for s in figures(page) if s["data"][0]["type"] == "scattergl"]) >= len(failing)


@pytest.mark.slow
def test_merged_shards_get_one_page(pytester, faulty, capsys):
    pytest.importorskip("pytest_split")
    from pytest_msprobe.reports import merge

    dump, _ = faulty
    for group in (1, 2):
        run_msprobe(pytester, dump, "--splits", "2", "--group", str(group), out=f"shard{group}", device="recorded")
    shards = [str(pytester.path / f"shard{group}") for group in (1, 2)]
    target = pytester.path / "merged.html"
    assert merge.main([*shards, "--out", str(pytester.path / "merged"), "--html", str(target)]) == 1
    assert f"html:    {target}" in capsys.readouterr().out
    page = target.read_text(encoding="utf-8")
    assert {attrs["data-entry"] for attrs in Page(page).with_attr("data-entry")} == failing_entries(
        pytester.path / "merged"
    )
    assert str(next((pytester.path / "merged").glob("accuracy_checking_result_*.csv"))) in page


@pytest.mark.slow
def test_a_pytest_html_row_of_a_failing_item_carries_its_message_and_details(pytester, faulty):
    pytest.importorskip("pytest_html")
    dump, _ = faulty
    run_msprobe(pytester, dump, "--html", "ph/pytest.html", "--msprobe-html", "m/report.html", device="recorded")
    theirs = (pytester.path / "ph" / "pytest.html").read_text(encoding="utf-8")
    blob = next(attrs["data-jsonblob"] for attrs in Page(theirs).with_attr("data-jsonblob"))
    tests = json.loads(blob)["tests"]
    ours = Page((pytester.path / "m" / "report.html").read_text(encoding="utf-8"))
    anchors = {attrs["data-entry"]: attrs["id"] for attrs in ours.with_attr("data-entry")}
    failing = failing_entries(pytester.path / "out")
    assert failing
    for node_id, reports in tests.items():
        entry = node_id.split("::")[-1]
        extras = [extra for report in reports for extra in report["extras"] if extra["name"] == "msprobe"]
        if entry not in failing:
            assert not extras, node_id  # a passing item's row carries none
            continue
        (extra,) = extras
        assert extra["format_type"] == "html"
        assert f"href='../m/report.html#{anchors[entry]}'" in extra["content"]  # its details, figures included
        assert "MaxAbsErr" in extra["content"] and "<iframe" not in extra["content"]  # its outputs, not the page
    assert {node_id.split("::")[-1] for node_id in tests} >= failing


def test_without_plotly_the_option_is_a_usage_error_before_anything_runs(pytester, copy_dump, monkeypatch):
    monkeypatch.setattr(html.html_figures.importlib.util, "find_spec", lambda name, *a: None)
    result = run_msprobe(pytester, copy_dump("pt_tensor_L1"), "--msprobe-html", "r.html", device="cpu")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    assert ("ERROR: --msprobe-html: the HTML report draws its figures with plotly, which is not installed: "
            "pip install 'pytest-msprobe[html]'") in result.stderr.lines
    assert not (pytester.path / "r.html").exists()


@pytest.mark.slow
def test_a_resumed_run_writes_the_page_of_every_entry_of_its_pair(pytester, copy_dump):
    dump = copy_dump("pt_tensor_L1")
    run_msprobe(pytester, dump, "-x", device="cpu")  # stops at the first failure, 19 entries in
    result = next((pytester.path / "out").glob("accuracy_checking_result_*.csv"))
    run_msprobe(pytester, dump, "--msprobe-resume", str(result), "--msprobe-html", "r.html", device="cpu")
    page = Page((pytester.path / "r.html").read_text(encoding="utf-8"))
    assert len(page.with_attr("data-status")) == 66  # the earlier run's entries and this one's
    assert {attrs["data-entry"] for attrs in page.with_attr("data-entry")} == failing_entries(pytester.path / "out")


def test_a_page_that_cannot_be_written_leaves_nothing_behind(tmp_path):
    (tmp_path / "r.html").mkdir()  # a folder at its name
    with pytest.raises(OSError):
        html.write(tmp_path / "r.html", html.from_results(results(), [MANIFEST], []))
    assert [p.name for p in tmp_path.iterdir()] == ["r.html"]
