"""/v1/tables/{name}/rows: rows appended to a table as its new version (`gateway.appends`), for
the tokens allowed to (`gateway.tokens[].appends`). The query endpoint stays read-only."""

from __future__ import annotations

import asyncio
from dataclasses import asdict, dataclass

from aiohttp import web

from gateway.auth import Auth
from gateway.config import GatewayConfig
from gateway.errors import ApiError
from gateway.executors import Executor


@dataclass(eq=False)
class AppendHandlers:
    settings: GatewayConfig
    auth: Auth
    executor: Executor

    def routes(self) -> list[web.RouteDef]:
        return [web.post("/v1/tables/{name}/rows", self.append)]

    async def append(self, request: web.Request) -> web.Response:
        """The rows of the body appended (201 with the table's new version), or refused whole."""
        name = request.match_info["name"]
        self.auth.appender(request, name)
        limit = self.settings.max_append_bytes
        body = bytearray()
        async for piece in request.content.iter_chunked(1 << 16):
            body += piece
            if len(body) > limit:
                raise ApiError(
                    413, "append_too_large", f"an append's body is at most {limit:,} bytes (gateway.max_append_bytes)"
                )
        loop = asyncio.get_running_loop()
        appended = await loop.run_in_executor(None, self.executor.append, name, bytes(body), request.content_type)
        return web.json_response(asdict(appended), status=201)
