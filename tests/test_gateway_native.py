"""SQL over HTTP on native storage nodes: the gateway plans, the balancer takes a slot on every
node a query reads (one node for replicated tables), the engine runs it; answers match DuckDB."""

from __future__ import annotations

import json
import urllib.error
import urllib.request
from decimal import Decimal

import pyarrow as pa
import pytest

from balancer import NativeBackend, NodeServer
from benchmarks.compare import rows, rows_match
from gateway import ApiError, Client, GatewayError
from gateway.server import MAX_REQUEST
from gateway.sql.limits import MAX_SQL_LENGTH
from loadtests import query
from regions import EmbeddedRegion, load_config
from storage import MAX_EXPRESSION_DEPTH
from tests.balancing import until
from tests.http import http

ARROW = "application/vnd.apache.arrow.stream"


def _arrow(gateway, sql: str, **extra) -> tuple[pa.Table, dict]:
    reply = http("POST", f"{gateway.url}/v1/statements", {"sql": sql, "wait": 120, **extra}, {"Accept": ARROW})
    assert reply.status == 200, reply.body
    statement = reply.headers["X-Cxg-Statement-Id"]
    return pa.ipc.open_stream(reply.body).read_all(), http("GET", f"{gateway.url}/v1/statements/{statement}").json()


@pytest.mark.parametrize("number", [1, 3, 6, 10])
def test_tpch_over_http_matches_duckdb_and_holds_a_slot_on_each_node(native_gateway, duck, number) -> None:
    table, status = _arrow(native_gateway, query(number))
    expected = duck.sql(query(number)).to_arrow_table()
    assert rows_match(rows(table), rows(expected), ordered="order by" in query(number).lower(), tolerance=1e-6)
    assert sorted(status["nodes"]) == ["node-0", "node-1"]  # hash-placed lineitem/orders live on both
    assert status["engine"] == ("nodes" if number in (1, 6) else "spark")


def test_replicated_tables_are_answered_by_one_node(native_gateway, duck) -> None:
    sql = "select r_name, count(*) as n from nation join region on n_regionkey = r_regionkey group by r_name"
    table, status = _arrow(native_gateway, sql)
    assert rows_match(rows(table), rows(duck.sql(sql).to_arrow_table()), ordered=False)
    assert len(status["nodes"]) == 1


def test_named_parameters_are_bound_in_the_syntax_tree(native_gateway, duck) -> None:
    sql = "select count(*) as n from orders where o_orderdate >= :since and o_orderpriority = :priority"
    params = {"since": {"type": "date", "value": "1995-01-01"}, "priority": "1-URGENT"}
    table, _ = _arrow(native_gateway, sql, params=params)
    expected = duck.sql(
        "select count(*) from orders where o_orderdate >= date '1995-01-01' and o_orderpriority = '1-URGENT'"
    ).fetchall()
    assert table.column("n").to_pylist() == [expected[0][0]]
    hostile = {"since": {"type": "date", "value": "1995-01-01"}, "priority": "x' or '1'='1"}
    table, _ = _arrow(native_gateway, sql, params=hostile)
    assert table.column("n").to_pylist() == [0]  # a value stays a value


def test_constant_queries_and_explain(native_gateway) -> None:
    table, status = _arrow(native_gateway, "select 1 + 1 as two")
    assert table.to_pylist() == [{"two": 2}] and status["nodes"] == []
    table, _ = _arrow(native_gateway, "explain " + query(3))
    text = "\n".join(table.column("plan").to_pylist())
    assert "spark" in text.lower() and "lineitem" in text
    table, _ = _arrow(native_gateway, "explain analyze " + query(3))  # run, with what each part did
    text = "\n".join(table.column("plan").to_pylist())
    assert "executed in" in text and ": 10 row(s)" in text and "fetched first" in text and "\nSpark: " in text


def test_explain_sends_nothing_to_a_node(native_gateway, region) -> None:
    def scans() -> int:
        return sum(http("GET", f"{url}/v1/node").json()["scans"].get("started", 0) for url in region.values())

    before = scans()
    for number in (3, 18, 22):  # joins; Q18's and Q22's subqueries are answered first when it runs
        table, status = _arrow(native_gateway, "explain " + query(number))
        text = "\n".join(table.column("plan").to_pylist())
        assert status["nodes"] == [] and "rows:" not in text, "described, not run: no slot, no scan"
    assert "answered first on the nodes" in text
    assert scans() == before
    _arrow(native_gateway, "explain analyze " + query(22))
    assert scans() > before, "EXPLAIN ANALYZE runs the query"


def test_metadata_windows_and_set_operations_over_http(native_gateway, duck) -> None:
    tables, _ = _arrow(native_gateway, "show tables")
    assert "lineitem" in tables.column("name").to_pylist()
    described, _ = _arrow(native_gateway, "describe nation")
    assert described.column("column_name").to_pylist() == ["n_nationkey", "n_name", "n_regionkey", "n_comment"]
    sql = (
        "select n_name, rank() over (partition by n_regionkey order by n_name) as r from nation "
        "union all select r_name, 0 from region order by 1, 2"
    )
    table, _ = _arrow(native_gateway, sql)
    assert rows_match(rows(table), rows(duck.sql(sql).to_arrow_table()), ordered=True)


