"""Running one role as a process: its aiohttp application and its link upstream, until
SIGINT/SIGTERM; with a `drain` step, the role first finishes what it runs (taking nothing new)
while it still serves, then stops."""

from __future__ import annotations

import asyncio
import contextlib
import signal
import ssl
import time
from collections.abc import Awaitable, Callable, Coroutine
from typing import Any

from aiohttp import web

SETTLE_EVERY_S = 0.05  # how often `settled` looks


async def settled(done: Callable[[], bool], timeout: float) -> bool:
    """Wait until `done()` holds, `timeout` seconds at most; whether it does."""
    deadline = time.monotonic() + timeout
    while not done():
        if time.monotonic() >= deadline:
            return False
        await asyncio.sleep(SETTLE_EVERY_S)
    return True


async def serve(
    app: web.Application,
    host: str,
    port: int,
    work: Callable[[asyncio.Event], Coroutine[Any, Any, None]] | None = None,
    tls: ssl.SSLContext | None = None,
    drain: Callable[[], Awaitable[None]] | None = None,
) -> None:
    """Serve `app` on host:port (HTTPS with `tls`) and run `work(stop)` beside it until a signal.
    Then `drain()` runs first, with the application and `work` still going (a second signal cuts
    it short), and both end after it."""
    stopping, stop = asyncio.Event(), asyncio.Event()

    def signalled() -> None:
        if stopping.is_set():
            stop.set()
        stopping.set()

    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, signalled)
    runner = web.AppRunner(app, handler_cancellation=True, access_log=None)
    await runner.setup()
    await web.TCPSite(runner, host, port, ssl_context=tls).start()
    task = asyncio.create_task(work(stop)) if work else None
    try:
        await stopping.wait()
        if drain is not None:
            draining, cut = asyncio.create_task(drain()), asyncio.create_task(stop.wait())
            await asyncio.wait([draining, cut], return_when=asyncio.FIRST_COMPLETED)
            for step in (draining, cut):
                step.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await step  # a drain that failed says why
        stop.set()
    finally:
        if task is not None:
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)
        await runner.cleanup()
