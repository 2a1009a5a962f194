"""The MindSpore codec, the kernel-error reader and the device binding."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from pytest_msprobe.frameworks import Unsupported
from pytest_msprobe.frameworks import mindspore as framework
from pytest_msprobe.frameworks.mindspore import CODEC, missing_kernel
from pytest_msprobe.inputs.rebuild import InputError, Rebuilder


@pytest.mark.parametrize("name, dtype, kind", [
    ("Float32", torch.float32, "f"), ("BFloat16", torch.bfloat16, "f"), ("Float16", torch.float16, "f"),
    ("Int64", torch.int64, "i"), ("UInt8", torch.uint8, "i"), ("Bool", torch.bool, "b"),
    ("mindspore.float64", torch.float64, "f"), ("Complex64", torch.complex64, "c"),
])
def test_mindspore_dtype_names(name, dtype, kind):
    assert CODEC.dtype(name) == dtype
    assert CODEC.dtype_kind(name) == kind


def test_unknown_dtype_is_a_key_error():
    with pytest.raises(KeyError):
        CODEC.dtype("torch.float32")


def spec(data_name, shape, dtype="Float32"):
    return {"type": "mindspore.Tensor", "dtype": dtype, "shape": shape, "data_name": data_name}


def test_npy_files_load_in_the_recorded_dtype(tmp_path):
    np.save(tmp_path / "scalar.npy", np.array(0.5, dtype=np.float32))
    np.save(tmp_path / "bf16.npy", np.array([1.0, 0.5, -2.0], dtype=np.float32))  # bf16 is stored as float32
    rebuilder = Rebuilder(CODEC, "Mint.x.0.forward", tmp_path, "real", 1234)
    scalar = rebuilder.value(spec("scalar.npy", []), "input_args[0]")
    assert scalar.shape == () and scalar.dtype == torch.float32  # 0-d stays 0-d
    bf16 = rebuilder.value(spec("bf16.npy", [3], "BFloat16"), "input_args[1]")
    assert bf16.dtype == torch.bfloat16 and bf16.tolist() == [1.0, 0.5, -2.0]


def test_a_pickled_npy_is_refused_naming_the_field(tmp_path):
    np.save(tmp_path / "obj.npy", np.array([{"a": 1}], dtype=object), allow_pickle=True)
    rebuilder = Rebuilder(CODEC, "Mint.x.0.forward", tmp_path, "real", 1234)
    with pytest.raises(InputError, match=r"Mint.x.0.forward: input_args\[0\].data_name: cannot load obj.npy"):
        rebuilder.value(spec("obj.npy", [1]), "input_args[0]")


@pytest.mark.parametrize("message, kernel", [
    ("The kernel GeluExt unregistered.\n\n---- C++ Call Stack", "GeluExt"),
    ("Create kernelmod for op LayerNormExt failed", "LayerNormExt"),
    ("Select CPU operator[Exp] fail! Unsupported data type!\nThe supported data types are", "Exp for these input dtypes"),
    ("For 'MatMul', the shapes do not match", None),
])
def test_missing_kernel_is_read_from_mindspore_errors(message, kernel):
    assert missing_kernel(RuntimeError(message)) == kernel


def test_bind_takes_cpu_once_and_refuses_other_devices():
    pytest.importorskip("mindspore")
    assert framework.bind("cpu") == "cpu"
    assert framework.bind("cpu") == "cpu"  # idempotent
    with pytest.raises(Unsupported, match="bound to cpu"):
        framework.bind("npu:1")
    with pytest.raises(Unsupported, match="cpu or npu"):
        framework.bind("cuda:0")