@pytest.mark.parametrize(
    ("sql", "status", "code"),
    [
        ("select * from nowhere", 400, "undefined_table"),
        ("select nope from nation", 400, "undefined_column"),
        ("select n_name from nation pivot (count(*) for n_regionkey in (1))", 422, "unsupported"),  # LATERAL runs now
        ("delete from nation", 422, "read_only"),
        ("select n_name + 1 from nation", 400, "invalid_query"),  # refused by the nodes' type check
        ("select cast(n_name as int) from nation n join region r on n_regionkey = r_regionkey", 400, "invalid_query"),
        ("select n_name from nation where n_name < date '1995-02-29'", 400, "invalid_literal"),
    ],
)
def test_native_errors(native_gateway, sql, status, code) -> None:
    reply = http("POST", f"{native_gateway.url}/v1/statements", {"sql": sql})
    assert reply.status == status and reply.json()["error"]["code"] == code


def test_tables_endpoint_lists_columns_and_placement(native_gateway) -> None:
    tables = Client(native_gateway.url).tables()
    assert {"lineitem", "orders", "nation"} <= set(tables)
    assert tables["lineitem"]["placement"].startswith("hash")
    assert {"name": "l_quantity", "type": "decimal(15,2)", "nullable": False} in tables["lineitem"]["columns"]


@pytest.mark.parametrize("stop", ["cancel", "timeout"])
def test_a_cancelled_or_timed_out_spark_query_frees_the_slots_on_every_node(native_gateway, spark, stop) -> None:
    client = Client(native_gateway.url)
    slow = "select count(*) from lineitem a join lineitem b on a.l_orderkey < b.l_orderkey"
    balancer = native_gateway.gateway.balancer
    tracker = spark.sparkContext.statusTracker()

    def busy() -> int:
        return sum(n["running"] for m in balancer.snapshot()["members"] for n in m["nodes"])

    if stop == "cancel":  # Spark holds the rows it joins: the nodes' slots go to the next queries
        statement = http("POST", f"{native_gateway.url}/v1/statements", {"sql": slow, "wait": 0}).json()["id"]
        until(native_gateway, lambda: tracker.getActiveJobsIds(), timeout=30, what="the Spark job running")
        until(native_gateway, lambda: busy() == 0, timeout=30, what="the nodes' slots freed while Spark joins")
        assert client.execute("select count(*) as n from nation").table.column("n").to_pylist() == [25]
        assert http("GET", f"{native_gateway.url}/v1/statements/{statement}").json()["state"] == "running"
        assert client.cancel(statement)["state"] == "cancelled"
    else:
        reply = http("POST", f"{native_gateway.url}/v1/statements", {"sql": slow, "wait": 60, "timeout": 8})
        assert reply.status == 504 and reply.json()["error"]["code"] == "timeout", reply.body
    until(native_gateway, lambda: busy() == 0, timeout=30, what="both slots freed")
    engine = native_gateway.gateway.executor.engine
    until(native_gateway, lambda: not engine._running, timeout=60, what="the Spark job stopped")
    until(native_gateway, lambda: not tracker.getActiveJobsIds(), timeout=60, what="no Spark job left")
    assert client.execute("select count(*) as n from nation").table.column("n").to_pylist() == [25]
    with pytest.raises(GatewayError) as info:
        client.execute("select count(*) from nation group by n_name having")
    assert info.value.status == 400


def _raw(gateway, body: bytes, content_type: str = "application/json"):
    """POST bytes as they are (no encoding by the helper)."""
    request = urllib.request.Request(
        f"{gateway.url}/v1/statements", data=body, method="POST", headers={"Content-Type": content_type}
    )
    try:
        with urllib.request.urlopen(request, timeout=60) as response:
            return response.status, response.headers.get("Content-Type"), response.read()
    except urllib.error.HTTPError as e:
        return e.code, e.headers.get("Content-Type"), e.read()


DEEP_OR = " or ".join(f"n_nationkey = {i}" for i in range(MAX_EXPRESSION_DEPTH + 10))
BAD_INPUT = {
    "a body that is not UTF-8": (b'{"sql": "select \xff\xfe"}', "application/json", 400, "invalid_request"),
    "SQL text that is not UTF-8": (b"select \xff", "text/plain", 400, "invalid_request"),
    "JSON nested past Python's recursion": (
        b'{"sql": ' + b"[" * 200_000 + b"]" * 200_000 + b"}",
        "application/json",
        400,
        "invalid_request",
    ),
    "a body past the request bound": (
        b'{"sql": "select 1' + b" " * (MAX_REQUEST + 1) + b'"}',
        "application/json",
        413,
        "request_too_large",
    ),
    "SQL past its length bound": (("select 1" + " " * MAX_SQL_LENGTH).encode(), "text/plain", 400, "too_complex"),
    "an OR chain past the depth bound": (
        f"select count(*) from nation where {DEEP_OR}".encode(),
        "text/plain",
        400,
        "too_complex",
    ),
    "a LIMIT past 64 bits on the nodes": (
        b"select n_name from nation limit 99999999999999999999999",
        "text/plain",
        400,
        "numeric_value_out_of_range",
    ),
    "a LIMIT past 64 bits on Spark": (
        b"select n_name from nation join region on n_regionkey = r_regionkey limit 99999999999999999999999",
        "text/plain",
        400,
        "numeric_value_out_of_range",
    ),
    "an overflow on the nodes": (
        b"select n_nationkey * 9223372036854775807 from nation",
        "text/plain",
        400,
        "numeric_value_out_of_range",
    ),
    "params that are not an object": (
        b'{"sql": "select 1", "params": [1]}',
        "application/json",
        400,
        "invalid_request",
    ),
}


