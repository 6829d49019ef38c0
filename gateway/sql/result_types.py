"""The types of a result, the same whichever path answered it (docs/sql.md, "One semantics on
every path"). The nodes and Spark agree on values and scales but not on decimal precisions: a SUM
of DECIMAL(15, 2) is DECIMAL(18, 2) on the nodes (64-bit) and DECIMAL(25, 2) in Spark, an AVG a
DOUBLE on the nodes and DECIMAL(19, 6) in Spark. The coordinator casts every result to one rule:

- a column as stored, and MIN / MAX / FIRST / LAST / ANY_VALUE of one, keep the column's type;
- AVG (and the other means Spark answers as decimals) is a DOUBLE, as DuckDB gives it;
- any other DECIMAL (a SUM, arithmetic, a CASE or COALESCE over decimals ...) is DECIMAL(38, s),
  its scale s as computed (DuckDB's precision for SUM, and the widest for the rest).
"""

from __future__ import annotations

import pyarrow as pa
from sqlglot import exp

MAX_PRECISION = 38
_KEEPS_TYPE = (exp.Min, exp.Max, exp.FirstValue, exp.LastValue, exp.AnyValue)
_MEANS = (exp.Avg, exp.Median, exp.PercentileCont)


def type_rules(tree: exp.Query) -> list[str] | None:
    """For each output column of `tree` (the query as written, before planning rewrites it), what
    a DECIMAL result becomes: "keep", "double" or "wide"; None where the outputs are not known."""
    select = tree
    while isinstance(select, exp.SetOperation):  # a set operation's columns are its first branch's
        select = select.this
    if not isinstance(select, exp.Select) or any(isinstance(p, exp.Star) for p in select.expressions):
        return None
    return [_rule(projection.unalias()) for projection in select.expressions]


def _rule(expression: exp.Expression) -> str:
    inner = expression.this if isinstance(expression, exp.Window) else expression
    if isinstance(inner, _MEANS):
        return "double"
    if isinstance(inner, exp.Column) or (isinstance(inner, _KEEPS_TYPE) and isinstance(inner.this, exp.Column)):
        return "keep"
    return "wide"


def stable_types(table: pa.Table, rules: list[str] | None) -> pa.Table:
    """`table` with its decimal columns cast by `rules` (`type_rules`)."""
    if rules is None or len(rules) != table.num_columns:
        return table
    fields = [field.with_type(_stable(field.type, rule)) for field, rule in zip(table.schema, rules, strict=True)]
    schema = pa.schema(fields)
    return table if schema.equals(table.schema) else table.cast(schema)


def _stable(arrow: pa.DataType, rule: str) -> pa.DataType:
    if not pa.types.is_decimal(arrow) or rule == "keep":
        return arrow
    return pa.float64() if rule == "double" else pa.decimal128(MAX_PRECISION, arrow.scale)
