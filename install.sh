#!/bin/sh
# One command installs everything: a virtual environment in .venv (or $VENV) holding the plugin
# with all its test suite needs (PyTorch 2.13 CPU, MindSpore 2.10, pytest-xdist, hypothesis, ruff,
# mypy, import-linter, mkdocs). `pip install -e '.[test]'` does the same in the environment you are in.
#
# Safe to interrupt and run again: the environment counts as made only once the marker file
# .venv/.installed is written, last; ./run-pytest runs this script again until it is.
set -eu
cd "$(dirname "$0")"
venv="${VENV:-.venv}"
marker="$venv/.installed"
rm -f "$marker"
python3 -m venv "$venv"
"$venv/bin/python" -m pip install --upgrade --quiet pip
"$venv/bin/python" -m pip install -e '.[test]'
touch "$marker"
