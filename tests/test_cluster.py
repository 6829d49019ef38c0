"""`cxg up`: the gateway, routers and nodes as separate processes on loopback, from one
configuration; `cxg query` and `cxg status` against it; Ctrl-C or SIGTERM stops every process."""

from __future__ import annotations

import contextlib
import json
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from gateway import Client, GatewayError, free_port
from tests.http import http
from tests.waiting import eventually

CLI = [sys.executable, "-m", "cxg"]


def _up(*sets: str) -> tuple[subprocess.Popen, str]:
    port = free_port()
    args = [x for s in (f"gateway.port={port}", "region.first_port=0", *sets) for x in ("--set", s)]
    process = subprocess.Popen([*CLI, *args, "up"], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    return process, f"http://127.0.0.1:{port}"


def _children(pid: int) -> list[int]:
    """Processes whose parent is `pid` (from /proc)."""
    found = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        with contextlib.suppress(OSError):
            if int(stat.read_text().rsplit(")", 1)[1].split()[1]) == pid:
                found.append(int(stat.parent.name))
    return found


def _alive(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def _said(process: subprocess.Popen, text: str) -> str:
    """What `cxg up` printed up to and including its first line holding `text` (read as it comes)."""
    lines = []
    for line in process.stdout:
        lines.append(line)
        if text in line:
            return "".join(lines)
    raise AssertionError(f"cxg up ended before saying {text!r}:\n{''.join(lines)}")


def _stop(process: subprocess.Popen, url: str, signum: int = signal.SIGINT) -> str:
    """Stop `cxg up` with `signum`; check that it and every process it started are gone."""
    children = _children(process.pid)
    assert len(children) >= 2  # the gateway and at least one node
    process.send_signal(signum)
    output, _ = process.communicate(timeout=60)
    assert process.returncode == 0, output
    with pytest.raises(GatewayError):
        Client(url, timeout=2).get("/healthz")
    eventually(lambda: not any(_alive(pid) for pid in children), 10, f"every process it started gone\n{output}")
    return output


def test_up_starts_a_region_with_a_router_and_stops_it_on_ctrl_c() -> None:
    process, url = _up(
        'region.backend="simulation"', "region.nodes=3", "region.routers=1", "simulation.time_scale=0.0001"
    )
    try:
        doc = Client(url).wait_ready(timeout=60, nodes=3)
        assert doc == {"ready": True, "nodes": 3}
        query = subprocess.run(
            [*CLI, "query", "--url", url, "--tag", "q6", "SELECT 1"], capture_output=True, text=True, timeout=60
        )
        assert query.returncode == 0 and "1 row(s)" in query.stdout, query.stderr
        status = subprocess.run([*CLI, "status", "--url", url, "--json"], capture_output=True, text=True, timeout=60)
        cluster = json.loads(status.stdout)
        assert [(m["name"], m["role"], len(m["nodes"])) for m in cluster["members"]] == [("router-0", "router", 3)]
        assert cluster["counters"]["completed"] == 1
        shown = subprocess.run([*CLI, "status", "--url", url], capture_output=True, text=True, timeout=60)
        assert "router-0" in shown.stdout and "node-2" in shown.stdout
    finally:
        output = _stop(process, url)
    assert "is up at" in output and "stopping" in output


def test_up_with_native_nodes_answers_sql_and_stops_on_sigterm(region_stores, duck) -> None:
    data = json.dumps([str(s.root) for s in region_stores])
    process, url = _up(f"storage.data={data}", "region.slots=2")
    said = ""
    try:  # the gateway answers before `cxg up` has said all it says of it: a stop then cuts it short
        said = _said(process, "Ctrl-C stops it")
        Client(url).wait_ready(timeout=60, nodes=2)
        sql = "select l_returnflag, count(*) as n from lineitem group by l_returnflag order by l_returnflag"
        reply = http("POST", f"{url}/v1/statements", {"sql": sql})
        assert reply.status == 200, reply.body
        assert [tuple(r) for r in reply.json()["rows"]] == duck.sql(sql).fetchall()
        assert sorted(reply.json()["nodes"]) == ["node-0", "node-1"]
    finally:
        output = said + _stop(process, url, signal.SIGTERM)
    for i, store in enumerate(region_stores):  # what it serves, from where
        assert (
            f"node-{i} serves {store.root}: " in output
            and f"lineitem ({store.table('lineitem').rows:,} rows)" in output
        )
    assert "is starting in the gateway" in output


def test_up_reports_a_node_that_cannot_start() -> None:
    process, _ = _up('region.backend="mysql"', "region.nodes=1", 'region.mysql_url="mysql://root@127.0.0.1:9/none"')
    output, _ = process.communicate(timeout=120)
    assert process.returncode != 0
    # the node's exit is reported as such, not after the start-up timeout ("not ready after")
    assert "node-0 exited during start-up" in output and "cannot reach MariaDB" in output
    assert "was not ready after" not in output
