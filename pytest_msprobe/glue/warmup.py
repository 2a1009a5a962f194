"""What a process that checks entries pays once, paid before its first entry.

Importing PyTorch (and MindSpore) takes seconds, and the meta device's first call as long again;
paid inside the first entry, they would be that entry's time in --junitxml, in --durations and
against --msprobe-timeout. Only what the selected entries need: a resume with nothing left, or a
worker of `-k relu`, imports no more than it uses. No pytest.

What is imported then lives as long as the process, so it is frozen out of the garbage collector's
sight (gc.freeze, as the dump's parse freezes its index) until the run ends: its full collections
between entries walk the entries' objects alone, not torch's (0.35 s of CPU on a 266-entry GPT
dump, bench/timing/results_fixed_costs.md).
"""

from __future__ import annotations

import atexit
import gc
from collections.abc import Iterable

from ..frameworks import Unsupported, for_framework, output_bounds

_freezes_at_exit = False


def warm_up(selected: Iterable[tuple[str, str]], recorded: bool) -> None:
    """Import the frameworks of the selected entries, (framework, API) pairs (a framework that
    cannot be had SKIPs its entries, which say why); MindSpore itself only where it runs the
    tested side; and the meta device where one of them is sized there."""
    apis: dict[str, set[str]] = {}
    for framework, api in selected:
        apis.setdefault(framework, set()).add(api)
    for name, names in apis.items():
        try:
            for_framework(name)
            if any(output_bounds.sized_on_meta(name, api) for api in names):
                output_bounds.warm_up()  # both frameworks size their calls on PyTorch's meta device
            if name == "mindspore" and not recorded:
                from ..frameworks import mindspore

                mindspore.mindspore()
        except Unsupported:
            continue
    if apis:
        gc.freeze()


def thaw() -> None:
    """The run's end: what is frozen (by warm_up, by the dump's parse) is the collector's again, so
    that an in-process run's session, items and dumps do not outlive it, and is frozen anew at the
    interpreter's exit, whose last collections (after the atexit hooks) would walk every object
    torch made: 0.4 s of CPU after `import torch` alone, most of a second in a process that checked
    a dump. The run's files are closed by then."""
    global _freezes_at_exit
    if not gc.get_freeze_count():
        return
    gc.unfreeze()
    if not _freezes_at_exit:
        _freezes_at_exit = True
        atexit.register(gc.freeze)
