"""--msprobe-device npu end to end, on the simulated Ascend NPU of tests/npu_sim.

A run that needs the NPU is a subprocess with tests/npu_sim first on its PYTHONPATH: this process
never imports the simulated torch_npu (torch is imported here once, and a registered backend would
change it for every other test). The simulated device runs the CPU's kernels in the recorded
dtypes, so an npu run writes every column of every row of the same run on the CPU (run here, in
process), except where a deficit is injected; and torch_npu's fused ops run only on the NPU.
"""

from __future__ import annotations

import json
import os
import re
import sys
from pathlib import Path
from typing import Dict, List, Set, Tuple

import pytest
import torch

from conftest import read_csv

NPU_SIM = Path(__file__).resolve().parent / "npu_sim"
FUSED = "npu_fused_sim"  # tests/data/make/npu_fused_sim.py: outputs computed on the simulated NPU


class SimulatedNpu:
    """The environment of the subprocess runs, and what their simulated devices logged."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch, log: Path):
        self.monkeypatch = monkeypatch
        self.path = log

    def deficits(self, text: str) -> None:
        self.monkeypatch.setenv("MSPROBE_NPU_SIM_DEFICITS", text)

    def log(self) -> List[Tuple[int, str, List[str]]]:
        """(pid, event, its fields) in the order the processes wrote them."""
        if not self.path.exists():
            return []
        lines = [line.split() for line in self.path.read_text().splitlines()]
        return [(int(pid), event, rest) for pid, event, *rest in lines]

    def bound(self) -> Dict[int, Tuple[int, int]]:
        """pid -> (the id it bound, the physical NPU that is)."""
        return {pid: (int(fields[0]), int(fields[1])) for pid, event, fields in self.log() if event == "set_device"}

    def placed(self) -> Dict[int, Set[int]]:
        """pid -> the ids it copied host data to."""
        found: Dict[int, Set[int]] = {}
        for pid, event, fields in self.log():
            if event == "place":
                found.setdefault(pid, set()).add(int(fields[0]))
        return found

    def fired(self) -> Set[Tuple[str, str]]:
        return {(fields[0], fields[1]) for _, event, fields in self.log() if event == "deficit"}


@pytest.fixture
def npu(pytester, monkeypatch) -> SimulatedNpu:
    """A simulated NPU for pytester's subprocess runs, no deficit, every id of an 8-NPU host visible."""
    monkeypatch.setenv("PYTHONPATH", str(NPU_SIM), prepend=os.pathsep)
    monkeypatch.setenv("MSPROBE_NPU_SIM_LOG", str(pytester.path / "npu_sim.log"))
    for name in ("MSPROBE_NPU_SIM_DEFICITS", "MSPROBE_NPU_SIM_DEVICES", "ASCEND_RT_VISIBLE_DEVICES"):
        monkeypatch.delenv(name, raising=False)
    return SimulatedNpu(monkeypatch, pytester.path / "npu_sim.log")


@pytest.fixture
def one_thread(monkeypatch):
    """Both sides with the plugin's one intra-op thread; the in-process cpu run sets this process's
    torch threads, restored after."""
    monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
    monkeypatch.delenv("MKL_NUM_THREADS", raising=False)
    before = torch.get_num_threads()
    yield
    torch.set_num_threads(before)


def dump_args(*dumps: Path) -> List[str]:
    return [arg for dump in dumps for arg in ("--msprobe-dump", str(dump))]


def on_npu(pytester, out: str, *args: str, device: str = "npu"):
    # hypothesis's plugin would cost each process (and xdist worker) more CPU than torch's import.
    return pytester.runpytest_subprocess("-p", "no:cacheprovider", "-p", "no:hypothesispytest", "--msprobe-device",
                                         device, "--msprobe-out", out, *args)


def on_cpu(pytester, out: str, *args: str):
    return pytester.runpytest("-p", "no:cacheprovider", "--msprobe-device", "cpu", "--msprobe-out", out, *args)


