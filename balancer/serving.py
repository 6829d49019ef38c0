"""The life of one link, as every role serves it: set up, every packet to a handler in arrival
order until the peer goes away, then clean up whatever ended the link (a cancelled task
included), so that nothing the peer sent outlives it. Nodes and routers serve their upstream
link this way; routers and the region balancer serve each member below them this way, as a
member of their pool."""

from __future__ import annotations

from collections.abc import Awaitable, Callable

from balancer.downstream import Downstream, Pool
from balancer.link import Link
from balancer.packets import Hello, Packet

Step = Callable[[], Awaitable[None]]


async def serve_link(link: Link, handle: Callable[[Packet], Awaitable[None]], opened: Step, closed: Step) -> None:
    """`opened()`, then each packet to `handle` until the peer goes away, then `closed()`."""
    await opened()
    try:
        async for packet in link.packets():
            await handle(packet)
    finally:
        await closed()


async def serve_member(
    pool: Pool,
    link: Link,
    hello: Hello,
    handle: Callable[[Downstream, Packet], Awaitable[None]],
    joined: Callable[[Downstream], Awaitable[None]],
    left: Callable[[Downstream], Awaitable[None]],
) -> None:
    """A node or router below, a member of `pool` while its link lasts. When it goes it leaves
    the pool, unless a newer link under the same name has already taken its place."""
    member = Downstream(link, hello)

    async def opened() -> None:
        pool.add(member)
        await joined(member)

    async def closed() -> None:
        if pool.get(member.name) is member:
            pool.remove(member.name)
        await left(member)

    async def one(packet: Packet) -> None:
        await handle(member, packet)

    await serve_link(link, one, opened, closed)
