"""Composing a region: the whole system's configuration (`Config`, read by `load_config` from one
file whose sections each floor owns; `defaults_toml` prints it at its defaults), the gateway built
from it (`region_gateway`), its routers and nodes as processes on this machine (`LocalRegion`) or
in one process (`EmbeddedRegion`), the region's Spark session, which the composer builds here and
hands to the gateway's engine, and a Spark standalone cluster from the pinned wheel. Tables moved
between nodes and regions (`plan_copy`, `plan_rebalance`, `run_move`). Balancing between regions:
the methods (`method`) and the cross-simulation of seed 004 §5.2 that measures them (`simulate`);
live, each gateway's part (`regions.interregional`) and the central balancer of the centralized
method (`CentralBalancer`).

The public names below load their module on first use (`lazy_loader.attach`, PEP 562), so that a
command loads only what it composes: reading the configuration starts no Spark, and the
simulation of balancing loads neither Spark nor the gateway.
"""

from __future__ import annotations

import lazy_loader

_FACE: dict[str, tuple[str, ...]] = {
    "balancing": ("METHODS", "WEIGHTS", "Centralized", "Decentralized", "IdlePull", "NoBalancing", "method"),
    "central_balancer": ("CentralBalancer",),
    "config": ("Config", "load_config"),
    "config_defaults": ("defaults_toml",),
    "cross_figures": ("method_figures",),
    "cross_simulation": ("Experiment", "Outcome", "run_methods", "simulate"),
    "embedded": ("EmbeddedRegion",),
    "launcher": ("LocalRegion", "interrupt_on_sigterm"),
    "memory_budgets": ("NODE_SHARES", "node_memory_budget"),
    "redistribution": (
        "SERVED_TIMEOUT_S",
        "RegionView",
        "measure_costs",
        "plan_copy",
        "plan_nodes",
        "plan_placement",
        "plan_rebalance",
        "retire_everywhere",
        "run_move",
        "wait_served",
    ),
    "region_gateway": ("gateway_app", "region_gateway"),
    "sections": ("BalancingConfig", "Peer", "RegionConfig"),
    "spark_session": (
        "check_master",
        "machine_memory",
        "session_factory",
        "spark_options",
        "spark_session",
        "stop_all",
    ),
    "standalone": (
        "SPARK_MASTER",
        "SPARK_WORKER",
        "StandaloneCluster",
        "master_args",
        "role_command",
        "role_environment",
        "worker_args",
    ),
}
__getattr__, __dir__, __all__ = lazy_loader.attach(__name__, submod_attrs=_FACE)
