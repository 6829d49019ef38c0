"""A region whose roles live on hosts of their own: the gateway, two storage nodes, a Spark master
and a Spark worker, each in a Linux network namespace with its own address (`benchmarks.netns`),
configured only by those addresses (nothing listens on or dials localhost between roles). TPC-H
SF 0.01 is loaded through Spark (`cxg load tpch --live`, from the gateway's host: the worker's
executors generate the rows and upload the blocks to the nodes) and queried through the gateway,
whose joins run on the worker's executors reading the nodes through the data source."""

from __future__ import annotations

import contextlib
import json
import subprocess
import sys
from pathlib import Path

import pytest

from benchmarks import netns
from benchmarks.compare import rows, rows_match
from gateway import Client, master_status
from loadtests import query
from tests.waiting import eventually

ROLES = ["gateway", "node-0", "node-1", "spark-master", "spark-worker"]
QUERIES = (1, 3, 5, 9, 18)  # one on the nodes alone, four joins on the cluster


@contextlib.contextmanager
def _processes(root: Path):
    """Start commands on hosts; every one started is stopped at the end (SIGTERM, then SIGKILL)."""
    started: list[subprocess.Popen] = []

    def start(hosts: netns.Hosts, host: str, *args: str) -> subprocess.Popen:
        with open(root / f"{host}.log", "ab") as log:
            command = [*hosts.prefix(host), sys.executable, "-m", "cxg", *args]
            started.append(subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT))
        return started[-1]

    try:
        yield start
    finally:
        for process in reversed(started):
            process.terminate()
        for process in reversed(started):
            try:
                process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()


def _wait(condition, timeout: float, what: str, root: Path) -> None:
    """Wait for a role on its host (any error means not up yet); on timeout, every host's log."""
    try:
        eventually(condition, timeout, what, interval=0.5, ignoring=(Exception,))
    except AssertionError as e:
        logs = "\n".join(f"--- {p.name}\n{p.read_text()[-1500:]}" for p in sorted(root.glob("*.log")))
        raise AssertionError(f"{e}\n{logs}") from None


@pytest.mark.slow
def test_a_region_on_five_hosts_loads_through_spark_and_answers(tmp_path: Path, duck) -> None:
    why = netns.available()
    if why:
        pytest.skip(why)
    with netns.Hosts(ROLES) as hosts, _processes(tmp_path) as start:
        at = hosts.addresses
        gateway, master = f"http://{at['gateway']}:8080", f"spark://{at['spark-master']}:7077"
        config = tmp_path / "cxg.toml"
        config.write_text(
            f'[gateway]\nhost = "{at["gateway"]}"\nport = 8080\n'
            f'[spark]\nmaster = "{master}"\nexecutor_python = "{sys.executable}"\nwarm_up = false\ngather_rows = 0\n'
            f"executor_wait = 60.0\n"
            f'conf = {{ "spark.driver.host" = "{at["gateway"]}", "spark.driver.bindAddress" = "{at["gateway"]}",'
            ' "spark.executor.memory" = "512m" }\n'
        )
        base = ["--config", str(config)]
        start(hosts, "spark-master", *base, "spark", "master", "--host", at["spark-master"], "--webui-port", "8080")
        ui = f"http://{at['spark-master']}:8080"
        _wait(lambda: master_status(ui)["status"] == "ALIVE", 90, "the Spark master", tmp_path)
        worker = ["spark", "worker", "--host", at["spark-worker"], "--cores", "2", "--memory", "1g"]
        start(hosts, "spark-worker", *base, *worker, "--work-dir", str(tmp_path / "work"))
        _wait(lambda: master_status(ui)["aliveworkers"] == 1, 90, "the Spark worker", tmp_path)
        start(hosts, "gateway", *base, "gateway")
        for i in range(2):
            node = ["node", "--name", f"node-{i}", "--host", at[f"node-{i}"], "--port", "8101", "--slots", "2"]
            start(hosts, f"node-{i}", *base, *node, "--data", str(tmp_path / f"data-{i}"), "--processes", "0")
        client = Client(gateway)
        _wait(lambda: client.wait_ready(timeout=5, nodes=2), 120, "the gateway and both nodes", tmp_path)
        urls = sorted(n["url"] for m in client.cluster()["members"] for n in m["nodes"])
        assert urls == [f"http://{at['node-0']}:8101", f"http://{at['node-1']}:8101"]  # as the nodes advertise

        # TPC-H's placements whatever the sizes: the fact tables' joins are the Spark worker's (gather_rows = 0:
        # however few their rows)
        by_key = ["--set", "storage.replicate_below=0"]
        load = [*hosts.prefix("gateway"), sys.executable, "-m", "cxg", *base, *by_key, "load", "tpch", "--live"]
        loaded = subprocess.run([*load, "--url", gateway], capture_output=True, text=True, timeout=900)
        assert loaded.returncode == 0, loaded.stdout[-2000:] + loaded.stderr[-3000:]
        assert "loaded lineitem: 60,175 rows" in loaded.stdout

        for number in QUERIES:
            sql = query(number)
            result = client.execute(sql, wait=60)
            expected = duck.sql(sql).fetchall()
            assert rows_match(rows(result.table), expected, ordered="order by" in sql.lower()), number
        apps = master_status(ui)["activeapps"]
        assert [a["name"] for a in apps] == ["cxg"], json.dumps(apps)[:500]  # the gateway's, on the worker
