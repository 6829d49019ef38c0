"""Python clients of the gateway: the DB-API 2.0 driver, the `cxg://` SQLAlchemy dialect with
pandas, and `cxg query` / `cxg status` on the command line."""

from __future__ import annotations

import datetime
import decimal
import subprocess
import sys

import pandas as pd
import pytest
import sqlalchemy
from sqlalchemy import create_engine, inspect, text

from benchmarks.compare import rows_match
from gateway import Client, dbapi
from loadtests import query


def test_dbapi_cursor_executes_with_parameters_and_describes_columns(native_gateway, duck) -> None:
    assert dbapi.apilevel == "2.0" and dbapi.paramstyle == "named"
    with dbapi.connect(native_gateway.url) as conn:
        cur = conn.cursor()
        cur.execute(
            "select l_returnflag, sum(l_quantity) as qty, min(l_shipdate) as first "
            "from lineitem where l_shipdate >= :since group by l_returnflag order by l_returnflag",
            {"since": datetime.date(1995, 1, 1)},
        )
        names = [d[0] for d in cur.description]
        assert names == ["l_returnflag", "qty", "first"]
        assert cur.description[0][1] == dbapi.STRING and cur.description[1][1] == dbapi.NUMBER
        assert cur.description[2][1] == dbapi.DATETIME
        assert cur.description[1][4:6] == (38, 2) or cur.description[1][1].startswith("decimal")
        first = cur.fetchone()
        assert isinstance(first[1], decimal.Decimal) and isinstance(first[2], datetime.date)
        rest = cur.fetchmany(10)
        assert cur.fetchall() == [] and cur.rowcount == 1 + len(rest)
        expected = duck.sql(
            "select l_returnflag, sum(l_quantity), min(l_shipdate) from lineitem "
            "where l_shipdate >= date '1995-01-01' group by 1 order by 1"
        ).fetchall()
        assert rows_match([first, *rest], expected, ordered=True)
        cur.execute("select count(*) from nation")
        assert list(cur) == [(25,)]


def test_dbapi_errors_follow_pep_249(native_gateway) -> None:
    conn = dbapi.connect(native_gateway.url)
    cur = conn.cursor()
    with pytest.raises(dbapi.ProgrammingError) as info:
        cur.execute("select * from nowhere")
    assert info.value.code == "undefined_table" and info.value.sqlstate == "42P01"
    with pytest.raises(dbapi.NotSupportedError):
        cur.execute("insert into nation values (1)")
    with pytest.raises(dbapi.DataError):
        cur.execute("select * from nation where n_nationkey = :k")
    with pytest.raises(dbapi.ProgrammingError):
        cur.execute("select :k", [1])
    with pytest.raises(dbapi.DataError) as info:  # the values do not parse: a data exception
        cur.execute("select cast(n_name as int) from nation n join region r on n_regionkey = r_regionkey")
    assert info.value.code == "invalid_query" and info.value.sqlstate.startswith("22")
    with pytest.raises(dbapi.ProgrammingError) as info:  # the types do not fit: the statement is wrong
        cur.execute("select n_name + 1 from nation")
    assert info.value.code == "invalid_query" and info.value.sqlstate == "42804"
    assert issubclass(dbapi.ProgrammingError, dbapi.DatabaseError) and issubclass(dbapi.DatabaseError, dbapi.Error)
    conn.close()
    with pytest.raises(dbapi.InterfaceError):
        conn.cursor()
    with pytest.raises(dbapi.InterfaceError):
        dbapi.connect("http://127.0.0.1:9").cursor().execute("select 1")


def test_sqlalchemy_dialect_and_pandas(native_gateway, duck) -> None:
    host_port = native_gateway.url.removeprefix("http://")
    engine = create_engine(f"cxg://{host_port}")
    assert engine.dialect.name == "cxg"
    inspector = inspect(engine)
    assert {"lineitem", "orders", "nation"} <= set(inspector.get_table_names())
    columns = {c["name"]: c["type"] for c in inspector.get_columns("lineitem")}
    assert isinstance(columns["l_quantity"], sqlalchemy.Numeric) and columns["l_quantity"].scale == 2
    assert isinstance(columns["l_shipdate"], sqlalchemy.Date)
    assert inspector.has_table("nation") and not inspector.has_table("nowhere")
    with engine.connect() as conn:
        value = conn.execute(text("select count(*) from orders where o_orderstatus = :s"), {"s": "F"}).scalar()
    assert value == duck.sql("select count(*) from orders where o_orderstatus = 'F'").fetchall()[0][0]
    frame = pd.read_sql(text(query(6)), engine)
    assert list(frame.columns) == ["revenue"]
    assert float(frame["revenue"][0]) == pytest.approx(float(duck.sql(query(6)).fetchall()[0][0]))
    nations = pd.read_sql("select n_name, n_regionkey from nation order by n_name", engine)
    assert len(nations) == 25 and nations["n_name"].iloc[0] == "ALGERIA"
    engine.dispose()


def test_cxg_query_prints_a_table_and_csv(native_gateway) -> None:
    cli = [sys.executable, "-m", "cxg", "query", "--url", native_gateway.url]
    shown = subprocess.run(
        [*cli, "select n_name from nation where n_nationkey < :k order by 1", "--param", "k=3"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert shown.returncode == 0, shown.stderr
    assert "ALGERIA" in shown.stdout and "3 row(s)" in shown.stdout
    csv = subprocess.run(
        [*cli, "--format", "csv", "select count(*) as n from region"], capture_output=True, text=True, timeout=60
    )
    assert csv.stdout.splitlines() == ['"n"', "5"]
    bad = subprocess.run([*cli, "select * from nowhere"], capture_output=True, text=True, timeout=60)
    assert bad.returncode == 2 and "cxg: error [undefined_table]: table 'nowhere' does not exist" in bad.stderr


def test_a_statement_shows_its_progress_and_the_list_and_cxg_status_show_it(native_gateway) -> None:
    client = Client(native_gateway.url)
    scan = client.execute("select count(*) from lineitem where l_quantity > 10")
    spark = client.execute(
        "select c_mktsegment, count(*) from customer join orders on o_custkey = c_custkey "
        "where o_orderstatus = 'F' group by 1 order by 1"
    )
    lineitem = client.execute("select count(*) from lineitem").table.column(0)[0].as_py()
    listed = client.statements(limit=5)["statements"]
    shown = {s["id"]: s for s in listed}
    [first] = [s for s in listed if s["id"] == scan.id]
    assert first["state"] == "succeeded" and first["rows"] == 1 and first["sql"].startswith("select count(*) from line")
    progress = scanned = first["progress"]
    assert progress["subqueries_done"] == progress["subqueries"] >= 1 and progress["rows_scanned"] == lineitem
    joined = shown[spark.id]
    assert joined["engine"] == "spark", joined
    progress = joined["progress"]
    assert progress["subqueries_done"] == progress["subqueries"] >= 1
    assert progress["spark_stages"] >= progress["spark_stages_done"] >= 1
    assert [s["id"] for s in client.statements(state="succeeded", limit=3)["statements"]][1:] == [spark.id, scan.id]
    cli = [sys.executable, "-m", "cxg", "status", "--url", native_gateway.url, "--statements", "--state", "succeeded"]
    printed = subprocess.run(cli, capture_output=True, text=True, timeout=60)
    assert printed.returncode == 0, printed.stderr
    assert scan.id in printed.stdout, printed.stdout
    assert f"{scanned['subqueries']}/{scanned['subqueries']} sub-queries, {lineitem:,} rows" in printed.stdout
    assert "stages" in printed.stdout
