"""Step 4 of a query's run phase: execute a staged plan. A ``nodes`` or ``coordinator`` plan is
answered at the coordinator over the nodes' scans (`gateway.sql.local`); a ``node`` plan is sent
whole to one node that holds every table it reads (`on_node`); a ``colocated`` plan's part goes to
every node holding buckets of its tables, over its own, and the coordinator merges their rows
(`on_each_node`); a ``spark`` plan runs on the region's Spark, its sub-queries handed over by an
`Exchange` (the rows the stage fetched as they are, the others scanned again); a ``gathered`` plan's
sub-queries, all fetched, are joined at the coordinator by DataFusion (`gathered`)."""

from __future__ import annotations

import logging
import os
import threading
import time
import uuid
from collections.abc import Callable, Collection, Iterator
from contextlib import contextmanager, nullcontext
from dataclasses import dataclass, replace
from typing import Any

import pyarrow as pa

from gateway.sql.catalog import RegionCatalog
from gateway.sql.decompose import PARTIALS
from gateway.sql.exchange import Exchange, ExchangeOptions
from gateway.sql.executor_watch import ExecutorWatch
from gateway.sql.local import CANCELLED, answer_one_table, in_threads
from gateway.sql.plan import Plan
from gateway.sql.profile import PROFILE, codegen_counters, node_lines, spark_lines
from gateway.sql.progress import PROGRESS, NodeStages, spark_stages, subquery
from gateway.sql.stage import Staged
from storage import NodeClient, NodeEngineError, NodeError, OutOfMemoryError, QueryRequest, StorageError, run_sql

log = logging.getLogger("cxg.sql")
GATHER_MEMORY = 1 << 30  # bytes the coordinator's DataFusion may hold for one gathered query
# gathered queries joined at once, each on one core: query per core plus one, as on the nodes
_GATHERING = threading.BoundedSemaphore((os.cpu_count() or 1) + 1)


@dataclass
class SparkJob:
    """Where and how a query's Spark part runs: the session, its job group `job` (which
    `Engine.cancel` cancels), the exchange's `options` and files' `directory`; with
    `executor_wait` (a cluster), the query fails with `spark_no_executors` after that many seconds
    without an executor, and `waiting` hears what it waits for; `handed_over` hears when Spark
    holds every row it needs from the nodes (their slots may go to the next query)."""

    session: Any
    job: str
    options: ExchangeOptions
    directory: str | None = None
    executor_wait: float | None = None
    waiting: Callable[[str], None] | None = None
    handed_over: Callable[[], None] | None = None


def execute(
    staged: Staged,
    catalog: RegionCatalog,
    spark: Callable[[], SparkJob],
    handed_over: Callable[[], None] | None = None,
) -> pa.Table:
    """The rows of a staged plan over `catalog` (the snapshot its query holds); `spark` is asked
    for the Spark job only when the plan runs on Spark; `handed_over` hears when a ``gathered``
    plan needs no node any more."""
    if staged.plan.engine == "node":
        return on_node(staged.plan, catalog)
    if staged.plan.engine == "colocated":
        return on_each_node(staged.plan, catalog)
    if staged.plan.engine == "gathered":
        if handed_over is not None:
            handed_over()
        table = gathered(staged)
        if table is not None:
            return table
    if staged.plan.engine != "spark":
        return answer_one_table(staged.plan, catalog)
    return on_spark(staged, catalog, spark())


