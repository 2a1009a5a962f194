"""Sizes bounded before any allocation, and time bounded (issue 26, items 4 and 5).

An entry whose arguments ask an output past --msprobe-max-elements (`eye(20000)`, `arange(0,
1.5e9)`, `repeat`, `expand`, `interpolate(size=...)`, a broadcast) is a SKIP naming the entry, the
output, its shape and the bound, found by its arguments' shapes or on PyTorch's meta device (or
by its recorded shapes, its data, its size arguments) before anything is allocated. A tensor
file declaring more than the bound (a small deflated .pt, a .npy header) is refused before it is
loaded. An entry past --msprobe-timeout is an error row naming the limit, and the run goes on.
"""

from __future__ import annotations

import io
import json
import signal
import struct
import sys
import time
import zipfile
from pathlib import Path

import numpy as np
import pytest
import torch

from conftest import read_csv, run_msprobe
from pytest_msprobe.checking.check import Checker
from pytest_msprobe.checking.time_limit import TimeLimit, TimeUp
from pytest_msprobe.dumps.dump import parse_entry_name, read_dump
from pytest_msprobe.frameworks import RunOptions, Tested
from pytest_msprobe.frameworks.output_bounds import OutputTooLarge, call_outputs, recorded_entry
from pytest_msprobe.frameworks.torch_engine import CODEC, Call
from pytest_msprobe.inputs.rebuild import InputError, Rebuilder, element_budget, tensor_files
from pytest_msprobe.judging.standards import make_standard
from pytest_msprobe.options import Options
from pytest_msprobe.results import ERROR, PASS, SKIP

BOUND = 1_000_000


def tensor(shape, dtype="torch.float32", low=-1.0, high=1.0, **extra) -> dict:
    return {"type": "torch.Tensor", "dtype": dtype, "shape": list(shape), "Max": high, "Min": low, **extra}


def ints(*values) -> list:
    return [{"type": "int", "value": v} for v in values]


def entry(args, kwargs=None, outputs=None) -> dict:
    # What a hostile dump records for the output: small, whatever the call makes.
    return {"input_args": args, "input_kwargs": kwargs or {}, "output": outputs or [tensor([2, 2])]}


