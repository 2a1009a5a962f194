"""msprobe's own registrations of a team's operators, read as they are, into the reference registry.

- `fusion_operator_config.yaml` (msprobe 26.2: python/msprobe/pytorch/bench_functions/): under
  `operators`, each `<operator>: {forward: <function>, backward: <function>, description: ...}`. msprobe
  looks the functions up in its own bench_functions package and benchmarks `NPU.<operator>` with the
  forward; it calls no backward ("registered to support future feature expansion", function_factory.py).
- `api_output_postprocess.yaml` (core/common/output_postprocess/): `acc_check_handlers`, by side
  (`target`: the device's outputs, `golden`: the bench's), `<api>: "<file>.py:<function>"`, each
  `handler(api_name, output, args, kwargs) -> output` run on that side's outputs before they are
  compared; the file relative to the YAML's folder, or absolute. `compare_handlers` serve msprobe's
  compare tool, not the pre-check: not read.

A function is imported only from the Python files the user names (--msprobe-functions, ini
msprobe_functions), never from a dump's folders, and never by a path a YAML file gives alone: a
handler's file must be one of those named. msprobe's own entries, left as msprobe ships them in a
team's copy, need no file: the built-in reference (or mask) here stands for them. An operator
named bare (`npu_rms_norm`) is torch_npu's, as msprobe reads it; a team's custom op is named as the
dump names it (`myteam.gated_silu`), which msprobe's pre-check itself never checks.

No pytest, no torch (the functions' own files import what they need). Problems are RegistryError,
the plugin's usage error, naming the file and the key.
"""

from __future__ import annotations

import hashlib
import importlib.util
import os
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from types import ModuleType
from typing import Any, Callable

from .. import readback
from ..dumps import apis
from .references import Postprocess, Registry, RegistryError

MAX_BYTES = readback.MAX_CONFIG  # a registration file is a page of YAML

# msprobe 26.2.0's own fusion_operator_config.yaml: operator -> (forward, backward). An entry left as
# it ships is msprobe's function, which the built-in reference here stands for (docs/npu.md).
MSPROBE_FUSION: Mapping[str, tuple[str | None, str | None]] = {
    "npu_fusion_attention": ("npu_fusion_attention", "npu_fusion_attention_grad"),
    "npu_fast_gelu": ("npu_fast_gelu", "npu_fast_gelu_backward"),
    "npu_swiglu": ("npu_swiglu", "npu_swiglu_backward"),
    "npu_rms_norm": ("npu_rms_norm", "npu_rms_norm_backward"),
    "npu_rotary_mul": ("npu_rotary_mul", "npu_rotary_mul_backward"),
    "npu_scaled_masked_softmax": ("npu_scaled_masked_softmax", "npu_scaled_masked_softmax_backward"),
    "npu_linear": ("npu_linear", "npu_linear_backward"),
    "npu_confusion_transpose": ("npu_confusion_transpose", "npu_confusion_transpose_backward"),
    "npu_apply_adam": ("npu_apply_adam", None),
    "npu_apply_adam_w": ("npu_apply_adam_w", None),
    "npu_layer_norm_eval": ("npu_layer_norm_eval", None),
    "npu_group_norm_silu": ("npu_group_norm_silu", None),
    "npu_mish": ("npu_mish", None),
    "npu_moe_gating_top_k_softmax": ("npu_moe_gating_top_k_softmax", None),
    "npu_sort_v2": ("npu_sort_v2", None),
    "matmul_backward": (None, "matmul_backward"),  # torch's matmul's backward: torch's own here
}
# msprobe 26.2.0's own api_output_postprocess.yaml: (side, api) -> handler.
MSPROBE_POSTPROCESS: Mapping[tuple[str, str], str] = {
    ("target", "npu_dequant_swiglu_quant"): "builtin_handlers.py:postprocess_by_group_index",
    ("target", "npu_grouped_matmul"): "builtin_handlers.py:postprocess_by_group_list",
}
SIDES = ("target", "golden")


