"""The reference registry, the built-in references through it, msprobe's YAML files read into it, and
the composed magnitude model: units (the end-to-end runs are tests/test_custom_ops.py)."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
import torch.nn.functional as F

from pytest_msprobe.frameworks import built_in_references, magnitudes, msprobe_yaml, npu_builtins, npu_ops
from pytest_msprobe.frameworks.composed import ComposeFailed, compose, compose_backward
from pytest_msprobe.frameworks.references import (
    BUILT_IN,
    Magnitude,
    Postprocess,
    ReferenceFailed,
    Registry,
    RegistryError,
    agree,
    guarded,
    stopped_in,
)

ROOT = Path(__file__).resolve().parent.parent
MSPROBE = Path("/work/msprobe-venv/lib/python3.11/site-packages/msprobe")


def reference(*args):
    return args[0]


def other(*args):
    return args[0]


# -- the registry ----------------------------------------------------------------------------------


def test_the_built_ins_are_every_reference_the_npu_modules_define():
    names = {name for names in npu_builtins.BUILT_IN_NPU.values() for name in names}
    assert names == set(npu_ops.REFERENCES)
    registry = built_in_references()
    assert {r.pattern for r in registry} == {f"NPU.{name}" for name in names}
    assert all(r.built_in for r in registry)
    assert registry.find("NPU.npu_rms_norm").forward.load() is npu_ops.REFERENCES["npu_rms_norm"]


def test_the_built_ins_import_no_torch_until_called():
    import subprocess
    import sys

    code = (
        "import sys\n"
        "from pytest_msprobe.frameworks.references import Registry\n"
        "from pytest_msprobe.frameworks import npu_builtins\n"
        "r = Registry(); npu_builtins.register(r)\n"
        "print(r.header_lines()[0]); print('torch' in sys.modules)\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert done.stdout.splitlines() == ["references: 30 built-in (torch_npu's fused ops, docs/npu.md)", "False"]


def test_a_users_registration_replaces_the_built_in_fields_it_gives():
    registry = built_in_references()
    registry.add("NPU.npu_grouped_matmul", reference, origin="conftest.py:3")
    found = registry.find("NPU.npu_grouped_matmul")
    assert found.forward is reference and found.origin_of("forward") == "conftest.py:3"
    assert found.origin_of("unwritten") == BUILT_IN  # the padding mask stays
    assert registry.header_lines()[1:] == [
        "reference NPU.npu_grouped_matmul: forward from conftest.py:3; unwritten mask from built-in"
    ]


def test_a_field_two_places_give_is_an_error_naming_both():
    registry = Registry()
    registry.add("myteam.op", reference, origin="a.py:1")
    registry.add("myteam.op", magnitude=Magnitude.COMPOSITION, origin="b.py:2")  # another field: merged
    with pytest.raises(RegistryError, match=r"myteam.op: its forward is registered twice, by a.py:1 and by b.py:9"):
        registry.add("myteam.op", other, origin="b.py:9")


def test_the_origin_is_where_add_was_called():
    registry = Registry()
    registry.add("myteam.op", reference)
    line = test_the_origin_is_where_add_was_called.__code__.co_firstlineno + 2
    assert registry.find("myteam.op").origin_of("forward").endswith(f"test_references.py:{line}")


def test_an_exact_name_wins_over_a_pattern_and_a_longer_pattern_over_a_shorter():
    registry = Registry()
    registry.add("myteam.*", reference, origin="x")
    registry.add("myteam.gated_*", other, origin="x")
    registry.add("myteam.gated_silu", reference, origin="y")
    assert registry.find("myteam.gated_silu").pattern == "myteam.gated_silu"
    assert registry.find("myteam.gated_gelu").pattern == "myteam.gated_*"
    assert registry.find("myteam.rms_norm").pattern == "myteam.*"
    assert registry.find("other.op") is None


def test_two_patterns_alike_is_an_error_of_the_entry():
    registry = Registry()
    registry.add("myteam.a*", reference, origin="x.py:1")
    registry.add("myteam.*b", reference, origin="y.py:2")
    with pytest.raises(ReferenceFailed, match=r"matched alike by the patterns myteam.a\* \(x.py:1\) and myteam.\*b"):
        registry.find("myteam.ab")


@pytest.mark.parametrize(
    "kwargs, says",
    [
        ({"forward": 3}, "forward must be a callable, not int"),
        ({"magnitude": "composition"}, "magnitude model must be a callable or a Magnitude"),
        ({"postprocess": reference}, "postprocess must be a Postprocess"),
        ({"uncompared": {"0": "why"}}, "uncompared outputs map an output index to why"),
        ({}, "gives nothing"),
    ],
)
def test_a_field_of_the_wrong_kind_is_a_registry_error(kwargs, says):
    with pytest.raises(RegistryError, match=says):
        Registry().add("myteam.op", origin="c.py:1", **kwargs)


def test_a_worker_refuses_every_pattern_registered_otherwise_than_its_controller():
    controller = Registry()
    controller.add("myteam.a", reference, origin="c.py:1")
    controller.add("myteam.b", reference, origin="c.py:2")
    worker = Registry()
    worker.add("myteam.a", reference, origin="c.py:1")
    worker.add("myteam.c", reference, origin="c.py:3")
    assert agree(worker, controller.signatures(), "worker gw1") == ["myteam.b", "myteam.c"]
    assert worker.find("myteam.a").forward is reference
    with pytest.raises(ReferenceFailed, match="myteam.b is registered otherwise on worker gw1 than on the xdist "
                                              "controller: here nothing; there forward c.py:2"):
        worker.find("myteam.b").forward()


def test_a_guarded_function_names_itself_in_what_it_raises_and_where_it_was_stopped():
    def broken(x):
        raise ValueError("boom")

    with pytest.raises(ReferenceFailed, match=r"the reference .*test_references\..*broken \(.*test_references.py:\d+\) "
                                              r"registered for myteam.op raised ValueError: boom"):
        guarded(broken, "reference", "myteam.op")(1)

    class Stop(BaseException):
        pass

    def stopped(x):
        raise Stop

    with pytest.raises(Stop):
        guarded(stopped, "magnitude model", "myteam.op")(1)
    assert stopped_in().startswith("the magnitude model ") and stopped_in() == ""


# -- msprobe's YAML files --------------------------------------------------------------------------


@pytest.mark.skipif(not MSPROBE.is_dir(), reason="msprobe 26.2.0's own files are read from its venv")
def test_msprobes_own_files_as_it_ships_them_need_no_function_and_register_nothing():
    registry = built_in_references()
    files = msprobe_yaml.FunctionFiles(())
    notes = msprobe_yaml.read_fusion_config(MSPROBE / "pytorch/bench_functions/fusion_operator_config.yaml", files,
                                            registry)
    notes += msprobe_yaml.read_postprocess_config(
        MSPROBE / "core/common/output_postprocess/api_output_postprocess.yaml", files, registry)
    assert all(r.built_in for r in registry) and len(registry) == 30
    assert notes == [
        "fusion_operator_config.yaml: 16 operators as msprobe 26.2 ships them: the built-in references stand for its "
        "functions (docs/npu.md)",
        "api_output_postprocess.yaml: 2 handlers as msprobe 26.2 ships them (npu_dequant_swiglu_quant, "
        "npu_grouped_matmul): the built-in masks stand for them (docs/npu.md)",
    ]


def test_msprobes_shipped_tables_are_its_files():
    """The example's copies are msprobe 26.2.0's files with the team's entries appended."""
    yaml = pytest.importorskip("yaml")
    fusion = yaml.safe_load((ROOT / "examples/custom_op/fusion_operator_config.yaml").read_text())["operators"]
    shipped = {k: (v.get("forward"), v.get("backward")) for k, v in fusion.items() if "." not in k}
    assert shipped == dict(msprobe_yaml.MSPROBE_FUSION)
    post = yaml.safe_load((ROOT / "examples/custom_op/api_output_postprocess.yaml").read_text())["acc_check_handlers"]
    assert {(side, k): v for side in ("target", "golden") for k, v in (post[side] or {}).items() if "." not in k} == (
        dict(msprobe_yaml.MSPROBE_POSTPROCESS))