# entry -> (body, what its SKIP says: the output and its shape)
ASKED = {
    "Torch.eye.0.forward": (entry(ints(20000)), "output[0] would be [20000, 20000] is 400,000,000 elements"),
    "Torch.arange.0.forward": (
        entry([*ints(0), {"type": "float", "value": 1.5e9}]),
        "output[0] would be [1500000000] is 1,500,000,000 elements",
    ),
    "Torch.full.0.forward": (
        entry([ints(50000, 50000), {"type": "float", "value": 1.0}]),
        "output[0] would be [50000, 50000]",
    ),
    "Tensor.repeat.0.forward": (entry([tensor([2, 3]), *ints(10000, 10000)]), "output[0] would be [20000, 30000]"),
    "Tensor.expand.0.forward": (entry([tensor([1, 1]), *ints(60000, 60000)]), "output[0] would be [60000, 60000]"),
    "Torch.broadcast_to.0.forward": (
        entry([tensor([1, 3]), ints(10**6, 3)]),
        "output[0] would be [1000000, 3] is 3,000,000 elements",
    ),
    "Functional.interpolate.0.forward": (
        entry([tensor([1, 1, 4, 4])], {"size": ints(60000, 60000)}),
        "output[0] would be [1, 1, 60000, 60000]",
    ),
    "Functional.pad.0.forward": (
        entry([tensor([2, 3]), ints(100000, 100000, 10000, 10000)]),
        "output[0] would be [20002, 200003]",
    ),
    "Torch.histc.0.forward": (entry([tensor([4])], {"bins": ints(10**8)[0]}), "output[0] would be [100000000]"),
    "Tensor.new_ones.0.forward": (entry([tensor([2, 3]), ints(60000, 60000)]), "output[0] would be [60000, 60000]"),
    "Torch.kron.0.forward": (entry([tensor([300, 300]), tensor([300, 300])]), "output[0] would be [90000, 90000]"),
    "Torch.outer.0.forward": (entry([tensor([60000]), tensor([60000])]), "output[0] would be [60000, 60000]"),
    "Torch.cartesian_prod.0.forward": (entry([tensor([1000])] * 3), "output[0] would be [1000000000, 3]"),
    # Sized by their arguments' shapes (shape_rules.py): no meta run.
    "Tensor.__add__.0.forward": (
        entry([tensor([60000, 1]), tensor([1, 60000])]),
        "output[0] would be [60000, 60000] is 3,600,000,000 elements (sized by its arguments)",
    ),
    "Functional.linear.0.forward": (
        entry([tensor([60000, 1]), tensor([60000, 1]), tensor([60000])]),
        "output[0] would be [60000, 60000]",
    ),
    "Torch.matmul.0.forward": (entry([tensor([3000, 1]), tensor([1, 3000])]), "output[0] would be [3000, 3000]"),
    "Functional.scaled_dot_product_attention.0.forward": (
        entry([tensor([1, 1, 3000, 1]), tensor([1, 1, 2, 1]), tensor([1, 1, 2, 3000])]),
        "output[0] would be [1, 1, 3000, 3000]",
    ),
    "Functional.conv2d.0.forward": (
        entry([tensor([1, 1, 100, 100]), tensor([1000, 1, 1, 1])]),
        "output[0] would be [1, 1000, 100, 100]",
    ),
    "Functional.embedding.0.forward": (
        entry([tensor([2000], "torch.int64", 0, 499), tensor([500, 1000])]),
        "output[0] would be [2000, 1000]",
    ),
    # No meta kernel: the data sizes them.
    "Torch.repeat_interleave.0.forward": (
        entry([tensor([4]), tensor([4], "torch.int64", 10**9, 10**9)]),
        "an output (or a step inside the call) sized by its data is 4,000,000,000 elements",
    ),
    "Torch.combinations.0.forward": (
        entry([tensor([3000])], {"r": ints(3)[0]}),
        "an output (or a step inside the call) sized by its data is 81,000,000,000 elements",
    ),
    "Torch.bincount.0.forward": (
        entry([tensor([4], "torch.int64", 0, 3)], {"minlength": ints(10**10)[0]}),
        "an output (or a step inside the call) sized by its data is 10,000,000,000 elements",
    ),
    # The recorded output alone past the bound.
    "Functional.relu.0.forward": (
        entry([tensor([2, 3])], outputs=[tensor([60000, 60000])]),
        "output[0].shape: recorded [60000, 60000] is 3,600,000,000 elements",
    ),
}
# Within the bound: checked as ever, beside the refused ones.
GOOD = {
    "Torch.eye.1.forward": entry(ints(100)),
    "Tensor.expand.1.forward": entry([tensor([1, 3]), *ints(4, 3)]),
    "Functional.relu.1.forward": entry([tensor([2, 3])], outputs=[tensor([2, 3])]),
    "Tensor.__add__.1.forward": entry([tensor([2, 1]), tensor([1, 3])], outputs=[tensor([2, 3])]),
}


def write_dump(folder: Path, entries: dict, framework="pytorch", task="statistics") -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / "dump.json"
    header = {"task": task, "level": "L1", "framework": framework, "dump_data_dir": None}
    path.write_text(json.dumps({**header, "data": entries}))
    return path


def checker(max_elements=BOUND, timeout=600.0, device="cpu") -> Checker:
    tested = Tested.RECORDED if device == "recorded" else Tested.DEVICE
    run = RunOptions(device, tested, "auto" if device != "recorded" else "real", 1234)
    return Checker(run, make_standard(Options()), max_elements=max_elements, timeout=timeout)


def check(path: Path, name: str, **kwargs):
    dump = read_dump(path)
    found = parse_entry_name(name)
    assert found is not None
    return checker(**kwargs).check(dump, found)


# -- outputs -----------------------------------------------------------------------------


