"""Benchmarks and load tests; each runs as `python -m loadtests.<name>`.

The public names below serve the demo and the `cxg loadtest` command (`loadtests.cli`): a
scenario, the simulated users that play it against gateways, the measures of a run and its logs.
They load their module on first use (PEP 562), so that running one benchmark loads no other.
"""

from __future__ import annotations

import importlib
from typing import Any

_FACE: dict[str, tuple[str, ...]] = {
    "cli": ("report", "run_load"),
    "logs": ("write_logs",),
    "measures": ("Summary", "summarize"),
    "scenario": ("Scenario", "tpch_list"),
    "simulator": ("Run", "Simulator", "Target"),
    "tpch_queries": ("query",),
}
_HOME = {name: module for module, names in _FACE.items() for name in names}
__all__ = sorted(_HOME)


def __getattr__(name: str) -> Any:
    if name not in _HOME:
        raise AttributeError(f"module 'loadtests' has no attribute {name!r}")
    return getattr(importlib.import_module(f"loadtests.{_HOME[name]}"), name)


def __dir__() -> list[str]:
    return __all__