def test_a_yaml_function_and_its_handler_come_from_the_named_files(tmp_path):
    (tmp_path / "bench.py").write_text(
        "def fwd(x):\n    return x\ndef fwd_backward(g, x):\n    return [g]\ndef clean(api, out, args, kwargs):\n"
        "    return out\n")
    (tmp_path / "fusion.yaml").write_text("operators:\n  npu_swiglu:\n    forward: fwd\n    backward: fwd_backward\n")
    (tmp_path / "post.yaml").write_text("acc_check_handlers:\n  golden:\n    npu_swiglu: 'bench.py:clean'\n")
    registry = built_in_references()
    notes = msprobe_yaml.read("fusion.yaml", "post.yaml", ["bench.py"], tmp_path, [], registry)
    found = registry.find("NPU.npu_swiglu")
    assert found.forward.__name__ == "fwd" and found.origin_of("forward") == "fusion.yaml operators.npu_swiglu (fwd)"
    assert isinstance(found.postprocess, Postprocess) and found.postprocess.golden.__name__ == "clean"
    assert found.postprocess.target is None
    assert notes == [
        "fusion.yaml: npu_swiglu's backward fwd_backward is registered and not called, as msprobe 26.2 calls none: "
        "its backward entries take autograd's of the forward"
    ]


