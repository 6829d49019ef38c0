"""Standing queries (`POST /v1/subscriptions`) over appended rows: after every append the
subscription's result equals the one-shot SELECT over every row so far, computed by DuckDB
(generated streams of appends with out-of-order event times); changes pushed over Server-Sent
Events and WebSocket; a version made elsewhere consolidated; what cannot be kept refused."""

from __future__ import annotations

import asyncio
import datetime
import decimal
import json
import subprocess
import sys
import threading
import urllib.request

import aiohttp
import duckdb
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gateway import results
from gateway.client import Client
from storage import NodeClient, TableSchema
from storage.appends import append_rows
from tests.http import http
from tests.test_appends import APPENDER, DEVICES, EVENTS, _append, _lines, appended_region  # noqa: F401 (a fixture)
from tests.waiting import eventually

READER = "reader-secret"
PER_MINUTE = """
    SELECT date_trunc('minute', ts) AS minute, device, count(*) AS n, sum(amount) AS total,
           avg(amount) AS mean, min(kind) AS first_kind, max(ts) AS last
    FROM events WHERE kind <> 'x' GROUP BY 1, 2 HAVING count(*) >= 1 ORDER BY minute, device"""


class Rows:
    """Every row of `events` so far, as DuckDB reads them."""

    def __init__(self) -> None:
        self.table = EVENTS

    def add(self, rows: list[dict]) -> None:
        added = pa.Table.from_pylist([_typed(r) for r in rows], schema=EVENTS.schema)
        self.table = pa.concat_tables([self.table, added])

    def answer(self, sql: str) -> list[list]:
        con = duckdb.connect()
        con.register("events", self.table)
        return results.json_rows(con.sql(sql).arrow().read_all())


def _typed(row: dict) -> dict:
    return {
        "ts": datetime.datetime.fromisoformat(row["ts"]),
        "device": row["device"],
        "amount": decimal.Decimal(row["amount"]),
        "kind": row["kind"],
    }


def _subscribe(region, sql: str, token: str = APPENDER):
    return http("POST", f"{region.url}/v1/subscriptions", {"sql": sql}, headers={"Authorization": f"Bearer {token}"})


def _read(region, key: str, token: str = APPENDER) -> dict:
    reply = http("GET", f"{region.url}/v1/subscriptions/{key}", headers={"Authorization": f"Bearer {token}"})
    assert reply.status == 200, reply.body
    return reply.json()


def _same(rows: list[list], expected: list[list]) -> bool:
    """Equal rows, the averages (DOUBLE) to 12 digits."""

    def rounded(row: list) -> list:
        return [round(v, 12) if isinstance(v, float) else v for v in row]

    return [rounded(r) for r in rows] == [rounded(r) for r in expected]


@pytest.fixture(scope="module")
def standing(appended_region):  # noqa: F811 (the fixture of tests.test_appends)
    """A subscription to PER_MINUTE over `events`, and every row appended so far."""
    reply = _subscribe(appended_region, PER_MINUTE)
    assert reply.status == 201, reply.body
    return appended_region, reply.json(), Rows()


ROW = st.fixed_dictionaries(
    {
        "ts": st.integers(0, 9).map(lambda m: f"2026-01-01T00:0{m}:30"),  # out of order: any minute
        "device": st.integers(1, 4),
        "amount": st.integers(-500, 5000).map(lambda c: str(decimal.Decimal(c) / 100)),
        "kind": st.sampled_from(["a", "b", "x"]),
    }
)


@settings(max_examples=8, deadline=None, suppress_health_check=list(HealthCheck))
@given(appends=st.lists(st.lists(ROW, min_size=1, max_size=6), min_size=1, max_size=3))
def test_after_every_append_the_result_is_duckdbs_over_every_row(standing, appends) -> None:
    region, subscription, rows = standing
    for batch in appends:
        reply = _append(region, "events", _lines(*batch))
        assert reply.status == 201, reply.body
        rows.add(batch)
        doc = _read(region, subscription["id"])
        assert doc["version"] == reply.json()["version"]
        assert _same(doc["rows"], rows.answer(PER_MINUTE)), (doc["rows"], rows.answer(PER_MINUTE))


