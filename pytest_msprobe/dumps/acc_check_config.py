"""msprobe's own choice of APIs, as a user carries it over: the white and black lists of its acc_check
config (config.json's `acc_check` section, or its config.yaml), read and checked as msprobe 26.2.0
reads and checks them. No pytest.

msprobe matches a list entry against the API name of a call: what lies between the entry's type and
its number (`conv2d` in `Functional.conv2d.0`, `linalg.norm` in `Torch.linalg.norm.0`), exactly and
case-sensitively, whatever the type: `add` names `Tensor.add` and `Torch.add` alike
(acc_check.py: extract_basic_api_segments, blacklist_and_whitelist_filter). The black list wins over
the white list, and seven APIs are always on it. A name msprobe does not wrap is refused when the
config is read (pt_config.py: ACCCheckConfig.check_filter_list_config); here it is a usage error
naming it and the file.
"""

from __future__ import annotations

import functools
import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .. import readback
from ..options import Options
from ..untrusted import cut, printable
from . import apis
from .dump import EntryName

# acc_check.py's unsupported_api_list: added to every black list.
FIXED_BLACK_LIST = ("to", "empty", "empty_like", "empty_strided", "new_empty", "new_empty_strided", "empty_with_format")
ACC_CHECK_APIS = Path(__file__).with_name("acc_check_apis.txt")
# msprobe's own sections of support_wrap_ops.yaml whose names a list may hold (ACCCheckConfig.WrapApi).
_LIST_SECTIONS = ("functional", "tensor", "torch", "torch_npu")
# config.yaml's keys (api_accuracy_checker/common/config.py: Config.validate refuses any other).
YAML_KEYS = ("white_list", "black_list", "error_data_path", "precision", "quantization_api_list")
# What msprobe reads from a config and this plugin does otherwise: said in the report header.
NOT_USED = {
    "error_data_path": "--msprobe-save-error-data DIR says where error data goes",
    "precision": "the CSVs' number format is the layout's",
    "quantization_api_list": "the dtype standard takes a quantisation's int8 output within one unit, by its API's name",
}


class ConfigError(ValueError):
    """A config that cannot be taken: the message names the file and what is wrong."""


@dataclass(frozen=True)
class ApiLists:
    """Which APIs a run checks, by msprobe's rule: the black list (and the fixed one) first, then the
    white list where it names any API."""

    white: tuple[str, ...] = ()
    black: tuple[str, ...] = ()

    def why_left_out(self, name: EntryName | None) -> str | None:
        """Why msprobe would not check this entry, or None where it would; an entry without an API
        name (not `<Type>.<api>.<n>.<direction>`) is named by no list, so a white list leaves it out."""
        if name is None:
            return "not in the white list" if self.white else None
        if name.api in self.black:
            return "in the black list"
        if name.api in FIXED_BLACK_LIST:
            return "in msprobe's fixed black list"
        if self.white and name.api not in self.white:
            return "not in the white list"
        return None

    def describe(self) -> str:
        white = ", ".join(self.white) if self.white else "none (every API)"
        black = ", ".join(self.black) if self.black else "none"
        return f"white list {white}; black list {black}, and msprobe's fixed one ({', '.join(FIXED_BLACK_LIST)})"

    def to_dict(self) -> dict[str, list[str]]:
        return {"white": list(self.white), "black": list(self.black)}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> ApiLists:
        return cls(tuple(data.get("white", ())), tuple(data.get("black", ())))


@dataclass(frozen=True)
class AccCheckConfig:
    """What a user's msprobe config says about the choice of APIs, and what of it this run leaves aside."""

    path: Path
    white: tuple[str, ...] | None  # None: the file does not set it
    black: tuple[str, ...] | None
    not_used: tuple[str, ...] = ()  # `error_data_path (--msprobe-save-error-data DIR says where ...)`


@functools.cache
def known_names() -> frozenset[str]:
    """The names a list may hold: msprobe 26.2.0's, and those an earlier msprobe wrapped (apis.py's lists)."""
    names = {
        line.strip()
        for line in ACC_CHECK_APIS.read_text(encoding="utf-8").splitlines()
        if line.strip() and not line.startswith("#")
    }
    for section in _LIST_SECTIONS:
        names |= apis.wrapped(apis.PYTORCH, section)
    return frozenset(names)


def check_names(value: Any, key: str, where: str) -> tuple[str, ...]:
    """A white or black list as msprobe takes it: a list of strings, each an API msprobe wraps."""
    if not isinstance(value, list) or not all(isinstance(item, str) for item in value):
        raise ConfigError(f"{where}: {key} must be a list of API names (strings), not {_shown(value)}")
    unknown = [name for name in value if name not in known_names()]
    if unknown:
        names = ", ".join(cut(printable(repr(name)), 100) for name in unknown[:10])
        more = f" and {len(unknown) - 10} more" if len(unknown) > 10 else ""
        raise ConfigError(
            f"{where}: {key} names {names}{more}, not an API msprobe wraps: a list names an API without its "
            "type, as msprobe's lists do (`conv2d`, not `Functional.conv2d`; `__add__`, `linalg.norm`)"
        )
    return tuple(dict.fromkeys(value))