def rows(folder: Path, kind: str) -> Dict[Tuple[str, str], Dict[str, str]]:
    """(dump folder, API Name) -> row, over the CSV pair of every dump of a run."""
    dumps = sorted({path.parent for path in folder.rglob(f"accuracy_checking_{kind}_*.csv")})
    return {(dump.name, row["API Name"]): row for dump in dumps for row in read_csv(dump, kind)}


def saved_in(out: Path, table: Dict[Tuple[str, str], Dict[str, str]]) -> Dict[Tuple[str, str], Dict[str, str]]:
    """The rows with `error data in <out>/...` written `<out>/...`: each run has its own --msprobe-out."""
    return {key: {**row, "Message": row["Message"].replace(str(out), "<out>")} for key, row in table.items()}


def failed(result) -> Set[str]:
    # "FAILED <nodeid> - <message>": the message may name aten::ops too, and how much of it shows
    # depends on the terminal's width.
    return {line.split(" ")[1].rsplit("::", 1)[-1] for line in result.outlines if line.startswith("FAILED ")}


@pytest.mark.slow
def test_an_npu_run_writes_the_rows_of_the_cpu_run_and_runs_the_fused_ops(pytester, copy_dump, npu, one_thread):
    # pt_tensor_L1: forward and backward, an autocast linear, the optimiser's in-place add_, bf16 and fp16;
    # its tensors are real data. pt_stats_L1 has none: random data. npu_fused_sim: torch_npu's fused ops.
    dumps = dump_args(copy_dump("pt_tensor_L1"), copy_dump("pt_stats_L1"), copy_dump(FUSED))
    settings = ["--msprobe-mode", "auto", "--msprobe-save-error-data", *dumps]
    result = on_npu(pytester, "npu", *settings, device="auto")  # auto: npu, where torch_npu imports
    cpu = on_cpu(pytester, "cpu", *settings)

    result.stdout.fnmatch_lines(["msprobe: device npu:0, mode auto, *"])
    assert list(npu.bound().values()) == [(0, 0)]  # one process, bound to npu:0
    assert list(npu.placed().values()) == [{0}]
    for kind in ("result", "details"):  # every column of every row, but those of the fused ops
        on_the_npu, on_the_cpu = (saved_in(pytester.path / side, rows(pytester.path / side, kind))
                                  for side in ("npu", "cpu"))
        assert {key: row for key, row in on_the_npu.items() if not key[1].startswith("NPU.")} == {
            key: row for key, row in on_the_cpu.items() if not key[1].startswith("NPU.")}
    npu_rows, cpu_rows = rows(pytester.path / "npu", "result"), rows(pytester.path / "cpu", "result")
    # What the equal rows hold: both directions, the autocast entry, the in-place ones, random data.
    assert "autocast to torch.bfloat16 applied" in npu_rows[("pt_tensor_L1", "Functional.linear.1")]["Message"]
    assert {npu_rows[("pt_tensor_L1", f"Tensor.add_.{i}")]["Forward Test Success"] for i in range(8)} == {"pass"}
    assert npu_rows[("pt_stats_L1", "Functional.conv2d.0")]["Backward Test Success"] == "pass"
    # The fused ops: every one passes on the NPU, and is a SKIP on the CPU, which has no torch_npu.
    entries = json.loads((pytester.path / FUSED / "dump.json").read_text())["data"]
    fused = {name.rsplit(".", 1)[0] for name in entries if name.startswith("NPU.")}
    assert {api for (dump, api) in npu_rows if api.startswith("NPU.")} == fused
    for api in fused:
        row = npu_rows[(FUSED, api)]
        assert row["Forward Test Success"] == "pass", row
        assert row["Backward Test Success"] == ("pass" if f"{api}.backward" in entries else ""), row
        assert cpu_rows[(FUSED, api)]["Forward Test Success"] == "SKIP"
    details = rows(pytester.path / "npu", "details")
    attention = [details[(FUSED, f"NPU.npu_fusion_attention.0.forward.output.{i}")]["Status"] for i in range(7)]
    assert attention == ["pass"] * 3 + ["SKIP"] * 4  # out, softmax_max, softmax_sum; then placeholders
    assert details[(FUSED, "NPU.npu_moe_gating_top_k_softmax.0.forward.output.1")]["Tested Dtype"] == "torch.int32"
    fused_items = sum(name.startswith("NPU.") for name in entries)
    assert result.parseoutcomes()["passed"] == cpu.parseoutcomes()["passed"] + fused_items
    assert failed(result) == failed(cpu)
    # What the NPU computed for the failing entries is saved on the host: it loads here, without
    # torch_npu, and holds what the CPU computed.
    saved = sorted((pytester.path / "npu" / "msprobe_error_data" / "pt_tensor_L1").glob("*/tested_outputs.pt"))
    assert len(saved) == 6
    for path in saved:
        tested = torch.load(path, weights_only=True)
        on_the_cpu = torch.load(pytester.path / "cpu" / path.relative_to(pytester.path / "npu"), weights_only=True)
        assert len(tested) == len(on_the_cpu)
        assert all((t is None and c is None) or (t.device.type == "cpu" and torch.equal(t, c))
                   for t, c in zip(tested, on_the_cpu))