def test_each_append_is_folded_by_the_nodes_into_their_buckets_states(standing) -> None:
    """Every node holding the table folds an append's rows into its buckets' states and answers
    their partial rows: no bucket computed again from its blocks, no node behind; a bad request
    to a node is refused naming what is wrong."""
    region, subscription, rows = standing
    batch = [{"ts": "2026-01-01T00:05:30", "device": d, "amount": "1.00", "kind": "a"} for d in (1, 2, 3, 4)]
    for _ in range(2):  # the first settles what earlier tests left (a version made elsewhere)
        before = {node: _standing(url) for node, url in region.node_urls.items()}
        assert _append(region, "events", _lines(*batch)).status == 201
        rows.add(batch)
    after = {node: _standing(url) for node, url in region.node_urls.items()}
    for node, was in before.items():
        assert after[node]["folds"] > was["folds"], (node, was, after[node])
        unchanged = ("synced", "unknown", "buckets_computed", "gathers")
        assert [after[node][k] for k in unchanged] == [was[k] for k in unchanged], (node, was, after[node])
    assert _same(_read(region, subscription["id"])["rows"], rows.answer(PER_MINUTE))
    bad = http("POST", f"{region.node_urls['node-0']}/v1/standing/fold", {"table": "events", "progress": 3})
    assert bad.status == 400 and bad.json()["error"]["code"] == "invalid_standing_request", bad.body


def _standing(url: str) -> dict[str, int]:
    """What node `url` says of the standing queries' states it keeps."""
    return http("GET", f"{url}/v1/node").json()["standing"]


SHAPES = [
    "SELECT count(*) AS n, sum(amount) AS total, min(ts) AS first FROM events",  # one group, no key
    "SELECT kind, device, avg(amount) AS mean FROM events GROUP BY kind, device ORDER BY kind, device",
    "SELECT device, count(*) AS n FROM events GROUP BY device ORDER BY n DESC, device LIMIT 2",  # the whole result
    "SELECT count(*) AS n FROM events GROUP BY kind ORDER BY n",  # no key shown (ties: equal rows): the whole result
    "SELECT date_trunc('minute', ts) AS minute, max(amount) AS top FROM events WHERE device > 1 GROUP BY 1 "
    "HAVING max(amount) > 2 ORDER BY 1",
]


@settings(max_examples=4, deadline=None, suppress_health_check=list(HealthCheck))
@given(appends=st.lists(st.lists(ROW, min_size=1, max_size=4), min_size=1, max_size=3))
def test_every_shape_kept_equals_duckdbs_after_every_append(standing, appends) -> None:
    """A single group, several keys, LIMIT, a key not shown, HAVING: whether only the touched
    groups are computed again or the whole result, each equals the one-shot SELECT."""
    region, _, rows = standing
    keys = [_subscribe(region, sql).json()["id"] for sql in SHAPES]
    try:
        for batch in appends:
            assert _append(region, "events", _lines(*batch)).status == 201
            rows.add(batch)
            for key, sql in zip(keys, SHAPES, strict=True):
                got = _read(region, key)["rows"]
                assert _same(got, rows.answer(sql)), (sql, got, rows.answer(sql))
    finally:
        for key in keys:
            http("DELETE", f"{region.url}/v1/subscriptions/{key}", headers=_auth(APPENDER))


def _events(url: str, token: str, count: int, into: list) -> threading.Thread:
    """A thread reading `count` Server-Sent Events of `url` into `into` (kind, data)."""

    def read() -> None:
        request = urllib.request.Request(url, headers={"Authorization": f"Bearer {token}"})
        with urllib.request.urlopen(request, timeout=60) as stream:
            kind = None
            for raw in stream:
                line = raw.decode().rstrip("\n")
                if line.startswith("event: "):
                    kind = line.removeprefix("event: ")
                elif line.startswith("data: "):
                    into.append((kind, json.loads(line.removeprefix("data: "))))
                    if len(into) == count:
                        return

    thread = threading.Thread(target=read, daemon=True)
    thread.start()
    return thread


