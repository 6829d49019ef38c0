"""A join plan made ready for Spark: what the run learned on the nodes before handing it over."""

from __future__ import annotations

from dataclasses import dataclass, field

import pyarrow as pa

from gateway.sql.plan import Plan, TableQuery


@dataclass
class Staged(Plan):
    """A ``spark`` plan once its sub-queries were made small on the nodes (`gateway.sql.run.stage`):
    the semi-join filters added to its sub-queries, the joins the coordinator has already done
    left out of its statement, the rows fetched, how each sub-query reaches Spark."""

    inputs: dict[int, pa.Table] = field(default_factory=dict, repr=False)  # rows fetched before Spark runs, by scan
    deliveries: dict[int, str] = field(default_factory=dict)  # how each sub-query reaches Spark, by scan
    dropped: dict[int, str] = field(default_factory=dict)  # sub-queries Spark need not join, and why

    @classmethod
    def taking_over(cls, plan: Plan) -> Staged:
        """A staged plan made of `plan`'s parts, not of copies: the run has no other use for the
        plan, and copying a statement costs as much as a planning pass."""
        return cls(plan.engine, plan.query, plan.scans, plan.local, plan.edges, plan.notes)

    def delivery(self, scan: TableQuery) -> str | None:
        return self.deliveries.get(scan.index)
