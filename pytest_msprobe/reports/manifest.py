"""The manifest beside each CSV pair: which dump and which settings wrote it.

`accuracy_checking_run_{ts}.json` beside `accuracy_checking_result_{ts}.csv`: the CSV
columns are msprobe's fixed contract, so what a merge of CI shards must know to join pairs
(the same dump, the same settings, the same plugin) lives here; and whether the run that wrote
the pair stopped early (`stopped`: what it left unchecked, null for a whole run), so that a report
or a merge written later from the pair says it is partial, as that run's terminal did. A manifest
without `stopped` (written before it was) reads as a whole run's. No pytest.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import typing
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .. import __version__, readback
from ..dumps.dump import BACKWARD, DIRECTIONS, FORWARD
from ..options import Options
from ..untrusted import cut, printable
from . import files, plain_results, summary
from .csv_files import RESULT_PREFIX, details_path_for

PREFIX = "accuracy_checking_run_"
FORMAT = 1
# The settings that decide the rows: pairs written under others cannot be one run's.
ROW_SETTINGS = ("mode", "device", "seed", "standard", "cosine", "max_abs_err", "tolerances")


class ManifestError(ValueError):
    """A manifest that is missing or cannot be read (names the file)."""


class ManifestMissing(ManifestError):
    """No manifest beside a pair (an older run's)."""


@dataclass
class Stopped:
    """What a run that stopped early (Ctrl-C, -x, --maxfail, a full disk, a lost host) left undone of
    one pair: the manifest's `stopped`. Its terminal said it as summary.stopped_line."""

    why: str  # pytest's words: `interrupted`, `stopping after 1 failures`
    selected: int  # the entries of the pair's dump the run selected
    # of those, the entries it never checked, by direction: none where the run stopped in another dump's
    # entries (its pairs together say what its terminal said: `N of M`, M the entries of every dump)
    unchecked: dict[str, int]
    unfinished: int  # the APIs it left without a row in the pair (--msprobe-resume runs them)

    def plain(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


def path_for(result_path: Path) -> Path:
    return result_path.with_name(result_path.name.replace(RESULT_PREFIX, PREFIX, 1)).with_suffix(".json")


def sha256(path: Path) -> str:
    """The dump's digest: a regular file's (its user's link followed), never a FIFO's or a device's
    (a manifest read back may name any path as its dump). Raises OSError (readback.Unreadable)."""
    digest = hashlib.sha256()
    with readback.open_regular(path, follow_links=True) as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def describe(dump: Path, options: Options, device: str, api_calls: int | None, shard: dict | None) -> dict[str, Any]:
    settings = dataclasses.asdict(options)
    settings.pop("dumps")
    settings["device"] = device  # as chosen (auto picks per machine)
    settings["tolerances"] = list(options.tolerances)
    return {
        "format": FORMAT,
        "plugin": __version__,
        "dump": {"path": str(dump), "sha256": sha256(dump), "api_calls": api_calls},
        "settings": settings,
        "shard": shard,
    }


def write(result_path: Path, description: dict[str, Any]) -> Path:
    """The manifest, a new file: anything already at its name (a link) is refused (files.FileTaken)."""
    path = path_for(result_path)
    files.write_new(path, render(result_path, description))
    return path


def render(result_path: Path, description: dict[str, Any]) -> str:
    """The manifest's text for the pair of result_path."""
    document = {**description, "result": result_path.name, "details": details_path_for(result_path).name}
    return json.dumps(document, indent=1) + "\n"


def read(result_path: Path) -> dict[str, Any]:
    path = path_for(result_path)
    if not os.path.lexists(path):
        raise ManifestMissing(
            f"{result_path}: no manifest {path.name} beside it, so its dump and settings are unknown "
            "(written by pytest-msprobe from 0.1.0 on; rerun that shard)"
        )
    try:
        document = json.loads(readback.read_text(path, readback.MAX_MANIFEST))
    except OSError as exc:  # readback.Unreadable names the file
        raise ManifestError(str(exc)) from None
    except ValueError as exc:
        raise ManifestError(f"{path}: cannot be read as a manifest: {exc}") from None
    if not isinstance(document, dict) or document.get("format") != FORMAT:
        raise ManifestError(f"{path}: not a manifest of format {FORMAT}")
    try:
        checked(document)
    except plain_results.FieldError as exc:
        raise ManifestError(f"{path}: {printable(str(exc))}: not read") from None
    return document


def stopped_of(document: dict[str, Any] | None) -> Stopped | None:
    """The `stopped` of a manifest read (checked): None for a whole run, an older manifest, no manifest."""
    found = (document or {}).get("stopped")
    if found is None:
        return None
    return Stopped(found["why"], found["selected"], dict(found["unchecked"]), found["unfinished"])


def stopped_lines(pairs: Sequence[tuple[Path, Stopped | None]]) -> tuple[list[str], dict[str, int]]:
    """What later readers of pairs (a report, a merge) say of the runs that stopped early, in the words
    their terminal said it: the entries never checked, over all pairs (one line), then per pair the APIs
    left without a row and the command that runs them; and the entries never checked, by direction."""
    stopped = [(path, found) for path, found in pairs if found is not None]
    if not any(sum(found.unchecked.values()) or found.unfinished for _, found in stopped):
        return [], {}  # whole pairs (of a run that stopped in another dump's): nothing to say
    why = "; ".join(dict.fromkeys(cut(printable(found.why), 200) for _, found in stopped))
    missing = {d: sum(found.unchecked.get(d, 0) for _, found in stopped) for d in (FORWARD, BACKWARD)}
    lines = []
    if sum(missing.values()):
        lines.append(summary.stopped_text(why, sum(found.selected for _, found in stopped), missing))
    for path, found in stopped:
        if found.unfinished:
            lines.append(summary.unfinished_line(found.unfinished, path))
    return lines, {d: n for d, n in missing.items() if n}


def restate(result_path: Path, stopped: Stopped | None) -> bool:
    """A resumed pair's manifest, its `stopped` now this run's (None: the pair is whole); everything
    else as it was. Replaced whole (written beside it, moved over it). False where nothing changed.
    Raises ManifestError (a manifest that does not read), OSError."""
    document = read(result_path)
    plain = None if stopped is None else stopped.plain()
    if document.get("stopped") == plain:
        return False
    document["stopped"] = plain
    path = path_for(result_path)
    temporary = files.replace_temporary(path)
    files.write_new(temporary, json.dumps(document, indent=1) + "\n")
    os.replace(temporary, path)
    return True


_DUMP: dict[str, Any] = {"path": str, "sha256": str, "api_calls": int | None}
_TOP: dict[str, Any] = {"plugin": str, "result": str, "details": str, "merged_from": list[str]}


def checked(document: dict[str, Any]) -> None:
    """Every field a reader takes from a manifest, of its kind: its dump (path, sha256, API calls), its
    settings (each as Options declares it; one it does not know, of a later version, is left alone),
    the plugin, the shard. FieldError naming the first that is not."""
    dump = document.get("dump")
    if not isinstance(dump, dict):
        raise plain_results.FieldError(f"dump: expected an object, found {plain_results.kind(dump)}")
    for key in ("path", "sha256"):
        if key not in dump:
            raise plain_results.FieldError(f"dump.{key}: missing")
    for key, hint in _DUMP.items():
        if key in dump:
            plain_results.value_of(hint, dump[key], f"dump.{key}")
    if dump.get("api_calls") is not None and dump["api_calls"] < 0:
        raise plain_results.FieldError("dump.api_calls: expected a count, 0 or more")
    settings = document.get("settings", {})
    if not isinstance(settings, dict):
        raise plain_results.FieldError(f"settings: expected an object, found {plain_results.kind(settings)}")
    hints = {**typing.get_type_hints(Options), "tolerances": list[str]}
    for key, value in settings.items():
        if key in hints:
            plain_results.value_of(hints[key], value, f"settings.{key}")
    for key, hint in _TOP.items():
        if key in document:
            plain_results.value_of(hint, document[key], key)
    shard = document.get("shard")
    if shard is not None and not isinstance(shard, dict):
        raise plain_results.FieldError(f"shard: expected an object or null, found {plain_results.kind(shard)}")
    _checked_stopped(document.get("stopped"))


def _checked_stopped(stopped: Any) -> None:
    """`stopped`: null, or an object of its four fields, the counts counts (none past the entries selected)."""
    if stopped is None:
        return
    if not isinstance(stopped, dict):
        raise plain_results.FieldError(f"stopped: expected an object or null, found {plain_results.kind(stopped)}")
    for key, hint in typing.get_type_hints(Stopped).items():
        if key not in stopped:
            raise plain_results.FieldError(f"stopped.{key}: missing")
        if key != "unchecked":
            plain_results.value_of(hint, stopped[key], f"stopped.{key}")
    unchecked = stopped["unchecked"]
    if not isinstance(unchecked, dict):
        raise plain_results.FieldError(f"stopped.unchecked: expected an object, found {plain_results.kind(unchecked)}")
    for key, value in unchecked.items():
        if key not in DIRECTIONS:
            raise plain_results.FieldError(f"stopped.unchecked: {cut(printable(str(key)), 100)!r} is no direction")
        plain_results.value_of(int, value, f"stopped.unchecked.{key}")
    for name, value in [
        ("selected", stopped["selected"]),
        ("unfinished", stopped["unfinished"]),
        *((f"unchecked.{key}", value) for key, value in unchecked.items()),
    ]:
        if value < 0:
            raise plain_results.FieldError(f"stopped.{name}: expected a count, 0 or more, found {value}")
    if sum(unchecked.values()) > stopped["selected"]:
        raise plain_results.FieldError(
            f"stopped.unchecked: {sum(unchecked.values())} entries never checked, more than the "
            f"{stopped['selected']} selected"
        )


def sides(document: dict[str, Any] | None) -> int:
    """The rows an output of the pair has: 2 where its run judged each entry twice (recorded,<device>);
    2 too where no manifest says (an older pair's reader takes either), else 1."""
    if document is None:
        return 2
    return 2 if "," in str(document.get("settings", {}).get("device", "")) else 1


def row_settings(document: dict[str, Any]) -> dict[str, Any]:
    settings = document.get("settings", {})
    return {"plugin": document.get("plugin"), **{name: settings.get(name) for name in ROW_SETTINGS}}
