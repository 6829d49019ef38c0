"""/v1/statements: submitting a query, its state, its result whole or in chunks, cancelling it.

Results are JSON, CSV or an Arrow IPC stream by `Accept`. Whoever submitted a statement may
read or cancel it (when tokens are configured, no other token may)."""

from __future__ import annotations

import asyncio
import json
from dataclasses import dataclass
from typing import Any

import pyarrow as pa
from aiohttp import web

from gateway import results
from gateway.auth import Auth
from gateway.config import GatewayConfig
from gateway.errors import ApiError, bad_request
from gateway.lifecycle import StatementLifecycle
from gateway.sql.progress import heard
from gateway.statements import STATES, SUCCEEDED, Statement, StatementOfEarlierRun, Statements

LISTED, MAX_LISTED = 100, 10_000  # statements GET /v1/statements lists by default, at most


@dataclass(eq=False)
class StatementHandlers:
    settings: GatewayConfig
    auth: Auth
    statements: Statements
    lifecycle: StatementLifecycle

    def routes(self) -> list[web.RouteDef]:
        return [
            web.post("/v1/statements", self.submit),
            web.get("/v1/statements", self.listing),
            web.get("/v1/statements/{id}", self.status),
            web.get("/v1/statements/{id}/chunks/{n}", self.chunk),
            web.get("/v1/statements/{id}/result", self.result),
            web.delete("/v1/statements/{id}", self.cancel),
        ]

    async def submit(self, request: web.Request) -> web.StreamResponse:
        token = self.auth.identify(request)
        body = await _body(request)
        g = self.settings
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
        statement = await self.lifecycle.submit(token, sql, params, tag, client, limit_s, max_rows)
        try:
            await self.lifecycle.wait(statement, wait)
        except asyncio.CancelledError:  # the client went away: so does its query
            await self.lifecycle.cancel(statement)
            raise
        return self._answer(request, statement, fmt, final_errors=True)

    async def listing(self, request: web.Request) -> web.Response:
        """Running and recent statements, newest first (`?state=`, `?token=`, `?limit=`); a token
        sees its own."""
        sees = self.auth.sees(request)
        state = request.query.get("state")
        if state is not None and state not in STATES:
            raise bad_request(f"?state must be one of {', '.join(STATES)}")
        owner = request.query.get("token")
        if sees is not None and owner not in (None, sees):
            raise ApiError(403, "forbidden", f"a token sees its own statements ({sees!r}), not {owner!r}'s", "42501")
        limit = int(_query_number(request, "limit", LISTED, 1, MAX_LISTED))
        listed = self.statements.listing(state, sees if sees is not None else owner)
        await heard(s.progress for s in listed[:limit] if not s.finished)
        return web.json_response({"statements": [s.summary() for s in listed[:limit]], "total": len(listed)})

    async def status(self, request: web.Request) -> web.StreamResponse:
        statement = self._owned(request)
        fmt = _format(request)
        wait = _query_number(request, "wait", 0.0, 0, self.settings.max_wait)
        if wait and not statement.finished:
            await self.lifecycle.wait(statement, wait)
        if not statement.finished:
            await heard([statement.progress])
        return self._answer(request, statement, fmt, final_errors=False)

    async def chunk(self, request: web.Request) -> web.StreamResponse:
        statement = self._owned(request)
        fmt = _format(request)
        table = _finished_result(statement)
        try:
            index = int(request.match_info["n"])
        except ValueError:
            raise bad_request("the chunk number must be an integer") from None
        rows = self.settings.chunk_rows
        count = results.chunk_count(table, rows)
        if not 0 <= index < count:
            raise ApiError(404, "chunk_not_found", f"statement {statement.key} has chunks 0..{count - 1}", "42704")
        part = results.chunk(table, index, rows)
        if fmt != results.JSON:
            return _bytes(part, fmt, statement)
        base = _base(request)
        nxt = f"{base}/v1/statements/{statement.key}/chunks/{index + 1}" if index + 1 < count else None
        return web.json_response({"id": statement.key, "chunk": index, "rows": results.json_rows(part), "next": nxt})

    async def result(self, request: web.Request) -> web.StreamResponse:
        statement = self._owned(request)
        fmt = _format(request)
        table = _finished_result(statement)
        if fmt != results.JSON:
            return _bytes(table, fmt, statement)
        return web.json_response(
            {
                "id": statement.key,
                "columns": results.columns(table.schema),
                "rows": results.json_rows(table),
                "row_count": table.num_rows,
                "truncated": statement.truncated,
            }
        )

    async def cancel(self, request: web.Request) -> web.Response:
        statement = self._owned(request)
        await self.lifecycle.cancel(statement)
        return web.json_response({"id": statement.key, "state": statement.state})

    def _owned(self, request: web.Request) -> Statement:
        return owned(self.statements, self.auth, request)

    def _answer(self, request: web.Request, statement: Statement, fmt: str, final_errors: bool) -> web.StreamResponse:
        base = _base(request)
        doc_headers = {"X-Cxg-Statement-Id": statement.key}
        if not statement.finished:
            headers = {**doc_headers, "Location": f"{base}/v1/statements/{statement.key}"}
            return web.json_response(statement.document(base, self.settings.chunk_rows), status=202, headers=headers)
        if statement.error is not None and (final_errors or fmt != results.JSON):
            return statement.error.response(id=statement.key, state=statement.state)
        if fmt == results.JSON or statement.state != SUCCEEDED:
            return web.json_response(statement.document(base, self.settings.chunk_rows), headers=doc_headers)
        return _bytes(statement.result, fmt, statement)


def owned(statements: Statements, auth: Auth, request: web.Request) -> Statement:
    """The statement the request's path names, if the request's token submitted it (404 when
    unknown or expired, 410 when of an earlier run, 403 when another token's)."""
    token = auth.identify(request)
    key = request.match_info["id"]
    try:
        statement = statements.get(key)
    except StatementOfEarlierRun as e:
        raise ApiError(410, "statement_lost", str(e), "08006") from None
    if statement is None:
        raise ApiError(404, "statement_not_found", f"no statement {key} (or it expired)", "42704")
    if auth.enabled and statement.owner != token.name:
        raise ApiError(403, "forbidden", f"statement {statement.key} belongs to another token", "42501")
    return statement


def _finished_result(statement: Statement) -> pa.Table:
    if statement.state == SUCCEEDED and statement.result is not None:
        return statement.result
    if statement.error is not None:
        raise ApiError(statement.error.status, statement.error.code, statement.error.message, statement.error.sqlstate)
    raise ApiError(409, "result_not_ready", f"statement {statement.key} is {statement.state}", "55000", 1)


def _bytes(table: pa.Table, fmt: str, statement: Statement) -> web.Response:
    headers = {
        "X-Cxg-Statement-Id": statement.key,
        "X-Cxg-Row-Count": str(table.num_rows),
        "X-Cxg-Truncated": str(statement.truncated).lower(),
    }
    content_type = "text/csv; charset=utf-8" if fmt == results.CSV else results.ARROW
    return web.Response(body=results.render(table, fmt), headers={**headers, "Content-Type": content_type})


async def _body(request: web.Request) -> dict[str, Any]:
    try:
        text = (await request.read()).decode(request.charset or "utf-8")
    except (UnicodeDecodeError, LookupError) as e:
        raise bad_request(f"the body is not text in {request.charset or 'utf-8'}: {e}") from None
    if request.content_type in ("text/plain", "application/sql"):
        return {"sql": text}
    try:
        body = json.loads(text)
    except (json.JSONDecodeError, RecursionError) as e:
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
