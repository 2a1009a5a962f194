"""What a JSON parser does not say about a dump.json: entry names given twice, entries nested
too deep for it. Read from the bytes themselves; no torch, no pytest.

A parser keeps the last of two equal keys without a word, and gives up on a whole file when
one entry nests deeper than its limit (orjson: 1024 levels). The dump's other entries are
fine: this module finds the entry names written more than once, and cuts an entry nested too
deep out of the bytes (its body becomes null, its name and field are kept), so the rest parses.

The cheap test runs on every dump (a count over the bytes, and a look at the keys written
with escapes: about 0.1 s for 77 MB); the structural scan, which places every string and
bracket (numpy, about 1 s), only when the cheap test cannot vouch for the file
(bench/timing/results_dump_checks.md).
"""

from __future__ import annotations

import json
import re
from collections import Counter
from collections.abc import Iterable

import numpy as np

# The end of an API entry name used as a key: `...forward":`, `...backward":` (modules: `.forward.0":`).
_ENTRY_KEY_END = re.compile(rb'\.(?:forward|backward)(?:\.\d+)?"\s*:')
_ENTRY_NAME_END = re.compile(r"\.(?:forward|backward)(?:\.\d+)?$")
_QUOTE, _BACKSLASH, _COLON = 0x22, 0x5C, 0x3A
_OPENING, _CLOSING = b"[{", b"]}"
_SPACE = b" \t\r\n"
CHUNK = 1 << 23  # bytes compared at once: the scan's transient memory stays small


def duplicate_entries(raw: bytes, entries: Iterable[str]) -> list[str]:
    """Names of the `data` object given more than once, in file order ([] for none).

    Every entry-shaped key written plainly is counted by one regex; if that count is the
    number of entry-shaped names the parser kept, and no key written with an escape reads as
    an entry's name, no name came twice. Otherwise the structural scan lists the keys of
    `data` exactly.
    """
    shaped = sum(1 for name in entries if _ENTRY_NAME_END.search(name))
    if len(_ENTRY_KEY_END.findall(raw)) == shaped and _escaped_entry_keys(raw) is False:
        return []
    layout = Layout(raw)
    counts = Counter(layout.data_keys())
    return [name for name, n in counts.items() if n > 1]


def cut_too_deep(raw: bytes, limit: int) -> tuple[bytes, dict[str, str]]:
    """raw with every entry of `data` that nests deeper than `limit` levels replaced by null,
    and {entry name: why}. Raises ValueError when the deep part is outside `data`'s entries."""
    layout = Layout(raw)
    cuts = layout.deep_entries(limit)
    parts, faults, last = [], {}, 0
    for start, end, name, field in cuts:
        parts += [raw[last:start], b"null"]
        faults[name] = f"{field}: nested deeper than {limit} levels, more than a JSON parser takes"
        last = end
    parts.append(raw[last:])
    return b"".join(parts), faults


