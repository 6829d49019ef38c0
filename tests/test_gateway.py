"""The gateway through real HTTP, in front of simulation nodes: every endpoint, result formats
and chunks, every error status, authentication and per-token limits, cancellation (the nodes'
slots are freed), timeouts, limits and metrics."""

from __future__ import annotations

import io
import json
import logging
import socket

import pyarrow as pa
import pyarrow.csv as pacsv
import pytest

from balancer import NodeServer, SimulationBackend
from balancer.region_balancer import QUEUE_PER_SLOT
from balancer.simulation import QueryType
from gateway import Client, GatewayError
from regions import EmbeddedRegion, load_config
from tests.balancing import on_loop, until
from tests.http import Reply, http
from tests.waiting import eventually

QUERY_TYPES = {
    "fast": QueryType(0.002, 7),
    "slow": QueryType(60.0, 1),
    "big": QueryType(0.002, 40),
    "huge": QueryType(0.002, 5000),
}
TOKENS = """[{name = "alice", token = "a-secret", max_concurrent = 1}, {name = "bob", token = "b-secret"}]"""


def _region(*sets: str, nodes: int = 2, slots: int = 2) -> EmbeddedRegion:
    config = load_config(None, ['region.backend="simulation"', "gateway.port=0", "gateway.chunk_rows=3", *sets])
    servers = [NodeServer(f"n{i}", SimulationBackend(QUERY_TYPES, 1.0), slots) for i in range(nodes)]
    return EmbeddedRegion(config, servers)


@pytest.fixture(scope="module")
def region():
    with _region("gateway.max_bytes=20000") as r:
        yield r


def _post(region, body, accept: str | None = None, token: str | None = None):
    headers = {"Accept": accept} if accept else {}
    if token:
        headers["Authorization"] = f"Bearer {token}"
    return http("POST", f"{region.url}/v1/statements", body, headers)


def _running(region) -> int:
    return sum(n["running"] + n["buffered"] for m in region.gateway.balancer.snapshot()["members"] for n in m["nodes"])


def test_a_query_answers_synchronously_with_typed_columns(region) -> None:
    reply = _post(region, {"sql": "SELECT 1", "tag": "fast"})
    assert reply.status == 200
    doc = reply.json()
    assert doc["state"] == "succeeded" and doc["engine"] == "simulation"
    assert doc["columns"] == [
        {"name": "key", "type": "bigint"},
        {"name": "value", "type": "double"},
        {"name": "label", "type": "varchar"},
    ]
    assert doc["row_count"] == 7 and len(doc["rows"]) == 3 and doc["chunks"] == 3  # chunk_rows = 3
    assert isinstance(doc["rows"][0][0], int) and isinstance(doc["rows"][0][2], str)
    assert set(doc["timings_ms"]) >= {"prepare", "queue", "execute", "total"}
    run, _, number = doc["id"].rpartition("-")
    assert int(run, 16) > 0, "ids carry the gateway's run, so they never repeat across restarts"
    query_id = int(number)
    assert query_id // 10**8 >= 1 and query_id // 10**6 % 100 == 1 and query_id % 10**6 == 0


def test_client_number_and_plain_text_bodies(region) -> None:
    doc = _post(region, {"sql": "SELECT 1", "tag": "fast", "client": 42}).json()
    assert int(doc["id"].rpartition("-")[2]) % 10**6 == 42
    reply = http("POST", f"{region.url}/v1/statements", "SELECT 1", {"Accept": "application/json"})
    assert reply.status == 422 and reply.json()["error"]["code"] == "unknown_query_type"  # no tag in plain text


