"""The HTML report in a real browser: headless Chromium, no network, loads the page of a run on a real
dump with planted faults; the test reads the rendered DOM and keeps screenshots (a laptop's and a
phone's screen) under its temporary folder."""

from __future__ import annotations

import shutil
import subprocess
import sys
from html.parser import HTMLParser
from pathlib import Path

import deficits as d
import hostile_files
import pytest

from conftest import DUMPS, read_csv, run_msprobe

pytest.importorskip("plotly")
CHROMIUM = next((found for name in ("chromium", "chromium-browser") if (found := shutil.which(name))), None)
pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(
        CHROMIUM is None,
        reason="headless Chromium is not installed (Debian's chromium package: .ci/run installs it where apt-get "
        "runs as root)",
    ),
]
# No network at all: every host unresolvable, every request through a proxy that is not there.
OFFLINE = ["--host-resolver-rules=MAP * ~NOTFOUND", "--proxy-server=127.0.0.1:9", "--proxy-bypass-list=<-loopback>"]
# Appended to a copy of the page: the page's own filter and sort, used as a reader would.
EXERCISE = """<script>
window.addEventListener('load', function () {
  var select = document.getElementById('status-filter');
  select.value = 'error'; select.dispatchEvent(new Event('change'));
  var shown = Array.prototype.filter.call(document.getElementById('entry-table').tBodies[0].rows,
                                          function (r) { return !r.hidden; }).length;
  var head = document.querySelectorAll('#entry-table thead th')[4];  // ratio
  head.click(); head.click();  // descending
  var first = document.getElementById('entry-table').tBodies[0].rows[0].getAttribute('data-status');
  var out = document.createElement('div'); out.id = 'exercised';
  out.setAttribute('data-shown', String(shown)); out.setAttribute('data-first', first);
  // The last output's figures are drawn once scrolled to (not before: the page draws them lazily).
  var figures = document.querySelectorAll('#details div.fig'), last = figures[figures.length - 1];
  out.setAttribute('data-before', last.getAttribute('data-drawn') || '');
  // Waited for, not timed: on a loaded machine the observer's frame can come seconds later.
  last.scrollIntoView();
  var waited = 0;
  (function settle() {
    var drawn = last.getAttribute('data-drawn') || '';
    if (drawn === '1' || waited >= 15000) {
      out.setAttribute('data-after', drawn); document.body.appendChild(out); return;
    }
    waited += 100; setTimeout(settle, 100);
  })();
});
</script>"""


class Dom(HTMLParser):
    def __init__(self, text: str):
        super().__init__()
        self.tags: list[tuple[str, dict[str, str]]] = []
        self.feed(text)

    def handle_starttag(self, tag, attrs):
        self.tags.append((tag, {k: v or "" for k, v in attrs}))

    def having(self, name: str) -> list[dict[str, str]]:
        return [attrs for _, attrs in self.tags if name in attrs]


def chromium(page: Path, profile: Path, *args: str) -> subprocess.CompletedProcess:
    command = [CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu", "--hide-scrollbars",
               f"--user-data-dir={profile}", "--virtual-time-budget=30000", *OFFLINE, *args, page.as_uri()]
    return subprocess.run(command, capture_output=True, text=True, timeout=120, check=True)


