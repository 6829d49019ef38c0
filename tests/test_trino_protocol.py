"""The Trino client protocol on the gateway, through the real `trino` client from the registry:
its DB-API and SQLAlchemy dialect with pandas, every type arriving exactly, parameters, a large
result in pages, cancelling, errors as Trino's error object, the metadata its inspector asks for,
and authentication (Basic and bearer, over TLS as the client requires)."""

from __future__ import annotations

import datetime
import decimal
import ssl
import threading

import pandas as pd
import pytest
import trino
from sqlalchemy import create_engine, inspect

from tests.http import http
from tests.test_gateway import TOKENS, _region, tls_settings
from tests.waiting import eventually

TPCH = {"customer", "lineitem", "nation", "orders", "part", "partsupp", "region", "supplier"}


def _address(region) -> tuple[str, int]:
    host, port = region.url.split("://")[1].split(":")
    return host, int(port)


def _connect(region, **options) -> trino.dbapi.Connection:
    host, port = _address(region)
    settings = {"user": "analyst", "catalog": "cxg", "schema": "main"} | options
    return trino.dbapi.connect(host=host, port=port, **settings)


def _fetch(region, sql: str, params: list | None = None, **options) -> tuple[list, list]:
    with _connect(region, **options) as conn:
        cur = conn.cursor()
        cur.execute(sql, params)
        return cur.fetchall(), [(d.name, d.type_code) for d in cur.description]


def test_every_type_arrives_exactly(native_gateway, duck) -> None:
    sql = (
        "select l_orderkey, l_quantity, l_extendedprice * l_discount as revenue, l_tax * 1.0e0 as tax, "
        "l_shipdate, cast(l_shipdate as timestamp) as shipped, l_returnflag, l_quantity > 30 as big, "
        "case when l_linenumber > 2 then l_linenumber end as late "
        "from lineitem where l_orderkey < 70 order by l_orderkey, l_linenumber"
    )
    rows, described = _fetch(native_gateway, sql)
    assert described == [
        ("l_orderkey", "bigint"),
        ("l_quantity", "decimal(15,2)"),
        ("revenue", "decimal(38,4)"),
        ("tax", "double"),
        ("l_shipdate", "date"),
        ("shipped", "timestamp(9)"),
        ("l_returnflag", "varchar"),
        ("big", "boolean"),
        ("late", "bigint"),
    ]
    expected = duck.sql(sql).fetchall()
    assert len(rows) == len(expected) > 50
    assert [tuple(r) for r in rows] == expected  # Decimal, date, datetime, bool, None: equal values, equal types
    kinds = (int, decimal.Decimal, decimal.Decimal, float, datetime.date, datetime.datetime, str, bool)
    assert all(isinstance(v, k) for v, k in zip(rows[0], kinds, strict=False))
    assert any(r[-1] is None for r in rows) and any(isinstance(r[-1], int) for r in rows)


def test_parameters_are_bound_as_the_client_sends_them(native_gateway, duck) -> None:
    sql = (
        "select n_name, count(*) from nation join supplier on s_nationkey = n_nationkey "
        "where n_regionkey = ? and n_name like ? and s_acctbal > ? group by n_name order by n_name"
    )
    rows, _ = _fetch(native_gateway, sql, [1, "%A%", decimal.Decimal("1000.5")])
    expected = duck.execute(sql, [1, "%A%", decimal.Decimal("1000.5")]).fetchall()
    assert [tuple(r) for r in rows] == expected and expected
    rows, _ = _fetch(native_gateway, "select count(*) from orders where o_orderdate >= ?", [datetime.date(1998, 1, 1)])
    assert rows == [[duck.sql("select count(*) from orders where o_orderdate >= date '1998-01-01'").fetchall()[0][0]]]
    with pytest.raises(trino.exceptions.TrinoUserError) as info:
        _fetch(native_gateway, "select ? + ?", [1])
    assert info.value.error_name == "INVALID_PARAMETER"


