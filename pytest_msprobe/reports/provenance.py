"""Whether a result CSV given to a run (a resume, a baseline) is one of the dump it checks.

A result CSV names its APIs, and a dump its entries: a CSV of the same dump names only
APIs the dump has, one of another step or rank of the same model nearly only those, one
of another model few. Fewer than half of its APIs in the dump is another dump's CSV (a
usage error: resuming would append to it, a baseline would expect nothing); some missing
is said in the report header. No pytest.
"""

from __future__ import annotations

from pathlib import Path

from ..dumps.dump import FORWARD, Dump, DumpError, entry_kind, parse_entry_name, read_dump
from ..untrusted import escape

# Below this share of its APIs in the dump, a result CSV is taken for another dump's.
LEAST_SHARED = 0.5


def dump_entries(path: Path) -> set[tuple[str, str]] | None:
    """(API Name, direction) of every entry of a dump, as the result CSV names them (a name that
    is no API name has its row under its escaped self, items.py); None where it cannot be read
    (its collection says why)."""
    try:
        dump = read_dump(path)
    except DumpError:
        return None
    return entries_of(dump)


def entries_of(dump: Dump) -> set[tuple[str, str]]:
    """dump_entries of a dump already read."""
    found = set()
    for name in dump.entries:
        if entry_kind(name) == "module":
            continue
        parsed = parse_entry_name(name)
        found.add((parsed.prefix, parsed.direction) if parsed else (escape(name), FORWARD))
    return found


def check_csv_of_dump(option: str, csv: Path, apis: set[str], dump: Path, entries: set[tuple[str, str]]) -> str:
    """Raises ValueError when the CSV's APIs are mostly not the dump's; else the header note
    naming how many are missing ("" when none is)."""
    if not apis:
        return ""
    known = {api for api, _ in entries}
    missing = sorted(apis - known)
    if not missing:
        return ""
    # Names read from a CSV: text, escaped (a hand-made one may hold a terminal's escapes, a lone surrogate).
    shown = ", ".join(escape(api) for api in missing[:3]) + (", ..." if len(missing) > 3 else "")
    held = len(apis) - len(missing)
    if held < LEAST_SHARED * len(apis):
        raise ValueError(
            f"{option}: {csv}: only {held} of its {len(apis)} APIs are in {dump} ({shown} are not): "
            f"it is the result CSV of another dump; give the one a run of {dump} wrote"
        )
    return f"{option} {csv}: {len(missing)} of its {len(apis)} APIs are not in {dump} ({shown})"
