"""The SQL engine of a region: parse and check, plan (the regular plan), execute on the storage
nodes or on Spark, and answer with an Arrow table."""

from __future__ import annotations

import threading
import time
import uuid
from dataclasses import dataclass
from typing import Any

import pyarrow as pa

from gateway.config import SparkFactory, SparkSettings
from gateway.sql.catalog import RegionCatalog
from gateway.sql.eliminate import answer_exists, drop_finished_joins
from gateway.sql.errors import ExecutionError, QueryCancelled, QueryFailed, SqlError
from gateway.sql.exchange import FETCH_ROWS, Exchange, describe
from gateway.sql.local import CANCELLED, run_local
from gateway.sql.parse import Statement, prepare
from gateway.sql.plan import Plan, Planner
from gateway.sql.reduce import reduce_and_fetch, substitute_subqueries
from storage.errors import StorageError
from storage.node_client import NodeError


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

    def prepare(self, sql: str, params: dict[str, Any] | None = None) -> Statement:
        return prepare(sql, self.catalog.sql_schema(), params)

    def plan(self, sql: str) -> Plan:
        """The plan of `sql`; one-table subqueries and semi-join keys are evaluated on the nodes."""
        return self._plan(self.prepare(sql), self.catalog)

    def _plan(self, statement: Statement, catalog: RegionCatalog) -> Plan:
        planner = Planner(catalog)
        notes = []
        if statement.tree.args.get("from_") is not None and planner._local(statement) is None:
            notes = substitute_subqueries(statement, planner, catalog)
        plan = planner.plan(statement)
        plan.notes = notes
        if plan.engine == "spark":
            mode = self.spark_settings.exchange_mode()
            plan.inputs = reduce_and_fetch(plan, catalog, FETCH_ROWS[mode])
            answer_exists(plan)
            drop_finished_joins(plan)
            plan.deliveries = {
                s.index: plan.dropped.get(s.index) or describe(mode, s, plan.inputs.get(s.index)) for s in plan.scans
            }
        return plan

    def execute(self, sql: str, query_id: str | None = None) -> Result:
        """Parse, plan and run one query."""
        return self.run(self.prepare(sql), query_id)

    def run(self, statement: Statement, query_id: str | None = None, granted: list[str] | None = None) -> Result:
        """Run a prepared query; `query_id` lets `cancel` stop it from another thread, `granted`
        names the nodes whose slots it holds (replicated tables are read there)."""
        started = time.perf_counter()
        query_id = query_id or uuid.uuid4().hex
        catalog = self.catalog.restricted(granted) if granted else self.catalog
        cancelled = threading.Event()
        with self._lock:
            self._running[query_id] = cancelled
        token = CANCELLED.set(cancelled)
        try:
            plan = self._plan(statement, catalog)
            if statement.explain:
                return Result(pa.table({"plan": plan.explain()}), plan, time.perf_counter() - started)
            table = self._run_spark(plan, query_id, catalog) if plan.engine == "spark" else run_local(plan, catalog)
        except SqlError:
            raise
        except Exception as e:
            if cancelled.is_set():
                raise QueryCancelled("query cancelled") from e
            raise _execution_error(e) from e
        finally:
            CANCELLED.reset(token)
            with self._lock:
                self._running.pop(query_id, None)
        table = table.rename_columns(statement.names)
        return Result(table, plan, time.perf_counter() - started)

    def _run_spark(self, plan: Plan, query_id: str, catalog: RegionCatalog) -> pa.Table:
        """Spark runs the joins over the sub-queries, handed over by an `Exchange`."""
        spark = self.spark
        spark.sparkContext.setJobGroup(query_id, plan.statement.text[:200], interruptOnCancel=True)
        settings = self.spark_settings
        exchange = Exchange(spark, catalog, settings.exchange_mode(), settings.exchange_dir)
        try:
            return spark.sql(exchange.spark_sql(plan)).toArrow()
        finally:
            exchange.close()

    def cancel(self, query_id: str) -> bool:
        """Stop a running query: its scans end at the next batch, its Spark jobs are cancelled.
        True if it was running."""
        with self._lock:
            cancelled = self._running.get(query_id)
        if cancelled is None:
            return False
        cancelled.set()
        if self._session is not None:
            self._session.sparkContext.cancelJobGroup(query_id)
        return True


USER_ERROR_CLASSES = ("21", "22", "42")  # SQLSTATE classes: cardinality, data, syntax or access rule


def _execution_error(error: Exception) -> SqlError:
    """What a failure while running tells the user: a node refusing a scan over the query's types
    (a string where a number is needed) and Spark failing on the query's data or types are the
    query's fault (400); anything else is the service's (500)."""
    if isinstance(error, NodeError) and error.code == "invalid_scan":
        return QueryFailed(str(error))
    if isinstance(error, StorageError):
        return ExecutionError(f"{error.code}: {error}")
    text = str(error).strip()
    message = f"query failed: {text.splitlines()[0] if text else type(error).__name__}"
    sql_state = getattr(error, "getSqlState", None)  # Spark's errors carry one (pyspark is imported lazily)
    sqlstate = sql_state() if callable(sql_state) else None
    if sqlstate and sqlstate.startswith(USER_ERROR_CLASSES):
        return QueryFailed(message, sqlstate)
    return ExecutionError(message)
