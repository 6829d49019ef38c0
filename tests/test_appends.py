"""Appends through the gateway (`POST /v1/tables/{name}/rows`): JSON lines and Arrow IPC rows
committed as a table's new version on every node holding it, read by the next query as DuckDB
reads the same rows; bad rows refused whole with the row and column named, nothing committed; the
size bound; who may append."""

from __future__ import annotations

import datetime
import decimal
import json
from pathlib import Path

import duckdb
import pyarrow as pa
import pytest

from balancer import NativeBackend, NodeServer
from gateway import free_port
from gateway.background import serve
from gateway.client import Client
from gateway.media import ARROW
from gpu_kernels import get_backend
from regions import EmbeddedRegion, load_config
from storage import Node, NodeClient, NodeError, Placement, Store, TableSchema, load_table, stream_bytes
from storage.appends import append_rows
from tests.http import http
from tests.test_gateway import _region

APPENDER = "appender-secret"
TOKENS = (
    f'[{{name = "appender", token = "{APPENDER}", appends = ["events", "devices"]}}, '
    '{name = "reader", token = "reader-secret"}]'
)
EVENTS = pa.table(
    {
        "ts": pa.array([datetime.datetime(2026, 1, 1, 0, m) for m in range(6)], pa.timestamp("us")),
        "device": pa.array([1, 2, 3, 1, 2, 3], pa.int64()),
        "amount": pa.array([decimal.Decimal(f"{i}.25") for i in range(6)], pa.decimal128(12, 2)),
        "kind": pa.array(["a", "b", "a", "b", "a", "b"], pa.string()),
    }
)
DEVICES = pa.table({"device": pa.array([1, 2, 3], pa.int64()), "site": pa.array(["x", "y", "z"], pa.string())})
TOTALS = "SELECT device, count(*) AS n, sum(amount) AS total, max(ts) AS last FROM events GROUP BY 1 ORDER BY 1"


def _schema(name: str, table: pa.Table, placement: Placement) -> TableSchema:
    nullable = {"kind": False}  # a NOT NULL column
    schema = TableSchema.from_arrow(name, table.schema, placement=placement)
    columns = tuple(c if c.name not in nullable else type(c)(c.name, c.type, False) for c in schema.columns)
    return TableSchema(name, columns, schema.sort_key, placement)


@pytest.fixture(scope="module")
def appended_region(tmp_path_factory: pytest.TempPathFactory):
    """Two nodes of their own: `events` hash-placed on device over both, `devices` on each."""
    root: Path = tmp_path_factory.mktemp("appends")
    stores = [Store(root / f"n{i}", node=f"node-{i}") for i in range(2)]
    load_table(stores, _schema("events", EVENTS, Placement.parse("hash(device)", 8)), EVENTS)
    load_table(stores, _schema("devices", DEVICES, Placement()), DEVICES)
    with (
        serve(Node(stores[0], get_backend("numpy"), slots=2).app()) as u0,
        serve(Node(stores[1], get_backend("numpy"), slots=2).app()) as u1,
    ):
        urls = {"node-0": u0, "node-1": u1}
        nodes = [NodeServer(s.node, NativeBackend(s), 2, urls[s.node]) for s in stores]
        config = load_config(None, ["gateway.port=0", f"gateway.tokens={TOKENS}", "gateway.max_append_bytes=4096"])
        with EmbeddedRegion(config, nodes) as region:
            region.node_urls = urls
            yield region


def _append(region, table: str, body: bytes, content_type: str = "application/x-ndjson", token: str = APPENDER):
    headers = {"Content-Type": content_type, "Authorization": f"Bearer {token}"}
    return http("POST", f"{region.url}/v1/tables/{table}/rows", body, headers=headers)


def _lines(*rows: dict) -> bytes:
    return "\n".join(json.dumps(r) for r in rows).encode()


def _rows(region, sql: str) -> list[tuple]:
    table = Client(region.url, APPENDER).execute(sql).table
    return [tuple(r.values()) for r in table.to_pylist()]


def _as_duckdb(events: pa.Table, sql: str) -> list[tuple]:
    con = duckdb.connect()
    con.register("events", events)
    return con.sql(sql).fetchall()


