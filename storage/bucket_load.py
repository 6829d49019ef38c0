"""The work a node's scans do per bucket: the measure that moving buckets between nodes balances
(seed 003's cost table, each node's cost normalized to the share of its slots' time it spent).

A node adds the CPU time each block of a scan took to the block's bucket, and the rows it read
(`BucketWork.record`): rows of one bucket may cost more than another's (a long run of one key is
read on its runs), so time, not rows, is what is balanced. `GET /v1/node` shows the totals since
the node started. Two readings `window` seconds apart give each node's cost and each of its
buckets' part of it (`costs`). A balancer with no load to measure may weigh buckets by the rows
they hold instead (`row_costs`).
"""

from __future__ import annotations

import threading
from collections import defaultdict
from collections.abc import Mapping
from typing import Any

Bucket = tuple[str, int]  # (table, bucket)
Costs = dict[str, dict[Bucket, float]]  # node -> its buckets -> their cost (a share of the node's time)


class BucketWork:
    """A node's scan CPU time per table and bucket, and its rows read, since the node started."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.seconds: dict[Bucket, float] = defaultdict(float)
        self.rows: dict[Bucket, int] = defaultdict(int)
        self.busy = 0.0  # seconds of scans, all tables

    def record(self, table: str, rows: Mapping[int, int], seconds: Mapping[int, float]) -> None:
        """One scan of `table` read `rows` (bucket -> rows of its blocks) in `seconds` (bucket -> CPU
        seconds its blocks took)."""
        with self._lock:
            self.busy += sum(seconds.values())
            for bucket in rows.keys() | seconds.keys():
                self.seconds[(table, bucket)] += seconds.get(bucket, 0.0)
                self.rows[(table, bucket)] += rows.get(bucket, 0)

    def to_json(self) -> dict[str, Any]:
        """{"busy": seconds, "tables": {table: {bucket: [seconds, rows]}}}."""
        tables: dict[str, dict[str, list[float]]] = defaultdict(dict)
        with self._lock:
            for (table, bucket), seconds in self.seconds.items():
                tables[table][str(bucket)] = [round(seconds, 6), self.rows[(table, bucket)]]
            return {"busy": round(self.busy, 6), "tables": dict(tables)}


def costs(before: Mapping[str, dict], after: Mapping[str, dict], window: float, slots: Mapping[str, int]) -> Costs:
    """Each node's buckets and their cost over the `window` seconds between two readings of the
    nodes' `BucketWork` (node -> its `to_json()`): the scan CPU seconds of a bucket over the time
    the node's `slots` had, so a node's cost is the share of its capacity its scans used (0 to 1).
    A node whose reading is missing in `after` is left out."""
    table: Costs = {}
    for node, now in after.items():
        then = before.get(node, {}).get("tables", {})
        capacity = max(window, 1e-9) * max(1, slots.get(node, 1))
        table[node] = {}
        for name, buckets in now.get("tables", {}).items():
            for bucket, (seconds, _) in buckets.items():
                earlier = then.get(name, {}).get(bucket, [0.0, 0])[0]
                table[node][(name, int(bucket))] = max(0.0, seconds - earlier) / capacity
    return table


def row_costs(rows: Mapping[str, Mapping[Bucket, int]]) -> Costs:
    """Costs in proportion to the rows each node holds (node -> bucket -> rows), summing to 1 over
    the region: what balancing weighs when there is no load to measure."""
    total = sum(sum(held.values()) for held in rows.values()) or 1
    return {node: {bucket: count / total for bucket, count in held.items()} for node, held in rows.items()}