def test_changes_are_pushed_over_server_sent_events_and_websocket(standing) -> None:
    region, subscription, rows = standing
    pushed: list = []
    reading = _events(subscription["events"], APPENDER, 2, pushed)
    eventually(lambda: pushed, 30, "the snapshot")
    kind, snapshot = pushed[0]
    assert kind == "snapshot" and _same(snapshot["rows"], rows.answer(PER_MINUTE))

    async def over_websocket() -> list:
        async with (
            aiohttp.ClientSession() as session,
            session.ws_connect(subscription["ws"], headers={"Authorization": f"Bearer {APPENDER}"}) as socket,
        ):
            first = await socket.receive_json(timeout=30)
            await asyncio.get_running_loop().run_in_executor(None, _append_one, region, rows)
            return [first, await socket.receive_json(timeout=30)]

    first, update = asyncio.run(over_websocket())
    reading.join(30)
    assert first["event"] == "snapshot" and update["event"] == "update"
    assert [k for k, _ in pushed] == ["snapshot", "update"] and pushed[1][1] == {k: update[k] for k in pushed[1][1]}
    version = update["version"]
    assert version == snapshot["version"] + 1 and update["removed"] == []
    changed = [r for r in rows.answer(PER_MINUTE) if r[:2] == ["2026-01-01T00:07:00", 9]]
    assert _same(update["changed"], changed), (update["changed"], changed)


def _append_one(region, rows: Rows) -> None:
    row = {"ts": "2026-01-01T00:07:10", "device": 9, "amount": "3.00", "kind": "c"}
    assert _append(region, "events", _lines(row)).status == 201
    rows.add([row])


def test_a_version_made_elsewhere_is_consolidated_at_the_next_append(standing) -> None:
    """Rows appended straight to the nodes (not through this gateway) are not folded in by the
    subscription, which then computes its state again over the whole table."""
    region, subscription, rows = standing
    urls = region.node_urls
    held = NodeClient(urls["node-0"]).get("/v1/tables/events")
    elsewhere = [{"ts": "2026-01-01T00:01:00", "device": 2, "amount": "100.00", "kind": "z"}]
    table = pa.Table.from_pylist([_typed(r) for r in elsewhere], schema=EVENTS.schema)
    append_rows(TableSchema.from_json(held), table, urls, held["version"])
    rows.add(elsewhere)
    before = _read(region, subscription["id"])["consolidations"]
    _append_one(region, rows)
    doc = _read(region, subscription["id"])
    assert doc["consolidations"] == before + 1 and doc["version"] == held["version"] + 2
    assert _same(doc["rows"], rows.answer(PER_MINUTE))


@pytest.mark.parametrize(
    ("sql", "status", "code", "message"),
    [
        ("SELECT median(amount) FROM events", 422, "not_incremental", "the aggregate MEDIAN(events.amount)"),
        ("SELECT count(DISTINCT kind) FROM events", 422, "not_incremental", "an aggregate of DISTINCT values"),
        ("SELECT device, sum(amount) OVER () FROM events", 422, "not_incremental", "a window function"),
        ("SELECT * FROM events", 422, "not_incremental", "a SELECT without aggregates"),
        ("SELECT count(*) FROM events a JOIN events b USING (device)", 422, "not_incremental", "read twice"),
        (
            "SELECT d.site, count(e.device) FROM devices d LEFT JOIN events e ON e.device = d.device GROUP BY 1",
            422,
            "not_incremental",
            "a LEFT JOIN that keeps rows of a dimension",
        ),
        ("SELECT count(nothing) FROM events", 400, "undefined_column", "nothing"),
        ("SELECT count(*) FROM nowhere", 400, "undefined_table", "nowhere"),
    ],
)
def test_what_cannot_be_kept_up_to_date_is_refused_naming_it(appended_region, sql, status, code, message) -> None:  # noqa: F811
    reply = _subscribe(appended_region, sql)
    error = reply.json()["error"]
    assert (reply.status, error["code"]) == (status, code) and message in error["message"], error


