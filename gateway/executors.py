"""How a region runs a query, by the kind of its nodes.

- native: before admission, the gateway's SQL engine checks the query and plans it over one
  snapshot of the catalog (`Planned`); the balancer then takes a slot on every node the plan reads
  (all owners of a hash-placed table, one node for replicated tables) as a lease; the engine
  answers the plan (stage and execute: scans on those nodes; joins on the one node holding every
  table read, or on the region's Spark) and the slots are released, a query on Spark's as soon as
  Spark holds every row it needs from the nodes (the nodes take the next query while Spark joins).
  A query without tables, and
  EXPLAIN (which runs nothing), is answered at the gateway.
- mysql and simulation: the SQL (checked to be one read-only statement) and its parameters go
  unchanged to one node, which runs it in a slot and answers with the result.
"""

from __future__ import annotations

import asyncio
import contextvars
import functools
import logging
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any, Protocol, TypeVar

import pyarrow as pa

from balancer import NodeInfo, RegionBalancer, Ticket, read_payload
from gateway.appends import append, table_lock
from gateway.config import SparkFactory, SparkSettings
from gateway.errors import ApiError
from gateway.spark_status import spark_status
from gateway.sql.catalog import Snapshot
from gateway.sql.check import authorize, check_passed_through, read_tables
from gateway.sql.engine import Engine
from gateway.sql.errors import UndefinedTable
from gateway.sql.plan import Plan
from gateway.statements import Statement
from gateway.subscriptions import Subscriptions
from storage import sql_name
from storage.appends import Appended

Started = Callable[[list[str]], None]
log = logging.getLogger("cxg.gateway")
T = TypeVar("T")
STANDING_TAG = "standing query"  # the tag of the queries that compute standing queries' state
RETRIES = 1  # a query whose node went away mid-run is run again this many times
RETRY_PAUSE_S = 0.2  # ... after this pause, long enough for the balancer to notice a killed node
RETRIED = ("node_lost", "node_unavailable")


@dataclass(frozen=True)
class Asked:
    """A query as a client asked it: what the executor checks and plans (again, when a node it read
    went away or a region it was moved to gave it back)."""

    sql: str
    params: dict[str, Any] = field(default_factory=dict)  # as the client sent them
    tag: str = ""
    max_rows: int | None = None  # the rows the client keeps: the query stops one row past them
    token: str = ""  # the token it came with ...
    may_read: frozenset[str] = frozenset()  # ... and the tables that token may read (empty: all)


@dataclass
class Planned:
    """A query checked and planned before admission, and what admission needs to know of it."""

    asked: Asked
    plan: Plan | None = None  # native: its plan, a description (consumed when it is answered)
    nodes: frozenset[str] | None = None  # native: a slot on each of these; None: any one node
    local: bool = False  # native: answered at the gateway (no table, or EXPLAIN, which runs nothing)
    catalog: Snapshot | None = None  # native: the table versions the query reads, pinned until `close`
    tables: frozenset[str] = frozenset()  # the tables it reads

    def versions(self) -> dict[str, str | None]:
        """The version (`TableInfo.stamp`) of each table it reads; None where the nodes keep no
        versions (MariaDB, simulation)."""
        if self.catalog is None:
            return dict.fromkeys(self.tables)
        return {name: self.catalog.table(name).stamp for name in self.tables}

    def close(self) -> None:
        """The query is over (or will never run): its table versions may be released."""
        if self.catalog is not None:
            self.catalog.close()


def in_pool(pool: ThreadPoolExecutor | None, work: Callable[..., Any], *args: Any) -> asyncio.Future:
    """`work(*args)` on a thread of `pool` (None: the loop's default), in a copy of the calling task's
    context: what it logs carries the query's id."""
    return asyncio.get_running_loop().run_in_executor(pool, contextvars.copy_context().run, work, *args)


async def planned_off_loop(pool: ThreadPoolExecutor | None, plan: Callable[[Asked], Planned], asked: Asked) -> Planned:
    """`plan(asked)` on a thread of `pool`. When the task awaiting it is cancelled (its client went
    away, its time ran out), the query it plans is closed once ready, its versions released."""
    future = in_pool(pool, plan, asked)
    try:
        return await asyncio.shield(future)
    except asyncio.CancelledError:
        future.add_done_callback(_close_planned)
        raise


