"""The MariaDB node backend (PerformSys on MySQL): TPC-H loaded into a real MariaDB server, nodes
holding K connections each, queries sent unchanged through the gateway and the balancer."""

from __future__ import annotations

import datetime

import pyarrow as pa
import pytest
import sqlglot
from sqlalchemy import create_engine, text

from balancer import MysqlBackend, NodeServer
from benchmarks.compare import rows, rows_match
from gateway import Client, GatewayError
from loadtests import query
from regions import EmbeddedRegion, load_config
from storage import StorageError, load_mysql
from tests.balancing import until
from tests.http import http


@pytest.fixture(scope="module")
def mysql_region(mariadb):
    config = load_config(None, ['region.backend="mysql"', "gateway.port=0"])
    nodes = [NodeServer(f"m{i}", MysqlBackend(mariadb, 2), 2) for i in range(2)]
    with EmbeddedRegion(config, nodes) as region:
        yield region
    for node in nodes:
        node.backend.close()


def test_the_loader_creates_keys_and_swaps_tables_atomically(mariadb) -> None:
    engine = create_engine(mariadb.replace("mysql://", "mysql+pymysql://"))
    with engine.connect() as conn:
        keys = conn.execute(text("SHOW KEYS FROM lineitem")).all()
        assert {k[4] for k in keys if k[2] == "PRIMARY"} == {"l_orderkey", "l_linenumber"}
        assert conn.execute(text("SELECT COUNT(*) FROM region")).scalar() == 5
    with pytest.raises(StorageError, match="cannot be loaded"):
        load_mysql(mariadb, "region", pa.table({"r_regionkey": pa.array([[1]], pa.list_(pa.int64()))}))
    with engine.connect() as conn:  # the failed load left the old table
        assert conn.execute(text("SELECT COUNT(*) FROM region")).scalar() == 5
        assert not conn.execute(text("SHOW TABLES LIKE 'region__loading'")).all()
    engine.dispose()


@pytest.mark.parametrize("number", range(1, 15))
def test_tpch_queries_run_unchanged_on_mariadb(mysql_region, duck, number) -> None:
    sql = sqlglot.transpile(query(number), read="duckdb", write="mysql")[0]
    result = Client(mysql_region.url).execute(sql)
    expected = duck.sql(query(number)).to_arrow_table()
    assert rows_match(rows(result.table), rows(expected), ordered=False, tolerance=1e-4)


def test_parameters_are_bound_by_the_driver(mysql_region) -> None:
    sql = "SELECT COUNT(*) AS n FROM orders WHERE o_orderpriority = :p AND o_orderdate >= :d"
    client = Client(mysql_region.url)
    n = client.execute(sql, {"p": "1-URGENT", "d": datetime.date(1995, 1, 1)}).table
    assert n.column("n").to_pylist()[0] > 0
    assert client.execute(sql, {"p": "x' OR '1'='1", "d": "1990-01-01"}).table.column("n").to_pylist() == [0]


def test_mariadb_errors_keep_their_meaning(mysql_region) -> None:
    client = Client(mysql_region.url)
    with pytest.raises(GatewayError) as info:
        client.execute("SELECT * FROM no_such_table")
    assert info.value.status == 400 and info.value.code == "undefined_table"
    with pytest.raises(GatewayError) as info:
        client.execute("UPDATE nation SET n_name = 'x'")
    assert info.value.status == 422 and info.value.code == "read_only"


def test_cancel_kills_the_query_on_the_server(mysql_region) -> None:
    client = Client(mysql_region.url)
    statement = http("POST", f"{mysql_region.url}/v1/statements", {"sql": "SELECT SLEEP(60)", "wait": 0}).json()["id"]
    balancer = mysql_region.gateway.balancer

    def busy() -> int:
        return sum(n["running"] for m in balancer.snapshot()["members"] for n in m["nodes"])

    until(mysql_region, lambda: busy() == 1, what="the query running")
    assert client.cancel(statement)["state"] == "cancelled"
    until(mysql_region, lambda: busy() == 0, timeout=10, what="the connection free again")
    assert client.execute("SELECT 1 AS one").table.column("one").to_pylist() == [1]