@pytest.mark.parametrize("name", sorted(ASKED))
def test_an_output_past_the_bound_is_a_skip_naming_the_entry_the_output_and_the_bound(tmp_path, name):
    body, says = ASKED[name]
    path = write_dump(tmp_path, {name: body})
    result = check(path, name)
    assert result.status == SKIP
    assert result.reason.startswith(f"{name}: ")
    assert says in result.reason
    assert "more than --msprobe-max-elements 1,000,000: not run" in result.reason


@pytest.mark.parametrize("name", sorted(GOOD))
def test_an_output_within_the_bound_is_checked(tmp_path, name):
    path = write_dump(tmp_path, {name: GOOD[name]})
    assert check(path, name).status == PASS


def test_the_outputs_of_an_entry_count_together():
    specs = [tensor([600, 1000]), tensor([600, 1000])]
    recorded_entry({"Torch.split.0.forward": {"output": [specs[0]]}}, "Torch.split.0", "forward", BOUND)
    with pytest.raises(
        OutputTooLarge,
        match=r"output\[1\]\.shape: recorded \[600, 1000\] is 600,000 elements "
        r"\(1,200,000 with the outputs before it\)",
    ):
        recorded_entry({"Torch.split.0.forward": {"output": specs}}, "Torch.split.0", "forward", BOUND)


def test_a_backward_counts_its_forward_outputs_and_its_gradients():
    entries = {
        "Functional.relu.0.forward": {"output": [tensor([2, 3])]},
        "Functional.relu.0.backward": {"input": [tensor([2, 3])], "output": [tensor([60000, 60000])]},
    }
    with pytest.raises(OutputTooLarge, match=r"^Functional\.relu\.0\.backward: output\[0\]\.shape: recorded"):
        recorded_entry(entries, "Functional.relu.0", "backward", BOUND)


def test_a_device_named_as_text_is_sized_on_meta_too(tmp_path):
    name = "Torch.tril_indices.2.forward"  # no size rule reads it (size_rules.py)
    path = write_dump(tmp_path, {name: entry(ints(20000, 20000), {"device": {"type": "str", "value": "cpu"}})})
    assert "output[0] would be [2, 200010000] is 400,020,000 elements (sized on PyTorch's meta device)" in (
        check(path, name).reason
    )


def test_a_mindspore_entry_is_bounded_by_its_recorded_shapes_and_its_size_arguments(tmp_path):
    x = {"type": "mindspore.Tensor", "dtype": "Float32", "shape": [2, 3], "Max": 1.0, "Min": -1.0}
    entries = {
        "Mint.abs.0.forward": {"input_args": [x], "input_kwargs": {}, "output": [{**x, "shape": [60000, 60000]}]},
        "Mint.abs.1.forward": {"input_args": [x], "input_kwargs": {}, "output": [x]},
    }
    path = write_dump(tmp_path, entries, framework="mindspore")
    assert "output[0].shape: recorded [60000, 60000]" in check(path, "Mint.abs.0.forward").reason
    assert check(path, "Mint.abs.1.forward", device="recorded").status == SKIP  # no tensor data: not for the bound
    assert "more than --msprobe-max-elements" not in check(path, "Mint.abs.1.forward", device="recorded").reason


def test_a_mindspore_call_is_sized_on_meta_by_its_pytorch_bench(tmp_path):
    x = {"type": "mindspore.Tensor", "dtype": "Float32", "shape": [2, 2], "Max": 1.0, "Min": -1.0}
    entries = {
        "Mint.eye.0.forward": {"input_args": ints(20000), "input_kwargs": {}, "output": [x]},
        "Mint.tile.0.forward": {"input_args": [x, ints(30000, 30000)], "input_kwargs": {}, "output": []},
        "Mint.eye.1.forward": {"input_args": ints(20), "input_kwargs": {}, "output": [{**x, "shape": [20, 20]}]},
    }
    path = write_dump(tmp_path, entries, framework="mindspore")
    assert "output[0] would be [20000, 20000] is 400,000,000 elements" in check(path, "Mint.eye.0.forward").reason
    assert "output[0] would be [60000, 60000]" in check(path, "Mint.tile.0.forward").reason
    assert check(path, "Mint.eye.1.forward").status == PASS


