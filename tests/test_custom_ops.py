"""A team's own operators end to end: examples/custom_op, a real msprobe 26.2 dump of a step that calls
`torch.ops.myteam.gated_silu` (a torch.library op) and `MyTeam.fused_rms_norm` (a Python launcher
msprobe records through register_custom_api), clean and with a faulty kernel, checked against the
references its conftest registers (pytest_msprobe_references) or msprobe's own YAML files name."""

from __future__ import annotations

import fnmatch
import math
import re
import shutil
import sys
from pathlib import Path

import pytest

from conftest import read_csv

ROOT = Path(__file__).resolve().parent.parent
EXAMPLE = ROOT / "examples" / "custom_op"
OPS = ("myteam.gated_silu.0", "MyTeam.fused_rms_norm.0")
YAML = (
    "--msprobe-fusion-config", "custom_op/fusion_operator_config.yaml",
    "--msprobe-postprocess-config", "custom_op/api_output_postprocess.yaml",
    "--msprobe-functions", "custom_op/myteam_bench.py",
)  # fmt: skip


@pytest.fixture
def example(pytester: pytest.Pytester) -> Path:
    """examples/custom_op where pytester runs: the op's module, the conftest, both dumps, the YAML files."""
    target = pytester.path / "custom_op"
    shutil.copytree(EXAMPLE, target, ignore=shutil.ignore_patterns("__pycache__"))
    return target


def run(pytester: pytest.Pytester, which: str, *args: str, out: str = "out", device: str = "recorded",
        standard: str = "basic", subprocess: bool = False) -> pytest.RunResult:
    dump = pytester.path / "custom_op" / which / "dump.json"
    runner = pytester.runpytest_subprocess if subprocess else pytester.runpytest
    return runner("-p", "no:cacheprovider", "--msprobe-dump", str(dump), "--msprobe-device", device,
                  "--msprobe-standard", standard, "--msprobe-out", out, *args)


def results(pytester: pytest.Pytester, out: str = "out") -> dict:
    return {row["API Name"]: row for row in read_csv(pytester.path / out, "result")}


def details(pytester: pytest.Pytester, out: str = "out") -> dict:
    return {row["API Name"]: row for row in read_csv(pytester.path / out, "details")}


def failed(result: pytest.RunResult) -> set:
    return {line.split(" ")[1].rsplit("::", 1)[-1] for line in result.outlines if line.startswith("FAILED ")}


# -- the example, registered by its conftest ----------------------------------------------------------


@pytest.mark.parametrize("standard", ["basic", "dtype"])
def test_the_conftest_catches_the_faulty_kernel_and_passes_the_clean_one(pytester, example, standard):
    ops = ("-k", "gated_silu or fused_rms_norm")
    faulty = run(pytester, "faulty", "custom_op", *ops, out="faulty", standard=standard)
    assert faulty.ret == 1, faulty.stdout.str()[-3000:]
    assert failed(faulty) == {"myteam.gated_silu.0.forward"}
    faulty.assert_outcomes(failed=1, passed=3)
    rows = results(pytester, "faulty")
    assert rows["myteam.gated_silu.0"]["Forward Test Success"] == "error"
    assert rows["myteam.gated_silu.0"]["Backward Test Success"] == "pass"
    assert rows["MyTeam.fused_rms_norm.0"]["Forward Test Success"] == "pass"
    clean = run(pytester, "clean", "custom_op", *ops, out="clean", standard=standard)
    assert clean.ret == 0, clean.stdout.str()[-3000:]
    clean.assert_outcomes(passed=4)
    # The padding rows the kernel leaves NaN are not compared, and the row says so.
    said = details(pytester, "clean")["myteam.gated_silu.0.forward.output.0"]["Message"]
    assert "rows 12..15 of 16 are padding the kernel never writes: not compared" in said
    if standard == "dtype":  # the registered magnitude model gives the budget its fp32 accumulation term
        worst = details(pytester, "faulty")["myteam.gated_silu.0.forward.output.0"]["Message"]
        assert "fp32 accumulation" in worst and "its budget" in worst


def planted_backward_fault(example: Path) -> None:
    """custom_op/planted: the clean dump with fused_rms_norm's weight gradient as a kernel accumulating
    it in bfloat16 gives it."""
    import torch

    planted = example / "planted"
    shutil.copytree(example / "clean", planted)
    tensor = planted / "dump_tensor_data" / "MyTeam.fused_rms_norm.0.backward.output.1.pt"
    torch.save(torch.load(tensor).to(torch.bfloat16).float(), tensor)


