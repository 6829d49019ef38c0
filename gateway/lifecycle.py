"""A statement's life in the gateway, apart from HTTP: admitted under its token's limit, prepared
by the region's executor, booked, run under its time limit, then finished, failed or cancelled
with its result cut to the configured size. The handlers only translate requests into these
calls and statements into answers."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from dataclasses import dataclass
from typing import Any

from balancer import RegionBalancer
from gateway import results
from gateway.config import GatewayConfig, TokenConfig
from gateway.errors import ApiError, timeout
from gateway.executors import Executor, Prepared, prepared_off_loop
from gateway.metrics import Metrics
from gateway.statements import CANCELLED, FAILED, RUNNING, SUCCEEDED, Statement, Statements

log = logging.getLogger("cxg.gateway")


@dataclass(eq=False)
class StatementLifecycle:
    settings: GatewayConfig
    balancer: RegionBalancer
    executor: Executor
    statements: Statements
    metrics: Metrics

    async def submit(
        self,
        token: TokenConfig,
        sql: str,
        params: dict[str, Any],
        tag: str,
        client: int,
        limit_s: float,
        max_rows: int,
    ) -> Statement:
        """Admit, prepare and start one query; its statement, running. An ApiError when it is
        refused (the token's limit, a full region, a query that does not prepare)."""
        self._admit(token)
        statement = Statement(self.balancer.new_id(client), sql, token.name, tag, client, max_rows)
        prepared: Prepared | None = None
        try:
            if self.executor.blocking_prepare:
                prepared = await prepared_off_loop(None, self.executor.prepare, sql, params, tag)
            else:
                prepared = self.executor.prepare(sql, params, tag)
            _check_tables(token, prepared)
            if not prepared.local:
                self.balancer.check_admission()
        except Exception as e:
            if prepared is not None:
                prepared.close()
            error = ApiError.of(e)
            if error.status < 500:  # a capacity refusal was counted where it was made
                self.metrics.invalid.labels(error.code).inc()
            raise error from None
        statement.mark("prepare")
        self.statements.add(statement)
        self.metrics.admitted.inc()
        statement.task = asyncio.create_task(self._execute(statement, prepared, limit_s, max_rows))
        statement.task.add_done_callback(lambda _: prepared.close())  # however it ended, even unstarted
        return statement

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

    async def _execute(self, statement: Statement, prepared: Prepared, limit_s: float, max_rows: int) -> None:
        def started(nodes: list[str]) -> None:
            statement.mark("queue")
            statement.state = RUNNING
            statement.nodes = nodes

        state, error = SUCCEEDED, None
        try:
            async with asyncio.timeout(limit_s):
                table = await self.executor.run(statement, prepared, started)
            statement.mark("execute")
            statement.result, statement.truncated = results.limit(table, max_rows, self.settings.result_bytes)
        except TimeoutError:
            state, error = FAILED, timeout(limit_s)
        except asyncio.CancelledError:
            state, error = CANCELLED, ApiError(409, "cancelled", "query cancelled", "57014")
        except Exception as e:
            error = ApiError.of(e)
            if error.code == "internal_error":
                log.exception("statement %s failed", statement.id)
            state = CANCELLED if error.code == "cancelled" else FAILED
        statement.queue_length = self.balancer.queue_length
        statement.finish(state, error)
        self.statements.finished(statement)
        self.metrics.finished.labels(state).inc()
        self.metrics.observe(statement.timings)

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


def _check_tables(token: TokenConfig, prepared: Prepared) -> None:
    """403 when the token may read only some tables and the query reads another (or reads tables
    the backend does not name: only the native one does)."""
    if not token.tables:
        return
    if prepared.tables is None:
        raise ApiError(403, "forbidden_table", "this token may read only some tables: the native backend only", "42501")
    allowed = {name.lower() for name in token.tables}
    refused = sorted(prepared.tables - allowed)
    if refused:
        raise ApiError(403, "forbidden_table", f"token {token.name!r} may not read {', '.join(refused)}", "42501")
