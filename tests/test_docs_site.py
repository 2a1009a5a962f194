"""The documentation site as a newcomer reads it: its overview links every page, and in the mkdocs
theme, on a laptop's screen, no table and no formula is cut (headless Chromium reads the built pages)."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
DOCS = ROOT / "docs"
CHROMIUM = next((found for name in ("chromium", "chromium-browser") if (found := shutil.which(name))), None)


def test_the_overview_and_the_nav_link_every_page():
    pages = {path.name for path in DOCS.glob("*.md")} - {"index.md"}
    index = (DOCS / "index.md").read_text()
    linked = set(re.findall(r"\]\(([\w-]+\.md)(?:#[\w-]*)?\)", index))
    assert pages <= linked, f"docs/index.md links none of {sorted(pages - linked)}"
    nav = set(re.findall(r":\s*([\w-]+\.md)\s*$", (ROOT / "mkdocs.yml").read_text(), re.M))
    assert pages | {"index.md"} == nav, "mkdocs.yml's nav lists every page of docs/, and nothing else"


def test_the_overview_states_the_default_standard_and_why_it_fails_bf16():
    index = (DOCS / "index.md").read_text()
    section = index.split("## The default standard, and bf16", 1)[1].split("\n## ", 1)[0]
    text = " ".join(section.split())
    assert "Cosine > 0.99 and MaxAbsErr < 1e-4" in text and "`--msprobe-standard dtype`" in text
    assert "half a ULP of bf16: 0.004 at 1.0, forty times the MaxAbsErr bound" in text
    assert pytest.approx(0.004, rel=0.03) == 2.0**-8 and pytest.approx(40, rel=0.03) == 2.0**-8 / 1e-4


# Appended to a copy of each built page: every table and every formula (a ```text block) measured
# once the theme's script has wrapped the tables; the findings written into the DOM.
MEASURE = """<script>
window.addEventListener('load', function () { setTimeout(function () {
  var cut = [];
  document.querySelectorAll('.rst-content table, .rst-content pre code.language-text').forEach(function (el) {
    var box = el.closest('.wy-table-responsive') || el.closest('pre') || el;
    var wide = Math.max(el.scrollWidth, box.scrollWidth);
    if (wide > box.clientWidth + 1) cut.push([el.tagName, wide, box.clientWidth, el.textContent.trim().slice(0, 60)]);
  });
  var out = document.createElement('div'); out.id = 'measured';
  out.setAttribute('data-cut', JSON.stringify(cut)); document.body.appendChild(out);
}, 1000); });
</script>"""


@pytest.mark.slow
@pytest.mark.skipif(CHROMIUM is None, reason="headless Chromium is not installed (Debian's chromium package: "
                                             ".ci/run installs it where apt-get runs as root)")
def test_no_table_or_formula_is_cut_on_a_laptop_s_screen(tmp_path):
    pytest.importorskip("mkdocs")
    site = tmp_path / "site"
    subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict", "--quiet", "--site-dir", str(site)],
                   cwd=ROOT, check=True, timeout=300)
    pages = sorted(site.glob("*/index.html")) + [site / "index.html"]
    assert len(pages) == len(list(DOCS.glob("*.md")))
    formulas = 0
    for page in pages:
        text = page.read_text(encoding="utf-8")
        formulas += text.count("language-text")
        probe = page.with_name("measured.html")
        probe.write_text(text.replace("</body>", MEASURE + "</body>"), encoding="utf-8")
        dom = subprocess.run(
            [CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu", "--hide-scrollbars",
             f"--user-data-dir={tmp_path / 'profile'}", "--virtual-time-budget=5000", "--window-size=1366,900",
             "--host-resolver-rules=MAP * ~NOTFOUND", "--dump-dom", probe.as_uri()],
            capture_output=True, text=True, timeout=120, check=True,
        ).stdout
        found = re.search(r'id="measured" data-cut="([^"]*)"', dom)
        assert found, f"{page}: not measured"
        cut = json.loads(found.group(1).replace("&quot;", '"').replace("&amp;", "&"))
        assert not cut, f"{page.parent.name}: wider than the page: {cut}"
    assert formulas >= 1  # the dtype budget's formula is one of them
