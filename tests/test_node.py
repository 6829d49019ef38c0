"""The storage node through real HTTP on loopback."""

from __future__ import annotations

import http.client
import json
import os
import signal
import socket
import subprocess
import sys
import threading
from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest

from benchmarks import bench_service
from gateway import free_port
from gateway.background import serve
from gpu_kernels import final_aggregate, get_backend
from storage import (
    LoadOptions,
    Node,
    NodeClient,
    NodeError,
    ScanRequest,
    ScanRequestError,
    Store,
    TableCache,
    TableSchema,
    load_table,
    scan_table,
)
from storage import node as node_module
from storage import scan as scan_module
from storage.catalog import Column
from storage.hash_aggregate import many_groups
from storage.node_client import connections
from tests.kernel_cases import call, col, lit, make_table, plain_strings
from tests.waiting import eventually

ROOT = Path(__file__).resolve().parents[1]
BIG_ROWS = 1_000_000


@pytest.fixture(scope="module")
def store(tmp_path_factory: pytest.TempPathFactory) -> Store:
    store = Store(tmp_path_factory.mktemp("node"), node="node-7")
    table = make_table()
    load_table([store], TableSchema.from_arrow("t", table.schema, ("d", "k")), table, LoadOptions(block_budget=20_000))
    rng = np.random.default_rng(3)
    big = pa.table({f"c{i}": rng.integers(0, 1 << 60, BIG_ROWS) for i in range(4)})
    load_table([store], TableSchema.from_arrow("big", big.schema), big, LoadOptions(block_budget=320_000))
    return store


@pytest.fixture(scope="module")
def node_url(store: Store):
    node = Node(store, get_backend("numpy"), slots=2)
    with serve(node.app()) as url:
        yield url


@pytest.fixture(scope="module")
def client(node_url: str) -> NodeClient:
    return NodeClient(node_url)


def test_health_node_and_tables(client: NodeClient) -> None:
    assert client.get("/healthz") == {"status": "ok", "node": "node-7"}
    info = client.get("/v1/node")
    assert info["cores"] == os.cpu_count() and info["slots"] == 2 and info["free_slots"] == 2
    assert info["backend"] == "numpy" and info["tables"] == ["big", "t"]
    tables = {t["name"]: t for t in client.get("/v1/tables")["tables"]}
    assert tables["t"]["rows"] == 3000 and tables["big"]["rows"] == BIG_ROWS
    detail = client.get("/v1/tables/t")
    assert [c["name"] for c in detail["columns"]][:3] == ["rid", "k", "d"]
    assert {s["column"] for s in detail["stats"]} >= {"rid", "grp"} and detail["sort_key"] == ["d", "k"]


def test_scan_streams_one_batch_per_block_then_statistics(client: NodeClient, store: Store) -> None:
    request = {"table": "t", "columns": ["rid", "grp", "amt"], "filter": call(">", col("k"), lit(10))}
    with client.scan(request) as stream:
        pieces = list(stream)
        assert stream.backend == "numpy" and stream.node == "node-7"
        assert stream.stats["rows_selected"] == sum(b.num_rows for b, _ in pieces)
        assert stream.stats["backend"] == "numpy"
    blocks = {entry.file for entry in store.table("t").blocks}
    assert {meta["block"] for _, meta in pieces} <= blocks and len(pieces) > 1
    local = scan_table(TableCache(store), request, get_backend("numpy"))
    expected = pa.Table.from_batches([p.batch for p in local.pieces()], schema=local.plan.schema)
    got = pa.Table.from_batches([b for b, _ in pieces], schema=expected.schema)
    assert got.sort_by("rid").equals(expected.sort_by("rid"))


def test_partial_aggregates_over_http_merge_correctly(client: NodeClient, store: Store) -> None:
    aggregates = [{"name": "n", "func": "count"}, {"name": "s", "func": "sum", "arg": col("amt")}]
    request = {"table": "t", "group_by": ["grp"], "aggregates": aggregates}
    partials, _ = client.scan_table(request)
    plan = scan_table(TableCache(store), request, get_backend("numpy")).plan
    final = {r["grp"]: r for r in final_aggregate(partials, ["grp"], list(plan.task.aggregates)).to_pylist()}
    assert sum(r["n"] for r in final.values()) == 3000
    table = plain_strings(make_table())
    for city, row in final.items():
        mask = pa.compute.is_null(table["grp"]) if city is None else pa.compute.equal(table["grp"], city)
        assert row["n"] == table.filter(mask).num_rows
        assert row["s"] == pa.compute.sum(table.filter(mask)["amt"]).as_py()


