"""Small tables for SQL semantics: NULLs, empty tables, non-ASCII text."""

from __future__ import annotations

import datetime as dt
import decimal

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
    events = pa.table(
        {
            "person_id": pa.array([1, 3, 3, 4, 7, None], pa.int64()),
            "at": pa.array(
                [
                    dt.datetime(2024, 1, 1, 8, 30),
                    dt.datetime(2024, 2, 29, 23, 59, 59, 500000),
                    None,
                    dt.datetime(1999, 12, 31, 0, 0),
                    dt.datetime(2024, 1, 1, 8, 30),
                    dt.datetime(2030, 6, 1, 12, 0),
                ],
                pa.timestamp("us"),
            ),
            "weight": pa.array([0.5, -1.25, None, 3.0e10, 0.1, 2.0], pa.float64()),
            "ok": pa.array([True, False, None, True, True, False], pa.bool_()),
            "kind": pa.array(["größe", "a", "a", None, "Ωmega", "b"], pa.string()),
        }
    )
    empty = people.slice(0, 0)
    return [
        (TableSchema.from_arrow("events", events.schema, (), Placement.parse("hash(person_id)", 4)), events),
        (TableSchema.from_arrow("people", people.schema, ("city",), Placement.parse("hash(id)", 4)), people),
        (TableSchema.from_arrow("visits", visits.schema, (), Placement.parse("replicated")), visits),
        (TableSchema.from_arrow("empty_people", empty.schema, (), Placement.parse("hash(id)", 4)), empty),
    ]