def test_a_large_result_comes_in_pages(native_gateway, duck) -> None:
    sql = "select l_orderkey, l_linenumber, l_comment from lineitem"
    rows, _ = _fetch(native_gateway, sql)
    assert sorted(map(tuple, rows)) == sorted(duck.sql(sql).fetchall())
    doc = http("POST", f"{native_gateway.url}/v1/statement", sql, {"X-Trino-User": "analyst"}).json()
    pages = 0
    while "nextUri" in doc:
        doc = http("GET", doc["nextUri"]).json()
        pages += "data" in doc
    assert doc["stats"]["state"] == "FINISHED" and pages > 2
    stats = doc["stats"]  # the sub-queries on the nodes are Trino's splits
    assert stats["completedSplits"] == stats["totalSplits"] >= 1 and stats["progressPercentage"] == 100.0
    assert stats["processedRows"] == len(rows)


def test_errors_are_trinos_error_object_with_our_code_and_sqlstate(native_gateway) -> None:
    with pytest.raises(trino.exceptions.TrinoUserError) as info:
        _fetch(native_gateway, "select * from nowhere")
    assert info.value.error_name == "UNDEFINED_TABLE" and info.value.error_type == "USER_ERROR"
    assert info.value._error["sqlState"] == "42P01" and "nowhere" in info.value.message
    with pytest.raises(trino.exceptions.TrinoUserError) as info:
        _fetch(native_gateway, "select 1", catalog="hive")
    assert info.value.error_name == "CATALOG_NOT_FOUND"
    with pytest.raises(trino.exceptions.TrinoUserError) as info:
        _fetch(native_gateway, "select 1", session_properties={"join_distribution_type": "BROADCAST"})
    assert info.value.error_name == "INVALID_SESSION_PROPERTY" and "query_max_run_time" in info.value.message
    empty = http("POST", f"{native_gateway.url}/v1/statement", " ", {"X-Trino-User": "analyst"})
    assert empty.status == 400 and empty.json()["error"]["code"] == "invalid_request"


def test_metadata_as_trinos_clients_ask_for_it(native_gateway) -> None:
    assert _fetch(native_gateway, "show catalogs")[0] == [["cxg"]]
    assert _fetch(native_gateway, "show schemas from cxg")[0] == [["information_schema"], ["main"]]
    assert {r[0] for r in _fetch(native_gateway, "show tables from main")[0]} >= TPCH
    assert [r[0] for r in _fetch(native_gateway, "show columns from region")[0]] == [
        "r_regionkey",
        "r_name",
        "r_comment",
    ]
    assert _fetch(
        native_gateway, "select count(*) from cxg.main.nation n join main.region r on n_regionkey = r_regionkey"
    )[0] == [[25]]
    with pytest.raises(trino.exceptions.TrinoUserError, match="schema 'tpch' does not exist"):
        _fetch(native_gateway, "select * from tpch.nation")


def test_sqlalchemy_dialect_inspector_and_pandas(native_gateway, duck) -> None:
    host, port = _address(native_gateway)
    engine = create_engine(f"trino://analyst@{host}:{port}/cxg/main")
    try:
        inspector = inspect(engine)
        assert "main" in inspector.get_schema_names()
        assert set(inspector.get_table_names()) >= TPCH
        columns = inspector.get_columns("nation")
        assert [(c["name"], str(c["type"])) for c in columns] == [
            ("n_nationkey", "BIGINT"),
            ("n_name", "VARCHAR"),
            ("n_regionkey", "BIGINT"),
            ("n_comment", "VARCHAR"),
        ]
        assert inspector.has_table("orders") and not inspector.has_table("nowhere")
        sql = "select r_name, count(*) as nations from nation join region on n_regionkey = r_regionkey group by r_name"
        frame = pd.read_sql(sql + " order by r_name", engine)
        pd.testing.assert_frame_equal(frame, duck.sql(sql + " order by r_name").df())
    finally:
        engine.dispose()


def _running(region) -> int:
    return sum(n["running"] for m in region.gateway.balancer.snapshot()["members"] for n in m["nodes"])