def test_having_merges_the_nodes_groups_and_keeps_those_that_qualify(client: NodeClient, store: Store) -> None:
    aggregates = [{"name": "n", "func": "count"}, {"name": "s", "func": "sum", "arg": col("amt")}]
    request = {"table": "t", "group_by": ["k"], "aggregates": aggregates}
    partials, _ = client.scan_table(request)
    plan = scan_table(TableCache(store), request, get_backend("numpy")).plan
    merged = final_aggregate(partials, ["k"], list(plan.task.aggregates))
    assert partials.num_rows > merged.num_rows  # groups span blocks: the node merges them
    threshold = sorted(merged.column("n").to_pylist())[merged.num_rows // 2]
    having = call(">=", col("n"), lit(threshold))
    finished, _ = client.scan_table({**request, "having": having})
    expected = merged.filter(pa.compute.greater_equal(merged["n"], threshold))
    assert 0 < finished.num_rows < merged.num_rows and finished.schema == partials.schema
    assert finished.sort_by("k").equals(expected.cast(partials.schema).sort_by("k"))
    nothing, _ = client.scan_table({**request, "having": call(">", col("n"), lit(10**9))})
    assert nothing.num_rows == 0 and nothing.schema == partials.schema


@pytest.mark.parametrize("key", ["n", "txt"])
def test_a_scan_grouped_by_a_key_of_many_values_groups_its_rows_once(client: NodeClient, store: Store, key) -> None:
    """Grouped by a key of nearly as many values as rows (NULLs among them), the node groups the
    decoded rows once: the same groups, each once, as grouping the table whole; HAVING on them."""
    aggregates = [
        {"name": "c", "func": "count"},
        {"name": "ca", "func": "count", "arg": col("amt")},
        {"name": "s", "func": "sum", "arg": col("amt")},
        {"name": "a", "func": "avg", "arg": col("f")},
        {"name": "lo", "func": "min", "arg": col("grp")},
        {"name": "hi", "func": "max", "arg": col("d")},
    ]
    request = {"table": "t", "group_by": [key], "aggregates": aggregates}
    cache = TableCache(store)
    plan = scan_table(cache, request, get_backend("numpy")).plan
    assert many_groups(plan.task, [entry for entry, _ in cache.get("t").blocks])
    assert not many_groups(scan_table(cache, {**request, "group_by": ["k"]}, get_backend("numpy")).plan.task, [])
    got, _ = client.scan_table(request)
    assert got.schema == plan.schema
    table = plain_strings(make_table())
    reference = [([], "count_all"), ("amt", "count"), ("amt", "sum"), ("f", "sum"), ("f", "count")]
    expected = table.group_by([key]).aggregate([*reference, ("grp", "min"), ("d", "max")])
    assert got.num_rows == expected.num_rows == len(set(table[key].to_pylist()))
    by_key = {r[key]: r for r in expected.to_pylist()}
    for row in got.to_pylist():
        want = by_key[row[key]]
        counted = (want["count_all"], want["amt_count"], want["amt_sum"], want["f_count"])
        assert (row["c"], row["ca"], row["s"], row["a$count"]) == counted
        assert row["a$sum"] == pytest.approx(want["f_sum"])
        assert (row["lo"], row["hi"]) == (want["grp_min"], want["d_max"])
    summed = {**request, "aggregates": aggregates[:3]}  # HAVING on the node takes no AVG
    kept, _ = client.scan_table({**summed, "having": call(">", col("s"), lit(1000))})
    assert 0 < kept.num_rows < got.num_rows
    assert sorted(kept.column(key).to_pylist(), key=str) == sorted(
        (r[key] for r in got.to_pylist() if r["s"] is not None and r["s"] > 1000), key=str
    )


def test_partitioned_scan_labels_each_batch(client: NodeClient) -> None:
    request = {"table": "t", "columns": ["rid", "k"], "partition": {"keys": ["k"], "buckets": 4}}
    with client.scan(request) as stream:
        pieces = list(stream)
    assert {meta["partition"] for _, meta in pieces} <= {"0", "1", "2", "3"}
    assert sum(b.num_rows for b, _ in pieces) == 3000
    for batch, meta in pieces:  # every key lives in one partition
        for k in set(batch.column("k").to_pylist()):
            holders = {m["partition"] for b, m in pieces if k in b.column("k").to_pylist()}
            assert holders == {meta["partition"]}


@pytest.mark.parametrize(
    ("body", "status", "code", "fragment"),
    [
        (b"{not json", 400, "invalid_json", "not valid JSON"),
        (json.dumps({"table": "t", "columns": ["nope"]}).encode(), 400, "invalid_scan", "unknown column 'nope'"),
        (json.dumps({"table": "t"}).encode(), 400, "invalid_scan", "needs columns"),
        (json.dumps({"columns": ["k"]}).encode(), 400, "invalid_scan", "names its table"),
        (json.dumps({"table": "missing", "columns": ["k"]}).encode(), 404, "table_not_found", "missing"),
        (json.dumps({"table": "t", "columns": ["k"], "having": lit(True)}).encode(), 400, "invalid_scan", "having"),
        (
            json.dumps(
                {
                    "table": "t",
                    "group_by": ["k"],
                    "aggregates": [{"name": "a", "func": "avg", "arg": col("amt")}],
                    "having": call(">", col("a"), lit(1)),
                }
            ).encode(),
            400,
            "invalid_scan",
            "merged on the node",
        ),
        (
            json.dumps({"table": "t", "group_by": ["k"], "aggregates": [], "having": col("k")}).encode(),
            400,
            "invalid_scan",
            "boolean",
        ),
    ],
)
def test_bad_scans_get_a_json_error(node_url: str, body: bytes, status: int, code: str, fragment: str) -> None:
    connection = http.client.HTTPConnection(node_url.removeprefix("http://"))
    connection.request("POST", "/v1/scan", body, {"Content-Type": "application/json"})
    response = connection.getresponse()
    error = json.loads(response.read())["error"]
    assert response.status == status and error["code"] == code and fragment in error["message"]


def test_unknown_table_detail_is_404(client: NodeClient) -> None:
    with pytest.raises(NodeError) as info:
        client.get("/v1/tables/none")
    assert info.value.status == 404 and info.value.code == "table_not_found"


@pytest.mark.parametrize(
    ("method", "path", "body", "status", "code"),
    [
        ("GET", "/v1/tables/t?version=x", None, 400, "storage_error"),
        ("GET", "/v1/tables/t?version=999", None, 409, "version_gone"),
        ("GET", "/v1/tables/none/versions", None, 404, "table_not_found"),
        ("DELETE", "/v1/tables/none", None, 404, "table_not_found"),
        ("DELETE", "/v1/tables/t/versions/0", None, 400, "storage_error"),
        ("PUT", "/v1/tables/t/loads/x/blocks/y.zst", b"", 400, "storage_error"),
        ("POST", "/v1/tables/t/loads/x/commit", b"{not json", 400, "invalid_commit"),
        ("DELETE", "/v1/tables/t/loads/bad!", None, 400, "storage_error"),
        ("POST", "/v1/scan", b"[", 400, "invalid_json"),
    ],
)
def test_every_endpoint_answers_a_storage_error_with_its_status_and_code(
    node_url: str, method: str, path: str, body: bytes | None, status: int, code: str
) -> None:
    connection = http.client.HTTPConnection(node_url.removeprefix("http://"))
    connection.request(method, path, body)
    response = connection.getresponse()
    assert (response.status, json.loads(response.read())["error"]["code"]) == (status, code)


def test_a_failure_of_the_nodes_own_files_is_a_5xx(tmp_path: Path) -> None:
    (tmp_path / "t").mkdir()
    (tmp_path / "t" / "MANIFEST.json").write_text("{")
    node = Node(Store(tmp_path, node="node-8"), get_backend("numpy"), processes=0)
    with serve(node.app()) as url, pytest.raises(NodeError) as failed:
        NodeClient(url).get("/v1/tables/t")
    assert (failed.value.status, failed.value.code) == (500, "corrupt_manifest")


def test_a_client_that_disconnects_mid_stream_frees_its_slot(client: NodeClient, node_url: str) -> None:
    before = client.get("/v1/node")["scans"].get("cancelled", 0)
    connection = http.client.HTTPConnection(node_url.removeprefix("http://"))
    body = json.dumps({"table": "big", "columns": ["c0", "c1", "c2", "c3"]})
    connection.request("POST", "/v1/scan", body, {"Content-Type": "application/json"})
    response = connection.getresponse()
    assert response.status == 200
    assert len(response.read(100_000)) == 100_000  # the first blocks arrived
    eventually(lambda: client.get("/v1/node")["running"] == 1, 20, "the scan running")
    connection.sock.close()
    connection.close()
    eventually(lambda: client.get("/v1/node")["scans"].get("cancelled", 0) == before + 1, 20, "the scan cancelled")
    info = client.get("/v1/node")
    assert info["running"] == 0 and info["free_slots"] == 2
    table, _ = client.scan_table({"table": "big", "columns": ["c0"], "limit": 5})
    assert table.num_rows == 5 and client.get("/healthz")["status"] == "ok"


def test_a_client_keeps_one_connection_to_a_node_and_a_scan_left_early_closes_its_own(store: Store) -> None:
    """A process's requests to a node, one after another, go over one kept-alive connection (a scan
    read to its end gives it back); a scan left before its end closes its connection, which tells
    the node to stop it; once the node restarts, the next request opens a new one."""
    port = free_port()
    with serve(Node(store, get_backend("numpy"), slots=2).app(), port) as url:
        client = NodeClient(url)
        pool = connections().connection_from_url(url)
        opened = pool.num_connections
        for _ in range(5):
            assert client.scan_table({"table": "t", "columns": ["k"]})[0].num_rows > 0
            assert client.get("/healthz")["status"] == "ok"
        assert pool.num_connections == opened + 1
        with client.scan({"table": "big", "columns": ["c0", "c1", "c2", "c3"]}) as stream:
            next(iter(stream))  # the first batch: the rest is left unread
        eventually(lambda: client.get("/v1/node")["scans"].get("cancelled", 0) == 1, 20, "the scan cancelled")
        assert pool.num_connections == opened + 2
    with serve(Node(store, get_backend("numpy"), slots=2).app(), port) as url:  # restarted: the kept one was closed
        assert NodeClient(url).get("/healthz")["status"] == "ok"


def _closing_server(answers: list[bool]) -> tuple[str, threading.Thread]:
    """A server of one request per connection's turn in `answers`: True answers it (200, kept
    alive), False closes the connection on it unanswered (as a node closes a connection left idle
    just as a request goes out on it); one connection until it closes, then the next."""
    listener = socket.create_server(("127.0.0.1", 0))
    reply = b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 2\r\n\r\n{}"

    def run() -> None:
        turns = list(reversed(answers))
        with listener:
            while turns:
                connection, _ = listener.accept()
                with connection, connection.makefile("rb") as stream:
                    while turns:
                        while stream.readline() not in (b"\r\n", b""):  # the request's head (no body)
                            pass
                        if not turns.pop():
                            break
                        connection.sendall(reply)

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    return f"http://127.0.0.1:{listener.getsockname()[1]}", thread


def test_a_read_on_a_kept_connection_the_node_closed_goes_again_on_a_new_one_a_write_does_not() -> None:
    url, server = _closing_server([True, False, True, True, False])
    client = NodeClient(url)
    assert client.get("/healthz") == {}  # the connection is kept
    assert client.get("/healthz") == {}  # closed unanswered: sent again, on a new connection
    assert client.get("/healthz") == {}
    with pytest.raises(NodeError) as failed:  # a write is not sent twice: the node may have taken it
        client.delete("/v1/tables/t")
    assert failed.value.code == "node_unreachable" and failed.value.status == 502
    server.join(10)
    assert not server.is_alive()


def test_a_request_the_node_does_not_read_in_time_is_timed_out_and_not_sent_again(monkeypatch) -> None:
    """A scan whose node never reads it: timed out (busy or hung, not known down) after one send,
    not sent again as a read on a closed connection is."""
    listener = socket.create_server(("127.0.0.1", 0))
    listener.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    pool, sent = connections(), []
    request = pool.request
    monkeypatch.setattr(pool, "request", lambda *a, **k: (sent.append(a), request(*a, **k))[1])
    client = NodeClient(f"http://127.0.0.1:{listener.getsockname()[1]}", timeout=0.5)
    listed = call("in", col("k"), *[lit(i) for i in range(1_500_000)])  # more than the sockets buffer
    with listener, pytest.raises(NodeError) as failed:
        client.scan({"table": "t", "columns": ["k"], "filter": listed})
    assert failed.value.timed_out and failed.value.code == "node_unreachable" and len(sent) == 1


def test_a_forked_child_reaches_a_node_over_connections_of_its_own(client: NodeClient, node_url: str) -> None:
    """A child's requests go over a pool of its own, even where a thread of the parent's held the
    parent's pool's lock as it forked (the child does not touch it)."""
    assert client.get("/healthz")["status"] == "ok"  # the parent keeps a connection
    parent = connections()
    with parent.pools.lock:  # as a thread of the parent's taking a connection would
        child = os.fork()
    if child == 0:  # the child tells how it went by its exit status
        status = 1
        try:
            status = 0 if connections() is not parent and NodeClient(node_url).get("/healthz")["status"] == "ok" else 2
        finally:
            os._exit(status)
    assert os.waitstatus_to_exitcode(os.waitpid(child, 0)[1]) == 0
    assert connections() is parent and client.get("/healthz")["status"] == "ok"


def test_a_small_scan_request_asked_again_is_read_and_typed_once(client: NodeClient) -> None:
    """The node keeps a small request read, checked and typed (by its bytes, then by its value and
    the table's schema), not one with a long IN list; the answers are the same."""
    request = {"table": "t", "columns": ["k", "amt"], "filter": call("<", col("amt"), lit(50))}
    reads, plans = node_module._kept_request.cache_info(), scan_module.kept_plan_scan.cache_info()
    first, _ = client.scan_table(request)
    again, _ = client.scan_table(request)
    assert again.equals(first) and first.num_rows > 0
    assert node_module._kept_request.cache_info().hits == reads.hits + 1
    assert scan_module.kept_plan_scan.cache_info().hits == plans.hits + 1
    listed = {**request, "filter": call("in", col("k"), *[lit(i) for i in range(2_000)])}
    assert len(json.dumps(listed)) > node_module.KEPT_REQUEST
    kept = node_module._kept_request.cache_info().currsize
    assert client.scan_table(listed)[0].num_rows > 0 and node_module._kept_request.cache_info().currsize == kept


def test_a_kept_plan_is_found_by_an_equal_request_only_its_values_types_too() -> None:
    """IN [1, 0] on a boolean column is refused, kept [true, false] or not; IN [1.0, 2.0] is not
    IN [1, 2] (Python finds them equal)."""
    schema = TableSchema("t", (Column("b", "bool"), Column("k", "int64")))

    def request(column: str, values: list) -> ScanRequest:
        return ScanRequest.from_json(
            {"table": "t", "columns": ["k"], "filter": call("in", col(column), {"values": values})}
        )

    scan_module.kept_plan_scan(request("b", [True, False]), schema)
    with pytest.raises(ScanRequestError, match="cannot combine bool and int"):
        scan_module.kept_plan_scan(request("b", [1, 0]), schema)
    assert request("k", [1, 2]) != request("k", [1.0, 2.0]) and request("k", [1, 2]) == request("k", [1, 2])


def test_cxg_node_command_serves_a_data_directory(store: Store) -> None:
    port = free_port()
    process = subprocess.Popen(
        [sys.executable, "-m", "cxg", "node", "--data", str(store.root), "--port", str(port), "--name", "n9"],
        cwd=ROOT,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
    )
    try:
        client = NodeClient(f"http://127.0.0.1:{port}")

        def healthy() -> dict:
            assert process.poll() is None, process.stdout.read().decode()
            return client.get("/healthz")

        assert eventually(healthy, 30, "the node answering /healthz", ignoring=(NodeError,))["node"] == "n9"
        table, _ = client.scan_table({"table": "t", "aggregates": [{"name": "n", "func": "count"}]})
        assert sum(table.column("n").to_pylist()) == 3000
    finally:
        process.send_signal(signal.SIGINT)
        assert process.wait(timeout=20) == 0


def test_the_service_benchmark_runs_end_to_end(tmp_path: Path) -> None:
    """`benchmarks.bench_service`, each step timed, every answer through the engine DuckDB's."""
    bench_service.main(["--repeat", "2", "--json", str(tmp_path / "service.json")])
    figures = json.loads((tmp_path / "service.json").read_text())
    assert set(figures["queries"]) == {"Q6, no row", "Q6"} and figures["floor_ms"] > 0
    assert all(q[path] > 0 for q in figures["queries"].values() for path in bench_service.PATHS)
