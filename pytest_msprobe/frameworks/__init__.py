"""One module per framework; each is imported only when a dump of it is checked."""

from __future__ import annotations

import importlib
from types import ModuleType

_MODULES = {"pytorch": "torch", "mindtorch": "torch", "mindspore": "mindspore"}


def for_framework(framework: str) -> ModuleType:
    """The module that runs entries of dumps written by `framework`."""
    name = _MODULES.get(framework)
    if name is None:
        from ..outcome import Unsupported

        raise Unsupported(f"dumps of framework {framework!r} are not supported")
    return importlib.import_module(f"{__name__}.{name}")