@dataclass
class FunctionFiles:
    """The Python files the user named, imported once each: the only place a YAML's function is found."""

    paths: tuple[Path, ...]
    modules: dict[Path, ModuleType] = field(default_factory=dict)

    @classmethod
    def named(cls, given: Sequence[str], base: Path, dump_folders: Iterable[Path]) -> FunctionFiles:
        folders = {Path(os.path.realpath(f)) for f in dump_folders} | set(dump_folders)
        paths = []
        for text in given:
            path = Path(os.path.realpath(base / text))
            if not path.is_file():
                raise RegistryError(f"--msprobe-functions {text}: no such file")
            if path.suffix != ".py":
                raise RegistryError(f"--msprobe-functions {text}: not a Python file (.py)")
            if any(folder == path.parent or folder in path.parents for folder in folders):
                raise RegistryError(
                    f"--msprobe-functions {text}: it lies in a dump's folders, and a dump is data: never imported"
                )
            paths.append(path)
        return cls(tuple(dict.fromkeys(paths)))

    def module(self, path: Path) -> ModuleType:
        if path not in self.modules:
            digest = hashlib.sha256(str(path).encode()).hexdigest()[:12]
            spec = importlib.util.spec_from_file_location(f"msprobe_functions_{path.stem}_{digest}", path)
            if spec is None or spec.loader is None:
                raise RegistryError(f"{path}: cannot be imported as a module")
            module = importlib.util.module_from_spec(spec)
            try:
                spec.loader.exec_module(module)
            except Exception as exc:  # noqa: BLE001 - the user's file: whatever it raises is theirs to fix
                raise RegistryError(f"importing {path} raised {type(exc).__name__}: {exc}") from None
            self.modules[path] = module
        return self.modules[path]

    def find(self, name: str, where: str) -> Callable | None:
        """The function `name` in the named files; RegistryError where two of them define it."""
        found = [
            (path, getattr(self.module(path), name))
            for path in self.paths
            if callable(getattr(self.module(path), name, None))
        ]
        if len(found) > 1:
            raise RegistryError(f"{where}: {name} is defined in {found[0][0]} and in {found[1][0]}: name one of them")
        return found[0][1] if found else None

    def at(self, path: Path, name: str, where: str) -> Callable:
        if path not in self.paths:
            shown = ", ".join(map(str, self.paths)) or "none"
            raise RegistryError(
                f"{where}: {path} is not one of the files --msprobe-functions names ({shown}): name it there to "
                "import it (a YAML file alone never makes a file run)"
            )
        function = getattr(self.module(path), name, None)
        if not callable(function):
            raise RegistryError(f"{where}: {path} defines no function {name}")
        return function


def read_yaml(path: Path, option: str) -> Any:
    try:
        import yaml  # type: ignore[import-untyped]  # msprobe depends on it; this plugin only here
    except ImportError:
        raise RegistryError(f"{option} needs PyYAML to read {path}: pip install pyyaml") from None
    try:
        data = readback.read_bytes(path, MAX_BYTES, follow_links=True)  # a path the user named, as named
    except readback.Unreadable as exc:
        raise RegistryError(f"{option}: {exc}") from None
    try:
        return yaml.safe_load(data)
    except yaml.YAMLError as exc:
        raise RegistryError(f"{option}: {path} is not YAML: {str(exc).splitlines()[0]}") from None


def pattern_of(key: Any, where: str) -> str:
    """The API an operator key names: bare, torch_npu's (`NPU.<op>`, as msprobe reads it); dotted, as
    the dump names it (`myteam.gated_silu`). An API msprobe's lists do not hold is unknown."""
    if not isinstance(key, str) or not key:
        raise RegistryError(f"{where}: {key!r} is not an operator name")
    if "." not in key:
        try:
            apis.listed(apis.PYTORCH, "NPU", key)
        except apis.Unsupported:
            raise RegistryError(
                f"{where}: unknown API {key!r}: not one of the torch_npu APIs msprobe records (a bare name is "
                "torch_npu's); name a custom op as the dump names it (<namespace>.<op>)"
            ) from None
        return f"NPU.{key}"
    api_type, api = key.split(".", 1)
    if api_type in apis.PYTORCH_TYPES:
        try:
            apis.listed(apis.PYTORCH, api_type, api)
        except apis.Unsupported as exc:
            raise RegistryError(f"{where}: unknown API {key!r}: {exc}") from None
    return key