# Each deficit reaches the entries whose run on the device calls its op, and no other (the ops of each
# entry: torch's dispatch, seen by logging tests/npu_sim's fallback): gelu's forward kernel (not
# gelu_backward) in both dumps; bmm in the batched Torch.matmul.0 (its backward's recorded grad_output
# is all zeros: its gradients are 0 on any device) and in npu_fusion_attention, which the device
# composes from its own kernels, as a fused kernel shares their arithmetic; native_layer_norm (its
# saved rstd feeds the backward too); _softmax (forward; a backward runs the forward again); two fused
# ops, both ways; and relu's backward kernel, threshold_backward, which kills its process.
DEFICITS = ("aten::gelu=tanh,aten::bmm=bf16_accumulate,aten::native_layer_norm=epsilon:1e-2,"
            "aten::_softmax=async_error,npu_rms_norm=epsilon:1e-2,npu_fast_gelu=scale:1.01,"
            "aten::threshold_backward=crash")
AFFECTED = {
    ("pt_tensor_L1", "Functional.gelu.0"): ("error", "pass"),
    ("pt_tensor_L1", "Torch.matmul.0"): ("error", "pass"),
    ("pt_tensor_L1", "Functional.layer_norm.0"): ("error", "error"),
    ("pt_tensor_L1", "Torch.softmax.0"): ("error", "error"),
    ("pt_tensor_L1", "Functional.relu.0"): ("pass", "error"),
    (FUSED, "NPU.npu_rms_norm.0"): ("error", "error"),
    (FUSED, "NPU.npu_fast_gelu.0"): ("error", "error"),
    (FUSED, "NPU.npu_fusion_attention.0"): ("error", "error"),
    (FUSED, "NPU.npu_fusion_attention.1"): ("error", "error"),
    (FUSED, "NPU.npu_fusion_attention.2"): ("error", "error"),
    (FUSED, "NPU.npu_fusion_attention.3"): ("error", "error"),
    (FUSED, "NPU.npu_fusion_attention.4"): ("error", "error"),
    (FUSED, "Functional.gelu.0"): ("error", "pass"),
}


