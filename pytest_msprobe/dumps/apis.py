"""Which APIs a dump entry may name, and where each lives: msprobe's own lists, never the dump's words.

An entry name is text from a file we did not write. It is never followed as a path of
attributes from a framework module (`Torch.os.system` would be `os.system`, `Torch.load` a
pickle): its API is looked up in the list of APIs msprobe wraps for the entry's type, and
only the path that list gives is followed, from the type's root. Anything else is not an
API msprobe records, and is never called.

The lists (wrapped_apis.txt) are msprobe's own `support_wrap_ops.yaml`, the union of every
version of them, from the Ascend mstt repository (https://gitee.com/ascend/mstt, read from
its GitHub mirror xiaobingling93-pixel/Ascend-mstt at 99c2e0f9, 2026-04-25):
debug/accuracy_tools/msprobe/pytorch/hook_module/support_wrap_ops.yaml and
debug/accuracy_tools/msprobe/mindspore/dump/hook_cell/support_wrap_ops.yaml;
tests/data/make/wrapped_apis.py writes it again from a clone. A list may still name
something that touches files, processes, memory or the interpreter (aten's list holds
`__loader__`, mint's `nn`): DENIED keeps those from being called, whatever a list says.

Pure data and lookups: no torch, no mindspore, no pytest (resolve() takes the root object).
"""

from __future__ import annotations

import functools
import re
from collections.abc import Collection, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable


class Unsupported(Exception):
    """The check cannot be made (an API without a callable, a collective, ...): SKIP. Raised from
    here (a name no list holds) and by the frameworks, which hand it on as theirs."""


WRAPPED_APIS = Path(__file__).with_name("wrapped_apis.txt")
PYTORCH = "pytorch"
MINDSPORE = "mindspore"
NOT_RECORDED = "not one of the APIs msprobe records"


@dataclass(frozen=True)
class Namespace:
    """Where the APIs of one entry type live, and which of msprobe's lists names them."""

    framework: str  # whose lists: pytorch or mindspore
    section: str  # the list in msprobe's support_wrap_ops.yaml
    root: str  # the module or class the listed paths start from


# Entry type -> namespace, as msprobe's api_register.py maps them (prefixes in its const.py).
PYTORCH_TYPES: Mapping[str, Namespace] = {
    "Functional": Namespace(PYTORCH, "functional", "torch.nn.functional"),
    "Tensor": Namespace(PYTORCH, "tensor", "torch.Tensor"),
    "Torch": Namespace(PYTORCH, "torch", "torch"),
    "VF": Namespace(PYTORCH, "_VF", "torch._VF"),
    "Aten": Namespace(PYTORCH, "aten", "torch.ops.aten"),
    "NPU": Namespace(PYTORCH, "torch_npu", "torch_npu"),
    "Distributed": Namespace(PYTORCH, "distributed", "torch.distributed"),
}
MINDSPORE_TYPES: Mapping[str, Namespace] = {
    "Mint": Namespace(MINDSPORE, "mint.ops", "mindspore.mint"),
    "MintFunctional": Namespace(MINDSPORE, "mint.nn.functional", "mindspore.mint.nn.functional"),
    "Functional": Namespace(MINDSPORE, "ops", "mindspore.ops"),
    "Tensor": Namespace(MINDSPORE, "tensor", "mindspore.Tensor"),
    "Distributed": Namespace(MINDSPORE, "communication.comm_func", "mindspore.communication.comm_func"),
    "MintDistributed": Namespace(MINDSPORE, "mint.distributed", "mindspore.mint.distributed"),
}
MINDSPORE_PRIMITIVES = Namespace(MINDSPORE, "primitives", "mindspore.ops")
TYPES: Mapping[str, Mapping[str, Namespace]] = {PYTORCH: PYTORCH_TYPES, MINDSPORE: MINDSPORE_TYPES}

