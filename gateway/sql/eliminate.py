"""Joins that semi-join reduction has already done, left out of Spark's SQL.

`answer_exists`: a ``[NOT] EXISTS (SELECT ... FROM t WHERE t.k = o.c)`` among the conjuncts of
o's WHERE (TPC-H Q4's lineitem, Q22's orders) is a semi- (anti-) join on one key. When the
coordinator holds the rows of both sub-queries, it keeps the o rows whose c is (is not) among
t's distinct keys, and the conjunct and t leave Spark's SQL.

`drop_finished_joins`:
after `gateway.sql.reduce` a dimension sub-query that is only joined, never read (Q9's part:
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

from gateway.sql.keysets import distinct, is_in
from gateway.sql.plan import Plan, TableQuery
from gateway.sql.tree import and_all, split_and
from storage import membership, no_membership


def answer_exists(plan: Plan, fetched: dict[int, pa.Table]) -> None:
    """Answer every one-key ``[NOT] EXISTS`` conjunct whose two sides the coordinator holds; the
    inner sub-query's index goes to `plan.dropped` with the reason."""
    by_view = {scan.view: scan for scan in plan.scans}
    for node in list(plan.query.tree.find_all(exp.Exists)):
        found = _one_key_exists(plan, fetched, by_view, node)
        if found is None:
            continue
        where, conjunct, (inner, key), (outer, column) = found
        negated = conjunct is not node
        keys = distinct(fetched[inner.index].column(key))
        condition = membership(column, keys)
        if condition is None:
            continue
        if negated:  # NOT EXISTS keeps a NULL column (it matches nothing)
            condition = no_membership(column, condition)
        outer.filters.append(condition)  # the same rows when the exchange scans the nodes again
        rows = fetched[outer.index]
        matched = is_in(rows.column(column), keys)
        fetched[outer.index] = rows.filter(pc.invert(matched) if negated else matched)
        outer.rows = fetched[outer.index].num_rows
        condition = and_all([c for c in split_and(where.this) if c is not conjunct])
        where.parent.set("where", exp.Where(this=condition) if condition is not None else None)
        no = "NOT " if negated else ""
        outer.reductions.append(
            f"{'anti' if negated else 'semi'}-join filter: {column} {no}IN ({len(keys):,} values of "
            f"{inner.alias}.{key}): the {no}EXISTS answered here"
        )
        plan.dropped[inner.index] = (
            f"not handed to Spark: its {no}EXISTS ({inner.alias}.{key} = {outer.alias}.{column}) was answered "
            f"at the coordinator, over the rows of both"
        )


def _one_key_exists(plan: Plan, fetched: dict[int, pa.Table], by_view: dict[str, TableQuery], node: exp.Exists):
    """(the outer WHERE, the conjunct, (inner scan, its key), (outer scan, its column)) when `node`
    (or NOT `node`) is a conjunct of a SELECT with plain inner joins, and tests a one-table
    subquery whose only condition is `inner.key = outer.column`, both sides held here."""
    conjunct = node.parent if isinstance(node.parent, exp.Not) else node
    where = conjunct.parent
    while isinstance(where, (exp.And, exp.Paren)):
        where = where.parent
    if not isinstance(where, exp.Where) or not isinstance(where.parent, exp.Select) or not _plain_joins(where.parent):
        return None
    if not any(c is conjunct for c in split_and(where.this)):
        return None
    inner = node.this
    if not isinstance(inner, exp.Select) or inner.args.get("joins") or inner.args.get("where") is None:
        return None
    if any(inner.args.get(k) for k in ("group", "having", "limit", "offset", "with_")):
        return None
    if any(e.find(exp.AggFunc) for e in inner.expressions):
        return None  # an aggregate without GROUP BY always has a row
    source = inner.args["from_"].this if inner.args.get("from_") else None
    conditions = split_and(inner.args["where"].this)
    if not isinstance(source, exp.Table) or len(conditions) != 1 or not isinstance(conditions[0], exp.EQ):
        return None
    left, right = conditions[0].this, conditions[0].expression
    if not (isinstance(left, exp.Column) and isinstance(right, exp.Column)):
        return None
    own = source.alias_or_name
    key, column = (left, right) if left.table == own else (right, left)
    views = {t.alias_or_name: t.name for t in where.parent.find_all(exp.Table) if t.parent_select is where.parent}
    inner_scan, outer_scan = by_view.get(source.name), by_view.get(views.get(column.table, ""))
    if key.table != own or column.table == own or inner_scan is None or outer_scan is None:
        return None
    held = [fetched.get(s.index) for s in (inner_scan, outer_scan)]
    if any(rows is None for rows in held) or any(s.index in plan.dropped for s in (inner_scan, outer_scan)):
        return None
    if key.name not in held[0].column_names or column.name not in held[1].column_names:
        return None
    types = held[0].schema.field(key.name).type, held[1].schema.field(column.name).type
    if types[0] != types[1] and not all(pa.types.is_integer(t) for t in types):
        return None
    return where, conjunct, (inner_scan, key.name), (outer_scan, column.name)


