"""The SQL engine of a region: parse and check, plan (the regular plan), execute on the storage
nodes or on Spark, and answer with an Arrow table."""

from __future__ import annotations

import contextlib
import re
import threading
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import pyarrow as pa

from gateway.config import SparkFactory, SparkSettings
from gateway.sql.catalog import RegionCatalog
from gateway.sql.errors import (
    DeviceOutOfMemory,
    ExecutionError,
    InvalidQuery,
    NodeFull,
    NodeUnavailable,
    NumericOutOfRange,
    OutOfMemory,
    PlannerError,
    QueryCancelled,
    ResultTooLarge,
    SparkUnavailable,
    SqlError,
    TooComplex,
)
from gateway.sql.exchange import Handover
from gateway.sql.executor_watch import executor_count
from gateway.sql.local import CANCELLED, run_local
from gateway.sql.parse import CheckedQuery, prepare
from gateway.sql.plan import Plan
from gateway.sql.profile import PROFILE, Profile
from gateway.sql.result_types import stable_types, type_rules
from gateway.sql.run import run_on_spark, staged_plan
from gateway.sql.staged import Staged
from storage import OUT_OF_MEMORY, DiskFullError, NodeError, StorageError, allow_deep_expressions


@dataclass
class Result:
    table: pa.Table
    plan: Plan
    seconds: float

    @property
    def engine(self) -> str:
        return self.plan.engine


