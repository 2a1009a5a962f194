"""Deficient casts into float8, computed from an entry's recorded input (tests/data/fp8_casts).

Each is what a real kernel that rounds otherwise than the format's cast computes: a cast that
truncates (rounds toward zero) instead of to nearest, one that rounds away from zero, one that
flushes the subnormals to zero (a kernel without denormals), one that does not saturate into
e4m3fn (NaN beyond 448, OCP's non-saturating mode, where torch's cast saturates), and a
read-back of float8 values one float8 ULP off at one element. write_faulty() copies the dump and
replaces the recorded outputs of those entries, so that `--msprobe-device recorded` judges them.

The faults are made on the float8 encodings (uint8 views): one step of an encoding's magnitude is
one ULP of the format, the sign apart.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Callable

import torch


def _step(rounded: torch.Tensor, where: torch.Tensor, by: int) -> torch.Tensor:
    """`rounded` (a float8 tensor) moved `by` encodings of magnitude where `where` holds."""
    bits = rounded.view(torch.uint8).to(torch.int16)
    magnitude = (bits & 0x7F) + by * where.to(torch.int16)
    return ((bits & 0x80) | magnitude).to(torch.uint8).view(rounded.dtype)


def truncated(x: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """x cast toward zero: the cast's nearest value where it is not above |x|, else one below."""
    rounded = x.to(dtype)
    return _step(rounded, rounded.double().abs() > x.double().abs(), -1)


def away_from_zero(x: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """x cast away from zero: one above the nearest value where that is below |x|."""
    rounded = x.to(dtype)
    return _step(rounded, rounded.double().abs() < x.double().abs(), 1)


def flushed(x: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """x cast with the subnormals flushed to zero."""
    rounded = x.to(dtype)
    normal = torch.finfo(dtype).smallest_normal
    return torch.where(rounded.float().abs() < normal, torch.zeros_like(rounded.float()), rounded.float()).to(dtype)


def not_saturating(x: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """x cast into e4m3fn with NaN (S.1111.111) where the rounded value is beyond 448."""
    rounded = x.to(dtype)
    beyond = x.double().abs() >= 464  # 448 + half its ULP (32): the tie goes to 448, even
    bits = rounded.view(torch.uint8)
    return torch.where(beyond, bits | 0x7F, bits).view(dtype)


def one_ulp_off(x: torch.Tensor) -> torch.Tensor:
    """x (float8) read back in float32 with its first nonzero element one float8 ULP up."""
    flat = x.reshape(-1)
    where = torch.zeros(flat.shape, dtype=torch.bool)
    where[int(torch.nonzero(flat.view(torch.uint8) & 0x7F)[0, 0])] = True
    return _step(flat, where, 1).reshape(x.shape).to(torch.float32)


# entry -> (what the kernel does, the faulty output from the entry's recorded input)
FAULTS: dict[str, tuple[str, Callable[[torch.Tensor], torch.Tensor]]] = {
    "Tensor.to.0.forward": ("truncates into e4m3fn", lambda x: truncated(x, torch.float8_e4m3fn)),
    "Tensor.to.1.forward": ("does not saturate into e4m3fn", lambda x: not_saturating(x, torch.float8_e4m3fn)),
    "Tensor.to.2.forward": ("flushes e4m3fn's subnormals", lambda x: flushed(x, torch.float8_e4m3fn)),
    "Tensor.to.3.forward": ("rounds away from zero into e5m2", lambda x: away_from_zero(x, torch.float8_e5m2)),
    "Tensor.float.0.forward": ("reads one e4m3fn value one ULP off", one_ulp_off),
}


def write_faulty(source: Path, dest: Path, faults: dict | None = None) -> Path:
    """A copy of the dump folder `source` at `dest` with the outputs of `faults`' entries replaced
    by the faulty kernels'; returns the copy's dump.json."""
    shutil.copytree(source, dest)
    for path in dest.rglob("*"):
        path.chmod(0o644 if path.is_file() else 0o755)
    data = json.loads((dest / "dump.json").read_text(encoding="utf-8"))["data"]
    tensors = dest / "dump_tensor_data"
    for entry, (_, fault) in (faults or FAULTS).items():
        body = data[entry]
        x = torch.load(tensors / body["input_args"][0]["data_name"], weights_only=True)
        out = fault(x)
        recorded = body["output"][0]
        assert str(out.dtype) == recorded["dtype"] and list(out.shape) == recorded["shape"], entry
        torch.save(out, tensors / recorded["data_name"])
    return dest / "dump.json"
