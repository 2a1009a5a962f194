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


# What msprobe's companions of a dump.json hold: given in its place, they name the dump to type instead.
COMPANION_HOLDS = {"stack.json": "the call stacks of a dump", "construct.json": "the module tree of a dump"}


def companion_given(path: Path, given: str) -> str | None:
    """Why `--msprobe-dump stack.json` is no dump, with the command to type (the dump.json beside
    it, as the user wrote the path), or None: a file of another name, or a dump named so."""
    if path.name not in COMPANION_HOLDS or not path.is_file() or is_dump(path):
        return None
    return printable(
        f"--msprobe-dump {given}: {path.name} is msprobe's record of {COMPANION_HOLDS[path.name]}, not a dump: "
        f"check the {DUMP_FILE_NAME} beside it: pytest --msprobe-dump {_beside(given)}"
    )


def dump_given_to_pytest(args: Sequence[str], base: Path) -> str | None:
    """Why a command line that names a dump as pytest's own argument (`pytest dump.json`) checks
    nothing, with the command to type, or None. pytest collects no .json file: it would say
    "not found". Only JSON files are read, and only their head."""
    for arg in args:
        given = arg.split("::", 1)[0]
        path = base / given
        if path.suffix != ".json":
            continue
        try:
            regular = path.is_file()
        except OSError:
            continue
        if not regular:
            continue
        if is_dump(path):
            return printable(
                f"{given} is an msprobe dump, not a test file: check it with pytest --msprobe-dump {given}"
            )
        if path.name in COMPANION_HOLDS and (path.parent / DUMP_FILE_NAME).is_file():
            return printable(
                f"{given} is msprobe's record of {COMPANION_HOLDS[path.name]}, not a test file: check the "
                f"{DUMP_FILE_NAME} beside it with pytest --msprobe-dump {_beside(given)}"
            )
    return None


def _beside(given: str) -> str:
    """The dump.json beside a file, as the user wrote that file's path."""
    folder = Path(given).parent
    return DUMP_FILE_NAME if folder == Path() else str(folder / DUMP_FILE_NAME)
