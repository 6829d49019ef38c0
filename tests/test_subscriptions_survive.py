"""Standing queries through faults: a gateway restarted (its subscriptions kept in
`gateway.subscriptions_file` are computed again from the blocks, under their ids, and folded into
again) and a node killed mid-stream (appends refused whole while it is gone, nothing committed, and
the results right before, during and after). After every step the subscription's result equals
DuckDB's one-shot SELECT over every row committed."""

from __future__ import annotations

import contextlib
import json
from collections.abc import Iterator
from pathlib import Path

import pytest

from balancer import NativeBackend, NodeServer
from gateway import results
from gateway.background import serve
from gateway.client import Client
from gpu_kernels import get_backend
from regions import EmbeddedRegion, load_config
from storage import Node, Placement, Store, load_table
from tests.http import http
from tests.test_appends import APPENDER, DEVICES, EVENTS, TOKENS, _append, _lines, _schema
from tests.test_subscriptions import PER_MINUTE, Rows, _events, _read, _same, _standing, _subscribe
from tests.waiting import eventually

ROW = {"ts": "2026-01-01T00:03:30", "device": 2, "amount": "4.50", "kind": "c"}


class Region:
    """Two nodes of their own holding `events` (hash-placed on device), and a gateway over them;
    the gateway and each node can be stopped and started again (a node on its port, with its blocks)."""

    def __init__(self, root: Path, placement: str = "hash(device)"):
        self.root = root
        self.stores = {f"node-{i}": Store(root / f"n{i}", node=f"node-{i}") for i in range(2)}
        load_table(list(self.stores.values()), _schema("events", EVENTS, Placement.parse(placement, 8)), EVENTS)
        self.served = {name: contextlib.ExitStack() for name in self.stores}
        self.nodes: dict[str, Node] = {}
        self.node_urls = {name: self.start_node(name) for name in self.stores}
        self.gateway: EmbeddedRegion | None = None

    def start_node(self, name: str, port: int | None = None) -> str:
        self.nodes[name] = Node(self.stores[name], get_backend("numpy"), slots=2)
        return self.served[name].enter_context(serve(self.nodes[name].app(), port))

    def kill_node(self, name: str) -> None:
        self.served[name].close()

    def start(self, kept: bool = True) -> EmbeddedRegion:
        options = ["gateway.port=0", f"gateway.tokens={TOKENS}"]
        if kept:
            options.append(f"gateway.subscriptions_file={self.root / 'subscriptions.json'}")
        nodes = [NodeServer(n, NativeBackend(s), 2, self.node_urls[n]) for n, s in self.stores.items()]
        self.gateway = EmbeddedRegion(load_config(None, options), nodes).__enter__()
        return self.gateway

    def stop(self) -> None:
        if self.gateway is not None:
            self.gateway.__exit__(None, None, None)
            self.gateway = None

    def close(self) -> None:
        self.stop()
        for served in self.served.values():
            served.close()


@pytest.fixture()
def region(tmp_path: Path) -> Iterator[Region]:
    made = Region(tmp_path)
    try:
        yield made
    finally:
        made.close()


def _appended(gateway: EmbeddedRegion, rows: Rows, row: dict) -> int:
    reply = _append(gateway, "events", _lines(row))
    assert reply.status == 201, reply.body
    rows.add([row])
    return reply.json()["version"]


def test_a_kept_subscription_survives_a_gateway_restart_and_is_folded_into_again(region: Region) -> None:
    """After the restart the gateway gathers the state the nodes keep: no bucket computed again."""
    rows = Rows()
    gateway = region.start()
    subscription = _subscribe(gateway, PER_MINUTE).json()
    _appended(gateway, rows, ROW)
    before = _read(gateway, subscription["id"])
    region.stop()
    kept = json.loads((region.root / "subscriptions.json").read_text())["subscriptions"]
    assert kept[subscription["id"]]["sql"] == PER_MINUTE and kept[subscription["id"]]["owner"] == "appender"
    computed = {node: _standing(url)["buckets_computed"] for node, url in region.node_urls.items()}

    gateway = region.start()  # another port, the same nodes and file
    again = _read(gateway, subscription["id"])  # gathered from the nodes' states
    assert again["rows"] == before["rows"] and again["version"] == before["version"]
    assert {node: _standing(url)["buckets_computed"] for node, url in region.node_urls.items()} == computed
    assert _same(again["rows"], rows.answer(PER_MINUTE))
    assert http("GET", f"{gateway.url}/v1/subscriptions/{subscription['id']}").status == 401  # still its owner's
    pushed: list = []
    reading = _events(f"{gateway.url}/v1/subscriptions/{subscription['id']}/events", APPENDER, 2, pushed)
    eventually(lambda: pushed, 30, "the snapshot")
    version = _appended(gateway, rows, {**ROW, "device": 3, "amount": "1.25"})
    reading.join(30)
    assert [kind for kind, _ in pushed] == ["snapshot", "update"] and pushed[1][1]["version"] == version
    assert _same(_read(gateway, subscription["id"])["rows"], rows.answer(PER_MINUTE))

    auth = {"Authorization": f"Bearer {APPENDER}"}
    assert http("DELETE", f"{gateway.url}/v1/subscriptions/{subscription['id']}", headers=auth).status == 200
    assert json.loads((region.root / "subscriptions.json").read_text())["subscriptions"] == {}


