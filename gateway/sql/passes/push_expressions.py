"""Scalar expressions over one table are computed by its sub-query, on compressed blocks."""

from __future__ import annotations

import itertools
from collections.abc import Iterator

from sqlglot import exp
from sqlglot.optimizer.scope import Scope

from gateway.sql.passes.draft import Draft, planned_selects, single_owner
from gateway.sql.plan import TableQuery
from gateway.sql.translate import NotTranslatable, plain, to_ir
from gateway.sql.tree import nullable_aliases


def push_expressions(draft: Draft) -> Draft:
    """Replace every expression of a select list, GROUP BY, ORDER BY or HAVING that reads one
    table (not one on the NULL-extended side of an outer join), has no aggregate and that the
    nodes can evaluate by a column its sub-query computes (``__e0``, ``__e1`` ...; the same
    expression twice in a scope is computed once).

    Example: ``SUM(l.l_extendedprice * (1 - l.l_discount))`` -> ``SUM(l.__e0)``, lineitem's
    sub-query computing ``__e0 = l.l_extendedprice * (1 - l.l_discount)``: one column travels
    instead of two.
    """
    counter = itertools.count()
    for scope, base in planned_selects(draft):
        _push(scope, base, nullable_aliases(scope.expression), counter)
    return draft


def _push(scope: Scope, base: dict[str, TableQuery], nullable: set[str], counter: Iterator[int]) -> None:
    select = scope.expression
    names: dict[tuple[str, str], str] = {}
    group = select.args.get("group")
    keys = {_text(k) for k in group.find_all(exp.Expression)} if group is not None else None

    def visit(node: exp.Expression, aggregated: bool = False) -> None:
        # in a grouped scope, an expression outside the aggregates must stay what GROUP BY names
        # (`SUBSTRING(r_reason_desc, 1, 20) ... GROUP BY r_reason_desc`): pushed, it would be a
        # column Spark cannot tell is one value per group
        movable = aggregated or keys is None or _text(node) in keys
        owner = single_owner(node, base) if movable and _worth_pushing(node) else None
        if owner is not None and owner not in nullable:
            try:
                ir = to_ir(node, plain)
            except NotTranslatable:
                ir = None
            if ir is not None:
                key = (owner, _text(node))
                if key not in names:
                    names[key] = f"__e{next(counter)}"
                    base[owner].computed[names[key]] = (node.copy(), ir)
                node.replace(exp.column(names[key], table=owner))
                return
        for child in list(node.iter_expressions()):
            visit(child, aggregated or isinstance(node, exp.AggFunc))

    targets = [p.this if isinstance(p, exp.Alias) else p for p in select.expressions]
    for clause in ("group", "order"):
        if select.args.get(clause) is not None:
            targets += list(select.args[clause].expressions)
    if select.args.get("group") is not None:  # ROLLUP, CUBE, GROUPING SETS: the same keys, pushed alike
        group = select.args["group"]
        targets += [*(group.args.get("rollup") or []), *(group.args.get("cube") or [])]
        targets += list(group.args.get("grouping_sets") or [])
    if select.args.get("having") is not None:
        targets.append(select.args["having"].this)
    for target in targets:
        visit(target)


def _worth_pushing(node: exp.Expression) -> bool:
    if isinstance(node, (exp.Column, exp.Literal, exp.Star, exp.Interval, exp.Paren, exp.Alias)):
        return False
    return any(True for _ in node.find_all(exp.Column)) and not any(True for _ in node.find_all(exp.AggFunc))


def _text(node: exp.Expression) -> str:
    """The expression's SQL, to compare: written without the copy `sql()` makes first (the plain
    dialect's generator changes nothing)."""
    return node.sql(copy=False)