def test_a_cancelled_query_frees_its_slot_and_a_time_limit_is_a_session_property() -> None:
    with _region(nodes=1) as region:
        conn = _connect(region, source="slow")  # a simulated query of a minute
        cur = conn.cursor()
        failed: list[trino.exceptions.TrinoQueryError] = []

        def run() -> None:
            try:
                cur.execute("select 1")
            except trino.exceptions.TrinoQueryError as e:
                failed.append(e)

        runner = threading.Thread(target=run)
        runner.start()
        eventually(lambda: _running(region) == 1, 10, "the query on its node")
        eventually(lambda: cur.query_id is not None, 10, "the client to know its query")
        cur.cancel()
        runner.join(30)
        assert not runner.is_alive() and [e.error_name for e in failed] == ["USER_CANCELED"]
        eventually(lambda: _running(region) == 0, 10, "the slot freed")
        [statement] = region.gateway.statements.recent(1)
        assert statement.key == cur.query_id and statement.state == "cancelled"
        with pytest.raises(trino.exceptions.TrinoQueryError) as info:
            _fetch(region, "select 1", source="slow", session_properties={"query_max_run_time": "200ms"})
        assert info.value.error_name == "TIMEOUT" and info.value.error_type == "INSUFFICIENT_RESOURCES"
        eventually(lambda: _running(region) == 0, 10, "the slot freed")


def test_basic_and_bearer_authentication_over_tls(tmp_path, monkeypatch) -> None:
    for name in ("REQUESTS_CA_BUNDLE", "CURL_CA_BUNDLE"):  # requests would take them over the client's `verify`
        monkeypatch.delenv(name, raising=False)
    tls = tls_settings(tmp_path)
    ca = str(tmp_path / "ca.pem")
    with _region(f"gateway.tokens={TOKENS}", *tls, nodes=1) as region:
        secure = {"http_scheme": "https", "verify": ca, "source": "fast"}
        basic = trino.auth.BasicAuthentication("alice", "a-secret")
        rows, _ = _fetch(region, "select 1", auth=basic, **secure)
        assert len(rows) == 7
        rows, _ = _fetch(region, "select 1", auth=trino.auth.JWTAuthentication("b-secret"), **secure)
        assert len(rows) == 7
        with pytest.raises(trino.exceptions.HttpError, match="401"):
            _fetch(region, "select 1", auth=trino.auth.BasicAuthentication("alice", "wrong"), **secure)
        statement = region.gateway.statements.recent(2)[1]
        assert statement.owner == "alice"
        url = f"{region.url}/v1/statement/executing/{statement.key}/0"
        context = ssl.create_default_context(cafile=ca)
        reply = http("GET", url, headers={"Authorization": "Bearer b-secret"}, context=context)
        assert reply.status == 403 and reply.json()["error"]["code"] == "forbidden"


def test_session_statements_and_prepared_statements_as_older_clients_send_them(native_gateway, duck) -> None:
    with _connect(native_gateway, legacy_prepared_statements=True, schema="information_schema") as conn:
        cur = conn.cursor()
        cur.execute("USE cxg.main")
        assert cur.fetchall() == [] and conn._client_session.schema == "main"
        cur.execute("select count(*) from nation where n_regionkey = ? and n_name > ?", [2, "C"])  # PREPARE, EXECUTE
        assert cur.fetchall() == [
            [duck.sql("select count(*) from nation where n_regionkey = 2 and n_name > 'C'").fetchall()[0][0]]
        ]
        assert conn._client_session.prepared_statements == {}  # deallocated after
        cur.execute("SET SESSION query_max_run_time = '5m'")
        assert conn._client_session.properties == {"query_max_run_time": "5m"}
        cur.execute("RESET SESSION query_max_run_time")
        assert conn._client_session.properties == {}
        for wrong, name in (
            ("USE hive.default", "CATALOG_NOT_FOUND"),
            ("SET SESSION x = 1", "INVALID_SESSION_PROPERTY"),
        ):
            with pytest.raises(trino.exceptions.TrinoUserError) as info:
                cur.execute(wrong)
            assert info.value.error_name == name
        with pytest.raises(trino.exceptions.TrinoUserError) as info:
            cur.execute("EXECUTE nothing USING 1")
        assert info.value.error_name == "STATEMENT_NOT_PREPARED"