def test_the_composed_magnitude_model_judges_the_backward_too(pytester, example):
    """fused_rms_norm is registered Magnitude.COMPOSITION: its backward entry (the weight's gradient,
    a sum over the rows) is judged with the magnitudes composed through autograd's backward of its
    reference; the clean dump passes, and the planted fault is an error over the composed budget."""
    ops = ("-k", "fused_rms_norm or gated_silu")
    clean = run(pytester, "clean", "custom_op", *ops, out="clean", standard="dtype")
    assert clean.ret == 0, clean.stdout.str()[-3000:]
    clean.assert_outcomes(passed=4)
    assert details(pytester, "clean")["MyTeam.fused_rms_norm.0.backward.output.1"]["Status"] == "pass"
    planted_backward_fault(example)
    faulty = run(pytester, "planted", "custom_op", *ops, out="planted", standard="dtype")
    assert "INTERNALERROR" not in faulty.stdout.str(), faulty.stdout.str()[-3000:]
    assert failed(faulty) == {"MyTeam.fused_rms_norm.0.backward"}
    row = results(pytester, "planted")["MyTeam.fused_rms_norm.0"]
    assert (row["Forward Test Success"], row["Backward Test Success"]) == ("pass", "error")
    said = details(pytester, "planted")["MyTeam.fused_rms_norm.0.backward.output.1"]["Message"]
    # The composed magnitude was asked, and the fault is over it: its accumulation term is that of the
    # terms the row sums (|g| |x / rms|), well above the |bench| alone gives (32 u_acc |b| in ULP of b).
    bench = float(re.search(r"bench ([-0-9.e+]+)\)", said).group(1))
    accumulation = float(re.search(r"fp32 accumulation ([0-9.e+]+)\)", said).group(1))
    of_bench_alone = 32 * 2.0**-24 * abs(bench) / 2.0 ** (math.floor(math.log2(abs(bench))) - 23)
    assert accumulation > 4 * of_bench_alone, said


def test_a_backward_the_composition_cannot_carry_is_an_error_row_naming_the_operator(pytester, example):
    # The same RMSNorm through torch.linalg.vector_norm, whose forward node has no rule here.
    pytester.makeconftest(
        "import torch\n"
        "from pytest_msprobe.frameworks.references import Magnitude\n"
        "import myteam_ops\n"
        "def by_norm(x, weight, eps=1e-6):\n"
        "    mean_square = torch.linalg.vector_norm(x, dim=-1, keepdim=True).pow(2) / x.shape[-1]\n"
        "    return x * torch.rsqrt(mean_square + eps) * weight\n"
        "def pytest_msprobe_references(registry):\n"
        "    registry.add('MyTeam.fused_rms_norm', by_norm, magnitude=Magnitude.COMPOSITION,\n"
        "                 device=myteam_ops.fused_rms_norm)\n"
    )
    pytester.syspathinsert(example)
    planted_backward_fault(example)
    result = run(pytester, "planted", "-k", "fused_rms_norm", standard="dtype")
    assert "INTERNALERROR" not in result.stdout.str()
    assert failed(result) == {"MyTeam.fused_rms_norm.0.backward"}  # the forward passes without asking the model
    row = results(pytester)["MyTeam.fused_rms_norm.0"]
    assert row["Backward Test Success"] == "error", row
    assert matches(
        row["Message"],
        "*the backward of MyTeam.fused_rms_norm cannot compose its magnitude model (Magnitude.COMPOSITION, "
        "conftest.py:*) through autograd's backward of its reference: aten.linalg_vector_norm is not an API "
        "whose magnitude model composes here; register a backward_magnitude for it*",
    ), row["Message"]


def test_the_header_says_which_references_came_from_where(pytester, example):
    result = run(pytester, "clean", "custom_op", "-k", "MyTeam")
    result.stdout.fnmatch_lines([
        "msprobe: references: 30 built-in (torch_npu's fused ops, docs/npu.md)",
        "msprobe: reference myteam.gated_silu: forward, magnitude model, unwritten mask from custom_op/conftest.py:*",
        "msprobe: reference MyTeam.fused_rms_norm: forward, magnitude model (composition), device call "
        "from custom_op/conftest.py:*",
    ])


def test_without_a_registration_a_custom_op_is_a_skip_that_says_how_to_register_one(pytester, example):
    result = run(pytester, "faulty", "-k", "gated_silu", "-rs")
    result.assert_outcomes(skipped=2)
    result.stdout.fnmatch_lines([
        "*myteam.gated_silu: msprobe has no pytorch API type 'myteam': a custom op's entry*pytest_msprobe_references*"
    ])


def test_the_device_path_runs_the_custom_ops_on_the_device_under_test(pytester, example):
    # --msprobe-device cpu: the CPU kernel of torch.ops.myteam.gated_silu, and fused_rms_norm through the
    # device call the conftest names; the faulty dump's inputs on the correct kernel pass.
    result = run(pytester, "faulty", "custom_op", "-k", "gated_silu or fused_rms_norm", device="cpu", standard="dtype")
    result.assert_outcomes(passed=4)
    assert "rows 12..15 of 16 are padding" in details(pytester)["myteam.gated_silu.0.forward.output.0"]["Message"]


def test_a_registered_device_call_is_the_tested_side(pytester, example):
    pytester.makeconftest(
        "import sys\n"
        "sys.path.insert(0, 'custom_op')\n"
        "import torch\n"
        "import myteam_ops\n"
        "def reference(x, weight, eps=1e-6):\n"
        "    return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps) * weight\n"
        "def wrong_launcher(x, weight, eps=1e-6):\n"
        "    return myteam_ops.fused_rms_norm(x, weight, eps) * 1.01\n"
        "def pytest_msprobe_references(registry):\n"
        "    registry.add('MyTeam.fused_rms_norm', reference, device=wrong_launcher)\n"
    )
    result = run(pytester, "clean", "-k", "MyTeam.fused_rms_norm.0.forward", device="cpu")
    assert failed(result) == {"MyTeam.fused_rms_norm.0.forward"}


# -- the same registrations as msprobe's YAML files ----------------------------------------------------


