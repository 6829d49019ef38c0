"""Eager aggregation: a join query's aggregates over one table start on the nodes."""

from __future__ import annotations

from sqlglot import exp
from sqlglot.optimizer.scope import Scope, walk_in_scope

from gateway.sql.passes.draft import Draft, owner
from gateway.sql.translate import NotTranslatable, to_ir
from storage import Aggregate, Expr, Named, col

PARTIAL = {exp.Count: "count", exp.Sum: "sum", exp.Min: "min", exp.Max: "max"}


def preaggregate(draft: Draft) -> Draft:
    """When every aggregate of a SELECT reads one table T (COUNT/SUM/MIN/MAX of T's columns; inner
    and LEFT joins only), T's sub-query is grouped on the nodes by every T column the rest of the
    scope uses (join keys, group keys, other conditions) and the aggregates become aggregates of
    the partial results: COUNT(x) -> COALESCE(SUM(count), 0), SUM -> SUM, MIN -> MIN, MAX -> MAX.
    Rows of T with the same values in those columns are indistinguishable above the aggregates,
    so the answer is unchanged, and Spark joins one row per group instead of every row. A table
    a correlated subquery refers to is left alone; the same aggregate twice is one partial state.

    Example (TPC-H Q13): ``SELECT c.c_custkey, COUNT(o.o_orderkey) FROM customer c LEFT JOIN
    orders o ON c.c_custkey = o.o_custkey GROUP BY c.c_custkey`` -> ``COALESCE(SUM(o.__a0), 0)``,
    orders' sub-query grouped by o_custkey with ``count(o_orderkey) AS __a0``: one row per
    customer instead of one per order.
    """
    for scope in draft.scopes:
        if isinstance(scope.expression, exp.Select):
            _preaggregate(scope, draft)
    return draft


def _preaggregate(scope: Scope, draft: Draft) -> None:
    select = scope.expression
    nodes = list(walk_in_scope(select))
    if any(isinstance(n, exp.Window) for n in nodes):
        return  # an aggregate over a window is no group's: the rows must reach Spark
    aggregates = [n for n in nodes if isinstance(n, exp.AggFunc)]
    if not aggregates or any(
        type(a) not in PARTIAL or isinstance(a.this, (exp.Distinct, exp.Star)) for a in aggregates
    ):
        return
    for join in select.args.get("joins") or []:
        if (join.side or "").upper() not in ("", "LEFT") or (join.kind or "").upper() not in ("", "INNER", "OUTER"):
            return
    owners = {c.table for a in aggregates for c in a.this.find_all(exp.Column)}
    if len(owners) != 1 or any(not any(True for _ in a.this.find_all(exp.Column)) for a in aggregates):
        return
    alias = owners.pop()
    scan = draft.query_of(select, alias)
    if scan is None or scan.aggregates:
        return
    inside = {id(c) for a in aggregates for c in a.this.find_all(exp.Column)}
    columns = [c for c in walk_in_scope(select) if isinstance(c, exp.Column)]  # the tree as it is now
    keys = sorted({c.name for c in columns if c.table == alias and id(c) not in inside})
    if not keys or _used_by_inner_scopes(scope, alias, draft.scopes):
        return

    def ir(column: exp.Column) -> Expr:
        return scan.computed[column.name][1] if column.name in scan.computed else col(column.name)

    states: dict[tuple[str, Expr], Aggregate] = {}  # the same aggregate twice (Q11) is taken once
    try:
        partial = [
            states.setdefault(state, Aggregate(f"__a{len(states)}", *state))
            for state in ((PARTIAL[type(a)], to_ir(a.this, ir)) for a in aggregates)
        ]
    except NotTranslatable:
        return
    described: dict[str, str] = {}
    for aggregate, state in zip(aggregates, partial, strict=True):
        described.setdefault(state.name, f"{aggregate.sql()} AS {state.name}")
    scan.group_by = [Named(key, ir(exp.column(key, table=alias))) for key in keys]
    scan.aggregates = list(states.values())
    scan.partials = list(described.values())
    for aggregate, state in zip(aggregates, partial, strict=True):
        column = exp.column(state.name, table=alias)
        merged = exp.Sum(this=column) if state.func in ("count", "sum") else type(aggregate)(this=column)
        aggregate.replace(
            exp.Coalesce(this=merged, expressions=[exp.Literal.number(0)]) if state.func == "count" else merged
        )


def _used_by_inner_scopes(scope: Scope, alias: str, scopes: list[Scope]) -> bool:
    """Whether a subquery of `scope` refers to its table `alias` (a correlated reference)."""
    for inner in scopes:
        if inner is scope:
            continue
        if any(column.table == alias and owner(inner, column) is scope for column in inner.columns):
            return True
    return False