def test_a_kept_subscription_appended_to_before_it_is_asked_for_covers_the_append_once(region: Region) -> None:
    rows = Rows()
    gateway = region.start()
    subscription = _subscribe(gateway, PER_MINUTE).json()
    region.stop()
    gateway = region.start()
    version = _appended(gateway, rows, ROW)  # computed again at this version: not folded in twice
    doc = _read(gateway, subscription["id"])
    assert doc["version"] == version and _same(doc["rows"], rows.answer(PER_MINUTE))


def test_without_a_file_a_subscription_after_a_restart_says_to_register_again(region: Region) -> None:
    gateway = region.start(kept=False)
    subscription = _subscribe(gateway, PER_MINUTE).json()
    region.stop()
    gateway = region.start(kept=False)
    reply = http(
        "GET", f"{gateway.url}/v1/subscriptions/{subscription['id']}", headers={"Authorization": f"Bearer {APPENDER}"}
    )
    assert reply.status == 404 and reply.json()["error"]["code"] == "subscription_not_found"
    assert "register it again" in reply.json()["error"]["message"]


def test_a_node_killed_mid_stream_refuses_appends_whole_and_the_result_stays_right(region: Region) -> None:
    rows = Rows()
    gateway = region.start()
    subscription = _subscribe(gateway, PER_MINUTE).json()
    _appended(gateway, rows, ROW)
    region.kill_node("node-1")
    refused = _append(gateway, "events", _lines({**ROW, "device": 3}))
    assert refused.status == 503 and refused.json()["error"]["code"] == "node_unavailable", refused.body
    doc = _read(gateway, subscription["id"])
    assert _same(doc["rows"], rows.answer(PER_MINUTE))
    region.start_node("node-1", int(region.node_urls["node-1"].rsplit(":", 1)[1]))  # back, with its blocks
    version = eventually(
        lambda: (r := _append(gateway, "events", _lines({**ROW, "device": 1}))).status == 201 and r.json()["version"],
        30,
        "an append with node-1 back",
    )
    rows.add([{**ROW, "device": 1}])
    doc = _read(gateway, subscription["id"])
    assert doc["version"] == version and _same(doc["rows"], rows.answer(PER_MINUTE))
    back = _standing(region.node_urls["node-1"])  # its state was lost with it: its 4 buckets' computed again
    assert (back["unknown"], back["buckets_computed"], back["states"]) == (1, 4, 1), back
    once = results.json_rows(Client(gateway.url, APPENDER).execute(PER_MINUTE).table)  # nothing half-committed
    assert _same(once, rows.answer(PER_MINUTE))


def test_with_replicas_a_node_killed_leaves_its_buckets_state_computed_by_the_replica(tmp_path: Path) -> None:
    """Each bucket held twice: node-1 killed and the gateway restarted, node-0 answers for every
    bucket, computing the state of those node-1 answered for from its blocks; the result stays right."""
    region = Region(tmp_path, "hash(device) replicas 2")
    try:
        rows = Rows()
        gateway = region.start()
        subscription = _subscribe(gateway, PER_MINUTE).json()
        _appended(gateway, rows, ROW)
        computed = _standing(region.node_urls["node-0"])["buckets_computed"]
        region.stop()
        region.kill_node("node-1")
        gateway = region.start()
        doc = eventually(lambda: (r := _get(gateway, subscription["id"])).status == 200 and r.json(), 30, "restored")
        assert _same(doc["rows"], rows.answer(PER_MINUTE))
        assert _standing(region.node_urls["node-0"])["buckets_computed"] == computed + 4  # node-1's half
    finally:
        region.close()


