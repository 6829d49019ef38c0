"""One select-project sub-query per base-table reference."""

from __future__ import annotations

from sqlglot import exp
from sqlglot.optimizer.scope import traverse_scope

from gateway.sql.passes.draft import Draft
from gateway.sql.plan import TableQuery


def table_queries(draft: Draft) -> Draft:
    """Traverse the scopes and give every reference to a stored table (not to a common table
    expression) a sub-query of its own, numbered in scope order; the later passes fill them.

    Example: ``SELECT ... FROM orders o WHERE EXISTS (SELECT 1 FROM lineitem l WHERE ...)``:
    [0] lineitem AS l (the subquery's scope comes first), [1] orders AS o.
    """
    draft.scopes = traverse_scope(draft.tree)
    ctes = {c.alias_or_name for c in draft.tree.find_all(exp.CTE)}
    for scope in draft.scopes:
        if scope.is_udtf:  # a LATERAL or UNNEST sees the FROM it follows: those tables are its parent's
            continue
        for alias, source in scope.sources.items():
            if isinstance(source, exp.Table) and source.name not in ctes:
                info = draft.catalog.table(source.name)
                draft.queries[(id(scope.expression), alias)] = TableQuery(len(draft.queries), source.name, alias, info)
    return draft
