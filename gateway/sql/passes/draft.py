"""The join plan under construction that the passes hand on, and what they ask of its scopes."""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field

from sqlglot import exp
from sqlglot.optimizer.scope import Scope

from gateway.sql.catalog import RegionCatalog
from gateway.sql.parse import SET_OPERATIONS
from gateway.sql.plan import Edge, TableQuery
from gateway.sql.tree import has_subquery, split_and

Key = tuple[int, str]  # (id of a scope's SELECT, a table alias of its FROM)
NOT_ROW_WISE = (exp.AggFunc, exp.Window, exp.Rand, exp.Subquery, exp.Exists)  # not one value per input row


@dataclass
class Draft:
    """A join query being planned: its tree (the planner's own copy, which the passes rewrite),
    its scopes as traversed before the sub-queries were taken out (`table_queries` fills them),
    the sub-query of every base-table reference by scope and alias, and the join edges found."""

    tree: exp.Select
    catalog: RegionCatalog
    scopes: list[Scope] = field(default_factory=list)
    queries: dict[Key, TableQuery] = field(default_factory=dict)
    edges: list[Edge] = field(default_factory=list)

    def base(self, scope: Scope) -> dict[str, TableQuery]:
        """The sub-queries of the tables `scope`'s FROM names, by alias."""
        select = id(scope.expression)
        return {alias: self.queries[(select, alias)] for alias in scope.sources if (select, alias) in self.queries}

    def query_of(self, select: exp.Expression, alias: str) -> TableQuery | None:
        return self.queries.get((id(select), alias))


def owner(scope: Scope | None, column: exp.Column) -> Scope | None:
    """The scope (this one or an enclosing one) whose FROM names the column's table (a LATERAL's
    or an UNNEST's scope sees the tables of the FROM it follows, which are its parent's)."""
    while scope is not None and (scope.is_udtf or column.table not in scope.sources):
        scope = scope.parent
    return scope


def tables_of(node: exp.Expression) -> set[str]:
    """The table aliases `node`'s columns name."""
    return {c.table for c in node.find_all(exp.Column)}


def inner_conditions(select: exp.Select) -> list[exp.Expression]:
    """The conjuncts of the WHERE and of the inner joins' ON."""
    conditions = split_and(select.args["where"].this) if select.args.get("where") else []
    for join in select.args.get("joins") or []:
        if not join.side and join.args.get("on") is not None:
            conditions += split_and(join.args["on"])
    return conditions


def single_owner(node: exp.Expression, base: dict[str, TableQuery]) -> str | None:
    """The one table reference of this scope that all of node's columns come from."""
    if has_subquery(node):
        return None
    owners = tables_of(node)
    if len(owners) != 1:
        return None
    alias = owners.pop()
    return alias if alias in base else None


def planned_selects(draft: Draft) -> list[tuple[Scope, dict[str, TableQuery]]]:
    """Every SELECT scope that reads base tables, with their sub-queries by alias."""
    found = []
    for scope in draft.scopes:
        base = draft.base(scope)
        if base and isinstance(scope.expression, exp.Select):
            found.append((scope, base))
    return found


def derived_readers(scopes: list[Scope]) -> dict[int, list[tuple[exp.Expression, str]]]:
    """Who reads each derived table or common table expression: by the id of its body's scope,
    every (SELECT, alias) that names it in its FROM."""
    readers: dict[int, list[tuple[exp.Expression, str]]] = defaultdict(list)
    for scope in scopes:
        for alias, (_, source) in scope.selected_sources.items():
            if isinstance(source, Scope):
                readers[id(source)].append((scope.expression, alias))
    return readers


def filterable_branches(body: exp.Expression) -> tuple[list[str], list[exp.Select]]:
    """The output names of a derived table's body (a SELECT or a set operation of them) and the
    SELECTs of its branches whose input rows a filter on their outputs may filter instead: not
    one with a LIMIT or OFFSET, DISTINCT ON, a window or grouping sets, which compute the rows
    they keep from rows such a filter would remove."""
    leftmost = body
    while isinstance(leftmost, SET_OPERATIONS):
        leftmost = leftmost.this
    if not isinstance(leftmost, exp.Select):
        return [], []
    names = [p.alias_or_name for p in leftmost.expressions]
    return names, [b for b in _branches(body) if len(b.expressions) == len(names) and _filterable(b)]


def _branches(body: exp.Expression) -> list[exp.Select]:
    if isinstance(body, SET_OPERATIONS):
        return [*_branches(body.this), *_branches(body.expression)]
    return [body] if isinstance(body, exp.Select) else []


def _filterable(select: exp.Select) -> bool:
    distinct, group = select.args.get("distinct"), select.args.get("group")
    if select.args.get("limit") or select.args.get("offset") or (distinct and distinct.args.get("on")):
        return False
    if group is not None and any(group.args.get(a) for a in ("grouping_sets", "cube", "rollup")):
        return False
    return not select.find(exp.Window)


def per_input_row(select: exp.Select, value: exp.Expression) -> bool:
    """Whether an output `value` of `select` is one of each input row's (a GROUP BY key, a
    constant, or any row-wise expression of an ungrouped SELECT): a filter on it may filter the
    input rows instead."""
    if value.find(*NOT_ROW_WISE):
        return False
    group = select.args.get("group")
    grouped = group is not None or any(p.find(exp.AggFunc) for p in select.expressions)
    return not grouped or (group is not None and value in group.expressions) or not value.find(exp.Column)
