"""A real Spark standalone cluster: a master and two workers from the pinned pyspark wheel, as
processes on loopback, behind a region of processes (`cxg up`) whose Spark is that cluster.
TPC-H SF 0.01 is loaded through it (`cxg load tpch --live`: the executors generate the rows and
upload the blocks to the nodes); the 22 queries give DuckDB's answers with every sub-query read
by the executors through the cxg data source; the executors import the project from the zip the
driver ships; a worker killed mid-query costs Spark a retry, not the answer; with no worker alive
a query says so and fails with a retryable error within the configured bound."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import textwrap
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from benchmarks import faults
from benchmarks.compare import rows, rows_match
from gateway import Client, free_port
from loadtests import query
from regions import StandaloneCluster
from tests.http import http
from tests.test_cluster import CLI, _stop, _up
from tests.waiting import eventually

EXECUTOR_WAIT = 15  # spark.executor_wait of the region: seconds without an executor before a query fails
# a nested-loop join of 2,000 x 60,175 rows: long enough on two one-core executors to kill one mid-way
SLOW = (
    "select count(*) as n, sum(p.p_size) as s from part p, lineitem l "
    "where p.p_retailprice * 9 < l.l_extendedprice / l.l_quantity and p.p_size < 20 + l.l_linenumber"
)


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    with StandaloneCluster(tmp_path_factory.mktemp("spark-cluster")) as standalone:
        for _ in range(2):
            standalone.add_worker(cores=1, memory="1g")
        yield standalone


def _spark_sets(cluster: StandaloneCluster) -> list[str]:
    """What points a process at the cluster: executors of 512 MiB on this interpreter."""
    return [
        f'spark.master="{cluster.url}"',
        f'spark.executor_python="{sys.executable}"',
        'spark.conf={"spark.executor.memory"="512m"}',
    ]


def test_executors_import_the_project_from_the_zip_the_driver_ships(cluster) -> None:
    script = textwrap.dedent(
        f"""
        import json
        from gateway import SparkSettings
        from regions import spark_session
        spark = spark_session(SparkSettings(master={cluster.url!r}, conf={{"spark.executor.memory": "512m"}}))
        def where(_):
            import storage, gateway.sql.exchange
            return [storage.__file__, gateway.sql.exchange.__file__]
        print(json.dumps(spark.sparkContext.parallelize([0], 1).map(where).collect()[0]))
        spark.stop()
        """
    )
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    files = json.loads(done.stdout.strip().splitlines()[-1])
    for file in files:  # inside the zip, in the executor's working directory: not the driver's source tree
        assert file.startswith("./cxg-executors-") and ".zip/" in file, file
    zip_name = files[0].split("/")[1]
    assert list(cluster.root.glob(f"worker-*/app-*/*/{zip_name}")), "the zip the worker fetched for its executor"


@pytest.fixture(scope="module")
def region(cluster, tmp_path_factory):
    """A region of processes (gateway and two nodes, empty at start) whose Spark is the cluster,
    every sub-query through the data source however small (and joined there, not gathered at the
    coordinator); TPC-H SF 0.01 loaded with
    `cxg load tpch --live` (a Spark application of its own, ended before the gateway starts
    Spark: a standalone master gives an application every free core), with TPC-H's placements
    whatever the tables' sizes (`storage.replicate_below = 0`)."""
    root = tmp_path_factory.mktemp("cluster-region")
    data = json.dumps([str(root / f"n{i}") for i in range(2)])
    sets = [
        f"storage.data={data}",
        "region.slots=2",
        "spark.inline=false",
        "spark.gather_rows=0",
        "spark.warm_up=false",
        f"spark.executor_wait={EXECUTOR_WAIT}",
        f'spark.master_ui="{cluster.ui_url}"',
        *_spark_sets(cluster),
    ]
    process, url = _up(*sets)
    try:
        Client(url).wait_ready(timeout=120, nodes=2)
        args = [x for s in _spark_sets(cluster) for x in ("--set", s)]
        # the fact tables hash-placed over both nodes, however small: their joins are Spark's, on the cluster
        load = [
            *CLI,
            *args,
            "--set",
            "storage.replicate_below=0",
            "load",
            "tpch",
            "--sf",
            "0.01",
            "--live",
            "--url",
            url,
        ]
        loaded = subprocess.run(load, capture_output=True, text=True, timeout=600)
        assert loaded.returncode == 0, loaded.stdout[-2000:] + loaded.stderr[-3000:]
        yield url, loaded.stdout
    finally:
        _stop(process, url)


