"""The region's SparkSession: embedded (local[*]) by default, or any cluster via spark.master.

One session per region and process. Arrow is on, the Python workers use this interpreter (so
they find pyarrow and the project; a cluster's executors get the project as a zip, see
`regions.executor_package`, and the Python `spark.executor_python` names), queries share the
session under the FAIR scheduler, small join sides are broadcast (from memory pages sized for
small inputs), and the project's data source is registered as format "cxg".

A session whose JVM has died (killed, out of memory) is noticed at the next call and replaced by a
new one: the queries that were running on it fail with a retryable error (the engine's
`spark_unavailable`), later ones get the new session.
"""

from __future__ import annotations

import contextlib
import logging
import os
import re
import socket
import sys
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pyspark import SparkContext
from pyspark.sql import SparkSession, SQLContext

from gateway import SparkSettings
from regions.executor_package import project_zip
from storage import ConfigError, CxgDataSource

_SESSIONS: dict[str, Any] = {}
_LOCK = threading.Lock()


APP_NAME = "cxg"
LOG_CONFIG = Path(__file__).with_name("log4j2.properties")  # errors only: no WARN lines in a command's output
JVM_THREAD_STACK = "32m"  # Spark parses 300 nested function calls with the default 1 MiB; 800 with this
# spark.driver_memory "auto": this share of the machine's memory (the driver of a local master runs
# the executors too); the rest is left to the nodes, whose blocks live in the page cache, and to the
# system. At least 1 GiB, at most 64.
DRIVER_SHARE = 0.4


def machine_memory() -> int:
    """Bytes of memory of this machine (of its cgroup, when that is smaller)."""
    total = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    with contextlib.suppress(OSError, ValueError):
        limit = Path("/sys/fs/cgroup/memory.max").read_text().strip()
        if limit != "max":
            total = min(total, int(limit))
    return total


def driver_memory(setting: str) -> str:
    """The driver's heap: as configured, or for "auto" `DRIVER_SHARE` of the machine's memory."""
    if setting != "auto":
        return setting
    gib = machine_memory() * DRIVER_SHARE / 2**30
    return f"{max(1, min(64, int(gib)))}g"


_LOCAL = re.compile(r"local(?:\[(\*|\d+)(,\s*\d+)?\])?")


def local_master(settings: SparkSettings) -> tuple[str, int | None]:
    """The master URL the session gets and, for a local master, its cores. A local master gets
    `slots_per_core` task slots per core while each stage of a query still has one task per core
    (spark.default.parallelism): Spark never preempts a running task, so without spare slots a
    query whose tasks run for minutes (a nested-loop join) holds every core and the queries after
    it wait for its tasks to end; with them, their tasks start at once (the FAIR scheduler gives a
    free slot to the pool running fewest) and the system shares the cores between the threads."""
    match = _LOCAL.fullmatch(settings.master.strip())
    if match is None:
        return settings.master, None
    if match[1] is None:
        cores = 1  # "local": one core
    elif match[1] == "*":
        cores = os.cpu_count() or 2
    else:
        cores = int(match[1])
    return f"local[{cores * max(1, settings.slots_per_core)}{match[2] or ''}]", cores


def cluster_options(settings: SparkSettings) -> dict[str, str]:
    """What a cluster's executors need from the driver: the project (`project_zip` on
    spark.submit.pyFiles, after any the configuration names) and the Python to run it with."""
    shipped = [f for f in settings.conf.get("spark.submit.pyFiles", "").split(",") if f]
    return {
        "spark.pyspark.python": settings.executor_python or sys.executable,
        "spark.pyspark.driver.python": sys.executable,
        **settings.conf,  # what the configuration names wins
        "spark.submit.pyFiles": ",".join([*shipped, str(project_zip())]),
    }


def log_level(settings: SparkSettings) -> str:
    """The driver's log level: ``auto`` is ERROR for a local master (no WARN lines in a command's
    output) and WARN for a cluster (where Spark says that executors are lost or not granted)."""
    if settings.log_level.lower() != "auto":
        return settings.log_level.upper()
    return "ERROR" if settings.local else "WARN"


