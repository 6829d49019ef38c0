"""Joins that semi-join reduction has already done, left out of Spark's SQL.

After `gateway.sql.reduce` a dimension sub-query that is only joined, never read (Q9's part:
``p_partkey = l_partkey``, its own filter ``p_name LIKE '%green%'`` taken by the nodes), has sent
its keys to every sub-query it joins. When the coordinator holds all of them and sees that the key
is unique in the dimension's rows and that every partner row's key is among them, the join
matches each partner row exactly once and adds no column: it changes nothing, and Spark need not
receive, plan or run it. Partners joined through it (``ps_partkey = p_partkey = l_partkey``) keep
their own equality.
"""

from __future__ import annotations

import pyarrow as pa
import pyarrow.compute as pc
from sqlglot import exp

from gateway.sql.plan import Plan, Scan, and_all, split_and


def drop_finished_joins(plan: Plan) -> None:
    """Take every join that can no longer change the answer out of `plan`'s statement; the
    dropped sub-queries' indexes go to `plan.dropped` with the reason."""
    by_view = {scan.view: scan for scan in plan.scans}
    for scan in plan.scans:
        rows = plan.inputs.get(scan.index)
        if rows is None or scan.group_by:
            continue
        found = _place(plan.statement.tree, scan)
        if found is None:
            continue
        select, table = found
        partners = _only_joined(plan.statement.tree, select, scan.alias)
        if partners is None or len({own.name for _, own, _ in partners}) != 1:
            continue
        column = partners[0][1].name
        if not _unique(rows.column(column)):
            continue
        views = {t.alias_or_name: t.name for t in select.find_all(exp.Table) if t.parent_select is select}
        if not all(
            _covered(plan, by_view.get(views.get(other.table, "")), other.name, rows.column(column))
            for _, _, other in partners
        ):
            continue
        _rewrite(select, table, [c for c, _, _ in partners], [other for _, _, other in partners])
        plan.dropped[scan.index] = (
            f"not handed to Spark: {column} is unique here and every row joined to it has its match "
            f"({', '.join(sorted(other.sql() for _, _, other in partners))}), so the join changes nothing"
        )


def _place(tree: exp.Expression, scan: Scan):
    """(the SELECT whose FROM holds the scan's view, the table node) when every join of that
    SELECT is a plain inner one (commas, no ON); None otherwise."""
    tables = [t for t in tree.find_all(exp.Table) if t.name == scan.view]
    if len(tables) != 1 or not isinstance(tables[0].parent, (exp.From, exp.Join)):
        return None
    table = tables[0]
    select = table.parent.parent
    if not isinstance(select, exp.Select):
        return None
    joins = select.args.get("joins") or []
    if any(j.side or j.kind or j.args.get("using") or j.args.get("on") is not None for j in joins):
        return None  # outer, semi, anti, cross or ON joins around it: left alone
    return select, table


def _only_joined(tree: exp.Expression, select: exp.Select, alias: str):
    """The `alias.k = other.m` conjuncts of `select`'s WHERE, as (conjunct, alias.k, other.m), when
    they are the only places in the whole statement that name `alias`; else None."""
    where = select.args.get("where")
    if where is None or any(e.find(exp.Star) for e in select.expressions if not e.find(exp.AggFunc)):
        return None  # SELECT * and t.* would lose its columns
    found = []
    for conjunct in split_and(where.this):
        names = {c.table for c in conjunct.find_all(exp.Column)}
        if alias not in names:
            continue
        if not (isinstance(conjunct, exp.EQ) and isinstance(conjunct.this, exp.Column)):
            return None
        if not isinstance(conjunct.expression, exp.Column) or len(names) != 2:
            return None
        left, right = conjunct.this, conjunct.expression
        found.append((conjunct, left, right) if left.table == alias else (conjunct, right, left))
    mentions = sum(1 for c in tree.find_all(exp.Column) if c.table == alias)
    if not found or mentions != len(found):
        return None
    return found


def _unique(keys: pa.ChunkedArray) -> bool:
    return keys.null_count == 0 and pc.count_distinct(keys).as_py() == len(keys)


def _covered(plan: Plan, partner: Scan | None, column: str, keys: pa.ChunkedArray) -> bool:
    """Every row the coordinator holds for `partner` has its `column` among `keys` (not NULL)."""
    if partner is None or partner.index in plan.dropped:
        return False
    rows = plan.inputs.get(partner.index)
    if rows is None or column not in rows.column_names:
        return False
    values = rows.column(column)
    return values.null_count == 0 and pc.all(pc.is_in(values, value_set=keys.combine_chunks())).as_py() is not False


def _rewrite(select: exp.Select, table: exp.Table, conjuncts: list[exp.Expression], others: list[exp.Column]) -> None:
    """Remove the table and its join conditions from `select`; partners joined through it are
    equated directly."""
    kept = [c for c in split_and(select.args["where"].this) if not any(c is j for j in conjuncts)]
    distinct = list({o.sql(): o for o in others}.values())
    kept += [exp.EQ(this=distinct[0].copy(), expression=o.copy()) for o in distinct[1:]]
    condition = and_all(kept)
    select.set("where", exp.Where(this=condition) if condition is not None else None)
    holder = table.parent
    if isinstance(holder, exp.Join):
        holder.pop()
        return
    joins = select.args.get("joins") or []
    first = joins[0]
    first.pop()
    select.set("from_", exp.From(this=first.this))
