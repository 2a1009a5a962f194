"""Tests of the CPU references of torch_npu's fused ops.

Every reference is checked against an independent computation (numpy, explicit
loops, or a different composition of torch ops), against a small case worked
out by hand, and, where the op is differentiable, with float64 gradcheck.
"""

import inspect
import math

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from hypothesis import given, settings
from hypothesis import strategies as st

from pytest_msprobe.frameworks.npu_ops import REFERENCES, ReferenceUnsupported, lookup

FAST = settings(max_examples=25, deadline=None)
E = math.e


def rand(*shape, seed=0, dtype=torch.float64):
    generator = torch.Generator().manual_seed(seed)
    return torch.randn(*shape, generator=generator, dtype=dtype)


def sigmoid(x):
    return 1.0 / (1.0 + np.exp(-x))


def assert_close(actual, expected, atol=1e-12, rtol=1e-10):
    if isinstance(actual, torch.Tensor):
        actual = actual.detach().numpy()
    np.testing.assert_allclose(actual, expected, atol=atol, rtol=rtol)


def unannotated(fn):
    signature = inspect.signature(fn)
    bare = [p.replace(annotation=inspect.Parameter.empty) for p in signature.parameters.values()]
    return str(signature.replace(parameters=bare, return_annotation=inspect.Signature.empty))


# ---------------------------------------------------------------------------
# Registry and signatures
# ---------------------------------------------------------------------------

# The torch_npu schemas (op-plugin op_plugin_functions.yaml / docs); a schema
# argument named ``self`` is passed as ``input`` from Python.
DOCUMENTED_SIGNATURES = {
    "npu_fast_gelu": "(input)",
    "npu_mish": "(input)",
    "npu_swiglu": "(input, dim=-1)",
    "npu_rotary_mul": "(input, r1, r2, rotary_mode='half')",
    "npu_scaled_masked_softmax": "(x, mask, scale=1.0, fixed_triu_mask=False)",
    "npu_confusion_transpose": "(input, perm, shape, transpose_first)",
    "npu_linear": "(input, weight, bias=None)",
    "npu_sort_v2": "(input, dim=-1, descending=False, out=None)",
    "npu_moe_gating_top_k_softmax": "(x, finished=None, k=1)",
    "npu_rms_norm": "(input, gamma, epsilon=1e-06)",
    "npu_layer_norm_eval": "(input, normalized_shape, weight=None, bias=None, eps=1e-05)",
    "npu_group_norm_silu": "(input, weight, bias, group, eps=1e-05)",
    "npu_apply_adam": "(beta1_power, beta2_power, lr, beta1, beta2, epsilon, grad, use_locking, "
                      "use_nesterov, *, out=None)",
    "npu_apply_adam_w": "(beta1_power, beta2_power, lr, weight_decay, beta1, beta2, epsilon, "
                        "grad, max_grad_norm, amsgrad, maximize, *, out=None)",
    "npu_fusion_attention": "(query, key, value, head_num, input_layout, pse=None, "
                            "padding_mask=None, atten_mask=None, scale=1.0, keep_prob=1.0, "
                            "pre_tockens=2147483647, next_tockens=2147483647, inner_precise=0, "
                            "prefix=None, actual_seq_qlen=None, actual_seq_kvlen=None, "
                            "sparse_mode=0, gen_mask_parallel=True, sync=False, "
                            "softmax_layout='', sink=None)",
    # The LLM and MoE operators (npu_llm_reference, issue 30).
    "npu_add_rms_norm": "(x1, x2, gamma, epsilon=1e-06)",
    "npu_gelu": "(input, *, approximate='none')",
    "npu_apply_rotary_pos_emb": "(query, key, cos, sin, layout='BSH', rotary_mode='half')",
    "npu_scatter_nd_update": "(input, indices, updates)",
    "npu_scatter_nd_update_": "(input, indices, updates)",
    "npu_dynamic_quant": "(input, *, smooth_scales=None, group_index=None, dst_type=None)",
    "npu_grouped_matmul": "(x, weight, *, bias=None, scale=None, offset=None, antiquant_scale=None, "
                          "antiquant_offset=None, per_token_scale=None, group_list=None, activation_input=None, "
                          "activation_quant_scale=None, activation_quant_offset=None, split_item=0, "
                          "group_type=None, group_list_type=0, act_type=0, output_dtype=None, tuning_config=None)",
    "npu_moe_init_routing": "(x, row_idx, expert_idx, active_num)",
    "npu_moe_finalize_routing": "(expanded_permuted_rows, skip1, skip2, bias, scales, expanded_src_to_dst_row, "
                                "expert_for_source_row, drop_pad_mode=0, k=1)",
    "npu_moe_compute_expert_tokens": "(sorted_expert_for_source_row, num_expert)",
    "npu_prompt_flash_attention": "(query, key, value, *, pse_shift=None, padding_mask=None, atten_mask=None, "
                                  "actual_seq_lengths=None, deq_scale1=None, quant_scale1=None, deq_scale2=None, "
                                  "quant_scale2=None, quant_offset2=None, num_heads=1, scale_value=1.0, "
                                  "pre_tokens=2147473647, next_tokens=0, input_layout='BSH', num_key_value_heads=0, "
                                  "actual_seq_lengths_kv=None, sparse_mode=0)",
    "npu_incre_flash_attention": "(query, key, value, *, padding_mask=None, pse_shift=None, atten_mask=None, "
                                 "actual_seq_lengths=None, dequant_scale1=None, quant_scale1=None, "
                                 "dequant_scale2=None, quant_scale2=None, quant_offset2=None, antiquant_scale=None, "
                                 "antiquant_offset=None, block_table=None, kv_padding_size=None, num_heads=1, "
                                 "scale_value=1.0, input_layout='BSH', num_key_value_heads=0, block_size=0, "
                                 "inner_precise=1)",
    "npu_fused_infer_attention_score": (
        "(query, key, value, *, pse_shift=None, atten_mask=None, actual_seq_lengths=None, "
        "actual_seq_lengths_kv=None, dequant_scale1=None, quant_scale1=None, dequant_scale2=None, quant_scale2=None, "
        "quant_offset2=None, antiquant_scale=None, antiquant_offset=None, block_table=None, query_padding_size=None, "
        "kv_padding_size=None, key_antiquant_scale=None, key_antiquant_offset=None, value_antiquant_scale=None, "
        "value_antiquant_offset=None, key_shared_prefix=None, value_shared_prefix=None, "
        "actual_shared_prefix_len=None, query_rope=None, key_rope=None, key_rope_antiquant_scale=None, num_heads=1, "
        "scale=1.0, pre_tokens=2147483647, next_tokens=2147483647, input_layout='BSH', num_key_value_heads=0, "
        "sparse_mode=0, inner_precise=0, block_size=0, antiquant_mode=0, softmax_lse_flag=False, "
        "key_antiquant_mode=0, value_antiquant_mode=0)"),
    "npu_quantize": "(input, scales, zero_points, dtype, axis=1, div_mode=True)",
    "npu_quant_matmul": "(x1, x2, scale, *, offset=None, pertoken_scale=None, bias=None, output_dtype=None, "
                        "x1_dtype=None, x2_dtype=None, pertoken_scale_dtype=None, scale_dtype=None, "
                        "group_sizes=None, y_scale=None)",
}


@pytest.mark.parametrize("op_name", sorted(DOCUMENTED_SIGNATURES))
def test_reference_takes_the_documented_arguments(op_name):
    assert lookup(op_name) is REFERENCES[op_name]
    assert unannotated(lookup(op_name)) == DOCUMENTED_SIGNATURES[op_name]


def test_lookup_of_an_unknown_op_is_none():
    assert lookup("no_such_op") is None


def test_every_reference_is_tested_for_its_signature():
    assert set(REFERENCES) == set(DOCUMENTED_SIGNATURES)


# ---------------------------------------------------------------------------
# Activations
# ---------------------------------------------------------------------------

def test_fast_gelu_by_hand():
    # 1 / (1 + e^-1.702) = 0.845795...; fast_gelu(0) = 0; fast_gelu(-1) = -1 / (1 + e^1.702)
    out = lookup("npu_fast_gelu")(torch.tensor([1.0, 0.0, -1.0], dtype=torch.float64))
    assert_close(out, [0.8457957, 0.0, -0.1542043], atol=1e-7)


def test_fast_gelu_matches_the_overflow_safe_training_series_formula():
    x = rand(64, seed=1) * 20
    xn = x.numpy()
    # Atlas training series: x / (1 + e^{-1.702|x|}) * e^{0.851 (x - |x|)}
    expected = xn / (1 + np.exp(-1.702 * np.abs(xn))) * np.exp(0.851 * (xn - np.abs(xn)))
    assert_close(lookup("npu_fast_gelu")(x), expected)


def test_mish_by_hand_and_against_numpy():
    # mish(1) = tanh(ln(1 + e)) = tanh(1.3132617) = 0.8650984
    assert_close(lookup("npu_mish")(torch.tensor([0.0, 1.0], dtype=torch.float64)),
                 [0.0, 0.8650984], atol=1e-7)
    x = rand(5, 7, seed=2)
    assert_close(lookup("npu_mish")(x), x.numpy() * np.tanh(np.log1p(np.exp(x.numpy()))))


def test_swiglu_by_hand():
    # silu(1) * 2 = 2 / (1 + e^-1) = 1.4621172
    assert_close(lookup("npu_swiglu")(torch.tensor([1.0, 2.0], dtype=torch.float64)),
                 [1.4621172], atol=1e-7)


@pytest.mark.parametrize("dim", [-1, 0, 1])
def test_swiglu_against_numpy_halves(dim):
    x = rand(4, 6, 8, seed=3)
    a, b = np.split(x.numpy(), 2, axis=dim)
    assert_close(lookup("npu_swiglu")(x, dim=dim), a * sigmoid(a) * b)


def test_rotary_mul_by_hand():
    x = torch.tensor([[[[1.0, 2.0, 3.0, 4.0]]]], dtype=torch.float64)
    ones = torch.ones_like(x)
    # half: rotate = (-3, -4, 1, 2), so out = x + rotate
    assert_close(lookup("npu_rotary_mul")(x, ones, ones), [[[[-2.0, -2.0, 4.0, 6.0]]]])
    # interleave: rotate = (-2, 1, -4, 3)
    assert_close(lookup("npu_rotary_mul")(x, ones, ones, rotary_mode="interleave"),
                 [[[[-1.0, 3.0, -1.0, 7.0]]]])


