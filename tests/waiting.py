"""Waiting for a state instead of sleeping for it: a test asks for what it needs (a server up, a query
running, a queue drained) and goes on the moment it holds, or fails saying what it waited for. A sleep
guesses how long another process takes, which is too long on a quiet machine and too short on a busy one."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from typing import TypeVar

T = TypeVar("T")


class _Watch:
    """One wait's deadline and the last thing the condition said, for the failure message."""

    def __init__(self, timeout: float, what: str, ignoring: tuple[type[BaseException], ...]) -> None:
        self.deadline = time.monotonic() + timeout
        self.timeout, self.what, self.ignoring = timeout, what, ignoring
        self.last: object = None

    def holds(self, condition: Callable[[], T]) -> T | None:
        try:
            self.last = condition()
        except self.ignoring as e:  # not there yet (e.g. a server that does not listen yet)
            self.last = e
            return None
        return self.last if self.last else None

    def check_time(self) -> None:
        if time.monotonic() > self.deadline:
            raise AssertionError(f"waited {self.timeout:g} s for {self.what}; last: {self.last!r}")


def eventually(
    condition: Callable[[], T],
    timeout: float = 30.0,
    what: str = "the condition",
    interval: float = 0.05,
    ignoring: tuple[type[BaseException], ...] = (),
) -> T:
    """Call `condition` until it returns a true value, and return that value; fail after `timeout`
    seconds naming `what`. An exception of a type in `ignoring` counts as not yet; any other
    (e.g. an assert that the awaited process is still alive) fails at once."""
    watch = _Watch(timeout, what, ignoring)
    while (value := watch.holds(condition)) is None:
        watch.check_time()
        time.sleep(interval)
    return value


async def eventually_async(
    condition: Callable[[], T],
    timeout: float = 30.0,
    what: str = "the condition",
    interval: float = 0.005,
    ignoring: tuple[type[BaseException], ...] = (),
) -> T:
    """`eventually` for a test running on an event loop: the loop serves others between looks."""
    watch = _Watch(timeout, what, ignoring)
    while (value := watch.holds(condition)) is None:
        watch.check_time()
        await asyncio.sleep(interval)
    return value
