"""A statement's life in the gateway, apart from HTTP: admitted under its token's limit, checked
and planned by the region's executor, booked, executed under its time limit, then finished, failed
or cancelled with its result cut to the configured size. The handlers only translate requests into these
calls and statements into answers.

Balancing between regions moves queued statements: `hand_over` takes some out of the region's
queue for another region, which runs them and sends back their outcome (`returned`); one whose
region went away comes back to this region's queue (`give_back`). Either way this gateway
answers its client, once."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import pyarrow as pa

from balancer import HandedOver, RegionBalancer, logged_as
from gateway import results
from gateway.config import GatewayConfig, TokenConfig
from gateway.errors import DEFECTS, ApiError, timeout
from gateway.executors import Asked, Executor, Planned, planned_off_loop
from gateway.metrics import Metrics
from gateway.statements import CANCELLED, FAILED, RUNNING, SUCCEEDED, Statement, Statements

log = logging.getLogger("cxg.gateway")
Versions = dict[str, str | None]  # table -> version (`Planned.versions`)


@dataclass
class RemoteResult:
    """What the region a statement was moved to answered."""

    table: pa.Table
    truncated: bool
    engine: str
    nodes: list[str]
    queued: float  # seconds it waited in that region's queue


class GoHome(Exception):
    """The region a statement was moved to will not answer it: back to this region's queue."""


@dataclass(eq=False)
class Away:
    """A statement moved to another region until its outcome (a RemoteResult, an ApiError or GoHome)."""

    statement: Statement
    region: str
    outcome: asyncio.Future = field(default_factory=lambda: asyncio.get_running_loop().create_future())
    recall: Callable[[], None] = lambda: None  # tells that region it is no longer wanted
    since: float = field(default_factory=time.monotonic)


@dataclass(eq=False)
class _Queued:
    statement: Statement
    planned: Planned
    deadline: float  # time.monotonic() when the query's time is up