def test_results_as_csv_and_arrow(region) -> None:
    reply = _post(region, {"sql": "SELECT 1", "tag": "fast"}, accept="text/csv")
    assert reply.status == 200 and reply.headers["Content-Type"].startswith("text/csv")
    table = pacsv.read_csv(io.BytesIO(reply.body))
    assert table.num_rows == 7 and table.column_names == ["key", "value", "label"]
    reply = _post(region, {"sql": "SELECT 1", "tag": "fast"}, accept="application/vnd.apache.arrow.stream")
    table = pa.ipc.open_stream(reply.body).read_all()
    assert table.num_rows == 7 and table.schema.field("key").type == pa.int64()
    assert reply.headers["X-Cxg-Row-Count"] == "7" and reply.headers["X-Cxg-Truncated"] == "false"
    assert _post(region, {"sql": "SELECT 1", "tag": "fast"}, accept="image/png").status == 406
    q = _post(region, {"sql": "SELECT 1", "tag": "fast"}, accept="text/csv;q=0.2, application/json")
    assert q.headers["Content-Type"].startswith("application/json")


def test_asynchronous_statements_poll_and_read_chunks(region) -> None:
    reply = _post(region, {"sql": "SELECT 1", "tag": "big", "wait": 0})
    assert reply.status in (200, 202)
    statement = reply.json()["id"]
    if reply.status == 202:
        assert reply.headers["Location"].endswith(f"/v1/statements/{statement}")
    doc = http("GET", f"{region.url}/v1/statements/{statement}?wait=10").json()
    assert doc["state"] == "succeeded" and doc["row_count"] == 40 and doc["truncated"] is False
    rows, url = list(doc["rows"]), doc["next"]
    while url:
        chunk = http("GET", url).json()
        rows += chunk["rows"]
        url = chunk["next"]
    whole = http("GET", f"{region.url}/v1/statements/{statement}/result").json()
    assert rows == whole["rows"] and len(rows) == 40
    arrow = http("GET", f"{region.url}/v1/statements/{statement}/chunks/1", headers={"Accept": "text/csv"})
    assert arrow.status == 200 and arrow.body.count(b"\n") == 4  # header + 3 rows
    missing = http("GET", f"{region.url}/v1/statements/{statement}/chunks/999")
    assert missing.status == 404 and missing.json()["error"]["code"] == "chunk_not_found"


def test_unknown_statements_and_routes_are_404(region) -> None:
    for path in ("/v1/statements/12345", "/v1/statements/abc", "/v1/statements/1/result", "/v1/nothing"):
        reply = http("GET", region.url + path)
        assert reply.status == 404 and reply.json()["error"]["code"] in ("statement_not_found", "not_found")
    for garbage in ("not-an-id", "x-1", "1a-b2", "-7"):  # no id of any run: not "lost with a restart"
        reply = http("GET", f"{region.url}/v1/statements/{garbage}")
        assert reply.status == 404 and reply.json()["error"]["code"] == "statement_not_found", garbage
    earlier = http("GET", f"{region.url}/v1/statements/1-5")  # the form of an id, of another run
    assert earlier.status == 410 and earlier.json()["error"]["code"] == "statement_lost"


@pytest.mark.parametrize(
    ("body", "status", "code"),
    [
        ({"sql": "SELEC 1"}, 400, "syntax_error"),
        ({"sql": ""}, 400, "invalid_request"),
        ({"query": "SELECT 1"}, 400, "invalid_request"),
        ({"sql": "SELECT 1", "wait": "soon"}, 400, "invalid_request"),
        ({"sql": "SELECT 1", "client": 10**7}, 400, "invalid_request"),
        ({"sql": "SELECT * FROM t WHERE a = :a", "tag": "fast"}, 400, "invalid_parameter"),
        ({"sql": "SELECT * FROM t WHERE a = :a", "params": {"a": [1]}, "tag": "fast"}, 400, "invalid_parameter"),
        ({"sql": "INSERT INTO t VALUES (1)"}, 422, "read_only"),
        ({"sql": "DROP TABLE lineitem"}, 422, "read_only"),
        ({"sql": "SELECT 1; DELETE FROM t"}, 400, "syntax_error"),
        ({"sql": "SELECT 1", "tag": "nope"}, 422, "unknown_query_type"),
    ],
)
def test_bad_requests_get_a_status_a_code_and_a_message(region, body, status, code) -> None:
    reply = _post(region, body)
    assert reply.status == status, reply.body
    error = reply.json()["error"]
    assert error["code"] == code and error["message"] and error["sqlstate"]