@pytest.mark.parametrize("standard", ["basic", "dtype"])
def test_msprobe_yaml_files_catch_the_faulty_kernel_and_pass_the_clean_one(pytester, example, standard):
    ops = ("-k", "gated_silu or fused_rms_norm")
    faulty = run(pytester, "faulty", *YAML, *ops, out="faulty", standard=standard)
    assert failed(faulty) == {"myteam.gated_silu.0.forward"}, faulty.stdout.str()[-3000:]
    clean = run(pytester, "clean", *YAML, *ops, out="clean", standard=standard)
    assert clean.ret == 0, clean.stdout.str()[-3000:]
    clean.assert_outcomes(passed=4)
    said = details(pytester, "clean")["myteam.gated_silu.0.forward.output.0"]["Message"]
    assert "target outputs post-processed by " in said and "zero_padding_rows" in said
    clean.stdout.fnmatch_lines([
        "msprobe: reference myteam.gated_silu: forward from fusion_operator_config.yaml operators.myteam.gated_silu "
        "(gated_silu_forward); output post-processing from api_output_postprocess.yaml acc_check_handlers (target)",
        "msprobe: fusion_operator_config.yaml: 16 operators as msprobe 26.2 ships them: the built-in references*",
    ])


def test_without_the_postprocess_handler_the_padding_rows_fail_the_clean_dump(pytester, example):
    result = run(pytester, "clean", *YAML[:2], *YAML[4:], "-k", "gated_silu.0.forward")
    assert failed(result) == {"myteam.gated_silu.0.forward"}


def test_the_yaml_files_are_also_ini_keys(pytester, example):
    pytester.makeini(
        "[pytest]\n"
        "msprobe_fusion_config = custom_op/fusion_operator_config.yaml\n"
        "msprobe_postprocess_config = custom_op/api_output_postprocess.yaml\n"
        "msprobe_functions =\n    custom_op/myteam_bench.py\n"
    )
    result = run(pytester, "faulty", "-k", "gated_silu")
    assert failed(result) == {"myteam.gated_silu.0.forward"}


@pytest.mark.parametrize(
    "args, says",
    [
        (("--msprobe-functions", "custom_op/nowhere.py"), "--msprobe-functions custom_op/nowhere.py: no such file"),
        (("--msprobe-functions", "custom_op/clean/dump.json"), "not a Python file"),
        (("--msprobe-fusion-config", "custom_op/missing.yaml"), "--msprobe-fusion-config custom_op/missing.yaml: no such file"),
        (("--msprobe-fusion-config", "custom_op/fusion_operator_config.yaml"),
         "operators.myteam.gated_silu.forward: missing function gated_silu_forward: it is in none of the files"),
        (("--msprobe-postprocess-config", "custom_op/api_output_postprocess.yaml"),
         "*myteam_bench.py is not one of the files --msprobe-functions names (none): name it there*"),
        (("--msprobe-functions", "custom_op/myteam_bench.py"), "--msprobe-functions names files for msprobe's YAML"),
    ],
)
def test_what_the_yaml_files_need_is_a_usage_error_naming_it(pytester, example, args, says):
    result = run(pytester, "clean", *args)
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines([f"*{says}*"])
    assert "Traceback" not in result.stderr.str()


@pytest.mark.parametrize(
    "yaml, says",
    [
        ("operators:\n  npu_gelu_typo:\n    forward: gated_silu_forward\n",
         "operators.npu_gelu_typo: unknown API 'npu_gelu_typo': not one of the torch_npu APIs msprobe records"),
        ("operators:\n  Functional.not_an_api:\n    forward: gated_silu_forward\n",
         "unknown API 'Functional.not_an_api'"),
        ("operators:\n  myteam.gated_silu:\n    forward: no_such_function\n", "missing function no_such_function"),
        ("operators: [1, 2]\n", "has no `operators` mapping"),
        ("operators:\n  myteam.gated_silu:\n    forward: 'os.system'\n", "'os.system' is not a function name"),
    ],
)
def test_a_fusion_config_that_cannot_be_read_is_a_usage_error_naming_the_key(pytester, example, yaml, says):
    (pytester.path / "fusion.yaml").write_text(yaml)
    result = run(pytester, "clean", "--msprobe-fusion-config", "fusion.yaml", "--msprobe-functions",
                 "custom_op/myteam_bench.py")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines([f"*{says}*"])


def test_a_handler_file_the_yaml_names_is_never_imported_unless_named(pytester, example):
    # A handler beside the YAML file, which would write a file if it ran.
    (pytester.path / "evil.py").write_text("open('ran', 'w').write('x')\ndef handle(*a):\n    return a[1]\n")
    (pytester.path / "post.yaml").write_text("acc_check_handlers:\n  target:\n    myteam.gated_silu: 'evil.py:handle'\n")
    result = run(pytester, "clean", "--msprobe-postprocess-config", "post.yaml")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["*evil.py is not one of the files --msprobe-functions names*"])
    assert not (pytester.path / "ran").exists()


def test_a_functions_file_in_a_dump_folder_is_never_imported(pytester, example):
    evil = example / "faulty" / "bench.py"
    evil.write_text("open('ran', 'w').write('x')\n")
    result = run(pytester, "faulty", "--msprobe-fusion-config", "custom_op/fusion_operator_config.yaml",
                 "--msprobe-functions", str(evil))
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["*it lies in a dump's folders, and a dump is data: never imported*"])
    assert not (pytester.path / "ran").exists()


