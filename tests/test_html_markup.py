"""The one templating path of the HTML pages (reports/html_markup.py): whatever text comes in, it leaves
as text, in an element, an attribute, a link or a script's JSON."""

from __future__ import annotations

import json
from html.parser import HTMLParser

import pytest
from hypothesis import given
from hypothesis import strategies as st

from pytest_msprobe.reports.html_markup import Html, escape, json_script, tag, url
from pytest_msprobe.untrusted import printable

ANY_TEXT = st.text(st.characters(exclude_categories=()), max_size=80)


class Parsed(HTMLParser):
    """The elements, attributes and text a browser's tokenizer would see."""

    def __init__(self, text: str):
        super().__init__(convert_charrefs=True)
        self.starts: list[tuple[str, dict[str, str | None]]] = []
        self.text = ""
        self.feed(text)
        self.close()

    def handle_starttag(self, tag, attrs):
        self.starts.append((tag, dict(attrs)))

    def handle_data(self, data):
        self.text += data


@given(ANY_TEXT, ANY_TEXT)
def test_any_text_stays_text_in_an_element_and_an_attribute(text, attribute):
    parsed = Parsed(tag("p", {"title": attribute, "data-v": attribute}, text))
    assert [name for name, _ in parsed.starts] == ["p"]  # no element of the text's
    assert set(parsed.starts[0][1]) == {"title", "data-v"}  # no attribute of the text's
    assert parsed.starts[0][1]["title"] == printable(attribute)  # what a reader sees: the text, shown
    assert parsed.text == printable(text)


def test_html_is_written_as_it_is_and_everything_else_is_escaped():
    bold = tag("b", None, "<i>")
    assert bold == "<b>&lt;i&gt;</b>"
    assert Html("<p>{}</p>").format("<script>") == "<p>&lt;script&gt;</p>"
    assert Html("<p>{}</p>").format(bold) == "<p><b>&lt;i&gt;</b></p>"
    assert Html("<br>") + "<x>" == "<br>&lt;x&gt;" and "<x>" + Html("<br>") == "&lt;x&gt;<br>"
    assert Html(", ").join(["<a>", bold]) == "&lt;a&gt;, <b>&lt;i&gt;</b>"
    assert escape("\x1b[2J\u202e") == "\\x1b[2J\\u202e"  # control characters shown, never obeyed
    assert tag("td", {"class": None, "hidden": True, "data-x": 3}) == "<td hidden data-x='3'></td>"
    assert tag("td", {"data-v": Html("it's")}) == "<td data-v='it&#x27;s'></td>"  # Html's quotes too


@pytest.mark.parametrize("name", ["script onload=x", "a/b", "", "A"])
def test_element_and_attribute_names_are_the_codes_own(name):
    with pytest.raises(ValueError):
        tag(name)
    with pytest.raises(ValueError):
        tag("p", {name: "x"})


@pytest.mark.parametrize("target", ["javascript:alert(1)", "JavaScript:alert(1)", "data:text/html,x", "//evil/x",
                                    "https://evil/x", " javascript:alert(1)"])
def test_a_link_is_an_anchor_or_a_relative_path_never_a_scheme(target):
    found = None
    try:
        found = url(target)
    except ValueError:
        return
    assert ":" not in found.split("#")[0] and not found.startswith("//")  # percent-encoded: a path


def test_a_relative_link_keeps_its_path_and_anchor():
    assert url("#d-0123abcd") == "#d-0123abcd"
    assert url("../msprobe%20report.html#d-1") == "../msprobe%20report.html#d-1"
    assert url("#x' onmouseover='y") == "#x%27%20onmouseover%3D%27y"


def test_json_in_a_script_never_ends_it():
    data = {"text": "</script><script>alert(1)</script><!-- \u2028\u2029 & >", "n": [1.5, None]}
    written = json_script("figures", data)
    body = written[written.index(">") + 1 : written.rindex("</script>")]
    assert "<" not in body and ">" not in body and "&" not in body and "\u2028" not in body
    assert json.loads(body) == data
    with pytest.raises(ValueError):
        json_script("figures", {"x": float("nan")})
