"""EXISTS reads no column of its subquery."""

from __future__ import annotations

from sqlglot import exp

from gateway.sql.passes.draft import Draft


def select_one_in_exists(draft: Draft) -> Draft:
    """The select list of every ``EXISTS (SELECT ...)`` becomes ``1``, so that its sub-query
    fetches no columns for it. An aggregate is kept: without GROUP BY it makes the one row that
    EXISTS always finds.

    Example: ``EXISTS (SELECT * FROM lineitem WHERE l_orderkey = o_orderkey)`` ->
    ``EXISTS (SELECT 1 FROM lineitem WHERE l_orderkey = o_orderkey)``.
    """
    for exists in draft.tree.find_all(exp.Exists):
        inner = exists.this
        if isinstance(inner, exp.Select) and not any(e.find(exp.AggFunc) for e in inner.expressions):
            inner.set("expressions", [exp.Literal.number(1)])
    return draft