# -- a user's code that fails is an error row naming it -----------------------------------------------

BROKEN = '''
import time
import torch
import torch.nn.functional as F


def raises(x, w_gate, w_up, valid_rows):
    raise ValueError("the team's reference is broken")


def wrong_shape(x, w_gate, w_up, valid_rows):
    return x.new_zeros(x.shape[0], 3)


def wrong_dtype(x, w_gate, w_up, valid_rows):
    return torch.zeros(x.shape[0], w_gate.shape[0], dtype=torch.int64)


def rounded(x, w_gate, w_up, valid_rows):
    return x.new_zeros(x.shape[0], w_gate.shape[0]).float()


def slow(x, w_gate, w_up, valid_rows):
    time.sleep(30)


def good(x, w_gate, w_up, valid_rows):
    out = x.new_zeros(x.shape[0], w_gate.shape[0])
    out[:valid_rows] = F.silu(x[:valid_rows] @ w_gate.T) * (x[:valid_rows] @ w_up.T)
    return out


def model_raises(x, w_gate, w_up, valid_rows):
    raise RuntimeError("the model is broken")


def model_wrong_shape(x, w_gate, w_up, valid_rows):
    return [x.new_ones(16)]


def model_half(x, w_gate, w_up, valid_rows):
    return [x.new_ones(16, 64).half()]


def model_two(x, w_gate, w_up, valid_rows):
    return [x.new_ones(16, 64), x.new_ones(16, 64)]


def good_mask(outputs, args, kwargs):
    return {0: (torch.arange(16) >= args[3]).reshape(16, 1)}


def mask_raises(outputs, args, kwargs):
    raise KeyError("valid_rows")


def mask_wrong_shape(outputs, args, kwargs):
    return {0: torch.ones(5, dtype=torch.bool)}


def pytest_msprobe_references(registry):
    registry.add("myteam.gated_silu", {forward}, **{extra})
'''


@pytest.mark.parametrize(
    "dump, forward, extra, says",
    [
        ("clean", "raises", {}, "the reference broken_refs.raises (*broken_refs.py:7) registered for "
                                "myteam.gated_silu raised ValueError: the team's reference is broken"),
        ("clean", "wrong_shape", {}, "the reference broken_refs.wrong_shape (*) registered for myteam.gated_silu "
                                     "returned output 0 of shape [16, 3], the dump records [16, 64]"),
        ("clean", "wrong_dtype", {}, "*wrong_dtype (*) registered for myteam.gated_silu returned torch.int64 as "
                                     "output 0, the dump records torch.float32"),
        ("clean", "rounded", {}, "*rounded (*) registered for myteam.gated_silu returned torch.float32 as output 0 "
                                 "(torch.float32 recorded): the bench computes in torch.float64*"),
        # The magnitude model is asked where an output is over its budget without it: the faulty kernel's.
        ("faulty", "good", {"magnitude": "model_raises", "unwritten": "good_mask"},
         "the magnitude model broken_refs.model_raises (*) registered for myteam.gated_silu raised "
         "RuntimeError: the model is broken"),
        ("faulty", "good", {"magnitude": "model_wrong_shape", "unwritten": "good_mask"},
         "the magnitude model broken_refs.model_wrong_shape (*) registered for myteam.gated_silu gave output 0 a "
         "magnitude of shape [16], not [16, 64]"),
        ("faulty", "good", {"magnitude": "model_half", "unwritten": "good_mask"},
         "the magnitude model broken_refs.model_half (*) registered for myteam.gated_silu gave output 0 a "
         "torch.float16 magnitude: float64 (or float32)*"),
        ("faulty", "good", {"magnitude": "model_two", "unwritten": "good_mask"},
         "the magnitude model broken_refs.model_two (*) registered for myteam.gated_silu gave 2 magnitudes for 1 "
         "outputs"),
        ("clean", "good", {"unwritten": "mask_raises"}, "the unwritten mask broken_refs.mask_raises (*) registered "
                                                        "for myteam.gated_silu raised KeyError: 'valid_rows'"),
        ("clean", "good", {"unwritten": "mask_wrong_shape"},
         "the unwritten mask broken_refs.mask_wrong_shape (*) * gave output 0 a mask of shape [5], which does not "
         "broadcast to its shape [16, 64]"),
    ],
)
def test_a_broken_registration_is_an_error_row_naming_the_function(pytester, example, dump, forward, extra, says):
    extra_code = "{" + ", ".join(f"'{k}': {v}" for k, v in extra.items()) + "}"
    (pytester.path / "broken_refs.py").write_text(BROKEN.replace("{forward}", forward).replace("{extra}", extra_code))
    pytester.makeconftest("from broken_refs import *\n")
    pytester.syspathinsert()
    # dtype: the magnitude model is asked; the run goes on with the other entries.
    result = run(pytester, dump, "-k", "gated_silu.0.forward or linear", standard="dtype")
    assert "INTERNALERROR" not in result.stdout.str() + result.stderr.str()
    assert failed(result) == {"myteam.gated_silu.0.forward"}
    result.assert_outcomes(failed=1, passed=2)
    row = results(pytester)["myteam.gated_silu.0"]
    assert row["Forward Test Success"] == "error"
    assert matches(row["Message"], f"*{says}*"), row["Message"]


