"""Python files beside a dump (an archive unpacked with a conftest.py, __init__.py or test module in
or above the dump's folders) never run: pytest does not walk a dump's folders to collect it,
wherever it is run from; where pytest itself would import such a conftest.py when it starts
(run from inside the dump's folders), the run is refused before it does, naming the file. The
project's own conftest.py (the rootdir's) keeps its hooks over the dump's entries.

The layouts are the hostile corpus's (hostile_corpus.CODE_LAYOUTS): each file writes a marker
in marks/ when imported."""

from __future__ import annotations

from pathlib import Path

import hostile_corpus
import pytest

from conftest import read_csv

ROWS = {"Functional.relu.0": ("pass", "pass"), "Tensor.add.0": ("pass", "")}  # (forward, backward)
PROJECT_CONFTEST = """
import os

def pytest_runtest_setup(item):
    with open(os.path.join({seen!r}, item.nodeid.replace("/", "_")), "w"):
        pass
"""


class Project:
    """pytester.path/project: a pytest.ini, a conftest.py that records the items it sets up, a
    test of its own, and the layouts under dumps/."""

    def __init__(self, pytester: pytest.Pytester):
        self.pytester = pytester
        self.root = pytester.path / "project"
        self.dumps = self.root / "dumps"
        self.marks = pytester.path / "marks"
        self.seen = pytester.path / "seen"
        self.marks.mkdir()
        self.seen.mkdir()
        (self.root / "tests").mkdir(parents=True)
        (self.root / "pytest.ini").write_text("[pytest]\n")
        (self.root / "conftest.py").write_text(PROJECT_CONFTEST.format(seen=str(self.seen)))
        (self.root / "tests" / "test_user.py").write_text("def test_user():\n    pass\n")
        self.layouts = hostile_corpus.code_layouts(self.dumps, self.marks)

    def dump(self, key: str) -> Path:
        return self.dumps / key / self.layouts[key].dump

    def run(self, cwd: Path, *args: str) -> pytest.RunResult:
        """pytest from cwd, in process (pytester: the modules a run imports are dropped after it,
        so the marks say what this run imported), its CSVs in pytester.path/out."""
        with pytest.MonkeyPatch.context() as patch:
            patch.chdir(cwd)
            return self.pytester.runpytest(
                "-p",
                "no:cacheprovider",
                "--msprobe-device",
                "cpu",
                "--msprobe-out",
                str(self.pytester.path / "out"),
                *args,
            )

    def all_dumps(self) -> list[str]:
        return [arg for key in self.layouts for arg in ("--msprobe-dump", str(self.dump(key)))]

    def assert_nothing_imported(self) -> None:
        assert sorted(path.name for path in self.marks.iterdir()) == []

    def assert_rows(self, folder: Path) -> None:
        rows = {
            row["API Name"]: (row["Forward Test Success"], row["Backward Test Success"])
            for row in read_csv(folder, "result")
        }
        assert rows == ROWS, folder


ENTRIES = sorted(hostile_corpus.LAYOUT_ENTRIES)
DUMPS = [(key, layout.dump) for key, layout in hostile_corpus.CODE_LAYOUTS.items()]
WORKERS = pytest.mark.parametrize("workers", [[], ["-n", "2"]], ids=["serial", "xdist"])


@pytest.mark.slow
@WORKERS
@pytest.mark.parametrize("where", ["rootdir", "parent", "rootdir_elsewhere"])
def test_python_files_beside_dumps_are_never_imported(pytester, workers, where):
    """Every layout in one run, from the project (its rootdir), from the folder above it, and with
    --rootdir elsewhere (the dumps outside it): the entries run, nothing beside them is imported,
    and the project's conftest.py sets up every entry (when it is pytest's: not from above)."""
    project = Project(pytester)
    cwd = pytester.path if where == "parent" else project.root
    extra = ["--rootdir", str(pytester.path / "elsewhere")] if where == "rootdir_elsewhere" else []
    (pytester.path / "elsewhere").mkdir()
    result = project.run(cwd, *project.all_dumps(), *extra, *workers)
    output = result.stdout.str() + result.stderr.str()
    assert result.ret == pytest.ExitCode.OK, output
    assert "INTERNALERROR" not in output and "Traceback" not in output
    project.assert_nothing_imported()
    result.assert_outcomes(passed=3 * len(project.layouts))
    for key, layout in project.layouts.items():
        project.assert_rows(pytester.path / "out" / key / Path(layout.dump).parent)
    # Each file in a dump's own folders is said in the header, not imported.
    if not workers:
        result.stdout.fnmatch_lines_random(
            [f"msprobe: *dumps/beside/{name}: beside a dump, not imported" for name in ("conftest.py", "__init__.py")]
            + ["msprobe: *dumps/msprobe/dump_path/step0/conftest.py: beside a dump, not imported"]
        )
    seen = sorted(path.name for path in project.seen.iterdir())
    if where == "parent":
        assert seen == []  # pytest run from above the project imports no conftest.py of it
    else:
        # The project's conftest.py set up every entry of every dump, named by its node id:
        # relative to the rootdir, also outside it.
        prefix = ".._project_dumps_" if where == "rootdir_elsewhere" else "dumps_"
        expected = [f"{prefix}{key}_{dump.replace('/', '_')}::{entry}" for key, dump in DUMPS for entry in ENTRIES]
        assert seen == sorted(expected)


