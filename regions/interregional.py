"""A gateway's part in balancing between regions (seed 004 §5.2), live.

Every region's gateway shows its queue to the others (`GET /v1/regions/queue`: per queued query
its volume V_σ and expected seconds, the servers and what runs on them), and hands queued
queries of its own clients over to a region that asks (`POST /v1/regions/handover`), only those
whose every table the asker holds at the version they read here. The taker runs them in its own
queue and sends each outcome back (`POST /v1/regions/outcomes/{id}`); the origin's gateway answers
its client, whichever region ran the query. Who asks when is the method's business
(`regions.balancing`): with ``decentralized`` a region whose queue is empty pulls the head query
of the heaviest region; with ``idle-pull`` (ours) a region with a free slot and an empty queue
pulls from the heaviest region whose queries wait longer per server than the round trip between
them; with ``centralized`` the central balancer (`regions.central_balancer`) tells a region to
pull from another's tail (`POST /v1/regions/pull`).

Nothing is lost or answered twice: the origin keeps every statement it handed over until its
outcome is in, asks the taker every `poll` seconds which of them it still holds
(`GET /v1/regions/running`), and takes back those the taker lost or when the taker has not
answered for `peer_timeout` seconds; an outcome from a region the statement is no longer away at
is refused (409).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import time
from dataclasses import asdict, dataclass, field
from typing import Any

import aiohttp
import pyarrow as pa
from aiohttp import web

from balancer import arrow_payload, read_payload
from gateway import FAILED, SUCCEEDED, ApiError, Gateway, RemoteResult, Statement, TokenConfig, bad_request
from regions.balancing import Decentralized, IdlePull, method
from regions.config import Config
from regions.region_load import LIVE_SCALE, QueueView, region_queue
from regions.sections import Peer

log = logging.getLogger("cxg.regions")
FINAL = {400, 403, 404, 410, 413, 422, 504}  # statuses of an outcome the origin answers as is
OUTCOME = "X-Cxg-Outcome"


@dataclass(eq=False)
class _Inbound:
    """A query moved here, until its outcome has reached its origin."""

    origin: str
    id: str  # its statement id at the origin
    statement: Statement | None = None
    cancelled: bool = False  # by its origin: no outcome is sent


@dataclass
class _PeerState:
    last_seen: float = field(default_factory=time.monotonic)
    round_trip: float = 0.0  # seconds, smoothed


class InterRegional:
    """The live balancing of one region's gateway: its endpoints, its pulls and its watch over the
    queries it handed over."""

    def __init__(self, config: Config, gateway: Gateway):
        self.config = config  # a configuration of several regions (`Config.regions`), this one's
        self.gateway = gateway
        self.lifecycle = gateway.lifecycle
        self.name = config.name
        self.regions = config.regions
        self.peers = {peer.name: peer for peer in config.peers}
        self.method = method(config.balancing.method, config.balancing.weight, LIVE_SCALE)
        self.token = TokenConfig(f"region:{self.name}", "", max_concurrent=1 << 30)
        self.inbound: dict[tuple[str, str], _Inbound] = {}
        self.states = {name: _PeerState() for name in self.peers}
        self.pulled = self.handed = self.returned_home = 0
        self._session: aiohttp.ClientSession | None = None
        self._tasks: list[asyncio.Task] = []
        self._background: set[asyncio.Task] = set()
        self.queue = QueueView(config, gateway)

    # ---- composition ----------------------------------------------------------------------------

    def install(self, app: web.Application) -> None:
        app.add_routes(
            [
                web.get("/v1/regions", self.listing),
                web.get("/v1/regions/queue", self.queue_page),
                web.post("/v1/regions/handover", self.handover),
                web.post("/v1/regions/pull", self.pull_request),
                web.post("/v1/regions/outcomes/{id}", self.outcome),
                web.get("/v1/regions/running", self.running),
                web.delete("/v1/regions/running/{origin}/{id}", self.recall),
            ]
        )
        app.on_startup.append(self._start)
        app.on_shutdown.append(self._stop)

    async def _start(self, app: web.Application) -> None:
        self._session = cluster_session(self.config)
        self._tasks = [asyncio.create_task(self._watch())]
        if isinstance(self.method, Decentralized | IdlePull):
            self._tasks.append(asyncio.create_task(self._pull_when_idle()))

    async def _stop(self, app: web.Application) -> None:
        for task in self._tasks:
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        for inbound in self.inbound.values():  # the origins take them back: no outcome is final
            inbound.cancelled = True
        if self._session is not None:
            await self._session.close()

    def _spawn(self, work) -> None:
        task = asyncio.ensure_future(work)
        self._background.add(task)
        task.add_done_callback(self._background.discard)

    # ---- what this region shows ---------------------------------------------------------------------

    def _cluster_only(self, request: web.Request) -> None:
        secret = self.config.gateway.cluster_token
        if secret and request.headers.get("Authorization") != f"Bearer {secret}":
            raise ApiError(401, "unauthorized", "the links between regions need the cluster token", "28000")

    def holdings(self) -> dict[str, str | None]:
        """The tables this region may run queries on, each at the version it serves: what it serves,
        within the databases it holds and copies (when it names them)."""
        served = self.gateway.executor.holdings()
        named = self.regions[self.name].tables(self.regions)
        if named is None:
            return served
        if self.gateway.executor.backend == "native":
            return {name: version for name, version in served.items() if name in named}
        return {name: served.get(name) for name in named}  # nodes that keep no versions

    async def listing(self, request: web.Request) -> web.Response:
        """The regions, the queries moved, and each region's load now (null: it did not answer)."""
        self.gateway.auth.identify(request)
        peers = list(self.peers.values())
        summaries = await asyncio.gather(*(queue_of(self._session, p.url) for p in peers)) if self._session else []
        load = {self.name: _load(self.queue.summary())}
        load.update({peer.name: _load(summary) for peer, summary in zip(peers, summaries, strict=False)})
        return web.json_response(
            {
                "region": self.name,
                "method": self.config.balancing.method,
                "moved": {"pulled": self.pulled, "handed_over": self.handed, "came_back": self.returned_home},
                "regions": [asdict(peer) for peer in self.regions.values()],
                "load": load,
            }
        )

    async def queue_page(self, request: web.Request) -> web.Response:
        self._cluster_only(request)
        return web.json_response(self.queue.summary())

    # ---- the origin's side ----------------------------------------------------------------------

    async def handover(self, request: web.Request) -> web.Response:
        """Queued queries for the region that asks, which it can run."""
        self._cluster_only(request)
        body = await _json_object(request)
        taker = body.get("region")
        if taker not in self.peers:
            raise bad_request(f"no region {taker!r} in this configuration")
        count, end = _count_and_end(body)
        holdings = body.get("holdings") or {}
        if not isinstance(holdings, dict) or not all(v is None or isinstance(v, str) for v in holdings.values()):
            raise bad_request('"holdings" must be an object of table -> version (a string, or null)')
        peer = self.peers[taker]
        queries = self.lifecycle.hand_over(
            holdings, taker, count, end == "tail", lambda key: self._spawn(self._recall(peer, key))
        )
        self.handed += len(queries)
        return web.json_response({"queries": queries})

    async def outcome(self, request: web.Request) -> web.Response:
        """The outcome of a query handed over, from the region that ran it."""
        self._cluster_only(request)
        region = request.query.get("region", "")
        statement = self.gateway.statements.get(request.match_info["id"])
        if statement is None:
            raise ApiError(404, "not_found", f"no statement {request.match_info['id']}", "42704")
        if request.content_type == "application/json":
            body = await _json_object(request)
            if isinstance(body.get("go_home"), str):
                accepted = self.lifecycle.give_back(statement, region, body["go_home"])
                self.returned_home += accepted
            else:
                accepted = self.lifecycle.returned(statement, region, _error(body))
        else:
            try:
                meta = json.loads(request.headers[OUTCOME])
                table = read_payload(await request.read())
                result = RemoteResult(table, bool(meta["truncated"]), meta["engine"], meta["nodes"], meta["queued"])
            except (KeyError, TypeError, ValueError, pa.ArrowInvalid) as e:
                raise bad_request(f"an outcome is an Arrow stream with its {OUTCOME} header: {e}") from None
            accepted = self.lifecycle.returned(statement, region, result)
        if not accepted:
            raise ApiError(409, "not_away", f"statement {statement.key} is not waiting for region {region}", "55000")
        return web.json_response({"accepted": True})

    async def _recall(self, peer: Peer, key: str) -> None:
        with contextlib.suppress(aiohttp.ClientError, TimeoutError):
            async with self._session.delete(f"{peer.url}/v1/regions/running/{self.name}/{key}"):
                pass

    async def _watch(self) -> None:
        """Take back what a region lost (it restarted) or holds while it does not answer."""
        while True:
            await asyncio.sleep(self.config.balancing.poll)
            for name, peer in self.peers.items():
                away = [a for a in self.lifecycle.moved_away() if a.region == name]
                if away:
                    await self._check(peer, away)

    async def _check(self, peer: Peer, away: list) -> None:
        state, now = self.states[peer.name], time.monotonic()
        try:
            async with self._session.get(f"{peer.url}/v1/regions/running", params={"origin": self.name}) as answer:
                answer.raise_for_status()
                held = set((await answer.json())["ids"])
            state.last_seen = now
        except (aiohttp.ClientError, TimeoutError, ValueError):
            if now - state.last_seen > self.config.balancing.peer_timeout:
                for item in away:
                    self._home(item.statement, peer.name, "that region does not answer")
            return
        for item in away:
            if item.statement.key not in held and now - item.since > self.config.balancing.peer_timeout:
                self._home(item.statement, peer.name, "that region no longer holds it")

    def _home(self, statement: Statement, region: str, reason: str) -> None:
        if self.lifecycle.give_back(statement, region, reason):
            self.returned_home += 1

    # ---- the taker's side -----------------------------------------------------------------------

    async def pull_request(self, request: web.Request) -> web.Response:
        """The central balancer: pull `count` queries from the `end` of region `source`'s queue."""
        self._cluster_only(request)
        body = await _json_object(request)
        source = self.peers.get(body.get("source"))
        if source is None:
            raise bad_request(f"no region {body.get('source')!r} to pull from")
        pulled = await self.pull(source, *_count_and_end(body))
        return web.json_response({"pulled": pulled})

    async def pull(self, source: Peer, count: int = 1, end: str = "head") -> int:
        """Take up to `count` queries from `source`'s queue and run them here; how many came."""
        holdings = await asyncio.get_running_loop().run_in_executor(None, self.holdings)  # may read the nodes
        body = {"region": self.name, "holdings": holdings, "count": count, "end": end}
        try:
            async with self._session.post(f"{source.url}/v1/regions/handover", json=body) as answer:
                answer.raise_for_status()
                queries = (await answer.json())["queries"]
        except (aiohttp.ClientError, TimeoutError, ValueError) as e:
            log.info("region %s: pulling from %s failed: %s", self.name, source.name, e)
            return 0
        for query in queries:
            await self._accept(source, query)
        self.pulled += len(queries)
        return len(queries)

    async def _accept(self, source: Peer, query: dict[str, Any]) -> None:
        inbound = _Inbound(source.name, query["id"])
        self.inbound[(source.name, query["id"])] = inbound
        try:
            inbound.statement = await self.lifecycle.submit(
                self.token,
                query["sql"],
                query["params"],
                query["tag"],
                query["client"],
                query["timeout"],
                query["max_rows"],
                origin=source.name,
                versions=query["versions"],
            )
        except ApiError as e:
            self._spawn(self._send(inbound, {"go_home": f"region {self.name} cannot run it: {e}"}))
            return
        self._spawn(self._report(inbound))

    async def _report(self, inbound: _Inbound) -> None:
        statement = inbound.statement
        await statement.done.wait()
        if inbound.cancelled:
            outcome: dict[str, Any] | pa.Table = {"go_home": f"region {self.name} stopped"}
        elif statement.state == SUCCEEDED and statement.result is not None:
            outcome = statement.result
        elif statement.state == FAILED and statement.error is not None and statement.error.status in FINAL:
            outcome = {"status": statement.error.status, "error": statement.error.body()}
        else:
            reason = statement.error.message if statement.error else statement.state
            outcome = {"go_home": f"region {self.name} could not run it: {reason}"}
        await self._send(inbound, outcome)

    async def _send(self, inbound: _Inbound, outcome: dict[str, Any] | pa.Table) -> None:
        """Deliver an outcome to the query's origin, retrying while the origin may come back."""
        url = f"{self.regions[inbound.origin].url}/v1/regions/outcomes/{inbound.id}"
        if isinstance(outcome, pa.Table):
            statement = inbound.statement
            meta = {
                "truncated": statement.truncated,
                "engine": statement.engine,
                "nodes": statement.nodes,
                "queued": sum(seconds for _, seconds in statement.queues),
            }
            request = {"data": arrow_payload(outcome), "headers": {OUTCOME: json.dumps(meta)}}
        else:
            request = {"json": outcome}
        deadline = time.monotonic() + self.config.balancing.peer_timeout
        try:
            while True:
                try:
                    async with self._session.post(url, params={"region": self.name}, **request) as answer:
                        if answer.status < 500:
                            return  # taken, or no longer wanted (409): either way it is the origin's now
                except (aiohttp.ClientError, TimeoutError):
                    pass
                if time.monotonic() > deadline:
                    log.warning("region %s: could not return %s to %s", self.name, inbound.id, inbound.origin)
                    return
                await asyncio.sleep(self.config.balancing.poll)
        finally:
            self.inbound.pop((inbound.origin, inbound.id), None)

    async def running(self, request: web.Request) -> web.Response:
        """The ids of the queries moved here from `origin` whose outcome it has not had yet."""
        self._cluster_only(request)
        origin = request.query.get("origin", "")
        return web.json_response({"ids": [key for (o, key) in self.inbound if o == origin]})

    async def recall(self, request: web.Request) -> web.Response:
        """The origin no longer wants a query it moved here (its client cancelled, its time ran out)."""
        self._cluster_only(request)
        inbound = self.inbound.get((request.match_info["origin"], request.match_info["id"]))
        if inbound is not None and inbound.statement is not None:
            inbound.cancelled = True
            await self.lifecycle.cancel(inbound.statement)
        return web.json_response({"recalled": inbound is not None})

    # ---- when to pull ---------------------------------------------------------------------------

    async def _pull_when_idle(self) -> None:
        """Decentralized: with this region's queue empty, look at the other regions' queues and pull
        head queries from the heaviest, one, or as many as this region's nodes have room for (the
        published method pulls one and, its queue empty again once a server takes it, pulls again
        at once: here in one round trip instead of several). Idle-pull: the same only while its
        nodes have room (a free slot or an empty one-query buffer, as a server with room in the
        model), as many as there is room for. Having pulled, look again at once, else after `poll`
        seconds."""
        while True:
            pulled = 0
            try:
                mine = self.queue.summary()
                if mine.get("draining"):
                    count = 0
                elif isinstance(self.method, IdlePull):
                    count = mine["room"] if not mine["queue"] else 0
                else:
                    count = max(1, mine["room"]) if not mine["queue"] else 0
                donor = await self._donor(mine) if count else None
                if donor is not None:
                    pulled = await self.pull(donor, count)
            except Exception:
                log.exception("region %s: pulling failed", self.name)
            if not pulled:
                await asyncio.sleep(self.config.balancing.poll)

    async def _donor(self, mine: dict[str, Any]) -> Peer | None:
        summaries = [s for s in await asyncio.gather(*(self._summary(p) for p in self.peers.values())) if s]
        if not any(s["queue"] for s in summaries):
            return None
        queues = {s["region"]: region_queue(s) for s in [mine, *summaries]}
        own = queues[self.name]
        if isinstance(self.method, IdlePull):
            self.method.round_trip = max((self.states[s["region"]].round_trip for s in summaries), default=0.0)
            before = {name: len(q) for name, q in queues.items()}
            self.method.take(own, list(queues.values()))
            return next((self.peers[n] for n, q in queues.items() if n != self.name and len(q) < before[n]), None)
        moves = self.method.rebalance(list(queues.values()))
        source = next((m.source for m in moves if m.target == own.number), None)
        return next((p for p in self.peers.values() if p.number == source), None)

    async def _summary(self, peer: Peer) -> dict[str, Any] | None:
        started = time.monotonic()
        summary = await queue_of(self._session, peer.url)
        if summary is not None:
            state = self.states[peer.name]
            state.last_seen = time.monotonic()
            state.round_trip = 0.8 * state.round_trip + 0.2 * (state.last_seen - started)
        return summary


