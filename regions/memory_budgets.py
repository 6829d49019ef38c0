"""What each process of a region may hold, derived from the machine unless configured.

Spark's driver gets its heap (`spark.driver_memory`, auto: a share of the machine) and its JVM's
overhead; the system keeps `SYSTEM_SHARE` (the kernel, the gateway, and the page cache in which the
nodes' mapped block files live); what is left is split over the node processes and their scan
workers, a node process taking `NODE_SHARES` parts to a worker's one (it runs every scan's first
blocks and a chunk a worker could not, and merges what they send). Each process is held to its
parts (`storage.node_memory`, kept by `storage.memory_budget`), so the region as a whole never
leaves the kernel's OOM killer to choose a process: a scan that needs more fails on its own.
"""

from __future__ import annotations

import re

from regions.config import Config
from regions.spark_session import driver_memory, machine_memory
from storage import ConfigError, parse_size

SYSTEM_SHARE = 0.10
JVM_OVERHEAD = 1.10  # a JVM holds up to this much for each byte of its heap (metaspace, threads, buffers)
NODE_SHARES = 3
SMALLEST_PART = 128 * 2**20  # a floor, on a machine too small for the region (the sum then exceeds it)
_JVM_SIZE = re.compile(r"(\d+)\s*([kmgt]?)b?", re.IGNORECASE)


def jvm_bytes(size: str) -> int:
    """Bytes of a JVM memory setting as Spark reads it: `4g`, `512m`, `4gb`; a bare number is MiB."""
    m = _JVM_SIZE.fullmatch(size.strip())
    if not m:
        raise ConfigError(f"spark.driver_memory: not a JVM size: {size!r} (try 8g)")
    return int(m[1]) * 1024 ** " kmgt".index(m[2].lower() or "m")


def node_memory_budget(config: Config, nodes: int, with_spark: bool = True) -> int | None:
    """The budget of each node process (`storage.node_memory`): "none", a size, or "auto", the
    machine less the system's share and (`with_spark`: Spark's driver runs here too) the driver's
    heap and overhead, over `nodes` nodes of one process and its scan workers each. The node's
    scan workers each get a `NODE_SHARES`-th of it."""
    setting = config.storage.node_memory
    if setting == "none":
        return None
    if setting != "auto":
        return parse_size(setting)
    left = machine_memory() * (1 - SYSTEM_SHARE)
    if with_spark:
        left -= jvm_bytes(driver_memory(config.spark.driver_memory)) * JVM_OVERHEAD
    parts = max(1, nodes) * (NODE_SHARES + config.storage.scan_processes)
    return NODE_SHARES * max(SMALLEST_PART, int(left / parts))