def failing_call(api: str, args: list, outputs: list) -> Call:
    def no_meta_kernel(*args, **kwargs):
        raise NotImplementedError("no meta kernel")

    name = parse_entry_name(f"{api}.0.forward")
    assert name is not None
    return Call(name, None, no_meta_kernel, args, {}, outputs)


def test_without_a_meta_kernel_the_size_arguments_speak():
    with pytest.raises(OutputTooLarge, match=r"input_args\[1\]: the size argument \[60000, 60000\] is 3,600,000,000"):
        call_outputs(failing_call("Torch.some_op", [torch.zeros(2), [60000, 60000]], [tensor([2])]), BOUND)
    call_outputs(failing_call("Torch.some_op", [torch.zeros(2), [600, 600]], [tensor([2])]), BOUND)
    # A MindSpore entry: its recorded shapes, where it has them; its size arguments where not.
    call_outputs(failing_call("Mint.some_op", [[60000, 60000]], [tensor([2])]), BOUND, "mindspore")
    with pytest.raises(OutputTooLarge, match=r"input_args\[0\]: the size argument"):
        call_outputs(failing_call("Mint.some_op", [[60000, 60000]], []), BOUND, "mindspore")


# -- tensor files ------------------------------------------------------------------------


def inflated_pt(path: Path, elements: int, full_record: bool = True) -> None:
    """A .pt that declares `elements` float32 elements: torch.save's own archive of a small tensor,
    its pickle's sizes rewritten; its record deflated (a few KB on disk), or left as it was."""
    buffer = io.BytesIO()
    torch.save(torch.arange(6, dtype=torch.float32), buffer)
    source = zipfile.ZipFile(io.BytesIO(buffer.getvalue()))
    size = b"\x8a\x08" + struct.pack("<q", elements)  # LONG1 of 8 bytes
    with zipfile.ZipFile(path, "w") as out:
        for info in source.infolist():
            data = source.read(info)
            if info.filename.endswith("/data.pkl"):
                assert b"cpuq\x04K\x06t" in data and b"K\x06\x85" in data
                data = data.replace(b"cpuq\x04K\x06t", b"cpuq\x04" + size + b"t").replace(b"K\x06\x85", size + b"\x85")
            if info.filename.endswith("/data/0") and full_record:
                data = bytes(4 * elements)
            out.writestr(info.filename, data, compress_type=zipfile.ZIP_DEFLATED)


def load(folder: Path, data_name: str, shape, max_elements=BOUND, dtype="torch.float32"):
    rebuilder = Rebuilder(CODEC, "Functional.relu.0.forward", folder, "real", 1)
    body = {"input_args": [tensor(shape, dtype, data_name=data_name)]}
    with element_budget(max_elements):
        return rebuilder.rebuild(body).args[0]


def test_a_small_pt_declaring_a_storage_past_the_bound_is_refused_before_loading(tmp_path):
    inflated_pt(tmp_path / "x.pt", 5_000_000)
    assert (tmp_path / "x.pt").stat().st_size < 100_000  # 20 MB declared, deflated
    assert torch.load(tmp_path / "x.pt", weights_only=True).numel() == 5_000_000  # what torch.load makes of it
    with pytest.raises(InputError) as refused:
        load(tmp_path, "x.pt", [5_000_000])
    assert str(refused.value) == (
        "Functional.relu.0.forward: input_args[0].data_name: x.pt declares 5,000,000 elements "
        "(5,000,000 float32), more than --msprobe-max-elements 1,000,000: not loaded"
    )
    assert load(tmp_path, "x.pt", [5_000_000], max_elements=5_000_000).numel() == 5_000_000


def test_a_pt_whose_record_disagrees_with_its_declared_size_is_refused(tmp_path):
    inflated_pt(tmp_path / "x.pt", 1_500_000_000, full_record=False)
    with pytest.raises(
        InputError,
        match=r"input_args\[0\]\.data_name: cannot load x\.pt: storage '0' declares "
        r"1,500,000,000 float32 elements \(6,000,000,000 bytes\), and its record data/0 24 bytes",
    ):
        load(tmp_path, "x.pt", [1_500_000_000], max_elements=2**31)


