"""Text from a dump on its way out, to a terminal or a CSV cell: shown, never obeyed.

An entry name, a data_name or an exception that quotes them is text from a file we did not
write. Control characters (a terminal's escape sequences, a NUL, a newline that starts a
new CSV line), bidirectional overrides (which reorder what a reader sees) and lone
surrogates (which no UTF-8 file can hold) are written as backslash escapes. `escape` is
reversible (backslashes are doubled), so a CSV cell or a test name reads back as the
name it came from; `printable` leaves backslashes alone, for lines only people read.
No pytest, no framework.
"""

from __future__ import annotations

import re

_UNSAFE = "\x00-\x1f\x7f-\x9f\u200e\u200f\u202a-\u202e\u2066-\u2069\u2028\u2029\ud800-\udfff"
_CONTROL = re.compile(f"[{_UNSAFE}]")
_CONTROL_OR_BACKSLASH = re.compile(f"[{_UNSAFE}\\\\]")
_ESCAPED = re.compile(r"\\(?:(\\)|([nrt])|x([0-9a-f]{2})|u([0-9a-f]{4}))")
_SHORT = {"\n": "n", "\r": "r", "\t": "t"}
_SURROGATE = re.compile("[\ud800-\udfff]")


def _code(match: re.Match) -> str:
    char = match.group()
    if char == "\\":
        return "\\\\"
    if char in _SHORT:
        return "\\" + _SHORT[char]
    return f"\\x{ord(char):02x}" if ord(char) < 0x100 else f"\\u{ord(char):04x}"


def escape(text: str) -> str:
    """Unsafe characters as `\\n`, `\\x1b`, `\\u202e`, and `\\` as `\\\\`: reversed by unescape."""
    return _CONTROL_OR_BACKSLASH.sub(_code, text)


def unescape(text: str) -> str:
    def decode(match: re.Match) -> str:
        backslash, short, byte, unit = match.groups()
        if backslash:
            return "\\"
        if short:
            return {"n": "\n", "r": "\r", "t": "\t"}[short]
        return chr(int(byte or unit, 16))

    return _ESCAPED.sub(decode, text)


def printable(text: str) -> str:
    """For the terminal: unsafe characters escaped, the rest (backslashes too) as it is."""
    return _CONTROL.sub(_code, text)


def encodable(text: str) -> str:
    """Lone surrogates as `\\ud800`, the rest as it is: text any UTF-8 file or pipe takes.

    A `"\\ud800"` in a dump's JSON, or an undecodable byte read as `\\udcff`, is a str no
    encoder writes: a journal line, a result an xdist worker sends, would raise. Text crossing
    those is made encodable once; where it is shown it is escaped again (escape, printable).
    """
    return _SURROGATE.sub(_code, text)


def cut(text: str, limit: int, where: str = "") -> str:
    """At most `limit` characters: the start, and how much was left out (and where it is)."""
    if len(text) <= limit:
        return text
    keep = max(0, limit - len(f" ... [{len(text):,} more characters{where}]"))
    return f"{text[:keep]} ... [{len(text) - keep:,} more characters{where}]"
