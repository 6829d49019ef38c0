"""The load tester the product ships: `cxg loadtest`, the demo's load, the Locust file.

The public names below serve the demo and the `cxg loadtest` command (`loadtests.cli`): a
scenario, the simulated users that play it against gateways, the measures of a run and its logs.
They load their module on first use (`lazy_loader.attach`, PEP 562), so that a command loads only
what it uses. The benchmarks, which build on these, are `benchmarks/`, above every floor.
"""

from __future__ import annotations

import lazy_loader

_FACE: dict[str, tuple[str, ...]] = {
    "cli": ("report", "run_load"),
    "logs": ("write_logs",),
    "measures": ("Summary", "summarize"),
    "output": ("console", "machine", "print_table", "pyplot", "save_figure", "write_json"),
    "scenario": ("Scenario", "tpch_list"),
    "simulator": ("Run", "Simulator", "Target"),
    "tpch_queries": ("query",),
}
__getattr__, __dir__, __all__ = lazy_loader.attach(__name__, submod_attrs=_FACE)
