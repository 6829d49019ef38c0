"""The SQL engine of a region: a query's run phase in four steps, each in a module of its own.

1. check (`gateway.sql.check`): parse, bind, refuse what cannot run, qualify against the catalog;
2. plan (`gateway.sql.planner`): the regular plan, a description that runs nothing;
3. stage (`gateway.sql.stage`): what must run before the final plan (subqueries answered first,
   semi-join key sets), on the nodes;
4. execute (`gateway.sql.execute`): on the nodes, or on Spark.

The gateway checks and plans a query before admission, so that admission knows what it needs; the
engine then answers the plan (`answer`: stage and execute) while the query holds its slots. EXPLAIN
is answered from the plan alone, so it runs nothing; EXPLAIN ANALYZE runs the query. Failures are
raised as they come: the gateway's `ApiError.of` tells the client what each means.
"""

from __future__ import annotations

import contextlib
import functools
import logging
import threading
import time
import uuid
from collections import OrderedDict
from collections.abc import Callable
from copy import deepcopy
from dataclasses import dataclass
from typing import Any

import pyarrow as pa

from gateway.config import JOINS, SparkFactory, SparkSettings
from gateway.sql.catalog import RegionCatalog, TableInfo
from gateway.sql.check import CheckedQuery, check
from gateway.sql.errors import ExecutionError, QueryCancelled, SqlError
from gateway.sql.exchange import ExchangeOptions
from gateway.sql.execute import SparkJob, execute
from gateway.sql.executor_watch import executor_count
from gateway.sql.local import CANCELLED
from gateway.sql.plan import Plan
from gateway.sql.planner import Planner, plan_joins
from gateway.sql.profile import PROFILE, Profile
from gateway.sql.progress import PROGRESS, Progress
from gateway.sql.result_types import stable_types
from gateway.sql.stage import Staged, stage
from storage import NodeEngineError, NodeError, allow_deep_expressions

