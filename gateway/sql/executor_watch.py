"""Whether a Spark cluster gives a query executors. A cluster with no worker alive, or whose
cores other applications hold, accepts the query's jobs and runs none of their tasks: Spark
waits for resources without end (its warning goes to the driver's log only). While a query's
jobs run on a cluster, `ExecutorWatch` counts the application's executors; with none, the
query's state says so, and after `SparkSettings.executor_wait` seconds without one its jobs are
cancelled and it fails with `spark_no_executors` (503, retry)."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Any

from gateway.sql.errors import SparkUnavailable

POLL_S = 0.5  # seconds between two counts of the executors


class SparkNoExecutors(SparkUnavailable):
    """The region's Spark cluster gave the query no executor within the configured wait."""

    code = "spark_no_executors"
    retry_after = 5


def executor_count(spark: Any) -> int:
    """Executors the application has now (the driver, which the status tracker lists too, is not
    one)."""
    return max(0, len(spark.sparkContext._jsc.sc().statusTracker().getExecutorInfos()) - 1)


class ExecutorWatch:
    """Watch the executors while the job group `job` runs (a context manager): `waiting` is told
    what the query waits for ("" once executors are back); past `bound` seconds with none, the
    group is cancelled (again at every count, for jobs that start later) and `starved` is set."""

    def __init__(self, spark: Any, job: str, bound: float, waiting: Callable[[str], None] | None = None):
        self.spark = spark
        self.job = job
        self.bound = bound
        self.waiting = waiting or (lambda _: None)
        self.starved = False
        self._done = threading.Event()
        self._thread = threading.Thread(target=self._watch, daemon=True, name=f"executors-{job}")

    def __enter__(self) -> ExecutorWatch:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._done.set()
        self._thread.join()
        self.waiting("")

    def error(self) -> SparkNoExecutors:
        master = self.spark.sparkContext.master
        return SparkNoExecutors(
            f"Spark ({master}) gave the query no executor for {self.bound:g} s: no worker is alive, "
            "or other applications hold the cluster's cores; retry later"
        )

    def _watch(self) -> None:
        since: float | None = None
        while not self._done.wait(POLL_S):
            try:
                count = executor_count(self.spark)
            except Exception:  # the JVM is gone: the query fails on its own with spark_unavailable
                return
            if count:
                if since is not None:
                    since = None
                    self.waiting("")
                continue
            now = time.monotonic()
            since = now if since is None else since
            waited = now - since
            self.waiting(f"Spark executors: none for {waited:.0f} s (the query fails after {self.bound:g} s)")
            if waited >= self.bound:
                self.starved = True
                self.spark.sparkContext.cancelJobGroup(self.job)