@pytest.mark.slow
def test_explicit_test_paths_run_beside_the_dumps_without_walking_them(pytester):
    """`pytest . --msprobe-dump dumps`: the project's test and every dump's entries; the dumps'
    folders are left out of the walk of `.` (their test modules are not collected)."""
    project = Project(pytester)
    result = project.run(project.root, ".", "--msprobe-dump", "dumps", "-n", "2")
    assert result.ret == pytest.ExitCode.OK, result.stdout.str()
    result.assert_outcomes(passed=1 + 3 * len(project.layouts))
    project.assert_nothing_imported()
    assert len(list(project.seen.iterdir())) == 1 + 3 * len(project.layouts)


def test_the_dumps_alone_without_test_paths(pytester):
    """`pytest --msprobe-dump x` from the project: the dump's entries only, not the project's tests."""
    project = Project(pytester)
    result = project.run(project.root, "--msprobe-dump", str(project.dump("one_up")))
    result.assert_outcomes(passed=3)
    project.assert_nothing_imported()
    project.assert_rows(pytester.path / "out")
    assert sorted(path.name for path in project.seen.iterdir()) == [f"dumps_one_up_a_dump.json::{e}" for e in ENTRIES]


@pytest.mark.parametrize("key", list(hostile_corpus.CODE_LAYOUTS))
@pytest.mark.parametrize("rootdir", ["project", "elsewhere", "confcutdir"])
def test_run_from_the_dumps_folder(pytester, key, rootdir):
    """From the dump's folder, pytest imports at startup the conftest.py there (and, up to the
    rootdir or with --rootdir elsewhere, those above): refused before it does, naming the file.
    Where it imports none of them (--confcutdir there, or no ini file above), the run goes on."""
    project = Project(pytester)
    layout = project.layouts[key]
    args = ["--msprobe-dump", "dump.json"]
    if rootdir == "elsewhere":
        (pytester.path / "elsewhere").mkdir()
        args += ["--rootdir", str(pytester.path / "elsewhere")]
    elif rootdir == "confcutdir":
        args += ["--confcutdir", "."]  # as where no ini file is above: pytest imports none above the folder
    refused = layout.refused_alone if rootdir == "confcutdir" else layout.refused_from_its_folder
    result = project.run(project.dump(key).parent, *args)
    project.assert_nothing_imported()
    if refused:
        assert result.ret == pytest.ExitCode.USAGE_ERROR
        result.stderr.fnmatch_lines(
            [f"ERROR: --msprobe-dump: pytest would import {project.dumps / key / refused} when it starts, *"]
        )
        assert len([line for line in result.stderr.lines if line.strip()]) == 1
    else:
        assert result.ret == pytest.ExitCode.OK, result.stdout.str() + result.stderr.str()
        result.assert_outcomes(passed=3)
        project.assert_rows(pytester.path / "out")


@pytest.mark.parametrize("workers", [[], ["-n", "2"]], ids=["serial", "xdist"])
def test_run_from_msprobes_dump_path_is_refused(pytester, workers):
    """From the root of msprobe's layout (dump_path/, above step0/rank0/), given the folder."""
    project = Project(pytester)
    root = project.dumps / "msprobe" / "dump_path"
    result = project.run(root, "--msprobe-dump", ".", *workers)
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(
        [f"ERROR: --msprobe-dump: pytest would import {root / 'conftest.py'} when it starts, *"]
    )
    project.assert_nothing_imported()
