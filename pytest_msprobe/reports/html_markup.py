"""The one way a value reaches an HTML page of the plugin: escaped by construction.

Every value on the report comes from a file a run wrote or read back (a CSV row, a journal line,
a manifest, a dump's names), any of which may be forged. `Html` is text that is already HTML (as
markupsafe's Markup: the page ships without a template engine); everything else that meets it is
escaped on its way in:

- `Html.format` escapes its arguments, `+` escapes what is added, `join` every part that is no Html;
- `tag` writes an element: its name and its attributes' names are the code's own (checked), every
  attribute value quoted and escaped, every child escaped unless it is Html;
- `url` is a link's target: a same-page anchor or a relative path, never a scheme (`javascript:`);
- `json_script` is data for a script: no `</script>`, `<!--` or U+2028 in it ends or changes it.

Text is made printable first (control characters and bidirectional overrides as escapes,
untrusted.printable), then HTML's own characters escaped (in an attribute, quotes too). No pytest.
"""

from __future__ import annotations

import html
import json
import re
import urllib.parse
from collections.abc import Iterable, Mapping
from typing import Any

from ..untrusted import printable

_NAME = re.compile(r"^[a-z][a-z0-9-]*$")
_VOID = frozenset(("br", "meta", "input", "img", "hr", "link"))
_NAMES: set[str] = set()  # the names checked so far
# What may follow `<` in JSON inside a script and end or change it; U+2028/9 end a line in older JS.
_SCRIPT_UNSAFE = {"<": "\\u003c", ">": "\\u003e", "&": "\\u0026", "\u2028": "\\u2028", "\u2029": "\\u2029"}
_SCRIPT_UNSAFE_RE = re.compile("[<>&\u2028\u2029]")


class Html(str):
    """Text that is HTML already: written as it is; anything else meeting it is escaped."""

    __slots__ = ()

    def __add__(self, other: object) -> Html:
        return Html(str.__add__(self, _text(other)))

    def __radd__(self, other: object) -> Html:
        return Html(str.__add__(_text(other), self))

    def format(self, *args: object, **kwargs: object) -> Html:
        return Html(str.format(self, *(escape(a) for a in args), **{k: escape(v) for k, v in kwargs.items()}))

    def join(self, parts: Iterable[object]) -> Html:
        return Html(str.join(self, [_text(part) for part in parts]))


def escape(value: object) -> Html:
    """value as HTML text: Html as it is, None as nothing, anything else printable and its `&`, `<`
    and `>` escaped (quotes are escaped where they end something: in attributes, `tag`)."""
    return value if isinstance(value, Html) else Html(_text(value))


def _text(value: object) -> str:
    """escape's text, as a str (Html as it is): what a page's parts are joined from."""
    if type(value) is str:
        return html.escape(printable(value), quote=False)
    if isinstance(value, Html):
        return str.__str__(value)
    if type(value) is int:  # a count, a position
        return str(value)
    return html.escape(printable("" if value is None else str(value)), quote=False)


def _attribute(value: object) -> str:
    """An attribute's value, to go between single quotes: escaped, its quotes too (Html's as well)."""
    return _text(value).replace("'", "&#x27;").replace('"', "&quot;")


def _check_name(name: str) -> None:
    """An element's or an attribute's name, checked to be one (the code's own, never a value)."""
    if not isinstance(name, str) or not _NAME.match(name):
        raise ValueError(f"not an element or attribute name: {name!r}")
    _NAMES.add(name)


def tag(name: str, attrs: Mapping[str, object] | None = None, *children: object) -> Html:
    """`<name a='v'>children</name>`: attribute values escaped (None: left out, True: bare), children
    escaped unless Html. A void element (br, meta, input) has no children and no end tag."""
    if name not in _NAMES:
        _check_name(name)
    start = "<" + name
    if attrs:
        for key, value in attrs.items():
            if key not in _NAMES:
                _check_name(key)
            if value is True:
                start += " " + key
            elif value is not None and value is not False:
                start += f" {key}='{_attribute(value)}'"
    if name in _VOID:
        return Html(start + ">")
    return Html(f"{start}>{''.join([_text(child) for child in children])}</{name}>")


def url(target: str) -> str:
    """A link's target as the page may hold it: `#anchor`, or a relative path (percent-encoded); a
    target naming a scheme or a host (`javascript:`, `//host`) is no link: ValueError."""
    if target.startswith("#"):
        return "#" + urllib.parse.quote(target[1:], safe="-_.")
    path, _, fragment = target.partition("#")
    parsed = urllib.parse.urlsplit(path)
    if parsed.scheme or parsed.netloc or path.startswith("//"):
        raise ValueError(f"not a relative link: {target[:100]!r}")
    quoted = urllib.parse.quote(path, safe="/%")
    return quoted + ("#" + urllib.parse.quote(fragment, safe="-_.") if fragment else "")


def json_script(element_id: str, data: Any) -> Html:
    """`<script type='application/json' id=...>` holding data: JSON whose `<`, `>`, `&` and line
    separators are escapes, so that nothing in a string of it ends the script or opens a comment.
    NaN and inf are not JSON: give data without them (ValueError)."""
    text = json.dumps(data, allow_nan=False, separators=(",", ":"), ensure_ascii=True)
    text = _SCRIPT_UNSAFE_RE.sub(lambda m: _SCRIPT_UNSAFE[m.group()], text)
    return tag("script", {"type": "application/json", "id": element_id}, Html(text))


def script(source: str) -> Html:
    """A script of the package's own (an asset, plotly.js): never text from a run."""
    if "</script" in source.lower():
        raise ValueError("a script holding </script> would end early")
    return tag("script", None, Html(source))


def style(source: str) -> Html:
    """A style sheet of the package's own."""
    if "</style" in source.lower():
        raise ValueError("a style holding </style> would end early")
    return tag("style", None, Html(source))
