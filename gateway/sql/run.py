"""Running a query: the phase that consumes plans.

1. Uncorrelated subqueries over one table (``o_orderkey IN (SELECT l_orderkey FROM lineitem
   GROUP BY l_orderkey HAVING sum(l_quantity) > 300)``, a scalar ``(SELECT avg(c_acctbal) FROM
   customer WHERE ...)``, an uncorrelated EXISTS) run first, as one-table queries on the nodes,
   and their answers replace them as literals, in a copy of the query; the query is then planned
   again (`Planner.plan`), so that the conditions around them are pushed down like any other.
2. A ``spark`` plan is staged (`stage`): semi-join reduction on the nodes (`gateway.sql.reduce`),
   then the joins and EXISTS tests the coordinator has thereby done leave Spark's statement
   (`gateway.sql.eliminate`).
3. The plan runs: a ``nodes`` or ``coordinator`` plan at the coordinator (`gateway.sql.local`), a
   staged one on Spark, its sub-queries handed over by an `Exchange`.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager, nullcontext
from dataclasses import replace
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
from sqlglot import exp

from gateway.sql.catalog import RegionCatalog
from gateway.sql.eliminate import answer_exists, drop_finished_joins
from gateway.sql.errors import SqlError
from gateway.sql.exchange import Exchange, Handover, describe
from gateway.sql.executor_watch import ExecutorWatch
from gateway.sql.local import run_local
from gateway.sql.parse import CheckedQuery
from gateway.sql.plan import Plan
from gateway.sql.planner import Planner
from gateway.sql.profile import PROFILE, spark_lines
from gateway.sql.reduce import reduce_and_fetch
from gateway.sql.staged import Staged
from gateway.sql.tree import literal, node_at, path_to

MAX_SUBSTITUTED = 10_000  # values an IN subquery may become


class CardinalityError(SqlError):
    code = "cardinality_violation"
    sqlstate = "21000"


def staged_plan(query: CheckedQuery, catalog: RegionCatalog, handover: Handover, copy: bool = True) -> Plan:
    """The plan of `query` as it will run (what EXPLAIN shows): planned after its one-table
    subqueries were answered, and staged when it runs on Spark (for `handover`). Like
    `Planner.plan`, it rewrites a copy of `query`, unless `copy` is False (the caller made
    `query` for this and has no other use for it)."""
    planner = Planner(catalog)
    answered, notes = answer_subqueries_first(query, planner, catalog, copy)
    plan = replace(planner.plan(answered, copy=copy and answered is query), notes=notes)  # a copy made here is ours
    return stage(plan, catalog, handover) if plan.engine == "spark" else plan


def answer_subqueries_first(
    query: CheckedQuery, planner: Planner, catalog: RegionCatalog, copy: bool = True
) -> tuple[CheckedQuery, list[str]]:
    """`query` with the answers of its one-table subqueries in their place (in a copy, made at
    the first answer, unless `copy` is False), and a note for EXPLAIN per answer. One at a time,
    innermost first: an answer can leave the subquery around it over one table, to be answered
    next. An answer that cannot replace its subquery (an IN list too long or with a NULL) is
    left to Spark."""
    notes: list[str] = []
    kept: list[exp.Select] = []
    while True:
        found = (f for f in planner.subqueries_first(query) if not any(f.select is k for k in kept))
        first = next(found, None)
        if first is None:
            return query, notes
        answer = run_local(first.plan, catalog, "a subquery answered first")
        holder = first.select.parent  # exp.Subquery, or the IN / EXISTS node itself
        user = holder.parent if isinstance(holder, exp.Subquery) else holder
        replacement = _replacement(holder, user, answer)
        if replacement is None:
            kept.append(first.select)
            continue
        target, new = replacement
        notes.append(f"evaluated first on the nodes: ({first.select.sql()}) -> {_describe(answer)}")
        if copy:  # the first answer: rewrite a copy, never the caller's query
            paths = [path_to(node) for node in (target, *kept)]
            query = query.copy()
            target, *kept = [node_at(query.tree, path) for path in paths]
            copy = False
        target.replace(new)


def _describe(answer: pa.Table) -> str:
    if answer.num_rows == 1 and answer.num_columns == 1:
        return f"{answer.column(0)[0].as_py()!r}"
    return f"{answer.num_rows} value(s)"


def _replacement(holder: exp.Expression, user: exp.Expression, answer: pa.Table):
    """(node to replace, its replacement) for a subquery's answer, or None to leave it to Spark."""
    if isinstance(user, exp.Exists):
        return user, exp.Boolean(this=answer.num_rows > 0)
    if isinstance(user, exp.In) and user.args.get("query") is holder:
        if answer.num_columns != 1 or answer.num_rows > MAX_SUBSTITUTED:
            return None
        values = pc.unique(answer.column(0)).to_pylist()
        if None in values:  # x NOT IN (..., NULL) is never true: keep SQL's exact rule in Spark
            return None
        if not values:
            return user, exp.false()
        return user, exp.In(this=user.this.copy(), expressions=[literal(v) for v in values])
    if isinstance(holder, exp.Subquery) and answer.num_columns == 1:
        if answer.num_rows > 1:
            raise CardinalityError("a scalar subquery returned more than one row")
        return holder, literal(answer.column(0)[0].as_py() if answer.num_rows else None)
    return None


def stage(plan: Plan, catalog: RegionCatalog, handover: Handover) -> Staged:
    """A ``spark`` plan made ready for Spark: its sub-queries reduced (the small ones fetched, up to
    the `handover`'s limit), the joins already done left out, how each is handed over. The
    plan is consumed: the staged plan is made of its parts."""
    staged = Staged.taking_over(plan)
    staged.inputs = reduce_and_fetch(staged, catalog, handover.fetch_rows)
    answer_exists(staged)
    drop_finished_joins(staged)
    staged.deliveries = {
        s.index: staged.dropped.get(s.index) or describe(handover, s, staged.inputs.get(s.index)) for s in staged.scans
    }
    return staged


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


def run_on_spark(
    plan: Staged,
    spark: Any,
    catalog: RegionCatalog,
    handover: Handover,
    job: str,
    directory: str | None = None,
    executor_wait: float | None = None,
    waiting: Callable[[str], None] | None = None,
) -> pa.Table:
    """Run a staged plan on `spark` in a scheduler pool of its own, under the job group `job`
    (which `Engine.cancel` cancels), its sub-queries handed over by an `Exchange` (files under
    `directory`). With `executor_wait` (a cluster), the query fails with `spark_no_executors`
    after that many seconds without an executor, and `waiting` hears what it waits for."""
    context = spark.sparkContext
    watch = ExecutorWatch(spark, job, executor_wait, waiting) if executor_wait is not None else nullcontext()
    with POOLS.pool() as pool, watch:
        context.setJobGroup(job, plan.query.text[:200], interruptOnCancel=True)
        context.setLocalProperty("spark.scheduler.pool", pool)  # this thread's jobs
        exchange = Exchange(spark, catalog, handover, directory)
        try:
            frame = spark.sql(exchange.spark_sql(plan))
            table = frame.toArrow()
            profile = PROFILE.get()
            if profile is not None:
                profile.spark = spark_lines(spark, frame, job)
            return table
        except Exception as e:
            if getattr(watch, "starved", False):
                raise watch.error() from e
            raise
        finally:
            exchange.close()
            context.setLocalProperty("spark.scheduler.pool", None)