class Layout:
    """Where the strings and brackets of a JSON text are, and the depth after each bracket."""

    def __init__(self, raw: bytes):
        self.raw = raw
        data = np.frombuffer(raw, dtype=np.uint8)
        quotes, brackets = [], []
        for start in range(0, len(data), CHUNK):
            part = data[start : start + CHUNK]
            quotes.append(np.flatnonzero(part == _QUOTE) + start)
            low = part | 0x20  # `[` `]` are `{` `}` less 0x20
            brackets.append(np.flatnonzero((low == 0x7B) | (low == 0x7D)) + start)
        q = np.concatenate(quotes) if quotes else np.zeros(0, np.int64)
        escaped = [
            p
            for p in q[(q > 0) & (data[np.maximum(q - 1, 0)] == _BACKSLASH)].tolist()
            if _backslashes_before(raw, p) % 2
        ]
        if escaped:
            q = np.setdiff1d(q, np.asarray(escaped, dtype=q.dtype), assume_unique=True)
        b = np.concatenate(brackets) if brackets else np.zeros(0, np.int64)
        b = b[np.searchsorted(q, b) % 2 == 0]  # outside strings
        self.starts, self.ends = q[0::2], q[1::2]  # string i: raw[starts[i]:ends[i] + 1]
        self.brackets = b
        self.depth = np.cumsum(np.where((data[b] | 0x20) == 0x7B, 1, -1)) if len(b) else np.zeros(0, np.int64)

    def depth_at(self, position: np.ndarray) -> np.ndarray:
        """Nesting depth at each position (the brackets before it)."""
        k = np.searchsorted(self.brackets, position)
        return np.where(k > 0, self.depth[np.maximum(k - 1, 0)], 0)

    def keys_at(self, depth: int, within: tuple[int, int]) -> list[tuple[int, int]]:
        """(start, end) of the object keys at `depth` between two offsets."""
        starts, ends = self.starts, self.ends[: len(self.starts)]
        inside = (starts > within[0]) & (starts < within[1])
        chosen = np.flatnonzero(inside & (self.depth_at(starts) == depth))
        return [(int(starts[i]), int(ends[i])) for i in chosen if self._followed_by_colon(int(ends[i]))]

    def _followed_by_colon(self, end: int) -> bool:
        at = end + 1
        while at < len(self.raw) and self.raw[at] in _SPACE:
            at += 1
        return at < len(self.raw) and self.raw[at] == _COLON

    def data_span(self) -> tuple[int, int] | None:
        """Offsets of the `data` object's braces, if the top-level object has one."""
        for start, end in self.keys_at(1, (-1, len(self.raw))):
            if self.raw[start : end + 1] == b'"data"':
                k = int(np.searchsorted(self.brackets, end))
                if k >= len(self.brackets) or self.raw[self.brackets[k]] != 0x7B:
                    return None
                close = k + 1 + int(np.argmax(self.depth[k + 1 :] == 1)) if k + 1 < len(self.depth) else k
                return int(self.brackets[k]), int(self.brackets[close])
        return None

    def data_keys(self) -> list[str]:
        span = self.data_span()
        if span is None:
            return []
        return [_decode(self.raw[s : e + 1]) for s, e in self.keys_at(2, span)]

    def deep_entries(self, limit: int) -> list[tuple[int, int, str, str]]:
        """(start, end, name, field) of each entry value of `data` nesting deeper than limit."""
        span = self.data_span()
        deep = np.flatnonzero(self.depth > limit)
        if not len(deep):
            return []
        if span is None or not span[0] < self.brackets[deep[0]] < span[1]:
            raise ValueError(
                f"nested deeper than {limit} levels at byte {int(self.brackets[deep[0]])}, "
                "outside the entries of `data`"
            )
        keys = self.keys_at(2, span)
        key_ends = np.asarray([e for _, e in keys])
        found = []
        at = 0
        while at < len(deep):
            position = int(self.brackets[deep[at]])
            if position > span[1]:
                raise ValueError(f"nested deeper than {limit} levels at byte {position}, outside `data`")
            key = int(np.searchsorted(key_ends, position)) - 1
            name = _decode(self.raw[keys[key][0] : keys[key][1] + 1])
            first = int(np.searchsorted(self.brackets, keys[key][1]))  # the entry's own bracket
            last = first + int(np.argmax(self.depth[first:] == 2))  # where it closes
            field = self._field(keys[key][1], position)
            found.append((int(self.brackets[first]), int(self.brackets[last]) + 1, name, field))
            at = int(np.searchsorted(deep, last, side="right"))
        return found

    def _field(self, entry_key_end: int, position: int) -> str:
        """The entry's own key (input_args, output, ...) under which the deep part sits."""
        for start, end in reversed(self.keys_at(3, (entry_key_end, position))):
            return _decode(self.raw[start : end + 1])
        return "(entry)"


def _escaped_entry_keys(raw: bytes, most: int = 1000) -> bool | None:
    """Whether a key written with an escape reads as an entry's name (`...forwar\\u0064`), which
    the count of plain keys would miss; None past `most` escapes (the caller scans instead).

    From each backslash: back to its string's opening quote, on to its closing one (a quote is
    a string's own only when no odd run of backslashes precedes it).
    """
    at, seen = raw.find(b"\\"), 0
    while at != -1:
        seen += 1
        if seen > most:
            return None
        start = raw.rfind(b'"', 0, at)
        while start > 0 and _backslashes_before(raw, start) % 2:
            start = raw.rfind(b'"', 0, start)
        end = raw.find(b'"', at + 1)
        while end != -1 and _backslashes_before(raw, end) % 2:
            end = raw.find(b'"', end + 1)
        if start < 0 or end < 0:
            return None
        after = end + 1
        while after < len(raw) and raw[after] in _SPACE:
            after += 1
        if after < len(raw) and raw[after] == _COLON and _ENTRY_NAME_END.search(_decode(raw[start : end + 1])):
            return True
        at = raw.find(b"\\", end + 1)
    return False


def _backslashes_before(raw: bytes, position: int) -> int:
    count = 0
    while position - count - 1 >= 0 and raw[position - count - 1] == _BACKSLASH:
        count += 1
    return count


def _decode(key: bytes) -> str:
    try:
        return json.loads(key)
    except ValueError:
        return key[1:-1].decode("utf-8", "replace")