def _close_planned(future: asyncio.Future) -> None:
    if not future.cancelled() and future.exception() is None:
        future.result().close()


class Executor(Protocol):
    """What the gateway asks of a region's way of running queries."""

    backend: str
    blocking_plan: bool  # plan() may block (it then runs in a thread)
    subscriptions: Subscriptions | None  # the standing queries (None: the region keeps none)

    def nodes_changed(self, nodes: list[NodeInfo]) -> None: ...

    def serving(self, loop: asyncio.AbstractEventLoop) -> None:
        """The gateway serves on `loop` (where admissions are made)."""
        ...

    def tables(self) -> dict[str, dict[str, Any]]: ...

    def holdings(self) -> dict[str, str | None]:
        """The tables the region serves now, each at the version (`Planned.versions`) a query reads."""
        ...

    def health(self) -> dict[str, Any]:
        """What keeps the region from answering every query (for /readyz): tables not fully served,
        an engine down. Empty when nothing does."""
        ...

    def spark(self) -> dict[str, Any] | None:
        """The region's Spark (`gateway.spark_status`), None where queries never reach Spark."""
        ...

    def append(self, table: str, body: bytes, content_type: str) -> Appended:
        """Append the rows of `body` to `table` as its new version (blocks: a thread's work)."""
        ...

    def plan(self, asked: Asked) -> Planned:
        """Check and plan a query before admission; what it reads is pinned until `Planned.close`."""
        ...

    async def execute(self, statement: Statement, planned: Planned, started: Started) -> pa.Table:
        """Admit and run a planned query: `started` hears the nodes whose slots it got."""
        ...

    def close(self) -> None: ...


