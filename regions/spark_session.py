"""The region's SparkSession: embedded (local[*]) by default, or any cluster via spark.master.

One session per region and process. Arrow is on, the Python workers use this interpreter (so
they find pyarrow and the project), queries share the session under the FAIR scheduler, small
join sides are broadcast (from memory pages sized for small inputs), and the project's data
source is registered as format "cxg".
"""

from __future__ import annotations

import logging
import os
import sys
import threading
from dataclasses import dataclass, field
from typing import Any

_SESSIONS: dict[str, Any] = {}
_LOCK = threading.Lock()


@dataclass(frozen=True)
class SparkSettings:
    master: str = "local[*]"
    app_name: str = "cxg"
    driver_memory: str = "4g"
    shuffle_partitions: int | None = None  # default: the cores of a local master
    broadcast_threshold: str = "10MB"  # Spark's default; small sub-queries arrive as sized local relations
    adaptive: bool = False  # adaptive query execution: adds stages that cost more than they save here
    conf: dict[str, str] = field(default_factory=dict)  # any other spark.* option
    exchange: str = "auto"  # how sub-queries reach Spark: files, source, or auto (files with a local master)
    exchange_dir: str | None = None  # where "files" writes (default: the temp dir); shared storage for a cluster

    def exchange_mode(self) -> str:
        if self.exchange == "auto":
            return "files" if self.master.startswith("local") else "source"
        return self.exchange

    def options(self) -> dict[str, str]:
        cores = os.cpu_count() or 2
        if self.master.startswith("local[") and self.master != "local[*]":
            cores = int(self.master[6:-1])
        return {
            "spark.master": self.master,
            "spark.app.name": self.app_name,
            "spark.driver.memory": self.driver_memory,
            "spark.sql.execution.arrow.pyspark.enabled": "true",
            "spark.sql.python.filterPushdown.enabled": "true",
            "spark.scheduler.mode": "FAIR",
            "spark.sql.shuffle.partitions": str(self.shuffle_partitions or cores),
            "spark.sql.autoBroadcastJoinThreshold": self.broadcast_threshold,
            "spark.sql.adaptive.enabled": str(self.adaptive).lower(),
            "spark.sql.session.timeZone": "UTC",
            # memory pages of 1 MB, not up to 64 MB: every broadcast hash table of a small join
            # side allocated and zeroed a whole page (Q8 at SF 1: Spark 0.67 -> 0.43 s, median of 15)
            "spark.buffer.pageSize": "1m",
            "spark.broadcast.blockSize": "512k",
            # a file of a few MB is split between tasks (by row groups), not read by one: Spark
            # counts 4 MB per file opened before splitting (TPC-H SF 1: about 3% faster, plain Spark too)
            "spark.sql.files.openCostInBytes": "1m",
            "spark.ui.enabled": "false",
            "spark.ui.showConsoleProgress": "false",
            **self.conf,
        }


def spark_session(settings: SparkSettings | None = None, region: str = "default"):
    """The region's session, started on first use."""
    settings = settings or SparkSettings()
    with _LOCK:
        if region in _SESSIONS:
            return _SESSIONS[region]
        os.environ["PYSPARK_PYTHON"] = sys.executable
        os.environ["PYSPARK_DRIVER_PYTHON"] = sys.executable
        from pyspark.sql import SparkSession

        builder = SparkSession.builder
        for key, value in settings.options().items():
            builder = builder.config(key, value)
        session = builder.getOrCreate()
        session.sparkContext.setLogLevel("ERROR")
        for name in ("SQLQueryContextLogger", "DataFrameQueryContextLogger"):  # errors reach users as SqlErrors
            logging.getLogger(name).setLevel(logging.CRITICAL)
        from storage.spark_source import CxgDataSource

        session.dataSource.register(CxgDataSource)
        _SESSIONS[region] = session
        return session


def active_session(region: str = "default"):
    """The region's session if it has been started, else None (never starts one)."""
    with _LOCK:
        return _SESSIONS.get(region)


def stop_all() -> None:
    with _LOCK:
        for session in _SESSIONS.values():
            session.stop()
        _SESSIONS.clear()
