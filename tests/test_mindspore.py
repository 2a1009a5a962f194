"""pytest --msprobe-dump on MindSpore dumps, read as a user reads it: outcomes, CSVs, terminal."""

from __future__ import annotations

import json
import subprocess
import sys

import numpy as np
import pytest
import torch

from conftest import DATA, read_csv, run_msprobe

ms = pytest.importorskip("mindspore")

ENTRIES = 41  # ms_tensor_L1 and ms_stats_L1: 21 forward and 20 backward API entries
FORWARD_APIS = 21



def api_entries(dump_json):
    return list(json.loads(dump_json.read_text())["data"])


def outcome_total(result):
    outcomes = result.parseoutcomes()
    return sum(outcomes.get(k, 0) for k in ("passed", "failed", "skipped"))


@pytest.fixture
def tensor_dump(copy_dump):
    return copy_dump("ms_tensor_L1")


# -- the real tensor dump ----------------------------------------------------------


@pytest.mark.slow
@pytest.mark.parametrize("device", ["cpu", "recorded"])
def test_every_api_entry_is_an_item_with_a_verdict(pytester, tensor_dump, device):
    result = run_msprobe(pytester, tensor_dump, "--msprobe-device", device, "-v", "-rs")
    assert outcome_total(result) == ENTRIES
    ids = [line.split(" ")[0].split("::")[1] for line in result.outlines if line.startswith("ms_tensor_L1/dump.json::")]
    assert ids == api_entries(tensor_dump)  # dump order, Primitive and Tensor entries included
    result.stdout.fnmatch_lines(["msprobe: ms_tensor_L1/dump.json: mindspore tensor dump, 21 forward, 20 backward*"])
    rows = read_csv(pytester.path / "out", "result")
    assert len(rows) == FORWARD_APIS and len({row["API Name"] for row in rows}) == FORWARD_APIS
    skipped = {row["API Name"]: row for row in rows if "SKIP" in (row["Forward Test Success"],
                                                                   row["Backward Test Success"])}
    if device == "cpu":
        assert not skipped  # every op of this dump has a CPU kernel: every entry reaches a verdict
    else:  # msprobe wrote `output: []` for cat's backward: nothing recorded to compare
        assert list(skipped) == ["Mint.cat.0"]
        assert "records no input gradient" in skipped["Mint.cat.0"]["Message"]
    assert {row["Forward Test Success"] for row in rows} <= {"pass", "error", "SKIP"}
    no_backward = [row["API Name"] for row in rows if not row["Backward Test Success"]]
    assert no_backward == ["Tensor.__gt__.0"]  # the one API without a backward entry


@pytest.mark.slow
def test_result_and_details_rows_follow_the_contract(pytester, tensor_dump):
    run_msprobe(pytester, tensor_dump, "--msprobe-device", "cpu")
    rows = {row["API Name"]: row for row in read_csv(pytester.path / "out", "result")}
    assert list(next(iter(rows.values()))) == ["API Name", "Forward Test Success", "Backward Test Success", "Message"]
    assert (rows["Mint.matmul.0"]["Forward Test Success"], rows["Mint.matmul.0"]["Backward Test Success"]) == (
        "pass", "pass")
    assert "epsilon=1e-7" in rows["Primitive.layer_norm.LayerNorm.0"]["Message"]  # the assumption is said
    details = {d["API Name"]: d for d in read_csv(pytester.path / "out", "details")}
    assert list(next(iter(details.values()))) == ["API Name", "Bench Dtype", "Tested Dtype", "Shape", "Cosine",
                                                  "MaxAbsErr", "MaxRelativeErr", "Status", "Message"]
    row = details["Primitive.dense.Dense.0.forward.output.0"]
    assert (row["Bench Dtype"], row["Tested Dtype"], row["Shape"], row["Status"]) == (
        "torch.float64", "torch.float32", "[4, 8]", "pass")
    assert details["Tensor.__gt__.0.forward.output.0"]["Tested Dtype"] == "torch.bool"
    assert details["Tensor.to.2.forward.output.0"]["Tested Dtype"] == "torch.float16"
    assert details["Mint.mean.0.forward.output.0"]["Shape"] == "[]"
    # the LayerNorm primitive's three outputs, and a gradient per input (bool cond of where takes none)
    assert {f"Primitive.layer_norm.LayerNorm.0.forward.output.{i}" for i in range(3)} <= set(details)
    assert {f"Primitive.layer_norm.LayerNorm.0.backward.output.{i}" for i in range(3)} <= set(details)
    assert {name for name in details if name.startswith("Mint.where.0.backward")} == {
        "Mint.where.0.backward.output.0", "Mint.where.0.backward.output.1"}
    # cat's inputs came in a list: msprobe recorded no input gradient, the cpu run compares both
    assert {name for name in details if name.startswith("Mint.cat.0.backward")} == {
        "Mint.cat.0.backward.output.0", "Mint.cat.0.backward.output.1"}
    assert "msprobe recorded no input gradient" in rows["Mint.cat.0"]["Message"]


