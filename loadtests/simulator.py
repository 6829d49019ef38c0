"""Many simulated users against gateways over HTTP (seed 004 §4.1, the *client* program).

Closed model (as the dissertation): each user sends one query, waits for its answer, then sends
the next. Open model: queries arrive at a constant rate whatever the answers do, and each
response time is measured from when the query was due, so a slow service cannot hide its delay
by slowing the senders (no coordinated omission). One coroutine per user; users are spread
round-robin over the targets (one gateway per region).
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Callable
from dataclasses import dataclass, field

import aiohttp

from loadtests.measures import Record
from loadtests.scenario import Scenario


@dataclass(frozen=True)
class Target:
    region: int
    url: str


@dataclass
class Run:
    records: list[Record]
    events: list[tuple[float, str, str]]  # (seconds, event, detail)
    queue: list[tuple[float, int, int, int]]  # (seconds, region, queue length, queries in flight)
    started: float  # wall-clock time of the start
    seconds: float
    users: int
    model: str


@dataclass
class Simulator:
    targets: list[Target]
    users: int
    scenario: Scenario
    model: str = "closed"  # or "open"
    rate: float | None = None  # open model: queries per second
    token: str | None = None
    wait: float = 300.0  # seconds a request waits at the gateway before polling
    sample_every: float = 0.25  # seconds between queue-length samples (0: none)
    on_record: Callable[[Record], None] | None = None
    _records: list[Record] = field(default_factory=list, init=False)
    _events: list[tuple[float, str, str]] = field(default_factory=list, init=False)
    _queue: list[tuple[float, int, int, int]] = field(default_factory=list, init=False)

    def __post_init__(self) -> None:
        if not self.targets:
            raise ValueError("no gateway to send to")
        if self.users < 1:
            raise ValueError("users must be at least 1")
        if self.model not in ("closed", "open"):
            raise ValueError(f"model must be closed or open, not {self.model!r}")
        if self.model == "open" and not (self.rate and self.rate > 0):
            raise ValueError("the open model needs a rate (queries per second) > 0")

    # ---- the clock and the scenario's steps -----------------------------------------------------

    def _now(self) -> float:
        return time.perf_counter() - self._t0

    def _event(self, event: str, detail: str = "") -> None:
        self._events.append((self._now(), event, detail))

    async def _steps(self) -> None:
        for step in self.scenario.steps:
            delay = step.at - self._now()
            if delay > 0:
                await asyncio.sleep(delay)
            self._event(step.action, f"step at {step.at:g} s")
            if step.action == "work":
                self._working.set()
            elif step.action == "sleep":
                self._working.clear()
            else:
                self._stopped = True
                self._working.set()  # wake sleepers so they see the stop
                return

    def _claim(self, user: int) -> tuple[int, int] | None:
        """The next global query number and the query it runs, None when the scenario is used up."""
        if self._stopped:
            return None
        number = self._next
        index = self._picker.pick(number, user)
        if index is None:
            self._stopped = True
            return None
        self._next += 1
        return number, index

    # ---- sending --------------------------------------------------------------------------------

    def _headers(self) -> dict[str, str]:
        headers = {"Accept": "application/json"}
        if self.token:
            headers["Authorization"] = f"Bearer {self.token}"
        return headers

    async def _send(self, session: aiohttp.ClientSession, user: int, number: int, index: int, due: float) -> None:
        target = self.targets[user % len(self.targets)]
        query = self.scenario.queries[index]
        body = {"sql": query.sql, "tag": query.tag, "client": user % 1_000_000, "wait": self.wait}
        if query.params:
            body["params"] = query.params
        record = Record(number, user, target.region, query.tag, index, due, self._now())
        headers = self._headers()
        try:
            async with session.post(f"{target.url}/v1/statements", json=body, headers=headers) as response:
                status, payload = response.status, await response.read()
            while status == 202:  # still running after `wait`: long-poll its state
                statement = json.loads(payload)["id"]
                url = f"{target.url}/v1/statements/{statement}?wait={self.wait:g}"
                async with session.get(url, headers=headers) as response:
                    status, payload = response.status, await response.read()
            record.status = status
            record.answer_bytes = len(payload)
            doc = json.loads(payload)
            record.statement = str(doc.get("id", ""))
            if "error" in doc:
                record.code = doc["error"]["code"]
            else:
                record.rows = doc.get("row_count", 0)
                timings = doc.get("timings_ms", {})
                record.queue_ms, record.execute_ms = timings.get("queue"), timings.get("execute")
                record.queue_length = doc.get("queue_length")
            if status == 200 and doc.get("state") not in (None, "succeeded"):
                record.code = doc.get("state", "failed")
        except (aiohttp.ClientError, OSError, ValueError, KeyError) as e:
            record.code = f"connection_error: {type(e).__name__}"
        record.answered = self._now()
        self._records.append(record)
        if self.on_record is not None:
            self.on_record(record)

    async def _user(self, session: aiohttp.ClientSession, user: int) -> None:
        while True:
            await self._working.wait()
            claim = self._claim(user)
            if claim is None:
                return
            number, index = claim
            await self._send(session, user, number, index, self._now())

    async def _arrivals(self, session: aiohttp.ClientSession) -> None:
        tasks: set[asyncio.Task] = set()
        interval = 1.0 / self.rate
        base, i = self._now(), 0
        while True:
            if not self._working.is_set():
                await self._working.wait()
                base, i = self._now(), 0  # a new work period starts a new schedule
            due = base + i * interval
            delay = due - self._now()
            if delay > 0:
                await asyncio.sleep(delay)
            if not self._working.is_set() and not self._stopped:
                continue
            claim = self._claim(i)
            if claim is None:
                break
            number, index = claim
            task = asyncio.create_task(self._send(session, number - 1, number, index, due))
            tasks.add(task)
            task.add_done_callback(tasks.discard)
            i += 1
        if tasks:
            await asyncio.gather(*tasks)

    async def _sample(self, session: aiohttp.ClientSession) -> None:
        headers = self._headers()
        while True:
            for target in self.targets:
                try:
                    async with session.get(f"{target.url}/v1/cluster", headers=headers) as response:
                        doc = await response.json()
                    self._queue.append((self._now(), target.region, doc["queue"], doc["in_flight"]))
                except (aiohttp.ClientError, OSError, ValueError, KeyError):
                    pass
            await asyncio.sleep(self.sample_every)

    async def run(self) -> Run:
        self._t0 = time.perf_counter()
        started = time.time()
        self._working = asyncio.Event()
        self._stopped = False
        self._next = 1
        self._picker = self.scenario.picker()
        self._records, self._events, self._queue = [], [], []
        self._event("start", f"{self.users} users, {self.model} model")
        connector = aiohttp.TCPConnector(limit=0 if self.model == "open" else self.users + len(self.targets) + 1)
        timeout = aiohttp.ClientTimeout(total=None, sock_read=self.wait + 60)
        async with aiohttp.ClientSession(connector=connector, timeout=timeout) as session:
            steps = asyncio.create_task(self._steps())
            sampler = asyncio.create_task(self._sample(session)) if self.sample_every > 0 else None
            if self.model == "closed":
                await asyncio.gather(*(self._user(session, u) for u in range(self.users)))
            else:
                await self._arrivals(session)
            for task in (steps, sampler):
                if task is not None:
                    task.cancel()
            await asyncio.gather(steps, *([sampler] if sampler else []), return_exceptions=True)
        self._event("end", f"{len(self._records)} answers")
        return Run(
            sorted(self._records, key=lambda r: r.number),
            self._events,
            self._queue,
            started,
            self._now(),
            self.users,
            self.model,
        )
