"""Each sub-query returns only the columns the rest of the query still reads."""

from __future__ import annotations

from sqlglot.optimizer.scope import traverse_scope

from gateway.sql.passes.draft import Draft, Key, owner


def prune_columns(draft: Draft) -> Draft:
    """Set every sub-query's columns to those of its table that the query reads once the earlier
    passes have taken conditions and expressions out (at least one column, so that its rows
    can be counted, unless it computes one).

    Example: ``SELECT SUM(l.__e0) FROM lineitem l, orders o WHERE l.l_orderkey = o.o_orderkey``
    (``l_shipdate > ...`` pushed, the revenue computed): lineitem returns l_orderkey and __e0.
    """
    needed = _columns_by_source(draft)
    for key, scan in draft.queries.items():
        used = needed.get(key, set())
        scan.columns = [c.name for c in scan.info.schema.columns if c.name in used]
        if not scan.columns and not scan.computed:
            scan.columns = [scan.info.schema.columns[0].name]
    return draft


def _columns_by_source(draft: Draft) -> dict[Key, set[str]]:
    """For every (scope, table alias), the names of its columns the query still uses."""
    used: dict[Key, set[str]] = {}
    for scope in traverse_scope(draft.tree):  # the tree as it is now
        for column in scope.columns:
            found = owner(scope, column)
            if found is not None:
                used.setdefault((id(found.expression), column.table), set()).add(column.name)
    return used
