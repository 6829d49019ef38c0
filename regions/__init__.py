"""Composing a region: the gateway, its routers and nodes as processes on this machine
(`LocalRegion`) or in one process (`EmbeddedRegion`), and the region's Spark session, which the
composer builds here and hands to the gateway's engine. Balancing between regions is not built
yet."""

from regions.embedded import EmbeddedRegion
from regions.launcher import LocalRegion, interrupt_on_sigterm
from regions.memory_budgets import node_memory_budget
from regions.spark_session import machine_memory, session_factory, spark_options, spark_session, stop_all

__all__ = [
    "EmbeddedRegion",
    "LocalRegion",
    "interrupt_on_sigterm",
    "machine_memory",
    "node_memory_budget",
    "session_factory",
    "spark_options",
    "spark_session",
    "stop_all",
]
