"""Aggregation before a join that only widens the groups (eager aggregation)."""

from __future__ import annotations

from dataclasses import dataclass

from sqlglot import exp
from sqlglot.optimizer.scope import Scope

from gateway.sql.aggregate_parts import CLAUSES, final, partials, pieces, walk
from gateway.sql.passes.draft import Draft, inner_conditions, planned_selects, tables_of
from gateway.sql.plan import TableQuery

SMALLER = 4  # a table whose wide keys move above the aggregation: at most this share of the largest joined
ALIAS = "__cxg_eager"


def eager_aggregate(draft: Draft) -> Draft:
    """A grouped SELECT whose GROUP BY reads columns of one joined table (a dimension, far smaller
    than the largest table joined) that no aggregate reads: the tables joined to the aggregated
    ones without it are aggregated first, grouped by the columns the SELECT reads of them outside
    its aggregates (join keys to the dimension among them), and the dimension (with what joins
    only through it) joins those groups; SUM and COUNT are summed, MIN and MAX taken again, AVG is
    the sum of SUMs over the sum of COUNTs. Grouping millions of rows by a dimension's names and
    addresses costs far more than grouping them by integer keys and joining the dimension to the
    groups; so the dimension chosen moves at least two of its keys above, and no fewer than the
    columns left below besides the join's (grouping by those as well would leave little to
    aggregate). Only inner joins, SUM, COUNT, MIN, MAX and AVG (DISTINCT none of them) and no
    subquery in the SELECT.

    Example (TPC-DS Q11): ``SELECT c.c_customer_id, c.c_first_name, d.d_year, SUM(s.ss_net_paid)
    FROM customer c, store_sales s, date_dim d WHERE c.c_customer_sk = s.ss_customer_sk AND
    s.ss_sold_date_sk = d.d_date_sk GROUP BY c.c_customer_id, c.c_first_name, d.d_year`` ->
    ``SELECT c.c_customer_id, c.c_first_name, __cxg_eager.__k0, SUM(__cxg_eager.__a0) FROM customer
    c, (SELECT d.d_year AS __k0, s.ss_customer_sk AS __k1, SUM(s.ss_net_paid) AS __a0 FROM
    store_sales s, date_dim d WHERE s.ss_sold_date_sk = d.d_date_sk GROUP BY d.d_year,
    s.ss_customer_sk) AS __cxg_eager WHERE c.c_customer_sk = __cxg_eager.__k1 GROUP BY
    c.c_customer_id, c.c_first_name, __cxg_eager.__k0``.
    """
    for scope, base in planned_selects(draft):
        shape = _shape(scope, base)
        if shape is not None:
            _rewrite(scope.expression, shape)
    return draft


@dataclass
class _Shape:
    above: set[str]  # the aliases joined above the aggregation: the dimension, and what joins only it
    conjuncts: list[exp.Expression]  # the WHERE's and the inner joins' conditions
    partials: list[exp.Expression]  # the aggregates (with their FILTER), computed in parts below the join
    keys: dict[tuple[str, str], exp.Column]  # the columns of the tables below read above the aggregation
    narrowing: int  # keys of the grouping moved above, less those left below besides the join's


def _shape(scope: Scope, base: dict[str, TableQuery]) -> _Shape | None:
    """What the rewrite needs of a SELECT it applies to; None when it does not."""
    select = scope.expression
    group = select.args.get("group")
    if group is None or group.args.get("all") or any(isinstance(k, exp.Literal) for k in group.expressions):
        return None
    if set(scope.selected_sources) != set(base) or len(base) < 2 or scope.external_columns:
        return None
    distinct = select.args.get("distinct")
    if select.find(exp.Subquery, exp.Exists) or (distinct and distinct.args.get("on")):
        return None
    if any(
        j.side or j.kind not in ("", "INNER", "CROSS") or j.args.get("using") for j in select.args.get("joins") or []
    ):
        return None
    conjuncts = inner_conditions(select)
    found = partials(select)
    if found is None:
        return None
    aggregated = {c.table for p in found for c in p.find_all(exp.Column)}
    grouped = [table for table, _ in {(c.table, c.name) for c in group.find_all(exp.Column)}]
    largest = max(q.info.rows for q in base.values())
    best = None
    for alias, scan in base.items():
        if alias in aggregated or scan.info.rows * SMALLER > largest:
            continue
        below = _joined_without(alias, aggregated or {max(base, key=lambda a: base[a].info.rows)}, base, conjuncts)
        if below is None:
            continue
        above = set(base) - below
        joining = [c for c in conjuncts if tables_of(c) & above]
        keys = _keys(select, above, joining, found)
        joined = {(c.table, c.name) for j in joining for c in j.find_all(exp.Column) if c.table in below}
        moved, left = sum(table == alias for table in grouped), len(set(keys) - joined)
        if keys and moved >= max(2, left) and (best is None or moved - left > best.narrowing):
            best = _Shape(above, conjuncts, found, keys, moved - left)
    return best