class Engine:
    """SQL over one region: its storage nodes (name -> URL) and its Spark session, which
    whoever composes the region hands in as `spark`, a factory called when a query needs it."""

    def __init__(self, nodes: dict[str, str], settings: SparkSettings | None = None, spark: SparkFactory | None = None):
        allow_deep_expressions()
        self.catalog = RegionCatalog(nodes)
        self.spark_settings = settings or SparkSettings()
        self._spark_factory = spark
        self._session: Any = None  # the session once a query asked for it: what `cancel` reaches
        self._running: dict[str, threading.Event] = {}
        self._lock = threading.Lock()

    @property
    def spark(self) -> Any:
        if self._spark_factory is None:
            raise ExecutionError("this engine was given no Spark session, and the query needs Spark")
        self._session = self._spark_factory()
        return self._session

    def prepare(
        self, sql: str, params: dict[str, Any] | None = None, catalog: RegionCatalog | None = None
    ) -> CheckedQuery:
        return prepare(sql, (catalog or self.catalog).sql_schema(), params)

    def plan(self, sql: str) -> Plan:
        """The plan of `sql` as it will run; one-table subqueries and semi-join keys are evaluated
        on the nodes."""
        snapshot = self.catalog.snapshot()
        try:
            return self._plan(self.prepare(sql, catalog=snapshot), snapshot, copy=False)
        finally:
            snapshot.close()

    def _plan(self, query: CheckedQuery, catalog: RegionCatalog, copy: bool) -> Plan:
        return staged_plan(query, catalog, self.handover, copy)

    @property
    def handover(self) -> Handover:
        settings = self.spark_settings
        return Handover(settings.exchange_mode(), settings.inline)

    def execute(self, sql: str, query_id: str | None = None) -> Result:
        """Parse, plan and run one query, on one version of each table it reads."""
        snapshot = self.catalog.snapshot()
        try:  # a query of its own: planned as it is
            return self._run(self.prepare(sql, catalog=snapshot), query_id, None, snapshot, copy=False)
        finally:
            snapshot.close()

    def run(
        self,
        query: CheckedQuery,
        query_id: str | None = None,
        granted: list[str] | None = None,
        catalog: RegionCatalog | None = None,
        max_rows: int | None = None,
        waiting: Callable[[str], None] | None = None,
    ) -> Result:
        """Run a prepared query (left as it is: it may be run again); `query_id` lets `cancel` stop
        it from another thread, `granted` names the nodes whose slots it holds (replicated tables
        are read there), `catalog` is the snapshot it was prepared on (default: the region's now);
        with `max_rows`, the query stops one row past them; `waiting` hears what a query on a
        Spark cluster waits for (executors), and "" when it waits no more."""
        capped = query if max_rows is None else query.capped(max_rows + 1)  # a copy when it changed
        return self._run(capped, query_id, granted, catalog or self.catalog, capped is query, waiting)

    def _run(
        self,
        query: CheckedQuery,
        query_id: str | None,
        granted: list[str] | None,
        catalog: RegionCatalog,
        copy: bool,
        waiting: Callable[[str], None] | None = None,
    ) -> Result:
        started = time.perf_counter()
        query_id = query_id or uuid.uuid4().hex
        catalog = catalog.restricted(granted) if granted else catalog
        cancelled = threading.Event()
        with self._lock:
            self._running[query_id] = cancelled
        token = CANCELLED.set(cancelled)
        profile = Profile() if query.explain == "analyze" else None
        profiled = PROFILE.set(profile)
        rules = type_rules(query.tree)  # of the query as written: planning may rewrite it
        try:
            plan = self._plan(query, catalog, copy)
            if query.explain == "plan":
                return Result(pa.table({"plan": plan.explain()}), plan, time.perf_counter() - started)
            if plan.engine == "spark":
                table = self._run_spark(plan, query_id, catalog, waiting)
            else:
                table = run_local(plan, catalog)
        except SqlError:
            raise
        except Exception as e:
            if cancelled.is_set():
                raise QueryCancelled("query cancelled") from e
            raise _execution_error(e) from e
        finally:
            CANCELLED.reset(token)
            PROFILE.reset(profiled)
            with self._lock:  # a run of the same query started since (a retry) keeps its own entry
                if self._running.get(query_id) is cancelled:
                    del self._running[query_id]
        if profile is not None:  # EXPLAIN ANALYZE: the plan as it ran, and what each part did
            seconds = time.perf_counter() - started
            return Result(pa.table({"plan": plan.explain() + profile.lines(table.num_rows, seconds)}), plan, seconds)
        table = stable_types(table, rules).rename_columns(query.names)
        return Result(table, plan, time.perf_counter() - started)

    def _run_spark(
        self, plan: Staged, query_id: str, catalog: RegionCatalog, waiting: Callable[[str], None] | None
    ) -> pa.Table:
        """Spark runs the joins over the sub-queries (the Spark session starts with the first); on
        a cluster, no executor for `executor_wait` seconds fails the query."""
        settings = self.spark_settings
        wait = None if settings.local else settings.executor_wait
        return run_on_spark(plan, self.spark, catalog, self.handover, query_id, settings.exchange_dir, wait, waiting)

    def spark_state(self) -> str:
        """The region's Spark as readiness probes see it: ``not started``, ``running``, ``down``
        (or ``none`` when the engine has no Spark)."""
        if self._spark_factory is None:
            return "none"
        state = getattr(self._spark_factory, "state", None)  # a plain callable says nothing
        return state() if callable(state) else "running" if self._session is not None else "not started"

    def executors(self) -> int | None:
        """A cluster's executors of the running session (None: no session, or it is down)."""
        if self._session is None or self.spark_state() != "running":
            return None
        with contextlib.suppress(Exception):  # the JVM went away meanwhile
            return executor_count(self._session)
        return None

    def cancel(self, query_id: str) -> bool:
        """Stop a running query: its scans end at the next batch, its Spark jobs are cancelled.
        True if it was running."""
        with self._lock:
            cancelled = self._running.get(query_id)
        if cancelled is None:
            return False
        cancelled.set()
        if self._session is not None:
            with contextlib.suppress(Exception):  # a session whose JVM died has no jobs left to cancel
                self._session.sparkContext.cancelJobGroup(query_id)
        return True


