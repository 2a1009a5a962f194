"""What a process that checks entries pays once, paid at its session's start.

Importing PyTorch (and MindSpore) takes seconds; paid inside the first entry, it would be
that entry's time in --junitxml and in --durations. No pytest.
"""

from __future__ import annotations

from collections.abc import Iterable

from ..frameworks import Unsupported, for_framework, output_bounds


def warm_up(frameworks: Iterable[str], recorded: bool) -> None:
    """Import the frameworks the dumps need (a framework that cannot be had SKIPs its entries,
    which say why). MindSpore itself only where it runs the tested side."""
    for name in frameworks:
        try:
            for_framework(name)
            output_bounds.warm_up()  # both size their calls on PyTorch's meta device
            if name == "mindspore" and not recorded:
                from ..frameworks import mindspore

                mindspore.mindspore()
        except Unsupported:
            continue
