"""The package's stages import one way: import-linter's contracts (pyproject.toml), no cycle
between modules (lazy imports included), and a core that imports no framework and no pytest."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import grimp
import pytest

ROOT = Path(__file__).resolve().parent.parent
PACKAGE = "pytest_msprobe"
# The stages that run without pytest, and without a framework until a check asks for one.
CORE = ("dumps", "inputs", "judging", "reports", "results", "options", "untrusted")


def import_cycles() -> list[list[str]]:
    """Strongly connected groups of modules, each a cycle of imports (Tarjan's algorithm)."""
    graph = grimp.build_graph(PACKAGE, exclude_type_checking_imports=True, cache_dir=None)
    edges = {m: graph.find_modules_directly_imported_by(m) & graph.modules for m in graph.modules}
    order: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    cycles = []

    def visit(module: str) -> None:
        order[module] = low[module] = len(order)
        stack.append(module)
        for imported in edges[module]:
            if imported not in order:
                visit(imported)
                low[module] = min(low[module], low[imported])
            elif imported in stack:
                low[module] = min(low[module], order[imported])
        if low[module] == order[module]:
            group = []
            while True:
                top = stack.pop()
                group.append(top)
                if top == module:
                    break
            if len(group) > 1:
                cycles.append(sorted(group))

    for module in sorted(graph.modules):
        if module not in order:
            visit(module)
    return cycles


def test_no_module_imports_one_that_imports_it_back():
    assert import_cycles() == []


def test_the_layers_hold():
    done = subprocess.run(
        [str(Path(sys.executable).with_name("lint-imports")), "--no-cache"], cwd=ROOT, capture_output=True, text=True
    )
    assert done.returncode == 0, done.stdout + done.stderr


@pytest.mark.parametrize("stage", CORE)
def test_the_core_imports_no_framework_and_no_pytest(stage):
    code = (
        f"import importlib, pkgutil, sys; import {PACKAGE}.{stage} as stage\n"
        "for info in pkgutil.walk_packages(getattr(stage, '__path__', []), stage.__name__ + '.'):\n"
        "    importlib.import_module(info.name)\n"
        "print(sorted(m for m in ('torch', 'mindspore', 'pytest', '_pytest') if m in sys.modules))"
    )
    done = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "[]"


def test_the_option_table_names_the_standards_there_are():
    from pytest_msprobe import options
    from pytest_msprobe.judging import standards

    assert tuple(standards.STANDARDS) == options.STANDARDS


def test_the_checkout_tracks_no_environment():
    """The environment is install.sh's to make (.venv/, ignored): nothing of it is in the repository,
    so a fresh clone has none until install.sh has run, and an interrupted install leaves no change."""
    if not (ROOT / ".git").exists():
        pytest.skip("not a git checkout")
    tracked = subprocess.run(["git", "ls-files", ".venv"], cwd=ROOT, capture_output=True, text=True, check=True)
    assert tracked.stdout == ""
