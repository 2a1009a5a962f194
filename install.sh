#!/bin/sh
# One command installs everything: a virtual environment in .venv (or $VENV) holding the plugin
# with all its test suite needs (PyTorch 2.13 CPU, MindSpore 2.10, pytest-xdist, hypothesis, ruff,
# mypy). `pip install -e '.[test]'` does the same in the environment you are in.
set -eu
cd "$(dirname "$0")"
venv="${VENV:-.venv}"
python3 -m venv "$venv"
"$venv/bin/python" -m pip install --upgrade --quiet pip
"$venv/bin/python" -m pip install -e '.[test]'