class NativeExecutor:
    backend = "native"
    blocking_plan = True  # checking may read the nodes' catalogs over HTTP

    def __init__(
        self,
        balancer: RegionBalancer,
        settings: SparkSettings,
        spark: SparkFactory | None,
        threads: int = 64,
        joins: str = "node",
        kept: str | None = None,
    ):
        self.balancer = balancer
        self.engine = Engine({}, settings, spark, joins)
        self.subscriptions: Subscriptions | None = Subscriptions(self.engine, table_lock, kept)
        self.pool = ThreadPoolExecutor(threads, thread_name_prefix="query")
        self._reviving = threading.Lock()

    def nodes_changed(self, nodes: list[NodeInfo]) -> None:
        urls = {n.name: n.url for n in nodes if n.url}
        if urls != self.engine.catalog.nodes:
            self.engine.catalog.set_nodes(urls)

    def serving(self, loop: asyncio.AbstractEventLoop) -> None:
        """Standing queries' states are then computed as the region's queries: admitted, on slots."""
        self.subscriptions.admit = functools.partial(self._admitted, loop)

    def _admitted(self, loop: asyncio.AbstractEventLoop, table: str, work: Callable[[], T]) -> T:
        """`work` (a standing query's state computed on the nodes holding `table`) run as a query
        of the region, from a thread: queued until those nodes have slots, as a client's (503
        ``queue_full`` when the region's queue is full)."""
        info = self.engine.catalog.table(table)
        nodes = None if info.replicated else frozenset(info.nodes)

        async def admitted() -> T:
            what = f"state of a standing query over {table}"
            ticket = self.balancer.submit(what, tag=STANDING_TAG, nodes=nodes, lease=True)
            try:
                await ticket.started
                return await in_pool(self.pool, work)
            finally:
                await self._end(ticket)

        return asyncio.run_coroutine_threadsafe(admitted(), loop).result()

    def tables(self) -> dict[str, dict[str, Any]]:
        return {
            name: {
                "rows": info.rows,
                "placement": str(info.schema.placement),
                "nodes": info.nodes,
                "version": info.version,
                "stamp": info.stamp,  # the rows' identity, the same in a copy (`cxg redistribute --to`)
                "available": info.available,
                **({"missing": info.missing} if info.missing else {}),
                "columns": [
                    {"name": c.name, "type": sql_name(c.arrow_type), "nullable": c.nullable}
                    for c in info.schema.columns
                ],
            }
            for name, info in self.engine.catalog.tables().items()
        }

    def append(self, table: str, body: bytes, content_type: str) -> Appended:
        return append(self.engine.catalog, table, body, content_type, self.subscriptions.appended)

    def holdings(self) -> dict[str, str | None]:
        return {name: info.stamp for name, info in self.engine.catalog.tables().items() if info.available}

    def health(self) -> dict[str, Any]:
        problems: dict[str, Any] = {}
        unavailable = {name: info.missing for name, info in self.engine.catalog.tables().items() if info.missing}
        if unavailable:
            problems["unavailable_tables"] = unavailable
        if self.engine.spark_state() == "down":
            problems["spark"] = "down: a new session is starting"
            if self._reviving.acquire(blocking=False):  # one at a time; a probe need not wait for a query
                self.pool.submit(self._revive_spark)
        return problems

    def spark(self) -> dict[str, Any] | None:
        engine = self.engine
        return spark_status(engine.spark_settings, engine.spark_state(), engine.executors())

    def _revive_spark(self) -> None:
        try:
            self.engine.spark  # noqa: B018 (the factory replaces a session whose JVM died)
        except Exception as e:
            log.warning("starting a new Spark session failed: %s", e)
        finally:
            self._reviving.release()

    def plan(self, asked: Asked) -> Planned:
        """Check and plan the query against one snapshot of the catalog, which it then runs on:
        every table it reads at one version from planning to the last scan. A table not seen yet
        has the nodes read again first, unless they were read since the query came."""
        came = time.monotonic()
        try:
            return self._plan(asked)
        except UndefinedTable:
            self.balancer.check_admission()  # no node connected (the gateway just started): 503, not 400
            self.nodes_changed(self.balancer.nodes())  # one may have joined a moment ago
            if not self.engine.catalog.refresh_since(came):
                raise
        return self._plan(asked)

    def _plan(self, asked: Asked) -> Planned:
        snapshot = self.engine.catalog.snapshot()
        try:
            query = self.engine.check(asked.sql, asked.params, snapshot, copy=False)  # only read
            names = query.tables
            authorize(names, asked.token, asked.may_read)
            plan = self.engine.plan_kept(query, names, snapshot, None if asked.max_rows is None else asked.max_rows + 1)
            if not names:
                snapshot.close()
                return Planned(asked, plan, local=True)
            infos = [snapshot.table(name) for name in sorted(names)]
        except BaseException:
            snapshot.close()
            raise
        if query.explain == "plan":  # described, not run: no slot, no node
            return Planned(asked, plan, local=True, catalog=snapshot, tables=names)
        owners = frozenset(node for info in infos if not info.replicated for node in info.nodes)
        return Planned(asked, plan, owners or None, catalog=snapshot, tables=names)

    async def execute(self, statement: Statement, planned: Planned, started: Started) -> pa.Table:
        """Run the query; once more, planned again on what is served then, if a node it read went
        away (its replicated tables are read on another node; a hash-placed table missing a bucket
        then fails with `table_unavailable`)."""
        attempt, retries = planned, 0
        try:
            while True:
                try:
                    return await self._execute(statement, attempt, started)
                except Exception as e:
                    if retries == RETRIES or ApiError.of(e, query=True).code not in RETRIED:
                        raise
                    log.info("statement %s: %s; running it again", statement.key, e)
                retries += 1
                await asyncio.sleep(RETRY_PAUSE_S)
                attempt.close()
                attempt = await planned_off_loop(self.pool, self._plan_again, planned.asked)
        finally:
            attempt.close()

    def _plan_again(self, asked: Asked) -> Planned:
        self.engine.catalog.refresh()  # now, not when it is due: a node has just gone
        return self.plan(asked)

    async def _execute(self, statement: Statement, planned: Planned, started: Started) -> pa.Table:
        key = str(statement.id)
        if planned.local:
            started([])
            answer = functools.partial(
                self.engine.answer,
                planned.plan,
                key,
                catalog=planned.catalog,
                waiting=statement.wait_for,
                progress=statement.progress,
            )
            try:
                result = await in_pool(self.pool, answer)
            except asyncio.CancelledError:  # cancelled or timed out: its scans and Spark jobs stop too
                self.engine.cancel(key)
                raise
            statement.engine = result.engine
            return result.table
        ticket = self.balancer.submit(
            planned.asked.sql,
            tag=planned.asked.tag,
            client=statement.client,
            nodes=planned.nodes,
            lease=True,
            number=statement.id,
        )
        try:
            granted = await ticket.started
            started(granted)
            loop, handed = asyncio.get_running_loop(), asyncio.Event()
            answer = functools.partial(
                self.engine.answer,
                planned.plan,
                key,
                granted,
                planned.catalog,
                waiting=statement.wait_for,
                handed_over=lambda: loop.call_soon_threadsafe(handed.set),
                progress=statement.progress,
            )
            work = in_pool(self.pool, answer)
            result = await self._watched(work, ticket, handed, key)
        except asyncio.CancelledError:
            self.engine.cancel(key)
            await self.balancer.cancel(ticket)
            raise
        except BaseException:
            await self._end(ticket)
            raise
        await self._end(ticket)
        statement.engine = result.engine
        return result.table

    async def _watched(self, work: asyncio.Future, ticket: Ticket, handed: asyncio.Event, key: str) -> Any:
        """The query's result; its slots released once Spark holds what it needs from the nodes.
        A node it holds going away first stops it now, not when its scans time out."""
        handover = asyncio.ensure_future(handed.wait())
        try:
            await asyncio.wait([work, ticket.done, handover], return_when=asyncio.FIRST_COMPLETED)
            if handover.done() and not work.done():  # the nodes' part is over: the next query may have them
                await self._end(ticket)
                return await work
            if not work.done():
                self.engine.cancel(key)
                work.add_done_callback(lambda f: f.cancelled() or f.exception())
                ticket.done.result()  # raises the balancer's node_lost (503, retry)
            return work.result()
        finally:
            handover.cancel()

    async def _end(self, ticket: Ticket) -> None:
        """Release the query's slots (again, harmlessly, if its Spark part released them) or take
        it out of the queue."""
        if ticket.started.done() and not ticket.started.exception():
            await self.balancer.release(ticket)
        else:
            await self.balancer.cancel(ticket)

    def close(self) -> None:
        self.pool.shutdown(wait=False, cancel_futures=True)
        self.subscriptions.close()