def read_config(path: Path) -> AccCheckConfig:
    """msprobe's config.json (its `acc_check` section) or config.yaml, told apart by the suffix."""
    suffix = path.suffix.lower()
    if suffix not in (".json", ".yaml", ".yml"):
        raise ConfigError(f"{path}: not msprobe's config.json or config.yaml (a .json, .yaml or .yml file)")
    raw = _read(path)
    if suffix == ".json":
        return _from_json(path, raw)
    return _from_yaml(path, raw)


def _read(path: Path) -> bytes:
    # A path the user named: read as named (a link followed), as a dump.json is.
    try:
        return readback.read_bytes(path, readback.MAX_CONFIG, follow_links=True)
    except readback.Unreadable as exc:
        raise ConfigError(str(exc)) from None


def _from_json(path: Path, raw: bytes) -> AccCheckConfig:
    try:
        document = json.loads(raw.decode("utf-8-sig"))
    except (UnicodeDecodeError, ValueError) as exc:
        raise ConfigError(f"{path}: not valid JSON: {exc}") from None
    if not isinstance(document, dict):
        raise ConfigError(f"{path}: msprobe's config.json is a JSON object, not {_shown(document)}")
    section = document.get("acc_check", {})
    if not isinstance(section, dict):
        raise ConfigError(f"{path}: its acc_check section must be an object, not {_shown(section)}")
    where = f"{path}: acc_check"
    # msprobe's ACCCheckConfig: both lists default to empty (every API) when the section lacks them.
    white = check_names(section.get("white_list", []), "white_list", where)
    black = check_names(section.get("black_list", []), "black_list", where)
    others = [key for key in section if key not in ("white_list", "black_list")]
    return AccCheckConfig(path, white, black, tuple(_not_used(others)))


def _from_yaml(path: Path, raw: bytes) -> AccCheckConfig:
    try:
        import yaml  # type: ignore[import-untyped]  # msprobe depends on it; this plugin only here
    except ImportError:
        raise ConfigError(f"{path}: reading msprobe's config.yaml needs PyYAML: pip install pyyaml") from None
    try:
        document = yaml.safe_load(raw.decode("utf-8-sig"))
    except (UnicodeDecodeError, yaml.YAMLError) as exc:
        raise ConfigError(f"{path}: not valid YAML: {cut(str(exc), 300)}") from None
    document = {} if document is None else document
    if not isinstance(document, dict):
        raise ConfigError(f"{path}: msprobe's config.yaml maps keys to values, not {_shown(document)}")
    unknown = [key for key in document if key not in YAML_KEYS]
    if unknown:
        raise ConfigError(
            f"{path}: {cut(printable(str(unknown[0])), 100)} is not a key of msprobe's config.yaml "
            f"(it takes {', '.join(YAML_KEYS)})"
        )
    white = check_names(document["white_list"], "white_list", str(path)) if "white_list" in document else None
    black = check_names(document["black_list"], "black_list", str(path)) if "black_list" in document else None
    others = [key for key in document if key not in ("white_list", "black_list")]
    return AccCheckConfig(path, white, black, tuple(_not_used(others)))


def _not_used(keys: Iterable[Any]) -> Iterable[str]:
    for key in keys:
        shown = cut(printable(str(key)), 100)
        yield f"{shown} ({NOT_USED[key]})" if key in NOT_USED else shown


def _shown(value: Any) -> str:
    return f"a {type(value).__name__}" if not isinstance(value, (str, int, float)) else cut(printable(repr(value)), 100)


def api_lists(
    config: AccCheckConfig | None, white: tuple[str, ...] | None, black: tuple[str, ...] | None
) -> ApiLists | None:
    """The lists a run uses: each option's (command line, then ini) over the config file's; None where
    neither names any (the run checks every entry, msprobe's fixed black list included)."""
    if config is None and white is None and black is None:
        return None
    if white is None:
        white = config.white if config is not None else None
    if black is None:
        black = config.black if config is not None else None
    return ApiLists(white or (), black or ())


def run_lists(base: Path, options: Options) -> tuple[ApiLists | None, list[str]]:
    """The lists of a run (--msprobe-config, --msprobe-white-list, --msprobe-black-list, or their ini
    keys; paths from `base`), and the report header's lines on them; ConfigError names what is wrong."""
    config = read_config(base / options.config) if options.config else None
    white, black = (
        None
        if names is None
        else check_names(list(names), key, f"--msprobe-{key.replace('_', '-')} (ini msprobe_{key})")
        for key, names in (("white_list", options.white_list), ("black_list", options.black_list))
    )
    lists = api_lists(config, white, black)
    if lists is None:
        return None, []
    given = [
        f"--msprobe-{key} (or its ini key)"
        for key, names in (("white-list", white), ("black-list", black))
        if names is not None
    ]
    sources = ", ".join([*([printable(str(config.path))] if config is not None else []), *given])
    notes = [f"API lists as msprobe's acc_check takes them ({sources}): {lists.describe()}"]
    if config is not None and config.not_used:
        notes.append(f"{printable(config.path.name)}: not used here: {'; '.join(config.not_used)}")
    return lists, notes