def load(folder, name, dtype=np.float64):
    return np.load(folder / "dump_tensor_data" / name, allow_pickle=False).astype(dtype)


def metrics(tested, bench):
    diff = np.abs(tested - bench)
    cosine = (tested * bench).sum() / (np.linalg.norm(tested) * np.linalg.norm(bench))
    rel = diff / np.where(bench == 0, 1e-8, np.abs(bench))
    return diff.max(), cosine, rel.max()


def assert_row_agrees(row, tested, exact):
    max_abs, cosine, max_rel = metrics(tested, exact)
    assert float(row["MaxAbsErr"]) == pytest.approx(max_abs, rel=1e-9, abs=1e-15)
    assert float(row["Cosine"]) == pytest.approx(cosine, abs=1e-12)
    assert float(row["MaxRelativeErr"]) == pytest.approx(max_rel, rel=1e-6)


@pytest.mark.slow
def test_recorded_metrics_agree_with_an_independent_float64_computation(pytester, tensor_dump):
    run_msprobe(pytester, tensor_dump, "--msprobe-device", "recorded")
    details = {d["API Name"]: d for d in read_csv(pytester.path / "out", "details")}
    folder = tensor_dump.parent
    x, w, b = (load(folder, f"Primitive.dense.Dense.0.forward.input.{i}.npy") for i in range(3))
    assert_row_agrees(details["Primitive.dense.Dense.0.forward.output.0"],
                      load(folder, "Primitive.dense.Dense.0.forward.output.0.npy"), x @ w.T + b)
    logits = load(folder, "Mint.softmax.0.forward.input.0.npy")
    e = np.exp(logits - logits.max(-1, keepdims=True))
    assert_row_agrees(details["Mint.softmax.0.forward.output.0"],
                      load(folder, "Mint.softmax.0.forward.output.0.npy"), e / e.sum(-1, keepdims=True))
    # where's backward: the gradient of x is the grad_output where cond holds, of y elsewhere
    cond = load(folder, "Mint.where.0.forward.input.0.npy", bool)
    grad = load(folder, "Mint.where.0.backward.input.0.npy")
    for i, exact in enumerate([np.where(cond, grad, 0.0), np.where(cond, 0.0, grad)]):
        row = details[f"Mint.where.0.backward.output.{i}"]
        assert float(row["MaxAbsErr"]) == pytest.approx(
            np.abs(load(folder, f"Mint.where.0.backward.output.{i + 1}.npy") - exact).max(), abs=1e-15)


def test_primitive_gradients_agree_with_an_independent_float64_autograd(pytester, tensor_dump):
    run_msprobe(pytester, tensor_dump, "--msprobe-device", "recorded")
    details = {d["API Name"]: d for d in read_csv(pytester.path / "out", "details")}
    folder = tensor_dump.parent

    def tensor(name, grad=False):
        return torch.from_numpy(load(folder, name)).requires_grad_(grad)

    x, gamma, beta = (tensor(f"Primitive.layer_norm.LayerNorm.0.forward.input.{i}.npy", True) for i in range(3))
    mean = x.mean(-1, keepdim=True)
    var = ((x - mean) ** 2).mean(-1, keepdim=True)
    y = (x - mean) / torch.sqrt(var + 1e-7) * gamma + beta  # written out, not the plugin's adapter
    exact = torch.autograd.grad(y, [x, gamma, beta], tensor("Primitive.layer_norm.LayerNorm.0.backward.input.0.npy"))
    # msprobe records a primitive's input gradients last input first: beta, gamma, x
    for i, grad in enumerate(exact):
        recorded = load(folder, f"Primitive.layer_norm.LayerNorm.0.backward.output.{2 - i}.npy")
        row = details[f"Primitive.layer_norm.LayerNorm.0.backward.output.{i}"]
        assert float(row["MaxAbsErr"]) == pytest.approx(np.abs(recorded - grad.numpy()).max(), rel=1e-6, abs=1e-12)
        assert row["Status"] == "pass"