def gathered(staged: Staged) -> pa.Table | None:
    """A ``gathered`` plan: its fetched sub-queries joined at the coordinator by DataFusion, the
    node's engine, on one core within `GATHER_MEMORY` (as many at once as cores, plus one); None
    when DataFusion could not (the plan is then a ``spark`` plan again, which says why, and Spark
    joins the same rows)."""
    plan, profile = staged.plan, PROFILE.get()
    tables = {s.view: staged.fetched[s.index] for s in plan.scans if s.index not in plan.dropped}
    written = plan.node_sql
    try:
        with _GATHERING:
            answer = run_sql(tables, written.query, written.kept, profile is not None, GATHER_MEMORY, CANCELLED.get())
    except StorageError as e:
        if e.code not in (NodeEngineError.code, OutOfMemoryError.code):
            raise
        log.warning("the coordinator's DataFusion could not join a query's sub-queries, Spark does: %s", e)
        plan.engine, plan.gather = "spark", False
        plan.deliveries = {s.index: plan.dropped.get(s.index) or "fetched whole, handed to Spark" for s in plan.scans}
        plan.why = f"{plan.why}; DataFusion could not ({str(e).splitlines()[0][:200]}): Spark joined them"
        return None
    if profile is not None:  # analyzed: DataFusion returned its operators, not its rows
        rows = sum(t.num_rows for t in tables.values())
        profile.node = [
            f"the coordinator joined {rows:,} fetched row(s) in DataFusion in {answer.seconds * 1000:.1f} ms; "
            "operators (rows out, time):",
            *[f"  {line}" for line in answer.operators],
        ]
        profile.rows = answer.rows
    return answer.table


def on_node(plan: Plan, catalog: RegionCatalog) -> pa.Table:
    """A ``node`` plan answered by the first node of `catalog` (the nodes whose slots the query
    holds) that holds every table it reads, each read at the version the catalog serves. The
    query's cancellation reaches the node (`storage.query_protocol`'s DELETE)."""
    infos = {scan.table: catalog.table(scan.table) for scan in plan.scans}
    node = min(set.intersection(*(set(info.nodes) for info in infos.values())))
    asked = _asked(plan, catalog, uuid.uuid4().hex)
    table, stats, seconds = _node_answer(catalog, node, asked)
    profile = PROFILE.get()
    if profile is not None:
        profile.node = node_lines(node, stats, seconds)
        profile.rows = stats.get("rows")
    return table


def on_each_node(plan: Plan, catalog: RegionCatalog) -> pa.Table:
    """A ``colocated`` plan: its part answered by every node holding buckets of its hash-placed
    tables, each over its own buckets (and its copy of the replicated tables), at once; the nodes'
    rows merged at the coordinator (`Plan.merge`)."""
    merge, query_id = plan.merge, uuid.uuid4().hex
    split = {scan.table for scan in plan.scans if scan.table in merge.keys}

    def one(reads: tuple[str, tuple[int, ...]]) -> tuple[pa.Table, dict[str, Any], float]:
        node, buckets = reads
        return _node_answer(catalog, node, _asked(plan, catalog, query_id, split, buckets))

    answers = in_threads(one, list(merge.layout.reads))
    profile = PROFILE.get()
    if profile is not None:  # analyzed: the nodes returned their operators, not their rows
        for (node, _), (_, stats, seconds) in zip(merge.layout.reads, answers, strict=True):
            profile.node += node_lines(node, stats, seconds, "its part over its own buckets")
        profile.rows = sum(stats.get("rows", 0) for _, stats, _ in answers)
        profile.node.append(f"the nodes returned {profile.rows:,} row(s) to merge: {merge.how}")
        return pa.table({})
    rows = pa.concat_tables([table for table, _, _ in answers])
    return rows if merge.statement is None else merged(rows, merge.sql)


def _asked(
    plan: Plan,
    catalog: RegionCatalog,
    query_id: str,
    split: Collection[str] = (),
    buckets: tuple[int, ...] | None = None,
) -> QueryRequest:
    """What one node is asked: `plan`'s statement over its sub-queries' views, each reading the
    version `catalog` serves, the `split` tables only their `buckets` (None: all the node holds)."""
    views = {}
    for scan in plan.scans:
        request = scan.request()
        version = catalog.table(scan.table).version
        if version is not None:
            request = replace(request, version=version)
        if scan.table in split and buckets is not None:
            request = replace(request, buckets=buckets)
        views[scan.view] = request
    edges = tuple(
        (source.view, column, target.view, target_column)
        for edge in plan.edges
        for source, column, target, target_column in edge.directions()
    )
    written = plan.node_sql
    return QueryRequest(written.query, views, PROFILE.get() is not None, query_id, edges, written.kept)


