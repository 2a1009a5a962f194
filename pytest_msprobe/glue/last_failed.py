"""pytest glue for --lf and --ff: which settings the failures they re-run were found under.

pytest's cache keeps the ids of the last run's failures, not the settings that made them fail: a
`--lf` after a run under `--msprobe-device cpu` re-runs those entries under whatever this run
says. The settings that decide a verdict are kept in the cache beside them, and a run that
re-runs failures under other settings says so in its header.
"""

from __future__ import annotations

from dataclasses import asdict
from typing import Any

import pytest

from ..options import Options

CACHE_KEY = "msprobe/verdict_settings"
# The settings a verdict depends on; where the files go, resume and the like do not change it.
VERDICT_SETTINGS = (
    "dumps", "mode", "device", "seed", "standard", "cosine", "max_abs_err", "tolerances", "strict",
    "fusion_config", "postprocess_config", "functions",
)  # fmt: skip


def verdict_settings(options: Options) -> dict[str, Any]:
    values = asdict(options)
    return {name: list(values[name]) if isinstance(values[name], tuple) else values[name] for name in VERDICT_SETTINGS}


def differences(before: dict[str, Any], now: dict[str, Any]) -> list[str]:
    """`device cpu -> recorded`, one per setting that changed."""
    return [
        f"{name} {_shown(before.get(name))} -> {_shown(now.get(name))}"
        for name in VERDICT_SETTINGS
        if before.get(name) != now.get(name)
    ]


def _shown(value: Any) -> str:
    if isinstance(value, list):
        return ",".join(map(str, value)) or "none"
    return str(value)


class LastFailed:
    """Keeps the settings of each run in pytest's cache; under --lf/--ff, names what changed."""

    def __init__(self, config: pytest.Config, options: Options):
        self.config = config
        self.now = verdict_settings(options)

    def pytest_report_header(self, config: pytest.Config) -> list[str]:
        cache = getattr(config, "cache", None)
        if cache is None or not (config.getoption("lf", False) or config.getoption("failedfirst", False)):
            return []
        before = cache.get(CACHE_KEY, None)
        if not isinstance(before, dict):
            return []
        changed = differences(before, self.now)
        if not changed:
            return []
        return [
            "msprobe: --lf/--ff re-run the failures of a run made with other settings ("
            + "; ".join(changed)
            + "): their verdicts here may differ for that reason alone"
        ]

    def pytest_sessionfinish(self, session: pytest.Session) -> None:
        cache = getattr(self.config, "cache", None)
        if cache is not None and not hasattr(self.config, "workerinput"):
            cache.set(CACHE_KEY, self.now)