class PassThroughExecutor:
    """MariaDB and simulation nodes: the query travels unchanged."""

    blocking_plan = False  # a parse, no I/O
    subscriptions: Subscriptions | None = None  # standing queries need tables the gateway appends to

    def __init__(self, balancer: RegionBalancer, backend: str):
        self.balancer = balancer
        self.backend = backend

    def nodes_changed(self, nodes: list[NodeInfo]) -> None:
        pass

    def serving(self, loop: asyncio.AbstractEventLoop) -> None:
        pass

    def tables(self) -> dict[str, dict[str, Any]]:
        tables: dict[str, dict[str, Any]] = {}
        for node in self.balancer.nodes():
            for name, rows in node.tables.items():
                tables.setdefault(name, {"rows": rows, "placement": "replicated", "nodes": [], "columns": []})
                tables[name]["nodes"].append(node.name)
        return tables

    def append(self, table: str, body: bytes, content_type: str) -> Appended:
        raise ApiError(
            422, "appends_unsupported", f"a {self.backend} region takes no appends: its nodes keep their own tables"
        )

    def holdings(self) -> dict[str, str | None]:
        return dict.fromkeys(self.tables())

    def health(self) -> dict[str, Any]:
        return {}

    def spark(self) -> dict[str, Any] | None:
        return None

    def plan(self, asked: Asked) -> Planned:
        """Checked as far as the gateway reads MariaDB's SQL; the node plans it."""
        names = read_tables(check_passed_through(asked.sql, asked.params))
        authorize(names, asked.token, asked.may_read)
        return Planned(asked, tables=names)

    async def execute(self, statement: Statement, planned: Planned, started: Started) -> pa.Table:
        asked = planned.asked
        params = {k: _driver_value(v) for k, v in asked.params.items()}
        ticket = self.balancer.submit(asked.sql, params, asked.tag, statement.client, number=statement.id)
        try:
            started(await ticket.started)
            answer = await self.balancer.answer(ticket)
        except asyncio.CancelledError:
            await self.balancer.cancel(ticket)
            raise
        statement.engine = self.backend
        return read_payload(answer.payload) if answer.payload else pa.table({})

    def close(self) -> None:
        pass


def _driver_value(value: Any) -> Any:
    """Typed JSON parameters as the database driver binds them."""
    return str(value["value"]) if isinstance(value, dict) else value
