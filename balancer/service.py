"""Running one role as a process: its aiohttp application and its link upstream, until
SIGINT/SIGTERM."""

from __future__ import annotations

import asyncio
import signal
import ssl
from collections.abc import Callable, Coroutine
from typing import Any

from aiohttp import web


async def serve(
    app: web.Application,
    host: str,
    port: int,
    work: Callable[[asyncio.Event], Coroutine[Any, Any, None]] | None = None,
    tls: ssl.SSLContext | None = None,
) -> None:
    """Serve `app` on host:port (HTTPS with `tls`) and run `work(stop)` beside it; both end on a
    signal."""
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    runner = web.AppRunner(app, handler_cancellation=True, access_log=None)
    await runner.setup()
    await web.TCPSite(runner, host, port, ssl_context=tls).start()
    task = asyncio.create_task(work(stop)) if work else None
    try:
        await stop.wait()
    finally:
        if task is not None:
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)
        await runner.cleanup()