def test_a_function_two_named_files_define_is_a_usage_error(tmp_path):
    for name in ("a.py", "b.py"):
        (tmp_path / name).write_text("def fwd(x):\n    return x\n")
    (tmp_path / "fusion.yaml").write_text("operators:\n  myteam.op:\n    forward: fwd\n")
    with pytest.raises(RegistryError, match=r"operators.myteam.op.forward: fwd is defined in .*a.py and in .*b.py"):
        msprobe_yaml.read("fusion.yaml", "", ["a.py", "b.py"], tmp_path, [], Registry())


def test_a_named_file_that_raises_on_import_is_a_usage_error(tmp_path):
    (tmp_path / "bad.py").write_text("import not_a_module_anywhere\n")
    (tmp_path / "fusion.yaml").write_text("operators:\n  myteam.op:\n    forward: fwd\n")
    with pytest.raises(RegistryError, match=r"importing .*bad.py raised ModuleNotFoundError: No module named"):
        msprobe_yaml.read("fusion.yaml", "", ["bad.py"], tmp_path, [], Registry())


# -- the composed magnitude ------------------------------------------------------------------------


def gated(x, w, v):
    return F.silu(x @ w.T) * F.linear(x, v)


def test_a_composition_carries_each_steps_rounding_through_the_next():
    torch.manual_seed(0)
    x, w, v = (torch.randn(4, 8, dtype=torch.float64) for _ in range(3))
    found = compose(gated, (x, w, v), {})[0]
    z, u = x @ w.T, x @ v.T
    z_terms, u_terms = x.abs() @ w.abs().T, x.abs() @ v.abs().T
    slope = (torch.sigmoid(z) * (1 + z * (1 - torch.sigmoid(z)))).abs()
    silu = F.silu(z).abs()
    # silu's own rounding and its input's, times |u|; |silu| times u's; the product's own.
    expected = (silu + slope * z_terms) * u.abs() + silu * u_terms + silu * u.abs()
    torch.testing.assert_close(found, expected, rtol=1e-12, atol=0)


def test_one_api_composes_to_its_own_model():
    torch.manual_seed(1)
    x, w, b = torch.randn(3, 5, dtype=torch.float64), torch.randn(4, 5, dtype=torch.float64), torch.randn(4).double()
    torch.testing.assert_close(compose(F.linear, (x, w, b), {})[0], F.linear(x.abs(), w.abs(), b.abs()))
    s = torch.randn(2, 7, dtype=torch.float64)
    torch.testing.assert_close(compose(torch.softmax, (s, -1), {})[0], magnitudes.formula("softmax", (s, -1), {}, None)[0])
    # Copies round nothing: a view of an input carries no rounding.
    assert not compose(lambda t: t.transpose(0, 1).reshape(-1), (s,), {})[0].any()


def test_a_masked_softmax_composes_without_nan():
    torch.manual_seed(2)
    q, k = torch.randn(3, 4, dtype=torch.float64), torch.randn(5, 4, dtype=torch.float64)
    mask = torch.ones(3, 5, dtype=torch.bool).triu(1)
    found = compose(lambda q, k: torch.softmax((q @ k.T).masked_fill(mask, float("-inf")), -1), (q, k), {})[0]
    assert torch.isfinite(found).all() and (found[mask] == 0).all()


def test_an_api_without_a_model_here_cannot_be_composed():
    x = torch.randn(3, dtype=torch.float64)
    with pytest.raises(ComposeFailed, match=r"torch.cumprod is not an API whose magnitude model composes here"):
        compose(lambda t: torch.cumprod(torch.exp(t), 0), (x,), {})
    with pytest.raises(ComposeFailed, match=r"layer_norm takes a tensor holding the roundings of earlier steps"):
        compose(lambda t: F.layer_norm(t * 2, (3,)), (x,), {})
    compose(lambda t: F.layer_norm(t, (3,)), (x,), {})  # of the call's own inputs: its formula


# -- the composed magnitude of the backward ---------------------------------------------------------


def test_the_backward_of_a_contraction_composes_to_its_gradients_own_model():
    torch.manual_seed(0)
    x, w, g = torch.randn(5, 4, dtype=torch.float64), torch.randn(3, 4, dtype=torch.float64), torch.randn(5, 3)
    dx, dw = compose_backward(lambda x, w: x @ w.T, (x, w), {}, [g.double()], [True, True])
    # dx = g W, dw = g^T x: each the terms |g||W|, |g|^T|x| of its own contraction, nothing carried in.
    torch.testing.assert_close(dx, g.double().abs() @ w.abs(), rtol=1e-12, atol=0)
    torch.testing.assert_close(dw, g.double().abs().T @ x.abs(), rtol=1e-12, atol=0)


