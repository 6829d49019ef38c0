"""Helpers over sqlglot trees that planning and running share: conjunctions and disjunctions
taken apart and put together, values written as literals, and EXPLAIN's short form of a node."""

from __future__ import annotations

import datetime as dt
import decimal
from typing import Any

from sqlglot import exp

BRIEF_VALUES = 8  # EXPLAIN shows this many values of a longer IN list


def split_and(node: exp.Expression | None) -> list[exp.Expression]:
    """The conjuncts of `node` (none for None), parentheses around them removed."""
    if node is None:
        return []
    node = node.unnest() if isinstance(node, exp.Paren) else node
    if isinstance(node, exp.And):
        return split_and(node.this) + split_and(node.expression)
    return [node]


def split_or(node: exp.Expression) -> list[exp.Expression]:
    """The disjuncts of `node`, parentheses around them removed."""
    node = node.unnest() if isinstance(node, exp.Paren) else node
    if isinstance(node, exp.Or):
        return split_or(node.this) + split_or(node.expression)
    return [node]


def and_all(parts: list[exp.Expression]) -> exp.Expression | None:
    """AND of the parts, keeping the nodes themselves (subqueries inside stay the same objects)."""
    return exp.and_(*parts, copy=False) if parts else None


def factor_or(node: exp.Expression) -> list[exp.Expression]:
    """Conjuncts equivalent to `node`, with what every branch of a disjunction shares taken out:
    (a AND b) OR (a AND c) -> [a, b OR c]. TPC-H Q19 repeats its join condition and two filters in
    each branch; taken out, they become a join edge and filters the nodes evaluate first."""
    branches = [split_and(branch) for branch in split_or(node)]
    if len(branches) < 2:
        return [node]
    common = [c for c in branches[0] if all(any(c == d for d in other) for other in branches[1:])]
    if not common:
        return [node]
    rest = [[d for d in branch if not any(d == c for c in common)] for branch in branches]
    if any(not parts for parts in rest):  # (a) OR (a AND b) is a
        return common
    return [*common, exp.or_(*(and_all(parts) for parts in rest), copy=False)]


def has_subquery(node: exp.Expression) -> bool:
    return any(isinstance(n, (exp.Select, exp.Subquery, exp.Exists)) for n in node.walk())


def brief(node: exp.Expression) -> str:
    """The SQL text of `node` with long IN lists cut short (for EXPLAIN)."""
    if not any(len(n.expressions) > BRIEF_VALUES for n in node.find_all(exp.In)):
        return node.sql()
    node = node.copy()
    for found in list(node.find_all(exp.In)):
        values = found.expressions
        if len(values) > BRIEF_VALUES:
            found.set("expressions", [*values[:BRIEF_VALUES], exp.var(f"... ({len(values):,} values)")])
    return node.sql()


def as_double(node: exp.Expression) -> exp.Expression:
    """`node` cast to DOUBLE, unless it is such a cast already: the dividend of `/` as DuckDB
    divides (both engines' SQL writes it so)."""
    return node if isinstance(node, exp.Cast) and node.to.is_type("double") else exp.cast(node, "double")


def count_if_as_sum(node: exp.CountIf) -> exp.Expression:
    """DuckDB's COUNT_IF: a sum of the condition as 0 or 1, NULL where it is never known (both
    engines' SQL writes it so)."""
    return exp.Sum(this=exp.cast(node.this, "bigint"))


def literal(value: Any) -> exp.Expression:
    """A Python value (as Arrow gives it) as an SQL literal of its type."""
    if value is None:
        return exp.null()
    if isinstance(value, bool):
        return exp.Boolean(this=value)
    if isinstance(value, (int, float, decimal.Decimal)):
        return exp.Literal.number(str(value))
    if isinstance(value, dt.datetime):
        return exp.cast(exp.Literal.string(value.isoformat(sep=" ")), "TIMESTAMP")
    if isinstance(value, dt.date):
        return exp.cast(exp.Literal.string(value.isoformat()), "DATE")
    return exp.Literal.string(str(value))


Path = tuple[tuple[str, int | None], ...]


def path_to(node: exp.Expression) -> Path:
    """Where `node` sits in its tree: the argument names (and list positions) down from the root."""
    steps = []
    while node.parent is not None:
        steps.append((node.arg_key, node.index))
        node = node.parent
    return tuple(reversed(steps))


def node_at(tree: exp.Expression, path: Path) -> exp.Expression:
    """The node at `path` (from `path_to`) in `tree`, or in an unchanged copy of it."""
    node = tree
    for key, index in path:
        child = node.args[key]
        node = child[index] if index is not None else child
    return node


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
