"""Helpers for tests of the balancing roles: a backend whose queries run until the test lets them
finish, and waiting for a condition on a region's event loop."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

from balancer import Answer, Request
from tests.waiting import eventually


class Gate:
    """A node backend whose queries hold their slot until `finish(id)` (or `finish_all`)."""

    name = "simulation"

    def __init__(self) -> None:
        self.running: set[int] = set()
        self.max_running = 0
        self.seen: list[int] = []
        self._events: dict[int, asyncio.Event] = {}

    def info(self) -> dict[str, int]:
        return {}

    def _event(self, query_id: int) -> asyncio.Event:
        return self._events.setdefault(query_id, asyncio.Event())

    async def execute(self, request: Request) -> Answer:
        self.seen.append(request.id)
        self.running.add(request.id)
        self.max_running = max(self.max_running, len(self.running))
        try:
            await self._event(request.id).wait()
        finally:
            self.running.discard(request.id)
        return Answer(id=request.id, node="", rows=0)

    def finish(self, query_id: int) -> None:
        self._event(query_id).set()

    def finish_all(self) -> None:
        for query_id in list(self.running):
            self.finish(query_id)


async def _evaluate(predicate: Callable[[], Any]) -> Any:
    return predicate()


def until(region, predicate: Callable[[], Any], timeout: float = 10.0, what: str = "the condition") -> Any:
    """Wait until `predicate`, evaluated on the region's loop, is true; its value."""
    return eventually(lambda: region.call(_evaluate(predicate)), timeout, what)


def on_loop(region, function: Callable[[], Any]) -> Any:
    """Run a plain function on the region's loop (e.g. balancer.submit) and return its value."""
    return region.call(_evaluate(function))