@pytest.mark.slow
def test_tested_run_metrics_agree_with_mindspore_and_numpy(pytester, tensor_dump):
    """cpu: the tested output is MindSpore's own; the bench is float64."""
    run_msprobe(pytester, tensor_dump, "--msprobe-device", "cpu")
    details = {d["API Name"]: d for d in read_csv(pytester.path / "out", "details")}
    x = load(tensor_dump.parent, "Mint.exp.0.forward.input.0.npy", np.float32)
    tested = ms.mint.exp(ms.Tensor(x)).asnumpy().astype(np.float64)
    assert_row_agrees(details["Mint.exp.0.forward.output.0"], tested, np.exp(x.astype(np.float64)))


def alter(path, fn):
    array = np.load(path, allow_pickle=False)
    np.save(path, fn(array.copy()))


def one_off(a):
    a.reshape(-1)[5] += 1.0
    return a


def one_nan(a):
    a.reshape(-1)[3] = np.nan
    return a


def noised(a):
    return (a * (1 + 0.03 * np.random.default_rng(0).standard_normal(a.shape))).astype(a.dtype)


ALTERATIONS = {
    "Mint.softmax.0.forward.output.0.npy": lambda a: a * np.float32(1.03),
    "MintFunctional.relu.0.forward.output.0.npy": one_off,
    "Mint.matmul.1.forward.output.0.npy": one_nan,
    "Mint.add.0.backward.output.1.npy": noised,
}


def failed_ids(result):
    return {line.split("::", 1)[1].split(" ")[0] for line in result.outlines if line.startswith("FAILED ")}


@pytest.mark.slow
def test_error_data_of_a_mindspore_dump_is_saved_and_no_verdict_is_lost(pytester, tensor_dump):
    """--msprobe-save-error-data once failed every MindSpore entry (its run took no `keep`)."""
    result = run_msprobe(pytester, tensor_dump, "--msprobe-device", "cpu", "--msprobe-save-error-data")
    assert result.parseoutcomes() == {"failed": 1, "passed": 40}
    saved = pytester.path / "out" / "msprobe_error_data" / "ms_tensor_L1" / "Mint.exp.0.forward"
    assert [p.name for p in saved.parent.iterdir()] == [saved.name]
    manifest = json.loads((saved / "manifest.json").read_text())
    assert set(manifest["files"]) == {"inputs", "tested_outputs", "bench_outputs"}
    tested = np.load(saved / "tested_outputs.npz")["[0]"].astype(np.float64)
    bench = np.load(saved / "bench_outputs.npz")["[0]"]
    details = {d["API Name"]: d for d in read_csv(pytester.path / "out", "details")}
    assert np.abs(tested - bench).max() == pytest.approx(float(details["Mint.exp.0.forward.output.0"]["MaxAbsErr"]),
                                                         rel=1e-12)


@pytest.mark.slow
def test_altered_recorded_outputs_fail_and_the_untouched_pass(pytester, copy_dump):
    baseline = failed_ids(run_msprobe(pytester, copy_dump("ms_tensor_L1", "clean"), "--msprobe-device", "recorded", "-rf"))
    altered = copy_dump("ms_tensor_L1", "altered")
    for name, fn in ALTERATIONS.items():
        alter(altered.parent / "dump_tensor_data" / name, fn)
    result = run_msprobe(pytester, altered, "--msprobe-device", "recorded", "-rf", "--msprobe-out", "altered-out")
    expected = {name.rsplit(".output.", 1)[0] for name in ALTERATIONS}
    assert not baseline & expected  # they passed untouched
    assert failed_ids(result) == baseline | expected
    result.stdout.fnmatch_lines(["*Mint.matmul.1.forward*NaN*"])