BROKEN_BACKWARD = """
import torch
import myteam_ops


def rms(x, weight, eps=1e-6):
    return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps) * weight


def {model}(grad_outputs, x, weight, eps=1e-6):
    return {returns}


def pytest_msprobe_references(registry):
    registry.add("MyTeam.fused_rms_norm", rms, backward_magnitude={model}, device=myteam_ops.fused_rms_norm)
"""


@pytest.mark.parametrize(
    "model, returns, says",
    [
        ("raises", "1 / 0", "raised ZeroDivisionError: division by zero"),
        ("wrong_shape", "[None, x.new_ones(3)]", "gave output 1 a magnitude of shape [3], not [32]"),
        ("one_for_two", "[x.new_ones(32)]", "gave 1 magnitudes for 2 floating inputs (one per gradient)"),
        ("integers", "[None, torch.ones(32, dtype=torch.int64)]",
         "gave a torch.int64 tensor for output 1, not a floating tensor"),
    ],
)
def test_a_broken_backward_magnitude_model_is_an_error_row_naming_it(pytester, example, model, returns, says):
    # Asked where the planted weight gradient is over its budget without it.
    (pytester.path / "broken_models.py").write_text(BROKEN_BACKWARD.format(model=model, returns=returns))
    pytester.makeconftest("from broken_models import *\n")
    pytester.syspathinsert()
    pytester.syspathinsert(example)
    planted_backward_fault(example)
    result = run(pytester, "planted", "-k", "fused_rms_norm", standard="dtype")
    assert "INTERNALERROR" not in result.stdout.str() + result.stderr.str()
    assert failed(result) == {"MyTeam.fused_rms_norm.0.backward"}
    row = results(pytester)["MyTeam.fused_rms_norm.0"]
    assert (row["Forward Test Success"], row["Backward Test Success"]) == ("pass", "error")
    assert matches(
        row["Message"],
        f"*the backward magnitude model broken_models.{model} (*broken_models.py:10) registered for "
        f"MyTeam.fused_rms_norm {says}*",
    ), row["Message"]


def matches(text: str, pattern: str) -> bool:
    """fnmatch with `*` alone special (shapes hold brackets)."""
    return fnmatch.fnmatchcase(text, "".join(f"[{c}]" if c in "[]?" else c for c in pattern))


def test_a_reference_past_the_time_limit_is_an_error_row_naming_it(pytester, example):
    (pytester.path / "broken_refs.py").write_text(BROKEN.replace("{forward}", "slow").replace("{extra}", "{}"))
    pytester.makeconftest("from broken_refs import *\n")
    pytester.syspathinsert()
    result = run(pytester, "clean", "-k", "gated_silu.0.forward or linear", "--msprobe-timeout", "1")
    assert "INTERNALERROR" not in result.stdout.str()
    result.assert_outcomes(failed=1, passed=2)
    message = results(pytester)["myteam.gated_silu.0"]["Message"]
    assert "in the reference broken_refs.slow (" in message and "registered for myteam.gated_silu" in message
    assert "ran past --msprobe-timeout 1 s" in message


def test_a_reference_that_cannot_model_a_call_is_a_skip_naming_it(pytester, example):
    pytester.makeconftest(
        "from pytest_msprobe.frameworks.references import ReferenceUnsupported\n"
        "def reference(*args):\n"
        "    raise ReferenceUnsupported('valid_rows below 16 is not modelled yet')\n"
        "def pytest_msprobe_references(registry):\n"
        "    registry.add('myteam.gated_silu', reference)\n"
    )
    result = run(pytester, "clean", "-k", "gated_silu.0.forward", "-rs")
    result.assert_outcomes(skipped=1)
    result.stdout.fnmatch_lines(["*myteam.gated_silu: valid_rows below 16 is not modelled yet*"])


SIGNATURES = """def forward(x, w_gate, w_up, valid_rows):
    return x


def model_of_three(x, w_gate, w_up):
    return [x]


def pytest_msprobe_references(registry):
"""


@pytest.mark.parametrize(
    "conftest, says",
    [
        ("def pytest_msprobe_references(registry):\n"
         "    registry.add('myteam.gated_silu', lambda *a: None)\n"
         "    registry.add('myteam.gated_silu', lambda *a: None)\n",
         "myteam.gated_silu: its forward is registered twice, by conftest.py:2 and by conftest.py:3*"),
        ("def pytest_msprobe_references(registry):\n    registry.add('myteam.gated_silu', 'not callable')\n",
         "conftest.py:2: myteam.gated_silu's forward must be a callable, not str"),
        ("def pytest_msprobe_references(registry):\n    registry.add('gated_silu', print)\n",
         "a reference's pattern is an API name as the dump writes it (<Type>.<api>), not 'gated_silu'"),
        ("def pytest_msprobe_references(registry):\n    import not_a_module_of_the_team\n",
         "a pytest_msprobe_references hook raised ModuleNotFoundError: No module named 'not_a_module_of_the_team' "
         "(*conftest.py:2)"),
        # Checked when registered, before any entry runs (the clean dump never asks the model).
        (SIGNATURES + "    registry.add('myteam.gated_silu', forward, magnitude=model_of_three)\n",
         "conftest.py:10: myteam.gated_silu's magnitude model conftest.model_of_three(x, w_gate, w_up) "
         "(*conftest.py:5) cannot be called as the reference conftest.forward(x, w_gate, w_up, valid_rows) is: (x, w_gate, "
         "w_up, valid_rows): too many positional arguments"),
        (SIGNATURES + "    registry.add('myteam.gated_silu', forward, backward_magnitude=model_of_three)\n",
         "*backward magnitude model conftest.model_of_three* cannot be called as the reference conftest.forward"
         "(x, w_gate, w_up, valid_rows) is: (grad_outputs, x, w_gate, w_up, valid_rows): too many positional*"),
        (SIGNATURES + "    registry.add('myteam.gated_silu', model_of_three, unwritten=forward)\n",
         "*unwritten mask conftest.forward* cannot be called as the check calls it: (outputs, args, kwargs)"
         ": missing a required argument: 'valid_rows'"),
    ],
)
def test_a_registration_that_cannot_stand_is_a_usage_error(pytester, example, conftest, says):
    pytester.makeconftest(conftest)
    result = run(pytester, "clean")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines([f"*{says}*"])
    assert "INTERNALERROR" not in result.stdout.str() + result.stderr.str()