def test_a_token_sees_its_own_subscriptions_and_a_deleted_one_ends_its_streams(appended_region) -> None:  # noqa: F811
    region = appended_region
    mine = _subscribe(region, "SELECT kind, count(*) AS n FROM events GROUP BY kind", token=READER).json()
    listed = http("GET", f"{region.url}/v1/subscriptions", headers={"Authorization": f"Bearer {READER}"}).json()
    assert [s["id"] for s in listed["subscriptions"]] == [mine["id"]]
    other = http("GET", f"{region.url}/v1/subscriptions/{mine['id']}", headers={"Authorization": f"Bearer {APPENDER}"})
    assert other.status == 404 and other.json()["error"]["code"] == "subscription_not_found"
    pushed: list = []
    reading = _events(mine["events"], READER, 2, pushed)
    eventually(lambda: pushed, 30, "the snapshot")
    gone = http("DELETE", f"{region.url}/v1/subscriptions/{mine['id']}", headers={"Authorization": f"Bearer {READER}"})
    assert gone.status == 200 and gone.json() == {"id": mine["id"], "deleted": True}
    reading.join(30)
    assert [k for k, _ in pushed] == ["snapshot", "ended"]
    after = http("GET", f"{region.url}/v1/subscriptions/{mine['id']}", headers={"Authorization": f"Bearer {READER}"})
    assert after.status == 404 and "register it again" in after.json()["error"]["message"]


def _register(region, sql: str, **options) -> dict:
    reply = http("POST", f"{region.url}/v1/subscriptions", {"sql": sql, **options}, headers=_auth(APPENDER))
    assert reply.status == 201, reply.body
    return reply.json()


