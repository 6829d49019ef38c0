"""A WAN link between regions on one machine: a TCP relay that delays every byte by a fixed time in
each direction, order kept (the kernel's netem, which would do this, is missing on such machines).

    python -m benchmarks.wan --listen 10.77.0.254:9001 --to 10.77.0.1:8080 --delay 0.005

A region's gateway is reached by the others through its link (`url` of `[regions.NAME]`), while its
own clients reach it directly: a query moved between regions pays the delay each time it crosses.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import time


async def _pump(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, delay: float) -> None:
    """Copy `reader` to `writer`, each chunk `delay` seconds after it was read."""
    queue: asyncio.Queue[tuple[float, bytes]] = asyncio.Queue()

    async def deliver() -> None:
        while True:
            due, chunk = await queue.get()
            if not chunk:
                break
            await asyncio.sleep(max(0.0, due - time.monotonic()))
            writer.write(chunk)
            await writer.drain()
        await asyncio.sleep(max(0.0, due - time.monotonic()))
        with contextlib.suppress(OSError):
            writer.write_eof()

    delivering = asyncio.create_task(deliver())
    try:
        while chunk := await reader.read(1 << 16):
            queue.put_nowait((time.monotonic() + delay, chunk))
    except (ConnectionError, OSError):
        pass
    finally:
        queue.put_nowait((time.monotonic() + delay, b""))
        with contextlib.suppress(ConnectionError, OSError):
            await delivering


class DelayLink:
    """Listens on `listen` (host, port) and relays each connection to `to`, `delay` seconds each way."""

    def __init__(self, listen: tuple[str, int], to: tuple[str, int], delay: float):
        self.listen, self.to, self.delay = listen, to, delay
        self.connections = 0

    async def _relay(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.connections += 1
        try:
            upstream_reader, upstream_writer = await asyncio.open_connection(*self.to)
        except OSError:
            writer.close()
            return
        try:
            await asyncio.gather(_pump(reader, upstream_writer, self.delay), _pump(upstream_reader, writer, self.delay))
        finally:
            for w in (writer, upstream_writer):
                w.close()

    async def serve(self, stop: asyncio.Event | None = None) -> None:
        server = await asyncio.start_server(self._relay, *self.listen)
        async with server:
            await (stop or asyncio.Event()).wait()


def _address(text: str) -> tuple[str, int]:
    host, _, port = text.rpartition(":")
    return host, int(port)


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--listen", type=_address, required=True, metavar="HOST:PORT")
    p.add_argument("--to", type=_address, required=True, metavar="HOST:PORT")
    p.add_argument("--delay", type=float, default=0.005, help="seconds each way (default 0.005)")
    args = p.parse_args(argv)
    with contextlib.suppress(KeyboardInterrupt):
        asyncio.run(DelayLink(args.listen, args.to, args.delay).serve())


if __name__ == "__main__":
    main()
