"""Operating a region: draining a node or the whole region (nothing running is lost or cut, new
queries go elsewhere or get 503 `draining`), SIGTERM to real gateway and node processes (they drain,
then exit 0), JSON log lines carrying the query's id, `cxg up` refusing a gateway port another
process holds, `cxg status` showing the gateway's versions, and docs/metrics.md against what a
gateway serves at /metrics."""

from __future__ import annotations

import asyncio
import importlib.metadata
import io
import json
import logging
import re
import signal
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
from prometheus_client.parser import text_string_to_metric_families

from balancer import Answer, DispatchFailed, NodeServer, Request, SimulationBackend
from balancer.logs import JsonFormatter, TextFormatter
from balancer.packets import Cancel
from balancer.simulation import QueryType
from gateway import Client, GatewayError, free_port
from regions import EmbeddedRegion, LocalRegion, load_config
from tests.balancing import Gate, on_loop, until
from tests.http import http
from tests.test_cli import run
from tests.test_cluster import _up
from tests.waiting import eventually

METRICS_DOC = Path(__file__).parents[1] / "docs" / "metrics.md"


def _region(
    *sets: str,
    nodes: int = 2,
    slots: int = 1,
    backend: Callable[[], object] = Gate,
    routers: dict[str, list[str]] | None = None,
) -> EmbeddedRegion:
    """A region of simulation-kind nodes n0, n1, ... in this process, each with `slots` slots."""
    config = load_config(None, ['region.backend="simulation"', "gateway.port=0", *sets])
    return EmbeddedRegion(config, [NodeServer(f"n{i}", backend(), slots) for i in range(nodes)], routers or {})


def _submit(url: str, tag: str = "") -> str:
    """Submit a query without waiting for it; its statement id."""
    reply = http("POST", f"{url}/v1/statements", {"sql": "SELECT 1", "tag": tag, "wait": 0})
    assert reply.status == 202, reply.body
    return reply.json()["id"]


def _number(statement: str) -> int:
    """The query id inside a statement id (what the nodes and the logs know it by)."""
    return int(statement.rpartition("-")[2])


def _outcome(url: str, statement: str) -> dict:
    return http("GET", f"{url}/v1/statements/{statement}?wait=30").json()


def _finish(region: EmbeddedRegion, statement: str) -> None:
    number = _number(statement)
    on_loop(region, lambda: [node.backend.finish(number) for node in region.nodes])


def _where(region: EmbeddedRegion, statement: str) -> str:
    """The node running or buffering a statement ('' if none)."""
    number = _number(statement)
    for node in region.nodes:
        if number in node.backend.running or (node.buffer is not None and node.buffer.id == number):
            return node.name
    return ""


def _node(doc: dict, name: str) -> dict:
    return next(n for member in doc["members"] for n in member["nodes"] if n["name"] == name)


