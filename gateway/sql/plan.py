"""The plan of a query, a description with no data in it, and its EXPLAIN.

A plan names its engine: ``coordinator`` (no table: evaluated where the query arrived),
``nodes`` (one table: everything runs on the storage nodes, the coordinator finishes), ``node``
(every table it reads is whole on one node: that node runs the select-project sub-query of every
table reference and its embedded DataFusion joins them and evaluates everything above),
``colocated`` (its hash-placed tables are joined on their common key: every node holding their
buckets does what ``node`` does over its own buckets, and the coordinator merges the nodes' rows,
`Merge`) or ``spark`` (the sub-queries run on the nodes, Spark joins them and evaluates everything
above).
`gateway.sql.planner` builds plans; `gateway.sql.stage` completes one before it is executed: it
answers the subqueries the plan lists as `first` and plans the query again with their answers, and
makes a ``spark`` plan's sub-queries smaller (recorded in the sub-queries' filters, `reductions` and
`rows`, and in the plan's `deliveries` and `dropped`, so that EXPLAIN ANALYZE shows it).
"""

from __future__ import annotations

import functools
from dataclasses import dataclass, field

from sqlglot import exp

from gateway.sql.catalog import TableInfo
from gateway.sql.check import CheckedQuery
from gateway.sql.colocation import Layout
from gateway.sql.node_dialect import NodeSql, node_text
from gateway.sql.spark_dialect import spark_text
from gateway.sql.tree import brief
from storage import Aggregate, Expr, Named, ScanRequest, conjoin


@dataclass
class TableQuery:
    """The select-project sub-query of one table reference: what it asks of the nodes."""

    index: int
    table: str
    alias: str
    info: TableInfo
    conjuncts: list[exp.Expression] = field(default_factory=list)  # moved out of the query
    implied: list[exp.Expression] = field(default_factory=list)  # derived from ORs, also kept above
    filters: list[Expr] = field(default_factory=list)
    computed: dict[str, tuple[exp.Expression, Expr]] = field(default_factory=dict)
    columns: list[str] = field(default_factory=list)
    reductions: list[str] = field(default_factory=list)  # semi- and anti-join filters added at run time
    rows: int | None = None  # rows the sub-query returns, when counted before Spark runs
    view: str = ""
    group_by: list[Named] = field(default_factory=list)  # pre-aggregated or distinct: its keys
    aggregates: list[Aggregate] = field(default_factory=list)  # ... and partial aggregates
    partials: list[str] = field(default_factory=list)  # the partial aggregates, for EXPLAIN

    def request(self) -> ScanRequest:
        """The scan each node runs: rows that pass every filter, projected or grouped."""
        predicate = conjoin(self.filters)
        if self.group_by:
            return ScanRequest(
                self.table, filter=predicate, group_by=tuple(self.group_by), aggregates=tuple(self.aggregates)
            )
        columns = tuple(Named.column(c) for c in self.columns)
        computed = tuple(Named(name, ir) for name, (_, ir) in self.computed.items())
        return ScanRequest(self.table, columns, computed, predicate)

    def explain(self) -> list[str]:
        lines = [f"[{self.index}] {self.table} AS {self.alias} on {self.info.where()}"]
        lines.append(f"    columns: {', '.join(self.columns)}")
        for name, (expression, _) in self.computed.items():
            lines.append(f"    computed: {name} = {expression.sql()}")
        for conjunct in self.conjuncts:
            lines.append(f"    filter: {brief(conjunct)}")
        for implied in self.implied:
            lines.append(f"    implied filter: {brief(implied)}")
        keys = ", ".join(k.name for k in self.group_by)
        if self.aggregates:
            lines.append(f"    pre-aggregated on the nodes: group by {keys}; {', '.join(self.partials)}")
        elif self.group_by:
            lines.append(f"    distinct on the nodes: {keys} (the subquery's rows are only tested)")
        for reduction in self.reductions:
            lines.append(f"    {reduction}")
        if self.rows is not None:
            lines.append(f"    rows: {self.rows:,}")
        return lines