def rotate_by_index(x, mode):
    """Rotation written element by element from the documented pairing."""
    d = x.shape[-1]
    out = np.empty_like(x)
    for i in range(d):
        if mode == "half":
            out[..., i] = -x[..., i + d // 2] if i < d // 2 else x[..., i - d // 2]
        else:
            out[..., i] = -x[..., i + 1] if i % 2 == 0 else x[..., i - 1]
    return out


@pytest.mark.parametrize("mode", ["half", "interleave"])
@pytest.mark.parametrize("r_shape", [(1, 1, 5, 8), (2, 1, 5, 8), (2, 3, 5, 8)])
def test_rotary_mul_against_elementwise_rotation(mode, r_shape):
    x, r1, r2 = rand(2, 3, 5, 8, seed=4), rand(*r_shape, seed=5), rand(*r_shape, seed=6)
    expected = r1.numpy() * x.numpy() + r2.numpy() * rotate_by_index(x.numpy(), mode)
    assert_close(lookup("npu_rotary_mul")(x, r1, r2, rotary_mode=mode), expected)


def test_rotary_mul_rejects_an_unmodelled_mode():
    x = rand(1, 1, 2, 4)
    with pytest.raises(ReferenceUnsupported, match="quarter"):
        lookup("npu_rotary_mul")(x, x, x, rotary_mode="quarter")


# ---------------------------------------------------------------------------
# Softmax-like and layout ops
# ---------------------------------------------------------------------------

def test_scaled_masked_softmax_by_hand():
    x = torch.tensor([[1.0, 2.0]], dtype=torch.float64)
    op = lookup("npu_scaled_masked_softmax")
    # softmax(2, 4) = (1 / (1 + e^2), e^2 / (1 + e^2)) = (0.1192029, 0.8807971)
    assert_close(op(x, torch.tensor([[False, False]]), scale=2.0), [[0.1192029, 0.8807971]],
                 atol=1e-7)
    assert_close(op(x, torch.tensor([[False, True]]), scale=2.0), [[1.0, 0.0]])


def test_scaled_masked_softmax_against_numpy():
    x = rand(2, 3, 4, 5, seed=7)
    mask = rand(1, 3, 4, 5, seed=8) > 0.5
    mask[..., 0] = False  # keep every row partly visible
    scaled = np.where(mask.numpy(), -np.inf, 0.7 * x.numpy())
    expected = np.exp(scaled - scaled.max(-1, keepdims=True))
    expected /= expected.sum(-1, keepdims=True)
    assert_close(lookup("npu_scaled_masked_softmax")(x, mask, 0.7), expected)


def test_scaled_masked_softmax_fixed_triu_mask_ignores_the_given_mask():
    x = rand(1, 2, 4, 4, seed=9)
    op = lookup("npu_scaled_masked_softmax")
    causal = torch.ones(4, 4, dtype=torch.bool).triu(1).expand(1, 2, 4, 4)
    unmasked = torch.zeros(1, 2, 4, 4, dtype=torch.bool)
    assert_close(op(x, unmasked, 1.5, True), op(x, causal, 1.5, False))


def test_confusion_transpose_by_hand():
    x = torch.arange(6.0, dtype=torch.float64).reshape(2, 3)
    op = lookup("npu_confusion_transpose")
    # transpose first: x^T = [[0, 3], [1, 4], [2, 5]], already of shape (3, 2)
    assert_close(op(x, [1, 0], [3, 2], True), [[0, 3], [1, 4], [2, 5]])
    # reshape first: [[0, 1], [2, 3], [4, 5]], then transposed
    assert_close(op(x, [1, 0], [3, 2], False), [[0, 2, 4], [1, 3, 5]])


def test_confusion_transpose_against_numpy():
    x = rand(2, 6, 12, seed=10)
    op = lookup("npu_confusion_transpose")
    heads = x.numpy().reshape(2, 6, 3, 4).transpose(0, 2, 1, 3)
    assert_close(op(x, [0, 2, 1, 3], [2, 6, 3, 4], False), heads)
    merged = heads.transpose(0, 2, 1, 3).reshape(2, 6, 12)
    assert_close(op(torch.from_numpy(heads.copy()), [0, 2, 1, 3], [2, 6, 12], True), merged)


def test_linear_by_hand_and_against_numpy():
    x = torch.tensor([[1.0, 2.0]], dtype=torch.float64)
    w = torch.tensor([[3.0, 4.0], [5.0, 6.0]], dtype=torch.float64)
    # (1*3 + 2*4 + 1, 1*5 + 2*6 + 1) = (12, 18)
    assert_close(lookup("npu_linear")(x, w, torch.ones(2, dtype=torch.float64)), [[12.0, 18.0]])
    x, w, b = rand(3, 4, 5, seed=11), rand(6, 5, seed=12), rand(6, seed=13)
    assert_close(lookup("npu_linear")(x, w, b), x.numpy() @ w.numpy().T + b.numpy())
    assert_close(lookup("npu_linear")(x, w), x.numpy() @ w.numpy().T)


def test_sort_v2_by_hand():
    x = torch.tensor([[3.0, 1.0, 2.0]], dtype=torch.float64)
    assert_close(lookup("npu_sort_v2")(x), [[1.0, 2.0, 3.0]])
    assert_close(lookup("npu_sort_v2")(x, descending=True), [[3.0, 2.0, 1.0]])


@FAST
@given(st.lists(st.floats(-1e6, 1e6), min_size=1, max_size=20), st.booleans())
def test_sort_v2_against_python_sorted(values, descending):
    out = lookup("npu_sort_v2")(torch.tensor(values, dtype=torch.float64), descending=descending)
    assert out.tolist() == sorted(values, reverse=descending)


def test_moe_gating_top_k_softmax_by_hand():
    # softmax(log(1, 2, 1)) = (0.25, 0.5, 0.25); top-2 = 0.5 (expert 1), 0.25 (expert 0, the
    # lower index of the tie); row_idx = arange(4).reshape(2, 2).T = [[0, 2], [1, 3]]
    x = torch.log(torch.tensor([[1.0, 2.0, 1.0], [1.0, 2.0, 1.0]], dtype=torch.float64))
    y, expert_idx, row_idx = lookup("npu_moe_gating_top_k_softmax")(x, None, k=2)
    assert_close(y, [[0.5, 0.25], [0.5, 0.25]])
    assert expert_idx.tolist() == [[1, 0], [1, 0]] and expert_idx.dtype == torch.int32
    assert row_idx.tolist() == [[0, 2], [1, 3]] and row_idx.dtype == torch.int32


def test_moe_gating_marks_finished_rows_with_the_expert_count():
    x = rand(3, 5, seed=14)
    finished = torch.tensor([False, True, False])
    _, expert_idx, _ = lookup("npu_moe_gating_top_k_softmax")(x, finished, k=2)
    assert expert_idx[1].tolist() == [5, 5]
    assert (expert_idx[[0, 2]] < 5).all()


@pytest.mark.parametrize("shape", [(7, 6), (2, 3, 6)])
def test_moe_gating_against_numpy_argsort(shape):
    x, k = rand(*shape, seed=15), 3
    probs = np.exp(x.numpy()) / np.exp(x.numpy()).sum(-1, keepdims=True)
    order = np.argsort(-probs, axis=-1, kind="stable")[..., :k]
    rows = int(np.prod(shape[:-1]))
    y, expert_idx, row_idx = lookup("npu_moe_gating_top_k_softmax")(x, k=k)
    assert_close(y, np.take_along_axis(probs, order, -1))
    assert (expert_idx.numpy() == order).all()
    flat_row_idx = row_idx.numpy().reshape(rows, k)
    for r in range(rows):  # the j-th choice of row r is written at j * rows + r
        assert flat_row_idx[r].tolist() == [j * rows + r for j in range(k)]


# ---------------------------------------------------------------------------
# Normalisations
# ---------------------------------------------------------------------------

def test_rms_norm_by_hand():
    # mean(3^2, 4^2) = 12.5; rstd = 1 / sqrt(12.5) = 0.2828427; y = (3, 4 * 2) * rstd
    y, rstd = lookup("npu_rms_norm")(torch.tensor([[3.0, 4.0]], dtype=torch.float64),
                                     torch.tensor([1.0, 2.0], dtype=torch.float64), epsilon=0.0)
    assert_close(y, [[0.8485281, 2.2627417]], atol=1e-7)
    assert_close(rstd, [[0.2828427]], atol=1e-7)


@FAST
@given(st.integers(1, 3), st.integers(1, 4), st.integers(1, 6), st.booleans(),
       st.floats(1e-8, 1e-2), st.integers(0, 2**16))
def test_rms_norm_against_the_formula(batch, seq, hidden, two_dim_gamma, epsilon, seed):
    x = rand(batch, seq, hidden, seed=seed)
    gamma = rand(seq, hidden, seed=seed + 1) if two_dim_gamma else rand(hidden, seed=seed + 1)
    axes = (-2, -1) if two_dim_gamma else (-1,)
    xn = x.numpy()
    expected_rstd = 1 / np.sqrt((xn ** 2).mean(axis=axes, keepdims=True) + epsilon)
    y, rstd = lookup("npu_rms_norm")(x, gamma, epsilon=epsilon)
    assert_close(y, xn * expected_rstd * gamma.numpy())
    assert rstd.dtype == torch.float32 and rstd.shape == expected_rstd.shape
    assert_close(rstd, expected_rstd, rtol=1e-6)


def test_layer_norm_eval_by_hand():
    # mean 2, variance 1: normalised (-1, 1), times 2 plus 1 = (-1, 3)
    x = torch.tensor([[1.0, 3.0]], dtype=torch.float64)
    two = torch.full((2,), 2.0, dtype=torch.float64)
    out = lookup("npu_layer_norm_eval")(x, [2], two, torch.ones(2, dtype=torch.float64), 0.0)
    assert_close(out, [[-1.0, 3.0]])


@pytest.mark.parametrize("affine", [True, False])
def test_layer_norm_eval_against_numpy(affine):
    x, w, b = rand(3, 4, 5, seed=16), rand(4, 5, seed=17), rand(4, 5, seed=18)
    xn = x.numpy()
    mean = xn.mean(axis=(-2, -1), keepdims=True)
    expected = (xn - mean) / np.sqrt(xn.var(axis=(-2, -1), keepdims=True) + 1e-3)
    if affine:
        expected = expected * w.numpy() + b.numpy()
        out = lookup("npu_layer_norm_eval")(x, (4, 5), w, b, eps=1e-3)
    else:
        out = lookup("npu_layer_norm_eval")(x, (4, 5), eps=1e-3)
    assert_close(out, expected)


def test_group_norm_silu_by_hand():
    # one group over (1, 3): mean 2, rstd 1, normalised (-1, 1), silu = (-0.2689414, 0.7310586)
    x = torch.tensor([[[1.0], [3.0]]], dtype=torch.float64)
    out, mean, rstd = lookup("npu_group_norm_silu")(x, None, None, 1, eps=0.0)
    assert_close(out, [[[-0.2689414], [0.7310586]]], atol=1e-7)
    assert_close(mean, [[2.0]])
    assert_close(rstd, [[1.0]])


def group_norm_loops(x, weight, bias, group, eps):
    n, c = x.shape[:2]
    per_group = c // group
    out, mean, rstd = np.empty_like(x), np.empty((n, group)), np.empty((n, group))
    for i in range(n):
        for g in range(group):
            block = x[i, g * per_group:(g + 1) * per_group]
            mean[i, g], rstd[i, g] = block.mean(), 1 / np.sqrt(block.var() + eps)
            for ch in range(g * per_group, (g + 1) * per_group):
                normed = (x[i, ch] - mean[i, g]) * rstd[i, g] * weight[ch] + bias[ch]
                out[i, ch] = normed * sigmoid(normed)
    return out, mean, rstd


@pytest.mark.parametrize("shape, group", [((2, 6, 3, 4), 3), ((3, 4), 2), ((1, 8, 5), 8)])
def test_group_norm_silu_against_loops(shape, group):
    x, w, b = rand(*shape, seed=19), rand(shape[1], seed=20), rand(shape[1], seed=21)
    expected = group_norm_loops(x.numpy(), w.numpy(), b.numpy(), group, 1e-5)
    actual = lookup("npu_group_norm_silu")(x, w, b, group)
    for got, want in zip(actual, expected):
        assert got.dtype == torch.float64
        assert_close(got, want)


# ---------------------------------------------------------------------------
# Optimisers
# ---------------------------------------------------------------------------

def adam_inputs(seed):
    var, m, grad = rand(3, 4, seed=seed), rand(3, 4, seed=seed + 1), rand(3, 4, seed=seed + 2)
    v = rand(3, 4, seed=seed + 3).abs()
    return var, m, v, grad


def test_apply_adam_by_hand():
    # m = 0.5, v = 0.5, lr_t = sqrt(0.5) / 0.5 = 1.4142136; var = 1 - lr_t * 0.5 / sqrt(0.5) = 0
    var, m, v = (torch.tensor([x], dtype=torch.float64) for x in (1.0, 0.0, 0.0))
    grad = torch.ones(1, dtype=torch.float64)
    var_t, m_t, v_t = lookup("npu_apply_adam")(0.5, 0.5, 1.0, 0.5, 0.5, 0.0, grad, False, False,
                                               out=(var, m, v))
    assert_close(var_t, [0.0], atol=1e-15)
    assert_close(m_t, [0.5])
    assert_close(v_t, [0.5])


def test_apply_adam_equals_torch_adam_when_epsilon_is_zero():
    # TF's ApplyAdam folds sqrt(1 - beta2^t) into lr; with eps = 0 that is torch.optim.Adam.
    var, m, v, grad = adam_inputs(22)
    step, beta1, beta2, lr = 3, 0.9, 0.99, 0.01
    param = var.clone().requires_grad_()
    adam = torch.optim.Adam([param], lr=lr, betas=(beta1, beta2), eps=0.0, foreach=False)
    adam.state[param] = {"step": torch.tensor(float(step - 1)), "exp_avg": m.clone(),
                         "exp_avg_sq": v.clone()}
    param.grad = grad.clone()
    adam.step()
    var_t, m_t, v_t = lookup("npu_apply_adam")(beta1 ** step, beta2 ** step, lr, beta1, beta2,
                                               0.0, grad, False, False, out=(var, m, v))
    assert_close(var_t, param.detach())
    assert_close(m_t, adam.state[param]["exp_avg"])
    assert_close(v_t, adam.state[param]["exp_avg_sq"])


def test_apply_adam_nesterov_against_numpy():
    var, m, v, grad = (t.numpy() for t in adam_inputs(23))
    b1, b2, b1p, b2p, lr, eps = 0.8, 0.95, 0.8 ** 2, 0.95 ** 2, 0.1, 1e-3
    m_t = b1 * m + (1 - b1) * grad
    v_t = b2 * v + (1 - b2) * grad ** 2
    lr_t = lr * np.sqrt(1 - b2p) / (1 - b1p)
    expected = var - lr_t * (b1 * m_t + (1 - b1) * grad) / (np.sqrt(v_t) + eps)
    out = tuple(torch.from_numpy(a) for a in (var, m, v))
    var_t, _, _ = lookup("npu_apply_adam")(b1p, b2p, lr, b1, b2, eps, torch.from_numpy(grad),
                                           False, True, out=out)
    assert_close(var_t, expected)


def test_apply_adam_w_by_hand():
    # beta*_power = 1 is beta^0, so t = 1: m = v = 0.5, bias-corrected both to 1.
    var, m, v = (torch.tensor([x], dtype=torch.float64) for x in (1.0, 0.0, 0.0))
    grad = torch.ones(1, dtype=torch.float64)
    op = lookup("npu_apply_adam_w")
    # var * (1 - 1 * 0.1) - 1 * 1 / (sqrt(1) + 0) = -0.1
    var_t, m_t, v_t = op(1.0, 1.0, 1.0, 0.1, 0.5, 0.5, 0.0, grad, None, False, False,
                         out=(var, m, v))
    assert_close(var_t, [-0.1])
    assert_close(m_t, [0.5])
    assert_close(v_t, [0.5])
    # amsgrad with running max 2: v_hat = max(2, 0.5) / 0.5 = 4, var = 1 - 1 / 2 = 0.5;
    # v itself stays 0.5
    max_v = torch.tensor([2.0], dtype=torch.float64)
    var_t, _, v_t = op(1.0, 1.0, 1.0, 0.0, 0.5, 0.5, 0.0, grad, max_v, True, False,
                       out=(var, m, v))
    assert_close(var_t, [0.5])
    assert_close(v_t, [0.5])


@pytest.mark.parametrize("amsgrad", [False, True])
@pytest.mark.parametrize("maximize", [False, True])
def test_apply_adam_w_equals_one_torch_adamw_step(amsgrad, maximize):
    var, m, v, grad = adam_inputs(24)
    max_v = v + rand(3, 4, seed=28).abs() * (rand(3, 4, seed=29) > 0)
    step, beta1, beta2, lr, decay, eps = 4, 0.9, 0.999, 1e-2, 0.05, 1e-8
    param = var.clone().requires_grad_()
    adamw = torch.optim.AdamW([param], lr=lr, betas=(beta1, beta2), eps=eps, weight_decay=decay,
                              amsgrad=amsgrad, maximize=maximize, foreach=False)
    state = {"step": torch.tensor(float(step - 1)), "exp_avg": m.clone(), "exp_avg_sq": v.clone()}
    if amsgrad:
        state["max_exp_avg_sq"] = max_v.clone()
    adamw.state[param] = state
    param.grad = grad.clone()
    adamw.step()
    var_t, m_t, v_t = lookup("npu_apply_adam_w")(
        beta1 ** (step - 1), beta2 ** (step - 1), lr, decay, beta1, beta2, eps, grad,
        max_v if amsgrad else None, amsgrad, maximize, out=(var, m, v))
    assert_close(var_t, param.detach())
    assert_close(m_t, adamw.state[param]["exp_avg"])
    assert_close(v_t, adamw.state[param]["exp_avg_sq"])


@pytest.mark.parametrize("op_name", ["npu_apply_adam", "npu_apply_adam_w"])
def test_optimisers_leave_their_state_untouched_and_need_out(op_name):
    var, m, v, grad = adam_inputs(25)
    before = [t.clone() for t in (var, m, v)]
    scalars = (0.9, 0.99, 0.1, 0.9, 0.99, 1e-8) if op_name == "npu_apply_adam" else \
        (0.9, 0.99, 0.1, 0.01, 0.9, 0.99, 1e-8)
    flags = (False, False) if op_name == "npu_apply_adam" else (None, False, False)
    lookup(op_name)(*scalars, grad, *flags, out=(var, m, v))
    for now, then in zip((var, m, v), before):
        assert torch.equal(now, then)
    with pytest.raises(TypeError, match="out="):
        lookup(op_name)(*scalars, grad, *flags)


def test_apply_adam_takes_scalars_as_recorded_tensors_or_numpy():
    var, m, v, grad = adam_inputs(26)
    f64 = torch.float64
    as_floats = lookup("npu_apply_adam")(0.9, 0.99, 0.1, 0.9, 0.99, 1e-8, grad, False, False,
                                         out=(var, m, v))
    as_recorded = lookup("npu_apply_adam")(
        torch.tensor(0.9, dtype=f64), np.array([0.99]), torch.tensor([0.1], dtype=f64),
        np.float64(0.9), 0.99, 1e-8, grad, False, False, out=(var, m, v))
    for a, b in zip(as_floats, as_recorded):
        assert a.dtype == torch.float64 and torch.equal(a, b)


# ---------------------------------------------------------------------------
# npu_fusion_attention
# ---------------------------------------------------------------------------

FA = "npu_fusion_attention"
COMPRESSED_CAUSAL = torch.ones(2048, 2048, dtype=torch.bool).triu(1)  # what modes 2-4 are given


def attention_loops(q, k, v, scale, masked=None, pse=None):
    """Attention head by head and row by row in numpy.

    q [B, N, Sq, D], k/v [B, Nkv, Skv, D] with query head h reading kv head
    h // (N / Nkv); masked broadcastable to [B, N, Sq, Skv]; pse [*, *, Sq|1, Skv].
    Returns out and the row max / row sum of exp.
    """
    b_size, heads, sq, _ = q.shape
    skv, group = k.shape[2], heads // k.shape[1]
    full = (b_size, heads, sq, skv)
    masked = np.broadcast_to(np.zeros(full, bool) if masked is None else masked, full)
    pse = np.broadcast_to(np.zeros(full) if pse is None else pse, full)
    out = np.zeros((b_size, heads, sq, v.shape[-1]))
    row_max, row_sum = np.full((b_size, heads, sq), -np.inf), np.zeros((b_size, heads, sq))
    for b in range(b_size):
        for h in range(heads):
            kv = h // group
            for i in range(sq):
                visible = ~masked[b, h, i]
                if not visible.any():
                    continue
                scores = (scale * (k[b, kv] @ q[b, h, i] + pse[b, h, i]))[visible]
                e = np.exp(scores - scores.max())
                row_max[b, h, i], row_sum[b, h, i] = scores.max(), e.sum()
                out[b, h, i] = (e / e.sum()) @ v[b, kv][visible]
    return out, row_max, row_sum


def from_bnsd(x, layout):
    b, n, s, d = x.shape
    return {"BNSD": x, "BSND": x.transpose(0, 2, 1, 3),
            "BSH": x.transpose(0, 2, 1, 3).reshape(b, s, n * d),
            "SBH": x.transpose(2, 0, 1, 3).reshape(s, b, n * d)}[layout]


def to_bnsd(x, layout, heads):
    if layout == "BNSD":
        return x
    if layout == "BSND":
        return x.transpose(0, 2, 1, 3)
    if layout == "BSH":
        b, s, h = x.shape
        return x.reshape(b, s, heads, h // heads).transpose(0, 2, 1, 3)
    s, b, h = x.shape
    return x.reshape(s, b, heads, h // heads).transpose(1, 2, 0, 3)


def qkv(b, n, n_kv, sq, skv, d, dv=None, seed=0):
    return (rand(b, n, sq, d, seed=seed), rand(b, n_kv, skv, d, seed=seed + 1),
            rand(b, n_kv, skv, dv or d, seed=seed + 2))


def explicit_mask(mode, sq, skv, pre, nxt, atten=None, prefix=None):
    """The masked-out positions of each sparse_mode, drawn with triu/tril offsets."""
    ones = np.ones((sq, skv), dtype=bool)
    if mode == 0:
        return atten | np.triu(ones, nxt + 1) | np.tril(ones, -pre - 1)
    if mode == 1:
        return atten
    if mode == 2:
        return np.triu(ones, 1)
    if mode == 3:
        return np.triu(ones, skv - sq + 1)
    if mode == 4:
        return np.triu(ones, skv - sq + nxt + 1) | np.tril(ones, skv - sq - pre - 1)
    per_batch = np.stack([np.triu(ones, skv - sq + 1) for _ in prefix])[:, None]  # mode 6
    for b, length in enumerate(prefix):
        per_batch[b, 0, :, :length] = False
    return per_batch


def test_fusion_attention_by_hand():
    # scores (1, 0) -> softmax (e, 1) / (e + 1) = (0.7310586, 0.2689414); v = identity
    q = torch.tensor([[[[1.0, 0.0]]]], dtype=torch.float64)
    kv = torch.eye(2, dtype=torch.float64).reshape(1, 1, 2, 2)
    out, softmax_max, softmax_sum, softmax_out, seed, offset, numels = lookup(FA)(
        q, kv, kv, 1, "BNSD")
    assert_close(out, [[[[0.7310586, 0.2689414]]]], atol=1e-7)
    assert_close(softmax_max, np.ones((1, 1, 1, 8)))
    assert_close(softmax_sum, np.full((1, 1, 1, 8), 1 + 1 / E), rtol=1e-7)  # e^0 + e^-1
    assert softmax_out.numel() == 0 and (seed, offset, numels) == (0, 0, 0)


@pytest.mark.parametrize("layout", ["BNSD", "BSND", "BSH", "SBH"])
@pytest.mark.parametrize("n, n_kv", [(2, 2), (4, 2), (3, 1)])
def test_fusion_attention_layouts_and_gqa_against_loops(layout, n, n_kv):
    q, k, v = qkv(2, n, n_kv, 3, 5, 4, seed=30)
    scale = 0.5
    expected, _, _ = attention_loops(q.numpy(), k.numpy(), v.numpy(), scale)
    args = [torch.from_numpy(np.ascontiguousarray(from_bnsd(t.numpy(), layout))) for t in (q, k, v)]
    out = lookup(FA)(*args, n, layout, scale=scale)[0]
    assert_close(to_bnsd(out.numpy(), layout, n), expected)


def test_fusion_attention_gqa_equals_repeated_kv_heads():
    q, k, v = qkv(1, 6, 2, 4, 4, 3, seed=31)
    grouped = lookup(FA)(q, k, v, 6, "BNSD", scale=0.3)[0]
    repeated = lookup(FA)(q, k.repeat_interleave(3, dim=1), v.repeat_interleave(3, dim=1), 6,
                          "BNSD", scale=0.3)[0]
    assert_close(grouped, repeated.numpy())


def test_fusion_attention_value_head_dim_may_be_smaller():
    q, k, v = qkv(1, 2, 2, 3, 4, 6, dv=2, seed=32)
    expected, _, _ = attention_loops(q.numpy(), k.numpy(), v.numpy(), 0.4)
    bsh = [torch.from_numpy(np.ascontiguousarray(from_bnsd(t.numpy(), "BSH"))) for t in (q, k, v)]
    out = lookup(FA)(*bsh, 2, "BSH", scale=0.4)[0]
    assert out.shape == (1, 3, 4)
    assert_close(to_bnsd(out.numpy(), "BSH", 2), expected)


@pytest.mark.parametrize("pse_shape", [(2, 2, 3, 5), (2, 2, 1, 5), (1, 2, 3, 5)])
def test_fusion_attention_pse_is_added_before_scaling(pse_shape):
    q, k, v = qkv(2, 2, 2, 3, 5, 4, seed=33)
    pse = rand(*pse_shape, seed=34)
    expected, _, _ = attention_loops(q.numpy(), k.numpy(), v.numpy(), 0.25, pse=pse.numpy())
    assert_close(lookup(FA)(q, k, v, 2, "BNSD", pse=pse, scale=0.25)[0], expected)


def test_fusion_attention_softmax_statistics():
    q, k, v = qkv(2, 3, 3, 4, 6, 5, seed=35)
    masked = rand(2, 1, 4, 6, seed=36) > 0.3
    _, row_max, row_sum = attention_loops(q.numpy(), k.numpy(), v.numpy(), 0.7, masked.numpy())
    _, softmax_max, softmax_sum = lookup(FA)(q, k, v, 3, "BNSD", atten_mask=masked, scale=0.7,
                                             sparse_mode=1)[:3]
    for stat, expected in ((softmax_max, row_max), (softmax_sum, row_sum)):
        assert stat.dtype == torch.float32 and stat.shape == (2, 3, 4, 8)
        assert_close(stat, np.repeat(expected[..., None], 8, axis=-1), rtol=1e-6)


def test_fusion_attention_row_seeing_no_key_is_zero():
    q, k, v = qkv(1, 1, 1, 2, 2, 2, seed=37)
    masked = torch.tensor([[True, True], [False, True]])
    out, softmax_max, softmax_sum = lookup(FA)(q, k, v, 1, "BNSD", atten_mask=masked,
                                               sparse_mode=1)[:3]
    assert_close(out[0, 0, 0], [0.0, 0.0])
    assert_close(out[0, 0, 1], v[0, 0, 0].numpy())
    assert softmax_max[0, 0, 0, 0] == -math.inf and softmax_sum[0, 0, 0, 0] == 0


def test_fusion_attention_without_atten_mask_ignores_the_sparse_arguments():
    q, k, v = qkv(1, 2, 2, 4, 4, 3, seed=38)
    full = lookup(FA)(q, k, v, 2, "BNSD")[0]
    for mode in (0, 2, 3, 4):
        sparse = lookup(FA)(q, k, v, 2, "BNSD", sparse_mode=mode, pre_tockens=0,
                            next_tockens=0)[0]
        assert_close(sparse, full.numpy())


@FAST
@given(mode=st.sampled_from([0, 1, 2, 3, 4]), sq=st.integers(1, 5), skv=st.integers(1, 5),
       pre=st.integers(-3, 6), nxt=st.integers(-3, 6), seed=st.integers(0, 2**16))
def test_fusion_attention_sparse_modes_against_explicit_masks(mode, sq, skv, pre, nxt, seed):
    q, k, v = qkv(1, 2, 1, sq, skv, 3, seed=seed)
    atten = (rand(sq, skv, seed=seed + 3) > 0.5).numpy()
    given_mask = torch.from_numpy(atten) if mode in (0, 1) else COMPRESSED_CAUSAL
    masked = explicit_mask(mode, sq, skv, pre, nxt, atten)
    expected, _, _ = attention_loops(q.numpy(), k.numpy(), v.numpy(), 0.5, masked)
    out = lookup(FA)(q, k, v, 2, "BNSD", atten_mask=given_mask, scale=0.5, pre_tockens=pre,
                     next_tockens=nxt, sparse_mode=mode)[0]
    assert_close(out, expected)


def test_fusion_attention_sparse_mode_3_by_hand():
    # Sq = 2, Skv = 3, causal through the bottom-right corner: row 0 sees keys 0-1, row 1 all.
    q = torch.zeros(1, 1, 2, 1, dtype=torch.float64)  # equal scores: plain averages of v
    k = torch.zeros(1, 1, 3, 1, dtype=torch.float64)
    v = torch.tensor([[[[3.0], [6.0], [9.0]]]], dtype=torch.float64)
    out = lookup(FA)(q, k, v, 1, "BNSD", atten_mask=COMPRESSED_CAUSAL, sparse_mode=3)[0]
    assert_close(out, [[[[4.5], [6.0]]]])


def test_fusion_attention_prefix_modes_against_explicit_masks():
    q, k, v = qkv(2, 2, 2, 3, 5, 4, seed=39)
    prefix = [1, 4]
    masked = explicit_mask(6, 3, 5, 0, 0, prefix=prefix)
    expected, _, _ = attention_loops(q.numpy(), k.numpy(), v.numpy(), 0.5, masked)
    compressed = lookup(FA)(q, k, v, 2, "BNSD", atten_mask=COMPRESSED_CAUSAL, scale=0.5,
                            prefix=prefix, sparse_mode=6)[0]
    assert_close(compressed, expected)
    full_mask = lookup(FA)(q, k, v, 2, "BNSD", atten_mask=torch.from_numpy(masked), scale=0.5,
                           prefix=prefix, sparse_mode=5)[0]
    assert_close(full_mask, expected)


def tnd(x_bnsd_list):
    """Pack per-sequence [1, N, S, D] tensors into TND."""
    return torch.cat([x[0].transpose(0, 1) for x in x_bnsd_list])


def test_fusion_attention_tnd_against_loops_per_sequence():
    q_lens, kv_lens, n, n_kv, d = [2, 3, 1], [3, 1, 4], 4, 2, 3
    seqs = [qkv(1, n, n_kv, sq, skv, d, seed=40 + 3 * i)
            for i, (sq, skv) in enumerate(zip(q_lens, kv_lens))]
    packed = [tnd([s[j] for s in seqs]) for j in range(3)]
    out, softmax_max, _ = lookup(FA)(*packed, n, "TND", atten_mask=COMPRESSED_CAUSAL, scale=0.6,
                                     actual_seq_qlen=np.cumsum(q_lens).tolist(),
                                     actual_seq_kvlen=np.cumsum(kv_lens).tolist(),
                                     sparse_mode=3)[:3]
    assert out.shape == (6, n, d) and softmax_max.shape == (6, n, 8)
    start = 0
    for (q, k, v), sq, skv in zip(seqs, q_lens, kv_lens):
        masked = explicit_mask(3, sq, skv, 0, 0)
        expected, row_max, _ = attention_loops(q.numpy(), k.numpy(), v.numpy(), 0.6, masked)
        assert_close(out[start:start + sq], expected[0].transpose(1, 0, 2))
        assert_close(softmax_max[start:start + sq, :, 0], row_max[0].T, rtol=1e-6)
        start += sq


def test_fusion_attention_tnd_equals_bsnd_for_equal_lengths():
    q, k, v = qkv(3, 2, 1, 4, 4, 3, seed=50)
    bsnd = [t.transpose(1, 2) for t in (q, k, v)]
    expected = lookup(FA)(*bsnd, 2, "BSND", scale=0.5)[0]
    packed = [t.reshape(-1, *t.shape[2:]) for t in bsnd]
    out = lookup(FA)(*packed, 2, "TND", scale=0.5, actual_seq_qlen=[4, 8, 12],
                     actual_seq_kvlen=[4, 8, 12])[0]
    assert_close(out, expected.reshape(12, 2, 3).numpy())


def test_fusion_attention_tnd_trailing_batches_left_out_see_nothing():
    q, k, v = (rand(6, 1, 2, seed=51 + i) for i in range(3))
    out, softmax_max, softmax_sum = lookup(FA)(q, k, v, 1, "TND", actual_seq_qlen=[2, 4, 0],
                                               actual_seq_kvlen=[2, 4, 0])[:3]
    assert_close(out[4:], np.zeros((2, 1, 2)))
    assert (softmax_max[4:] == -math.inf).all() and (softmax_sum[4:] == 0).all()
    second = [t[2:4].transpose(0, 1).unsqueeze(0).numpy() for t in (q, k, v)]
    expected, _, _ = attention_loops(*second, 1.0)
    assert_close(out[2:4], expected[0].transpose(1, 0, 2))


def test_fusion_attention_tnd_empty_sequences():
    # lengths q (2, 0, 1), kv (2, 3, 0): batch 1 has no query, batch 2 no key
    q, k, v = rand(3, 1, 2, seed=54), rand(5, 1, 2, seed=55), rand(5, 1, 2, seed=56)
    out, softmax_max = lookup(FA)(q, k, v, 1, "TND", actual_seq_qlen=[2, 2, 3],
                                  actual_seq_kvlen=[2, 5, 5])[:2]
    first = [t[:2].transpose(0, 1).unsqueeze(0).numpy() for t in (q, k, v)]
    expected, _, _ = attention_loops(*first, 1.0)
    assert_close(out[:2], expected[0].transpose(1, 0, 2))
    assert_close(out[2], [[0.0, 0.0]])
    assert softmax_max[2, 0, 0] == -math.inf


@pytest.mark.parametrize("kwargs, message", [
    ({"keep_prob": 0.9}, "keep_prob"),
    ({"sparse_mode": 7, "atten_mask": COMPRESSED_CAUSAL}, "sparse_mode=7"),
    ({"padding_mask": torch.zeros(1)}, "padding_mask"),
    ({"pse": torch.zeros(1, 1, 1024, 3, dtype=torch.float64)}, "pse"),
])
def test_fusion_attention_unmodelled_features_raise(kwargs, message):
    q, k, v = qkv(1, 1, 1, 1100, 3, 2, seed=52)
    with pytest.raises(ReferenceUnsupported, match=message):
        lookup(FA)(q, k, v, 1, "BNSD", **kwargs)


def test_fusion_attention_computes_in_the_input_dtype():
    q, k, v = (t.float() for t in qkv(1, 2, 2, 3, 3, 4, seed=53))
    out, softmax_max = lookup(FA)(q, k, v, 2, "BNSD")[:2]
    assert out.dtype == torch.float32 and softmax_max.dtype == torch.float32


# ---------------------------------------------------------------------------
# Autograd
# ---------------------------------------------------------------------------

def leaf(*shape, seed, positive=False):
    t = rand(*shape, seed=seed)
    return (t.abs() + 0.5 if positive else t).requires_grad_()


GRADCHECKS = {
    "npu_fast_gelu": lambda: ((leaf(3, 4, seed=60),), {}),
    "npu_mish": lambda: ((leaf(3, 4, seed=61),), {}),
    "npu_swiglu": lambda: ((leaf(3, 4, seed=62),), {"dim": 0}),
    "npu_rotary_mul": lambda: ((leaf(1, 2, 3, 4, seed=63), leaf(1, 1, 3, 4, seed=64),
                                leaf(1, 1, 3, 4, seed=65)), {"rotary_mode": "interleave"}),
    "npu_scaled_masked_softmax": lambda: ((leaf(1, 2, 3, 4, seed=66),
                                           torch.eye(3, 4, dtype=torch.bool)), {"scale": 0.5}),
    "npu_confusion_transpose": lambda: ((leaf(2, 6, seed=67), [1, 0], [3, 4], False), {}),
    "npu_linear": lambda: ((leaf(2, 3, seed=68), leaf(4, 3, seed=69), leaf(4, seed=70)), {}),
    "npu_sort_v2": lambda: ((leaf(3, 5, seed=71),), {"descending": True}),
    "npu_moe_gating_top_k_softmax": lambda: ((leaf(4, 5, seed=72),), {"k": 2}),
    "npu_rms_norm": lambda: ((leaf(2, 3, 4, seed=73), leaf(4, seed=74)), {"epsilon": 1e-3}),
    "npu_layer_norm_eval": lambda: ((leaf(2, 5, seed=75), [5], leaf(5, seed=76),
                                     leaf(5, seed=77)), {}),
    "npu_group_norm_silu": lambda: ((leaf(2, 4, 3, seed=78), leaf(4, seed=79), leaf(4, seed=80),
                                     2), {}),
    "npu_fusion_attention": lambda: ((leaf(1, 3, 2, 2, seed=81), leaf(1, 4, 1, 2, seed=82),
                                      leaf(1, 4, 1, 2, seed=83), 2, "BSND"),
                                     {"pse": leaf(1, 2, 3, 4, seed=84), "scale": 0.7,
                                      "atten_mask": COMPRESSED_CAUSAL, "sparse_mode": 3}),
}


@pytest.mark.parametrize("op_name", sorted(GRADCHECKS))
def test_gradcheck(op_name):
    args, kwargs = GRADCHECKS[op_name]()
    candidates = (*args, *kwargs.values())
    inputs = [a for a in candidates if isinstance(a, torch.Tensor) and a.requires_grad]

    def first_output(*tensors):
        swap = dict(zip(map(id, inputs), tensors))
        call_args = [swap.get(id(a), a) for a in args]
        call_kwargs = {name: swap.get(id(a), a) for name, a in kwargs.items()}
        result = lookup(op_name)(*call_args, **call_kwargs)
        return result[0] if isinstance(result, tuple) else result

    assert torch.autograd.gradcheck(first_output, inputs)


# ---------------------------------------------------------------------------
# LLM and MoE operators (npu_llm_reference, issue 30)
# ---------------------------------------------------------------------------

@FAST
@given(st.integers(1, 4), st.integers(1, 8), st.floats(1e-8, 1e-2), st.integers(0, 2**16))
def test_add_rms_norm_is_rms_norm_of_the_sum(rows, hidden, epsilon, seed):
    x1, x2, gamma = rand(rows, hidden, seed=seed), rand(rows, hidden, seed=seed + 1), rand(hidden, seed=seed + 2)
    total = x1.numpy() + x2.numpy()
    expected_rstd = 1 / np.sqrt((total ** 2).mean(-1, keepdims=True) + epsilon)
    y, rstd, x = lookup("npu_add_rms_norm")(x1, x2, gamma, epsilon=epsilon)
    assert_close(x, total)
    assert_close(y, total * expected_rstd * gamma.numpy())
    assert rstd.dtype == torch.float32 and rstd.shape == (rows, 1)
    assert_close(rstd, expected_rstd, rtol=1e-6)


@pytest.mark.parametrize("approximate", ["none", "tanh"])
def test_gelu_against_its_formulas(approximate):
    x = rand(50, seed=30).numpy() * 3
    if approximate == "none":
        expected = np.array([v * (1 + math.erf(v / math.sqrt(2))) / 2 for v in x])
    else:
        expected = x * (1 + np.tanh(math.sqrt(2 / math.pi) * (x + 0.044715 * x ** 3))) / 2
    assert_close(lookup("npu_gelu")(torch.from_numpy(x), approximate=approximate), expected)
    with pytest.raises(ReferenceUnsupported, match="approximate='fast'"):
        lookup("npu_gelu")(torch.from_numpy(x), approximate="fast")


@pytest.mark.parametrize("mode", ["half", "interleave"])
def test_apply_rotary_pos_emb_rotates_query_and_key_as_complex_numbers(mode):
    # A rotation by angle t of the pair (a, b): (a cos t - b sin t, b cos t + a sin t); the pairs
    # are (x[i], x[i + D/2]) ('half') or (x[2i], x[2i + 1]) ('interleave').
    q, k, angles = rand(2, 3, 4, 8, seed=31), rand(2, 3, 1, 8, seed=32), rand(2, 3, 1, 4, seed=33)
    cos_half, sin_half = torch.cos(angles), torch.sin(angles)
    if mode == "half":
        cos, sin = torch.cat((cos_half, cos_half), -1), torch.cat((sin_half, sin_half), -1)
        pairs = lambda t: torch.complex(t[..., :4], t[..., 4:])  # noqa: E731
        back = lambda z: torch.cat((z.real, z.imag), -1)  # noqa: E731
    else:
        cos, sin = cos_half.repeat_interleave(2, -1), sin_half.repeat_interleave(2, -1)
        pairs = lambda t: torch.complex(t[..., 0::2], t[..., 1::2])  # noqa: E731
        back = lambda z: torch.stack((z.real, z.imag), -1).flatten(-2)  # noqa: E731
    turn = torch.polar(torch.ones_like(angles), angles)
    q_out, k_out = lookup("npu_apply_rotary_pos_emb")(q, k, cos, sin, layout="BSND", rotary_mode=mode)
    assert_close(q_out, back(pairs(q) * turn).numpy())
    assert_close(k_out, back(pairs(k) * turn).numpy())
    with pytest.raises(ReferenceUnsupported, match="rotary_mode='quarter'"):
        lookup("npu_apply_rotary_pos_emb")(q, k, cos, sin, rotary_mode="quarter")
    with pytest.raises(ReferenceUnsupported, match="layout='XYZ'"):
        lookup("npu_apply_rotary_pos_emb")(q, k, cos, sin, layout="XYZ")


def test_scatter_nd_update_against_a_loop():
    data, updates = rand(4, 3, 5, seed=34), rand(2, 5, seed=35)
    indices = torch.tensor([[3, 1], [0, 2]])
    expected = data.numpy().copy()
    for (i, j), row in zip(indices.tolist(), updates.numpy()):
        expected[i, j] = row
    out = lookup("npu_scatter_nd_update")(data, indices, updates)
    assert_close(out, expected)
    assert_close(data, rand(4, 3, 5, seed=34).numpy())  # the input is left as it was
    with pytest.raises(ReferenceUnsupported, match="indices with repeats"):
        lookup("npu_scatter_nd_update")(data, torch.tensor([[1, 1], [1, 1]]), updates)
    assert_close(lookup("npu_scatter_nd_update_")(data, indices, updates), expected)  # the in-place form


@FAST
@given(st.integers(1, 5), st.integers(1, 40), st.booleans(), st.integers(0, 2**16))
def test_dynamic_quant_per_token_against_numpy(rows, hidden, smooth, seed):
    x = rand(rows, hidden, seed=seed)
    smooth_scales = rand(hidden, seed=seed + 1).abs() + 0.5 if smooth else None
    xs = x.numpy() * (smooth_scales.numpy() if smooth else 1)
    scale = np.abs(xs).max(-1) / 127
    y, got_scale = lookup("npu_dynamic_quant")(x, smooth_scales=smooth_scales)
    assert y.dtype == torch.int8 and got_scale.dtype == torch.float32
    assert np.abs(y.numpy().astype(np.int64) - np.rint(xs / scale[:, None])).max() == 0
    assert (np.abs(y.numpy()) <= 127).all() and (np.abs(y.numpy()).max(-1) == 127).all()
    assert_close(got_scale, scale, rtol=1e-6)


def test_dynamic_quant_refuses_what_it_does_not_model():
    x = rand(2, 4, seed=36)
    with pytest.raises(ReferenceUnsupported, match="group_index"):
        lookup("npu_dynamic_quant")(x, group_index=torch.tensor([1, 2]))
    with pytest.raises(ReferenceUnsupported, match=r"dst_type=torch\.quint4x2"):
        lookup("npu_dynamic_quant")(x, dst_type=torch.quint4x2)


def grouped_by_one_hot(x, weights, biases, sizes):
    """y[r] = x[r] @ W[g(r)] + b[g(r)], the group of each row as a one-hot matrix: one einsum."""
    groups = torch.repeat_interleave(torch.arange(len(sizes)), torch.tensor(sizes))
    one_hot = F.one_hot(groups, len(sizes)).to(x.dtype)
    rows = x[: len(groups)]
    y = torch.einsum("rg,rk,gkn->rn", one_hot, rows, torch.stack(weights))
    return y + one_hot @ torch.stack(biases)


@FAST
@given(st.lists(st.integers(0, 4), min_size=2, max_size=4), st.integers(0, 3), st.integers(1, 5),
       st.sampled_from(["list", "cumsum", "sizes"]), st.integers(0, 2**16))
def test_grouped_matmul_one_x_split_by_group_list_against_one_einsum(sizes, padding, n, form, seed):
    k, groups = 6, len(sizes)
    x = rand(sum(sizes) + padding, k, seed=seed)
    weights = [rand(k, n, seed=seed + 1 + g) for g in range(groups)]
    biases = [rand(n, seed=seed + 20 + g) for g in range(groups)]
    ends = np.cumsum(sizes).tolist()
    group_list, group_list_type = {"list": (ends, 0), "cumsum": (torch.tensor(ends), 0),
                                   "sizes": (torch.tensor(sizes), 1)}[form]
    kwargs = {"bias": biases, "group_list": group_list, "group_type": 0, "group_list_type": group_list_type}
    expected = grouped_by_one_hot(x, weights, biases, sizes)
    (single,) = lookup("npu_grouped_matmul")([x], weights, split_item=3, **kwargs)
    assert single.shape == (x.shape[0], n)
    assert_close(single[: sum(sizes)], expected.numpy())
    assert (single[sum(sizes):] == 0).all()  # padding: zeros, and not compared
    from pytest_msprobe.frameworks.npu_ops import PADDED_ROWS
    written = PADDED_ROWS["npu_grouped_matmul"](([x], weights), {**kwargs, "split_item": 3})
    assert written == ({0: sum(sizes)} if padding else {})
    per_group = lookup("npu_grouped_matmul")([x], weights, split_item=0, **kwargs)
    assert [t.shape[0] for t in per_group] == sizes
    assert_close(torch.cat(per_group), expected.numpy())


def test_grouped_matmul_one_x_per_weight_and_a_3d_weight():
    xs = [rand(2, 4, seed=40), rand(3, 4, seed=41)]
    stacked = rand(2, 4, 5, seed=42)
    outs = lookup("npu_grouped_matmul")(xs, [stacked], split_item=0)
    for x, w, y in zip(xs, stacked, outs):
        assert_close(y, x.numpy() @ w.numpy())
    (joined,) = lookup("npu_grouped_matmul")(xs, list(stacked), bias=[rand(2, 5, seed=43)], split_item=2)
    bias = rand(2, 5, seed=43).numpy()
    assert_close(joined, np.concatenate([x.numpy() @ w.numpy() + b for x, w, b in zip(xs, stacked, bias)]))


@pytest.mark.parametrize("argument, value", [
    ("scale", [torch.ones(3)]), ("offset", [torch.ones(3)]), ("antiquant_scale", [torch.ones(3)]),
    ("antiquant_offset", [torch.ones(3)]), ("per_token_scale", [torch.ones(3)]),
    ("activation_input", [torch.ones(3)]), ("activation_quant_scale", [torch.ones(3)]),
    ("activation_quant_offset", [torch.ones(3)]), ("act_type", 1), ("group_type", 1),
    ("group_list_type", 2), ("output_dtype", torch.int8),
])
def test_grouped_matmul_refuses_by_name_what_it_does_not_model(argument, value):
    x, weights = rand(4, 3, seed=44), [rand(3, 2, seed=45), rand(3, 2, seed=46)]
    kwargs = {"group_list": torch.tensor([1, 4]), "split_item": 3, argument: value}
    with pytest.raises(ReferenceUnsupported, match=f"npu_grouped_matmul: {argument}"):
        lookup("npu_grouped_matmul")([x], weights, **kwargs)


def test_grouped_matmul_tuning_config_changes_nothing():
    x, weights = rand(4, 3, seed=47), [rand(3, 2, seed=48), rand(3, 2, seed=49)]
    plain = lookup("npu_grouped_matmul")([x], weights, group_list=[1, 4], split_item=3)
    tuned = lookup("npu_grouped_matmul")([x], weights, group_list=[1, 4], split_item=3, tuning_config=[2])
    assert torch.equal(plain[0], tuned[0])


def test_moe_init_routing_as_the_docs_example():
    # The op page's example: experts [[1, 2], [0, 1], [0, 2]], row_idx [[0, 3], [1, 4], [2, 5]].
    x = torch.tensor([[0.1] * 4, [0.2] * 4, [0.3] * 4], dtype=torch.float64)
    row_idx = torch.tensor([[0, 3], [1, 4], [2, 5]], dtype=torch.int32)
    expert_idx = torch.tensor([[1, 2], [0, 1], [0, 2]], dtype=torch.int32)
    expanded_x, expanded_row_idx, expanded_expert_idx = lookup("npu_moe_init_routing")(x, row_idx, expert_idx, 3)
    assert expanded_expert_idx.tolist() == [0, 0, 1, 1, 2, 2] and expanded_expert_idx.dtype == torch.int32
    assert expanded_row_idx.tolist() == [2, 0, 1, 4, 3, 5] and expanded_row_idx.dtype == torch.int32
    assert_close(expanded_x[:, 0], [0.2, 0.3, 0.1, 0.2, 0.1, 0.3])


@FAST
@given(st.integers(1, 6), st.integers(1, 3), st.integers(1, 5), st.integers(1, 8), st.integers(0, 2**16))
def test_moe_init_routing_against_a_loop_over_experts(rows, k, experts, active_num, seed):
    generator = torch.Generator().manual_seed(seed)
    expert_idx = torch.randint(0, experts, (rows, k), generator=generator, dtype=torch.int32)
    row_idx = torch.arange(rows * k, dtype=torch.int32).reshape(k, rows).t()
    x = rand(rows, 3, seed=seed)
    expanded_x, expanded_row_idx, expanded_expert_idx = lookup("npu_moe_init_routing")(
        x, row_idx, expert_idx, active_num)
    # Expert by expert, each expert's (row, j) in row-major order; j * rows + row is where each goes from.
    order = [(r, j) for e in range(experts) for r in range(rows) for j in range(k) if expert_idx[r, j] == e]
    assert expanded_expert_idx.tolist() == [int(expert_idx[r, j]) for r, j in order]
    for position, (r, j) in enumerate(order):
        assert expanded_row_idx[j * rows + r] == position
    kept = order[: min(active_num, rows) * k]
    assert_close(expanded_x, x.numpy()[[r for r, _ in kept]])


@pytest.mark.parametrize("drop_pad_mode", [0, 1, 2, 3])
def test_moe_finalize_routing_against_a_loop(drop_pad_mode):
    rows, k, hidden, experts = 5, 2, 3, 4
    expanded = rand(rows * k, hidden, seed=50) if drop_pad_mode in (0, 2) else rand(experts, 3, hidden, seed=50)
    skip1, skip2, bias, scales = (rand(rows, hidden, seed=51), rand(rows, hidden, seed=52),
                                  rand(experts, hidden, seed=53), rand(rows, k, seed=54))
    generator = torch.Generator().manual_seed(55)
    dst = torch.randperm(rows * k, generator=generator).to(torch.int32)
    if drop_pad_mode in (1, 3):
        dst[3] = -1  # a dropped token
    expert = torch.randint(0, experts, (rows, k), generator=generator, dtype=torch.int32)
    table = expanded.numpy().reshape(-1, hidden)
    expected = skip1.numpy() + skip2.numpy()
    for i in range(rows):
        for j in range(k):
            d = int(dst[j * rows + i] if drop_pad_mode in (0, 1) else dst[i * k + j])
            value = np.zeros(hidden) if d == -1 else table[d]
            expected[i] += scales[i, j].item() * (value + bias.numpy()[expert[i, j]])
    out = lookup("npu_moe_finalize_routing")(expanded, skip1, skip2, bias, scales, dst, expert, drop_pad_mode)
    assert_close(out, expected)
    no_scales = lookup("npu_moe_finalize_routing")(expanded, None, None, None, None, dst, None, drop_pad_mode, k=k)
    assert no_scales.shape == (rows, hidden)


@FAST
@given(st.lists(st.integers(0, 9), max_size=20), st.integers(1, 12))
def test_moe_compute_expert_tokens_is_the_cumulative_count(experts, num_expert):
    sorted_experts = torch.tensor(sorted(experts), dtype=torch.int32)
    counts = np.bincount(np.array(experts, dtype=np.int64), minlength=max(num_expert, 10))[:num_expert]
    out = lookup("npu_moe_compute_expert_tokens")(sorted_experts, num_expert)
    assert out.dtype == torch.int32 and out.tolist() == np.cumsum(counts).tolist()


def test_the_moe_path_from_gating_to_finalize_is_a_dense_mixture_of_experts():
    # gating -> init_routing -> compute_expert_tokens -> grouped_matmul -> finalize_routing, chained as
    # an MoE layer calls them, against the dense mixture: sum_k p_k(x) (x @ W_{e_k}).
    rows, hidden, out_dim, experts, k = 7, 5, 4, 4, 2
    x, logits = rand(rows, hidden, seed=60), rand(rows, experts, seed=61)
    weights = [rand(hidden, out_dim, seed=62 + e) for e in range(experts)]
    probs, expert_idx, row_idx = lookup("npu_moe_gating_top_k_softmax")(logits, k=k)
    expanded_x, expanded_row_idx, sorted_experts = lookup("npu_moe_init_routing")(x, row_idx, expert_idx, rows)
    ends = lookup("npu_moe_compute_expert_tokens")(sorted_experts, experts)
    (expert_out,) = lookup("npu_grouped_matmul")([expanded_x], weights, group_list=ends.to(torch.int64),
                                                 split_item=3, group_type=0)
    out = lookup("npu_moe_finalize_routing")(expert_out, None, None, None, probs, expanded_row_idx, expert_idx)
    dense = torch.softmax(logits, -1)
    expected = np.zeros((rows, out_dim))
    for r in range(rows):
        for e in np.argsort(-dense[r].numpy(), kind="stable")[:k]:
            expected[r] += dense[r, e].item() * (x[r].numpy() @ weights[e].numpy())
    assert_close(out, expected)


def sdpa_bnsd(q, k, v, scale, keep=None):
    """torch's scaled_dot_product_attention (math), key/value heads repeated, `keep` True where attended."""
    k, v = (t.repeat_interleave(q.shape[1] // t.shape[1], dim=1) for t in (k, v))
    return F.scaled_dot_product_attention(q, k, v, attn_mask=keep, scale=scale)


def in_layout(x, layout):
    """A [B, N, S, D] tensor in BSH / BSND / BNSD."""
    return {"BNSD": x, "BSND": x.transpose(1, 2), "BSH": x.transpose(1, 2).flatten(2)}[layout]


@pytest.mark.parametrize("layout", ["BSH", "BSND", "BNSD", "BNSD_BSND"])
@pytest.mark.parametrize("heads, kv_heads", [(2, 2), (4, 2)])
def test_prompt_flash_attention_layouts_and_gqa_against_sdpa(layout, heads, kv_heads):
    q, k, v = rand(2, heads, 5, 8, seed=70), rand(2, kv_heads, 7, 8, seed=71), rand(2, kv_heads, 7, 8, seed=72)
    given = "BNSD" if layout == "BNSD_BSND" else layout
    out = lookup("npu_prompt_flash_attention")(
        in_layout(q, given), in_layout(k, given), in_layout(v, given), num_heads=heads, scale_value=0.3,
        input_layout=layout, num_key_value_heads=kv_heads if kv_heads != heads else 0)
    expected = sdpa_bnsd(q, k, v, 0.3)
    assert_close(out, in_layout(expected, "BSND" if layout == "BNSD_BSND" else layout).numpy())


def test_prompt_flash_attention_masks_by_sparse_mode_and_kv_lengths():
    q, k, v = rand(2, 2, 4, 8, seed=73), rand(2, 2, 6, 8, seed=74), rand(2, 2, 6, 8, seed=75)
    pfa = lookup("npu_prompt_flash_attention")
    rows, cols = torch.arange(4).unsqueeze(-1), torch.arange(6)
    # sparse_mode 0, a given mask (True = left out) and next_tokens 0: the band adds causality from the top left.
    given = torch.zeros(4, 6, dtype=torch.bool)
    given[:, 5] = True
    out = pfa(q, k, v, num_heads=2, input_layout="BNSD", atten_mask=given, scale_value=0.5)
    assert_close(out, sdpa_bnsd(q, k, v, 0.5, ~given & (cols <= rows)).numpy())
    # sparse_mode 3 (rightDownCausal) on each batch's actual key length: [6, 5].
    triangle = torch.ones(2048, 2048, dtype=torch.bool).triu(1)
    out = pfa(q, k, v, num_heads=2, input_layout="BNSD", atten_mask=triangle, sparse_mode=3, scale_value=0.5,
              actual_seq_lengths_kv=[6, 5])
    for b, length in enumerate([6, 5]):
        keep = cols[:length] <= rows + (length - 4)
        expected = sdpa_bnsd(q[b:b + 1], k[b:b + 1, :, :length], v[b:b + 1, :, :length], 0.5, keep)
        assert_close(out[b:b + 1], expected.numpy())
    # No atten_mask in mode 0: pre_tokens and next_tokens are ignored, every key seen.
    assert_close(pfa(q, k, v, num_heads=2, input_layout="BNSD", next_tokens=0, pre_tokens=0),
                 sdpa_bnsd(q, k, v, 1.0).numpy())


@pytest.mark.parametrize("argument, value", [
    ("deq_scale1", torch.ones(1)), ("quant_scale1", torch.ones(1)),
    ("deq_scale2", torch.ones(1)), ("quant_scale2", torch.ones(1)), ("quant_offset2", torch.ones(1)),
    ("sparse_mode", 5), ("input_layout", "TND"), ("actual_seq_lengths", [3]),
])
def test_prompt_flash_attention_refuses_by_name_what_it_does_not_model(argument, value):
    q = rand(1, 1, 4, 8, seed=76)
    with pytest.raises(ReferenceUnsupported, match=f"npu_prompt_flash_attention: {argument}"):
        lookup("npu_prompt_flash_attention")(q, q, q, **{"input_layout": "BNSD", argument: value})


@pytest.mark.parametrize("layout", ["BSH", "BSND", "BNSD"])
def test_incre_flash_attention_masks_and_lengths_against_sdpa(layout):
    q, k, v = rand(2, 4, 1, 8, seed=77), rand(2, 2, 9, 8, seed=78), rand(2, 2, 9, 8, seed=79)
    mask = torch.zeros(2, 9, dtype=torch.bool)
    mask[0, 2] = mask[1, 0] = True
    out = lookup("npu_incre_flash_attention")(
        in_layout(q, layout), in_layout(k, layout), in_layout(v, layout), atten_mask=mask,
        actual_seq_lengths=[9, 6], num_heads=4, num_key_value_heads=2, scale_value=0.35, input_layout=layout)
    for b, length in enumerate([9, 6]):
        keep = ~mask[b, :length].unsqueeze(0)
        expected = sdpa_bnsd(q[b:b + 1], k[b:b + 1, :, :length], v[b:b + 1, :, :length], 0.35, keep)
        assert_close(in_layout(out, "BNSD")[b:b + 1] if layout == "BNSD" else out[b:b + 1],
                     in_layout(expected, layout).numpy())


@pytest.mark.parametrize("cache_layout", ["BSH", "BNSD"])
def test_incre_flash_attention_reads_paged_kv_through_block_table(cache_layout):
    # Each batch's keys cut into blocks of 4 and put at scattered physical blocks: the same as contiguous.
    batch, kv_heads, dim, block, lengths = 2, 2, 8, 4, [10, 7]
    q = rand(batch, kv_heads, 1, dim, seed=80)
    k, v = rand(batch, kv_heads, 12, dim, seed=81), rand(batch, kv_heads, 12, dim, seed=82)
    table = torch.tensor([[5, 0, 3], [1, 4, 2]], dtype=torch.int32)
    caches = []
    for full in (k, v):
        cache = torch.zeros(6, kv_heads, block, dim, dtype=torch.float64)
        for b in range(batch):
            for j, physical in enumerate(table[b].tolist()):
                cache[physical] = full[b, :, j * block:(j + 1) * block]
        caches.append(cache if cache_layout == "BNSD" else cache.transpose(1, 2).flatten(2))
    ifa = lookup("npu_incre_flash_attention")
    query = q if cache_layout == "BNSD" else in_layout(q, "BSH")
    paged = ifa(query, *caches, block_table=table, actual_seq_lengths=lengths, block_size=block, num_heads=kv_heads,
                scale_value=0.4, input_layout=cache_layout)
    contiguous = ifa(query, in_layout(k, cache_layout), in_layout(v, cache_layout), actual_seq_lengths=lengths,
                     num_heads=kv_heads, scale_value=0.4, input_layout=cache_layout)
    assert_close(paged, contiguous.numpy())


@pytest.mark.parametrize("argument", ["kv_padding_size", "dequant_scale1", "quant_scale1", "dequant_scale2",
                                      "quant_scale2", "quant_offset2"])
def test_incre_flash_attention_refuses_by_name_what_it_does_not_model(argument):
    q = rand(1, 1, 1, 8, seed=83)
    with pytest.raises(ReferenceUnsupported, match=f"npu_incre_flash_attention: {argument}"):
        lookup("npu_incre_flash_attention")(q, q, q, input_layout="BNSD", **{argument: torch.ones(1)})


@pytest.mark.parametrize("layout", ["BSH", "BNSD", "BNSD_BSND"])
def test_fused_infer_attention_score_prompt_branch_against_sdpa_with_its_lse(layout):
    q, k, v = rand(2, 4, 5, 8, seed=90), rand(2, 2, 7, 8, seed=91), rand(2, 2, 7, 8, seed=92)
    given = "BNSD" if layout == "BNSD_BSND" else layout
    rows, cols = torch.arange(5).unsqueeze(-1), torch.arange(7)
    mask = torch.zeros(5, 7, dtype=torch.bool)
    mask[:, 0] = True
    # sparse_mode 0 with a mask and next_tokens 1: each query also sees one key past its position.
    out, lse = lookup("npu_fused_infer_attention_score")(
        in_layout(q, given), in_layout(k, given), in_layout(v, given), atten_mask=mask, num_heads=4,
        num_key_value_heads=2, scale=0.3, next_tokens=1, input_layout=layout, softmax_lse_flag=True,
        actual_seq_lengths_kv=[7, 6])
    for b, length in enumerate([7, 6]):
        keep = ~mask[:, :length] & (cols[:length] <= rows + 1)
        expected = sdpa_bnsd(q[b:b + 1], k[b:b + 1, :, :length], v[b:b + 1, :, :length], 0.3, keep)
        got = out[b:b + 1]
        assert_close(got, in_layout(expected, "BSND" if layout == "BNSD_BSND" else layout).numpy())
        scores = 0.3 * q[b] @ k[b, :, :length].repeat_interleave(2, 0).transpose(-1, -2)
        expected_lse = torch.logsumexp(scores.masked_fill(~keep, float("-inf")), dim=-1, keepdim=True)
        assert lse.dtype == torch.float32 and lse.shape == (2, 4, 5, 1)
        assert_close(lse[b], expected_lse.numpy(), rtol=1e-6)


def test_fused_infer_attention_score_decode_branch_is_incre_flash_attention():
    # Query S = 1: a [B, S2] mask, sparse_mode and the token bands unused; without the flag, lse is the [1] zero.
    q, k, v = rand(2, 4, 1, 8, seed=93), rand(2, 2, 9, 8, seed=94), rand(2, 2, 9, 8, seed=95)
    mask = torch.zeros(2, 9, dtype=torch.bool)
    mask[1, 4] = True
    out, lse = lookup("npu_fused_infer_attention_score")(
        q, k, v, atten_mask=mask, actual_seq_lengths_kv=[9, 6], num_heads=4, num_key_value_heads=2, scale=0.3,
        input_layout="BNSD", sparse_mode=3, next_tokens=0)
    for b, length in enumerate([9, 6]):
        keep = ~mask[b, :length].unsqueeze(0)
        expected = sdpa_bnsd(q[b:b + 1], k[b:b + 1, :, :length], v[b:b + 1, :, :length], 0.3, keep)
        assert_close(out[b:b + 1], expected.numpy())
    assert lse.dtype == torch.float32 and lse.tolist() == [0.0]


@pytest.mark.parametrize("argument", [
    "dequant_scale1", "quant_scale1", "dequant_scale2", "quant_scale2", "quant_offset2",
    "query_padding_size", "kv_padding_size", "key_antiquant_scale",
    "key_antiquant_offset", "value_antiquant_scale", "value_antiquant_offset", "key_shared_prefix",
    "value_shared_prefix", "actual_shared_prefix_len", "query_rope", "key_rope", "input_layout", "sparse_mode"])
def test_fused_infer_attention_score_refuses_by_name_what_it_does_not_model(argument):
    q = rand(1, 1, 4, 8, seed=96)
    value = {"input_layout": "BSH_NBSD", "sparse_mode": 6, "actual_shared_prefix_len": [2]}.get(argument, torch.ones(1))
    with pytest.raises(ReferenceUnsupported, match=f"npu_fused_infer_attention_score: {argument}"):
        lookup("npu_fused_infer_attention_score")(q, q, q, **{"input_layout": "BNSD", argument: value})


def test_quantize_as_the_docs_example():
    # The page's example: x * 3 (div_mode False, per channel along the last axis), rounded to int8.
    x = torch.tensor([[[-0.77834, -1.0473, -1.1155, 1.2233, -1.2271, -2.5612]]], dtype=torch.float64)
    out = lookup("npu_quantize")(x, torch.full((6,), 3.0, dtype=torch.float64), None, torch.qint8, -1, False)
    assert out.dtype == torch.int8 and out.tolist() == [[[-2, -3, -3, 4, -4, -8]]]


@FAST
@given(st.integers(1, 4), st.integers(1, 5), st.booleans(), st.sampled_from([torch.qint8, torch.quint8, torch.qint32]),
       st.integers(0, 2**16))
def test_quantize_per_channel_against_numpy(rows, channels, div_mode, dtype, seed):
    x = rand(rows, channels, 3, seed=seed) * 50
    scales = rand(channels if div_mode else 3, seed=seed + 1).abs() + 0.1
    zero_points = torch.randint(-3, 4, scales.shape, generator=torch.Generator().manual_seed(seed), dtype=torch.int32)
    if div_mode:  # per channel along axis 1
        scaled = x.numpy() / scales.numpy()[:, None] + zero_points.numpy()[:, None]
    else:  # along the last axis
        scaled = x.numpy() * scales.numpy() + zero_points.numpy()
    low, high = {torch.qint8: (-128, 127), torch.quint8: (0, 255), torch.qint32: (-(2**31), 2**31 - 1)}[dtype]
    out = lookup("npu_quantize")(x, scales, zero_points, dtype, 1, div_mode)
    assert out.dtype == {torch.qint8: torch.int8, torch.quint8: torch.uint8, torch.qint32: torch.int32}[dtype]
    assert (out.numpy().astype(np.int64) == np.clip(np.rint(scaled), low, high)).all()


def test_quantize_refuses_packed_int4():
    with pytest.raises(ReferenceUnsupported, match=r"npu_quantize: dtype=torch\.quint4x2"):
        lookup("npu_quantize")(rand(2, 8, seed=97), torch.ones(8), None, torch.quint4x2, -1, False)


def test_inference_attentions_as_one_padded_bnsd_attention_give_their_outputs():
    # inference_attention_in_bnsd: the seam by which the dtype standard can model them as
    # scaled_dot_product_attention (npu_fusion_attention's AttentionInBnsd): that attention, run by
    # torch's own SDPA, gives each reference's output, per-batch key lengths and paged caches included.
    from pytest_msprobe.frameworks.npu_llm_reference import inference_attention_in_bnsd

    q, k, v = rand(2, 4, 5, 8, seed=100), rand(2, 2, 7, 8, seed=101), rand(2, 2, 7, 8, seed=102)
    triangle = torch.ones(2048, 2048, dtype=torch.bool).triu(1)
    decode_q = rand(2, 4, 1, 8, seed=103)
    mask = torch.zeros(2, 7, dtype=torch.bool)
    mask[0, 1] = True
    cases = [
        ("npu_prompt_flash_attention", (in_layout(q, "BSH"), in_layout(k, "BSH"), in_layout(v, "BSH")),
         {"num_heads": 4, "num_key_value_heads": 2, "scale_value": 0.3, "actual_seq_lengths_kv": [7, 6],
          "atten_mask": triangle, "sparse_mode": 3}),
        ("npu_incre_flash_attention", (decode_q, k, v),
         {"num_heads": 4, "num_key_value_heads": 2, "scale_value": 0.3, "input_layout": "BNSD",
          "atten_mask": mask, "actual_seq_lengths": [7, 4]}),
        ("npu_fused_infer_attention_score", (q, k, v),
         {"num_heads": 4, "num_key_value_heads": 2, "scale": 0.3, "input_layout": "BNSD_BSND",
          "atten_mask": torch.zeros(5, 7, dtype=torch.bool), "next_tokens": 0}),
        # TND: sequences of 3 and 4 queries on 5 and 6 keys packed along T, sparse_mode 3, one spare row
        ("npu_fused_infer_attention_score", (rand(8, 4, 8, seed=104), rand(11, 2, 8, seed=105), rand(11, 2, 8, seed=106)),
         {"num_heads": 4, "num_key_value_heads": 2, "scale": 0.3, "input_layout": "TND", "atten_mask": triangle,
          "sparse_mode": 3, "actual_seq_lengths": [3, 7], "actual_seq_lengths_kv": [5, 11]}),
    ]
    for api, args, kwargs in cases:
        call = inference_attention_in_bnsd(api, *args, **kwargs)
        expected = lookup(api)(*args, **kwargs)
        expected = expected[0] if isinstance(expected, tuple) else expected
        assert_close(call.output(F.scaled_dot_product_attention(**call.as_sdpa())), expected.numpy())


def test_fused_infer_attention_score_tnd_packs_sequences_of_their_own_lengths():
    # TND: sequences of 3 and 4 queries on 5 and 6 keys packed along T (ends cumulative), one spare row;
    # sparse_mode 3 (rightDownCausal) on each sequence; lse [T, N, 1].
    q, k, v = rand(8, 4, 8, seed=110), rand(11, 2, 8, seed=111), rand(11, 2, 8, seed=112)
    triangle = torch.ones(2048, 2048, dtype=torch.bool).triu(1)
    out, lse = lookup("npu_fused_infer_attention_score")(
        q, k, v, atten_mask=triangle, sparse_mode=3, actual_seq_lengths=[3, 7], actual_seq_lengths_kv=[5, 11],
        num_heads=4, num_key_value_heads=2, scale=0.3, input_layout="TND", softmax_lse_flag=True)
    assert out.shape == (8, 4, 8) and lse.shape == (8, 4, 1)
    for (q0, q1), (k0, k1) in (((0, 3), (0, 5)), ((3, 7), (5, 11))):
        rows, cols = torch.arange(q1 - q0).unsqueeze(-1), torch.arange(k1 - k0)
        keep = cols <= rows + (k1 - k0) - (q1 - q0)
        qs, ks, vs = (t.transpose(0, 1).unsqueeze(0) for t in (q[q0:q1], k[k0:k1], v[k0:k1]))
        expected = sdpa_bnsd(qs, ks, vs, 0.3, keep)[0].transpose(0, 1)
        assert_close(out[q0:q1], expected.numpy())
        scores = 0.3 * qs @ ks.repeat_interleave(2, 1).transpose(-1, -2)
        expected_lse = torch.logsumexp(scores.masked_fill(~keep, float("-inf")), -1)[0].t().unsqueeze(-1)
        assert_close(lse[q0:q1], expected_lse.numpy(), rtol=1e-6)
    assert (out[7] == 0).all()  # past the last sequence
    with pytest.raises(ReferenceUnsupported, match="block_table with TND"):
        lookup("npu_fused_infer_attention_score")(q, k, v, input_layout="TND", actual_seq_lengths=[3, 7],
                                                  actual_seq_lengths_kv=[5, 11], block_table=torch.zeros(2, 1))


@FAST
@given(st.integers(1, 5), st.integers(1, 40), st.integers(1, 6), st.sampled_from(["int8", "bf16", "fp16"]),
       st.booleans(), st.integers(0, 2**16))
def test_quant_matmul_against_integer_numpy(m, k, n, out, int_bias, seed):
    generator = torch.Generator().manual_seed(seed)
    x1 = torch.randint(-128, 128, (m, k), generator=generator, dtype=torch.int8)
    x2 = torch.randint(-128, 128, (k, n), generator=generator, dtype=torch.int8)
    scale = rand(n, seed=seed).abs() * 1e-3 + 1e-4
    pertoken = rand(m, seed=seed + 1).abs() + 0.5 if out != "int8" else None
    bias = (torch.randint(-1000, 1000, (n,), generator=generator, dtype=torch.int32) if int_bias
            else rand(n, seed=seed + 2))
    offset = rand(n, seed=seed + 3) if out == "int8" else None
    acc = x1.numpy().astype(np.int64) @ x2.numpy().astype(np.int64)  # exact in integers
    used = scale.numpy()
    if pertoken is None:  # the op packs a float32 scale (npu_trans_quant_param): its high 19 bits
        used = (used.astype(np.float32).view(np.uint32) & np.uint32(0xFFFFE000)).view(np.float32).astype(np.float64)
    if int_bias:
        expected = (acc + bias.numpy()) * used
    else:
        expected = acc * used
    if pertoken is not None:
        expected = expected * pertoken.numpy()[:, None]
    if not int_bias:
        expected = expected + bias.numpy()
    output_dtype = {"int8": None, "bf16": torch.bfloat16, "fp16": torch.float16}[out]
    got = lookup("npu_quant_matmul")(x1, x2, scale, offset=offset, pertoken_scale=pertoken, bias=bias,
                                     output_dtype=output_dtype)
    if out == "int8":
        assert got.dtype == torch.int8
        assert (got.numpy() == np.clip(np.rint(expected + offset.numpy()), -128, 127)).all()
    else:
        assert_close(got, expected)


@pytest.mark.parametrize("argument, value", [
    ("x1_dtype", torch.int8), ("x2_dtype", torch.int8), ("pertoken_scale_dtype", torch.float32),
    ("scale_dtype", torch.float32), ("group_sizes", [1, 1, 128]), ("y_scale", torch.ones(1)),
    ("output_dtype", torch.int32), ("scale", torch.tensor([1 << 46 | 0x3F800000] * 2, dtype=torch.int64)),
    ("x1", torch.ones(2, 2, dtype=torch.int32)),
])
def test_quant_matmul_refuses_by_name_what_it_does_not_model(argument, value):
    arguments = {"x1": torch.ones(2, 2, dtype=torch.int8), "x2": torch.ones(2, 2, dtype=torch.int8),
                 "scale": torch.ones(2, dtype=torch.float64), argument: value}
    x1, x2, scale = arguments.pop("x1"), arguments.pop("x2"), arguments.pop("scale")
    with pytest.raises(ReferenceUnsupported, match=f"npu_quant_matmul: {argument}"):
        lookup("npu_quant_matmul")(x1, x2, scale, **arguments)
