"""The hooks pytest-msprobe adds to pytest (pytest_addhooks in plugin.py), as pytest-xdist's
newhooks.py declares its own. Implement them in a conftest.py or a plugin: docs/custom-ops.md."""

from __future__ import annotations

from typing import TYPE_CHECKING

import pytest

if TYPE_CHECKING:
    from .frameworks.references import Registry


def pytest_msprobe_references(registry: Registry, config: pytest.Config) -> None:
    """Register what stands behind APIs without a torch counterpart: a team's own operators
    (`myteam.gated_silu`, a torch.ops namespace msprobe recorded) or torch_npu's (`NPU.npu_rms_norm`,
    replacing the built-in reference).

    Called once per process that checks a dump (the xdist controller and every worker alike),
    before any entry runs::

        def pytest_msprobe_references(registry):
            registry.add(
                "myteam.gated_silu",                 # <Type>.<api> as the dump names it; fnmatch patterns too
                gated_silu_reference,                # float64 forward, called as the op is
                magnitude=gated_silu_magnitude,      # or Magnitude.SUMS_AND_PRODUCTS / Magnitude.COMPOSITION
                unwritten=rows_beyond_valid,         # outputs' elements a correct kernel may leave unwritten
                device=None,                         # the tested side's call, where torch.ops.<ns>.<op> is not it
            )

    A registration error (a field that is not callable, a name two places register) is a usage
    error naming both places. The built-in references register first (this plugin's own
    implementation, tryfirst).
    """