def test_malformed_json_is_400(region) -> None:
    reply = http("POST", f"{region.url}/v1/statements", "{not json", {"Content-Type": "application/json"})
    assert reply.status == 400 and reply.json()["error"]["code"] == "invalid_request"


def test_named_parameters_travel_to_the_node(region) -> None:
    body = {"sql": "SELECT * FROM t WHERE d >= :since AND n = :n", "params": {"since": "1995-01-01", "n": 3}}
    reply = _post(region, {**body, "tag": "fast"})
    assert reply.status == 200


def test_row_and_byte_limits_set_truncated(region) -> None:
    doc = _post(region, {"sql": "SELECT 1", "tag": "big", "max_rows": 5}).json()
    assert doc["row_count"] == 5 and doc["truncated"] is True
    doc = _post(region, {"sql": "SELECT 1", "tag": "huge"}).json()  # max_bytes = 20000
    assert doc["truncated"] is True and 0 < doc["row_count"] < 5000


def test_the_results_kept_stay_within_result_memory() -> None:
    """Finished statements' results share gateway.result_memory: past it the oldest is dropped
    (410 result_evicted in every format), and no one result keeps more than all may."""
    with _region("gateway.result_memory=4000") as r:
        ids = [_post(r, {"sql": "SELECT 1", "tag": "big"}).json()["id"]]  # 40 rows
        size = r.gateway.statements.held
        fit = 4000 // size
        assert fit >= 2
        ids += [_post(r, {"sql": "SELECT 1", "tag": "big"}).json()["id"] for _ in range(fit)]
        for accept in ("application/json", "application/vnd.apache.arrow.stream", "text/csv"):
            gone = http("GET", f"{r.url}/v1/statements/{ids[0]}/result", headers={"Accept": accept})
            assert gone.status == 410 and gone.json()["error"]["code"] == "result_evicted", gone.body
            assert "gateway.result_memory" in gone.json()["error"]["message"]
        status = http("GET", f"{r.url}/v1/statements/{ids[0]}").json()
        assert status["state"] == "succeeded" and status["error"]["code"] == "result_evicted"
        for kept in ids[1:]:
            assert http("GET", f"{r.url}/v1/statements/{kept}/result").json()["row_count"] == 40
        assert r.gateway.statements.held == fit * size
        huge = _post(r, {"sql": "SELECT 1", "tag": "huge"}).json()  # 5,000 rows: over 100 kB
        assert huge["truncated"] is True and 40 < huge["row_count"] < 40 * fit + 40
        assert r.gateway.statements.held <= 4000
        metrics = http("GET", f"{r.url}/metrics").body.decode()
        assert f"cxg_results_evicted_total {fit + 1}.0" in metrics
        assert f"cxg_results_bytes {r.gateway.statements.held}" in metrics


def test_cancelling_a_running_query_frees_its_slot(region) -> None:
    doc = _post(region, {"sql": "SELECT 1", "tag": "slow", "wait": 0}).json()
    until(region, lambda: _running(region) == 1, what="the query on a node")
    status = http("GET", f"{region.url}/v1/statements/{doc['id']}").json()
    assert status["state"] == "running" and len(status["nodes"]) == 1
    reply = http("DELETE", f"{region.url}/v1/statements/{doc['id']}")
    assert reply.status == 200 and reply.json()["state"] == "cancelled"
    until(region, lambda: _running(region) == 0, what="the slot freed")
    final = http("GET", f"{region.url}/v1/statements/{doc['id']}").json()
    assert final["state"] == "cancelled" and final["error"]["code"] == "cancelled"
    reply = http("GET", f"{region.url}/v1/statements/{doc['id']}/result")
    assert reply.status == 409