def test_chromium_draws_the_page_of_a_run_with_faults(pytester):
    """examples/pt_tensor_L1 with three deficient kernels planted in its recorded outputs, judged."""
    plan = [("Functional.conv2d.0.forward", "tf32"), ("Functional.layer_norm.0.forward", "rsqrt12"),
            ("Torch.matmul.0.forward", "tf32")]
    d.build_corpus(DUMPS["pt_tensor_L1"], pytester.path / "faulty", plan)
    result = run_msprobe(pytester, pytester.path / "faulty" / "dump.json", "--msprobe-html", "report.html",
                         device="recorded")
    assert result.ret == 1
    columns = (("forward", "Forward Test Success"), ("backward", "Backward Test Success"))
    failing = {f"{row['API Name']}.{direction}" for row in read_csv(pytester.path / "out", "result")
               for direction, column in columns if row[column] == "error"}
    assert {"Functional.conv2d.0.forward", "Functional.layer_norm.0.forward", "Torch.matmul.0.forward"} <= failing
    page = pytester.path / "report.html"
    exercised = pytester.path / "exercised.html"
    exercised.write_text(page.read_text(encoding="utf-8").replace("</body>", EXERCISE + "</body>"), encoding="utf-8")

    dom = Dom(chromium(exercised, pytester.path / "profile", "--window-size=1366,900", "--dump-dom").stdout)
    errors = [attrs for tag, attrs in dom.tags if attrs.get("class") == "script-error"]
    assert not errors, "the page raised script errors"
    assert {attrs["data-entry"] for attrs in dom.having("data-entry")} == failing  # every failing entry, by name
    figures = dom.having("data-fig")
    step = [attrs for attrs in figures if "step" in attrs.get("class", "")]
    assert step and all(attrs.get("data-drawn") == "1" for attrs in step)  # the step plot drawn
    assert len(figures) > 1 + len(failing)  # two a failing output: scatter and histogram
    (found,) = dom.having("data-shown")
    assert (found["data-before"], found["data-after"]) == ("", "1")  # drawn when scrolled to
    drawn = [attrs for attrs in figures if attrs.get("data-drawn") == "1"]
    assert sum(attrs.get("class") == "main-svg" for tag, attrs in dom.tags if tag == "svg") >= len(drawn) > 1
    assert int(found["data-shown"]) == len(failing)  # the status filter keeps the errors
    assert found["data-first"] in ("error", "warning")  # ratio, descending: a failure first

    # As a reviewer sees it: a laptop's screen and a phone's, kept beside the test's files. Headless
    # Chromium lays out no window narrower than 500 px: the phone's 390 px is a frame of that width.
    phone = pytester.path / "phone.html"
    phone.write_text(f"<body style='margin:0'><iframe src='{page.name}' style='width:390px;height:844px;border:0'>"
                     "</iframe></body>", encoding="utf-8")
    for name, shown, size in (("laptop", page, "1366,900"), ("phone", phone, "500,844")):
        shot = pytester.path / f"{name}.png"
        chromium(shown, pytester.path / f"profile-{name}", f"--window-size={size}", f"--screenshot={shot}")
        assert shot.stat().st_size > 20_000, f"{shot} is blank"


# Appended to a page: every figure drawn (scrolled to) and every point of every trace hovered, as a
# reader's mouse would, so that the text plotly shows only on hover is laid out too.
HOVER_ALL = """<script>
window.addEventListener('load', function () {
  // Every figure drawn from the page's own data (not waited for as it is scrolled to: that is the
  // test above's), then every point of every trace hovered.
  var specs = JSON.parse(document.getElementById('msprobe-figures').textContent);
  var figures = Array.prototype.slice.call(document.querySelectorAll('div.fig[data-fig]'));
  Promise.all(figures.map(function (f) {
    var spec = specs[Number(f.getAttribute('data-fig'))];
    return Plotly.newPlot(f, spec.data, spec.layout).then(function () { f.setAttribute('data-drawn', '1'); });
  })).then(function () {
    figures.forEach(function (f) {
      (f.data || []).forEach(function (trace, c) {
        (trace.x || []).forEach(function (_, p) {
          try { Plotly.Fx.hover(f, [{curveNumber: c, pointNumber: p}]); } catch (e) {}
        });
      });
    });
    var undrawn = figures.filter(function (f) { return f.getAttribute('data-drawn') !== '1'; }).length;
    var out = document.createElement('div'); out.id = 'exercised';
    out.setAttribute('data-undrawn', String(undrawn)); document.body.appendChild(out);
  });
});
</script>"""


