"""The work a node's scans do per bucket: the measure that moving buckets between nodes balances
(seed 003's cost table, each node's cost normalized to the share of its slots' time it spent).

A node adds every scan's wall time, split over the buckets the scan read in proportion to their
rows (`BucketWork.record`); `GET /v1/node` shows the totals since the node started. Two readings
`window` seconds apart give each node's cost and each of its buckets' part of it (`costs`). A
balancer that has no load to measure may weigh buckets by the rows they hold instead (`row_costs`).
"""

from __future__ import annotations

import threading
from collections import defaultdict
from collections.abc import Mapping
from typing import Any

Bucket = tuple[str, int]  # (table, bucket)
Costs = dict[str, dict[Bucket, float]]  # node -> its buckets -> their cost (a share of the node's time)


class BucketWork:
    """A node's scan time per table and bucket, and its rows read, since the node started."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.seconds: dict[Bucket, float] = defaultdict(float)
        self.rows: dict[Bucket, int] = defaultdict(int)
        self.busy = 0.0  # seconds of scans, all tables

    def record(self, table: str, rows_by_bucket: Mapping[int, int], seconds: float) -> None:
        """One scan of `table` took `seconds` and read `rows_by_bucket` (bucket -> rows of its blocks)."""
        total = sum(rows_by_bucket.values())
        with self._lock:
            self.busy += seconds
            for bucket, rows in rows_by_bucket.items():
                self.seconds[(table, bucket)] += seconds * rows / total if total else 0.0
                self.rows[(table, bucket)] += rows

    def to_json(self) -> dict[str, Any]:
        """{"busy": seconds, "tables": {table: {bucket: [seconds, rows]}}}."""
        tables: dict[str, dict[str, list[float]]] = defaultdict(dict)
        with self._lock:
            for (table, bucket), seconds in self.seconds.items():
                tables[table][str(bucket)] = [round(seconds, 6), self.rows[(table, bucket)]]
            return {"busy": round(self.busy, 6), "tables": dict(tables)}


def costs(before: Mapping[str, dict], after: Mapping[str, dict], window: float, slots: Mapping[str, int]) -> Costs:
    """Each node's buckets and their cost over the `window` seconds between two readings of the
    nodes' `BucketWork` (node -> its `to_json()`): the scan seconds of a bucket over the time the
    node's `slots` had, so a node's cost is the share of its capacity its scans used (0 to 1 while
    scans queue for no slot). A node whose reading is missing in `after` is left out."""
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