def test_a_client_that_goes_away_cancels_its_query(region) -> None:
    before = region.gateway.balancer.counters["cancelled"]
    body = json.dumps({"sql": "SELECT 1", "tag": "slow", "wait": 60}).encode()
    host, port = region.url.removeprefix("http://").split(":")
    with socket.create_connection((host, int(port))) as s:
        s.sendall(
            b"POST /v1/statements HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
            + f"Content-Length: {len(body)}\r\n\r\n".encode()
            + body
        )
        until(region, lambda: _running(region) == 1, what="the query on a node")
    until(region, lambda: region.gateway.balancer.counters["cancelled"] == before + 1, what="the query cancelled")
    until(region, lambda: _running(region) == 0, what="the slot freed")


def test_timeout_is_504_and_frees_the_slot(region) -> None:
    reply = _post(region, {"sql": "SELECT 1", "tag": "slow", "timeout": 0.2})
    assert reply.status == 504 and reply.json()["error"]["code"] == "timeout"
    until(region, lambda: _running(region) == 0, what="the slot freed")


def test_health_readiness_metrics_and_openapi(region) -> None:
    assert http("GET", f"{region.url}/healthz").json() == {"status": "ok"}
    assert http("GET", f"{region.url}/readyz").json() == {"ready": True, "nodes": 2}
    metrics = http("GET", f"{region.url}/metrics").body.decode()
    for name in (
        "cxg_queries_admitted_total",
        "cxg_queries_rejected_total",
        "cxg_queries_finished_total",
        "cxg_query_stage_seconds_bucket",
        "cxg_queue_length",
        "cxg_queries_running",
        'cxg_node_slots{node="n0"} 2.0',
        "cxg_node_slots_busy",
    ):
        assert name in metrics
    spec = http("GET", f"{region.url}/openapi.json").json()
    assert spec["openapi"].startswith("3.")
    assert {"/v1/statements", "/v1/statements/{id}", "/v1/statements/{id}/chunks/{n}"} <= set(spec["paths"])
    cluster = http("GET", f"{region.url}/v1/cluster").json()
    assert cluster["backend"] == "simulation" and [m["name"] for m in cluster["members"]] == ["n0", "n1"]


def test_no_node_is_503_with_retry_after() -> None:
    config = load_config(None, ['region.backend="simulation"', "gateway.port=0"])
    with EmbeddedRegion(config, []) as region:
        assert http("GET", f"{region.url}/readyz").status == 503
        reply = _post(region, {"sql": "SELECT 1", "tag": "fast"})
        assert reply.status == 503 and reply.json()["error"]["code"] == "no_nodes"
        assert int(reply.headers["Retry-After"]) > 0


def test_a_full_queue_is_503() -> None:
    with _region("gateway.max_queue=1", nodes=1, slots=1) as region:
        for _ in range(3):  # one running, one in the node's buffer, one in the region's queue
            assert _post(region, {"sql": "SELECT 1", "tag": "slow", "wait": 0}).status == 202
        until(region, lambda: len(region.gateway.balancer.queue) == 1)
        reply = _post(region, {"sql": "SELECT 1", "tag": "slow", "wait": 0})
        assert reply.status == 503 and reply.json()["error"]["code"] == "queue_full" and "Retry-After" in reply.headers
        assert _post(region, {"sql": "SELEC 1"}).status == 400  # invalid, not a rejection
        metrics = http("GET", f"{region.url}/metrics").body.decode()
        assert 'cxg_queries_rejected_total{reason="queue_full"} 1.0' in metrics
        assert 'cxg_queries_invalid_total{code="syntax_error"} 1.0' in metrics
        cluster = http("GET", f"{region.url}/v1/cluster").json()  # one count, whoever shows it
        assert (cluster["counters"]["rejected"], cluster["rejections"]) == (1, {"queue_full": 1})


