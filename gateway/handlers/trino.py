"""/v1/statement: the Trino client protocol, a second front door to the same statements.

A client posts the SQL, then follows `nextUri` (each GET waits up to a second for the statement
to finish, then answers its data a page at a time) until there is none; DELETE on `nextUri`
cancels. Admission, limits, the tokens' tables and cancellation are the service's own
(`gateway.lifecycle`); the documents are `gateway.trino_protocol`'s."""

from __future__ import annotations

import asyncio
import uuid
from dataclasses import dataclass

from aiohttp import web

from gateway import trino_protocol as protocol
from gateway.auth import Auth
from gateway.config import GatewayConfig
from gateway.errors import ApiError, bad_request
from gateway.handlers.region import software_versions
from gateway.handlers.statements import owned
from gateway.lifecycle import StatementLifecycle
from gateway.sql.progress import heard
from gateway.statements import Statements

LONG_POLL = 1.0  # seconds a GET on nextUri waits for the statement to finish


@dataclass(eq=False)
class TrinoHandlers:
    settings: GatewayConfig
    auth: Auth
    statements: Statements
    lifecycle: StatementLifecycle

    def routes(self) -> list[web.RouteDef]:
        return [
            web.post("/v1/statement", self.submit),
            web.get("/v1/statement/executing/{id}/{page}", self.next),
            web.delete("/v1/statement/executing/{id}/{page}", self.cancel),
            web.get("/v1/info", self.info),
        ]

    async def submit(self, request: web.Request) -> web.Response:
        token = self.auth.identify(request)
        try:
            sql = (await request.read()).decode(request.charset or "utf-8")
        except (UnicodeDecodeError, LookupError) as e:
            raise bad_request(f"the body is not text in {request.charset or 'utf-8'}: {e}") from None
        if not sql.strip():
            raise bad_request("the body must be the SQL statement")
        g = self.settings
        info = f"{_base(request)}/v1/statement"
        key = f"{self.statements.run}-%s-{uuid.uuid4().hex[:12]}"  # a document that is no statement
        try:
            session = protocol.Session.of(request.headers)
            changed = protocol.session_change(sql)
            if changed is not None:  # USE, SET SESSION, PREPARE ...: the client keeps its session
                kind, headers = changed
                return web.json_response(protocol.session_document(key % "session", kind, info), headers=headers)
            limit_s = session.time_limit(g.query_timeout)
            sql = session.statement(sql)
            statement = await self.lifecycle.submit(token, sql, {}, session.source, 0, limit_s, g.max_rows)
        except ApiError as e:  # refused before it ran: answered as a failed query, as Trino does
            return web.json_response(protocol.failed_document(key % "refused", e, info))
        return web.json_response(protocol.document(statement, _base(request), 0))

    async def next(self, request: web.Request) -> web.Response:
        statement = owned(self.statements, self.auth, request)
        page = _page(request)
        if not statement.finished:
            try:
                await self.lifecycle.wait(statement, LONG_POLL)
            except asyncio.CancelledError:  # the client went away: so does its query
                await self.lifecycle.cancel(statement)
                raise
        if not statement.finished:
            await heard([statement.progress])
        return web.json_response(protocol.document(statement, _base(request), page))

    async def cancel(self, request: web.Request) -> web.Response:
        statement = owned(self.statements, self.auth, request)
        _page(request)
        await self.lifecycle.cancel(statement)
        return web.Response(status=204)

    async def info(self, request: web.Request) -> web.Response:
        version = software_versions()["cxg"] or "unknown"
        return web.json_response(
            {"nodeVersion": {"version": version}, "environment": "cxg", "coordinator": True, "starting": False}
        )


def _page(request: web.Request) -> int:
    try:
        page = int(request.match_info["page"])
    except ValueError:
        page = -1
    if page < 0:
        raise ApiError(404, "page_not_found", f"no page {request.match_info['page']!r} of a statement", "42704")
    return page


def _base(request: web.Request) -> str:
    return f"{request.scheme}://{request.host}"