def test_a_pt_of_another_shape_is_refused_before_loading(tmp_path, monkeypatch):
    torch.save(torch.zeros(2, 3), tmp_path / "x.pt")
    monkeypatch.setattr(CODEC, "load", lambda path: pytest.fail("loaded"))
    with pytest.raises(InputError, match=r"input_args\[0\]\.shape: recorded \[6\] but x\.pt holds \[2, 3\]"):
        load(tmp_path, "x.pt", [6])


def test_a_pt_holding_no_tensor_is_refused_before_loading(tmp_path, monkeypatch):
    torch.save({"a": torch.zeros(2)}, tmp_path / "x.pt")
    monkeypatch.setattr(CODEC, "load", lambda path: pytest.fail("loaded"))
    with pytest.raises(InputError, match=r"data_name: cannot load x\.pt: holds a dict, not a tensor"):
        load(tmp_path, "x.pt", [2])


def test_a_pickle_that_is_no_zip_is_refused_unread(tmp_path):
    torch.save(torch.zeros(2), tmp_path / "x.pt", _use_new_zipfile_serialization=False)
    with pytest.raises(InputError, match=r"cannot load x\.pt: neither a \.npy array nor the zip archive"):
        load(tmp_path, "x.pt", [2])


@pytest.mark.parametrize(
    "kind", [torch.float32, torch.bfloat16, torch.float16, torch.int64, torch.bool, torch.complex64, torch.uint8]
)
def test_the_declared_sizes_of_a_pt_are_what_it_holds(tmp_path, kind):
    value = torch.zeros(3, 4, dtype=kind)
    torch.save(value[:, 1:], tmp_path / "x.pt")  # a view: the whole storage is saved
    held = tensor_files.declared(tmp_path / "x.pt")
    assert (held.elements, held.shape, held.dtype, held.holds) == (12, [3, 3], str(kind).split(".")[1], "tensor")
    torch.save(torch.nn.Parameter(torch.zeros(2, 5)), tmp_path / "p.pt")
    assert tensor_files.declared(tmp_path / "p.pt").shape == [2, 5]


def test_a_pt_pickle_is_read_without_calling_or_importing_anything(tmp_path):
    class Evil:
        def __reduce__(self):
            return (Path.write_text, (Path(tmp_path / "mark"), "ran"))

    torch.save({"x": Evil()}, tmp_path / "evil.pt")
    held = tensor_files.declared(tmp_path / "evil.pt")
    assert held.holds == "dict"
    assert not (tmp_path / "mark").exists()


def test_an_npy_header_past_the_bound_or_another_shape_is_refused_before_loading(tmp_path):
    from pytest_msprobe.frameworks.mindspore import CODEC as MS_CODEC

    header = {"descr": "<f4", "fortran_order": False, "shape": (40_000, 40_000)}
    with open(tmp_path / "big.npy", "wb") as handle:
        np.lib.format.write_array_header_1_0(handle, header)
        handle.write(bytes(64))
    rebuilder = Rebuilder(MS_CODEC, "Mint.abs.0.forward", tmp_path, "real", 1)
    spec = {"type": "mindspore.Tensor", "dtype": "Float32", "shape": [40_000, 40_000], "data_name": "big.npy"}
    with element_budget(BOUND), pytest.raises(InputError) as refused:
        rebuilder.rebuild({"input_args": [spec]})
    assert str(refused.value) == (
        "Mint.abs.0.forward: input_args[0].data_name: big.npy declares 1,600,000,000 elements (float32), "
        "more than --msprobe-max-elements 1,000,000: not loaded"
    )
    truncated = r"cannot load big\.npy: its header declares \[40000, 40000\] float32, 6,400,000,000 bytes"
    with element_budget(2**31), pytest.raises(InputError, match=truncated):
        rebuilder.rebuild({"input_args": [spec]})
    np.save(tmp_path / "small.npy", np.zeros((2, 3), np.float32))
    with element_budget(BOUND), pytest.raises(InputError, match=r"input_args\[0\]\.shape: recorded \[6\] but small"):
        rebuilder.rebuild({"input_args": [{**spec, "shape": [6], "data_name": "small.npy"}]})


