"""A subquery whose rows are only tested needs each of its keys once."""

from __future__ import annotations

from sqlglot import exp
from sqlglot.optimizer.scope import Scope, walk_in_scope

from gateway.sql.passes.draft import Draft
from storage import Named


def distinct_if_only_tested(draft: Draft) -> Draft:
    """A subquery over one table whose rows are only tested (``EXISTS (...)``, ``x [NOT] IN
    (SELECT ...)``) and that reads one column of it, its join key: duplicates change no answer,
    so its sub-query is grouped by that column and the nodes send each value once per block.
    With more columns the combinations are mostly distinct already (TPC-H Q21's order and
    supplier pairs) and grouping would cost the nodes more than it saves Spark.

    Example (TPC-H Q22): ``NOT EXISTS (SELECT 1 FROM orders o WHERE o.o_custkey = c.c_custkey)``:
    orders' sub-query, reading o_custkey alone, becomes distinct on o_custkey.
    """
    for scope in draft.scopes:
        _distinct(scope, draft)
    return draft


def _distinct(scope: Scope, draft: Draft) -> None:
    select = scope.expression
    holder = select.parent if isinstance(select, exp.Select) else None
    tested = isinstance(holder, exp.Exists) or (
        isinstance(holder, exp.Subquery) and isinstance(holder.parent, exp.In) and holder.arg_key == "query"
    )
    if not tested or len(scope.selected_sources) != 1 or scope.subquery_scopes:
        return
    if any(select.args.get(k) for k in ("joins", "group", "having", "order", "limit", "offset", "with_")):
        return
    if any(isinstance(node, (exp.AggFunc, exp.Window)) for node in walk_in_scope(select)):
        return
    [alias] = scope.selected_sources
    scan = draft.query_of(select, alias)
    if scan is not None and not scan.group_by and not scan.computed and len(scan.columns) == 1:
        scan.group_by = [Named.column(scan.columns[0])]
