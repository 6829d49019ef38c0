"""The plan of a query without a table: the coordinator evaluates its select list once, when the
nodes' expression language has every function it calls (else Spark does)."""

from __future__ import annotations

from sqlglot import exp

from gateway.sql.check import CheckedQuery
from gateway.sql.plan import LocalQuery, Plan
from gateway.sql.translate import NotTranslatable, plain, to_ir


def plan_constant(query: CheckedQuery) -> Plan | None:
    """``SELECT 1 + 2 AS three``: each output in the nodes' expression language, over one row;
    None if one is not in it."""
    outputs = []
    for name, projection in zip(query.names, query.tree.expressions, strict=True):
        expression = projection.this if isinstance(projection, exp.Alias) else projection
        try:
            outputs.append((name, to_ir(expression, plain)))
        except NotTranslatable:
            return None
    return Plan(
        "coordinator", query, local=LocalQuery(scan=None, request=None, aggregating=False, keys=[], outputs=outputs)
    )
