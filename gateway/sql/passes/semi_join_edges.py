"""The equalities along which one sub-query's join keys can filter another's rows."""

from __future__ import annotations

from sqlglot import exp
from sqlglot.optimizer.scope import Scope

from gateway.sql.passes.draft import Draft, nullable_aliases, owner
from gateway.sql.plan import Edge, TableQuery
from gateway.sql.tree import split_and


def semi_join_edges(draft: Draft) -> Draft:
    """Find, scope by scope, the edges the semi-join reduction follows at run time
    (`gateway.sql.reduce`): every two columns of one equivalence class of inner equi-joins
    (``a.x = b.y AND b.y = c.z`` also joins a and c), both ways; and a correlated subquery's
    ``inner.x = outer.y``, from the outer sub-query to the inner one only (inner rows matching no
    outer row cannot change any outer row's result; the reverse would lose NOT EXISTS rows).

    Example: ``FROM customer c, orders o WHERE c.c_custkey = o.o_custkey`` -> the edge
    customer.c_custkey = orders.o_custkey.
    """
    for scope in draft.scopes:
        base = draft.base(scope)
        if base and isinstance(scope.expression, exp.Select):
            draft.edges += _equi_joins(scope.expression, base, nullable_aliases(scope.expression))
        draft.edges += _correlated_edges(scope, draft)
    return draft


def _equi_joins(select: exp.Select, base: dict[str, TableQuery], nullable: set[str]) -> list[Edge]:
    """The `a.x = b.y` conditions of inner joins between two tables of this SELECT."""
    conditions = split_and(select.args["where"].this) if select.args.get("where") else []
    for join in select.args.get("joins") or []:
        if not join.side and join.args.get("on") is not None:
            conditions += split_and(join.args["on"])
    pairs = []
    for condition in conditions:
        if isinstance(condition, exp.EQ) and isinstance(condition.this, exp.Column):
            left, right = condition.this, condition.expression
            if not isinstance(right, exp.Column) or left.table == right.table:
                continue
            if {left.table, right.table} <= set(base) and not {left.table, right.table} & nullable:
                pairs.append(((left.table, left.name), (right.table, right.name)))
    classes: list[set[tuple[str, str]]] = []
    for a, b in pairs:
        touching = [c for c in classes if a in c or b in c]
        merged = {a, b}.union(*touching)
        classes = [c for c in classes if c not in touching] + [merged]
    edges = []
    for members in classes:
        ordered = sorted(members)
        for i, (left_alias, left_column) in enumerate(ordered):
            for right_alias, right_column in ordered[i + 1 :]:
                if left_alias != right_alias:
                    edges.append(Edge(base[left_alias], left_column, base[right_alias], right_column))
    return edges


def _correlated_edges(scope: Scope, draft: Draft) -> list[Edge]:
    """`inner.x = outer.y` in the WHERE of a correlated subquery: outer values filter the inner
    sub-query."""
    select = scope.expression
    if not scope.external_columns or not isinstance(select, exp.Select) or not select.args.get("where"):
        return []
    edges = []
    for condition in split_and(select.args["where"].this):
        if not (isinstance(condition, exp.EQ) and isinstance(condition.this, exp.Column)):
            continue
        if not isinstance(condition.expression, exp.Column):
            continue
        for inner, outer in ((condition.this, condition.expression), (condition.expression, condition.this)):
            inner_scan = draft.query_of(select, inner.table)
            found = owner(scope.parent, outer) if scope.parent is not None else None
            outer_scan = draft.query_of(found.expression, outer.table) if found is not None else None
            if inner_scan is not None and outer_scan is not None and outer.table not in scope.sources:
                edges.append(Edge(outer_scan, outer.name, inner_scan, inner.name, both_ways=False))
    return edges
