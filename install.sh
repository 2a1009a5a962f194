#!/bin/sh
# One command installs everything: a virtual environment in .venv (or $VENV) holding the plugin
# with all its test suite needs (PyTorch 2.13 CPU, MindSpore 2.10, pytest-xdist, hypothesis, ruff,
# mypy). `pip install -e '.[test]'` does the same in the environment you are in.
set -eu
cd "$(dirname "$0")"
venv="${VENV:-.venv}"
# A fresh clone's .venv/bin/python is a tracked stand-in that runs this script: make way for the
# environment's own, and keep git from reporting the swap.
if [ -f "$venv/bin/python" ] && [ ! -L "$venv/bin/python" ] && grep -q 'Stands in for the environment' "$venv/bin/python"; then
    rm "$venv/bin/python"
    git update-index --skip-worktree .venv/bin/python 2>/dev/null || true
fi
python3 -m venv "$venv"
"$venv/bin/python" -m pip install --upgrade --quiet pip
"$venv/bin/python" -m pip install -e '.[test]'