@pytest.mark.parametrize("routers", [{}, {"r0": ["n0", "n1"]}], ids=["joined", "behind-a-router"])
def test_a_drained_node_finishes_what_it_runs_and_buffers_and_new_queries_go_to_the_others(routers) -> None:
    with _region(routers=routers) as region:
        url, client = region.url, Client(region.url)
        first = [_submit(url) for _ in range(4)]  # each node: one running, one buffered
        until(region, lambda: all(_where(region, s) for s in first), what="two queries on each node")
        held = on_loop(region, lambda: [s for s in first if _where(region, s) == "n0"])
        assert len(held) == 2
        assert client.drain("n0") == {"region": 1, "draining": False, "draining_nodes": ["n0"]}
        until(region, lambda: not _node(region.gateway.balancer.snapshot(), "n0")["ready"], what="n0 refuses")
        assert _node(client.cluster(), "n0")["draining"] is True
        lease = on_loop(region, lambda: region.gateway.balancer.submit(nodes=frozenset({"n0"}), lease=True))
        until(region, lambda: lease.done.done(), what="a lease on a drained node")
        with pytest.raises(DispatchFailed) as refused:
            lease.done.result()
        assert refused.value.code == "node_draining" and "n0" in str(refused.value)

        late = _submit(url)  # n1 is full and n0 drained: it waits in the region's queue
        running = on_loop(region, lambda: next(s for s in held if _number(s) in region.nodes[0].backend.running))
        _finish(region, running)  # n0 starts its buffered query and has room, yet gets nothing new
        until(region, lambda: region.nodes[0].buffer is None and region.nodes[0].running == 1, what="promoted")
        until(region, lambda: _node(region.gateway.balancer.snapshot(), "n0")["running"] == 1, what="n0 reported")
        assert on_loop(region, lambda: (region.gateway.balancer.queue_length, _where(region, late))) == (1, "")

        for statement in [*first, late]:
            if statement != running:
                until(region, lambda s=statement: _where(region, s), what=f"{statement} on a node")
                _finish(region, statement)
            doc = _outcome(url, statement)
            assert doc["state"] == "succeeded", doc
            assert doc["nodes"] == ["n0" if statement in held else "n1"]  # none moved, none cut

        assert client.drain("n0", on=False)["draining_nodes"] == []
        until(region, lambda: _node(region.gateway.balancer.snapshot(), "n0")["ready"], what="n0 takes queries")
        again = [_submit(url) for _ in range(2)]
        until(region, lambda: {_where(region, s) for s in again} == {"n0", "n1"}, what="both nodes in rotation")
        for statement in again:
            _finish(region, statement)
            assert _outcome(url, statement)["state"] == "succeeded"
        with pytest.raises(GatewayError) as unknown:
            client.drain("n9")
        assert (unknown.value.status, unknown.value.code) == (404, "node_not_found")


def test_a_router_told_to_stop_takes_nothing_new_and_waits_for_what_it_forwarded() -> None:
    with _region(routers={"r0": ["n0", "n1"]}) as region:
        url, router = region.url, region.router_objects["r0"]
        first = _submit(url)
        until(region, lambda: _where(region, first), what="a query on a node")
        leaving = asyncio.run_coroutine_threadsafe(router.leave(30), region.loop)
        until(region, lambda: region.gateway.balancer.draining_nodes() == ["n0", "n1"], what="its nodes out")
        late = _submit(url)  # the router refuses: it waits in the region's queue
        until(region, lambda: region.gateway.balancer.queue_length == 1, what="the new query queued")
        assert on_loop(region, lambda: _where(region, late)) == "" and not leaving.done()
        _finish(region, first)
        leaving.result(10)
        assert _outcome(url, first)["state"] == "succeeded"
        assert http("DELETE", f"{url}/v1/statements/{late}").json()["state"] == "cancelled"


