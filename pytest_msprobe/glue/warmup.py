"""What a process that checks entries pays once, paid before its first entry.

Importing PyTorch (and MindSpore) takes seconds, and the meta device's first call as long again;
paid inside the first entry, they would be that entry's time in --junitxml, in --durations and
against --msprobe-timeout. Only what the selected entries need: a resume with nothing left, or a
worker of `-k relu`, imports no more than it uses. No pytest.
"""

from __future__ import annotations

from collections.abc import Iterable

from ..frameworks import Unsupported, for_framework, output_bounds


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