def drop_finished_joins(plan: Plan, fetched: dict[int, pa.Table]) -> None:
    """Take every join that can no longer change the answer out of `plan`'s statement; the
    dropped sub-queries' indexes go to `plan.dropped` with the reason."""
    by_view = {scan.view: scan for scan in plan.scans}
    for scan in plan.scans:
        rows = fetched.get(scan.index)
        if rows is None or scan.group_by:
            continue
        found = _place(plan.query.tree, scan)
        if found is None:
            continue
        select, table = found
        partners = _only_joined(plan.query.tree, select, scan.alias)
        if partners is None or len({own.name for _, own, _ in partners}) != 1:
            continue
        column = partners[0][1].name
        if not _unique(rows.column(column)):
            continue
        views = {t.alias_or_name: t.name for t in select.find_all(exp.Table) if t.parent_select is select}
        if not all(
            _covered(plan, fetched, by_view.get(views.get(other.table, "")), other.name, rows.column(column))
            for _, _, other in partners
        ):
            continue
        _rewrite(select, table, [c for c, _, _ in partners], [other for _, _, other in partners])
        plan.dropped[scan.index] = (
            f"not handed to Spark: {column} is unique here and every row joined to it has its match "
            f"({', '.join(sorted(other.sql() for _, _, other in partners))}), so the join changes nothing"
        )


def _place(tree: exp.Expression, scan: TableQuery):
    """(the SELECT whose FROM holds the scan's view, the table node) when every join of that
    SELECT is a plain inner one (commas, no ON); None otherwise."""
    tables = [t for t in tree.find_all(exp.Table) if t.name == scan.view]
    if len(tables) != 1 or not isinstance(tables[0].parent, (exp.From, exp.Join)):
        return None
    table = tables[0]
    select = table.parent.parent
    if not isinstance(select, exp.Select) or not _plain_joins(select):
        return None  # outer, semi, anti, cross or ON joins around it: left alone
    return select, table


def _plain_joins(select: exp.Select) -> bool:
    """Whether every join of `select` is a plain inner one (commas, no ON)."""
    joins = select.args.get("joins") or []
    return not any(j.side or j.kind or j.args.get("using") or j.args.get("on") is not None for j in joins)


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
    return keys.null_count == 0 and len(distinct(keys)) == len(keys)


def _covered(
    plan: Plan, fetched: dict[int, pa.Table], partner: TableQuery | None, column: str, keys: pa.ChunkedArray
) -> bool:
    """Every row the coordinator holds for `partner` has its `column` among `keys` (not NULL)."""
    if partner is None or partner.index in plan.dropped:
        return False
    rows = fetched.get(partner.index)
    if rows is None or column not in rows.column_names:
        return False
    values = rows.column(column)
    return values.null_count == 0 and pc.all(is_in(values, distinct(keys))).as_py() is not False


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