def test_the_backward_carries_the_forwards_roundings_it_reads_and_adds_each_steps_own():
    torch.manual_seed(0)
    x, w, g = torch.randn(5, 4, dtype=torch.float64), torch.randn(3, 4, dtype=torch.float64), torch.randn(5, 3)
    g = g.double()
    dx, dw = compose_backward(lambda x, w: torch.exp(x @ w.T), (x, w), {}, [g], [True, False])
    # exp(z) read by the backward holds z's terms |x||W| times its slope, and its own rounding |e|;
    # g * e rounds once (|g||e|), then (g e) W sums its terms (|g e||W|) and carries |g| m_e.
    e = torch.exp(x @ w.T)
    m_e = e + e * (x.abs() @ w.abs().T)
    expected = (2 * (g * e).abs() + g.abs() * m_e) @ w.abs()
    torch.testing.assert_close(dx, expected, rtol=1e-12, atol=0)
    assert dw is None  # an input that takes no gradient has none


def test_the_backward_of_the_examples_ops_composes_through_their_mutations():
    torch.manual_seed(0)
    x, w, v = (torch.randn(6, 4, dtype=torch.float64) for _ in range(3))
    g = torch.randn(6, 6, dtype=torch.float64)

    def gated_rows(x, w, v, valid):
        out = x.new_zeros(x.shape[0], w.shape[0])
        out[:valid] = F.silu(x[:valid] @ w.T) * (x[:valid] @ v.T)
        return out

    dx, dw, dv = compose_backward(gated_rows, (x, w, v, 4), {}, [g], [True] * 3)
    assert dx.shape == x.shape and dw.shape == w.shape and dv.shape == v.shape
    assert (dx[4:] == 0).all() and (dx[:4] > 0).all()  # the padding rows take no gradient, so no rounding
    # The same backward written out (the rows past `valid` dropped) carries the same magnitudes.
    reduced = compose_backward(lambda x, w, v: F.silu(x @ w.T) * (x @ v.T), (x[:4], w, v), {}, [g[:4]], [True] * 3)
    torch.testing.assert_close(dx[:4], reduced[0], rtol=1e-12, atol=0)
    torch.testing.assert_close(dw, reduced[1], rtol=1e-12, atol=0)


def test_a_backward_through_an_operator_without_a_rule_here_cannot_be_composed():
    x, g = torch.randn(3, 4, dtype=torch.float64), torch.randn(3, 4, dtype=torch.float64)
    with pytest.raises(ComposeFailed, match=r"aten.native_layer_norm is not an API whose magnitude model composes"):
        compose_backward(lambda t: F.layer_norm(t, (4,)), (x,), {}, [g], [True])
    with pytest.raises(ComposeFailed, match=r"its backward cannot be traced to torch's operators"):
        compose_backward(lambda t: t * float(t.numpy().sum()), (x,), {}, [g], [True])
    found = compose_backward(lambda t: torch.softmax(t * 2, -1), (x,), {}, [g], [True])[0]
    assert found.shape == x.shape and torch.isfinite(found).all()


# -- what is checked when a function is registered ----------------------------------------------------


def op(x, weight, eps=1e-6):
    return x


def model(x, weight):
    return [x]


def test_a_model_is_checked_against_the_forwards_signature_when_registered():
    registry = Registry()
    with pytest.raises(RegistryError, match=r"magnitude model .*model\(x, weight\) \(.*\) cannot be called as the "
                                            r"reference .*op\(x, weight, eps=1e-06\) is: \(x, weight, eps\)"):
        registry.add("myteam.a", op, magnitude=model)  # the call may give eps
    with pytest.raises(RegistryError, match=r"cannot be called as the reference .* is: \(x, weight\): missing "
                                            r"a required argument: 'eps'"):
        registry.add("myteam.b", op, magnitude=lambda x, weight, eps: [x])  # or leave it out
    with pytest.raises(RegistryError, match=r"backward magnitude model .* \(grad_outputs, x, weight, eps\): too many"):
        registry.add("myteam.c", op, backward_magnitude=lambda x, weight, eps=1e-6: [x])
    with pytest.raises(RegistryError, match=r"output post-processing .* cannot be called as the check calls it: "
                                            r"\(api_name, output, args, kwargs\)"):
        registry.add("myteam.d", op, postprocess=Postprocess(target=lambda output: output))
    # What binds, or what inspect cannot read, stands.
    registry.add("myteam.e", op, magnitude=lambda *args, **kwargs: [args[0]], unwritten=lambda o, a, k: {})
    registry.add("myteam.f", op, backward_magnitude=lambda grads, x, weight, eps=1e-6: [x, weight])
    registry.add("myteam.g", lambda *args: args[0], magnitude=lambda x: [x])  # any call would do
    registry.add("myteam.h", op, magnitude=torch.abs)  # a builtin: not read
    assert registry.find("myteam.d") is None and registry.find("myteam.e") is not None
