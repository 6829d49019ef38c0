"""Composing a region: the whole system's configuration (`Config`, read by `load_config` from one
file whose sections each floor owns; `defaults_toml` prints it at its defaults), the gateway built
from it (`region_gateway`), its routers and nodes as processes on this machine (`LocalRegion`) or
in one process (`EmbeddedRegion`), and the region's Spark session, which the composer builds here
and hands to the gateway's engine. Balancing between regions: the methods
(`regions.balancing`) and the cross-simulation of seed 004 §5.2 that measures them
(`regions.cross_simulation`); live, each gateway's part (`regions.interregional`) and the
central balancer of the centralized method (`regions.central_balancer`)."""

from regions.balancing import Centralized, Decentralized, IdlePull, NoBalancing, method
from regions.config import Config, load_config
from regions.config_defaults import defaults_toml
from regions.cross_simulation import Experiment, Outcome, simulate
from regions.embedded import EmbeddedRegion
from regions.launcher import LocalRegion, interrupt_on_sigterm
from regions.memory_budgets import node_memory_budget
from regions.region_gateway import gateway_app, region_gateway
from regions.sections import BalancingConfig, Peer, RegionConfig
from regions.spark_session import (
    check_master,
    machine_memory,
    session_factory,
    spark_options,
    spark_session,
    stop_all,
)

__all__ = [
    "BalancingConfig",
    "Centralized",
    "Config",
    "Decentralized",
    "EmbeddedRegion",
    "Experiment",
    "IdlePull",
    "LocalRegion",
    "NoBalancing",
    "Outcome",
    "Peer",
    "RegionConfig",
    "check_master",
    "defaults_toml",
    "gateway_app",
    "interrupt_on_sigterm",
    "load_config",
    "machine_memory",
    "method",
    "node_memory_budget",
    "region_gateway",
    "session_factory",
    "simulate",
    "spark_options",
    "spark_session",
    "stop_all",
]
