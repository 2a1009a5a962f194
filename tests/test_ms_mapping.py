"""The MindSpore -> PyTorch mapping table: names, argument conventions, adapters."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from pytest_msprobe.frameworks import ms_mapping
from pytest_msprobe.frameworks.ms_mapping import lookup

X = torch.arange(60, dtype=torch.float64).reshape(3, 4, 5) / 7 - 4


def bench(api_type, api):
    equivalent = lookup(api_type, api)
    assert equivalent is not None, f"{api_type}.{api} is not mapped"
    return equivalent.bench()


def test_axis_and_keep_dims_become_dim_and_keepdim():
    mean = bench("Functional", "mean")(X, axis=1, keep_dims=True)
    assert torch.equal(mean, torch.mean(X, dim=1, keepdim=True))
    total = bench("Tensor", "sum")(X, axis=-1, keepdims=True)
    assert torch.equal(total, X.sum(dim=-1, keepdim=True))
    assert torch.equal(bench("Functional", "softmax")(X, axis=0), torch.softmax(X, dim=0))
    assert torch.equal(bench("Functional", "cumsum")(X, axis=2), torch.cumsum(X, dim=2))
    assert torch.equal(bench("Functional", "prod")(X, axis=None, keep_dims=False), X.prod())  # None: every dim


def test_mint_keeps_torch_names_and_keywords():
    assert torch.equal(bench("Mint", "mean")(X, dim=1, keepdim=True), X.mean(dim=1, keepdim=True))
    assert torch.equal(bench("MintFunctional", "relu")(X), torch.relu(X))
    assert lookup("Mint", "matmul").torch_name == "torch.matmul"
    assert lookup("MintFunctional", "gelu").torch_name == "torch.nn.functional.gelu"


def test_ops_with_other_positional_conventions():
    assert torch.equal(bench("Functional", "transpose")(X, (2, 0, 1)), X.permute(2, 0, 1))
    assert torch.equal(bench("Functional", "concat")([X, X], axis=1), torch.cat([X, X], dim=1))
    assert torch.equal(bench("Functional", "expand_dims")(X, 0), X.unsqueeze(0))
    y = X[:, :1]
    assert bench("Functional", "squeeze")(y).shape == (3, 5)  # axis None: every size-1 dim
    assert bench("Functional", "squeeze")(y[None], axis=0).shape == (3, 1, 5)
    assert bench("Functional", "cast")(X, torch.float16).dtype == torch.float16
    assert bench("Tensor", "astype")(X, torch.int32).dtype == torch.int32


def test_an_index_list_with_slices_is_a_tuple():
    getitem = bench("Tensor", "__getitem__")
    assert torch.equal(getitem(X, [slice(0, 2, None), Ellipsis]), X[0:2, ...])
    assert torch.equal(getitem(X, [0, 2]), X[[0, 2]])  # a plain list stays an index list


def test_tensor_transpose_swaps_two_dims_and_permutes_all():
    transpose = bench("Tensor", "transpose")
    assert torch.equal(transpose(X, 0, 2), X.transpose(0, 2))
    assert torch.equal(transpose(X, 2, 0, 1), X.permute(2, 0, 1))
    assert torch.equal(transpose(X, (1, 2, 0)), X.permute(1, 2, 0))
    assert torch.equal(transpose(X), X.permute(2, 1, 0))
    assert torch.equal(transpose(X[0], 1, 0), X[0].T)


def test_ops_gather_takes_slices_and_ops_flatten_keeps_the_first_dim():
    indices = torch.tensor([[0, 2], [1, 1]])
    taken = bench("Functional", "gather")(X, indices, 1)
    assert taken.shape == (3, 2, 2, 5)
    assert torch.equal(taken[:, 1, 0], X[:, 1])
    assert bench("Functional", "flatten")(X).shape == (3, 20)


def test_tensor_var_defaults_to_numpy_ddof_0_unless_called_the_torch_way():
    var = bench("Tensor", "var")
    assert torch.equal(var(X), X.var(correction=0))
    assert torch.equal(var(X, 1, 1, True), X.var(dim=1, correction=1, keepdim=True))
    assert torch.equal(var(X, dim=1), X.var(dim=1))  # torch's overload: correction 1


def test_matmul_primitive_reads_its_transposes_from_the_shapes():
    attrs = ms_mapping.matmul_attrs
    assert attrs(torch.zeros(4, 36), torch.zeros(5, 36)) == (False, True)  # nn.Dense
    assert attrs(torch.zeros(4, 36), torch.zeros(36, 5)) == (False, False)
    with pytest.raises(ValueError, match="fit 4 transpositions"):
        attrs(torch.zeros(3, 3), torch.zeros(3, 3))
    x, w = X[0], X[1, :, :3]
    assert torch.equal(bench("Primitive", "matmul.MatMul")(x.T, w), x.T @ w)


def test_layer_norm_primitive_gives_y_mean_and_variance():
    x, gamma, beta = X[0], torch.linspace(0.5, 1.5, 5, dtype=torch.float64), torch.full((5,), 0.1,
                                                                                       dtype=torch.float64)
    y, mean, variance = bench("Primitive", "layer_norm.LayerNorm")(x, gamma, beta)
    assert torch.allclose(y, torch.nn.functional.layer_norm(x, (5,), gamma, beta, eps=1e-7), rtol=0, atol=1e-12)
    assert torch.allclose(mean, x.mean(-1, keepdim=True))
    assert torch.allclose(variance, x.var(-1, unbiased=False, keepdim=True))


def test_unmapped_apis_and_primitive_lookup():
    assert lookup("Functional", "rank") is None
    assert lookup("Primitive", "conv2d.Conv2D") is None  # stride, pad, ...: attributes msprobe does not record
    assert lookup("Mint", "no_such_api") is None
    assert lookup("Distributed", "all_reduce") is None
    assert lookup("Primitive", "dense.Dense").torch_name == "torch.nn.functional.linear"


@pytest.mark.parametrize("name", ms_mapping.mapped_names())
def test_every_mapped_name_resolves_in_torch(name):
    api_type, api = name.split(".", 1)
    equivalent = lookup(api_type, api)
    assert callable(equivalent.bench())
    if equivalent.adapter is None:
        assert callable(ms_mapping._resolve(equivalent.torch_name)), equivalent.torch_name


# Each row: an API whose MindSpore convention differs from torch's, called as a
# MindSpore user calls it; MindSpore's own result must equal the mapped bench.
CONVENTIONS = [
    ("Functional", "mean", (), {"axis": 1, "keep_dims": True}),
    ("Functional", "sum", (), {"dim": -1, "keepdim": True}),
    ("Functional", "softmax", (), {"axis": 0}),
    ("Functional", "cumsum", (2,), {}),
    ("Functional", "transpose", ((2, 0, 1),), {}),
    ("Functional", "expand_dims", (1,), {}),
    ("Functional", "amax", (), {"axis": 1, "keepdims": True}),
    ("Functional", "prod", (), {"axis": None, "keep_dims": False}),
    ("Tensor", "sum", (), {"axis": -1, "keepdims": True}),
    ("Tensor", "mean", (), {"axis": 0, "keep_dims": False}),
    ("Tensor", "transpose", (2, 0, 1), {}),
    ("Tensor", "transpose", (0, 2), {}),
    ("Tensor", "softmax", (), {"axis": 1}),
    ("Tensor", "flatten", (1,), {}),  # start_dim, as in torch (MindSpore 2.10)
    ("Tensor", "prod", (1,), {}),
    ("Tensor", "cumsum", (1,), {}),
    ("Tensor", "tile", ((2, 1, 1),), {}),
    ("Tensor", "permute", (2, 0, 1), {}),
    ("Tensor", "__rsub__", (1.0,), {}),
    ("Tensor", "__pow__", (2,), {}),
    ("Functional", "flatten", (), {}),
    ("Functional", "flatten", (), {"start_dim": 0}),
    ("Tensor", "var", (), {}),
    ("Tensor", "var", (1,), {"ddof": 1, "keepdims": True}),
    ("Mint", "sum", (), {"dim": 1, "keepdim": True}),
    ("Mint", "transpose", (0, 2), {}),
    ("Mint", "softmax", (), {"dim": 1}),
]


@pytest.mark.parametrize("api_type, api, args, kwargs", CONVENTIONS,
                         ids=[f"{t}.{a}{args}{sorted(kw)}" for t, a, args, kw in CONVENTIONS])
def test_mindspore_agrees_with_the_mapped_bench(api_type, api, args, kwargs):
    ms = pytest.importorskip("mindspore")
    x = X.to(torch.float32)
    roots = {"Functional": ms.ops, "Mint": ms.mint, "Tensor": ms.Tensor}
    tested = getattr(roots[api_type], api)(ms.Tensor(x.numpy()), *args, **kwargs).asnumpy()
    expected = bench(api_type, api)(x, *args, **kwargs).numpy()
    assert tested.shape == expected.shape
    np.testing.assert_allclose(tested, expected, rtol=1e-6, atol=1e-6)


def test_mindspore_gather_and_primitives_agree_with_the_mapped_bench():
    ms = pytest.importorskip("mindspore")
    x = X.to(torch.float32)
    indices = torch.tensor([[0, 2], [1, 1]], dtype=torch.int32)
    cases = [
        (ms.ops.gather, "Functional", "gather", (x, indices, 1)),
        (ms.ops.MatMul(False, True), "Primitive", "matmul.MatMul", (x[0], x[1, :2])),
        (ms.ops.BiasAdd(), "Primitive", "bias_add.BiasAdd", (x, x[0, :, 0])),
        (ms.ops.ReLU(), "Primitive", "relu.ReLU", (x,)),
    ]
    for fn, api_type, api, args in cases:
        tested = fn(*(ms.Tensor(a.numpy()) if isinstance(a, torch.Tensor) else a for a in args)).asnumpy()
        np.testing.assert_allclose(tested, bench(api_type, api)(*args).numpy(), rtol=1e-6, atol=1e-6,
                                   err_msg=f"{api_type}.{api}")
