"""The equalities along which one sub-query's join keys can filter another's rows."""

from __future__ import annotations

from sqlglot import exp
from sqlglot.optimizer.scope import Scope

from gateway.sql.passes.draft import (
    Draft,
    derived_readers,
    filterable_branches,
    inner_conditions,
    owner,
    per_input_row,
)
from gateway.sql.plan import Edge, TableQuery
from gateway.sql.tree import nullable_aliases, split_and


def semi_join_edges(draft: Draft) -> Draft:
    """Find, scope by scope, the edges the semi-join reduction follows at run time
    (`gateway.sql.reduce`): every two columns of one equivalence class of inner equi-joins
    (``a.x = b.y AND b.y = c.z`` also joins a and c), both ways; and a correlated subquery's
    ``inner.x = outer.y``, from the outer sub-query to the inner one only (inner rows matching no
    outer row cannot change any outer row's result; the reverse would lose NOT EXISTS rows); and a
    table's inner equi-join with a derived table read once, from the table into each branch of the
    derived table that takes that column from a table of its own (`_into_derived`); and
    ``t.x IN (SELECT s.y FROM s ...)`` uncorrelated, from the subquery into t (`_in_subqueries`).

    Example: ``FROM customer c, orders o WHERE c.c_custkey = o.o_custkey`` -> the edge
    customer.c_custkey = orders.o_custkey.
    """
    readers = derived_readers(draft.scopes)
    for scope in draft.scopes:
        base = draft.base(scope)
        if base and isinstance(scope.expression, exp.Select):
            draft.edges += _equi_joins(scope.expression, base, nullable_aliases(scope.expression))
            draft.edges += _into_derived(scope, base, draft, readers)
            draft.edges += _in_subqueries(scope.expression, base, draft)
        draft.edges += _correlated_edges(scope, draft)
    return draft


def _equi_joins(select: exp.Select, base: dict[str, TableQuery], nullable: set[str]) -> list[Edge]:
    """The `a.x = b.y` conditions of inner joins between two tables of this SELECT."""
    pairs = []
    for condition in inner_conditions(select):
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


def _into_derived(scope: Scope, base: dict[str, TableQuery], draft: Draft, readers: dict[int, list]) -> list[Edge]:
    """``d.x = t.y`` between a table t and a derived table d (or common table expression) that
    only this SELECT reads, neither on the NULL-extended side of an outer join: every row of d
    whose x is not among t's values is dropped, so t's values filter, in each branch of d's body,
    the table its x comes from (one way: d's values are known only once it is computed). Not into
    a branch whose rows a LIMIT, a window or grouping sets compute from rows the filter would
    remove, nor where x is an aggregate.

    Example: ``FROM (SELECT ss_sold_date_sk AS date_sk ... FROM store_sales UNION ALL SELECT
    sr_returned_date_sk ... FROM store_returns) s, date_dim WHERE s.date_sk = d_date_sk AND d_date
    BETWEEN ...`` -> date_dim's keys filter store_sales and store_returns."""
    select = scope.expression
    nullable = nullable_aliases(select)
    derived = {
        alias: source
        for alias, (_, source) in scope.selected_sources.items()
        if isinstance(source, Scope) and len(readers.get(id(source), ())) == 1 and alias not in nullable
    }
    edges = []
    for condition in inner_conditions(select) if derived else []:
        if not (isinstance(condition, exp.EQ) and all(isinstance(c, exp.Column) for c in condition.unnest_operands())):
            continue
        for inner, outer in ((condition.this, condition.expression), (condition.expression, condition.this)):
            if inner.table in derived and outer.table in base and outer.table not in nullable:
                for query, column in _origins(derived[inner.table], inner.name, draft):
                    edges.append(Edge(base[outer.table], outer.name, query, column, both_ways=False))
    return edges


def _in_subqueries(select: exp.Select, base: dict[str, TableQuery], draft: Draft) -> list[Edge]:
    """``t.x IN (SELECT s.y FROM s ...)``, a conjunct of the WHERE, t a table of this SELECT not
    NULL-extended and the subquery over s alone, uncorrelated, one row per row of s: a row of t
    whose x is not among s's values fails the WHERE, so s's values filter t (one way: the answer is
    the whole subquery's). TPC-H Q20 at SF 10, its parts too many to be answered first: the parts
    named 'forest%' filter partsupp."""
    where = select.args.get("where")
    nullable = nullable_aliases(select)
    edges = []
    for condition in split_and(where.this) if where is not None else []:
        outer, subquery = condition.this, condition.args.get("query")
        if not (isinstance(condition, exp.In) and isinstance(outer, exp.Column) and subquery is not None):
            continue
        inner = subquery.this if isinstance(subquery, exp.Subquery) else subquery
        if not isinstance(inner, exp.Select) or len(inner.expressions) != 1 or inner.find(exp.Subquery, exp.Exists):
            continue
        value = inner.expressions[0].unalias()
        tables = {t.alias_or_name for t in inner.find_all(exp.Table)}
        if not isinstance(value, exp.Column) or len(tables) != 1 or inner.args.get("limit") or inner.args.get("joins"):
            continue
        if any(c.table not in tables for c in inner.find_all(exp.Column)):
            continue  # correlated
        query = draft.query_of(inner, value.table)
        if query is not None and outer.table in base and outer.table not in nullable and per_input_row(inner, value):
            edges.append(Edge(query, value.name, base[outer.table], outer.name, both_ways=False))
    return edges


def _origins(body: Scope, name: str, draft: Draft) -> list[tuple[TableQuery, str]]:
    """Each branch of `body` whose output `name` is a column of one of its tables, one per input
    row, with that table's sub-query and column."""
    if body.external_columns:
        return []  # a LATERAL body reads the outer row
    names, branches = filterable_branches(body.expression)
    found = []
    for select in branches if name in names else []:
        value = select.expressions[names.index(name)].unalias()
        query = draft.query_of(select, value.table) if isinstance(value, exp.Column) else None
        if query is not None and per_input_row(select, value):
            found.append((query, value.name))
    return found


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
