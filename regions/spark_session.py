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
from collections.abc import Callable
from functools import partial
from pathlib import Path
from typing import Any

from gateway import SparkSettings
from storage import CxgDataSource

_SESSIONS: dict[str, Any] = {}
_LOCK = threading.Lock()


LOG_CONFIG = Path(__file__).with_name("log4j2.properties")  # errors only: no WARN lines in a command's output


def spark_options(settings: SparkSettings) -> dict[str, str]:
    """The Spark configuration of a region's session."""
    cores = os.cpu_count() or 2
    if settings.master.startswith("local[") and settings.master != "local[*]":
        cores = int(settings.master[6:-1])
    return {
        "spark.master": settings.master,
        "spark.app.name": settings.app_name,
        "spark.driver.memory": settings.driver_memory,
        "spark.driver.extraJavaOptions": f"-Dlog4j2.configurationFile={LOG_CONFIG}",
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
        "spark.ui.enabled": "false",
        "spark.ui.showConsoleProgress": "false",
        **settings.conf,
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
        for key, value in spark_options(settings).items():
            builder = builder.config(key, value)
        session = builder.getOrCreate()
        session.sparkContext.setLogLevel("ERROR")
        for name in ("SQLQueryContextLogger", "DataFrameQueryContextLogger"):  # errors reach users as SqlErrors
            logging.getLogger(name).setLevel(logging.CRITICAL)
        logging.getLogger("py4j").setLevel(logging.WARNING)  # not a line per connection closed
        session.dataSource.register(CxgDataSource)
        _SESSIONS[region] = session
        return session


def session_factory(settings: SparkSettings, region: str = "default") -> Callable[[], Any]:
    """What a region's composer hands its engine: a callable returning the region's session,
    started on the first call (so a gateway whose queries never join never starts Spark)."""
    return partial(spark_session, settings, region)


def stop_all() -> None:
    with _LOCK:
        for session in _SESSIONS.values():
            session.stop()
        _SESSIONS.clear()
