"""Comparing query results across engines: numbers within a relative tolerance, order optional."""

from __future__ import annotations

import datetime as dt
import decimal
import math
from typing import Any

import pyarrow as pa
import sqlglot
from sqlglot import exp


def same_value(a: Any, b: Any, tolerance: float = 1e-6) -> bool:
    if a is None or b is None:
        return a is None and b is None
    if type(a) is dt.date and isinstance(b, dt.datetime) and b.time() == dt.time(0):
        return a == b.date()  # date + interval: a date here, a timestamp at midnight in DuckDB
    if isinstance(a, (float, decimal.Decimal)) or isinstance(b, (float, decimal.Decimal)):
        a, b = float(a), float(b)
        if math.isnan(a) or math.isnan(b):
            return math.isnan(a) and math.isnan(b)
        return math.isclose(a, b, rel_tol=tolerance, abs_tol=1e-12)  # relative; absolute only around 0
    return a == b


def _sort_key(row: tuple) -> tuple:
    return tuple((v is None, str(type(v)), str(v)) for v in row)


def rows_match(
    got: list[tuple], expected: list[tuple], ordered: bool, tolerance: float = 1e-6, order: list[int] | None = None
) -> bool:
    """Equal row lists; in the same order when the query orders. With `order`, the positions of
    the columns it orders by (`order_columns`), rows tied on them may come in any order."""
    if len(got) != len(expected):
        return False
    if ordered and order is not None:
        keys = [tuple(row[i] for i in order) for row in got], [tuple(row[i] for i in order) for row in expected]
        return rows_match(*keys, ordered=True, tolerance=tolerance) and rows_match(got, expected, False, tolerance)
    if not ordered:
        got, expected = sorted(got, key=_sort_key), sorted(expected, key=_sort_key)
    return all(
        len(g) == len(e) and all(same_value(a, b, tolerance) for a, b in zip(g, e, strict=True))
        for g, e in zip(got, expected, strict=True)
    )


def order_columns(sql: str, names: list[str]) -> list[int] | None:
    """The positions among the result's columns `names` of what the query's outermost ORDER BY
    sorts by; None when it sorts by anything else (its rows are then compared in strict order)."""
    order = sqlglot.parse_one(sql, read="duckdb").args.get("order")
    lowered = [name.lower() for name in names]
    positions = []
    for term in order.expressions if order else []:
        key = term.this
        if isinstance(key, exp.Column) and key.name.lower() in lowered:
            positions.append(lowered.index(key.name.lower()))
        elif isinstance(key, exp.Literal) and key.is_int:
            positions.append(int(key.this) - 1)
        else:
            return None
    return positions or None


def rows(table: pa.Table) -> list[tuple]:
    """The table's rows as tuples (columns by position: two may share a name)."""
    return list(zip(*(column.to_pylist() for column in table.columns), strict=True)) if table.num_columns else []