def _joined_without(
    dimension: str, aggregated: set[str], base: dict[str, TableQuery], conjuncts: list[exp.Expression]
) -> set[str] | None:
    """The tables joined to the `aggregated` ones (conditions over them alone) once `dimension` is
    taken away, which aggregate below the join; None when that leaves them apart (a cross product)."""
    rest = set(base) - {dimension}
    links = [tables for tables in map(tables_of, conjuncts) if len(tables) > 1 and tables <= rest]
    below = {next(iter(aggregated))}
    while grown := {t for link in links if link & below for t in link} - below:
        below |= grown
    return below if aggregated <= below else None


def _keys(
    select: exp.Select, above: set[str], joining: list[exp.Expression], partials: list[exp.Expression]
) -> dict[tuple[str, str], exp.Column]:
    """The columns of the tables below the join that `select` reads outside its aggregates (and in
    its conditions `joining` the tables above): the keys of the aggregation below the join."""
    inside = {id(n) for p in partials for n in p.walk()}
    keys: dict[tuple[str, str], exp.Column] = {}
    for clause in [*(select.args.get(c) for c in CLAUSES), *joining]:
        for column in walk(clause):
            if isinstance(column, exp.Column) and column.table not in above | {""} and id(column) not in inside:
                keys.setdefault((column.table, column.name), column)
    return keys


def _rewrite(select: exp.Select, shape: _Shape) -> None:
    above, keys = shape.above, shape.keys
    sources = [select.args["from_"].this, *(j.this for j in select.args.get("joins") or [])]
    below = [s for s in sources if s.alias_or_name not in above]
    kept = [s for s in sources if s.alias_or_name in above]
    inner_where = [c for c in shape.conjuncts if not tables_of(c) & above]
    outer_where = [c for c in shape.conjuncts if tables_of(c) & above]
    key_names = {k: f"__k{i}" for i, k in enumerate(keys)}
    outputs = [exp.alias_(keys[k].copy(), name) for k, name in key_names.items()]
    finals = []
    for partial in shape.partials:
        function = partial.this if isinstance(partial, exp.Filter) else partial
        names = []
        for piece in pieces(partial):
            names.append(f"__a{len(outputs) - len(keys)}")
            outputs.append(exp.alias_(piece, names[-1]))
        finals.append(final(type(function), [exp.column(name, ALIAS) for name in names]))
    inner = exp.Select(expressions=outputs)
    inner.set("from_", exp.From(this=below[0]))
    inner.set("joins", [exp.Join(this=s) for s in below[1:]] or None)
    if inner_where:
        inner.set("where", exp.Where(this=exp.and_(*inner_where, copy=False)))
    inner.set("group", exp.Group(expressions=[keys[k].copy() for k in keys]))
    for partial, whole in zip(shape.partials, finals, strict=True):
        partial.replace(whole)
    for clause in [*(select.args.get(c) for c in CLAUSES), *outer_where]:
        for column in list(walk(clause)):
            if isinstance(column, exp.Column) and (column.table, column.name) in key_names:
                column.replace(exp.column(key_names[(column.table, column.name)], ALIAS))
    eager = exp.Subquery(this=inner, alias=exp.TableAlias(this=exp.to_identifier(ALIAS)))
    select.set("from_", exp.From(this=kept[0]))
    select.set("joins", [*(exp.Join(this=s) for s in kept[1:]), exp.Join(this=eager)])
    select.set("where", exp.Where(this=exp.and_(*outer_where, copy=False)) if outer_where else None)