@pytest.mark.slow
@pytest.mark.parametrize("device", ["cpu", "recorded"])
def test_ops_and_tensor_methods_in_mindspore_conventions(pytester, copy_dump, device):
    """ms_ops_L1: ops.* and Tensor methods with axis/keep_dims, tuples written as lists, fp16."""
    dump = copy_dump("ms_ops_L1")
    result = run_msprobe(pytester, dump, "--msprobe-device", device)
    assert outcome_total(result) == len(api_entries(dump)) == 52
    rows = {row["API Name"]: row for row in read_csv(pytester.path / "out", "result")}
    for api in ("Functional.mean.0", "Functional.softmax.0", "Functional.transpose.0", "Mint.permute.0",
                "Functional.expand_dims.0", "Tensor.squeeze.0", "Functional.tile.0", "Mint.max.0",
                "Primitive.dense.Dense.0", "Functional.matmul.0"):
        assert (rows[api]["Forward Test Success"], rows[api]["Backward Test Success"]) == ("pass", "pass"), rows[api]
    # sum of a row whose mean was just subtracted: float32 cancellation noise, which the basic rule fails
    assert rows["Tensor.sum.0"]["Forward Test Success"] == "error"
    assert "Cosine" in rows["Tensor.sum.0"]["Message"] and "rounding budget" in rows["Tensor.sum.0"]["Message"]
    skipped = [api for api, row in rows.items() if "SKIP" in (row["Forward Test Success"],
                                                               row["Backward Test Success"])]
    assert skipped == ([] if device == "cpu" else ["Functional.concat.0"])  # msprobe wrote `output: []`


@pytest.mark.slow
@pytest.mark.parametrize("device", ["cpu", "recorded"])
def test_primitives_and_cells_of_an_older_api_model(pytester, copy_dump, device):
    """ms_cnn_mix: Cell entries are no items; primitives whose attributes the dump lacks say so."""
    dump = copy_dump("ms_cnn_mix")
    result = run_msprobe(pytester, dump, "--msprobe-device", device)
    entries = api_entries(dump)
    assert outcome_total(result) == len([e for e in entries if not e.startswith("Cell.")]) == 48
    result.stdout.fnmatch_lines(["msprobe: ms_cnn_mix/dump.json: mindspore tensor dump, 26 forward, 22 backward, "
                                 "17 module entries"])
    assert result.ret == 0
    rows = {row["API Name"]: row for row in read_csv(pytester.path / "out", "result")}
    for api in ("Primitive.matmul.MatMul.0", "Primitive.bias_add.BiasAdd.0", "Primitive.relu.ReLU.0",
                "Functional.flatten.0", "Functional.gather.0", "Tensor.var.0", "Functional.gelu.0"):
        assert (rows[api]["Forward Test Success"], rows[api]["Backward Test Success"]) == ("pass", "pass"), rows[api]
    for api in ("Primitive.conv2d.Conv2D.0", "Primitive.max_pool.MaxPool.0", "Primitive.bn_infer.BatchNorm.0"):
        assert rows[api]["Forward Test Success"] == "SKIP"
        assert "msprobe records no primitive attributes" in rows[api]["Message"]
    assert "BiasAdd primitive: msprobe records no attributes; data_format NCHW assumed" in rows[
        "Primitive.bias_add.BiasAdd.0"]["Message"]


# -- statistics dumps: random inputs ---------------------------------------------------


@pytest.mark.slow
def test_statistics_dump_runs_in_random_mode_deterministically(pytester, copy_dump):
    dump = copy_dump("ms_stats_L1")
    first = run_msprobe(pytester, dump, "--msprobe-device", "cpu", "--msprobe-out", "one")
    assert outcome_total(first) == ENTRIES
    assert first.parseoutcomes().get("skipped", 0) == 0  # every op here has a CPU kernel
    rows = read_csv(pytester.path / "one", "result")
    assert len(rows) == FORWARD_APIS
    assert sum(row["Forward Test Success"] == "pass" for row in rows) >= FORWARD_APIS - 1
    run_msprobe(pytester, dump, "--msprobe-device", "cpu", "--msprobe-out", "two")
    assert read_csv(pytester.path / "one", "details") == read_csv(pytester.path / "two", "details")


