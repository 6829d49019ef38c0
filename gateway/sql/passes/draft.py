"""The join plan under construction that the passes hand on, and what they ask of its scopes."""

from __future__ import annotations

from dataclasses import dataclass, field

from sqlglot import exp
from sqlglot.optimizer.scope import Scope

from gateway.sql.catalog import RegionCatalog
from gateway.sql.plan import Edge, TableQuery
from gateway.sql.tree import has_subquery

Key = tuple[int, str]  # (id of a scope's SELECT, a table alias of its FROM)


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


def single_owner(node: exp.Expression, base: dict[str, TableQuery]) -> str | None:
    """The one table reference of this scope that all of node's columns come from."""
    if has_subquery(node):
        return None
    owners = {c.table for c in node.find_all(exp.Column)}
    if len(owners) != 1:
        return None
    alias = owners.pop()
    return alias if alias in base else None


def nullable_aliases(select: exp.Select) -> set[str]:
    """Table aliases on the NULL-extended side of an outer join (their rows may not be filtered early)."""
    nullable: set[str] = set()
    seen = [select.args["from_"].this.alias_or_name] if select.args.get("from_") else []
    for join in select.args.get("joins") or []:
        alias = join.this.alias_or_name
        side = (join.side or "").upper()
        if side in ("LEFT", "FULL"):
            nullable.add(alias)
        if side in ("RIGHT", "FULL"):
            nullable.update(seen)
        seen.append(alias)
    return nullable


def planned_selects(draft: Draft) -> list[tuple[Scope, dict[str, TableQuery]]]:
    """Every SELECT scope that reads base tables, with their sub-queries by alias."""
    found = []
    for scope in draft.scopes:
        base = draft.base(scope)
        if base and isinstance(scope.expression, exp.Select):
            found.append((scope, base))
    return found
