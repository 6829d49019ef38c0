"""Regions on hosts of their own: the WAN link delays what crosses it and keeps every byte in order;
three regions, each in a network namespace with its own address, reached by the others only through
their links, run a compressed day of the published schedule (`benchmarks.bench_regions_live`) with
every query answered once, by its own region's gateway."""

from __future__ import annotations

import asyncio
import json
import socket
import time
from pathlib import Path

import pytest
from aiohttp import web

from benchmarks import bench_regions_live, netns
from benchmarks.wan import DelayLink
from gateway import free_port
from tests.waiting import eventually_async


def _listens(address: tuple[str, int]) -> bool:
    socket.create_connection(address).close()
    return True


def test_the_wan_link_delays_each_way_and_keeps_the_bytes() -> None:
    async def echo(request: web.Request) -> web.Response:
        return web.Response(body=await request.read())

    async def scenario() -> tuple[float, bytes]:
        app = web.Application(client_max_size=8 << 20)
        app.router.add_post("/", echo)
        runner = web.AppRunner(app)
        await runner.setup()
        target = free_port()
        await web.TCPSite(runner, "127.0.0.1", target).start()
        link, stop = DelayLink(("127.0.0.1", free_port()), ("127.0.0.1", target), 0.05), asyncio.Event()
        serving = asyncio.create_task(link.serve(stop))
        await eventually_async(lambda: _listens(link.listen), 10, "the link listening", ignoring=(OSError,))
        body = bytes(range(256)) * 8192  # 2 MiB: many chunks each way
        reader, writer = await asyncio.open_connection(*link.listen)
        started = time.monotonic()
        writer.write(f"POST / HTTP/1.1\r\nHost: x\r\nContent-Length: {len(body)}\r\nConnection: close\r\n\r\n".encode())
        writer.write(body)
        await writer.drain()
        answer = await reader.read()
        took = time.monotonic() - started
        writer.close()
        stop.set()
        await serving
        await runner.cleanup()
        return took, answer.split(b"\r\n\r\n", 1)[1]

    took, echoed = asyncio.run(scenario())
    assert echoed == bytes(range(256)) * 8192
    assert took >= 0.1  # 50 ms there, 50 ms back


@pytest.mark.slow
def test_three_regions_on_hosts_of_their_own_answer_every_query_once(tmp_path: Path) -> None:
    why = netns.available()
    if why:
        pytest.skip(why)
    out = tmp_path / "live.json"
    bench_regions_live.main(
        ["--methods", "none,decentralized", "--day-seconds", "8", "--users-per-node", "3", "--json", str(out)]
    )
    figures = json.loads(out.read_text())
    assert figures["setup"]["netns"] is True
    for name, m in figures["methods"].items():
        assert m["total"] > 0 and m["failed"] == 0 and m["answered_twice"] == 0, (name, m["errors"])
        assert all(count > 0 for count in m["finished"]), (name, m["finished"])
    assert figures["methods"]["none"]["moved_pct"] == 0
