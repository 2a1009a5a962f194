"""Where the model called a failing entry (stack.json), and the first failure in call order."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import pytest

from conftest import read_csv, run_msprobe
from pytest_msprobe.dumps import stack
from pytest_msprobe.dumps.dump import parse_entry_name
from pytest_msprobe.results import CallSite

SHIPPED = Path(__file__).resolve().parent.parent / "examples" / "pt_tensor_L1" / "stack.json"
# examples/pt_tensor_L1 under the default rule on cpu: the failing entries and where msprobe recorded their calls.
MODEL = "/home/user/train/pt_dump.py"
SITES = {
    "Torch.matmul.1.forward": (28, "hb = torch.matmul(y.to(torch.bfloat16), self.fc2.weight.t().to(torch.bfloat16)).float()"),
    "Functional.linear.1.forward": (31, "z = self.fc2(y)"),
    "Tensor.float.2.backward": (32, "return z.float() + hb + hh[:, :8]"),
    "Functional.linear.1.backward": (31, "z = self.fc2(y)"),
    "Tensor.float.0.backward": (28, "hb = torch.matmul(y.to(torch.bfloat16), self.fc2.weight.t().to(torch.bfloat16)).float()"),
    "Torch.matmul.1.backward": (28, "hb = torch.matmul(y.to(torch.bfloat16), self.fc2.weight.t().to(torch.bfloat16)).float()"),
}


def at(entry: str) -> str:
    line, code = SITES[entry]
    return f"at {MODEL}:{line} in forward: {code}"


def name(entry: str):
    return parse_entry_name(entry)


# -- reading stack.json ------------------------------------------------------------


def test_the_first_frame_in_the_users_code_of_a_real_stack():
    stacks = stack.read_stacks(SHIPPED)
    assert stack.call_site(stacks["Functional.conv2d.0.forward"]) == CallSite(
        MODEL, 18, "forward", "y = self.relu(self.conv(x)) # (B,4,4,4)")
    # Grouped calls of msprobe 26.x share their frames.
    assert stack.call_site(stacks["Torch.softmax.0.forward"]).line == 24


@pytest.mark.parametrize("path,users", [
    ("/home/user/train/model.py", True),
    ("train/model.py", True),
    ("/home/user/venv/lib/python3.11/site-packages/torch/nn/modules/conv.py", False),
    ("/usr/lib/python3/dist-packages/numpy/core/numeric.py", False),
    ("/usr/local/lib/python3.10/contextlib.py", False),
    ("/home/user/src/pytorch/torch/nn/functional.py", False),  # torch built from a checkout
    ("/home/user/msprobe/pytorch/hook_module/wrap.py", False),
    ("<frozen runpy>", False),
    ("C:\\Users\\me\\train\\model.py", True),
])
def test_library_standard_library_and_installed_frames_are_not_the_users(path, users):
    assert stack.in_user_code(path) is users


def test_the_older_layout_maps_a_name_to_its_frames(tmp_path):
    """Written by hand from the real one: msprobe before 26.x keyed each API by its name."""
    real = json.loads(SHIPPED.read_text())
    older = {names[0]: frames for names, frames in real.values()}
    path = tmp_path / "stack.json"
    path.write_text(json.dumps(older))
    sites = stack.CallSites()
    assert sites.of(tmp_path / "dump.json", name("Functional.linear.1.forward")) == CallSite(
        MODEL, 31, "forward", "z = self.fc2(y)")
    assert sites.of(tmp_path / "dump.json", name("Functional.linear.1.backward")).line == 31  # its forward's


@pytest.mark.parametrize("content", [
    None,  # missing
    "{not json",
    "[1, 2, 3]",
    '{"0": "a string", "1": [["Functional.linear.1.forward"], "not a list"], "2": [[1, 2], []]}',
    '{"Functional.linear.1.forward": ["File nowhere", 42, null, "File /x/site-packages/torch/a.py, line 1, in f, \\n g()"]}',
    # A line number no int() reads (Python reads at most 4,300 digits): no site, not a fault.
    '{"Functional.linear.1.forward": ["File /home/u/m.py, line ' + "9" * 5000 + ', in f, \\n g()"]}',
    '{"Functional.linear.1.forward": ["File /home/u/m.py, line 1' + "0" * 20 + ', in f, \\n g()"]}',
])
def test_a_missing_or_malformed_stack_json_gives_no_site(tmp_path, content):
    if content is not None:
        (tmp_path / "stack.json").write_text(content)
    assert stack.CallSites().of(tmp_path / "dump.json", name("Functional.linear.1.forward")) is None


def test_a_stack_json_over_the_cap_is_not_read(tmp_path, monkeypatch):
    shutil.copy(SHIPPED, tmp_path / "stack.json")
    monkeypatch.setattr(stack, "MAX_BYTES", SHIPPED.stat().st_size - 1)
    assert stack.CallSites().of(tmp_path / "dump.json", name("Functional.linear.1.forward")) is None
    monkeypatch.setattr(stack, "MAX_BYTES", SHIPPED.stat().st_size)
    assert stack.CallSites().of(tmp_path / "dump.json", name("Functional.linear.1.forward")) is not None


def test_stack_json_is_read_once_per_dump_and_only_when_asked(tmp_path, monkeypatch):
    shutil.copy(SHIPPED, tmp_path / "stack.json")
    reads = []
    real = stack.read_stacks
    monkeypatch.setattr(stack, "read_stacks", lambda path: reads.append(path) or real(path))
    sites = stack.CallSites()
    assert reads == []
    for entry in SITES:
        assert sites.of(tmp_path / "dump.json", name(entry)).line == SITES[entry][0]
    assert reads == [tmp_path / "stack.json"]


def test_a_long_source_line_is_cut():
    site = stack.parse_frame(f"File /home/u/m.py, line 3, in f, \n x = {'a' * 500}")
    assert len(site.code) == stack.MAX_CODE and site.code.endswith("...")


# -- what a user reads -------------------------------------------------------------


@pytest.mark.slow
def test_failing_entries_say_where_the_model_called_them(pytester, copy_dump):
    dump = copy_dump("pt_tensor_L1")
    result = run_msprobe(pytester, dump, "--msprobe-device", "cpu")
    assert result.parseoutcomes() == {"failed": 6, "passed": 60}
    # The failure message: the line right under its header.
    for entry in SITES:
        header = next(i for i, line in enumerate(result.outlines) if line.startswith(f"{entry}: ") and "break" in line)
        assert result.outlines[header + 1] == f"  {at(entry)}"
    # The result and details Messages.
    out = pytester.path / "out"
    messages = {row["API Name"]: row["Message"] for row in read_csv(out, "result")}
    assert at("Functional.linear.1.forward") in messages["Functional.linear.1"]
    assert "at /home" not in messages["Functional.relu.0"]  # a passing API says nothing of it
    for row in read_csv(out, "details"):
        entry = row["API Name"].rsplit(".output.", 1)[0]
        assert ("at /home" in row["Message"]) == (row["Status"] == "error"), row
        if row["Status"] == "error":
            assert row["Message"].endswith(f"; {at(entry)}")
    # The summary: a line under each failure, and the first failure in call order.
    section = result.outlines[next(i for i, line in enumerate(result.outlines) if " msprobe " in line):]
    for entry in SITES:
        failure = next(i for i, line in enumerate(section) if line.startswith(f"{entry}: "))
        assert section[failure + 1] == f"    {at(entry)}"
    first = section.index("first failure in call order: Torch.matmul.1.forward (entry 19 of the dump)")
    assert section[first + 1] == f"    {at('Torch.matmul.1.forward')}"


@pytest.mark.slow
def test_without_stack_json_only_the_lines_are_missing(pytester, copy_dump):
    with_stack = copy_dump("pt_tensor_L1", "with")
    without = copy_dump("pt_tensor_L1", "without")
    (without.parent / "stack.json").unlink()
    broken = copy_dump("pt_tensor_L1", "broken")
    (broken.parent / "stack.json").write_text('{"0": [["Torch.matmul.1.forward"], ')
    runs = {key: run_msprobe(pytester, dump, "--msprobe-device", "cpu", out=key)
            for key, dump in (("with", with_stack), ("without", without), ("broken", broken))}
    assert not any("at /home" in line for key in ("without", "broken") for line in runs[key].outlines)
    for key in ("without", "broken"):
        assert runs[key].parseoutcomes() == runs["with"].parseoutcomes()
        runs[key].stdout.fnmatch_lines(["first failure in call order: Torch.matmul.1.forward (entry 19 of the dump)"])
        for kind in ("result", "details"):
            assert read_csv(pytester.path / key, kind) == strip_sites(read_csv(pytester.path / "with", kind))


def strip_sites(rows):
    """Rows without their call sites: what must not change when stack.json is missing."""
    sites = {f"; {at(entry)}" for entry in SITES}
    stripped = []
    for row in rows:
        for site in sites:
            row = {key: value.replace(site, "") for key, value in row.items()}
        stripped.append(row)
    return stripped


@pytest.mark.slow
def test_mindspore_failures_name_the_model_line(pytester, copy_dump):
    pytest.importorskip("mindspore")
    dump = copy_dump("ms_tensor_L1")
    result = run_msprobe(pytester, dump, "--msprobe-device", "cpu")
    site = "at /home/user/train/ms_dump.py:34 in construct: y = mint.where(y > 0, y, mint.exp(y) - 1.0)"
    result.stdout.fnmatch_lines(["Mint.exp.0.forward: 1 of 1 outputs break*", f"  {site}"])
    messages = {row["API Name"]: row["Message"] for row in read_csv(pytester.path / "out", "result")}
    assert site in messages["Mint.exp.0"]


@pytest.mark.slow
def test_under_xdist_each_worker_reads_stack_json_once_and_the_first_failure_is_in_call_order(pytester, copy_dump):
    dump = copy_dump("pt_tensor_L1")
    log = pytester.path / "reads"
    pytester.makeconftest(f"""
        import os
        from pytest_msprobe.dumps import stack

        real = stack.read_stacks

        def logged(path):
            with open({str(log)!r}, "a") as handle:
                handle.write(f"{{os.getpid()}} {{path}}\\n")
            return real(path)

        stack.read_stacks = logged
    """)
    result = run_msprobe(pytester, dump, "-n", "2", "--msprobe-device", "cpu", subprocess=True)
    assert result.parseoutcomes()["failed"] == 6
    reads = log.read_text().splitlines()
    assert 1 <= len(reads) <= 2 and len(set(reads)) == len(reads)  # one read per worker at most
    assert all(line.endswith(os.path.join("pt_tensor_L1", "stack.json")) for line in reads)
    result.stdout.fnmatch_lines([
        "first failure in call order: Torch.matmul.1.forward (entry 19 of the dump)",
        f"    {at('Torch.matmul.1.forward')}",
    ])