def test_public_mindspore_statistics_dump(pytester):
    source = DATA / "public" / "ascend-mstt__msprobe_test_mindspore_ut_api_accuracy_checker_files__api_info_statistics.json"
    dump = pytester.path / "public" / "dump.json"
    dump.parent.mkdir()
    dump.write_bytes(source.read_bytes())
    result = run_msprobe(pytester, dump, "--msprobe-device", "cpu")
    result.stdout.fnmatch_lines(["msprobe: public/dump.json: mindspore statistics dump, 1 forward*"])
    assert result.parseoutcomes() == {"passed": 1}
    assert read_csv(pytester.path / "out", "result")[0]["API Name"] == "MintFunctional.relu.0"


def tensor_spec(shape, dtype="Float32", low=-1.0, high=1.0):
    return {"type": "mindspore.Tensor", "dtype": dtype, "shape": shape, "Max": high, "Min": low, "Mean": 0.0,
            "Norm": 1.0}


def scalar(kind, value):
    return {"type": kind, "value": value}


def forward(args, kwargs, outputs):
    return {"input_args": args, "input_kwargs": kwargs, "output": outputs}


# Entries laid out as msprobe writes them; every op without a CPU kernel is
# followed by one that has one, which must not inherit the error.
KERNEL_GAPS = {
    "Cell.net.Net.forward.0": forward([tensor_spec([2, 4])], {}, [tensor_spec([2, 4])]),
    "MintFunctional.gelu.0.forward": forward([tensor_spec([2, 4])], {}, [tensor_spec([2, 4])]),
    "Mint.exp.0.forward": forward([tensor_spec([2, 4])], {}, [tensor_spec([2, 4])]),
    "MintFunctional.layer_norm.0.forward": forward([tensor_spec([2, 8]), [scalar("int", 8)]], {},
                                                   [tensor_spec([2, 8])]),
    "Mint.abs.0.forward": forward([tensor_spec([2, 4])], {}, [tensor_spec([2, 4])]),
    "MintFunctional.avg_pool2d.0.forward": forward([tensor_spec([1, 3, 8, 8]), scalar("int", 2)], {},
                                                   [tensor_spec([1, 3, 4, 4])]),
    "MintFunctional.conv2d.0.forward": forward([tensor_spec([1, 3, 8, 8]), tensor_spec([4, 3, 3, 3])], {},
                                               [tensor_spec([1, 4, 6, 6])]),
    "Mint.baddbmm.0.forward": forward([tensor_spec([2, 3, 5]), tensor_spec([2, 3, 4]), tensor_spec([2, 4, 5])],
                                      {}, [tensor_spec([2, 3, 5])]),
    "Mint.norm.0.forward": forward([tensor_spec([3, 4])], {}, [tensor_spec([])]),
    "Mint.exp.1.forward": forward([tensor_spec([2, 4], "BFloat16")], {}, [tensor_spec([2, 4], "BFloat16")]),
    "Functional.mean.0.forward": forward([tensor_spec([3, 4, 5])], {"axis": scalar("int", 1),
                                         "keep_dims": scalar("bool", True)}, [tensor_spec([3, 1, 5])]),
    "Tensor.sum.0.forward": forward([tensor_spec([3, 4, 5])], {"axis": scalar("int", -1),
                                    "keepdims": scalar("bool", True)}, [tensor_spec([3, 4, 1])]),
    "Functional.transpose.0.forward": forward([tensor_spec([2, 3, 4]), [scalar("int", 2), scalar("int", 0),
                                              scalar("int", 1)]], {}, [tensor_spec([4, 2, 3])]),
    "Tensor.transpose.0.forward": forward([tensor_spec([2, 3, 4]), scalar("int", 0), scalar("int", 2)], {},
                                          [tensor_spec([4, 3, 2])]),
    "Mint.permute.0.forward": forward([tensor_spec([2, 3, 4]), [scalar("int", 2), scalar("int", 0), scalar("int", 1)]],
                                      {}, [tensor_spec([4, 2, 3])]),
    "Functional.tile.0.forward": forward([tensor_spec([2, 3]), [scalar("int", 2), scalar("int", 1)]], {},
                                         [tensor_spec([4, 3])]),
    "Tensor.astype.0.forward": forward([tensor_spec([2, 3]), scalar("mindspore.dtype", "Float16")], {},
                                       [tensor_spec([2, 3], "Float16")]),
    "MintDistributed.all_reduce.0.forward": forward([tensor_spec([3, 4])], {}, [tensor_spec([3, 4])]),
    "Functional.gather.0.forward": forward([tensor_spec([3, 4]), tensor_spec([2], "Int64", 0, 2), scalar("int", 0)],
                                           {}, [tensor_spec([2, 4])]),
    "Primitive.conv2d.Conv2D.0.forward": forward([tensor_spec([1, 3, 8, 8]), tensor_spec([4, 3, 3, 3])], {},
                                                 [tensor_spec([1, 4, 6, 6])]),
    "Functional.mean.0.backward": {"input": [tensor_spec([3, 1, 5])], "output": [tensor_spec([3, 4, 5])]},
    "MintFunctional.gelu.0.backward": {"input": [tensor_spec([2, 4])], "output": [tensor_spec([2, 4])]},
    "Mint.exp.0.backward": {"input": [tensor_spec([2, 4])], "output": [tensor_spec([2, 4])]},
}


