"""sqlglot expressions -> the scan expression language of the storage nodes (gpu_kernels.expr).

`to_ir` raises NotTranslatable for anything the nodes cannot evaluate; the planner then leaves
that part to the coordinator or to Spark.
"""

from __future__ import annotations

import decimal
from collections.abc import Callable

from sqlglot import exp

from storage import Expr, Literal, call, col, lit, values

ColumnMap = Callable[[exp.Column], Expr]


class NotTranslatable(Exception):
    pass


def plain(column: exp.Column) -> Expr:
    """A column of the one table a scan reads, by its name (the `ColumnMap` of sub-queries)."""
    return col(column.name)


LONG_IN_LIST = 64  # longer IN lists travel as one values array


_COMPARISONS = {exp.EQ: "=", exp.NEQ: "<>", exp.LT: "<", exp.LTE: "<=", exp.GT: ">", exp.GTE: ">="}
_ARITHMETIC = {exp.Add: "+", exp.Sub: "-", exp.Mul: "*", exp.Div: "/"}
_INTERVAL_UNITS = {"DAY": "interval_day", "MONTH": "interval_month", "YEAR": "interval_year"}
_EXTRACT = {"YEAR": "extract_year", "MONTH": "extract_month", "DAY": "extract_day"}
_TRUNCATED = {"YEAR", "QUARTER", "MONTH", "WEEK", "DAY"}  # date_trunc's parts the nodes take


def literal(node: exp.Literal) -> Literal:
    if node.is_string:
        return lit(node.this)
    text = node.this
    try:
        return lit(int(text))
    except ValueError:
        pass
    number = decimal.Decimal(text)
    if "e" in text.lower():
        return lit(float(number), "float64")
    return lit(text, f"decimal(38,{max(0, -number.as_tuple().exponent)})")


def _interval(node: exp.Interval) -> Literal:
    unit = node.args.get("unit")
    unit_name = (unit.name if unit is not None else "").upper().rstrip("S")
    amount = node.this
    if unit_name not in _INTERVAL_UNITS or not isinstance(amount, exp.Literal):
        raise NotTranslatable(f"interval {node.sql()}")
    try:
        count = int(str(amount.this).strip())
    except ValueError:
        raise NotTranslatable(f"interval {node.sql()}") from None
    return lit(count, _INTERVAL_UNITS[unit_name])


def to_ir(node: exp.Expression, column: ColumnMap) -> Expr:
    """Translate `node`; `column` maps each column reference to its IR."""
    kind = type(node)
    if isinstance(node, exp.Column):
        return column(node)
    if isinstance(node, exp.Paren):
        return to_ir(node.this, column)
    if isinstance(node, exp.Literal):
        return literal(node)
    if isinstance(node, exp.Boolean):
        return lit(node.this)
    if isinstance(node, exp.Null):
        return lit(None)
    if isinstance(node, exp.Cast):
        target = node.to.this
        if isinstance(node.this, exp.Literal) and node.this.is_string and target == exp.DataType.Type.DATE:
            return lit(node.this.this, "date")
        raise NotTranslatable(f"cast {node.sql()}")
    if isinstance(node, exp.Interval):
        return _interval(node)
    if kind in _ARITHMETIC:
        return call(_ARITHMETIC[kind], to_ir(node.this, column), to_ir(node.expression, column))
    if isinstance(node, exp.Neg):
        return call("neg", to_ir(node.this, column))
    if kind in _COMPARISONS:
        return call(_COMPARISONS[kind], to_ir(node.this, column), to_ir(node.expression, column))
    if isinstance(node, exp.Between):
        return call("between", *(to_ir(node.args[k], column) for k in ("this", "low", "high")))
    if isinstance(node, exp.In):
        if node.args.get("query") or node.args.get("unnest") or node.args.get("field"):
            raise NotTranslatable("IN with a subquery")
        items = [to_ir(v, column) for v in node.expressions]
        if not all(isinstance(v, Literal) for v in items):
            raise NotTranslatable("IN with non-literal values")
        left = to_ir(node.this, column)
        types = {v.type for v in items}
        if len(items) > LONG_IN_LIST and len(types) == 1 and all(v.value is not None for v in items):
            [type_name] = types
            return call("in", left, values([v.value for v in items], type_name))
        return call("in", left, *items)
    if isinstance(node, exp.Is) and isinstance(node.expression, exp.Null):
        return call("is_null", to_ir(node.this, column))
    if isinstance(node, (exp.Like, exp.ILike)):
        pattern, op = node.expression, "like" if isinstance(node, exp.Like) else "ilike"
        if not (isinstance(pattern, exp.Literal) and pattern.is_string) or node.args.get("escape"):
            raise NotTranslatable(f"{op.upper()} {pattern.sql()}")
        return call(f"not_{op}" if node.args.get("negate") else op, to_ir(node.this, column), literal(pattern))
    if isinstance(node, exp.Not):
        inner = node.this.unnest() if isinstance(node.this, exp.Paren) else node.this
        if isinstance(inner, exp.Is) and isinstance(inner.expression, exp.Null):
            return call("is_not_null", to_ir(inner.this, column))
        if isinstance(inner, (exp.Like, exp.ILike)) and not inner.args.get("negate"):
            op = "not_like" if isinstance(inner, exp.Like) else "not_ilike"
            return call(op, to_ir(inner.this, column), literal(inner.expression))
        return call("not", to_ir(node.this, column))
    if isinstance(node, exp.And):
        return call("and", to_ir(node.this, column), to_ir(node.expression, column))
    if isinstance(node, exp.Or):
        return call("or", to_ir(node.this, column), to_ir(node.expression, column))
    if isinstance(node, exp.Case):
        if node.this is not None:  # CASE x WHEN v THEN ...
            raise NotTranslatable("CASE with an operand")
        args = []
        for branch in node.args.get("ifs", []):
            args += [to_ir(branch.this, column), to_ir(branch.args["true"], column)]
        default = node.args.get("default")
        if default is not None:
            args.append(to_ir(default, column))
        return call("case", *args)
    if isinstance(node, exp.Extract):
        part = node.this.name.upper()
        if part not in _EXTRACT:
            raise NotTranslatable(f"EXTRACT({part})")
        return call(_EXTRACT[part], to_ir(node.expression, column))
    if isinstance(node, (exp.DateTrunc, exp.TimestampTrunc)):
        unit = node.unit.name.upper() if node.unit is not None else ""
        if unit not in _TRUNCATED:
            raise NotTranslatable(f"DATE_TRUNC({unit})")
        return call(f"date_trunc_{unit.lower()}", to_ir(node.this, column))
    if isinstance(node, exp.Substring):
        start, length = node.args.get("start"), node.args.get("length")
        args = [to_ir(node.this, column), to_ir(start, column)] if start is not None else None
        if args is None or not isinstance(start, exp.Literal):
            raise NotTranslatable("SUBSTRING without a literal start")
        if length is not None:
            if not isinstance(length, exp.Literal):
                raise NotTranslatable("SUBSTRING with a computed length")
            args.append(to_ir(length, column))
        return call("substring", *args)
    raise NotTranslatable(node.sql())
