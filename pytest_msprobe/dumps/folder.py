"""The JSON files a folder given to --msprobe-dump holds besides its dump.json files.

msprobe names every dump dump.json (`dump_path/step0/rank0/dump.json`), and the plugin
checks only those; a folder of dumps renamed or collected by hand (`a_dump.json`,
`api_info_statistics.json`) would otherwise be checked one in four without a word. Each
file passed over is named in the report header, said to be an msprobe dump (its head holds
the keys msprobe writes) or not; msprobe's own companions of a dump.json (stack.json,
construct.json) are only counted. No pytest.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from pathlib import Path

from ..untrusted import printable
from .dump import DUMP_FILE_NAME, _head

COMPANIONS = ("stack.json", "construct.json")  # msprobe writes them beside each dump.json
_DUMP_HEAD = re.compile(rb'^\s*\{\s*"(task|level|framework|dump_data_dir|data)"\s*:')
SHOWN = 10  # files named in one line


def is_dump(path: Path) -> bool:
    """Whether a JSON file starts as msprobe writes a dump: an object whose first key is one of its header's."""
    try:
        head = _head(path, 4096)
    except OSError:
        return False
    return bool(_DUMP_HEAD.match(head.removeprefix(b"\xef\xbb\xbf")))


def passed_over_lines(folder: Path, files: Sequence[Path], given: str) -> list[str]:
    """Header lines naming the JSON files of `folder` (`given` on the command line) that are not
    dump.json: the dumps among them first (give each by name to check it), then the others."""
    dumps, others, companions = [], [], 0
    for path in files:
        if path.name in COMPANIONS and (path.parent / DUMP_FILE_NAME).exists():
            companions += 1
        elif is_dump(path):
            dumps.append(path)
        else:
            others.append(path)
    lines = []
    if dumps:
        lines.append(
            f"--msprobe-dump {given}: passed over {_count(dumps, 'msprobe dump')} not named {DUMP_FILE_NAME} "
            f"(give each with --msprobe-dump to check it): {_names(folder, dumps)}"
        )
    if others:
        lines.append(
            f"--msprobe-dump {given}: passed over {_count(others, 'JSON file')} that "
            f"{'is no dump' if len(others) == 1 else 'are no dumps'}: {_names(folder, others)}"
        )
    if companions and (dumps or others):
        lines.append(f"--msprobe-dump {given}: and {companions} stack.json/construct.json beside its dumps")
    return [printable(line) for line in lines]


def _count(paths: Sequence[Path], what: str) -> str:
    return f"{len(paths)} {what}{'s' if len(paths) > 1 else ''}"


def _names(folder: Path, paths: Sequence[Path]) -> str:
    names = [str(path.relative_to(folder)) for path in paths[:SHOWN]]
    return ", ".join(names) + (f", ... ({len(paths) - SHOWN} more)" if len(paths) > SHOWN else "")