# -- time ----------------------------------------------------------------------------------


def test_a_time_limit_stops_python_at_once_and_a_kernel_when_it_returns():
    with TimeLimit(0.2) as limit, pytest.raises(TimeUp):
        time.sleep(5)
    assert limit.expired and limit.elapsed < 2
    a = torch.ones(1200, 1200, dtype=torch.float64)
    started = time.monotonic()
    a @ a
    alone = time.monotonic() - started
    started = time.monotonic()
    kernel = None
    with TimeLimit(0.01) as limit, pytest.raises(TimeUp):
        kernel = a @ a  # one C kernel: not interrupted, the limit is raised where Python runs next
        while True:
            pass
    assert kernel is not None and limit.expired and time.monotonic() - started < 3 * alone + 5
    with TimeLimit(0) as never:
        time.sleep(0.05)
    assert not never.armed and not never.expired


def test_an_alarm_set_by_another_is_left_to_it():
    fired = []
    previous = signal.signal(signal.SIGALRM, lambda *_: fired.append(True))
    try:
        signal.setitimer(signal.ITIMER_REAL, 0.3)
        with TimeLimit(0.05) as limit:
            time.sleep(0.1)
        assert not limit.armed and not limit.expired
        time.sleep(0.5)
        assert fired == [True]  # its timer neither replaced nor cancelled
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)


def test_an_entry_past_the_timeout_is_an_error_naming_the_limit(tmp_path, monkeypatch):
    def slow_relu(x, *args, **kwargs):
        time.sleep(60)
        return x

    monkeypatch.setattr(torch.nn.functional, "relu", slow_relu)
    path = write_dump(tmp_path, {"Functional.relu.0.forward": GOOD["Functional.relu.1.forward"]})
    started = time.monotonic()
    result = check(path, "Functional.relu.0.forward", timeout=0.5)
    assert time.monotonic() - started < 10
    assert result.status == ERROR
    assert "ran past --msprobe-timeout 0.5 s" in result.reason


# -- as a user runs it -----------------------------------------------------------------------

# The run's own peak: VmHWM belongs to the process's memory map, made new at exec (ru_maxrss
# would keep the peak of the pytest process that forked it, gigabytes late in the suite).
PEAK = """
import sys, pytest
code = pytest.main(sys.argv[2:])
status = open("/proc/self/status").read()
peak = next(line.split()[1] for line in status.splitlines() if line.startswith("VmHWM:"))
with open(sys.argv[1], "w") as handle:
    handle.write(peak)
sys.exit(code)
"""


@pytest.mark.slow
def test_a_dump_asking_huge_outputs_skips_each_naming_it_and_stays_small(pytester):
    path = write_dump(pytester.path / "asked", {**{n: body for n, (body, _) in ASKED.items()}, **GOOD})
    (pytester.path / "peak.py").write_text(PEAK)
    args = ["-p", "no:cacheprovider", "-rs", "--msprobe-dump", str(path), "--msprobe-device", "cpu"]
    result = pytester.run(
        sys.executable, "peak.py", "peak.txt", *args, "--msprobe-max-elements", str(BOUND), "--msprobe-out", "out"
    )
    result.assert_outcomes(passed=len(GOOD), skipped=len(ASKED))
    skipped = [line for line in result.outlines if line.startswith("SKIPPED")]
    for name, (_, says) in ASKED.items():
        told = [line for line in skipped if f": {name}: " in line and says in line]
        assert len(told) == 1 and "more than --msprobe-max-elements 1,000,000: not run" in told[0], name
    peak_kib = int((pytester.path / "peak.txt").read_text())
    # The smallest refused output (3,000,000 elements, broadcast_to) alone would be 24 MB in float64
    # and the largest hundreds of GB; the run stays at what pytest and torch take to start.
    assert peak_kib < 900 * 1024, f"peak RSS {peak_kib / 1024:.0f} MiB"
    rows = {row["API Name"]: row for row in read_csv(pytester.path / "out", "result")}
    for name in ASKED:
        row = rows[name.rsplit(".", 1)[0]]
        assert row["Forward Test Success"] == "SKIP" and "more than --msprobe-max-elements" in row["Message"]