@pytest.mark.slow
def test_two_workers_on_their_own_npus_fail_exactly_the_entries_a_deficit_reaches(pytester, copy_dump, npu,
                                                                                  one_thread):
    pytest.importorskip("xdist")
    dumps = dump_args(copy_dump("pt_tensor_L1"), copy_dump(FUSED))
    npu.monkeypatch.setenv("ASCEND_RT_VISIBLE_DEVICES", "2,3")  # ids 0 and 1 are the host's NPUs 2 and 3
    npu.deficits(DEFICITS)
    result = on_npu(pytester, "npu", "-n", "2", "--msprobe-devices", "0-1", *dumps)
    on_cpu(pytester, "cpu", *dumps)

    # Each worker process bound its id (the visible NPU behind it) and copied its inputs there, only there.
    result.stdout.fnmatch_lines(["msprobe: 2 xdist workers, one device each from ids 0,1, *"])
    workers = re.findall(r"msprobe: \[(gw\d+)\] device (npu:\d)", result.stdout.str())
    assert set(workers[:2]) == {("gw0", "npu:0"), ("gw1", "npu:1")}
    bound, placed = npu.bound(), npu.placed()
    assert sorted(list(bound.values())[:2]) == [(0, 2), (1, 3)] and len(bound) == 3
    assert all(placed.get(pid, {device_id}) == {device_id} for pid, (device_id, _) in bound.items())
    crashed = next(pid for pid, event, fields in npu.log() if fields == ["aten::threshold_backward", "crash"])
    replacement = list(bound)[-1]
    assert replacement != crashed and bound[replacement] == bound[crashed]  # it took the id the crash freed

    assert npu.fired() == {("aten::gelu", "tanh"), ("aten::bmm", "bf16_accumulate"),
                           ("aten::native_layer_norm", "epsilon:0.01"), ("aten::_softmax", "async_error"),
                           ("npu_rms_norm", "epsilon:0.01"), ("npu_fast_gelu", "scale:1.01"),
                           ("aten::threshold_backward", "crash")}
    on_the_npu, on_the_cpu = rows(pytester.path / "npu", "result"), rows(pytester.path / "cpu", "result")
    assert on_the_npu.keys() == on_the_cpu.keys()  # every entry has its row, the crashed one too
    for key, (forward, backward) in AFFECTED.items():
        row = on_the_npu[key]
        assert (row["Forward Test Success"], row["Backward Test Success"]) == (forward, backward), row
    for key, row in on_the_npu.items():
        if key in AFFECTED:
            continue
        if key[1].startswith("NPU."):
            assert row["Forward Test Success"] == "pass" and row["Backward Test Success"] in ("pass", ""), row
        else:
            assert row == on_the_cpu[key]  # every other entry as on a correct device
    expected = {f"{api}.{direction}" for (_, api), verdicts in AFFECTED.items()
                for direction, verdict in zip(("forward", "backward"), verdicts) if verdict == "error"}
    expected |= {f"{api}.{direction}" for (_, api), row in on_the_cpu.items()
                 for direction, column in (("forward", "Forward Test Success"), ("backward", "Backward Test Success"))
                 if row[column] == "error"}  # the bf16 outputs at the rounding floor, failing on any device
    assert failed(result) == expected
    # A crash is the error row of the entry that caused it; an error the device reports at
    # synchronisation, the finding of the entry whose kernel failed; neither a fault of the plugin.
    relu = on_the_npu[("pt_tensor_L1", "Functional.relu.0")]["Message"]
    assert re.fullmatch(r"backward: the xdist worker gw\d crashed while checking this entry on npu:\d: killed by "
                        r"SIGSEGV \(a segfault, an abort or the OOM killer in the API\)", relu)
    softmax = on_the_npu[("pt_tensor_L1", "Torch.softmax.0")]["Message"]
    assert softmax.startswith("forward: the tested run on npu:") and (
        "raised RuntimeError: npu sim: device error in aten::_softmax, reported at synchronisation") in softmax
    assert "pytest-msprobe failed" not in result.stdout.str() and "INTERNALERROR" not in result.stdout.str()


@pytest.mark.slow
def test_mindspore_dumps_on_the_npu_go_to_mindspore_not_to_torch_npu(pytester, copy_dump, npu):
    pytest.importorskip("mindspore")
    result = on_npu(pytester, "npu", "--msprobe-dump", str(copy_dump("ms_tensor_L1")))
    # MindSpore binds the NPU itself (README: MindSpore dumps need no torch_npu); this one has no Ascend.
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["*MindSpore cannot move to npu:0: Unsupported device target Ascend*"])
    assert npu.bound() == {}  # torch_npu bound nothing