def test_by_default_the_queue_holds_a_few_rounds_of_the_regions_slots() -> None:
    """Load past the region's capacity is refused at once (503, Retry-After), not queued for minutes."""
    with _region(nodes=2, slots=1) as region:
        until(region, lambda: len(region.gateway.balancer.pool.node_infos()) == 2)
        bound = region.gateway.balancer.queue_bound
        assert bound == QUEUE_PER_SLOT * 2
        answers = [_post(region, {"sql": "SELECT 1", "tag": "slow", "wait": 0}) for _ in range(bound + 8)]
        statuses = [a.status for a in answers]
        assert statuses.count(202) == bound + 4  # two running, two in the nodes' buffers, the queue full
        refused = [a for a in answers if a.status == 503]
        assert refused and all(
            a.json()["error"]["code"] == "queue_full" and "Retry-After" in a.headers for a in refused
        )
        assert http("GET", f"{region.url}/v1/cluster").json()["queue_bound"] == bound


def test_tokens_authenticate_limit_and_own_their_statements(tmp_path, caplog) -> None:
    caplog.set_level(logging.DEBUG)
    with _region(f"gateway.tokens={TOKENS}", f"gateway.log_dir={json.dumps(str(tmp_path))}") as region:
        missing = _post(region, {"sql": "SELECT 1", "tag": "fast"})
        assert missing.status == 401 and missing.json()["error"]["code"] == "unauthorized"
        assert _post(region, {"sql": "SELECT 1", "tag": "fast"}, token="wrong").status == 401
        assert _post(region, {"sql": "SELECT 1", "tag": "fast"}, token="b-secret").status == 200
        slow = _post(region, {"sql": "SELECT 1", "tag": "slow", "wait": 0}, token="a-secret")
        assert slow.status == 202
        limited = _post(region, {"sql": "SELECT 1", "tag": "fast"}, token="a-secret")  # max_concurrent = 1
        assert limited.status == 429 and limited.json()["error"]["code"] == "too_many_queries"
        assert limited.headers["Retry-After"] == "1"
        url = f"{region.url}/v1/statements/{slow.json()['id']}"
        other = http("DELETE", url, headers={"Authorization": "Bearer b-secret"})
        assert other.status == 403 and other.json()["error"]["code"] == "forbidden"
        assert http("GET", url).status == 401
        assert http("GET", f"{region.url}/v1/cluster").status == 401
        assert http("GET", f"{region.url}/healthz").status == 200  # probes stay open
        mine = http("DELETE", url, headers={"Authorization": "Bearer a-secret"})
        assert mine.json()["state"] == "cancelled"
        assert _post(region, {"sql": "SELECT 1", "tag": "fast"}, token="a-secret").status == 200
    # tokens, right or wrong, are never logged: not in the process's log, nor in the roles' files
    logged = caplog.text + "".join(p.read_text(errors="replace") for p in tmp_path.rglob("*") if p.is_file())
    assert "a-secret" not in logged and "b-secret" not in logged and "wrong" not in logged
    assert list(tmp_path.rglob("*.jsonl")) or list(tmp_path.rglob("*.log")), "the roles wrote no logs to check"


def tls_settings(folder) -> list[str]:
    """A certificate for 127.0.0.1 from a new authority (its certificate: folder/ca.pem), as the
    gateway's TLS settings."""
    trustme = pytest.importorskip("trustme")
    authority = trustme.CA()
    authority.cert_pem.write_to_path(folder / "ca.pem")
    issued = authority.issue_cert("127.0.0.1")
    issued.cert_chain_pems[0].write_to_path(folder / "cert.pem")
    issued.private_key_pem.write_to_path(folder / "key.pem")
    return [f'gateway.tls_{k}="{folder / f}"' for k, f in (("cert", "cert.pem"), ("key", "key.pem"), ("ca", "ca.pem"))]


