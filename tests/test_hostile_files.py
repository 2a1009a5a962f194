"""The files a run reads back, forged (tests/hostile_files.py, issue 46): each case run alone under a
memory cap and a time limit, through the command that reads the file (a resume, a merge, the report,
a run beside it). None hangs, none ends in a traceback, every refusal names the file, the line and the
field, no row is added, doubled or lost, no file outside the run's folders changes, no script is left
raw on a page."""

from __future__ import annotations

import shutil

import hostile_files
import pytest

pytestmark = pytest.mark.slow  # each case runs a command in a fresh process

CASES = hostile_files.cases()


@pytest.fixture(scope="module")
def finished(tmp_path_factory) -> hostile_files.Root:
    return hostile_files.base_run(tmp_path_factory.mktemp("base"))


def test_every_class_and_file_of_the_issue_has_a_case():
    kinds = {case.kind for case in CASES}
    assert {"script", "host", "rows", "traceback", "hang", "message"} <= kinds
    files = {case.file for case in CASES}
    assert {"result CSV", "details CSV", "journal", "manifest", "stack.json", "option"} <= files
    assert len({case.id for case in CASES}) == len(CASES)


@pytest.mark.parametrize("case", CASES, ids=[case.id for case in CASES])
def test_a_forged_file(case, finished, tmp_path):
    root = hostile_files.Root(tmp_path / "run")
    shutil.copytree(finished.path, root.path, symlinks=True)
    hostile_files.run_case(case, root)
