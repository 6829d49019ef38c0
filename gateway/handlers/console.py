"""/ and /console: the web console, static files shipped in the package (no build step). The page
uses the public HTTP API only; its Content Security Policy lets the browser run and load nothing
but the gateway's own files."""

from __future__ import annotations

from pathlib import Path

from aiohttp import web

CONSOLE = Path(__file__).resolve().parent.parent / "console"
HEADERS = {
    "Content-Security-Policy": "default-src 'self'; img-src 'self' data:; frame-ancestors 'none'",
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "no-referrer",
}


class ConsoleHandlers:
    def routes(self) -> list[web.RouteDef]:
        return [web.get("/", self.page), web.static("/console", CONSOLE)]

    async def page(self, request: web.Request) -> web.StreamResponse:
        return web.FileResponse(CONSOLE / "index.html", headers={**HEADERS, "Cache-Control": "no-cache"})