def report_page(result_csv: Path, page: Path) -> str:
    written = subprocess.run([sys.executable, "-m", "pytest_msprobe.report", str(result_csv), "--html", str(page)],
                             capture_output=True, text=True, timeout=300)
    assert written.returncode == 0, written.stderr
    return page.read_text(encoding="utf-8")


def test_no_value_of_a_forged_pair_journal_or_manifest_runs_in_the_page(pytester):
    """A payload in every text field of a run's CSV pair, journal and manifest (hostile_files.payload:
    a tag, an attribute's end, a script's end, a link, a line separator): the pages of
    `python -m pytest_msprobe.report` (with the journal, and from the CSVs alone) show each as text, and
    none runs, every figure drawn and every point hovered."""
    plan = [("Functional.conv2d.0.forward", "tf32"), ("Torch.matmul.0.forward", "tf32")]
    d.build_corpus(DUMPS["pt_tensor_L1"], pytester.path / "faulty", plan)
    run_msprobe(pytester, pytester.path / "faulty" / "dump.json", "--msprobe-html", "run.html", device="recorded")
    hostile_files.forge_strings(pytester.path / "out")
    result_csv, _, journal, _ = hostile_files.pair_files(pytester.path / "out")
    pages = {"with its journal": report_page(result_csv, pytester.path / "journal.html")}
    journal.unlink()
    pages["from the CSVs alone"] = report_page(result_csv, pytester.path / "csv.html")
    for field in ("API Name", "Message", "Tested Dtype", "reason", "outputs[0].tested_dtype",
                  "call_site.code", "call_site.path", "notes[0]", "dump.path",
                  "settings.device", "settings.mode", "plugin", "stopped.why"):
        as_text = (f"&gt;{field}&lt;/a&gt;", f"\\u0026gt;{field}\\u0026lt;/a\\u0026gt;",  # in HTML, in a figure's JSON
                   # its start, where the text is cut (the reason a run stopped: 200 characters, as its terminal said)
                   f"&lt;img src=x onerror=\"document.documentElement.setAttribute('{hostile_files.PWNED}','{field}')")
        shown = [name for name, text in pages.items() if any(form in text for form in as_text)]
        assert shown, f"{field}: its payload is on no page"
        assert not [name for name, text in pages.items() if hostile_files.payload(field) in text]  # never raw
    for name, text in pages.items():
        exercised = pytester.path / "exercised.html"
        exercised.write_text(text.replace("</body>", HOVER_ALL + "</body>"), encoding="utf-8")
        dump = chromium(exercised, pytester.path / f"profile-{len(name)}", "--window-size=1366,900",
                        "--dump-dom").stdout
        dom = Dom(dump)
        (root,) = [attrs for tag, attrs in dom.tags if tag == "html"]
        assert hostile_files.PWNED not in root, f"{name}: a payload ran: {root[hostile_files.PWNED]}"
        made = [tag for tag, attrs in dom.tags if {"onerror", "onload", "srcdoc"} & set(attrs)]
        assert not made, f"{name}: elements of a payload were made: {made}"
        assert not [attrs for tag, attrs in dom.tags if attrs.get("class") == "script-error"], f"{name}: script errors"
        (exercised_div,) = dom.having("data-undrawn")
        assert exercised_div["data-undrawn"] == "0", name  # every figure drawn, then hovered
        assert dump.count("javascript:") >= 10, name  # the payloads are on the page, as text