# -- replacing a built-in reference --------------------------------------------------------------------


def test_a_users_reference_replaces_a_built_in_one(pytester, copy_dump):
    dump = copy_dump("npu_fused_sim")
    pytester.makeconftest(
        "from pytest_msprobe.frameworks.npu_reference import npu_rms_norm\n"
        "def off(input, gamma, epsilon=1e-6):\n"
        "    return npu_rms_norm(input, gamma, epsilon=1e-2)\n"
        "def pytest_msprobe_references(registry):\n"
        "    registry.add('NPU.npu_rms_norm', off)\n"
    )
    result = pytester.runpytest("-p", "no:cacheprovider", "--msprobe-dump", str(dump), "--msprobe-device", "recorded",
                                "-k", "npu_rms_norm or npu_swiglu")
    result.stdout.fnmatch_lines(["msprobe: reference NPU.npu_rms_norm: forward from conftest.py:5"])
    assert failed(result) and all(name.startswith("NPU.npu_rms_norm.") for name in failed(result))
    assert result.parseoutcomes()["passed"] >= 1  # npu_swiglu, on its built-in reference


# -- several workers, several hosts, the simulated NPU -------------------------------------------------


@pytest.mark.slow
def test_the_workers_of_n_2_load_the_same_registrations_and_write_the_rows_of_a_serial_run(pytester, example):
    serial = run(pytester, "faulty", "custom_op", out="serial", standard="dtype")
    spread = run(pytester, "faulty", "custom_op", "-n", "2", out="spread", standard="dtype", subprocess=True)
    assert serial.ret == spread.ret == 1
    assert failed(spread) == failed(serial) == {"myteam.gated_silu.0.forward"}
    assert results(pytester, "spread") == results(pytester, "serial")
    assert details(pytester, "spread") == details(pytester, "serial")
    yaml = run(pytester, "faulty", *YAML, "-n", "2", out="yaml", subprocess=True)
    assert failed(yaml) == {"myteam.gated_silu.0.forward"}, yaml.stdout.str()[-3000:]


