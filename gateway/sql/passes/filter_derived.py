"""Conditions on the columns of a derived table or a common table expression become conditions on
the rows its body produces, so that they reach the body's tables (`push_predicates`) and, through
their keys, the tables joined to them (`semi_join_edges`)."""

from __future__ import annotations

from sqlglot import exp
from sqlglot.optimizer.scope import traverse_scope
from sqlglot.optimizer.simplify import simplify

from gateway.sql.passes.draft import (
    NOT_ROW_WISE,
    Draft,
    derived_readers,
    filterable_branches,
    per_input_row,
    tables_of,
)
from gateway.sql.tree import has_subquery, nullable_aliases, split_and


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
    readers = derived_readers(scopes)
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
        if not c.find(*NOT_ROW_WISE) and not has_subquery(c) and tables_of(c) == {alias}
    ]
    for condition in own:
        for column in condition.find_all(exp.Column):
            column.set("table", None)
    return own


def _filter(body: exp.Expression, kept: list[list[exp.Expression]]) -> None:
    """`body` (a SELECT or a set operation of them) filtered by what its readers keep: in each
    branch, each reader's conditions over the outputs it computes per input row (the others left
    out: a weaker condition, still kept by every row the reader keeps); their OR, simplified,
    joins the branch's WHERE."""
    names, branches = filterable_branches(body)
    for select in branches:
        values = (p.unalias() for p in select.expressions)
        outputs = {name: value for name, value in zip(names, values, strict=True) if per_input_row(select, value)}
        terms = []
        for conditions in kept:
            movable = [over for c in conditions if (over := _over(c, outputs)) is not None]
            if not movable:
                break  # this reader needs every row the branch gives
            terms.append(exp.and_(*movable, copy=False))
        else:
            pushed = simplify(exp.or_(*terms, copy=False))
            if pushed != exp.true():
                select.where(pushed, copy=False)


def _over(condition: exp.Expression, outputs: dict[str, exp.Expression]) -> exp.Expression | None:
    """`condition` over a select's output names, with their expressions in their place (None: it
    reads another column)."""
    if any(column.name not in outputs for column in condition.find_all(exp.Column)):
        return None
    condition = condition.copy()
    for column in list(condition.find_all(exp.Column)):
        replacement = outputs[column.name].copy()
        if column is condition:
            return replacement
        column.replace(replacement)
    return condition
