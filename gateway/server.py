"""The gateway: SQL over HTTP in front of one region.

    POST   /v1/statements                 submit {"sql", "params"?, "wait"?, "timeout"?, "max_rows"?,
                                          "tag"?, "client"?}; the answer when it finishes within
                                          `wait` seconds (200), else its id and state (202)
    GET    /v1/statements/{id}            state; once succeeded the columns and first chunk
                                          (`?wait=S` waits up to S seconds for the end)
    GET    /v1/statements/{id}/chunks/{n} result chunk n
    GET    /v1/statements/{id}/result     the whole result
    DELETE /v1/statements/{id}            cancel: out of the queue, or stopped on its nodes
    GET    /v1/tables                     tables, columns, placement
    GET    /v1/cluster                    the region: queue, nodes, slots
    GET    /healthz /readyz /metrics /openapi.json

Results are JSON, CSV or an Arrow IPC stream by `Accept`. Errors are JSON with a stable code,
an SQLSTATE-like class and a message. The balancer's links (routers, nodes) arrive on
/v1/cluster/connect.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
from typing import Any

from aiohttp import web

from balancer.journal import Journal
from balancer.region_balancer import Overloaded, RegionBalancer
from gateway import results
from gateway.auth import Auth
from gateway.config import Config, SparkFactory, TokenConfig
from gateway.errors import ApiError, bad_request, timeout
from gateway.executors import NativeExecutor, PassThroughExecutor, Prepared
from gateway.metrics import Metrics
from gateway.openapi import document
from gateway.statements import CANCELLED, FAILED, RUNNING, SUCCEEDED, Statement, Statements

log = logging.getLogger("cxg.gateway")


class Gateway:
    """The region's front door. `spark` is the region's Spark session factory, handed in by
    whoever composes the region (joins fail without one)."""

    def __init__(self, config: Config, spark: SparkFactory | None = None):
        self.config = config
        g = config.gateway
        self.balancer = RegionBalancer(
            g.region,
            g.max_queue,
            g.cluster_token or None,
            Journal(g.log_dir or None, "balancer", f"region-{g.region}"),
            backend=config.region.backend,
        )
        self.balancer.pool.free_slot_first = config.region.dispatch == "free-slot-first"
        if config.region.backend == "native":
            self.executor = NativeExecutor(self.balancer, config.spark.settings(), spark)
        else:
            self.executor = PassThroughExecutor(self.balancer, config.region.backend)
        self.auth = Auth(g.tokens)
        self.statements = Statements(g.result_ttl)
        self.metrics = Metrics(self.balancer, self.statements.running)
        self._watcher: asyncio.Task | None = None

    # ---- submitting -----------------------------------------------------------------------------

    async def submit(self, request: web.Request) -> web.StreamResponse:
        token = self.auth.identify(request)
        body = await _body(request)
        g = self.config.gateway
        sql = body.get("sql")
        if not isinstance(sql, str) or not sql.strip():
            raise bad_request('the request needs "sql": the query text')
        params = body.get("params") or {}
        if not isinstance(params, dict):
            raise bad_request('"params" must be an object of name -> value')
        wait = _number(body, "wait", g.wait, 0, g.max_wait)
        limit_s = _number(body, "timeout", g.query_timeout, 0.001, g.query_timeout)
        max_rows = int(_number(body, "max_rows", g.max_rows, 0, g.max_rows))
        tag = body.get("tag") or ""
        client = body.get("client", 0)
        if not isinstance(tag, str) or not isinstance(client, int) or not 0 <= client < 1_000_000:
            raise bad_request('"tag" must be a string and "client" an integer in 0..999999')
        fmt = _format(request)
        self._admit(token)
        statement = Statement(self.balancer.new_id(client), sql, token.name, tag, client)
        try:
            if self.executor.blocking_prepare:
                loop = asyncio.get_running_loop()
                prepared = await loop.run_in_executor(None, self.executor.prepare, sql, params, tag)
            else:
                prepared = self.executor.prepare(sql, params, tag)
            if not prepared.local:
                self._check_capacity()
        except Exception as e:
            error = ApiError.of(e)
            self.metrics.rejected.labels(error.code).inc()
            raise error from None
        statement.mark("prepare")
        self.statements.add(statement)
        self.metrics.admitted.inc()
        statement.task = asyncio.create_task(self._execute(statement, prepared, limit_s, max_rows))
        try:
            await asyncio.wait_for(asyncio.shield(statement.done.wait()), wait)
        except TimeoutError:
            pass
        except asyncio.CancelledError:  # the client went away: so does its query
            await self._cancel(statement)
            raise
        return self._answer(request, statement, fmt, final_errors=True)

    def _admit(self, token: TokenConfig) -> None:
        if self.statements.active(token.name) >= token.max_concurrent:
            self.metrics.rejected.labels("too_many_queries").inc()
            raise ApiError(
                429,
                "too_many_queries",
                f"token {token.name!r} already has {token.max_concurrent} queries queued or running",
                "53000",
                retry_after=1,
            )

    def _check_capacity(self) -> None:
        if not self.balancer.pool.members:
            raise Overloaded("no_nodes", f"region {self.balancer.region} has no connected node")
        if len(self.balancer.queue) >= self.balancer.max_queue:
            raise Overloaded("queue_full", f"the region's queue is full ({self.balancer.max_queue} queries)")

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
            statement.result, statement.truncated = results.limit(table, max_rows, self.config.gateway.max_bytes)
        except TimeoutError:
            state, error = FAILED, timeout(limit_s)
        except asyncio.CancelledError:
            state, error = CANCELLED, ApiError(409, "cancelled", "query cancelled", "57014")
        except Exception as e:
            error = ApiError.of(e)
            if error.code == "internal_error":
                log.exception("statement %s failed", statement.id)
            state = CANCELLED if error.code == "cancelled" else FAILED
        statement.queue_length = len(self.balancer.queue)
        statement.finish(state, error)
        self.statements.finished(statement)
        self.metrics.finished.labels(state).inc()
        self.metrics.observe(statement.timings)

    async def _cancel(self, statement: Statement) -> None:
        if statement.task is not None and not statement.finished:
            statement.task.cancel()
            await asyncio.wait([asyncio.ensure_future(statement.done.wait())], timeout=10)

    # ---- answering ------------------------------------------------------------------------------

    def _answer(self, request: web.Request, statement: Statement, fmt: str, final_errors: bool) -> web.StreamResponse:
        base = _base(request)
        doc_headers = {"X-Cxg-Statement-Id": str(statement.id)}
        if not statement.finished:
            headers = {**doc_headers, "Location": f"{base}/v1/statements/{statement.id}"}
            return web.json_response(
                statement.document(base, self.config.gateway.chunk_rows), status=202, headers=headers
            )
        if statement.error is not None and (final_errors or fmt != results.JSON):
            return statement.error.response(id=str(statement.id), state=statement.state)
        if fmt == results.JSON or statement.state != SUCCEEDED:
            return web.json_response(statement.document(base, self.config.gateway.chunk_rows), headers=doc_headers)
        return self._bytes(statement.result, fmt, statement)

    def _bytes(self, table, fmt: str, statement: Statement) -> web.Response:
        headers = {
            "X-Cxg-Statement-Id": str(statement.id),
            "X-Cxg-Row-Count": str(table.num_rows),
            "X-Cxg-Truncated": str(statement.truncated).lower(),
        }
        content_type = "text/csv; charset=utf-8" if fmt == results.CSV else results.ARROW
        return web.Response(body=results.render(table, fmt), headers={**headers, "Content-Type": content_type})

    def _owned(self, request: web.Request) -> Statement:
        token = self.auth.identify(request)
        statement = self.statements.get(request.match_info["id"])
        if statement is None:
            raise ApiError(
                404, "statement_not_found", f"no statement {request.match_info['id']} (or it expired)", "42704"
            )
        if self.auth.enabled and statement.owner != token.name:
            raise ApiError(403, "forbidden", f"statement {statement.id} belongs to another token", "42501")
        return statement

    async def status(self, request: web.Request) -> web.StreamResponse:
        statement = self._owned(request)
        fmt = _format(request)
        wait = _query_number(request, "wait", 0.0, 0, self.config.gateway.max_wait)
        if wait and not statement.finished:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(asyncio.shield(statement.done.wait()), wait)
        return self._answer(request, statement, fmt, final_errors=False)

    def _finished_result(self, statement: Statement):
        if statement.state == SUCCEEDED:
            return statement.result
        if statement.error is not None:
            raise ApiError(
                statement.error.status, statement.error.code, statement.error.message, statement.error.sqlstate
            )
        raise ApiError(409, "result_not_ready", f"statement {statement.id} is {statement.state}", "55000", 1)

    async def chunk(self, request: web.Request) -> web.StreamResponse:
        statement = self._owned(request)
        fmt = _format(request)
        table = self._finished_result(statement)
        try:
            index = int(request.match_info["n"])
        except ValueError:
            raise bad_request("the chunk number must be an integer") from None
        rows = self.config.gateway.chunk_rows
        count = results.chunk_count(table, rows)
        if not 0 <= index < count:
            raise ApiError(404, "chunk_not_found", f"statement {statement.id} has chunks 0..{count - 1}", "42704")
        part = results.chunk(table, index, rows)
        if fmt != results.JSON:
            return self._bytes(part, fmt, statement)
        base = _base(request)
        nxt = f"{base}/v1/statements/{statement.id}/chunks/{index + 1}" if index + 1 < count else None
        return web.json_response(
            {"id": str(statement.id), "chunk": index, "rows": results.json_rows(part), "next": nxt}
        )

    async def result(self, request: web.Request) -> web.StreamResponse:
        statement = self._owned(request)
        fmt = _format(request)
        table = self._finished_result(statement)
        if fmt != results.JSON:
            return self._bytes(table, fmt, statement)
        return web.json_response(
            {
                "id": str(statement.id),
                "columns": results.columns(table.schema),
                "rows": results.json_rows(table),
                "row_count": table.num_rows,
                "truncated": statement.truncated,
            }
        )

    async def cancel(self, request: web.Request) -> web.Response:
        statement = self._owned(request)
        await self._cancel(statement)
        return web.json_response({"id": str(statement.id), "state": statement.state})

    # ---- region and service ---------------------------------------------------------------------

    async def tables(self, request: web.Request) -> web.Response:
        self.auth.identify(request)
        tables = await asyncio.get_running_loop().run_in_executor(None, self.executor.tables)
        return web.json_response({"tables": tables})

    async def cluster(self, request: web.Request) -> web.Response:
        self.auth.identify(request)
        states = dict(self.statements.totals)
        for statement in self.statements.unfinished():
            states[statement.state] = states.get(statement.state, 0) + 1
        return web.json_response(
            {"backend": self.config.region.backend, "statements": states, **self.balancer.snapshot()}
        )

    async def healthz(self, request: web.Request) -> web.Response:
        return web.json_response({"status": "ok"})

    async def readyz(self, request: web.Request) -> web.Response:
        nodes = len(self.balancer.nodes())
        ready = nodes > 0
        return web.json_response({"ready": ready, "nodes": nodes}, status=200 if ready else 503)

    async def metrics_page(self, request: web.Request) -> web.Response:
        return web.Response(body=self.metrics.render(), content_type="text/plain", charset="utf-8")

    async def openapi(self, request: web.Request) -> web.Response:
        return web.json_response(document())

    async def _watch(self) -> None:
        """Keep the engine's view of the nodes in step with the region's membership."""
        while True:
            self.executor.nodes_changed(self.balancer.nodes())
            await self.balancer.membership_changed()

    async def _start(self, app: web.Application) -> None:
        self._watcher = asyncio.create_task(self._watch())

    async def _stop(self, app: web.Application) -> None:
        for statement in self.statements.unfinished():
            await self._cancel(statement)
        if self._watcher is not None:
            self._watcher.cancel()
        self.executor.close()
        self.balancer.journal.close()

    def app(self) -> web.Application:
        app = web.Application(middlewares=[_errors], client_max_size=16 * 1024 * 1024)
        app.add_routes(
            [
                web.post("/v1/statements", self.submit),
                web.get("/v1/statements/{id}", self.status),
                web.get("/v1/statements/{id}/chunks/{n}", self.chunk),
                web.get("/v1/statements/{id}/result", self.result),
                web.delete("/v1/statements/{id}", self.cancel),
                web.get("/v1/tables", self.tables),
                web.get("/v1/cluster", self.cluster),
                web.get("/v1/cluster/connect", self.balancer.connect),
                web.get("/healthz", self.healthz),
                web.get("/readyz", self.readyz),
                web.get("/metrics", self.metrics_page),
                web.get("/openapi.json", self.openapi),
            ]
        )
        app.on_startup.append(self._start)
        app.on_shutdown.append(self._stop)
        return app


@web.middleware
async def _errors(request: web.Request, handler) -> web.StreamResponse:
    try:
        return await handler(request)
    except ApiError as e:
        return e.response()
    except web.HTTPException as e:
        if e.status < 400:
            raise
        code = {404: "not_found", 405: "method_not_allowed", 413: "request_too_large"}.get(e.status, "http_error")
        return ApiError(e.status, code, f"{e.reason}: {request.method} {request.path}", "42000").response()


async def _body(request: web.Request) -> dict[str, Any]:
    text = await request.text()
    if request.content_type in ("text/plain", "application/sql"):
        return {"sql": text}
    try:
        body = json.loads(text)
    except json.JSONDecodeError as e:
        raise bad_request(f"the body is not valid JSON: {e}") from None
    if not isinstance(body, dict):
        raise bad_request('the body must be a JSON object like {"sql": "SELECT 1"}')
    return body


def _number(body: dict[str, Any], key: str, default: float, low: float, high: float) -> float:
    value = body.get(key, default)
    if value is None:
        return default
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not low <= value <= high:
        raise bad_request(f'"{key}" must be a number in {low:g}..{high:g}')
    return float(value)


def _query_number(request: web.Request, key: str, default: float, low: float, high: float) -> float:
    text = request.query.get(key)
    if text is None:
        return default
    try:
        return _number({key: float(text)}, key, default, low, high)
    except ValueError:
        raise bad_request(f"?{key} must be a number") from None


def _format(request: web.Request) -> str:
    try:
        return results.negotiate(request.headers.get("Accept"))
    except results.NotAcceptable as e:
        raise ApiError(406, e.code, str(e), "42000") from None


def _base(request: web.Request) -> str:
    return f"{request.scheme}://{request.host}"
