"""Spark reads each sub-query as a view of its own."""

from __future__ import annotations

import uuid

from sqlglot import exp

from gateway.sql.passes.draft import Draft


def read_from_views(draft: Draft) -> Draft:
    """Name every sub-query's view (unique to this plan) and put it where the table was, under the
    same alias: what is left of the tree is the statement Spark runs.

    Example: ``FROM lineitem l`` -> ``FROM __cxg_3f2a9c01de_2 AS l``.
    """
    plan_id = uuid.uuid4().hex[:10]
    for scan in draft.queries.values():
        scan.view = f"__cxg_{plan_id}_{scan.index}"
    for scope in draft.scopes:
        for alias, source in scope.sources.items():
            scan = draft.query_of(scope.expression, alias)
            if scan is not None and isinstance(source, exp.Table):
                view = exp.Table(this=exp.to_identifier(scan.view), alias=exp.TableAlias(this=exp.to_identifier(alias)))
                source.replace(view)
    return draft