def _node_answer(catalog: RegionCatalog, node: str, asked: QueryRequest) -> tuple[pa.Table, dict[str, Any], float]:
    """`asked` answered by `node` (the query's cancellation reaches it: `storage.query_protocol`'s
    DELETE): its rows, what it did, and the seconds it took."""
    started = time.perf_counter()
    url = catalog.url(node)
    with (
        subquery(NodeStages(url, asked.id, len(asked.views) + 1)) as answered,
        NodeClient(url).query(asked, CANCELLED.get()) as stream,
    ):
        table = stream.read_all()
        answered(stream.stats)
    return table, stream.stats, time.perf_counter() - started


def merged(rows: pa.Table, sql: str) -> pa.Table:
    """The coordinator's part of a ``colocated`` query: `sql` over the nodes' `rows` (``partials``),
    in DataFusion, as the nodes' engine runs theirs; what DataFusion cannot plan or run fails as a
    node's engine does (`NodeEngineError`'s code), and Spark answers the query instead."""
    try:
        return run_sql({PARTIALS: rows}, sql).table
    except StorageError as e:
        if e.code != NodeEngineError.code:
            raise
        raise NodeError(NodeEngineError.code, f"the coordinator's merge: {e}", NodeEngineError.status) from e


class SchedulerPools:
    """Spark scheduler pools, one per running query. Under the FAIR scheduler the pools share the
    cores equally whatever their number of tasks, so a query with thousands of long tasks takes
    its share and no more: the next free core goes to the pool with the fewest running tasks.
    Names are reused, so Spark keeps as many pools as queries ever ran at once."""

    def __init__(self, prefix: str = "query"):
        self.prefix = prefix
        self._free: list[str] = []
        self._made = 0
        self._lock = threading.Lock()

    @contextmanager
    def pool(self) -> Iterator[str]:
        with self._lock:
            if self._free:
                name = self._free.pop()
            else:
                name, self._made = f"{self.prefix}-{self._made}", self._made + 1
        try:
            yield name
        finally:
            with self._lock:
                self._free.append(name)


POOLS = SchedulerPools()


def on_spark(staged: Staged, catalog: RegionCatalog, spark: SparkJob) -> pa.Table:
    """Run a staged ``spark`` plan in a scheduler pool of its own, under the job group `spark.job`."""
    session, job = spark.session, spark.job
    context = session.sparkContext
    watch = (
        ExecutorWatch(session, job, spark.executor_wait, spark.waiting)
        if spark.executor_wait is not None
        else nullcontext()
    )
    with POOLS.pool() as pool, watch:
        context.setJobGroup(job, staged.plan.query.text[:200], interruptOnCancel=True)
        context.setLocalProperty("spark.scheduler.pool", pool)  # this thread's jobs
        progress = PROGRESS.get()
        if progress is not None:
            progress.spark_stages = spark_stages(context, job)
        exchange = Exchange(session, catalog, spark.options, spark.directory)
        try:
            profile = PROFILE.get()
            codegen = codegen_counters(session) if profile is not None else (0, 0)
            frame = session.sql(exchange.spark_sql(staged.plan, staged.fetched))
            if spark.handed_over is not None and not exchange.reads_nodes:
                spark.handed_over()
            table = frame.toArrow()
            if profile is not None:
                profile.spark = spark_lines(session, frame, job, codegen)
            return table
        except Exception as e:
            if getattr(watch, "starved", False):
                raise watch.error() from e
            raise
        finally:
            exchange.close()
            context.setLocalProperty("spark.scheduler.pool", None)