def test_the_ingest_runs_as_a_cluster_job_writing_to_the_nodes(region, duck) -> None:
    url, output = region
    for table in ("lineitem", "orders", "nation"):
        rows = duck.sql(f"select count(*) from {table}").fetchall()[0][0]
        assert f"loaded {table}: {rows:,} rows" in output, output
    tables = Client(url).tables()
    assert set(tables) >= {"lineitem", "orders", "customer", "part", "partsupp", "supplier", "nation", "region"}
    assert tables["lineitem"]["nodes"] == ["node-0", "node-1"]  # hash-placed over both nodes


@pytest.mark.parametrize("number", range(1, 23))
def test_tpch_on_the_cluster_through_the_data_source(region, duck, number: int) -> None:
    url, _ = region
    sql = query(number)
    got = rows(Client(url).execute(sql, wait=60).table)
    assert rows_match(got, duck.sql(sql).fetchall(), ordered="order by" in sql.lower())


def test_every_sub_query_reaches_the_executors_through_the_data_source(region) -> None:
    url, _ = region
    # EXPLAIN ANALYZE: how each sub-query reaches Spark is decided when the query runs
    reply = http("POST", f"{url}/v1/statements", {"sql": "explain analyze " + query(3), "wait": 120}, timeout=130)
    plan = "\n".join(row[0] for row in reply.json()["rows"])
    handed = plan.count("through the cxg data source")
    assert handed >= 2 and handed + plan.count("not handed to Spark") == 3, plan  # Q3 reads three tables
    assert "local relation" not in plan and "VALUES" not in plan
    assert "'BUILDING'" in plan and "o_orderdate" in plan  # the filters travel with the sub-queries


def test_status_shows_the_cluster_its_workers_and_executors(region) -> None:
    url, _ = region
    spark = Client(url).cluster()["spark"]
    assert spark["state"] == "running" and spark["executors"] == 2
    assert [(w["state"], w["cores"]) for w in spark["workers"]] == [("ALIVE", 1), ("ALIVE", 1)]
    shown = subprocess.run([*CLI, "status", "--url", url], capture_output=True, text=True, timeout=60)
    assert "session running, executors 2; workers 2 alive of 2" in shown.stdout, shown.stdout


def test_an_unreachable_master_is_said_at_start(tmp_path) -> None:
    master = f"spark://127.0.0.1:{free_port()}"
    gateway = [*CLI, "--set", f'spark.master="{master}"', "--set", f"gateway.port={free_port()}", "gateway"]
    done = subprocess.run(gateway, capture_output=True, text=True, timeout=60)
    assert done.returncode == 2
    assert f"cxg: error [invalid_config]: spark.master {master} is unreachable" in done.stderr, done.stderr


def _submit(url: str, sql: str) -> str:
    reply = http("POST", f"{url}/v1/statements", {"sql": sql, "wait": 0})
    assert reply.status in (200, 202), reply.body
    return reply.json()["id"]


def _ended(url: str, statement: str, timeout: float) -> dict:
    """The statement's document once it has ended."""

    def ended() -> dict | None:
        doc = http("GET", f"{url}/v1/statements/{statement}?wait=1").json()
        return None if doc["state"] in ("queued", "running") else doc

    return eventually(ended, timeout, f"{statement} to end")


