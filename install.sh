#!/bin/sh
# One command installs everything: a virtual environment in .venv (or $VENV) holding the plugin
# with all its test suite needs (PyTorch 2.13 CPU, MindSpore 2.10, pytest-xdist, hypothesis, ruff,
# mypy). `pip install -e '.[test]'` does the same in the environment you are in.
set -eu
cd "$(dirname "$0")"
venv="${VENV:-.venv}"
# The checkout's .venv/bin/python is a tracked stand-in (it runs this script, then the
# environment's python3): it makes way for venv and comes back after, with python3 linked to the
# interpreter itself, not through it.
standin=""
if [ -f "$venv/bin/python" ] && [ ! -L "$venv/bin/python" ] && grep -q 'Stands in for the environment' "$venv/bin/python"; then
    standin=$(mktemp)
    cp "$venv/bin/python" "$standin"
    rm "$venv/bin/python"
    # Back in its place however this ends (a failed install is tried again on the next call). rm
    # first: venv's python is a link to the interpreter, which a cp onto it would overwrite.
    trap 'rm -f "$venv/bin/python"; cp "$standin" "$venv/bin/python"; chmod 755 "$venv/bin/python"; rm -f "$standin"' EXIT
fi
python3 -m venv "$venv"
if [ -n "$standin" ]; then
    ln -sf "$(readlink -f "$venv/bin/python")" "$venv/bin/python3"
fi
"$venv/bin/python3" -m pip install --upgrade --quiet pip
"$venv/bin/python3" -m pip install -e '.[test]'
