"""Links between the roles: a node or router dials its upstream (a router or the region's
balancer) over a WebSocket, says `Hello`, then both sides exchange packets until one goes away.
The dialling side reconnects with a growing pause, as PerformSys servers did."""

from __future__ import annotations

import abc
import asyncio
import contextlib
import logging
import ssl
from collections.abc import AsyncIterator, Awaitable, Callable

import aiohttp
from aiohttp import web

from balancer.packets import Hello, Packet, PacketError, decode, encode

log = logging.getLogger("cxg.link")
CONNECT_PATH = "/v1/cluster/connect"
HEARTBEAT = 10.0  # a member's pings to its upstream; a silent upstream is left after 1.5 times that
# the balancer's (and a router's) pings to its members: a hung or dead node is dropped within 0.75 s
# of silence, its queries failed with a retryable error and its slots no longer offered
MEMBER_HEARTBEAT = 0.5  # a ping after 0.5 s of silence, its pong due within 0.25 s
MAX_MESSAGE = 1 << 30  # an answer can carry a large result


class Link:
    """One WebSocket between two roles; sends are serialized, packets arrive in order."""

    def __init__(self, ws: web.WebSocketResponse | aiohttp.ClientWebSocketResponse, peer: str):
        self.ws = ws
        self.peer = peer
        self._lock = asyncio.Lock()

    async def send(self, packet: Packet) -> bool:
        """Send one packet; False when the link is already gone."""
        if self.ws.closed:
            return False
        async with self._lock:
            try:
                await self.ws.send_bytes(encode(packet))
            except (ConnectionError, RuntimeError, aiohttp.ClientError):
                return False
        return True

    async def packets(self) -> AsyncIterator[Packet]:
        async for message in self.ws:
            if message.type != aiohttp.WSMsgType.BINARY:
                if message.type == aiohttp.WSMsgType.ERROR:
                    log.warning("link to %s failed: %s", self.peer, self.ws.exception())
                continue
            try:
                yield decode(message.data)
            except PacketError as e:
                log.warning("dropped a malformed packet from %s: %s", self.peer, e)

    async def close(self) -> None:
        await self.ws.close()


def authorized(request: web.Request, token: str | None) -> bool:
    return not token or request.headers.get("Authorization") == f"Bearer {token}"


async def accept(
    request: web.Request, token: str | None, serve: Callable[[Link, Hello], Awaitable[None]]
) -> web.StreamResponse:
    """The upstream side of a link: check the token, read `Hello`, then hand the link to `serve`
    until the peer goes away."""
    if not authorized(request, token):
        raise web.HTTPUnauthorized(text="cluster token required")
    ws = web.WebSocketResponse(heartbeat=MEMBER_HEARTBEAT, max_msg_size=MAX_MESSAGE, compress=False)
    await ws.prepare(request)
    link = Link(ws, f"{request.remote}")
    try:
        first = await ws.receive_bytes(timeout=30)
        hello = decode(first)
    except (TypeError, PacketError, TimeoutError) as e:
        log.warning("closing a link from %s that did not start with hello: %s", request.remote, e)
        await ws.close()
        return ws
    if not isinstance(hello, Hello):
        await ws.close()
        return ws
    link.peer = hello.name
    await serve(link, hello)
    return ws


async def dial(
    url: str,
    hello: Callable[[], Hello],
    serve: Callable[[Link], Awaitable[None]],
    token: str | None = None,
    stop: asyncio.Event | None = None,
    tls: ssl.SSLContext | None = None,
) -> None:
    """The downstream side: connect to `url` (an https one verified with `tls`, default: the
    system's authorities), send `hello()`, run `serve(link)` until the link drops, then reconnect
    (0.1 s pause doubling to 2 s) until `stop` is set."""
    stop = stop or asyncio.Event()
    pause = 0.1
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    target = url.rstrip("/") + CONNECT_PATH if not url.rstrip("/").endswith(CONNECT_PATH) else url
    async with aiohttp.ClientSession() as session:
        while not stop.is_set():
            try:
                async with session.ws_connect(
                    target, heartbeat=HEARTBEAT, max_msg_size=MAX_MESSAGE, headers=headers, compress=0, ssl=tls or True
                ) as ws:
                    link = Link(ws, url)
                    await link.send(hello())
                    pause = 0.1
                    log.info("connected to %s", url)
                    await serve(link)
                    log.warning("link to %s closed", url)
            except (aiohttp.ClientError, OSError) as e:
                log.debug("cannot reach %s: %s", url, e)
            if stop.is_set():
                break
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stop.wait(), pause)
            pause = min(pause * 2, 2.0)


class Dialler(abc.ABC):
    """A role that keeps a link to its upstream (a node, a router): `hello` introduces it on each
    connection, `serve_upstream` talks on the link until it drops."""

    @abc.abstractmethod
    def hello(self) -> Hello: ...

    @abc.abstractmethod
    async def serve_upstream(self, link: Link) -> None: ...

    async def run(
        self,
        upstream: str,
        token: str | None = None,
        stop: asyncio.Event | None = None,
        tls: ssl.SSLContext | None = None,
    ) -> None:
        """Dial `upstream` (an https one verified with `tls`) and serve it until `stop` is set."""
        await dial(upstream, self.hello, self.serve_upstream, token, stop, tls)