def test_tls_with_a_configured_certificate(tmp_path) -> None:
    """HTTPS with a certificate from the configuration: clients that trust it get answers, the
    nodes' links run over it too; a client that does not trust it, or speaks plain HTTP, gets
    nothing."""
    tls = tls_settings(tmp_path)
    with _region(*tls) as region:
        assert region.url.startswith("https://")
        client = Client(region.url, ca=str(tmp_path / "ca.pem"))
        assert client.execute("SELECT 1", tag="fast").table.num_rows == 7
        assert sum(len(m["nodes"]) for m in client.cluster()["members"]) == 2  # both nodes linked over TLS
        with pytest.raises(GatewayError, match="CERTIFICATE_VERIFY_FAILED"):
            Client(region.url).execute("SELECT 1", tag="fast")
        with pytest.raises(GatewayError) as plain:
            Client(region.url.replace("https://", "http://")).execute("SELECT 1", tag="fast")
        assert plain.value.status in (0, 400)


def test_statements_expire_after_their_ttl() -> None:
    with _region("gateway.result_ttl=0.2", nodes=1) as region:
        statement = _post(region, {"sql": "SELECT 1", "tag": "fast"}).json()["id"]
        assert http("GET", f"{region.url}/v1/statements/{statement}").status == 200
        eventually(lambda: http("GET", f"{region.url}/v1/statements/{statement}").status == 404, 10, "it expired")


def test_queue_length_reported_with_each_answer(region) -> None:
    doc = _post(region, {"sql": "SELECT 1", "tag": "fast"}).json()
    assert doc["queue_length"] == 0
    assert on_loop(region, lambda: len(region.gateway.balancer.queue)) == 0


def test_statements_are_listed_newest_first_by_state_and_a_token_sees_its_own() -> None:
    sets = (f"gateway.tokens={TOKENS}", 'gateway.cluster_token="ops-secret"')
    with _region(*sets, nodes=1) as region:
        slow = _post(region, {"sql": "SELECT 1", "tag": "slow", "wait": 0}, token="b-secret").json()["id"]
        fast = _post(region, {"sql": "SELECT 2 AS two", "tag": "fast"}, token="a-secret").json()["id"]
        until(region, lambda: _running(region) == 1, what="the slow query on its node")

        def listed(token: str, query: str = "") -> Reply:
            return http("GET", f"{region.url}/v1/statements{query}", headers={"Authorization": f"Bearer {token}"})

        [alices] = listed("a-secret").json()["statements"]
        assert alices["id"] == fast and alices["token"] == "alice" and alices["state"] == "succeeded"
        assert alices["sql"] == "SELECT 2 AS two" and alices["rows"] == 7 and alices["nodes"] == ["n0"]
        assert [s["id"] for s in listed("b-secret", "?state=running").json()["statements"]] == [slow]
        assert listed("b-secret", "?state=succeeded").json() == {"statements": [], "total": 0}
        assert listed("b-secret", "?token=alice").status == 403
        assert [s["id"] for s in listed("ops-secret").json()["statements"]] == [fast, slow]
        assert [s["id"] for s in listed("ops-secret", "?token=alice").json()["statements"]] == [fast]
        assert listed("ops-secret", "?limit=1").json()["total"] == 2
        reply = listed("ops-secret", "?state=done")
        assert reply.status == 400 and reply.json()["error"]["code"] == "invalid_request"
        assert http("GET", f"{region.url}/v1/statements").status == 401
        metrics = http("GET", f"{region.url}/metrics").body.decode()
        assert 'cxg_statements{state="running"} 1.0' in metrics and 'cxg_statements{state="succeeded"} 1.0' in metrics
        http("DELETE", f"{region.url}/v1/statements/{slow}", headers={"Authorization": "Bearer b-secret"})
        until(region, lambda: _running(region) == 0, what="the slot freed")