def test_ops_without_a_cpu_kernel_are_skips_naming_the_kernel(pytester):
    dump = pytester.path / "gaps" / "dump.json"
    dump.parent.mkdir()
    dump.write_text(json.dumps({"task": "statistics", "level": "L1", "framework": "mindspore",
                                "dump_data_dir": None, "data": KERNEL_GAPS}))
    result = run_msprobe(pytester, dump, "--msprobe-device", "cpu", "-rs")
    assert outcome_total(result) == len(KERNEL_GAPS) - 1  # the Cell entry is no item
    rows = {row["API Name"]: row for row in read_csv(pytester.path / "out", "result")}
    missing = {"MintFunctional.gelu.0": "GeluExt", "MintFunctional.layer_norm.0": "LayerNormExt",
               "MintFunctional.avg_pool2d.0": "AvgPool2D", "Mint.baddbmm.0": "Baddbmm", "Mint.norm.0": "LinalgVectorNorm",
               "Mint.exp.1": "Exp for these input dtypes"}
    for api, kernel in missing.items():
        assert rows[api]["Forward Test Success"] == "SKIP"
        assert f"has no kernel {kernel} on cpu" in rows[api]["Message"], rows[api]
    # mint.nn.functional.conv2d is in no list of msprobe's: a dump naming it did not come from msprobe
    assert rows["MintFunctional.conv2d.0"]["Forward Test Success"] == "SKIP"
    assert "MintFunctional.conv2d: not one of the APIs msprobe records" in rows["MintFunctional.conv2d.0"]["Message"]
    assert rows["MintFunctional.gelu.0"]["Backward Test Success"] == "SKIP"
    # the entries after a kernel gap are judged on their own, and the argument conventions translate
    for api in ("Mint.exp.0", "Mint.abs.0", "Functional.mean.0", "Tensor.sum.0", "Functional.transpose.0",
                "Tensor.transpose.0", "Tensor.astype.0", "Mint.permute.0", "Functional.tile.0", "Functional.gather.0"):
        assert rows[api]["Forward Test Success"] == "pass", rows[api]
    assert rows["Mint.exp.0"]["Backward Test Success"] == rows["Functional.mean.0"]["Backward Test Success"] == "pass"
    assert "collective" in rows["MintDistributed.all_reduce.0"]["Message"]
    assert rows["Functional.gather.0"]["Forward Test Success"] == "pass"
    assert "Primitive.conv2d.Conv2D has no PyTorch equivalent" in rows["Primitive.conv2d.Conv2D.0"]["Message"]
    assert "Cell.net.Net.forward.0" not in rows