def spark_options(settings: SparkSettings) -> dict[str, str]:
    """The Spark configuration of a region's session."""
    master, local_cores = local_master(settings)
    cores = local_cores or os.cpu_count() or 2
    parallelism = {"spark.default.parallelism": str(cores)} if local_cores else {}
    cluster = {} if settings.local else cluster_options(settings)
    return {
        "spark.master": master,
        **parallelism,
        "spark.app.name": APP_NAME,
        "spark.driver.memory": driver_memory(settings.driver_memory),
        # thread stacks for expressions MAX_EXPRESSION_DEPTH deep (Spark's parser recurses per level)
        "spark.driver.extraJavaOptions": f"-Dlog4j2.configurationFile={LOG_CONFIG} -Xss{JVM_THREAD_STACK}",
        "spark.executor.extraJavaOptions": f"-Xss{JVM_THREAD_STACK}",
        "spark.sql.execution.arrow.pyspark.enabled": "true",
        "spark.sql.python.filterPushdown.enabled": "true",
        "spark.scheduler.mode": "FAIR",
        "spark.sql.shuffle.partitions": str(settings.shuffle_partitions or cores),
        "spark.sql.autoBroadcastJoinThreshold": settings.broadcast_threshold,
        "spark.sql.adaptive.enabled": str(settings.adaptive).lower(),
        "spark.sql.session.timeZone": "UTC",
        # memory pages of 1 MB, not up to 64 MB: every broadcast hash table of a small join
        # side allocated and zeroed a whole page
        "spark.buffer.pageSize": "1m",
        "spark.broadcast.blockSize": "512k",
        # a file of a few MB is split between tasks (by row groups), not read by one: Spark
        # counts 4 MB per file opened before splitting
        "spark.sql.files.openCostInBytes": "1m",
        # generated classes kept for reuse: the default 100 is fewer than TPC-H's 22 queries
        # compile (312), so each round of them compiled every class again
        "spark.sql.codegen.cache.maxEntries": "2000",
        "spark.ui.enabled": "false",
        "spark.ui.showConsoleProgress": "false",
        **settings.conf,
        **cluster,
    }


def check_master(settings: SparkSettings, timeout: float = 5.0) -> None:
    """ConfigError when a standalone master (spark://host:port, or several for high availability)
    accepts no connection at any of its addresses: said at start, not at the first join query."""
    if not settings.master.startswith("spark://"):
        return
    problems = []
    for address in settings.master.removeprefix("spark://").split(","):
        host, _, port = address.strip().rpartition(":")
        try:
            with socket.create_connection((host, int(port)), timeout=timeout):
                return
        except (OSError, ValueError) as e:
            problems.append(f"{address}: {e}")
    reasons = "; ".join(problems)
    raise ConfigError(f"spark.master {settings.master} is unreachable ({reasons}): start it or fix the address")


def spark_alive(session: Any) -> bool:
    """Whether the session's driver JVM is running (a JVM killed or dead of an out-of-memory error
    is not; nor is a stopped session)."""
    context = session.sparkContext
    process = getattr(context._gateway, "proc", None)
    return context._jsc is not None and (process is None or process.poll() is None)


def _forget(session: Any) -> None:
    """Drop a session whose JVM died, so that the next one starts a new JVM: PySpark keeps the
    gateway to the old one in class attributes, and its own `stop` needs the JVM alive."""
    context = session.sparkContext
    gateway = context._gateway
    with contextlib.suppress(Exception):
        context.stop()
    with contextlib.suppress(Exception):
        gateway.shutdown()
    process = getattr(gateway, "proc", None)
    if process is not None:
        with contextlib.suppress(Exception):
            process.kill()
        process.wait()  # reaped: no zombie JVM left behind
    SparkContext._gateway = None
    SparkContext._jvm = None
    SparkContext._active_spark_context = None
    SparkSession._instantiatedSession = None
    SparkSession._activeSession = None
    SQLContext._instantiatedContext = None


def spark_session(settings: SparkSettings | None = None, region: str = "default"):
    """The region's session, started on first use, and started again if its JVM died."""
    settings = settings or SparkSettings()
    with _LOCK:
        if region in _SESSIONS:
            if spark_alive(_SESSIONS[region]):
                return _SESSIONS[region]
            logging.getLogger("cxg.spark").warning("Spark's JVM of region %s died: starting a new session", region)
            _forget(_SESSIONS.pop(region))
        os.environ["PYSPARK_PYTHON"] = sys.executable
        os.environ["PYSPARK_DRIVER_PYTHON"] = sys.executable
        builder = SparkSession.builder
        for key, value in spark_options(settings).items():
            builder = builder.config(key, value)
        session = builder.getOrCreate()
        session.sparkContext.setLogLevel(log_level(settings))
        for name in ("SQLQueryContextLogger", "DataFrameQueryContextLogger"):  # errors reach users as SqlErrors
            logging.getLogger(name).setLevel(logging.CRITICAL)
        logging.getLogger("py4j").setLevel(logging.WARNING)  # not a line per connection closed
        session.dataSource.register(CxgDataSource)
        _SESSIONS[region] = session
        return session


@dataclass(frozen=True)
class RegionSpark:
    """What a region's composer hands its engine: called, the region's session, started on the
    first call (so a gateway whose queries never join never starts Spark) and again after its JVM
    died; `state()` says which of these it is in, for readiness probes."""

    settings: SparkSettings
    region: str = "default"

    def __call__(self) -> Any:
        return spark_session(self.settings, self.region)

    def state(self) -> str:
        """``not started``, ``running`` or ``down`` (the JVM died: the next query starts a new one)."""
        session = _SESSIONS.get(self.region)
        if session is None:
            return "not started"
        return "running" if spark_alive(session) else "down"


def session_factory(settings: SparkSettings, region: str = "default") -> RegionSpark:
    """The region's session factory (see `RegionSpark`)."""
    return RegionSpark(settings, region)


def stop_all() -> None:
    with _LOCK:
        for session in _SESSIONS.values():
            session.stop()
        _SESSIONS.clear()