def test_states_grown_past_their_compaction_are_compacted_and_stay_right(region: Region) -> None:
    """Appends of many new groups grow the states past the size at which the nodes (and the
    gateway) compact them into one row per group: the result stays equal to DuckDB's."""
    rows = Rows()
    gateway = region.start()
    sql = "SELECT ts, device, count(*) AS n, sum(amount) AS total FROM events GROUP BY ts, device ORDER BY ts, device"
    subscription = _subscribe(gateway, sql).json()
    for minute in range(3):
        batch = [
            {"ts": f"2026-01-02T00:0{minute}:00.{i:06d}", "device": i % 4, "amount": "1.50", "kind": "a"}
            for i in range(1500)
        ]
        assert _append(gateway, "events", _lines(*batch)).status == 201
        rows.add(batch)
    assert _same(_read(gateway, subscription["id"])["rows"], rows.answer(sql))
    folds = [_standing(url) for url in region.node_urls.values()]
    assert all((f["gathers"], f["folds"], f["synced"]) == (1, 3, 0) for f in folds), folds  # none gathered again


def _get(gateway: EmbeddedRegion, key: str):
    return http("GET", f"{gateway.url}/v1/subscriptions/{key}", headers={"Authorization": f"Bearer {APPENDER}"})


def test_a_kept_subscription_whose_table_is_not_served_yet_says_so_and_is_computed_once_it_is(
    region: Region,
) -> None:
    rows = Rows()
    gateway = region.start()
    subscription = _subscribe(gateway, PER_MINUTE).json()
    region.stop()
    ports = {name: int(url.rsplit(":", 1)[1]) for name, url in region.node_urls.items()}
    for name in ports:
        region.kill_node(name)
    gateway = region.start()
    url, auth = f"{gateway.url}/v1/subscriptions/{subscription['id']}", {"Authorization": f"Bearer {APPENDER}"}
    reply = http("GET", url, headers=auth)
    assert reply.status == 503 and reply.json()["error"]["code"] == "subscription_restoring", reply.body
    assert reply.headers["Retry-After"] == "1"
    assert subscription["id"] in reply.json()["error"]["message"] and "retry" in reply.json()["error"]["message"]
    for name, port in ports.items():
        region.start_node(name, port)
    doc = eventually(lambda: (r := http("GET", url, headers=auth)).status == 200 and r.json(), 30, "restored")
    assert _same(doc["rows"], rows.answer(PER_MINUTE))


def test_an_append_its_subscription_cannot_fold_stays_committed_and_the_subscription_says_why(region: Region) -> None:
    """The dimension a subscription joins is dropped: the next append is committed all the same
    (201, once), and the subscription keeps the result of the version it covers, saying why."""
    load_table(list(region.stores.values()), _schema("devices", DEVICES, Placement()), DEVICES)
    gateway = region.start()
    sql = "SELECT d.site, count(*) AS n FROM events e JOIN devices d ON e.device = d.device GROUP BY d.site"
    subscription = _subscribe(gateway, sql).json()
    before = _read(gateway, subscription["id"])
    for store in region.stores.values():
        store.drop("devices")
    rows = Rows()
    version = _appended(gateway, rows, ROW)
    doc = _read(gateway, subscription["id"])
    assert doc["version"] == before["version"] < version and doc["rows"] == before["rows"]
    assert "devices" in doc["failed"], doc["failed"]
    count = Client(gateway.url, APPENDER).execute("SELECT count(*) AS n FROM events").table
    assert count.column("n")[0].as_py() == rows.table.num_rows  # committed once


def test_a_state_unused_for_a_day_is_forgotten_and_registered_again_at_the_next_append(region: Region) -> None:
    """The nodes forget a state neither gathered nor folded into for a day (`StandingStates.expire`,
    which each node's sweep runs); the next append registers it again there and the result stays right."""
    rows = Rows()
    gateway = region.start()
    subscription = _subscribe(gateway, PER_MINUTE).json()
    nodes = region.nodes.values()
    assert all(node.standing.expire(idle_s=3600) == [] for node in nodes)  # used a moment ago
    assert all(node.standing.expire(idle_s=0) == [subscription["id"]] for node in nodes)
    _appended(gateway, rows, ROW)
    assert all(_standing(url)["unknown"] == 1 and _standing(url)["states"] == 1 for url in region.node_urls.values())
    assert _same(_read(gateway, subscription["id"])["rows"], rows.answer(PER_MINUTE))
