"""The plan of a query without a table: the coordinator evaluates its select list once."""

from __future__ import annotations

from sqlglot import exp

from gateway.sql.errors import SqlError
from gateway.sql.parse import CheckedQuery
from gateway.sql.plan import LocalQuery, Plan
from gateway.sql.translate import NotTranslatable, plain, to_ir


def plan_constant(query: CheckedQuery) -> Plan:
    """``SELECT 1 + 2 AS three``: each output in the nodes' expression language, over one row."""
    outputs = []
    for name, projection in zip(query.names, query.tree.expressions, strict=True):
        expression = projection.this if isinstance(projection, exp.Alias) else projection
        try:
            outputs.append((name, to_ir(expression, plain)))
        except NotTranslatable as e:
            raise SqlError(f"cannot evaluate {e} without a table") from None
    return Plan(
        "coordinator", query, local=LocalQuery(scan=None, request=None, aggregating=False, keys=[], outputs=outputs)
    )