@pytest.mark.slow
def test_the_simulated_npu_runs_the_custom_ops_on_its_device_path(pytester, example, monkeypatch):
    monkeypatch.setenv("PYTHONPATH", str(ROOT / "tests" / "npu_sim"), prepend=":")
    log = pytester.path / "npu_sim.log"
    monkeypatch.setenv("MSPROBE_NPU_SIM_LOG", str(log))
    for name in ("MSPROBE_NPU_SIM_DEVICES", "ASCEND_RT_VISIBLE_DEVICES"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.delenv("MSPROBE_NPU_SIM_DEFICITS", raising=False)
    clean = run(pytester, "clean", "custom_op", device="npu", standard="dtype", out="clean", subprocess=True)
    assert clean.ret == 0, clean.stdout.str()[-3000:]
    clean.stdout.fnmatch_lines(["msprobe: device npu:0*"])
    # A deficit of the device's gated_silu kernel: exactly its entry fails, through the device's dispatch.
    monkeypatch.setenv("MSPROBE_NPU_SIM_DEFICITS", "myteam::gated_silu=scale:1.01")
    deficit = run(pytester, "clean", "custom_op", device="npu", out="deficit", subprocess=True)
    assert failed(deficit) == {"myteam.gated_silu.0.forward"}, deficit.stdout.str()[-3000:]
    fired = {line.split()[2:] == ["myteam::gated_silu", "scale:1.01"] for line in log.read_text().splitlines()
             if " deficit " in line}
    assert fired == {True}


def test_the_example_module_defines_its_op_once_per_process():
    sys.path.insert(0, str(EXAMPLE))
    try:
        import myteam_ops  # noqa: F401 - defines torch.ops.myteam.gated_silu
        import torch

        assert hasattr(torch.ops.myteam, "gated_silu")
        source = (EXAMPLE / "myteam_ops.py").read_text()
        exec(compile(source, "myteam_ops.py", "exec"), {"__name__": "myteam_ops_again"})  # a second import
    finally:
        sys.path.remove(str(EXAMPLE))


CONTROLLER_ONLY = '''
import sys
sys.path.insert(0, "custom_op")
from conftest_of_the_team import pytest_msprobe_references as the_teams


def pytest_msprobe_references(registry, config):
    if not hasattr(config, "workerinput"):  # a worker that lacks the team's registrations
        the_teams(registry)
'''


@pytest.mark.slow
def test_a_worker_registering_otherwise_than_its_controller_fails_those_entries_naming_it(pytester, example):
    shutil.copy(example / "conftest.py", example / "conftest_of_the_team.py")
    pytester.makeconftest(CONTROLLER_ONLY)
    result = run(pytester, "clean", "-n", "2", "-k", "gated_silu or linear", subprocess=True)
    assert "INTERNALERROR" not in result.stdout.str()
    assert failed(result) == {"myteam.gated_silu.0.forward", "myteam.gated_silu.0.backward"}
    message = results(pytester)["myteam.gated_silu.0"]["Message"]
    assert "myteam.gated_silu is registered otherwise on worker gw" in message
    assert "than on the xdist controller: here nothing; there forward " in message
    assert results(pytester)["Functional.linear.0"]["Forward Test Success"] == "pass"


# A plugin of the team's, on every host's path (each host's chdir): the example's conftest as a module.
@pytest.fixture
def hosts(tmp_path_factory):
    from sshd import Hosts

    started = Hosts(tmp_path_factory.mktemp("hosts"))
    yield started
    started.stop()


def host_folder(pytester: pytest.Pytester, example: Path, name: str, plugin: str) -> Path:
    folder = pytester.path / f"{name}_run"
    folder.mkdir()
    shutil.copy(example / "myteam_ops.py", folder)
    (folder / "myteam_references.py").write_text(plugin)
    return folder


@pytest.mark.slow
def test_workers_over_tx_hosts_load_the_same_registrations_and_a_host_with_others_fails_its_entries(
        pytester, example, hosts):
    import subprocess

    plugin = (example / "conftest.py").read_text()
    serial = run(pytester, "faulty", "custom_op", out="serial")
    assert failed(serial) == {"myteam.gated_silu.0.forward"}
    (pytester.path / "myteam_references.py").write_text(plugin)  # the controller's, from where it runs
    shutil.copy(example / "myteam_ops.py", pytester.path)
    host1 = hosts.start("host1")
    one = host_folder(pytester, example, "host1", plugin)
    dump = pytester.path / "custom_op" / "faulty" / "dump.json"

    def command(spec: str, out: str) -> list:
        return [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-p", "myteam_references", "--dist=load",
                "--tx", spec, f"--msprobe-dump={dump}", "--msprobe-device=recorded", f"--msprobe-out={out}"]

    done = subprocess.run(command(host1.spec(2, sys.executable, one), "hosts"), cwd=pytester.path,
                          capture_output=True, text=True, timeout=600)
    assert "INTERNALERROR" not in done.stdout, done.stdout[-3000:]
    assert done.returncode == 1, done.stdout[-3000:] + done.stderr[-3000:]
    assert results(pytester, "hosts") == results(pytester, "serial")
    # Another copy of the team's plugin on host2: its gated_silu without the padding mask.
    host2 = hosts.start("host2")
    other = plugin.replace(", unwritten=rows_past_valid", "")
    assert other != plugin
    two = host_folder(pytester, example, "host2", other)
    done = subprocess.run(command(host2.spec(1, sys.executable, two), "other"), cwd=pytester.path,
                          capture_output=True, text=True, timeout=600)
    assert "INTERNALERROR" not in done.stdout, done.stdout[-3000:]
    rows = results(pytester, "other")
    refused = {api for api, row in rows.items() if "is registered otherwise on worker gw0 of host host2" in row["Message"]}
    assert refused == {"myteam.gated_silu.0"}, done.stdout[-3000:]
    assert rows["myteam.gated_silu.0"]["Forward Test Success"] == "error"
    for api, row in rows.items():
        if api != "myteam.gated_silu.0":
            assert row == results(pytester, "serial")[api]


@pytest.mark.slow
def test_the_repro_of_a_custom_op_compares_what_the_run_compared(pytester, example):
    import subprocess

    run(pytester, "faulty", "custom_op", "-k", "gated_silu.0.forward", "--msprobe-repro", "repro")
    script = next((pytester.path / "repro").rglob("myteam.gated_silu.0.forward/repro.py"))
    done = subprocess.run([sys.executable, str(script)], cwd=script.parent, capture_output=True, text=True,
                          timeout=600)
    assert "verdict: error (the run: error)" in done.stdout, done.stdout + done.stderr
    assert "the float64 reference of this fused op" in done.stdout
    assert "NaN" not in done.stdout  # the padding rows hold the bench's values, as the run compared them


# -- the repro of a run that re-ran the op: the mask and the post-processing again --------------------

TEAM_KERNELS = '''
import torch
import torch.nn.functional as F


def faulty_gated_silu(x, w_gate, w_up, valid_rows):
    """The up projection's operands read in bfloat16, the padding rows left NaN: the faulty kernel."""
    out = torch.full((x.shape[0], w_gate.shape[0]), float("nan"), dtype=x.dtype)
    rows = x[:valid_rows]
    up = rows.bfloat16().float() @ w_up.bfloat16().float().t()
    out[:valid_rows] = F.silu(rows @ w_gate.t()) * up
    return out
'''


@pytest.mark.slow
@pytest.mark.parametrize("registered", ["conftest", "yaml"])
def test_the_repro_of_an_op_run_again_applies_the_runs_mask_and_post_processing(pytester, example, registered):
    """The run re-runs the op on the CPU (a registered device call, faulty, leaving the padding rows
    NaN): the repro run again on the CPU imports the mask (or msprobe's post-processing handler) from
    the file the run imported it from, applies it, and prints the run's metrics and verdict."""
    import json
    import os
    import subprocess

    (pytester.path / "team_kernels.py").write_text(TEAM_KERNELS)
    if registered == "conftest":  # the example's registrations, the device call the faulty kernel
        conftest = (example / "conftest.py").read_text().replace(
            'registry.add("myteam.gated_silu", gated_silu_reference,',
            'import team_kernels\n    registry.add("myteam.gated_silu", gated_silu_reference, '
            "device=team_kernels.faulty_gated_silu,",
        )
        assert "team_kernels.faulty_gated_silu" in conftest
        (example / "conftest.py").write_text(conftest)
        args: tuple[str, ...] = ("custom_op",)
        function, defined = "rows_past_valid (unwritten)", example / "conftest.py"
    else:  # msprobe's YAML files; the device call alone from a conftest
        pytester.makeconftest(
            "import team_kernels\n"
            "def pytest_msprobe_references(registry):\n"
            "    registry.add('myteam.gated_silu', device=team_kernels.faulty_gated_silu)\n"
        )
        args = YAML
        function, defined = "zero_padding_rows (target)", example / "myteam_bench.py"
    pytester.syspathinsert()
    result = run(pytester, "clean", *args, "-k", "gated_silu.0.forward", "--msprobe-repro", "repro", device="cpu",
                 standard="dtype")
    assert failed(result) == {"myteam.gated_silu.0.forward"}, result.stdout.str()[-3000:]
    script = next((pytester.path / "repro").rglob("myteam.gated_silu.0.forward/repro.py"))
    assert str(defined.resolve()) in script.read_text()  # the file the run imported, by its path
    env = {**os.environ, "PYTHONPATH": str(pytester.path)}  # where the team's modules are, as for the run
    done = subprocess.run([sys.executable, str(script), "--device", "cpu", "--json"], cwd=script.parent,
                          capture_output=True, text=True, timeout=600, env=env)
    report = json.loads(done.stdout.strip().splitlines()[-1])
    verdict = json.loads((script.parent / "verdict.json").read_text())
    assert (report["status"], report["run"]) == ("error", "error"), done.stdout + done.stderr
    [mine], [theirs] = report["outputs"], verdict["outputs"]
    for key in ("cosine", "max_abs_err", "max_rel_err", "status"):
        assert mine[key] == theirs[key], (key, mine, theirs)
    assert mine["ratio"] == pytest.approx(theirs["ratio"], rel=1e-9)
    assert "NaN" not in mine["why"]
    assert f"the op's outputs as the run compared them: {function}" in report["bench"]


@pytest.mark.slow
def test_a_repro_that_cannot_import_the_runs_mask_says_so_where_it_would_run_the_op(pytester, example):
    """The run applied a mask no script can import again (a lambda): the script still reproduces the
    recorded outputs, already as the run compared them, and refuses to run the op again without it."""
    import json
    import subprocess

    conftest = (example / "conftest.py").read_text()
    (example / "conftest.py").write_text(
        conftest.replace("unwritten=rows_past_valid", "unwritten=lambda *a: rows_past_valid(*a)")
    )
    result = run(pytester, "faulty", "custom_op", "-k", "gated_silu.0.forward", "--msprobe-repro", "repro",
                 standard="dtype")
    assert failed(result) == {"myteam.gated_silu.0.forward"}, result.stdout.str()[-3000:]
    script = next((pytester.path / "repro").rglob("myteam.gated_silu.0.forward/repro.py"))
    recorded = subprocess.run([sys.executable, str(script), "--json"], cwd=script.parent, capture_output=True,
                              text=True, timeout=600)
    report = json.loads(recorded.stdout.strip().splitlines()[-1])
    assert (report["status"], report["run"]) == ("error", "error"), recorded.stdout + recorded.stderr
    rerun = subprocess.run([sys.executable, str(script), "--device", "cpu"], cwd=script.parent, capture_output=True,
                           text=True, timeout=600)
    assert rerun.returncode != 0
    assert matches(
        rerun.stderr.strip(),
        "the run applied a function to the outputs (unwritten) that cannot be applied here: conftest.*<lambda> "
        "(*conftest.py:*) is not a function of its module's (a lambda or a local function)",
    ), rerun.stderr


def test_a_repro_never_imports_from_the_dumps_folder(tmp_path):
    """The run refuses a conftest or a --msprobe-functions file in a dump's folder; the script's list of
    what to import refuses one there again (a dump is data)."""
    from types import SimpleNamespace

    from pytest_msprobe.artifacts.repro import importable_functions
    from pytest_msprobe.frameworks import Recipe

    (tmp_path / "dump").mkdir()
    inside, outside = tmp_path / "dump" / "masks.py", tmp_path / "conftest.py"
    recipe = Recipe("pytorch", "torch.ops.myteam.gated_silu", "", output_functions=(
        ("target", str(inside), "zero_padding_rows"), ("unwritten", str(outside), "rows_past_valid")))
    found = importable_functions(SimpleNamespace(path=tmp_path / "dump" / "dump.json"), recipe)
    assert found["unwritten"] == [str(outside), "rows_past_valid"]
    assert found["target"] == ["", f"zero_padding_rows of {inside} lies in the dump's folder {tmp_path / 'dump'}: "
                                    "never imported from there"]