class TensorDump:
    """A MindSpore tensor dump laid out as msprobe writes one (.npy files, MindSpore dtype names)."""

    def __init__(self, folder):
        self.folder = folder
        (folder / "dump_tensor_data").mkdir(parents=True)
        self.data = {}

    DTYPES = {torch.float32: "Float32", torch.bfloat16: "BFloat16"}

    def spec(self, value, name):
        if not isinstance(value, torch.Tensor):
            return [self.spec(v, f"{name}.{i}") for i, v in enumerate(value)] if isinstance(value, list) else \
                scalar(type(value).__name__, value)
        array = value.detach().float().numpy()  # msprobe stores bfloat16 as float32: .npy has no bfloat16
        np.save(self.folder / "dump_tensor_data" / f"{name}.npy", array)
        return {**tensor_spec(list(array.shape), self.DTYPES[value.dtype], float(array.min()), float(array.max())),
                "data_name": f"{name}.npy"}

    def record(self, prefix, fn, *args, backward=False):
        """The call run in float32 by torch, standing in for the device that dumped it."""
        leaves = [a.requires_grad_(backward) for a in args if isinstance(a, torch.Tensor)]
        out = fn(*args)
        self.data[f"{prefix}.forward"] = forward([self.spec(a, f"{prefix}.forward.input.{i}")
                                                  for i, a in enumerate(args)], {},
                                                 [self.spec(out, f"{prefix}.forward.output.0")])
        if backward:
            grad = torch.randn(out.shape, generator=torch.Generator().manual_seed(1))
            grads = torch.autograd.grad(out, leaves, grad)
            self.data[f"{prefix}.backward"] = {
                "input": [self.spec(grad, f"{prefix}.backward.input.0")],
                "output": [self.spec(g, f"{prefix}.backward.output.{i}") for i, g in enumerate(grads)]}

    def write(self):
        path = self.folder / "dump.json"
        path.write_text(json.dumps({"task": "tensor", "level": "L1", "framework": "mindspore",
                                    "dump_data_dir": "/elsewhere", "data": self.data}))
        return path


@pytest.mark.slow
def test_ops_without_a_cpu_kernel_are_judged_from_a_recorded_dump(pytester):
    """A dump taken on Ascend is checked here: only the bench runs, and it is PyTorch's."""
    generator = torch.Generator().manual_seed(0)

    def randn(*shape):
        return torch.randn(*shape, generator=generator)

    writer = TensorDump(pytester.path / "ascend")
    F = torch.nn.functional
    writer.record("MintFunctional.gelu.0", F.gelu, randn(4, 8), backward=True)
    writer.record("MintFunctional.layer_norm.0", F.layer_norm, randn(4, 8), [8], randn(8), randn(8), backward=True)
    writer.record("MintFunctional.avg_pool2d.0", F.avg_pool2d, randn(1, 3, 6, 6), 2)
    writer.record("Mint.baddbmm.0", torch.baddbmm, randn(2, 3, 5), randn(2, 3, 4), randn(2, 4, 5))
    dump = writer.write()
    # layer_norm's normalized_shape is recorded as a list of ints, as msprobe writes a tuple
    body = json.loads(dump.read_text())
    assert body["data"]["MintFunctional.layer_norm.0.forward"]["input_args"][1] == [scalar("int", 8)]
    result = run_msprobe(pytester, dump, "--msprobe-device", "recorded")
    assert result.parseoutcomes() == {"passed": 6}
    rows = {row["API Name"]: row for row in read_csv(pytester.path / "out", "result")}
    assert rows["MintFunctional.layer_norm.0"]["Backward Test Success"] == "pass"
    details = read_csv(pytester.path / "out", "details")
    assert len([d for d in details if d["API Name"].startswith("MintFunctional.layer_norm.0.backward")]) == 3
    # the same dump on this CPU: MindSpore has none of these kernels, each a SKIP that names its own
    on_cpu = run_msprobe(pytester, dump, "--msprobe-device", "cpu", "--msprobe-out", "cpu")
    assert on_cpu.parseoutcomes() == {"skipped": 6}
    rows = read_csv(pytester.path / "cpu", "result")
    kernels = {"MintFunctional.gelu.0": "GeluExt", "MintFunctional.layer_norm.0": "LayerNormExt",
               "MintFunctional.avg_pool2d.0": "AvgPool2D", "Mint.baddbmm.0": "Baddbmm"}
    assert {row["API Name"]: row["Message"].split("has no kernel ")[1].split(" ")[0] for row in rows} == kernels