def _auth(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


def _table(rows: list[dict]) -> pa.Table:
    return pa.Table.from_pylist([_typed(r) for r in rows], schema=EVENTS.schema)


def _answer(table: pa.Table, sql: str) -> list[list]:
    con = duckdb.connect()
    con.register("events", table)
    return results.json_rows(con.sql(sql).arrow().read_all())


def _listened(region, events: int, sql: str, **options) -> tuple[dict, list, threading.Thread]:
    """A subscription registered, and a listener reading its first `events` events (the snapshot read)."""
    subscription = _register(region, sql, **options)
    pushed: list = []
    reading = _events(subscription["events"], APPENDER, events, pushed)
    eventually(lambda: pushed, 30, "the snapshot")
    return subscription, pushed, reading


LATE_ROW = st.fixed_dictionaries(
    {
        "ts": st.integers(10, 59).map(lambda m: f"2026-01-01T00:{m}:30"),  # some on time, some late
        "device": st.integers(1, 4),
        "amount": st.integers(0, 900).map(lambda c: str(decimal.Decimal(c) / 100)),
        "kind": st.sampled_from(["a", "b"]),
    }
)


@settings(max_examples=6, deadline=None, suppress_health_check=list(HealthCheck))
@given(appends=st.lists(st.lists(LATE_ROW, min_size=1, max_size=5), min_size=1, max_size=3))
def test_late_rows_wait_for_their_consolidation_and_on_time_rows_do_not(standing, appends) -> None:
    """With an event time, rows older than the progress indicator (the latest event time folded
    in) are held apart: the result is the query over every other row, the late ones counted."""
    region, _, rows = standing
    subscription = _register(region, PER_MINUTE, event_time="ts", consolidate_every=3600)
    covered, late = rows.table, 0
    progress = max(r.as_py() for r in covered.column("ts"))
    try:
        for batch in appends:
            assert _append(region, "events", _lines(*batch)).status == 201
            rows.add(batch)
            on_time = [r for r in batch if _typed(r)["ts"] >= progress]
            late += len(batch) - len(on_time)
            covered = pa.concat_tables([covered, _table(on_time)])
            progress = max([progress, *(_typed(r)["ts"] for r in on_time)])
            doc = _read(region, subscription["id"])
            assert doc["late_rows"] == late and doc["progress"] == progress.isoformat()
            assert _same(doc["rows"], _answer(covered, PER_MINUTE))
    finally:
        http("DELETE", f"{region.url}/v1/subscriptions/{subscription['id']}", headers=_auth(APPENDER))


def test_late_rows_are_consolidated_at_the_next_consolidation_time_never_dropped(standing) -> None:
    region, _, rows = standing
    subscription, pushed, reading = _listened(region, 3, PER_MINUTE, event_time="ts", consolidate_every=0.2)
    late = [{"ts": "2026-01-01T00:00:01", "device": 1, "amount": "50.00", "kind": "late"}]
    assert _append(region, "events", _lines(*late)).status == 201
    rows.add(late)
    reading.join(30)
    kinds = [(kind, data.get("consolidated")) for kind, data in pushed]
    assert kinds == [("snapshot", None), ("update", False), ("update", True)], kinds
    assert pushed[1][1]["late_rows"] == 1 and pushed[2][1]["late_rows"] == 0
    doc = _read(region, subscription["id"])
    assert doc["late_rows"] == 0 and doc["consolidations"] >= 1
    assert _same(doc["rows"], rows.answer(PER_MINUTE))
    http("DELETE", f"{region.url}/v1/subscriptions/{subscription['id']}", headers=_auth(APPENDER))


def test_a_group_having_no_longer_holds_for_is_pushed_as_removed(standing) -> None:
    region, _, rows = standing
    sql = "SELECT device, sum(amount) AS total FROM events GROUP BY device HAVING sum(amount) < 100 ORDER BY device"
    subscription, pushed, reading = _listened(region, 3, sql)
    for amount in ("1.00", "500.00"):
        row = {"ts": "2026-01-01T00:00:02", "device": 77, "amount": amount, "kind": "h"}
        assert _append(region, "events", _lines(row)).status == 201
        rows.add([row])
    reading.join(30)
    (_, first), (_, second) = pushed[1:]
    assert first["changed"] == [[77, "1.00"]] and first["removed"] == []
    assert second["changed"] == [] and second["removed"] == [{"device": 77}]
    assert _same(_read(region, subscription["id"])["rows"], rows.answer(sql))
    http("DELETE", f"{region.url}/v1/subscriptions/{subscription['id']}", headers=_auth(APPENDER))


def test_a_join_to_a_replicated_table_is_kept_and_a_new_version_of_it_recomputed(standing) -> None:
    region, _, rows = standing
    sql = (
        "SELECT d.site, count(*) AS n, sum(e.amount) AS total FROM events e JOIN devices d "
        "ON e.device = d.device GROUP BY d.site ORDER BY d.site"
    )
    subscription = _register(region, sql)
    devices = DEVICES

    def expected() -> list[list]:
        con = duckdb.connect()
        con.register("events", rows.table)
        con.register("devices", devices)
        return results.json_rows(con.sql(sql).arrow().read_all())

    assert subscription["rows"] == expected()
    row = {"ts": "2026-01-01T00:00:03", "device": 2, "amount": "2.50", "kind": "j"}
    assert _append(region, "events", _lines(row)).status == 201
    rows.add([row])
    doc = _read(region, subscription["id"])
    assert doc["rows"] == expected() and doc["consolidations"] == 0
    assert _append(region, "devices", _lines({"device": 4, "site": "x"}, {"device": 77, "site": "q"})).status == 201
    devices = pa.concat_tables([devices, pa.table({"device": [4, 77], "site": ["x", "q"]}, schema=devices.schema)])
    doc = _read(region, subscription["id"])
    assert doc["rows"] == expected() and doc["consolidations"] == 1
    http("DELETE", f"{region.url}/v1/subscriptions/{subscription['id']}", headers=_auth(APPENDER))


def test_a_group_whose_key_is_null_is_pushed_when_it_changes(standing) -> None:
    region, _, rows = standing
    sql = "SELECT device, count(*) AS n FROM events GROUP BY device ORDER BY device"
    subscription, pushed, reading = _listened(region, 2, sql)
    row = {"ts": "2026-01-01T00:00:04", "device": None, "amount": "1.00", "kind": "n"}
    assert _append(region, "events", _lines(row)).status == 201
    rows.add([row])
    reading.join(30)
    nulls = rows.table.column("device").null_count
    assert pushed[1][1]["changed"] == [[None, nulls]]
    assert _read(region, subscription["id"])["rows"] == rows.answer(sql)
    http("DELETE", f"{region.url}/v1/subscriptions/{subscription['id']}", headers=_auth(APPENDER))


def test_a_standing_querys_state_is_computed_as_a_query_of_the_region_on_its_slots(appended_region) -> None:  # noqa: F811
    """Registering runs the partial statement over the whole table through the region's admission
    (queued for its nodes' slots as a client's query is), not beside it."""
    region = appended_region
    client = Client(region.url, APPENDER)
    before = client.cluster()["counters"]
    key = _register(region, "SELECT kind, max(amount) AS top FROM events GROUP BY kind")["id"]
    after = client.cluster()["counters"]
    assert after["admitted"] == before["admitted"] + 1 and after["completed"] == before["completed"] + 1
    http("DELETE", f"{region.url}/v1/subscriptions/{key}", headers=_auth(APPENDER))


def test_the_python_client_and_cxg_append_and_cxg_watch(standing, tmp_path) -> None:
    region, _, rows = standing
    client = Client(region.url, APPENDER)
    registered = client.subscribe(PER_MINUTE)
    events = client.updates(registered["id"])
    kind, snapshot = next(events)
    assert kind == "snapshot" and _same(snapshot["rows"], rows.answer(PER_MINUTE))
    new = [{"ts": "2026-01-01T00:02:10", "device": 5, "amount": "2.00", "kind": "c"}]
    done = client.append("events", pa.Table.from_pylist([_typed(r) for r in new], schema=EVENTS.schema))
    rows.add(new)
    kind, update = next(events)
    assert kind == "update" and update["version"] == done["version"] and done["rows"] == 1
    assert _same(client.subscription(registered["id"])["rows"], rows.answer(PER_MINUTE))
    assert client.unsubscribe(registered["id"])["deleted"] and next(events)[0] == "ended"

    cli, on = [sys.executable, "-m", "cxg"], ["--url", region.url, "--token", APPENDER]
    watching = [*cli, "watch", PER_MINUTE, "--format", "json", "--updates", "1", *on]
    with subprocess.Popen(watching, stdout=subprocess.PIPE, text=True) as watch:
        first = json.loads(watch.stdout.readline())  # registered and listening
        assert first["event"] == "snapshot" and _same(first["rows"], rows.answer(PER_MINUTE))
        more = [{"ts": "2026-01-01T00:02:20", "device": 5, "amount": "1.00", "kind": "c"}]
        pq.write_table(pa.Table.from_pylist([_typed(r) for r in more], schema=EVENTS.schema), tmp_path / "more.parquet")
        added = subprocess.run(
            [*cli, "append", "events", str(tmp_path / "more.parquet"), *on], capture_output=True, text=True, timeout=60
        )
        assert added.returncode == 0 and "appended 1 row(s) to events: version" in added.stdout, added.stderr
        rows.add(more)
        out, _ = watch.communicate(timeout=60)
    update = json.loads(out)
    changed = [r for r in rows.answer(PER_MINUTE) if r[:2] == ["2026-01-01T00:02:00", 5]]
    assert watch.returncode == 0 and update["event"] == "update" and _same(update["changed"], changed)
    assert first["id"] not in {s["id"] for s in client.get("/v1/subscriptions")["subscriptions"]}  # deleted on exit
    bad = subprocess.run(
        [*cli, "append", "events", "-", *on], input='{"device": "x"}', capture_output=True, text=True, timeout=60
    )
    assert bad.returncode == 2 and "cxg: error [invalid_rows]: row 1, column device" in bad.stderr, bad.stderr