MAX_RESULT_SIZE = "spark.driver.maxResultSize"  # named by Spark's error for a result past it
USER_ERROR_CLASSES = ("21", "22", "42")  # SQLSTATE classes: cardinality, data, syntax or access rule
# a node that went away mid-query, or no longer keeps the version the query reads: the same query
# run again reads what is served then
NODE_GONE = ("node_unreachable", "version_gone", "table_not_found")
# a node's error code -> what it tells the user (any other storage error is the service's fault)
NODE_ERRORS: dict[str, Callable[[str], SqlError]] = {
    "invalid_scan": InvalidQuery,  # the scan does not type-check: a string where a number is needed
    "numeric_overflow": lambda message: NumericOutOfRange(  # arithmetic that may pass 64 bits
        f"{message}: the result could pass 64 bits (cast to DOUBLE to compute it approximately)"
    ),
    **dict.fromkeys(NODE_GONE, lambda message: NodeUnavailable(f"{message}; retry shortly")),
    OUT_OF_MEMORY: OutOfMemory,
    DeviceOutOfMemory.code: DeviceOutOfMemory,
    DiskFullError.code: NodeFull,
}


def _execution_error(error: Exception) -> SqlError:
    """What a failure while running tells the user: a node refusing a scan over the query's types
    (a string where a number is needed) and Spark failing on the query's data or types are the
    query's fault (400); anything else is the service's (500)."""
    if isinstance(error, NodeError) and error.code in NODE_ERRORS:
        return NODE_ERRORS[error.code](str(error))
    if isinstance(error, StorageError):
        return ExecutionError(f"{error.code}: {error}")
    if _spark_gone(error):
        return SparkUnavailable("Spark stopped answering while the query ran (it is restarted for the next one)")
    text = str(error).strip()
    if MAX_RESULT_SIZE in text:
        return ResultTooLarge(
            f"the result is larger than Spark may collect ({MAX_RESULT_SIZE}): select fewer rows or columns"
        )
    message = f"query failed: {text.splitlines()[0] if text else type(error).__name__}"
    sql_state = getattr(error, "getSqlState", None)  # Spark's errors carry one (pyspark is imported lazily)
    sqlstate = sql_state() if callable(sql_state) else None
    if sqlstate == NumericOutOfRange.sqlstate:
        return NumericOutOfRange(message)
    if sqlstate and sqlstate.startswith("54"):  # program limit exceeded: too complex for Spark's parser
        return TooComplex(message)
    if sqlstate and sqlstate.startswith(USER_ERROR_CLASSES):
        if _planners_fault(error, text):
            return PlannerError(f"the SQL written for Spark failed, not the query: {message} (please report it)")
        return InvalidQuery(message, sqlstate)
    return ExecutionError(message)


# Spark's analysis errors that a checked query cannot cause: every column it names was resolved
# against the catalog before planning
_UNRESOLVABLE = ("UNRESOLVED_COLUMN", "AMBIGUOUS_REFERENCE", "UNRESOLVED_ATTRIBUTE")
_GENERATED_NAME = re.compile(r"\b__[eagk]\d+\b")  # the columns the planner computes in sub-queries


def _planners_fault(error: Exception, text: str) -> bool:
    """Whether a Spark analysis error is of the SQL the planner wrote rather than of the user's
    query: a name a checked query cannot leave unresolved, or one of the planner's own names."""
    condition = getattr(error, "getCondition", None) or getattr(error, "getErrorClass", None)
    name = condition() if callable(condition) else ""
    return bool(name and name.startswith(_UNRESOLVABLE)) or bool(_GENERATED_NAME.search(text.splitlines()[0]))


def _spark_gone(error: Exception) -> bool:
    """Whether the error is the driver JVM going away (py4j's connection to it broken), not a
    failure of the query in Spark (a Java exception, which py4j wraps in Py4JJavaError)."""
    names = {cls.__name__ for cls in type(error).__mro__}
    if "Py4JJavaError" in names:
        return False
    return "Py4JError" in names or isinstance(error, ConnectionError)