@pytest.mark.slow
@pytest.mark.parametrize("workers", [[], ["-n", "2"]], ids=["serial", "xdist"])
def test_a_slow_entry_is_an_error_row_and_the_run_goes_on(pytester, workers):
    # A real slow call, in C: matmuls of 3000 x 3000 matrices in float32 and float64 (54 GFLOP each,
    # two seconds or more here), allowed by the bound, against a limit of half a second.
    entries = {
        "Torch.matmul.0.forward": entry([tensor([3000, 3000]), tensor([3000, 3000])], outputs=[tensor([3000, 3000])]),
        **GOOD,
    }
    path = write_dump(pytester.path / "slow", entries)
    started = time.monotonic()
    result = run_msprobe(
        pytester,
        path,
        "--msprobe-timeout",
        "0.5",
        "--msprobe-max-elements",
        "20000000",
        *workers,
        device="cpu",
        subprocess=True,
    )
    elapsed = time.monotonic() - started
    result.assert_outcomes(failed=1, passed=len(GOOD))
    result.stdout.fnmatch_lines(["*Torch.matmul.0.forward: stopped after *s: ran past --msprobe-timeout 0.5 s*"])
    rows = {row["API Name"]: row for row in read_csv(pytester.path / "out", "result")}
    assert rows["Torch.matmul.0"]["Forward Test Success"] == "error"
    assert "ran past --msprobe-timeout 0.5 s" in rows["Torch.matmul.0"]["Message"]
    assert all(rows[n.rsplit(".", 1)[0]]["Forward Test Success"] == "pass" for n in GOOD)
    assert elapsed < 300  # workers started and the matmul returned, not the whole unbounded check


def test_the_timeout_is_an_option_and_an_ini_key(pytester, copy_dump):
    dump = copy_dump("pt_stats_L1")
    refused = run_msprobe(pytester, dump, "--msprobe-timeout", "-1", device="cpu")
    assert refused.ret == pytest.ExitCode.USAGE_ERROR
    refused.stderr.fnmatch_lines(["*--msprobe-timeout must be a number of seconds from 0 (no limit) up to *, not '-1'*"])
    pytester.makeini("[pytest]\nmsprobe_timeout = soon\n")
    refused = run_msprobe(pytester, dump, device="cpu")
    assert refused.ret == pytest.ExitCode.USAGE_ERROR
    refused.stderr.fnmatch_lines(["*--msprobe-timeout must be a number of seconds from 0 (no limit) up to *, not 'soon'*"])
    # Past what the process's alarm holds (292 years): a usage error, not a fault of every entry.
    pytester.makeini("[pytest]\n")
    refused = run_msprobe(pytester, dump, "--msprobe-timeout", "1e10", device="cpu")
    assert refused.ret == pytest.ExitCode.USAGE_ERROR
    refused.stderr.fnmatch_lines(["*--msprobe-timeout must be a number of seconds from 0 (no limit) up to *, not '1e10'*"])


@pytest.mark.parametrize(
    ("option", "value", "expects"),
    [
        ("--msprobe-cosine", "2", "a number from -1 up to (not including) 1"),
        ("--msprobe-cosine", "1", "a number from -1 up to (not including) 1"),
        ("--msprobe-max-abs-err", "0", "a number above 0"),
        ("--msprobe-max-abs-err", "nan", "a number above 0"),
    ],
)
def test_a_bound_no_output_can_pass_is_a_usage_error(pytester, copy_dump, option, value, expects):
    """basic's Cosine > 2 or MaxAbsErr < 0 would fail every output: a one-line usage error instead."""
    refused = run_msprobe(pytester, copy_dump("pt_stats_L1"), option, value, device="cpu")
    assert refused.ret == pytest.ExitCode.USAGE_ERROR
    refused.stderr.fnmatch_lines([f"*{option} must be {expects}, not '{value}'*"])
