"""A dump's own folders, and the Python files in them that pytest would import.

pytest imports the conftest.py of every folder it collects from, and of the folder it is run
from (and its parents, and its test* subfolders) before any plugin's pytest_configure. A dump
is data: the plugin collects its entries without pytest walking its folders (session.py), and
refuses a run started where pytest itself would import a conftest.py of a dump's folders, or,
started inside them, any other than the rootdir's (plugin.py, from pytest_load_initial_conftests).
A dump's folders are its dump.json's folder, those up to the folder given to --msprobe-dump,
and msprobe's layout above them (`dump_path/step0/rank0/`, `proc0/`).

No pytest, no numpy: plugin.py reads this in every run given --msprobe-dump, before conftests load.
"""

from __future__ import annotations

import glob
import os
import re
from collections.abc import Iterable, Sequence
from pathlib import Path

DUMP_FILE_NAME = "dump.json"
# pytest imports these from a folder it collects: conftest.py, and a package's __init__.py.
PYTEST_IMPORTS = ("conftest.py", "__init__.py")
_LAYOUT_FOLDER = re.compile(r"rank\d*|proc\d+|step\d+")


def dump_folders(given: Path) -> set[Path]:
    """The folders of the dumps of one --msprobe-dump path (absolute): each dump.json's folder, up
    to `given` where it is a folder, then up through msprobe's own layout. Each as written and
    resolved: pytest names folders as they are given, a link's target is the same folder."""
    folders: set[Path] = set()
    dumps = sorted(given.rglob(DUMP_FILE_NAME)) if given.is_dir() else [given]
    for dump in dumps:
        # realpath: a link that loops is left as it is (Path.resolve raises), session.py refuses it.
        for top, folder in ((given, dump.parent), (Path(os.path.realpath(given)), Path(os.path.realpath(dump)).parent)):
            folders.add(folder)
            while folder != top and top in folder.parents:
                folder = folder.parent
                folders.add(folder)
            while _LAYOUT_FOLDER.fullmatch(folder.name) and folder.parent != folder:
                folder = folder.parent
                folders.add(folder)
    return folders


def all_dump_folders(given: Iterable[Path]) -> set[Path]:
    return {folder for path in given for folder in dump_folders(Path(os.path.abspath(path)))}


def python_files(folders: Iterable[Path]) -> list[Path]:
    """The files pytest would import from these folders if it collected them."""
    return sorted(folder / name for folder in folders for name in PYTEST_IMPORTS if (folder / name).is_file())


def initial_conftests(anchors: Sequence[Path], confcutdir: Path | None) -> list[Path]:
    """The conftest.py files pytest imports before any plugin's pytest_configure, as its
    `_set_initial_conftests` finds them: each anchor's folder and its parents (none above
    confcutdir), and the anchor's test* subfolders."""
    folders: list[Path] = []
    for anchor in anchors:
        directory = anchor if anchor.is_dir() else anchor.parent
        folders += [folder for folder in (directory, *directory.parents) if _in_confcutdir(folder, confcutdir)]
        if anchor.is_dir():
            folders += [sub for sub in sorted(anchor.glob("test*")) if sub.is_dir()]
    found = [folder / "conftest.py" for folder in dict.fromkeys(folders)]
    return [path for path in found if path.is_file()]


def _in_confcutdir(folder: Path, confcutdir: Path | None) -> bool:
    # pytest's own rule: no conftest.py from a folder above confcutdir.
    return confcutdir is None or folder not in confcutdir.parents


def anchors(args: Sequence[str], testpaths: Sequence[str], invocation_dir: Path, rootpath: Path) -> list[Path]:
    """Where pytest looks for its initial conftests: the command line's paths (node ids cut at
    `::`) that exist; else, run from the rootdir, its testpaths; else the folder it is run from."""
    given = [invocation_dir / arg.partition("::")[0] for arg in args]
    if args:
        found = [Path(os.path.abspath(path)) for path in given if path.exists()]
    elif invocation_dir == rootpath:
        found = [
            Path(os.path.abspath(p))
            for pattern in testpaths
            for p in glob.glob(str(rootpath / pattern), recursive=True)
        ]
    else:
        found = []
    return found or [invocation_dir]


def conftests_in_dumps(
    dumps: Iterable[Path],
    args: Sequence[str],
    testpaths: Sequence[str],
    invocation_dir: Path,
    rootpath: Path,
    inipath: Path | None,
    confcutdir: str | None,
) -> list[Path]:
    """The initial conftests pytest would import that belong to a dump: those of a dump's folders,
    and, where pytest starts inside a dump's folders, every one but the project's (the rootdir's,
    its parents', the ini file's): the folders above a dump unpacked with them, whose conftest.py
    pytest imports when run from below them and confcutdir does not stop it (a --rootdir elsewhere)."""
    folders = all_dump_folders(invocation_dir / path for path in dumps)
    cut_at = Path(os.path.abspath(invocation_dir / confcutdir)) if confcutdir else None

    def in_dumps(folder: Path) -> bool:
        return folder in folders or folder.resolve() in folders

    project = {rootpath, *rootpath.parents, *([inipath.parent] if inipath else [])}
    refused: list[Path] = []
    for anchor in anchors(args, testpaths, invocation_dir, rootpath):
        start = anchor if anchor.is_dir() else anchor.parent
        inside = any(in_dumps(folder) for folder in (start, *start.parents))
        refused += [
            conftest
            for conftest in initial_conftests([anchor], cut_at)
            if in_dumps(conftest.parent) or (inside and conftest.parent not in project)
        ]
    return list(dict.fromkeys(refused))