def test_a_bfloat16_dump_is_judged_in_bfloat16(pytester):
    generator = torch.Generator().manual_seed(0)
    x, y = (torch.randn(8, 16, generator=generator).to(torch.bfloat16) for _ in range(2))
    writer = TensorDump(pytester.path / "bf16")
    writer.record("Mint.matmul.0", torch.matmul, x, y.T.contiguous())
    dump = writer.write()
    run_msprobe(pytester, dump, "--msprobe-device", "recorded")
    row = read_csv(pytester.path / "out", "details")[0]
    assert (row["Bench Dtype"], row["Tested Dtype"], row["Status"]) == ("torch.float64", "torch.bfloat16", "error")
    exact = x.double() @ y.double().T  # the inputs as recorded, multiplied in float64
    recorded = torch.matmul(x, y.T).double()
    assert float(row["MaxAbsErr"]) == pytest.approx(float((recorded - exact).abs().max()), rel=1e-9)
    assert "within the bf16 rounding budget" in row["Message"]
    on_cpu = run_msprobe(pytester, dump, "--msprobe-device", "cpu", "--msprobe-out", "cpu")
    assert on_cpu.parseoutcomes() == {"skipped": 1}  # MindSpore's CPU MatMul has no bfloat16 kernel
    assert "has no kernel MatMul for these input dtypes on cpu" in read_csv(pytester.path / "cpu", "result")[0][
        "Message"]


@pytest.mark.slow
def test_a_kernel_error_is_not_blamed_on_the_next_entry_in_a_fresh_process(tmp_path):
    """No conftest here, so nothing set up beforehand: every kernel error stays with its entry.

    (The module turns launch_blocking on, and it also reads every output back
    within the entry, which synchronises: either alone keeps this test green.)"""
    dump = tmp_path / "dump.json"
    dump.write_text(json.dumps({"task": "statistics", "framework": "mindspore", "data": KERNEL_GAPS}))
    script = f"""
from pytest_msprobe.checking.check import Checker
from pytest_msprobe.dumps.dump import read_dump
from pytest_msprobe.frameworks import RunOptions, Tested
from pytest_msprobe.reports.messages import entry_message
from pytest_msprobe.judging.standards.basic import BasicStandard
dump = read_dump({str(dump)!r})
names = {{n.full: n for n in dump.api_names()}}
checker = Checker(RunOptions("cpu", Tested.DEVICE, "auto", 1234), BasicStandard())
for entry in ("MintFunctional.gelu.0.forward", "Mint.exp.0.forward", "MintFunctional.layer_norm.0.forward",
              "Mint.abs.0.forward"):
    result = checker.check(dump, names[entry])
    print(entry, result.status, entry_message(result))
"""
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120)
    lines = [line for line in done.stdout.splitlines() if line.startswith(("Mint", "MintFunctional"))]
    assert [line.split(" ")[:2] for line in lines] == [
        ["MintFunctional.gelu.0.forward", "SKIP"], ["Mint.exp.0.forward", "pass"],
        ["MintFunctional.layer_norm.0.forward", "SKIP"], ["Mint.abs.0.forward", "pass"]], done.stderr[-2000:]
    assert "has no kernel GeluExt" in lines[0] and "has no kernel LayerNormExt" in lines[2]


@pytest.mark.slow
def test_a_recorded_check_needs_no_mindspore_and_the_plugin_never_imports_it(tmp_path):
    """`recorded` judges a MindSpore dump on a machine with PyTorch alone."""
    script = f"""
import sys
import pytest_msprobe.plugin
from pytest_msprobe.checking.check import Checker
from pytest_msprobe.dumps.dump import read_dump
from pytest_msprobe.frameworks import RunOptions, Tested
from pytest_msprobe.judging.standards.basic import BasicStandard
assert "mindspore" not in sys.modules
dump = read_dump({str(DATA / "ms_tensor_L1" / "dump.json")!r})
names = {{n.full: n for n in dump.api_names()}}
checker = Checker(RunOptions("cpu", Tested.RECORDED, "auto", 1234), BasicStandard())
result = checker.check(dump, names["Mint.matmul.0.forward"])
assert result.status == "pass", result
assert "mindspore" not in sys.modules
print("ok")
"""
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120)
    assert done.stdout.strip() == "ok", done.stderr
