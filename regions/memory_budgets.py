"""What each process of a region may hold, derived from the machine unless configured.

Spark's driver gets its heap (`spark.driver_memory`, auto: a share of the machine); the system
keeps `SYSTEM_SHARE` (the kernel, the gateway, and the page cache in which the nodes' mapped block
files live); what is left is split evenly over the node processes and their scan workers, each held
to its part (`storage.process_memory`, kept by `storage.memory_budget`). The parts add up to no
more than the machine, so a region never leaves the kernel's OOM killer to choose a process: a scan
that needs more fails on its own.
"""

from __future__ import annotations

import re

from gateway.config import Config, ConfigError, parse_size
from regions.spark_session import driver_memory, machine_memory
from storage import default_processes

SYSTEM_SHARE = 0.15
JVM_OVERHEAD = 1.25  # a JVM holds about this much for each byte of its heap (metaspace, threads, buffers)
SMALLEST = 256 * 2**20  # below this a node process cannot start its kernels
_JVM_SIZE = re.compile(r"(\d+)([kmgt]?)", re.IGNORECASE)


def jvm_bytes(size: str) -> int:
    """Bytes of a JVM memory setting such as `4g` or `512m` (powers of 1024)."""
    m = _JVM_SIZE.fullmatch(size.strip())
    if not m:
        raise ConfigError(f"spark.driver_memory: not a JVM size: {size!r} (try 8g)")
    return int(m[1]) * 1024 ** " kmgt".index(m[2].lower() or " ")


def node_process_memory(config: Config, nodes: int, with_spark: bool = True) -> int | None:
    """The budget of each node process and scan worker (`storage.process_memory`): "none", a size,
    or "auto", the machine less the system's share and (`with_spark`: Spark's driver runs here too)
    the driver's heap and overhead, over `nodes` nodes of one process and its scan workers each."""
    setting = config.storage.process_memory
    if setting == "none":
        return None
    if setting != "auto":
        return parse_size(setting)
    left = machine_memory() * (1 - SYSTEM_SHARE)
    if with_spark:
        left -= jvm_bytes(driver_memory(config.spark.driver_memory)) * JVM_OVERHEAD
    processes = max(1, nodes) * (1 + default_processes())
    return max(SMALLEST, int(left / processes))
