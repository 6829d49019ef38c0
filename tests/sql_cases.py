"""Small tables for SQL semantics (NULLs, empty tables, non-ASCII text) and result comparison."""

from __future__ import annotations

import datetime as dt
import decimal
import math
from typing import Any

import pyarrow as pa

from storage import Placement, TableSchema

D = decimal.Decimal


def edge_tables() -> list[tuple[TableSchema, pa.Table]]:
    people = pa.table(
        {
            "id": pa.array([1, 2, 3, 4, 5, 6, 7], pa.int64()),
            "name": pa.array(["Zoë", "Jürgen", "東京", "Ørsted", None, "Ana", "zoe"], pa.string()),
            "city": pa.array(["Berlin", None, "Tōkyō", "Berlin", None, "Lima", "Berlin"], pa.string()),
            "age": pa.array([31, None, 45, 31, 22, None, 60], pa.int32()),
            "score": pa.array(
                [D("1.50"), D("-2.25"), None, D("10.00"), D("0.05"), None, D("3.33")], pa.decimal128(10, 2)
            ),
            "joined": pa.array(
                [
                    dt.date(2020, 1, 31),
                    None,
                    dt.date(2021, 2, 28),
                    dt.date(2019, 12, 31),
                    None,
                    dt.date(2022, 6, 1),
                    None,
                ]
            ),
        }
    )
    visits = pa.table(
        {
            "person_id": pa.array([1, 1, 3, 4, 9, None, 3], pa.int64()),
            "amount": pa.array(
                [D("10.00"), D("5.50"), None, D("7.25"), D("1.00"), D("2.00"), D("4.00")], pa.decimal128(10, 2)
            ),
            "note": pa.array(["café", "naïve", "日本語", None, "x", "y", "Ωmega"], pa.string()),
        }
    )
    empty = people.slice(0, 0)
    return [
        (TableSchema.from_arrow("people", people.schema, ("city",), Placement.parse("hash(id)", 4)), people),
        (TableSchema.from_arrow("visits", visits.schema, (), Placement.parse("replicated")), visits),
        (TableSchema.from_arrow("empty_people", empty.schema, (), Placement.parse("hash(id)", 4)), empty),
    ]


def _same(a: Any, b: Any, tolerance: float) -> bool:
    if a is None or b is None:
        return a is None and b is None
    if isinstance(a, dt.date) and isinstance(b, dt.datetime) and b.time() == dt.time(0):
        return a == b.date()  # date + interval: a date here, DuckDB's timestamp at midnight
    if isinstance(a, (float, D)) or isinstance(b, (float, D)):
        a, b = float(a), float(b)
        if math.isnan(a) or math.isnan(b):
            return math.isnan(a) and math.isnan(b)
        return abs(a - b) <= tolerance * max(1.0, abs(b))
    return a == b


def rows_match(got: list[tuple], expected: list[tuple], ordered: bool, tolerance: float = 1e-6) -> bool:
    """Row lists equal (numbers within a relative tolerance); in order when the query orders."""
    if len(got) != len(expected):
        return False
    if not ordered:
        key = lambda row: tuple((v is None, str(type(v)), str(v)) for v in row)  # noqa: E731
        got, expected = sorted(got, key=key), sorted(expected, key=key)
    return all(
        len(g) == len(e) and all(_same(a, b, tolerance) for a, b in zip(g, e, strict=True))
        for g, e in zip(got, expected, strict=True)
    )


def rows(table: pa.Table) -> list[tuple]:
    return [tuple(r.values()) for r in table.to_pylist()]