@dataclass
class LocalQuery:
    """A one-table query run on the nodes; the coordinator finishes it."""

    scan: TableQuery | None  # None: no table, the coordinator evaluates the outputs alone
    request: ScanRequest | None  # the scan sent to each node (None without a table)
    aggregating: bool
    keys: list[str]  # group key columns of the merged partial result
    outputs: list[tuple[str, Expr]]  # result columns over the merged result
    having: Expr | None = None
    order: list[tuple[Expr, bool, bool]] = field(default_factory=list)  # (key, descending, nulls first)
    limit: int | None = None
    offset: int = 0


@dataclass(frozen=True)
class Edge:
    """An equality between two sub-queries' columns that lets one's values filter the other:
    an inner equi-join (both ways), or a correlated subquery's condition (outer to inner only)."""

    left: TableQuery
    left_column: str
    right: TableQuery
    right_column: str
    both_ways: bool = True

    def directions(self) -> list[tuple[TableQuery, str, TableQuery, str]]:
        forward = [(self.left, self.left_column, self.right, self.right_column)]
        if self.both_ways:
            forward.append((self.right, self.right_column, self.left, self.left_column))
        return forward


@dataclass
class Merge:
    """How the nodes' rows of a ``colocated`` plan become the answer: `statement` (DataFusion's SQL
    over them as the table ``partials``; None: they are the answer as they come), described by
    `how`. `whole` is the query before it was split, which Spark answers instead if a node's engine
    cannot run its part."""

    layout: Layout
    keys: dict[str, str]  # co-located table -> its key column
    replicated: list[str]
    statement: exp.Select | None
    how: str
    whole: CheckedQuery

    @functools.cached_property
    def sql(self) -> str | None:
        """Written once: a kept plan is merged again for each run of its query."""
        return None if self.statement is None else node_text(self.statement).query

    def explain(self) -> list[str]:
        keys = ", ".join(f"{table} on {key}" for table, key in self.keys.items())
        reads = ", ".join(f"{node} (buckets {_span(b)})" for node, b in self.layout.reads)
        lines = [f"co-located: {keys}; {self.layout.buckets} buckets, each node reading its own: {reads}"]
        if self.replicated:
            lines.append(f"replicated, read on each of those nodes: {', '.join(self.replicated)}")
        return lines

    def explain_merge(self) -> list[str]:
        lines = [f"coordinator: {self.how}"]
        if self.statement is not None:
            lines.append("DataFusion SQL over the nodes' rows (partials), at the coordinator:")
            lines += ["  " + line for line in self.sql.splitlines()]
        return lines


def _span(buckets: tuple[int, ...]) -> str:
    return ", ".join(map(str, buckets[:8])) + (f" and {len(buckets) - 8} more" if len(buckets) > 8 else "")


ENGINES = {
    "nodes": "storage nodes: select-project and partial aggregates; coordinator: reduce/final",
    "node": "one storage node: select-project sub-queries on compressed data, DataFusion joins and everything above",
    "colocated": "every node holding buckets of the co-located tables: select-project sub-queries over its "
    "own buckets, DataFusion joins them; coordinator: merges the nodes' rows",
    "spark": "storage nodes: select-project sub-queries; Spark: joins and everything above them",
    "gathered": "storage nodes: select-project sub-queries, fetched whole (few rows); coordinator: DataFusion "
    "joins them and evaluates everything above them (no Spark)",
    "coordinator": "coordinator (no table)",
}


