"""Tables for co-located queries and the queries drawn over them (`tests.test_colocated_answers`):
`fa` and `fb` hash-placed alike on `k` (keys shared, some only in one, some NULL), `dim`
replicated (one group key without a row); NULLs in every column; and a Hypothesis strategy of
queries over them, each with whether every node can answer it over its own buckets."""

from __future__ import annotations

import datetime as dt
import random
from dataclasses import dataclass
from decimal import Decimal

import pyarrow as pa
from hypothesis import strategies as st

from storage import Placement, TableSchema

BUCKETS = 16


def colocated_tables() -> list[tuple[TableSchema, pa.Table]]:
    rng = random.Random(37)

    def maybe(value, share: float = 0.08):
        return None if rng.random() < share else value

    fa = pa.table(
        {
            "k": pa.array([maybe(rng.randrange(150), 0.03) for _ in range(400)], pa.int64()),
            "g": pa.array([maybe(rng.randrange(6)) for _ in range(400)], pa.int64()),
            "x": pa.array([maybe(Decimal(rng.randrange(-500, 5000)) / 100) for _ in range(400)], pa.decimal128(12, 2)),
            "s": pa.array([maybe(rng.choice("pqrst")) for _ in range(400)], pa.string()),
            "d": pa.array([maybe(dt.date(2024, 1, 1) + dt.timedelta(rng.randrange(90))) for _ in range(400)]),
        }
    )
    fb = pa.table(
        {
            "k": pa.array([maybe(rng.randrange(200), 0.03) for _ in range(600)], pa.int64()),
            "h": pa.array([maybe(rng.randrange(6)) for _ in range(600)], pa.int64()),
            "y": pa.array([maybe(rng.random() * 2) for _ in range(600)], pa.float64()),
        }
    )
    dim = pa.table(
        {"g": pa.array([0, 1, 2, 3, 4, 6], pa.int64()), "name": ["zero", "one", "two", "three", "four", "six"]}
    )
    hashed = Placement.parse("hash(k)", BUCKETS)
    return [
        (TableSchema.from_arrow("fa", fa.schema, (), hashed), fa),
        (TableSchema.from_arrow("fb", fb.schema, (), hashed), fb),
        (TableSchema.from_arrow("dim", dim.schema, (), Placement()), dim),
    ]


@dataclass(frozen=True)
class Source:
    """A FROM (and WHERE) over the tables, the columns it offers, and whether it is co-located."""

    sql: str
    columns: tuple[str, ...]
    colocated: bool = True
    outer: bool = False  # a FULL JOIN: a.k may be NULL on every node, so groups by it are split
    # replicated rows preserved against hash-placed ones: co-located only where aggregated over the
    # hash-placed side alone (not COUNT(*)), grouped by the replicated side
    preserving: bool = False


SOURCES = [
    Source("fa a", ("a.k", "a.g", "a.s")),
    Source("fa a JOIN fb b ON a.k = b.k", ("a.k", "a.g", "a.s", "b.h")),
    Source("fa a LEFT JOIN fb b ON a.k = b.k", ("a.k", "a.g", "b.h")),
    Source("fa a FULL JOIN fb b ON b.k = a.k", ("a.k", "b.k", "a.g", "b.h"), outer=True),
    Source("fa a JOIN dim d ON a.g = d.g", ("a.k", "d.name", "a.s")),
    Source("fa a LEFT JOIN dim d ON a.g = d.g", ("a.k", "d.name", "a.g")),
    Source("fa a WHERE EXISTS (SELECT 1 FROM fb b WHERE b.k = a.k AND b.y > 0.5)", ("a.k", "a.g", "a.s")),
    Source("fa a WHERE NOT EXISTS (SELECT 1 FROM fb b WHERE b.k = a.k AND b.h = a.g)", ("a.k", "a.g", "a.s")),
    Source("fa a WHERE a.k IN (SELECT k FROM fb GROUP BY k HAVING count(*) > 3)", ("a.k", "a.s")),
    Source(
        "fa a JOIN (SELECT k, sum(y) AS sy, count(*) AS c FROM fb GROUP BY k) b ON a.k = b.k", ("a.k", "a.g", "b.c")
    ),
    Source("dim d LEFT JOIN fa a ON a.g = d.g", ("d.name", "a.k"), colocated=False, preserving=True),
    Source("fa a JOIN fb b ON a.g = b.h", ("a.k", "a.g", "b.h"), colocated=False),
    Source("fa a WHERE a.x > (SELECT avg(b.y) * 10 FROM fb b WHERE b.h = a.g)", ("a.k", "a.g"), colocated=False),
]
AGGREGATES = ("count(*)", "sum(a.x)", "avg(a.x)", "min(a.s)", "max(a.d)", "count(a.x)", "count(DISTINCT a.s)")


@dataclass(frozen=True)
class Drawn:
    sql: str
    colocated: bool  # every node can answer it over its own buckets


@st.composite
def queries(draw: st.DrawFn) -> Drawn:
    source = draw(st.sampled_from(SOURCES))
    where = " AND a.x > 0" if draw(st.booleans()) else ""
    frm = source.sql + (where if " WHERE " in source.sql else where.replace(" AND", " WHERE", 1))
    shape = draw(st.sampled_from(["aggregate", "rows", "distinct", "window"]))
    colocated = source.colocated
    limit = draw(st.sampled_from(["", " LIMIT 7", " LIMIT 5 OFFSET 3"]))
    if shape == "aggregate":
        keys = draw(st.lists(st.sampled_from(source.columns), max_size=2, unique=True))
        aggregates = draw(st.lists(st.sampled_from(AGGREGATES), min_size=1, max_size=3, unique=True))
        outputs = [*keys, *aggregates]
        having = " HAVING count(*) > 1" if draw(st.booleans()) else ""
        group = f" GROUP BY {', '.join(keys)}" if keys else ""
        positions = ", ".join(str(i + 1) for i in range(len(outputs)))
        sql = f"SELECT {', '.join(outputs)} FROM {frm}{group}{having} ORDER BY {positions}{limit}"
        if "count(DISTINCT a.s)" in aggregates and (source.outer or "a.k" not in keys):
            colocated = False
        if source.preserving:
            colocated = not (where or having or "a.k" in keys or {"count(*)", "count(DISTINCT a.s)"} & set(aggregates))
    elif shape == "rows":
        columns = ["a.k", "a.x", "a.s", "a.d"]
        sql = f"SELECT {', '.join(columns)} FROM {frm} ORDER BY 1, 2, 3, 4{limit}"
    elif shape == "distinct":
        column = draw(st.sampled_from(source.columns))
        sql = f"SELECT DISTINCT {column} FROM {frm} ORDER BY 1{limit}"
    else:
        by = draw(st.sampled_from(["a.k", "a.g"]))
        sql = f"SELECT a.k, a.x, sum(a.x) OVER (PARTITION BY {by}) AS w FROM {frm} ORDER BY 1, 2, 3{limit}"
        colocated = colocated and by == "a.k" and not source.outer
    return Drawn(sql, colocated)
