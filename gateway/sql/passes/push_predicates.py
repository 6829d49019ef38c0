"""Conditions on one table move into that table's sub-query, where the nodes evaluate them."""

from __future__ import annotations

from sqlglot import exp
from sqlglot.optimizer.scope import Scope

from gateway.sql.passes.draft import Draft, planned_selects, single_owner
from gateway.sql.plan import TableQuery
from gateway.sql.translate import NotTranslatable, plain, to_ir
from gateway.sql.tree import and_all, factor_or, has_subquery, nullable_aliases, split_and, split_or


def push_predicates(draft: Draft) -> Draft:
    """Move every conjunct of a WHERE (after `factor_or`) and of an inner join's ON that reads one
    table and that the nodes can evaluate into that table's sub-query. Outer joins: a WHERE
    condition on the NULL-extended side filters after the join and stays; an ON condition of a
    LEFT JOIN on its joined table moves. An OR of per-table conditions also gives each table the
    condition its rows must meet (an implied filter; the OR stays above).

    Example: ``FROM customer c, orders o WHERE c.c_custkey = o.o_custkey AND c.c_mktsegment =
    'BUILDING'`` -> ``WHERE c.c_custkey = o.o_custkey``, customer's sub-query filtered by
    ``c.c_mktsegment = 'BUILDING'``.
    """
    for scope, base in planned_selects(draft):
        _push(scope, base, nullable_aliases(scope.expression))
    return draft


def _push(scope: Scope, base: dict[str, TableQuery], nullable: set[str]) -> None:
    select = scope.expression
    where = select.args.get("where")
    if where is not None:
        remaining = []
        for conjunct in (part for c in split_and(where.this) for part in factor_or(c)):
            owner = single_owner(conjunct, base)
            if owner is not None and owner not in nullable and _push_filter(base[owner], conjunct):
                continue
            if isinstance(conjunct, exp.Or) and not has_subquery(conjunct):
                for alias, scan in base.items():
                    if alias not in nullable:
                        _push_implied(scan, alias, conjunct, base)
            remaining.append(conjunct)
        select.set("where", exp.Where(this=and_all(remaining)) if remaining else None)
    for join in select.args.get("joins") or []:
        on = join.args.get("on")
        if on is None:
            continue
        side = (join.side or "").upper()
        joined = join.this.alias_or_name if isinstance(join.this, exp.Table) else None
        remaining = []
        for conjunct in split_and(on):
            owner = single_owner(conjunct, base)
            pushable = (not side and not join.args.get("kind") and owner not in nullable) or (
                side == "LEFT" and owner == joined
            )
            if owner is not None and pushable and _push_filter(base[owner], conjunct):
                continue
            remaining.append(conjunct)
        join.set("on", and_all(remaining) if remaining else (exp.true() if side else None))


def _push_filter(scan: TableQuery, conjunct: exp.Expression) -> bool:
    try:
        ir = to_ir(conjunct, plain)
    except NotTranslatable:
        return False
    scan.conjuncts.append(conjunct.copy())
    scan.filters.append(ir)
    return True


def _push_implied(scan: TableQuery, alias: str, disjunction: exp.Expression, base: dict[str, TableQuery]) -> None:
    """From (a1 AND b1) OR (a2 AND b2), the condition (a1 OR a2) that every row of a must meet."""
    branches = []
    for branch in split_or(disjunction):
        mine = [c for c in split_and(branch) if single_owner(c, base) == alias]
        if not mine:
            return
        branches.append(and_all(mine))
    implied = exp.or_(*branches) if len(branches) > 1 else branches[0]
    try:
        ir = to_ir(implied, plain)
    except NotTranslatable:
        return
    scan.implied.append(implied)
    scan.filters.append(ir)
