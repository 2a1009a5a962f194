"""Every command the README and docs/ show runs in a test, or says why not.

A shell block (a fenced block whose first line is a command) is preceded by a marker:
`<!-- run: exit N -->` (this test runs it on the examples/ dump, `dump path` words mapped below,
and expects exit status N and a result CSV), or `<!-- not run: why -->`.
"""

from __future__ import annotations

import os
import re
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
BLOCK = re.compile(r"(?:<!-- (run|not run): ([^>]*) -->\n+)?```(\w*)\n(.*?)```", re.S)
COMMAND = re.compile(r"(\$ )?(pytest|\./|python|pip|mkdocs|git|apt|cd |[A-Z_]+=)")
# The placeholders the docs use for "your dump", all run on the shipped example.
DUMP_WORDS = ("path/to/dump.json", "dump_path", "dump/step0/rank0/dump.json", "pt_tensor_L1/dump.json")
EXAMPLE = "examples/pt_tensor_L1/dump.json"


def shell_blocks() -> list[tuple[str, str | None, str, str]]:
    """(page, marker, marker text, command) of every block whose first line is a command."""
    found = []
    for page in PAGES:
        for marker, why, lang, body in BLOCK.findall(page.read_text()):
            lines = body.strip().splitlines()
            if lang in ("", "sh", "bash", "console", "shell") and lines and COMMAND.match(lines[0]):
                found.append((page.relative_to(ROOT).as_posix(), marker or None, why.strip(), body.strip()))
    return found


BLOCKS = shell_blocks()
# Each command once (the README and the docs' overview show the same ones).
RUN = list({(b[2], b[3]): b for b in BLOCKS if b[1] == "run"}.values())


def test_the_docs_show_commands():
    assert len(BLOCKS) >= 20 and RUN  # the pattern still finds them


@pytest.mark.parametrize("page, marker, why, command", BLOCKS, ids=[f"{b[0]}:{b[3][:40]}" for b in BLOCKS])
def test_every_command_runs_here_or_says_why_not(page, marker, why, command):
    assert marker is not None, (
        f"{page}: mark the block `{command[:60]}` with <!-- run: exit N --> or <!-- not run: why -->"
    )
    if marker == "not run":
        assert len(why) > 10, f"{page}: say why `{command[:60]}` is not run"
    else:
        assert re.fullmatch(r"exit \d", why), f"{page}: a run marker says its exit status: {why!r}"


@pytest.mark.slow
@pytest.mark.parametrize("page, marker, why, command", RUN, ids=[f"{b[0]}:{b[3][:40]}" for b in RUN])
def test_a_command_of_the_docs_does_what_they_say(pytester, page, marker, why, command):
    """pytest runs in process (pytester), as every end-to-end test runs the plugin: a process of
    its own costs 5 CPU s (PyTorch's import) and shows nothing more. A command that sets the
    environment (PYTHONPATH=... pytest) runs in one."""
    shutil.copytree(ROOT / "examples", pytester.path / "examples")
    line = command.splitlines()[0].split("#")[0].strip()
    words = [EXAMPLE if word in DUMP_WORDS else word for word in shlex.split(line)]
    env_words = [word for word in words if re.fullmatch(r"[A-Z_]+=.*", word)]  # PYTHONPATH=... pytest
    words = words[len(env_words) :]
    if words[0] in ("pytest", "./run-pytest") and not env_words:  # pytest of this environment
        result = pytester.runpytest_inprocess(*words[1:], "-p", "no:cacheprovider")
        code, output = int(result.ret), result.stdout.str() + result.stderr.str()
    else:
        if words[0] in ("pytest", "./run-pytest"):
            words = [sys.executable, "-m", "pytest", *words[1:]]
        env = dict(os.environ)
        for word in env_words:
            name, value = word.split("=", 1)
            env[name] = str(ROOT / value) if name == "PYTHONPATH" else value
        done = subprocess.run(
            [*words, "-p", "no:cacheprovider"], cwd=pytester.path, env=env, capture_output=True, text=True, timeout=600
        )
        code, output = done.returncode, done.stdout + done.stderr
    expected = int(why.split()[1])
    assert code == expected, output[-6000:]
    assert list(pytester.path.rglob("accuracy_checking_result_*.csv")), "the run wrote no result CSV"
    assert "INTERNALERROR" not in output
