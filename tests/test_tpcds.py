"""TPC-DS whole: its 99 queries at SF 0.01 on two storage nodes and Spark, and on one node
holding every table (its DataFusion joins), every answer equal to DuckDB's on the same data
(`benchmarks.tpcds` generates both, offline)."""

from __future__ import annotations

from contextlib import ExitStack
from pathlib import Path

import duckdb
import pytest

from benchmarks import tpcds
from benchmarks.compare import rows, rows_match
from gateway.background import serve
from gateway.sql.engine import Engine
from gpu_kernels import get_backend
from storage import Node, Store, load_table, read_parquet

SF = 0.01


@pytest.fixture(scope="module")
def generated(tmp_path_factory: pytest.TempPathFactory) -> tuple[dict[str, Path], dict[int, str]]:
    return tpcds.generate(SF, tmp_path_factory.mktemp("tpcds"))


@pytest.fixture(scope="module", params=[2, 1], ids=["spark", "node"])
def tpcds_engine(request, tmp_path_factory: pytest.TempPathFactory, generated, spark, spark_settings):
    """An engine over two nodes holding TPC-DS (fact tables hash-placed, dimensions replicated:
    Spark joins the facts), or over one node holding it all (its DataFusion joins)."""
    files, _ = generated
    root = tmp_path_factory.mktemp("tpcds-region")
    stores = [Store(root / f"n{i}", node=f"node-{i}") for i in range(request.param)]
    for name, path in files.items():
        source = read_parquet([path])
        load_table(stores, tpcds.schema_for(name, source.schema), source)
    with ExitStack() as stack:
        nodes = {s.node: stack.enter_context(serve(Node(s, get_backend("numpy"), slots=2).app())) for s in stores}
        yield Engine(nodes, spark_settings, lambda: spark)


@pytest.fixture(scope="module")
def tpcds_duck(generated):
    files, _ = generated
    con = duckdb.connect()
    con.execute("SET ieee_floating_point_ops = false")
    con.execute("SET error_on_division_by_zero = false")
    for name, path in files.items():
        con.execute(f"CREATE TABLE {name} AS SELECT * FROM read_parquet('{path}')")
    return con


def test_the_generator_gives_24_tables_and_99_queries(generated) -> None:
    files, queries = generated
    assert len(files) == 24 and sorted(queries) == list(range(1, 100))


@pytest.mark.parametrize("number", range(1, 100))
def test_query_answers_as_duckdb(tpcds_engine, tpcds_duck, generated, number: int) -> None:
    sql = generated[1][number]
    expected = tpcds_duck.sql(sql).fetchall()
    result = tpcds_engine.execute(sql)
    got = rows(result.table)
    if len(tpcds_engine.catalog.nodes) == 1:  # every join on the node, but what DataFusion cannot run
        assert result.engine in ("node", "nodes", "coordinator") or "could not run it" in result.plan.why
    ordered = "order by" in sql.lower()
    assert rows_match(got, expected, ordered), (got[:5], expected[:5], len(got), len(expected))
