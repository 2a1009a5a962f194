"""A text cell of the CSVs, written so that no spreadsheet runs it and no reader meets a raw
control character, and read back as written. Both layouts' writers and every reader use it."""

from __future__ import annotations

from ..untrusted import cut, escape, unescape

# A cell starting with one of these is run as a formula by spreadsheet programs (fullwidth
# forms too, in some locales); a leading `'` marks text, so a text starting with `'` gets one
# more and every cell reads back as written. Control characters never reach a cell (escaped).
_FORMULA_START = ("=", "+", "-", "@", "'", "\uff1d", "\uff0b", "\uff0d", "\uff20")
# Spreadsheet programs hold at most 32,767 characters a cell: a longer Message is cut there,
# every output's own message staying whole in its details row.
MAX_CELL = 32_000


def text_cell(value: object, limit: int = 0, where: str = "") -> str:
    """Dump data is untrusted: a name like `=HYPERLINK(...)` must stay text, and a newline,
    a NUL or a terminal escape must not start a row or reach a reader raw. untext undoes it
    (but for a cell cut at `limit` characters)."""
    text = escape("" if value is None else str(value))
    text = cut(text, limit - 1, where) if limit else text  # one left for the `'` a formula start takes
    return "'" + text if text.startswith(_FORMULA_START) else text


def untext(cell: str) -> str:
    """The text a text_cell was written from."""
    return unescape(cell.removeprefix("'"))