# Never called, whatever a list names: (what it touches, names). Each part of a path is checked.
_DENIED_GROUPS: tuple[tuple[str, str], ...] = (
    (
        "reads or writes files",
        """
        load save from_file hub load_checkpoint save_checkpoint TensorDump tensordump TensorSummary
        ScalarSummary ImageSummary HistogramSummary open""",
    ),
    (
        "runs processes or code",
        """
        system popen spawn fork exec eval compile jit script PyFunc Custom __import__ os sys subprocess
        ctypes builtins importlib pickle shutil socket""",
    ),
    (
        "reads or shares raw memory (uninitialised or foreign memory would reach the report)",
        """
        data_ptr storage untyped_storage _typed_storage set_ share_memory_ pin_memory _pin_memory is_pinned
        record_stream frombuffer from_buffer string_at npu_change_data_ptr npu_prefetch empty empty_like
        empty_strided new_empty new_empty_strided empty_with_format resize_ resize_as_ _resize_output
        _resize_output_ sparse_resize_ sparse_resize_and_clear_ _unsafe_index _unsafe_index_put""",
    ),
    (
        # Checked arguments are frameworks/index_checks.py's; these take raw layouts no check can bound
        # (bench/studies/index_safety.md lists which API got which).
        "is an unchecked kernel: it takes raw sizes, strides or sparse indices and checks none against "
        "its storage, so a dump's values would read or write out of bounds",
        """
        _reshape_alias _sparse_coo_tensor_with_dims_and_tensors _sparse_mask_projection sparse_coo_tensor""",
    ),
    (
        "changes the state of the process (seeds, defaults, threads, modes)",
        """
        seed manual_seed initial_seed get_rng_state set_rng_state set_default_dtype set_default_device
        set_default_tensor_type set_num_threads set_num_interop_threads set_printoptions set_flush_denormal
        set_grad_enabled set_anomaly_enabled use_deterministic_algorithms set_deterministic_debug_mode
        set_float32_matmul_precision set_warn_always register_hook register_post_accumulate_grad_hook
        _rev_view_func_unsafe _make_dep_token npu_alloc_float_status _npu_silent_check_v2""",
    ),
    (
        "is a module's attribute, not an API",
        """
        __doc__ __loader__ __name__ __package__ __spec__ __file__ __path__ __dict__ __builtins__ _dir name
        absolute_import""",
    ),
)
DENIED: Mapping[str, str] = {name: why for why, names in _DENIED_GROUPS for name in names.split()}
# Submodules some lists name bare (mint's `nn`, `linalg`): fine inside a listed path, never the API itself.
MODULES = frozenset({"functional", "linalg", "nn", "special", "fft", "ops", "mint"})
# Dunders are interpreter machinery (__class__, __reduce_ex__, __init__, ...) except operators.
_OPERATOR_DUNDER = re.compile(
    r"__[ir]?(add|sub|mul|matmul|truediv|div|floordiv|mod|pow|lshift|rshift|and|or|xor|neg|pos|abs|invert"
    r"|eq|ne|lt|le|gt|ge|getitem|setitem|bool|nonzero|float|int|index|len|contains)__"
)
_IDENTIFIER = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")

# PyTorch dtypes by the names msprobe writes (str(dtype)), and their aliases: looked up in
# this table, never as an attribute of torch named by the dump.
# PyTorch's quantized dtypes: torch.dtype arguments name them (npu_quantize's dtype=torch.qint8); a
# tensor of one is never rebuilt (inputs/rebuild.py's NO_TENSOR_HERE says why).
QUANTIZED_DTYPES: tuple[str, ...] = ("qint8", "quint8", "qint32", "quint4x2", "quint2x4")
TORCH_DTYPES: tuple[str, ...] = (
    "float64",
    "float32",
    "float16",
    "bfloat16",
    "complex128",
    "complex64",
    "complex32",
    "int64",
    "int32",
    "int16",
    "int8",
    "uint8",
    "uint16",
    "uint32",
    "uint64",
    "bool",
    "float8_e4m3fn",
    "float8_e5m2",
    "float8_e4m3fnuz",
    "float8_e5m2fnuz",
    *QUANTIZED_DTYPES,
)
TORCH_DTYPE_ALIASES: Mapping[str, str] = {
    "double": "float64",
    "float": "float32",
    "half": "float16",
    "cdouble": "complex128",
    "cfloat": "complex64",
    "chalf": "complex32",
    "long": "int64",
    "int": "int32",
    "short": "int16",
}


@dataclass(frozen=True)
class ApiPath:
    """An API found in msprobe's lists: the path from its type's root, and an aten overload."""

    namespace: Namespace
    path: tuple[str, ...]
    overload: str | None = None

    @property
    def dotted(self) -> str:
        return ".".join((self.namespace.root, *self.path, *([self.overload] if self.overload else [])))


@functools.cache
def wrapped(framework: str, section: str) -> frozenset[str]:
    """The names one of msprobe's lists holds (empty for a list it does not have)."""
    return _read_lists().get((framework, section), frozenset())