@dataclass
class Plan:
    engine: str  # "nodes", "node", "colocated", "spark", "gathered" (staged) or "coordinator"
    # the planner's own copy: for "spark", the statement Spark runs over the views; for "colocated",
    # each node's part (its names are the whole query's)
    query: CheckedQuery
    scans: list[TableQuery] = field(default_factory=list)
    local: LocalQuery | None = None
    edges: list[Edge] = field(default_factory=list)
    # one-table subqueries the stage answers on the nodes first, innermost first; the query is then
    # planned again from `written` with their answers in place
    first: list[Plan] = field(default_factory=list)
    written: CheckedQuery | None = None  # the query as checked, when `first` is not empty
    notes: list[str] = field(default_factory=list)  # what the stage evaluated before planning again
    result_types: list[str] | None = None  # what each output's DECIMAL becomes (`result_types.type_rules`)
    deliveries: dict[int, str] = field(default_factory=dict)  # staged: how each sub-query reaches Spark, by scan
    dropped: dict[int, str] = field(default_factory=dict)  # staged: sub-queries Spark need not join, and why
    why: str = ""  # why a join query runs where it runs (``node``, ``colocated`` or ``spark``)
    merge: Merge | None = None  # ``colocated``: how the nodes' rows are merged
    # ``spark``: whether the coordinator may join its sub-queries itself once all are fetched and
    # few (``gathered``): not where joins run on Spark alone, nor where DataFusion answers wrong
    gather: bool = False
    _node_sql: NodeSql | None = field(default=None, repr=False, compare=False)  # written once: a node plan is only read

    @property
    def spark_sql(self) -> str | None:
        """The query Spark runs over the sub-queries' views."""
        return spark_text(self.query.tree) if self.engine == "spark" else None

    @property
    def node_sql(self) -> NodeSql | None:
        """What DataFusion runs over the sub-queries' views: a node's, or the coordinator's."""
        if self.engine not in ("node", "colocated", "gathered"):
            return None
        if self._node_sql is None:
            self._node_sql = node_text(self.query.tree)
        return self._node_sql

    def explain(self) -> list[str]:
        lines = [f"engine: {ENGINES[self.engine]}", *([f"  ({self.why})"] if self.why else []), *self.notes]
        if self.engine == "spark" and self.gather and not self.deliveries:  # not staged yet
            lines.append("  (or at the coordinator, if its sub-queries turn out few when it runs: engine gathered)")
        if self.merge is not None:
            lines += self.merge.explain()
        if self.first:  # the answers decide where the rest runs: left over one table, on the nodes
            lines[0] += " (of the query as written: planned again once its subqueries are answered)"
            lines.append("answered first on the nodes, then the query is planned again with the answers in place:")
            for subquery in self.first:
                lines.append(f"  ({subquery.query.text})")
        if self.scans:
            lines.append("select-project sub-queries (on compressed data):")
            for scan in self.scans:
                lines += ["  " + line for line in scan.explain()]
                delivery = self.deliveries.get(scan.index)
                if delivery is not None:
                    lines.append(f"      {delivery}")
        if self.local is not None:
            lines += _explain_local(self.local)
        if self.engine == "spark":
            lines.append("Spark SQL over the sub-queries:")
            lines += ["  " + line for line in self.spark_sql.splitlines()]
        if self.engine in ("node", "colocated", "gathered"):
            where = "the coordinator" if self.engine == "gathered" else "each node" if self.merge else "the node"
            lines.append(f"DataFusion SQL over the sub-queries, on {where}:")
            lines += ["  " + line for line in self.node_sql.lines()]
        if self.merge is not None:
            lines += self.merge.explain_merge()
        return lines


def _explain_local(local: LocalQuery) -> list[str]:
    lines = []
    if local.aggregating:
        request = local.request
        keys = ", ".join(k.name for k in request.group_by) or "(none)"
        aggs = ", ".join(f"{a.func}() AS {a.name}" for a in request.aggregates)
        lines.append(f"partial aggregates on each node: group by {keys}; {aggs}")
        lines.append("coordinator: reduce/final of the partial states")
    if local.request is not None and local.request.having is not None:
        lines.append("each node: its groups merged, HAVING (every group lives on one node)")
    elif local.having is not None:
        lines.append("coordinator: HAVING")
    if local.order:
        lines.append("coordinator: ORDER BY")
    if local.limit is not None:
        lines.append(f"coordinator: LIMIT {local.limit}" + (f" OFFSET {local.offset}" if local.offset else ""))
    return lines
