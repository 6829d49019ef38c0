"""The SQL engine of a region: parse and check, plan (the regular plan), execute on the storage
nodes or on Spark, and answer with an Arrow table."""

from __future__ import annotations

import json
import threading
import time
import uuid
from dataclasses import dataclass

import pyarrow as pa

from gateway.sql.catalog import RegionCatalog
from gateway.sql.errors import ExecutionError, SqlError
from gateway.sql.local import run_local
from gateway.sql.parse import Statement, prepare
from gateway.sql.plan import Plan, Planner, Scan
from gateway.sql.reduce import reduce_and_fetch, substitute_subqueries
from regions.spark_session import SparkSettings, spark_session
from storage.errors import StorageError
from storage.scan import plan_scan


@dataclass
class Result:
    table: pa.Table
    plan: Plan
    seconds: float

    @property
    def engine(self) -> str:
        return self.plan.engine


class Engine:
    """SQL over one region: its storage nodes (name -> URL) and its Spark session."""

    def __init__(self, nodes: dict[str, str], spark: SparkSettings | None = None, region: str = "default"):
        self.catalog = RegionCatalog(nodes)
        self.planner = Planner(self.catalog)
        self.spark_settings = spark or SparkSettings()
        self.region = region
        self._running: dict[str, object] = {}
        self._lock = threading.Lock()

    @property
    def spark(self):
        return spark_session(self.spark_settings, self.region)

    def prepare(self, sql: str) -> Statement:
        return prepare(sql, self.catalog.sql_schema())

    def plan(self, sql: str) -> Plan:
        """The plan of `sql`; one-table subqueries and semi-join keys are evaluated on the nodes."""
        return self._plan(self.prepare(sql))

    def _plan(self, statement: Statement) -> Plan:
        notes = []
        if statement.tree.args.get("from_") is not None and self.planner._local(statement) is None:
            notes = substitute_subqueries(statement, self.planner, self.catalog)
        plan = self.planner.plan(statement)
        plan.notes = notes
        if plan.engine == "spark":
            plan.inputs = reduce_and_fetch(plan, self.catalog)
        return plan

    def execute(self, sql: str, query_id: str | None = None) -> Result:
        """Run one query; `query_id` lets `cancel` stop its Spark jobs from another thread."""
        started = time.perf_counter()
        statement = self.prepare(sql)
        plan = self._plan(statement)
        if statement.explain:
            table = pa.table({"plan": plan.explain()})
            return Result(table, plan, time.perf_counter() - started)
        try:
            table = (
                self._run_spark(plan, query_id or uuid.uuid4().hex)
                if plan.engine == "spark"
                else run_local(plan, self.catalog)
            )
        except SqlError:
            raise
        except StorageError as e:
            raise ExecutionError(f"{e.code}: {e}") from e
        except Exception as e:
            raise ExecutionError(_spark_message(e)) from e
        table = table.rename_columns(statement.names)
        return Result(table, plan, time.perf_counter() - started)

    def _run_spark(self, plan: Plan, query_id: str) -> pa.Table:
        """Spark runs the joins; small sub-queries are handed over as local relations (Spark then
        knows their size and broadcasts them), the others stream through the "cxg" data source."""
        spark = self.spark
        context = spark.sparkContext
        context.setJobGroup(query_id, plan.statement.text[:200], interruptOnCancel=True)
        fetched = plan.inputs
        views = []
        try:
            for scan in plan.scans:
                if scan.index in fetched:  # one chunk: PySpark loses rows after an empty first chunk
                    frame = spark.createDataFrame(fetched[scan.index].combine_chunks())
                else:
                    frame = self._stream(scan, context.defaultParallelism)
                frame.createOrReplaceTempView(scan.view)
                views.append(scan.view)
            with self._lock:
                self._running[query_id] = context
            return spark.sql(plan.spark_sql).toArrow()
        finally:
            with self._lock:
                self._running.pop(query_id, None)
            for view in views:
                spark.catalog.dropTempView(view)

    def _stream(self, scan: Scan, parallelism: int):
        from storage.spark_source import spark_schema

        request = scan.request()
        schema = spark_schema(plan_scan(request, scan.info.schema).schema)
        return (
            self.spark.read.format("cxg")
            .schema(schema)
            .option("nodes", ",".join(self.catalog.urls(scan.info)))
            .option("table", scan.table)
            .option("request", json.dumps(request))
            .option("partitions", str(parallelism))
            .load()
        )

    def cancel(self, query_id: str) -> bool:
        """Stop the Spark jobs of a running query; True if it was running on Spark."""
        with self._lock:
            context = self._running.get(query_id)
        if context is None:
            return False
        context.cancelJobGroup(query_id)
        return True


def _spark_message(error: Exception) -> str:
    text = str(error)
    first = text.strip().splitlines()[0] if text.strip() else type(error).__name__
    return f"query failed: {first}"