@pytest.mark.slow
def test_the_outputs_the_simulated_npu_recorded_pass_the_references(pytester, copy_dump):
    """The dump's fused-op outputs came from tests/npu_sim, the bench from npu_reference: two
    implementations of the ops' documentation that agree."""
    result = pytester.runpytest("-p", "no:cacheprovider", "--msprobe-device", "recorded", "--msprobe-out", "out",
                                "--msprobe-dump", str(copy_dump(FUSED)))
    result.assert_outcomes(passed=38)
    # This process never imported the simulated torch_npu: its torch has no npu device.
    assert "torch_npu" not in sys.modules and torch._C._get_privateuse1_backend_name() == "privateuseone"


# -- LLM and MoE operators (issue 30) ---------------------------------------------------------------

LLM = "npu_llm_sim"  # make/npu_llm_sim.py: grouped matmuls, MoE routing, add_rms_norm, attentions, ...; fp32, bf16
PADDED = ("NPU.npu_grouped_matmul.0.forward.output.0", "NPU.npu_grouped_matmul.2.forward.output.0")


def by_name(folder: Path, kind: str) -> Dict[str, Dict[str, str]]:
    """API Name -> row of a run over one dump (its CSV pair is in the --msprobe-out folder itself)."""
    return {api: row for (_, api), row in rows(folder, kind).items()}


@pytest.mark.slow
def test_the_llm_operators_the_simulated_npu_recorded_pass_their_references_under_dtype(pytester, copy_dump):
    """npu_llm_sim's outputs came from tests/npu_sim, the bench from npu_llm_reference: every entry
    passes under the dtype standard, none SKIPped for want of a reference; the grouped matmul's rows
    beyond group_list (the simulated device leaves 1e4 there) are not compared, and the row says so."""
    result = pytester.runpytest("-p", "no:cacheprovider", "--msprobe-device", "recorded", "--msprobe-standard",
                                "dtype", "--msprobe-out", "out", "--msprobe-dump", str(copy_dump(LLM)))
    entries = json.loads((pytester.path / LLM / "dump.json").read_text())["data"]
    result.assert_outcomes(passed=len(entries))
    details = by_name(pytester.path / "out", "details")
    assert {row["Status"] for row in details.values()} == {"pass"}
    for name in PADDED:
        assert "rows 10..11 of 12 lie beyond group_list (padding): not compared" in details[name]["Message"]
    quantised = details["NPU.npu_dynamic_quant.1.forward.output.0"]["Message"]
    assert quantised.startswith("quantisation rule (an integer output of npu_dynamic_quant): |error| <= 1 unit")
    for index in (1, 2):  # expanded_row_idx, expanded_expert_idx: equal
        row = details[f"NPU.npu_moe_init_routing.0.forward.output.{index}"]
        assert row["Tested Dtype"] == "torch.int32" and "compared exactly" in row["Message"]