def test_chromium_renders_pytest_html_s_report_of_200_failures(pytester, copy_dump):
    """pytest-html with this plugin (--html beside --msprobe-html): 206 failing rows. Each row held the
    whole msprobe page in a frame, and Chromium loaded it once a row: such a report did not render in
    300 s. A row holds its entry alone now, and the page renders within the helper's time limit, every
    row with its outputs, its ULP chart and its link."""
    from test_html_extras import many_failures

    dump = copy_dump("pt_tensor_L1")
    many_failures(dump, 200)
    result = run_msprobe(pytester, dump, "--html", "pytest.html", "--msprobe-html", "report.html", device="recorded")
    assert result.ret == 1 and result.parseoutcomes()["failed"] == 206
    page = pytester.path / "pytest.html"
    dom = Dom(chromium(page, pytester.path / "profile", "--window-size=1366,900", "--dump-dom").stdout)
    blocks = [attrs for tag, attrs in dom.tags if tag == "div" and attrs.get("class") == "msprobe"]
    assert len(blocks) == 206  # every failing row rendered, with its entry's block
    assert not [tag for tag, _ in dom.tags if tag == "iframe"]
    assert sum(tag == "svg" for tag, _ in dom.tags) >= 206  # a ULP chart a failing output
    links = [attrs["href"] for tag, attrs in dom.tags if tag == "a" and attrs.get("href", "").startswith("report.html#")]
    assert len(links) == 206


def test_no_value_of_a_forged_journal_runs_in_the_page_of_the_run_that_resumes_it(pytester):
    """The run's own page (--msprobe-html) after --msprobe-resume of a pair whose journal is forged (a
    payload in every text field of every line, hostile_files.forge_journal): the entries it held before,
    read back from that journal, are on the page beside those the resume ran; none of the payloads runs,
    every figure drawn and every point hovered."""
    plan = [("Functional.conv2d.0.forward", "tf32"), ("Torch.matmul.0.forward", "tf32")]
    d.build_corpus(DUMPS["pt_tensor_L1"], pytester.path / "faulty", plan)
    dump = pytester.path / "faulty" / "dump.json"
    stopped = run_msprobe(pytester, dump, "--maxfail", "3", device="recorded")
    assert stopped.ret == 1 and "entries never checked" in stopped.stdout.str()
    result_csv, _, journal, _ = hostile_files.pair_files(pytester.path / "out")
    # A journal a resume takes as the pair's: but for `stood_for_by` (a text that makes an entry one
    # --msprobe-filter left unchecked, which the resume runs again), every text field a payload.
    hostile_files.forge_journal(journal, keep=lambda path: hostile_files._kept(path) or path == "stood_for_by")
    resumed = run_msprobe(pytester, dump, "--msprobe-resume", str(result_csv), "--msprobe-html", "resumed.html",
                          device="recorded")
    assert resumed.ret == 1 and "19 deselected" in resumed.stdout.str()  # the 19 entries the journal held: not run
    text = (pytester.path / "resumed.html").read_text(encoding="utf-8")
    for field in ("reason", "outputs[0].tested_dtype", "outputs[0].reasons[0]", "call_site.code", "call_site.path",
                  "dump"):
        as_text = (f"&gt;{field}&lt;/a&gt;", f"\\u0026gt;{field}\\u0026lt;/a\\u0026gt;")  # in HTML, in a figure's JSON
        # A line's `dump` is not taken: a resumed pair's entries are its dump's (they were placed apart, and
        # a forged path beside the real one stopped the page: "Can't mix absolute and relative paths").
        assert any(form in text for form in as_text) == (field != "dump"), f"{field}: its payload is not on the page"
        assert hostile_files.payload(field) not in text  # never raw
    exercised = pytester.path / "exercised.html"
    exercised.write_text(text.replace("</body>", HOVER_ALL + "</body>"), encoding="utf-8")
    dumped = chromium(exercised, pytester.path / "profile", "--window-size=1366,900", "--dump-dom").stdout
    dom = Dom(dumped)
    (root,) = [attrs for tag, attrs in dom.tags if tag == "html"]
    assert hostile_files.PWNED not in root, f"a payload ran: {root[hostile_files.PWNED]}"
    assert not [tag for tag, attrs in dom.tags if {"onerror", "onload", "srcdoc"} & set(attrs)]
    assert not [attrs for tag, attrs in dom.tags if attrs.get("class") == "script-error"], "script errors"
    (exercised_div,) = dom.having("data-undrawn")
    assert exercised_div["data-undrawn"] == "0"  # every figure drawn, then hovered
    assert len({attrs["data-entry"] for attrs in dom.having("data-entry")}) >= 3  # failures held before, and new