def read_fusion_config(path: Path, files: FunctionFiles, registry: Registry) -> list[str]:
    """Register each operator's forward from the named files; the header's notes back."""
    option = "--msprobe-fusion-config"
    document = read_yaml(path, option)
    operators = document.get("operators") if isinstance(document, dict) else None
    if not isinstance(operators, dict):
        raise RegistryError(f"{option}: {path} has no `operators` mapping (msprobe's fusion_operator_config.yaml)")
    notes: list[str] = []
    as_shipped: list[str] = []
    for key, entry in operators.items():
        where = f"{path}: operators.{key}"
        if not isinstance(entry, dict):
            raise RegistryError(f"{where}: an operator maps forward (and backward) to function names")
        names = {part: entry.get(part) for part in ("forward", "backward")}
        for part, name in names.items():
            if name is not None and not (isinstance(name, str) and name.isidentifier()):
                raise RegistryError(f"{where}.{part}: {name!r} is not a function name")
        shipped = MSPROBE_FUSION.get(key) == (names["forward"], names["backward"])
        found = {part: files.find(name, f"{where}.{part}") if name else None for part, name in names.items()}
        if shipped and found["forward"] is None:
            as_shipped.append(str(key))
            continue
        if names["forward"] is None:
            raise RegistryError(f"{where}: no forward function: msprobe benchmarks an operator by its forward")
        pattern = pattern_of(key, where)
        for part, name in names.items():
            if name and found[part] is None:
                shown = ", ".join(str(p) for p in files.paths) or "none named (--msprobe-functions)"
                raise RegistryError(f"{where}.{part}: missing function {name}: it is in none of the files {shown}")
        registry.add(pattern, found["forward"], origin=f"{path.name} operators.{key} ({names['forward']})")
        if names["backward"]:
            notes.append(
                f"{path.name}: {key}'s backward {names['backward']} is registered and not called, as msprobe "
                "26.2 calls none: its backward entries take autograd's of the forward"
            )
    if as_shipped:
        notes.append(
            f"{path.name}: {len(as_shipped)} operators as msprobe 26.2 ships them: the built-in references stand "
            "for its functions (docs/npu.md)"
        )
    return notes


def read_postprocess_config(path: Path, files: FunctionFiles, registry: Registry) -> list[str]:
    """Register acc_check_handlers' functions, by side, from the named files."""
    option = "--msprobe-postprocess-config"
    document = read_yaml(path, option)
    handlers = document.get("acc_check_handlers") if isinstance(document, dict) else None
    if not isinstance(handlers, dict):
        raise RegistryError(
            f"{option}: {path} has no `acc_check_handlers` mapping (msprobe's api_output_postprocess.yaml)"
        )
    by_api: dict[str, dict[str, Callable]] = {}
    shipped = []
    for side in SIDES:
        given = handlers.get(side) or {}
        if not isinstance(given, dict):
            raise RegistryError(f"{path}: acc_check_handlers.{side} maps an API to '<file>.py:<function>'")
        for key, spec in given.items():
            where = f"{path}: acc_check_handlers.{side}.{key}"
            if MSPROBE_POSTPROCESS.get((side, str(key))) == spec:
                shipped.append(str(key))  # the built-in mask stands for it (or the API has no reference at all)
                continue
            pattern = pattern_of(key, where)
            by_api.setdefault(pattern, {})[side] = handler(spec, path, files, where)
    for pattern, sides in by_api.items():
        registry.add(
            pattern,
            postprocess=Postprocess(sides.get("target"), sides.get("golden")),
            origin=f"{path.name} acc_check_handlers ({', '.join(sides)})",
        )
    if shipped:
        return [
            f"{path.name}: {len(shipped)} handlers as msprobe 26.2 ships them ({', '.join(shipped)}): the "
            "built-in masks stand for them (docs/npu.md)"
        ]
    return []


def handler(spec: Any, yaml_path: Path, files: FunctionFiles, where: str) -> Callable:
    if not isinstance(spec, str) or ":" not in spec:
        raise RegistryError(f"{where}: {spec!r} is not '<file>.py:<function>'")
    file, name = spec.rsplit(":", 1)
    if not file.endswith(".py") or not name.isidentifier():
        raise RegistryError(f"{where}: {spec!r} is not '<file>.py:<function>'")
    target = Path(os.path.expanduser(file))
    resolved = Path(os.path.realpath(target if target.is_absolute() else yaml_path.parent / target))
    if not resolved.is_file():
        raise RegistryError(f"{where}: missing module {file}: no such file {resolved}")
    return files.at(resolved, name, where)


def read(
    fusion_config: str,
    postprocess_config: str,
    functions: Sequence[str],
    base: Path,
    dump_folders: Iterable[Path],
    registry: Registry,
) -> list[str]:
    """Both files, as the options name them (relative to `base`); the header's notes back."""
    folders = list(dump_folders)
    files = FunctionFiles.named(functions, base, folders)
    notes = []
    for option, given, reader in (
        ("--msprobe-fusion-config", fusion_config, read_fusion_config),
        ("--msprobe-postprocess-config", postprocess_config, read_postprocess_config),
    ):
        if not given:
            continue
        path = base / given
        if not path.is_file():
            raise RegistryError(f"{option} {given}: no such file")
        notes += reader(path, files, registry)
    if files.paths and not (fusion_config or postprocess_config):
        raise RegistryError(
            "--msprobe-functions names files for msprobe's YAML files, and neither --msprobe-fusion-config nor "
            "--msprobe-postprocess-config is given"
        )
    return notes
