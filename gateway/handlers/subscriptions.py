"""/v1/subscriptions: standing queries (`gateway.subscriptions`) registered, read, ended, and their
changes pushed as Server-Sent Events (`/events`) or WebSocket messages (`/ws`): first the current
result (``snapshot``), then each ``update`` (the rows changed and the groups gone, with the
version they cover), and ``ended`` when the subscription is deleted. A token sees its own."""

from __future__ import annotations

import asyncio
import contextlib
import functools
import json
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, TypeVar

from aiohttp import web

from gateway.auth import Auth
from gateway.errors import ApiError, bad_request
from gateway.executors import Executor
from gateway.media import EVENT_STREAM
from gateway.subscriptions import Subscription, Subscriptions, queue_listener

T = TypeVar("T")

HEARTBEAT_S = 15.0  # an SSE comment line this often keeps proxies from closing an idle stream
MIN_EVERY_S, MAX_EVERY_S = 0.05, 86_400.0  # the consolidation interval a subscription may ask for


@dataclass(eq=False)
class SubscriptionHandlers:
    auth: Auth
    executor: Executor

    def routes(self) -> list[web.RouteDef]:
        return [
            web.post("/v1/subscriptions", self.register),
            web.get("/v1/subscriptions", self.listing),
            web.get("/v1/subscriptions/{id}", self.read),
            web.delete("/v1/subscriptions/{id}", self.delete),
            web.get("/v1/subscriptions/{id}/events", self.events),
            web.get("/v1/subscriptions/{id}/ws", self.websocket),
        ]

    @property
    def _subscriptions(self) -> Subscriptions:
        if self.executor.subscriptions is None:
            raise ApiError(
                422, "subscriptions_unsupported", f"a {self.executor.backend} region keeps no standing queries"
            )
        return self.executor.subscriptions

    async def register(self, request: web.Request) -> web.Response:
        token = self.auth.identify(request)
        subscriptions = self._subscriptions
        try:
            body = await request.json()
        except (json.JSONDecodeError, UnicodeDecodeError):
            raise bad_request('the request needs a JSON object with "sql": the standing query') from None
        if not isinstance(body, dict):
            raise bad_request('the request needs a JSON object with "sql": the standing query')
        sql, event_time, every = body.get("sql"), body.get("event_time"), body.get("consolidate_every", 60.0)
        if not isinstance(sql, str) or not sql.strip():
            raise bad_request('the request needs "sql": the standing query')
        if event_time is not None and not isinstance(event_time, str):
            raise bad_request('"event_time" is the name of the column of the rows\' event time')
        if isinstance(every, bool) or not isinstance(every, int | float) or not MIN_EVERY_S <= every <= MAX_EVERY_S:
            raise bad_request(f'"consolidate_every" is a number of seconds from {MIN_EVERY_S:g} to {MAX_EVERY_S:g}')
        register = functools.partial(subscriptions.register, sql, token.name, tuple(token.tables), event_time, every)
        subscription = await asyncio.get_running_loop().run_in_executor(None, register)
        return web.json_response(_document(subscription, request), status=201)

    async def listing(self, request: web.Request) -> web.Response:
        owner = self.auth.sees(request)
        listed = await _off_loop(self._subscriptions.listing, owner)  # kept ones may be computed again
        return web.json_response({"subscriptions": [_summary(s) for s in listed]})

    async def read(self, request: web.Request) -> web.Response:
        subscription = await self._owned(request)
        return web.json_response(await _off_loop(_document, subscription, request))

    async def delete(self, request: web.Request) -> web.Response:
        subscription = await self._owned(request)
        await _off_loop(self._subscriptions.delete, subscription.id, self.auth.sees(request))  # tells the nodes
        return web.json_response({"id": subscription.id, "deleted": True})

    async def events(self, request: web.Request) -> web.StreamResponse:
        subscription = await self._owned(request)
        response = web.StreamResponse(headers={"Content-Type": EVENT_STREAM, "Cache-Control": "no-cache"})
        await response.prepare(request)
        async for kind, data in _pushed(subscription):
            if kind == "heartbeat":
                await response.write(b": heartbeat\n\n")
            else:
                await response.write(f"event: {kind}\ndata: {json.dumps(data)}\n\n".encode())
            if kind == "ended":
                break
        return response

    async def websocket(self, request: web.Request) -> web.WebSocketResponse:
        subscription = await self._owned(request)
        socket = web.WebSocketResponse(heartbeat=HEARTBEAT_S)
        await socket.prepare(request)
        async for kind, data in _pushed(subscription):
            if socket.closed:
                break
            if kind != "heartbeat":
                await socket.send_json({"event": kind, **data})
            if kind == "ended":
                break
        await socket.close()
        return socket

    async def _owned(self, request: web.Request) -> Subscription:
        """The subscription the path names, if the request's token may see it (a kept one computed
        again first, off the loop)."""
        return await _off_loop(self._subscriptions.get, request.match_info["id"], self.auth.sees(request))


async def _off_loop(work: Callable[..., T], *args: Any) -> T:
    """`work` run in a thread (computing a state or a result): the loop serves others meanwhile."""
    return await asyncio.get_running_loop().run_in_executor(None, work, *args)


async def _pushed(subscription: Subscription):
    """The events of a subscription for one listener: its snapshot, then each update as it comes
    (a heartbeat when none came for `HEARTBEAT_S`), until it is deleted."""
    queue: asyncio.Queue = asyncio.Queue()
    listener = queue_listener(asyncio.get_running_loop(), queue)
    subscription.listeners.append(listener)
    try:
        yield "snapshot", await _off_loop(_snapshot, subscription)
        while True:
            try:
                update = await asyncio.wait_for(queue.get(), HEARTBEAT_S)
            except TimeoutError:
                yield "heartbeat", {}
                continue
            yield ("ended" if update.get("ended") else "update"), update
    finally:
        with contextlib.suppress(ValueError):
            subscription.listeners.remove(listener)


def _snapshot(subscription: Subscription) -> dict[str, Any]:
    doc = subscription.document()
    return {k: doc[k] for k in ("id", "table", "version", "columns", "keys", "rows")} | {"subscription": doc["id"]}


def _summary(subscription: Subscription) -> dict[str, Any]:
    s = subscription
    return {
        "id": s.id,
        "sql": s.sql,
        "table": s.plan.table,
        "version": s.version,
        "updates": s.updates,
        "consolidations": s.consolidations,
    }


def _document(subscription: Subscription, request: web.Request) -> dict[str, Any]:
    base = f"{request.scheme}://{request.host}/v1/subscriptions/{subscription.id}"
    ws = base.replace("http", "ws", 1)
    return subscription.document() | {"events": f"{base}/events", "ws": f"{ws}/ws"}