def test_appended_rows_are_the_next_querys_on_every_node_in_json_lines_and_arrow(appended_region) -> None:
    region = appended_region
    before = Client(region.url, APPENDER).tables()["events"]["version"]
    new = [
        {"ts": "2026-01-01T00:10:00", "device": 4, "amount": "7.50", "kind": "c"},
        {"ts": "2026-01-01T00:11:00", "device": 1, "amount": 2, "kind": "c"},
        {"ts": "2026-01-01T00:12:00", "device": 7, "amount": 0.05, "kind": "d"},
    ]
    reply = _append(region, "events", _lines(*new) + b"\n\n")
    assert reply.status == 201, reply.body
    doc = reply.json()
    assert doc["table"] == "events" and doc["version"] == before + 1 and doc["rows"] == 3 and doc["blocks"] >= 2
    expected = pa.concat_tables(
        [
            EVENTS,
            pa.table(
                {
                    "ts": pa.array([datetime.datetime(2026, 1, 1, 0, m) for m in (10, 11, 12)], pa.timestamp("us")),
                    "device": pa.array([4, 1, 7], pa.int64()),
                    "amount": pa.array([decimal.Decimal(v) for v in ("7.50", "2", "0.05")], pa.decimal128(12, 2)),
                    "kind": pa.array(["c", "c", "d"]),
                }
            ),
        ]
    )
    assert _rows(region, TOTALS) == _as_duckdb(expected, TOTALS)
    tables = Client(region.url, APPENDER).tables()
    assert tables["events"]["version"] == before + 1 and sorted(tables["events"]["nodes"]) == ["node-0", "node-1"]

    more = EVENTS.slice(0, 2)  # Arrow IPC, columns in another order
    reordered = more.select(["kind", "amount", "device", "ts"])
    reply = _append(region, "events", stream_bytes(reordered), ARROW)
    assert reply.status == 201 and reply.json()["version"] == before + 2, reply.body
    assert _rows(region, TOTALS) == _as_duckdb(pa.concat_tables([expected, more]), TOTALS)


def test_a_replicated_table_takes_appends_on_every_node(appended_region) -> None:
    region = appended_region
    reply = _append(region, "devices", _lines({"device": 9, "site": "w"}, {"device": 8}))
    assert reply.status == 201, reply.body
    assert _rows(region, "SELECT device, site FROM devices ORDER BY device") == [
        (1, "x"),
        (2, "y"),
        (3, "z"),
        (8, None),
        (9, "w"),
    ]
    for url in region.node_urls.values():  # each node holds the whole table, at the same version
        held = NodeClient(url).get("/v1/tables/devices")
        assert held["rows"] == 5 and held["version"] == reply.json()["version"]


@pytest.mark.parametrize(
    ("body", "message"),
    [
        (
            _lines({"device": 1, "kind": "a"}, {"device": 2, "kind": "b", "amount": "abc"}),
            "row 2, column amount: 'abc' is not of type decimal(12,2)",
        ),
        (_lines({"device": 1, "kind": "a"}, {"device": 2}), "row 2, column kind: NULL in a NOT NULL column"),
        (_lines({"device": 1, "kind": "a", "colour": "red"}), "row 1: table events has no column 'colour'"),
        (_lines({"device": "one", "kind": "a"}), "row 1, column device: 'one' is not of type int64"),
        (_lines({"device": True, "kind": "a"}), "row 1, column device: True is not of type int64"),
        (_lines({"device": 1, "kind": "a", "ts": "today"}), "row 1, column ts: 'today' is not of type timestamp"),
        (_lines({"device": 1, "kind": "a", "amount": 1.234}), "row 1, column amount: "),
        (b'{"device": 1, "kind": "a"}\n[1, 2]', "row 2 (line 2) is not an object of column -> value"),
        (b'{"device": 1, "kind": "a"}\n\n{"device": ', "row 2 (line 3) is not JSON"),
        (b"  \n", "the append to table events has no rows"),
    ],
)
def test_bad_rows_are_refused_whole_naming_the_row_and_column(appended_region, body: bytes, message: str) -> None:
    region = appended_region
    before = Client(region.url, APPENDER).tables()["events"]
    reply = _append(region, "events", body)
    assert reply.status == 400, reply.body
    error = reply.json()["error"]
    assert error["code"] == "invalid_rows" and message in error["message"], error
    after = Client(region.url, APPENDER).tables()["events"]
    assert (after["version"], after["rows"]) == (before["version"], before["rows"])


def test_arrow_rows_that_do_not_fit_are_refused_whole(appended_region) -> None:
    region = appended_region
    rows = pa.table({"device": pa.array(["1", "x"]), "kind": pa.array(["a", "b"])})
    reply = _append(region, "events", stream_bytes(rows), ARROW)
    assert reply.status == 400 and "row 2, column device: 'x' is not of type int64" in reply.json()["error"]["message"]
    reply = _append(region, "events", b"not arrow", ARROW)
    assert reply.status == 400 and "not an Arrow IPC stream" in reply.json()["error"]["message"]