def _load(summary: dict[str, Any] | None) -> dict[str, Any] | None:
    """A region's load as its queue summary tells it: queued, running, servers, room, draining."""
    if summary is None:
        return None
    keys = ("running", "servers", "room", "draining")
    return {"queued": len(summary["queue"]), **{key: summary[key] for key in keys}}


async def queue_of(session: aiohttp.ClientSession, url: str) -> dict[str, Any] | None:
    """The queue of the region whose gateway is at `url` (`InterRegional.summary`); None when it
    does not answer."""
    try:
        async with session.get(f"{url}/v1/regions/queue") as answer:
            answer.raise_for_status()
            return await answer.json()
    except (aiohttp.ClientError, TimeoutError, ValueError):
        return None


async def _json_object(request: web.Request) -> dict[str, Any]:
    try:
        body = await request.json()
    except (ValueError, UnicodeDecodeError) as e:
        raise bad_request(f"the body is not valid JSON: {e}") from None
    if not isinstance(body, dict):
        raise bad_request("the body must be a JSON object")
    return body


def _count_and_end(body: dict[str, Any]) -> tuple[int, str]:
    count, end = body.get("count", 1), body.get("end", "head")
    if isinstance(count, bool) or not isinstance(count, int) or not 1 <= count <= 1000 or end not in ("head", "tail"):
        raise bad_request('"count" must be an integer in 1..1000 and "end" head or tail')
    return count, end


def _error(body: dict[str, Any]) -> ApiError:
    """The error a region answered a query with, from its outcome's body."""
    status, error = body.get("status"), body.get("error")
    fields = ("code", "message", "sqlstate")
    if not isinstance(status, int) or not 400 <= status < 600 or not isinstance(error, dict):
        raise bad_request('an outcome is {"go_home": reason} or {"status": 4xx or 5xx, "error": {...}}')
    if not all(isinstance(error.get(key), str) for key in fields):
        raise bad_request(f"an outcome's error needs {', '.join(fields)} as strings")
    return ApiError(status, error["code"], error["message"], error["sqlstate"])


def cluster_session(config: Config) -> aiohttp.ClientSession:
    """An HTTP session for the links between regions: the cluster token, `peer_timeout` per call."""
    token = config.gateway.cluster_token
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    return aiohttp.ClientSession(headers=headers, timeout=aiohttp.ClientTimeout(total=config.balancing.peer_timeout))