def _executor_cpu(worker: subprocess.Popen) -> float:
    """CPU seconds used by the executor JVM a worker started: what its tasks have worked."""
    seconds = 0.0
    for pid in faults.descendants(worker.pid):
        if "CoarseGrainedExecutorBackend" in faults.command(pid):
            with contextlib.suppress(OSError):
                stat = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
                seconds += (int(stat[11]) + int(stat[12])) / os.sysconf("SC_CLK_TCK")  # utime + stime
    return seconds


def _fail_host(cluster: StandaloneCluster, worker: subprocess.Popen) -> None:
    """The worker's host failing: the worker and the executors it started killed at once (an executor
    whose worker is killed alone may live on, registered with the driver), until the master sees it gone."""
    doomed = faults.descendants(worker.pid)
    faults.kill(worker.pid, signal.SIGKILL)  # first, so that it launches no executor in place of those killed
    for pid in doomed:
        faults.kill(pid, signal.SIGKILL)
    cluster.kill_worker(worker)


def test_a_worker_killed_mid_query_costs_a_retry_not_the_answer(region, cluster, duck) -> None:
    url, _ = region
    worker = cluster.workers[0]
    idle = _executor_cpu(worker)
    statement = _submit(url, SLOW)

    def working() -> bool:  # its tasks run on the worker's executor (the query takes several seconds of it)
        assert http("GET", f"{url}/v1/statements/{statement}").json()["state"] in ("queued", "running")
        return _executor_cpu(worker) - idle >= 1.0

    eventually(working, 120, "a CPU second of the query's tasks on worker 0's executor")
    assert http("GET", f"{url}/v1/statements/{statement}").json()["state"] == "running"
    _fail_host(cluster, worker)
    doc = _ended(url, statement, 300)
    assert doc["state"] == "succeeded", doc
    assert [tuple(r) for r in doc["rows"]] == duck.sql(SLOW).fetchall()
    cluster.add_worker(cores=1, memory="1g")  # the cluster whole again: an executor on each worker
    eventually(lambda: Client(url).cluster()["spark"]["executors"] == 2, 120, "an executor on the new worker")


def test_with_no_worker_alive_a_query_says_so_and_fails_retryably(region, cluster, duck) -> None:
    url, _ = region
    for worker in cluster.workers:
        if worker.poll() is None:
            _fail_host(cluster, worker)
    eventually(lambda: Client(url).cluster()["spark"]["executors"] == 0, 60, "the driver seeing its executors go")
    statement = _submit(url, query(3))
    waiting = eventually(
        lambda: http("GET", f"{url}/v1/statements/{statement}?wait=1").json().get("waiting_for"),
        EXECUTOR_WAIT,
        "the statement saying what it waits for",
    )
    assert "Spark executors: none for" in waiting
    with ThreadPoolExecutor(1) as pool:  # meanwhile a client that waits for its answer: the same bound, not twice
        waited = pool.submit(http, "POST", f"{url}/v1/statements", {"sql": query(3), "wait": 60}, timeout=70)
        doc = _ended(url, statement, EXECUTOR_WAIT + 60)
        reply = waited.result()
    assert doc["state"] == "failed" and doc["error"]["code"] == "spark_no_executors", json.dumps(doc)[:3000]
    assert f"no executor for {EXECUTOR_WAIT} s" in doc["error"]["message"]  # the configured bound
    assert reply.status == 503 and reply.json()["error"]["code"] == "spark_no_executors"
    assert "Retry-After" in reply.headers

    cluster.add_worker(cores=1, memory="1g")  # a worker back: once its executor is up, the next query runs
    eventually(lambda: Client(url).cluster()["spark"]["executors"] >= 1, 120, "an executor on the worker back")
    got = rows(Client(url).execute(query(3), wait=60).table)
    assert rows_match(got, duck.sql(query(3)).fetchall(), ordered=True)