@pytest.mark.parametrize("case", list(BAD_INPUT))
def test_bad_input_is_a_4xx_in_the_error_format(native_gateway, case: str) -> None:
    body, content_type, status, code = BAD_INPUT[case]
    got, media, reply = _raw(native_gateway, body, content_type)
    assert media.startswith("application/json"), reply[:200]
    assert (got, json.loads(reply)["error"]["code"]) == (status, code), reply[:300]
    balancer = native_gateway.gateway.balancer
    assert sum(n["running"] for m in balancer.snapshot()["members"] for n in m["nodes"]) == 0, "no slot left busy"


def test_a_query_failing_for_a_reason_nothing_names_is_an_execution_error_and_a_handler_s_a_defect() -> None:
    failure = ValueError("no room left in the buffer\nat line 2")
    assert ApiError.of(failure, query=True).code == "execution_error"
    assert ApiError.of(failure, query=True).message == "query failed: no room left in the buffer"
    assert ApiError.of(failure).code == "internal_error"


def test_error_messages_show_no_server_paths(native_gateway) -> None:
    message = ApiError(500, "internal_error", "could not open /srv/cxg/data/node-0/lineitem/3.blk").body()["message"]
    assert message == "could not open .../3.blk"
    assert "http://127.0.0.1:8101/v1/scan" in ApiError(503, "x", "node http://127.0.0.1:8101/v1/scan").body()["message"]


def test_a_token_reads_only_the_tables_it_is_given(region_stores, region) -> None:
    tokens = 'gateway.tokens=[{name="analyst", token="t-1", tables=["nation", "Region"]}, {name="all", token="t-2"}]'
    config = load_config(None, ["gateway.port=0", 'spark.master="local[2]"', 'spark.driver_memory="2g"', tokens])
    nodes = [NodeServer(s.node, NativeBackend(s), 2, region[s.node]) for s in region_stores]
    with EmbeddedRegion(config, nodes) as embedded:

        def ask(sql: str, token: str):
            headers = {"Authorization": f"Bearer {token}"}
            return http("POST", f"{embedded.url}/v1/statements", {"sql": sql}, headers)

        joined = "select count(*) from nation join region on n_regionkey = r_regionkey"
        assert ask(joined, "t-1").status == 200
        for sql in (
            "select count(*) from orders",
            "select count(*) from nation where n_nationkey in (select c_nationkey from customer)",
            "with o as (select * from orders) select count(*) from o",
        ):
            refused = ask(sql, "t-1")
            assert refused.status == 403 and refused.json()["error"]["code"] == "forbidden_table", refused.body
            assert "analyst" in refused.json()["error"]["message"]
        assert ask("select count(*) from orders", "t-2").status == 200
        assert ask("select 1 as one", "t-1").status == 200  # no table: nothing to refuse


def test_a_row_limit_stops_a_query_one_row_past_it(native_gateway, engine, duck) -> None:
    """The nodes and Spark stop after max_rows + 1 rows; an ordered query keeps its first rows
    (its sort keeps the top ones only); a smaller LIMIT is left as written."""
    joined = "select o_orderkey from orders join customer on o_custkey = c_custkey"
    ordered = "select o_orderkey, o_totalprice from orders join customer on o_custkey = c_custkey order by 2 desc, 1"
    for sql in ("select l_orderkey from lineitem", joined, "select l_orderkey from lineitem order by 1 desc", ordered):
        reply = http("POST", f"{native_gateway.url}/v1/statements", {"sql": sql, "max_rows": 10})
        assert reply.status == 200 and reply.json()["truncated"] is True and len(reply.json()["rows"]) == 10
        if "order by" in sql:
            first = duck.sql(sql).limit(10).fetchall()
            assert reply.json()["rows"] == [[str(v) if isinstance(v, Decimal) else v for v in r] for r in first], sql
    limits = {
        "select l_orderkey from lineitem": "11",
        "select l_orderkey from lineitem limit 50": "11",
        "select l_orderkey from lineitem limit 5": "5",
        "select l_orderkey from lineitem order by 1": "11",
        "select l_orderkey from lineitem order by 1 limit 5 offset 3": "5",
        "explain select l_orderkey from lineitem": None,
    }
    for sql, limit in limits.items():
        capped = engine.check(sql).capped(11).tree.args.get("limit")
        assert (capped.expression.this if capped is not None else None) == limit, sql
