"""mkdocs hook: the options page's table, written from the plugin's own option table.

The rows come from what `pytest_addoption` registers (the flags, their help and defaults) and
the ini keys beside them, so the docs and `pytest --help` can never drift apart.
"""

from __future__ import annotations

from typing import Any

from _pytest.config.argparsing import Parser

PLACEHOLDER = "{{ options_table }}"


def options_table() -> str:
    from pytest_msprobe import plugin

    parser = Parser(_ispytest=True)
    plugin.pytest_addoption(parser)
    rows = ["| option | ini key | meaning |", "|---|---|---|"]
    inis = dict(parser._inidict)
    for option in parser.getgroup("msprobe").options:
        attrs = option.attrs()
        flag = option.names()[0]
        metavar = attrs.get("metavar")
        if attrs.get("action") == "store_const":
            shown = f"`{flag}`"
        else:
            shown = f"`{flag} {metavar or attrs.get('dest', '').upper().removeprefix('MSPROBE_')}`"
        ini = attrs.get("dest", "")
        rows.append(f"| {shown} | `{ini}` | {_cell(attrs.get('help', ''))} |")
        inis.pop(ini, None)
    for ini, (help_text, _type, _default) in inis.items():
        rows.append(f"| | `{ini}` | {_cell(help_text)} |")
    return "\n".join(rows)


def _cell(text: str) -> str:
    return text.replace("|", "\\|").replace("<", "&lt;").replace(">", "&gt;")


def on_page_markdown(markdown: str, **kwargs: Any) -> str:
    if PLACEHOLDER in markdown:
        markdown = markdown.replace(PLACEHOLDER, options_table())
    return markdown