@functools.cache
def _read_lists() -> dict[tuple[str, str], frozenset[str]]:
    lists: dict[tuple[str, str], set] = {}
    current: set | None = None
    for line in WRAPPED_APIS.read_text(encoding="utf-8").splitlines():
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        if line.startswith("["):
            framework, section = line.strip("[]").split(" ", 1)
            current = lists.setdefault((framework, section), set())
        elif current is not None:
            current.add(line)
    return {key: frozenset(names) for key, names in lists.items()}


def denied(name: str) -> str | None:
    """Why a name is never called, or None."""
    if name in DENIED:
        return DENIED[name]
    if name.startswith("__") and name.endswith("__") and not _OPERATOR_DUNDER.fullmatch(name):
        return "is interpreter machinery, not an API"
    if name.startswith(("set_", "_set_")):
        return DENIED["set_default_dtype"]
    return None


def listed(framework: str, api_type: str, api: str) -> ApiPath:
    """The entry's API as msprobe's list for its type names it; Unsupported (a SKIP) otherwise.

    `Torch.linalg.norm` is listed as it is; msprobe 8.x names an API by its last part, so a
    bare `Torch.vector_norm` is the one listed path ending so (`linalg.vector_norm`); an aten
    entry may add its overload, `Aten.add.Tensor`.
    """
    namespace = TYPES.get(framework, {}).get(api_type)
    what = f"{api_type}.{api}"
    if namespace is None:
        raise Unsupported(
            f"{what}: {NOT_RECORDED}: msprobe has no {framework} API type {api_type!r}, so it is never called"
        )
    names = wrapped(framework, namespace.section)
    overload = None
    if api in names:
        path = api
    elif "." not in api and len(ends := [n for n in names if n.rsplit(".", 1)[-1] == api]) == 1:
        path = ends[0]
    elif api_type == "Aten" and api.count(".") == 1 and api.split(".")[0] in names:
        path, overload = api.split(".")
    else:
        raise Unsupported(
            f"{what}: {NOT_RECORDED} (its list of wrapped {framework} {namespace.section} "
            f"APIs does not name {api!r}), so it is never called"
        )
    parts = (*path.split("."), *([overload] if overload else []))
    for part in parts:
        why = denied(part) if _IDENTIFIER.fullmatch(part) else "is not a Python name"
        if why:
            raise Unsupported(f"{what}: never called: {part!r} {why}")
    if parts[-1] in MODULES:
        raise Unsupported(f"{what}: never called: {parts[-1]!r} is a module, not an API")
    return ApiPath(namespace, tuple(path.split(".")), overload)


def resolve(root: Any, api: ApiPath, where: str) -> Callable:
    """The callable at a listed path from its root; Unsupported where `where` (`torch 2.13.0`) lacks it."""
    target = root
    try:
        for part in api.path:
            target = getattr(target, part)
        if api.overload is not None:
            if api.overload not in target.overloads():
                raise AttributeError(api.overload)
            target = getattr(target, api.overload)
    except (AttributeError, RuntimeError):
        raise Unsupported(f"{api.dotted} does not exist in {where}") from None
    if not callable(target):
        raise Unsupported(f"{api.dotted} is not callable")
    return target


def primitive(api: str, mapped: Collection[str]) -> ApiPath:
    """The class of a MindSpore `Primitive.<name>.<Class>` entry, if pytest-msprobe maps it.

    msprobe hooks every primitive (primitive_hooks.py) and keeps no list: the classes
    benchmarked (frameworks/ms_mapping.py) are the list.
    """
    cls = api.rsplit(".", 1)[-1]
    if cls not in mapped or denied(cls):
        raise Unsupported(
            f"Primitive.{api}: {cls!r} is not a primitive pytest-msprobe maps "
            f"({', '.join(sorted(mapped))}), so it is never called"
        )
    return ApiPath(MINDSPORE_PRIMITIVES, (cls,))


def torch_dtype_name(name: Any) -> str:
    """`torch.float32` (or an alias, `torch.float`) -> `float32`; KeyError for anything else."""
    text = name if isinstance(name, str) else ""
    short = text[len("torch.") :] if text.startswith("torch.") else ""
    short = TORCH_DTYPE_ALIASES.get(short, short)
    if short not in TORCH_DTYPES:
        raise KeyError(name)
    return short
