"""Conditions on the columns of a derived table or a common table expression become conditions on
the rows its body produces, so that they reach the body's tables (`push_predicates`) and, through
their keys, the tables joined to them (`semi_join_edges`)."""

from __future__ import annotations

from collections import defaultdict

from sqlglot import exp
from sqlglot.optimizer.scope import Scope, traverse_scope
from sqlglot.optimizer.simplify import simplify

from gateway.sql.parse import SET_OPERATIONS
from gateway.sql.passes.draft import Draft, nullable_aliases
from gateway.sql.tree import has_subquery, split_and

_NOT_MOVABLE = (exp.AggFunc, exp.Window, exp.Rand, exp.Subquery, exp.Exists)


def filter_derived(draft: Draft) -> Draft:
    """Filter each body by the OR of what its readers keep: every reference's WHERE conjuncts over
    that reference's columns alone (the reader keeps them too). A reader with none, or on the
    NULL-extended side of an outer join, needs every row, and the body stays as it is. Through a
    set operation into each branch; into a branch only over columns it computes row by row or
    groups by, and not past a LIMIT, a window or grouping sets. Outermost bodies first: what
    one receives, the next below it may receive in turn.

    Example (TPC-DS Q4): ``WITH year_total AS (SELECT c_customer_id, d_year AS dyear, SUM(...) ...
    GROUP BY c_customer_id, ..., d_year UNION ALL ...) SELECT ... FROM year_total t_s_firstyear,
    year_total t_s_secyear ... WHERE t_s_firstyear.dyear = 2001 AND t_s_secyear.dyear = 2002 ...``
    -> each branch of year_total filtered by ``d_year = 2001 OR d_year = 2002``, which date_dim's
    sub-query evaluates, and whose keys filter the sales tables' scans.
    """
    scopes = traverse_scope(draft.tree)
    readers: dict[int, list[tuple[exp.Select, str]]] = defaultdict(list)
    for scope in scopes:
        for alias, (_, source) in scope.selected_sources.items():
            if isinstance(source, Scope):
                readers[id(source)].append((scope.expression, alias))
    for body in reversed(scopes):
        kept = [_kept(select, alias) for select, alias in readers.get(id(body), [])]
        if kept and all(kept):
            _filter(body.expression, kept)
    return draft


def _kept(select: exp.Expression, alias: str) -> list[exp.Expression]:
    """The conditions `select` keeps the rows of `alias` by, over the names of its columns (none:
    it needs every row)."""
    if not isinstance(select, exp.Select) or alias in nullable_aliases(select):
        return []
    where = select.args.get("where")
    own = [
        c.copy()
        for c in split_and(where.this if where is not None else None)
        if not c.find(*_NOT_MOVABLE) and not has_subquery(c) and _tables(c) == {alias}
    ]
    for condition in own:
        for column in condition.find_all(exp.Column):
            column.set("table", None)
    return own


def _tables(node: exp.Expression) -> set[str]:
    return {column.table for column in node.find_all(exp.Column)}


def _filter(body: exp.Expression, kept: list[list[exp.Expression]]) -> None:
    """`body` (a SELECT or a set operation of them) filtered by what its readers keep: the OR of
    their conditions over its output names."""
    if isinstance(body, SET_OPERATIONS):
        names = [p.alias_or_name for p in _leftmost(body).expressions]
        for branch in _branches(body):
            _filter_select(branch, kept, names)
    elif isinstance(body, exp.Select):
        _filter_select(body, kept, [p.alias_or_name for p in body.expressions])


def _leftmost(body: exp.Expression) -> exp.Expression:
    while isinstance(body, SET_OPERATIONS):
        body = body.this
    return body


def _branches(body: exp.Expression) -> list[exp.Select]:
    if isinstance(body, SET_OPERATIONS):
        return [*_branches(body.this), *_branches(body.expression)]
    return [body] if isinstance(body, exp.Select) else []


def _filter_select(select: exp.Select, kept: list[list[exp.Expression]], names: list[str]) -> None:
    """Each reader's conditions over columns `select` computes row by row (or groups by, or that
    are constant), the others left out (a weaker condition, still kept by every row the reader
    keeps); their OR, simplified, joins the WHERE."""
    distinct = select.args.get("distinct")
    if select.args.get("limit") or select.args.get("offset") or (distinct and distinct.args.get("on")):
        return
    if select.find(exp.Window):
        return
    group = select.args.get("group")
    if group is not None and any(group.args.get(a) for a in ("grouping_sets", "cube", "rollup")):
        return
    grouped = group is not None or any(p.find(exp.AggFunc) for p in select.expressions)
    keys = group.expressions if group is not None else []
    outputs = {}
    for name, projection in zip(names, select.expressions, strict=False):
        value = projection.unalias()
        if not value.find(*_NOT_MOVABLE) and (not grouped or value in keys or not value.find(exp.Column)):
            outputs[name] = value
    terms = []
    for conditions in kept:
        movable = [_over(c, outputs) for c in conditions if all(col.name in outputs for col in c.find_all(exp.Column))]
        if not movable:
            return  # this reader needs every row the select gives
        terms.append(exp.and_(*movable, copy=False))
    pushed = simplify(exp.or_(*terms, copy=False))
    if pushed != exp.true():
        select.where(pushed, copy=False)


def _over(condition: exp.Expression, outputs: dict[str, exp.Expression]) -> exp.Expression:
    """`condition` over a select's output names, with their expressions in their place."""
    condition = condition.copy()
    for column in list(condition.find_all(exp.Column)):
        replacement = outputs[column.name].copy()
        if column is condition:
            return replacement
        column.replace(replacement)
    return condition