@dataclass(eq=False)
class StatementLifecycle:
    settings: GatewayConfig
    balancer: RegionBalancer
    executor: Executor
    statements: Statements
    metrics: Metrics
    region: str = ""  # this region's name (balancing between regions)

    def __post_init__(self) -> None:
        self._queued: dict[int, _Queued] = {}  # statements in (or on their way to) the region's queue
        self._away: dict[int, Away] = {}

    async def submit(
        self,
        token: TokenConfig,
        sql: str,
        params: dict[str, Any],
        tag: str,
        client: int,
        limit_s: float,
        max_rows: int,
        origin: str = "",
        versions: Versions | None = None,
    ) -> Statement:
        """Admit, check and plan, and start one query; its statement, running. An ApiError when it
        is refused (a draining region, the token's limit, a full region, a query that does not check,
        a table its token may not read, or, for a query moved here from region `origin`, tables not
        at the `versions` it reads there). What is logged while it is planned and executed carries
        its id."""
        self._admit(token)
        statement = Statement(self.balancer.new_id(client), sql, token.name, tag, client, max_rows, origin=origin)
        asked = Asked(sql, params, tag, max_rows, token.name, frozenset(token.tables))
        planned: Planned | None = None
        try:
            self.balancer.check_open()
            with logged_as(statement.id):
                planned = await self._plan(asked)
            if versions is not None and planned.versions() != versions:
                raise ApiError(
                    409,
                    "version_mismatch",
                    f"region {self.region} does not hold {', '.join(sorted(versions))} at the versions asked for",
                    "40001",
                )
            if not planned.local:
                self.balancer.check_admission()
        except Exception as e:
            if planned is not None:
                planned.close()
            error = ApiError.of(e, query=True)
            if error.status < 500:  # a capacity refusal was counted where it was made
                self.metrics.invalid.labels(error.code).inc()
            elif error.code in DEFECTS:
                log.exception("planning a statement failed")
            raise error from None
        statement.mark("prepare")
        self.statements.add(statement)
        self.metrics.admitted.inc()
        queued = _Queued(statement, planned, time.monotonic() + limit_s)
        with logged_as(statement.id):
            statement.task = asyncio.create_task(self._conclude(queued, limit_s, max_rows))
        statement.task.add_done_callback(lambda _: queued.planned.close())  # however it ended, even unstarted
        return statement

    async def _plan(self, asked: Asked) -> Planned:
        if self.executor.blocking_plan:
            return await planned_off_loop(None, self.executor.plan, asked)
        return self.executor.plan(asked)

    def _admit(self, token: TokenConfig) -> None:
        if self.statements.active(token.name) >= token.max_concurrent:
            self.balancer.reject("too_many_queries")
            raise ApiError(
                429,
                "too_many_queries",
                f"token {token.name!r} already has {token.max_concurrent} queries queued or running",
                "53000",
                retry_after=1,
            )

    async def _conclude(self, queued: _Queued, limit_s: float, max_rows: int) -> None:
        """Execute the statement under its time limit, and finish it with its result or error."""
        statement = queued.statement
        state, error = SUCCEEDED, None
        try:
            async with asyncio.timeout(limit_s):
                table = await self._execute_here_or_away(queued)
            statement.mark("execute")
            statement.result, truncated = results.limit(table, max_rows, self.settings.result_bytes)
            statement.truncated = statement.truncated or truncated
        except TimeoutError:
            state, error = FAILED, timeout(limit_s)
        except asyncio.CancelledError:
            state, error = CANCELLED, ApiError(409, "cancelled", "query cancelled", "57014")
        except Exception as e:
            error = ApiError.of(e, query=True)
            if error.code in DEFECTS:
                log.exception("statement %s failed", statement.id)
            state = CANCELLED if error.code == "cancelled" else FAILED
        self._away.pop(statement.id, None)
        statement.queue_length = self.balancer.queue_length
        statement.finish(state, error)
        outcome = state if error is None else f"{state} ({error.code})"
        log.info("statement %s %s in %.3f s", statement.key, outcome, statement.timings["total"])
        self.statements.finished(statement)
        self.metrics.finished.labels(state).inc()
        self.metrics.observe(statement.timings)

    async def _execute_here_or_away(self, queued: _Queued) -> pa.Table:
        """Execute the statement here, or in the region it is handed over to meanwhile; back in this
        region's queue (planned again: its versions were released) when that region gives it back."""
        statement = queued.statement

        def started(nodes: list[str]) -> None:
            statement.mark("queue")
            statement.queues.append((self.region, statement.timings["queue"]))
            statement.region = self.region
            statement.state = RUNNING
            statement.nodes = nodes

        while True:
            self._queued[statement.id] = queued
            try:
                return await self.executor.execute(statement, queued.planned, started)
            except HandedOver:
                pass
            finally:
                self._queued.pop(statement.id, None)
            away = self._away[statement.id]
            try:
                outcome = await away.outcome
            except GoHome as e:
                log.info("statement %s is back from region %s: %s", statement.key, away.region, e)
                statement.mark("away")
                del self._away[statement.id]
                statement.region = ""
                queued.planned.close()
                queued.planned = await self._plan(queued.planned.asked)
                continue
            except asyncio.CancelledError:
                away.recall()
                raise
            statement.mark("away")
            statement.queues.append((away.region, outcome.queued))
            statement.engine, statement.nodes, statement.truncated = outcome.engine, outcome.nodes, outcome.truncated
            return outcome.table

    def waiting(self) -> list[tuple[Statement, Planned]]:
        """The statements in the region's queue, head first."""
        return [(q.statement, q.planned) for t in self.balancer.queued() if (q := self._queued.get(t.id))]

    def hand_over(
        self,
        holdings: Versions,
        region: str,
        count: int = 1,
        tail: bool = False,
        recall: Callable[[str], None] = lambda key: None,
    ) -> list[dict[str, Any]]:
        """Take up to `count` queued statements of this region's own clients out of its queue, from
        its head (or tail), for `region` to run: only those whose every table `region` holds at
        the version they read here (`holdings`). What `region` needs to run each, with the id its
        outcome is sent back under; `recall(id)` is called if the statement is no longer wanted."""
        tickets = self.balancer.queued()
        moved: list[dict[str, Any]] = []
        for ticket in reversed(tickets) if tail else tickets:
            if len(moved) == count:
                break
            queued = self._queued.get(ticket.id)
            if queued is None or queued.statement.origin:  # a query moved here is not moved on
                continue
            versions = queued.planned.versions()
            if any(name not in holdings or holdings[name] != version for name, version in versions.items()):
                continue
            statement = queued.statement
            statement.mark("queue")
            statement.queues.append((self.region, statement.timings["queue"]))
            self._away[statement.id] = Away(statement, region, recall=lambda key=statement.key: recall(key))
            statement.region = region
            self.balancer.hand_over(ticket, region)
            moved.append(
                {
                    "id": statement.key,
                    "sql": statement.sql,
                    "params": queued.planned.asked.params,
                    "tag": statement.tag,
                    "client": statement.client,
                    "max_rows": statement.max_rows,
                    "timeout": max(0.001, queued.deadline - time.monotonic()),
                    "versions": versions,
                }
            )
        return moved

    def away(self, statement: Statement) -> Away | None:
        """Where a statement handed over runs, until its outcome is in."""
        away = self._away.get(statement.id)
        return away if away is not None and not away.outcome.done() else None

    def returned(self, statement: Statement, region: str, outcome: RemoteResult | ApiError) -> bool:
        """The outcome of a statement handed over to `region`; False (ignored) when it is not
        away there any more (it finished, went home, or went elsewhere): nothing is answered twice."""
        away = self.away(statement)
        if away is None or away.region != region:
            return False
        if isinstance(outcome, ApiError):
            away.outcome.set_exception(outcome)
        else:
            away.outcome.set_result(outcome)
        return True

    def give_back(self, statement: Statement, region: str, reason: str) -> bool:
        """The statement handed over to `region` goes back to this region's queue (that region went
        away, or cannot run it); False when it is not away there."""
        away = self.away(statement)
        if away is None or away.region != region:
            return False
        away.outcome.set_exception(GoHome(reason))
        return True

    def moved_away(self) -> list[Away]:
        """Statements handed over to other regions, their outcome not in yet."""
        return [away for away in self._away.values() if not away.outcome.done()]

    @staticmethod
    async def wait(statement: Statement, seconds: float) -> None:
        """Until the statement has finished, `seconds` at most; the statement runs on either way."""
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(asyncio.shield(statement.done.wait()), seconds)

    async def cancel(self, statement: Statement) -> None:
        """Stop a statement (out of the queue, or stopped on its nodes) and wait until it has."""
        if statement.task is not None and not statement.finished:
            statement.task.cancel()
            await asyncio.wait([asyncio.ensure_future(statement.done.wait())], timeout=10)

    async def cancel_all(self) -> None:
        for statement in self.statements.unfinished():
            await self.cancel(statement)