def test_a_node_told_to_stop_is_idle_once_a_query_cancelled_right_behind_its_request_is_gone(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """A `Cancel` handled before the query's task has taken a step still frees its slot: leaving
    finds the node idle instead of giving up after its timeout with the query still counted."""

    async def scenario() -> int:
        node = NodeServer("n0", Gate(), 2)
        await node.handle(Request(id=1))
        await node.handle(Cancel(id=1))
        await node.leave(10)
        return node.running

    caplog.set_level(logging.WARNING, logger="cxg.server")
    assert asyncio.run(scenario()) == 0
    assert not [r.getMessage() for r in caplog.records if "still running after" in r.getMessage()]


def test_a_drained_region_refuses_new_statements_and_finishes_its_queued_and_running_ones(
    capsys: pytest.CaptureFixture,
) -> None:
    cluster_token = 'gateway.cluster_token="ops-secret"'
    with _region(cluster_token, nodes=1) as region:
        url = region.url
        held = [_submit(url) for _ in range(3)]  # running, buffered, queued at the gateway
        until(
            region,
            lambda: region.nodes[0].buffer is not None and region.gateway.balancer.queue_length == 1,
            what="one query running, one buffered, one queued",
        )

        assert http("POST", f"{url}/v1/cluster/drain").status == 401
        with pytest.raises(GatewayError) as wrong:
            Client(url, token="not-it").drain()
        assert wrong.value.status == 401
        code, out, _ = run(capsys, "--set", cluster_token, "drain", "--url", url)  # the cluster token by default
        assert code == 0 and "region 1 drained" in out, out

        refused = http("POST", f"{url}/v1/statements", {"sql": "SELECT 1", "wait": 0})
        error = refused.json()["error"]
        assert (refused.status, error["code"], refused.headers["Retry-After"]) == (503, "draining", "5")
        assert "region 1 is draining" in error["message"]
        ready = http("GET", f"{url}/readyz")
        assert ready.status == 503 and ready.json()["draining"] is True
        metrics = http("GET", f"{url}/metrics").body.decode()
        assert "cxg_region_draining 1.0" in metrics and 'cxg_queries_rejected_total{reason="draining"} 1.0' in metrics
        code, out, _ = run(capsys, "status", "--url", url)
        versions = f"cxg {importlib.metadata.version('cxg')}, pyarrow {importlib.metadata.version('pyarrow')}"
        assert code == 0 and "DRAINING" in out and versions in out, out
        assert Client(url).cluster()["versions"]["pyspark"] == importlib.metadata.version("pyspark")

        for statement in held:
            until(region, lambda s=statement: _where(region, s), what=f"{statement} on the node")
            _finish(region, statement)
            assert _outcome(url, statement)["state"] == "succeeded"

        code, out, _ = run(capsys, "--set", cluster_token, "undrain", "--url", url)
        assert code == 0 and "back in rotation" in out
        statement = _submit(url)
        until(region, lambda: _where(region, statement), what="a new statement running")
        _finish(region, statement)
        assert _outcome(url, statement)["state"] == "succeeded"


def _json_lines(text: str) -> list[dict]:
    """The log lines of a process's output (its other lines are what it prints); each must parse."""
    assert not re.search(r"^\d{4}-\d\d-\d\d \S+ (DEBUG|INFO|WARNING|ERROR) ", text, re.M), "a log line in text"
    return [json.loads(line) for line in text.splitlines() if line.startswith("{")]


def test_sigterm_drains_a_node_and_a_gateway_whose_queries_finish_before_they_exit_0(tmp_path: Path) -> None:
    sets = [
        'region.backend="simulation"',
        "region.nodes=2",
        "region.slots=1",
        f"gateway.port={free_port()}",
        "region.first_port=0",
        "simulation.time_scale=1.0",
        "simulation.queries={slow = {seconds = 1.5, rows = 3}}",
    ]
    region = LocalRegion(load_config(None, sets), [x for s in sets for x in ("--set", s)], tmp_path)
    region.start(timeout=60)
    try:
        url = region.url
        roles = {role.name: role for role in region.roles}

        def running(statement: str) -> str:
            def started() -> dict | None:
                doc = http("GET", f"{url}/v1/statements/{statement}").json()
                assert doc["state"] in ("queued", "running"), doc
                return doc if doc["state"] == "running" else None

            return eventually(started, 30, f"{statement} running")["nodes"][0]

        first = _submit(url, "slow")
        node = roles[running(first)].process
        node.send_signal(signal.SIGTERM)  # it takes nothing new, answers what it runs, then exits
        doc = _outcome(url, first)
        assert (doc["state"], doc["row_count"]) == ("succeeded", 3), doc
        assert node.wait(30) == 0

        second = _submit(url, "slow")
        running(second)
        gateway = roles["gateway"].process
        gateway.send_signal(signal.SIGTERM)
        eventually(lambda: http("GET", f"{url}/readyz").status == 503, 10, "the gateway saying it drains")
        refused = http("POST", f"{url}/v1/statements", {"sql": "SELECT 1", "tag": "slow"})
        assert (refused.status, refused.json()["error"]["code"]) == (503, "draining")
        doc = _outcome(url, second)
        assert (doc["state"], doc["row_count"]) == ("succeeded", 3), doc
        assert gateway.wait(30) == 0
    finally:
        region.stop()
    lines = _json_lines(region.tail(roles["gateway"], 1000))
    assert {"time", "level", "logger", "message"} <= set(lines[0])
    ended = [line for line in lines if line["message"].startswith(f"statement {second} succeeded")]
    assert [line.get("query_id") for line in ended] == [_number(second)]
    assert any(line["message"].startswith("region 1 drains: 1 statement(s) to finish") for line in lines)
    assert _json_lines(region.tail(roles["node-0"], 1000))


class _Chatty:
    """A node backend that logs while it runs a query, then answers it."""

    name = "simulation"

    def info(self) -> dict[str, int]:
        return {}

    async def execute(self, request: Request) -> Answer:
        logging.getLogger("cxg.test").info("running %s", request.sql)
        return Answer(id=request.id, node="", rows=0)


@contextmanager
def _captured() -> Iterator[tuple[io.StringIO, io.StringIO]]:
    """What the `cxg` loggers write, as JSON lines and as text."""
    logger, streams = logging.getLogger("cxg"), (io.StringIO(), io.StringIO())
    handlers = [logging.StreamHandler(stream) for stream in streams]
    for handler, formatter in zip(handlers, (JsonFormatter(), TextFormatter()), strict=True):
        handler.setFormatter(formatter)
        logger.addHandler(handler)
    level = logger.level
    logger.setLevel(logging.INFO)
    try:
        yield streams
    finally:
        logger.setLevel(level)
        for handler in handlers:
            logger.removeHandler(handler)


def test_log_lines_carry_the_query_id_on_the_gateway_and_on_the_node() -> None:
    with _region(backend=_Chatty) as region, _captured() as (as_json, as_text):
        reply = http("POST", f"{region.url}/v1/statements", {"sql": "SELECT 42"})
        assert reply.status == 200, reply.body
        number = _number(reply.json()["id"])
        logging.getLogger("cxg.test").info("no query here")
    lines = [json.loads(line) for line in as_json.getvalue().splitlines()]
    by_message = {line["message"].split(" in ")[0]: line for line in lines}
    assert by_message["running SELECT 42"]["query_id"] == number  # the node's
    assert by_message[f"statement {reply.json()['id']} succeeded"]["query_id"] == number  # the gateway's
    assert "query_id" not in by_message["no query here"]
    assert by_message["no query here"]["logger"] == "cxg.test" and by_message["no query here"]["level"] == "INFO"
    assert f"cxg.test [query {number}]: running SELECT 42" in as_text.getvalue()
    assert "cxg.test: no query here" in as_text.getvalue()


def test_up_refuses_a_gateway_port_another_process_listens_on() -> None:
    with _region(nodes=1) as other:  # a gateway answering there would pass for the region
        port = other.config.gateway.port
        process, _ = _up('region.backend="simulation"', "region.nodes=1", f"gateway.port={port}")
        output, _ = process.communicate(timeout=60)
    assert process.returncode == 2, output
    assert f"cxg: error [port_in_use]: the gateway's port 127.0.0.1:{port} is in use by another process" in output
    assert "is up at" not in output


def _documented() -> dict[str, tuple[str, frozenset[str]]]:
    """docs/metrics.md: metric -> (type, labels), from its tables."""
    rows = re.findall(r"^\| `(cxg_\w+)` \| (\w+) \|([^|]*)\|", METRICS_DOC.read_text(), re.M)
    return {name: (kind, frozenset(re.findall(r"`(\w+)`", labels))) for name, kind, labels in rows}


def test_every_metric_a_gateway_serves_is_documented_and_nothing_else() -> None:
    """Every family served (a sample of each, so that labels show) against docs/metrics.md."""
    fast = {"fast": QueryType(0.001, 2)}
    with _region(backend=lambda: SimulationBackend(fast, 1.0)) as region:
        url = region.url
        assert http("POST", f"{url}/v1/statements", {"sql": "SELECT 1", "tag": "fast"}).status == 200
        assert http("POST", f"{url}/v1/statements", {"sql": "DELETE FROM t", "tag": "fast"}).status == 422
        Client(url).drain()
        assert http("POST", f"{url}/v1/statements", {"sql": "SELECT 1", "tag": "fast"}).status == 503
        text = http("GET", f"{url}/metrics").body.decode()
    served = {}
    for family in text_string_to_metric_families(text):
        name = f"{family.name}_total" if family.type == "counter" else family.name
        assert family.samples, f"{name} has no sample to show its labels"
        served[name] = (family.type, frozenset(k for s in family.samples for k in s.labels) - {"le"})
    documented = _documented()
    assert sorted(set(served) - set(documented)) == [], "served but not in docs/metrics.md"
    assert sorted(set(documented) - set(served)) == [], "in docs/metrics.md but not served"
    assert {name: documented[name] for name in served} == served