@pytest.mark.slow
def test_the_llm_operators_run_on_the_npu_and_two_deficits_are_errors(pytester, copy_dump, npu, one_thread):
    dump = str(copy_dump(LLM))
    settings = ["--msprobe-standard", "dtype", "--msprobe-dump", dump]
    clean = on_npu(pytester, "clean", *settings)
    entries = json.loads((pytester.path / LLM / "dump.json").read_text())["data"]
    clean.assert_outcomes(passed=len(entries))
    clean_details = by_name(pytester.path / "clean", "details")
    for name in PADDED:  # what the device left in the padded rows is not judged
        assert "beyond group_list (padding): not compared" in clean_details[name]["Message"]

    # A grouped matmul that reads group_list one group short, add_rms_norm without its residual, and
    # inference attentions that return the mean of the values they see.
    npu.deficits("npu_grouped_matmul=skip_last_group,npu_add_rms_norm=no_residual,"
                 "npu_prompt_flash_attention=mean_of_v,npu_incre_flash_attention=mean_of_v,"
                 "npu_fused_infer_attention_score=mean_of_v,npu_quantize=int_offset:2,npu_dynamic_quant=int_offset:1")
    faulty = on_npu(pytester, "faulty", *settings)
    assert npu.fired() == {("npu_grouped_matmul", "skip_last_group"), ("npu_add_rms_norm", "no_residual"),
                           ("npu_prompt_flash_attention", "mean_of_v"), ("npu_incre_flash_attention", "mean_of_v"),
                           ("npu_fused_infer_attention_score", "mean_of_v"), ("npu_quantize", "int_offset:2"),
                           ("npu_dynamic_quant", "int_offset:1")}
    expected = {"NPU.npu_grouped_matmul.0", "NPU.npu_grouped_matmul.2", "NPU.npu_add_rms_norm.0",
                "NPU.npu_add_rms_norm.1"}  # the one-x-per-weight matmuls (1, 3) have no group_list to misread
    expected |= {f"NPU.npu_prompt_flash_attention.{i}" for i in range(6)}
    expected |= {f"NPU.npu_incre_flash_attention.{i}" for i in range(2)}
    expected |= {f"NPU.npu_fused_infer_attention_score.{i}" for i in range(6)}
    # Two units off is an error; one unit off (npu_dynamic_quant) is within the quantisation rule: it passes.
    expected |= {f"NPU.npu_quantize.{i}" for i in range(4)}
    # add_rms_norm's backward too: without x2 in the sum, the gradients are wrong.
    assert failed(faulty) == {f"{api}.forward" for api in expected} | {
        "NPU.npu_add_rms_norm.0.backward", "NPU.npu_add_rms_norm.1.backward"}
    for api, row in by_name(pytester.path / "faulty", "result").items():
        assert row["Forward Test Success"] == ("error" if api in expected else "pass"), row
    details = by_name(pytester.path / "faulty", "details")
    for name in PADDED:  # the last group's rows (7..9) are wrong: the padding rule never hides them
        assert details[name]["Status"] == "error"
    quantised = details["NPU.npu_dynamic_quant.0.forward.output.0"]
    assert quantised["Status"] == "pass" and "max |error| 1" in quantised["Message"]
    # rms_norm of x1 alone: y and x (the sum it returns) are both wrong.
    assert {details[f"NPU.npu_add_rms_norm.0.forward.output.{i}"]["Status"] for i in (0, 2)} == {"error"}


@pytest.mark.slow
def test_flash_inference_attentions_with_p_rounded_to_bf16_pass_on_the_npu(pytester, copy_dump, npu, one_thread):
    """A correct flash kernel rounds P to the query's dtype before P V and accumulates in fp32: the
    inference attentions computed so (the simulated NPU's flash_p control) pass under dtype, judged by
    the flash family's structural terms as npu_fusion_attention is (they were errors at 9x-48x their
    budget in bf16 without them), TND's packed sequences included."""
    dump = str(copy_dump(LLM))
    npu.deficits("npu_prompt_flash_attention=flash_p,npu_incre_flash_attention=flash_p,"
                 "npu_fused_infer_attention_score=flash_p")
    flash = on_npu(pytester, "flash", "--msprobe-standard", "dtype", "--msprobe-dump", dump)
    assert {op for op, _ in npu.fired()} == {
        "npu_prompt_flash_attention", "npu_incre_flash_attention", "npu_fused_infer_attention_score"}
    entries = json.loads((pytester.path / LLM / "dump.json").read_text())["data"]
    flash.assert_outcomes(passed=len(entries))
    details = by_name(pytester.path / "flash", "details")
    attentions = [row for name, row in details.items() if "attention" in name and row["Tested Dtype"] == "torch.bfloat16"]
    assert attentions and all(row["Status"] == "pass" for row in attentions)
    # TND too (sequences packed along T: npu_fused_infer_attention_score.5), each batch's rows its own
    assert any(_argument(entries[name], "input_layout") == "TND" and _is_bf16(entries[name]) for name in entries)


def _argument(entry: dict, name: str):
    spec = entry.get("input_kwargs", {}).get(name)
    return spec.get("value") if isinstance(spec, dict) else None


def _is_bf16(entry: dict) -> bool:
    return any(isinstance(a, dict) and a.get("dtype") == "torch.bfloat16" for a in entry.get("input_args", []))