def test_who_may_append_where_and_how_much(appended_region) -> None:
    region = appended_region
    row = _lines({"device": 1, "kind": "a"})
    assert _append(region, "events", row, token="nobody").status == 401
    refused = _append(region, "events", row, token="reader-secret")
    assert refused.status == 403 and "token 'reader' may not append to table 'events'" in refused.body.decode()
    elsewhere = _append(region, "nowhere", row)  # a table not among its appends, whether or not it exists
    assert elsewhere.status == 403 and elsewhere.json()["error"]["code"] == "forbidden"
    large = _append(region, "events", _lines(*[{"device": 1, "kind": "a"}] * 200))
    assert large.status == 413 and large.json()["error"]["code"] == "append_too_large"
    with _region(nodes=1) as simulated:  # a simulated region holds no tables of its own
        reply = http(
            "POST", f"{simulated.url}/v1/tables/t/rows", b"{}", headers={"Content-Type": "application/x-ndjson"}
        )
        assert reply.status == 422 and reply.json()["error"]["code"] == "appends_unsupported"


def test_an_append_a_node_cannot_take_is_undone_on_every_node(appended_region) -> None:
    """node-1 unreachable (a port nothing listens on): what node-0 staged of the append it drops,
    and its version does not move."""
    node_0 = appended_region.node_urls["node-0"]
    held = NodeClient(node_0).get("/v1/tables/events")
    urls = {"node-0": node_0, "node-1": f"http://127.0.0.1:{free_port()}"}
    with pytest.raises(NodeError, match="cannot reach node"):
        append_rows(TableSchema.from_json(held), EVENTS.slice(0, 4), urls, held["version"])
    after = NodeClient(node_0).get("/v1/tables/events")
    assert (after["version"], after["rows"], after["blocks"]) == (held["version"], held["rows"], held["blocks"])
    assert NodeClient(node_0).get("/v1/tables/events/versions")["versions"][-1] == held["version"]


def test_appends_merge_into_a_buckets_last_block_so_blocks_do_not_pile_up(appended_region) -> None:
    """The first append to a bucket may start a block of its own (its last block as loaded is not
    one appended to); the next ones merge into that block."""
    region = appended_region

    def append(minute: int) -> None:
        row = {"ts": f"2026-01-02T00:0{minute}:00", "device": 5, "amount": "1", "kind": "e"}
        assert _append(region, "events", _lines(row)).status == 201

    append(0)
    before = {node: NodeClient(url).get("/v1/tables/events") for node, url in region.node_urls.items()}
    for minute in range(1, 6):
        append(minute)
    after = {node: NodeClient(url).get("/v1/tables/events") for node, url in region.node_urls.items()}
    assert sum(a["rows"] - before[n]["rows"] for n, a in after.items()) == 5
    assert {n: a["blocks"] for n, a in after.items()} == {n: b["blocks"] for n, b in before.items()}
    assert _rows(region, "SELECT count(*), min(ts) FROM events WHERE device = 5") == [
        (6, datetime.datetime(2026, 1, 2, 0, 0))
    ]


def test_appends_wait_while_a_move_holds_the_table_and_go_on_once_it_ends(appended_region) -> None:
    """A move holds `events` at its version on every node (`storage.holds`): an append is refused
    whole (409 `table_moving`, retry) with nothing committed; a hold of another version is refused;
    one that lapses or is released holds nothing."""
    region, urls = appended_region, appended_region.node_urls
    version = NodeClient(urls["node-0"]).get("/v1/tables/events")["version"]
    with pytest.raises(NodeError, match=f"at version {version}, not {version + 7}") as refused:
        NodeClient(urls["node-0"]).put_bytes(f"/v1/tables/events/hold?version={version + 7}", b"")
    assert refused.value.code == "version_conflict"
    for url in urls.values():
        NodeClient(url).put_bytes(f"/v1/tables/events/hold?version={version}&seconds=600", b"")
    row = {"ts": "2026-01-03T00:00:00", "device": 2, "amount": "1", "kind": "h"}
    try:
        reply = _append(region, "events", _lines(row))
        assert reply.status == 409 and reply.json()["error"]["code"] == "table_moving", reply.body
        assert "being moved" in reply.json()["error"]["message"] and reply.headers["Retry-After"] == "1"
        assert {NodeClient(u).get("/v1/tables/events")["version"] for u in urls.values()} == {version}
    finally:
        for url in urls.values():
            NodeClient(url).delete("/v1/tables/events/hold")
    NodeClient(urls["node-1"]).put_bytes(f"/v1/tables/events/hold?version={version}&seconds=0", b"")  # lapsed
    reply = _append(region, "events", _lines(row))
    assert reply.status == 201 and reply.json()["version"] == version + 1, reply.body