log = logging.getLogger("cxg.sql")
CHECKED_KEPT = 256  # checked queries an engine keeps, the latest used
PLANS_KEPT = 256  # plans an engine keeps (those whose run only reads them), the latest used
SHARED = ("nodes", "coordinator", "node", "colocated")  # engines whose run only reads the plan: it may be kept


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
    whoever composes the region hands in as `spark`, a factory called when a query needs it;
    `joins` says where joins may run (`gateway.config.SqlSettings`: ``node`` where one node holds
    every table a query reads, else Spark; ``spark`` always)."""

    def __init__(
        self,
        nodes: dict[str, str],
        settings: SparkSettings | None = None,
        spark: SparkFactory | None = None,
        joins: str = "node",
    ):
        allow_deep_expressions()
        if joins not in JOINS:
            raise ValueError(f"joins run on {' or '.join(JOINS)}, not {joins!r}")
        self.joins = joins
        self.catalog = RegionCatalog(nodes)
        self.spark_settings = settings or SparkSettings()
        self._spark_factory = spark
        self._session: Any = None  # the session once a query asked for it: what `cancel` reaches
        self._running: dict[str, threading.Event] = {}
        self._checked: OrderedDict[tuple[Any, ...], CheckedQuery] = OrderedDict()  # the latest checks, kept
        self._plans: OrderedDict[tuple[Any, ...], tuple[CheckedQuery, Plan]] = OrderedDict()  # `plan_kept`'s
        self._lock = threading.Lock()

    @property
    def spark(self) -> Any:
        if self._spark_factory is None:
            raise ExecutionError("this engine was given no Spark session, and the query needs Spark")
        self._session = self._spark_factory()
        return self._session

    @property
    def exchange_options(self) -> ExchangeOptions:
        settings = self.spark_settings
        return ExchangeOptions(settings.exchange_mode(), settings.inline, settings.gather_rows)

    # ---- the steps before admission: they read the catalog and run nothing on the nodes ----------

    def check(
        self,
        sql: str,
        params: dict[str, Any] | None = None,
        catalog: RegionCatalog | None = None,
        copy: bool = True,
    ) -> CheckedQuery:
        """Step 1: `sql` checked against the tables `catalog` (default: the region's now) serves.
        The same text, parameters and tables checked before give a copy of that check (parsing and
        qualifying are most of a short query's planning), or with `copy=False` the kept check
        itself, which the caller only reads (as `plan_kept` does)."""
        catalog = catalog or self.catalog
        tables = tuple(sorted((name, info.schema.sql_columns) for name, info in catalog.tables().items()))
        key = (sql, repr(sorted((params or {}).items())), tables)
        with self._lock:
            checked = self._checked.get(key)
            if checked is not None:
                self._checked.move_to_end(key)
        if checked is None:
            checked = check(sql, catalog.sql_schema(), params)
            with self._lock:
                self._checked[key] = checked
                if len(self._checked) > CHECKED_KEPT:
                    self._checked.popitem(last=False)
        return checked.copy() if copy else checked

    def plan(self, query: CheckedQuery | str, catalog: RegionCatalog | None = None, copy: bool = True) -> Plan:
        """Step 2: the plan of `query` (SQL text is checked first) over `catalog` (default: the
        region's now); it runs nothing. `copy` as in `Planner.plan`."""
        catalog = catalog or self.catalog
        if isinstance(query, str):
            query, copy = self.check(query, catalog=catalog), False
        return Planner(catalog, self.joins).plan(query, copy=copy)

    def plan_kept(self, query: CheckedQuery, names: frozenset[str], catalog: RegionCatalog, rows: int | None) -> Plan:
        """Step 2 for a kept check (`check(copy=False)`, left as it is) reading the tables `names`,
        stopped after `rows` rows: the plan made before for the same check, cap and tables, served
        at the same versions by the same nodes, when its run only reads it (one-table queries on
        the nodes, queries without a table, whole queries for one node or each node: `SHARED`),
        as it is then shared; a new plan otherwise."""
        served = tuple(_served(catalog.table(name)) for name in sorted(names))
        key = (id(query), rows, self.joins, served)
        with self._lock:
            kept = self._plans.get(key)
            if kept is not None and kept[0] is query:
                self._plans.move_to_end(key)
                return kept[1]
        capped = query if rows is None else query.capped(rows)  # a copy when it changed
        plan = Planner(catalog, self.joins).plan(capped, copy=capped is query)
        if plan.engine in SHARED and not plan.first and not query.explain and None not in served:
            with self._lock:
                self._plans[key] = query, plan
                if len(self._plans) > PLANS_KEPT:
                    self._plans.popitem(last=False)
        return plan

    def _forget(self, plan: Plan) -> None:
        with self._lock:
            for key in [k for k, (_, kept) in self._plans.items() if kept is plan]:
                del self._plans[key]

    # ---- the steps once admitted -------------------------------------------------------------------

    def answer(
        self,
        plan: Plan,
        query_id: str | None = None,
        granted: list[str] | None = None,
        catalog: RegionCatalog | None = None,
        waiting: Callable[[str], None] | None = None,
        handed_over: Callable[[], None] | None = None,
        progress: Progress | None = None,
    ) -> Result:
        """Steps 3 and 4: stage and execute `plan` (it is consumed), or describe it for EXPLAIN.
        `query_id` lets `cancel` stop it from another thread, `granted` names the nodes whose
        slots it holds (replicated tables are read there), `catalog` is the snapshot it was
        planned on (default: the region's now); `waiting` hears what a query on a Spark cluster
        waits for (executors), and "" when it waits no more; `handed_over`, once Spark holds every
        row it needs from the nodes (from then on the query needs no node); `progress` hears how far it is."""
        started = time.perf_counter()
        explain = (plan.written or plan.query).explain
        if explain == "plan":
            return Result(pa.table({"plan": plan.explain()}), plan, time.perf_counter() - started)
        query_id = query_id or uuid.uuid4().hex
        catalog = catalog or self.catalog
        catalog = catalog.restricted(granted) if granted else catalog
        cancelled = threading.Event()
        with self._lock:
            self._running[query_id] = cancelled
        token = CANCELLED.set(cancelled)
        profile = Profile() if explain == "analyze" else None
        profiled = PROFILE.set(profile)
        progressed = PROGRESS.set(progress)
        try:
            staged = stage(plan, catalog, self.exchange_options, self.joins)
            spark = functools.partial(self._spark_job, query_id, waiting, handed_over)
            try:
                table = execute(staged, catalog, spark, handed_over)
            except NodeError as e:
                if e.code != NodeEngineError.code:
                    raise
                self._forget(staged.plan)  # kept plans go to the node's engine: this one goes to Spark
                staged = stage(_to_spark(staged.plan, e, catalog), catalog, self.exchange_options, self.joins)
                table = execute(staged, catalog, spark, handed_over)
        except SqlError:
            raise
        except Exception as e:
            if cancelled.is_set():
                raise QueryCancelled("query cancelled") from e
            raise
        finally:
            CANCELLED.reset(token)
            PROFILE.reset(profiled)
            PROGRESS.reset(progressed)
            with self._lock:  # a run of the same query started since (a retry) keeps its own entry
                if self._running.get(query_id) is cancelled:
                    del self._running[query_id]
        final, seconds = staged.plan, time.perf_counter() - started
        if profile is not None:  # EXPLAIN ANALYZE: the plan as it ran, and what each part did
            return Result(pa.table({"plan": final.explain() + profile.lines(table.num_rows, seconds)}), final, seconds)
        table = stable_types(table, final.result_types).rename_columns(final.query.names)
        return Result(table, final, seconds)

    def _spark_job(
        self, query_id: str, waiting: Callable[[str], None] | None, handed_over: Callable[[], None] | None
    ) -> SparkJob:
        """The Spark part of a query (the session starts with the first); on a cluster, no executor
        for `executor_wait` seconds fails the query."""
        settings = self.spark_settings
        wait = None if settings.local else settings.executor_wait
        return SparkJob(self.spark, query_id, self.exchange_options, settings.exchange_dir, wait, waiting, handed_over)

    # ---- the whole path, in this process -----------------------------------------------------------

    def execute(self, sql: str, query_id: str | None = None) -> Result:
        """Check, plan and answer one query, on one version of each table it reads, as the gateway
        does: the same text asked again reuses its kept check and, a whole query for one node, its
        kept plan."""
        snapshot = self.catalog.snapshot()
        try:
            query = self.check(sql, catalog=snapshot, copy=False)  # only read
            plan = self.plan_kept(query, query.tables, snapshot, None)
            return self.answer(plan, query_id, catalog=snapshot)
        finally:
            snapshot.close()

    def stage(self, sql: str) -> Staged:
        """Check, plan and stage one query without executing it: the final plan and the rows its
        stage fetched (what EXPLAIN ANALYZE shows of the plan)."""
        snapshot = self.catalog.snapshot()
        try:
            return stage(self.plan(sql, snapshot), snapshot, self.exchange_options, self.joins)
        finally:
            snapshot.close()

    # ---- the region's Spark, and cancelling ------------------------------------------------------

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


def _served(info: TableInfo) -> tuple[Any, ...] | None:
    """What a plan reads of a table as served: its version and the load that made it (a version
    number comes back once a table is dropped and loaded again), its columns and placement, where
    it is and its rows; None when the nodes serve versions of their own (no version to compare)."""
    if info.version is None:
        return None
    schema = info.schema
    placed = (schema.sql_columns, repr(schema.placement))
    return schema.name, info.version, info.load, info.data, placed, tuple(info.nodes), repr(info.buckets), info.rows


def _to_spark(plan: Plan, failure: NodeError, catalog: RegionCatalog) -> Plan:
    """A ``node`` or ``colocated`` plan whose nodes' engine could not run it, to run on Spark
    instead: a copy with the same sub-queries and statement, or the whole query before it was split
    planned for Spark (what DataFusion failed on is in EXPLAIN ANALYZE and the log)."""
    log.warning("the node's engine could not run a query, Spark runs it: %s", failure)
    if plan.merge is not None:
        result_types = plan.result_types
        plan = plan_joins(plan.merge.whole.copy(), catalog, "spark")
        plan.result_types = result_types
    else:
        plan = deepcopy(plan)
    plan.engine, plan.gather = "spark", False  # nor at the coordinator: the same engine
    plan.why = f"the node's engine could not run it ({str(failure).splitlines()[0][:200]}): Spark ran it"
    return plan
