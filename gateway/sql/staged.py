"""A join plan made ready for Spark: what the run learned on the nodes before handing it over."""

from __future__ import annotations

from dataclasses import dataclass, field

import pyarrow as pa

from gateway.sql.plan import Edge, Plan, TableQuery


@dataclass
class Staged(Plan):
    """A ``spark`` plan once its sub-queries were made small on the nodes (`gateway.sql.run.stage`):
    its own copies of the plan's sub-queries, with the semi-join filters added; its own copy of the
    statement, with the joins the coordinator has already done left out; the rows fetched; how
    each sub-query reaches Spark. The plan it was made from is left as it is."""

    inputs: dict[int, pa.Table] = field(default_factory=dict, repr=False)  # rows fetched before Spark runs, by scan
    deliveries: dict[int, str] = field(default_factory=dict)  # how each sub-query reaches Spark, by scan
    dropped: dict[int, str] = field(default_factory=dict)  # sub-queries Spark need not join, and why

    @classmethod
    def of(cls, plan: Plan) -> Staged:
        scans = [scan.copy() for scan in plan.scans]
        edges = [
            Edge(scans[e.left.index], e.left_column, scans[e.right.index], e.right_column, e.both_ways)
            for e in plan.edges
        ]
        return cls(plan.engine, plan.query.copy(), scans, plan.local, edges, list(plan.notes))

    def delivery(self, scan: TableQuery) -> str | None:
        return self.deliveries.get(scan.index)
