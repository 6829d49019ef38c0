"""The order in which one SELECT's comma-joined tables are joined."""

from __future__ import annotations

from sqlglot import exp

from gateway.sql.passes.draft import Draft, planned_selects
from gateway.sql.plan import TableQuery

FILTERED = 0.1  # the share of a table's rows a filtered sub-query is taken to keep


def order_joins(draft: Draft) -> Draft:
    """Rewrite the FROM list of every SELECT that joins only tables, with commas, so that it starts
    at the largest sub-query and then takes, of the tables joined by an equality to those before,
    the smallest (a filtered one counted at `FILTERED` of its table's rows). DataFusion joins a
    FROM list in its order, each join building on its smaller side: the fact table meets the
    filtered dimensions first and the rest join the fewest rows.

    Example: ``FROM customer, store_sales, date_dim WHERE ...`` -> ``FROM store_sales, date_dim,
    customer WHERE ...`` (customer adds wide rows; joined last, to the fewest).
    """
    for scope, base in planned_selects(draft):
        select = scope.expression
        joins = select.args.get("joins") or []
        if len(joins) < 2 or any(_not_comma(j) for j in joins) or len(base) != len(joins) + 1:
            continue
        sources = [select.args["from_"].this, *(j.this for j in joins)]
        if any(s.alias_or_name not in base for s in sources):
            continue
        linked: dict[str, set[str]] = {alias: set() for alias in base}
        by_query = {id(q): alias for alias, q in base.items()}
        for edge in draft.edges:
            a, b = by_query.get(id(edge.left)), by_query.get(id(edge.right))
            if a is not None and b is not None and a != b:
                linked[a].add(b)
                linked[b].add(a)
        order = _greedy(base, linked)
        by_alias = {s.alias_or_name: s for s in sources}
        select.args["from_"].set("this", by_alias[order[0]])
        for join, alias in zip(joins, order[1:], strict=True):
            join.set("this", by_alias[alias])
    return draft


def _not_comma(join: exp.Join) -> bool:
    return bool(join.side or join.kind or join.args.get("on") or join.args.get("using") or join.method)


def _estimate(query: TableQuery) -> float:
    return query.info.rows * (FILTERED if query.filters else 1.0)


def _greedy(base: dict[str, TableQuery], linked: dict[str, set[str]]) -> list[str]:
    """Largest first, then the smallest of those joined to the ones taken (of all, if none is)."""
    left = dict(sorted(base.items(), key=lambda item: -_estimate(item[1])))  # ties: as written
    first = next(iter(left))
    order, reach = [first], set(linked[first])
    del left[first]
    while left:
        candidates = [a for a in left if a in reach] or list(left)
        alias = min(candidates, key=lambda a: _estimate(left[a]))
        order.append(alias)
        reach |= linked[alias]
        del left[alias]
    return order
