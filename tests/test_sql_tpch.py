"""All 22 TPC-H queries give DuckDB's answers at SF 0.01 (numbers within 1e-6, order kept)."""

from __future__ import annotations

import pytest

from loadtests.compare import rows, rows_match
from loadtests.tpch_queries import SINGLE_TABLE, query


@pytest.mark.parametrize("number", range(1, 23), ids=lambda n: f"Q{n}")
def test_tpch_query_matches_duckdb(engine, duck, number: int) -> None:
    sql = query(number)
    result = engine.execute(sql)
    expected = duck.sql(sql).fetchall()
    assert result.engine == ("nodes" if number in SINGLE_TABLE else "spark")
    assert rows_match(rows(result.table), expected, ordered="order by" in sql.lower()), (
        rows(result.table)[:5],
        expected[:5],
    )
