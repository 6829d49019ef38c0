"""Statements: one submitted query from the moment it is accepted until its result expires.

States: queued (in the region's queue) -> running (holds its slots) -> succeeded | failed |
cancelled. A finished statement keeps its (limited) result for `result_ttl` seconds, unless the
results kept pass `result_memory` bytes: then the oldest are dropped first, and reading one
answers 410 `result_evicted`."""

from __future__ import annotations

import asyncio
import itertools
import re
import time
from collections import Counter, deque
from dataclasses import dataclass, field
from typing import Any

import pyarrow as pa

from gateway import results
from gateway.errors import ApiError
from gateway.sql.progress import Progress

QUEUED, RUNNING, SUCCEEDED, FAILED, CANCELLED = "queued", "running", "succeeded", "failed", "cancelled"
FINISHED = (SUCCEEDED, FAILED, CANCELLED)
STATES = (QUEUED, RUNNING, *FINISHED)
SQL_SHOWN = 200  # characters of a statement's SQL in the list of statements


_ID = re.compile(r"[0-9a-f]+-[0-9]+")  # "<run>-<number>"


def new_run() -> str:
    """This gateway run's mark in statement ids: the start time in milliseconds, in hex. Ids of an
    earlier run (before a restart) never name a statement of this one."""
    return f"{time.time_ns() // 1_000_000:x}"


@dataclass(eq=False)
class Statement:
    id: int  # the balancer's query number (global·10^8 + region·10^6 + client), unique in one run
    sql: str
    owner: str  # the token's name ("" without authentication)
    tag: str = ""
    client: int = 0
    max_rows: int | None = None  # rows the client keeps: the query stops after one more
    state: str = QUEUED
    submitted: float = field(default_factory=time.time)
    timings: dict[str, float] = field(default_factory=dict)  # stage -> seconds
    engine: str = ""
    nodes: list[str] = field(default_factory=list)
    result: pa.Table | None = None
    truncated: bool = False
    error: ApiError | None = None
    finished_at: float | None = None
    queue_length: int | None = None  # the region's queue when it finished
    region: str = ""  # the region it ran in (another than the gateway's when it was moved there)
    queues: list[tuple[str, float]] = field(default_factory=list)  # (region, seconds) it waited in each queue
    origin: str = ""  # run here for another region's gateway (balancing between regions), which answers it
    task: asyncio.Task | None = None
    done: asyncio.Event = field(default_factory=asyncio.Event)
    run: str = ""  # the gateway run (`new_run`)
    waiting: str = ""  # what the running query waits for (a Spark cluster's executors), "" when nothing
    progress: Progress = field(default_factory=Progress)  # how far it is (the native engine's queries)
    _clock: float = field(default_factory=time.perf_counter)

    @property
    def key(self) -> str:
        """The statement's id in the API: the gateway run and the query number, never reused
        across restarts."""
        return f"{self.run}-{self.id}" if self.run else str(self.id)

    def mark(self, stage: str) -> None:
        """Close the current stage (prepare, queue, execute) and start the next."""
        now = time.perf_counter()
        self.timings[stage] = now - self._clock
        self._clock = now

    def wait_for(self, what: str) -> None:
        """What the running query waits for now ("" when nothing); called from the thread that runs it."""
        self.waiting = what

    def finish(self, state: str, error: ApiError | None = None) -> None:
        self.progress.freeze()
        self.state = state
        self.error = error
        self.finished_at = time.time()
        self.timings["total"] = self.finished_at - self.submitted
        self.done.set()

    @property
    def finished(self) -> bool:
        return self.state in FINISHED

    def _facts(self) -> dict[str, Any]:
        """What both the list of statements and the status document say of it."""
        return {
            "id": self.key,
            "state": self.state,
            "tag": self.tag or None,
            "submitted": self.submitted,
            "timings_ms": {k: round(v * 1000, 3) for k, v in self.timings.items()},
            "engine": self.engine or None,
            "nodes": self.nodes,
            "region": self.region or None,
            "progress": self.progress.document(),
        }

    def summary(self) -> dict[str, Any]:
        """The statement in the list of statements: who, what (the SQL's start), where, how far."""
        doc = self._facts()
        doc.update(
            token=self.owner or None,
            sql=self.sql[:SQL_SHOWN],
            rows=self.result.num_rows if self.result is not None else None,
        )
        if self.error is not None:
            doc["error"] = self.error.code
        return doc

    def document(self, base: str, chunk_rows: int) -> dict[str, Any]:
        """The JSON status document; once succeeded it carries the columns and the first chunk."""
        doc = self._facts()
        doc.update(
            queue_length=self.queue_length,
            queues=[{"region": region, "seconds": round(seconds, 6)} for region, seconds in self.queues],
        )
        if self.state in (QUEUED, RUNNING):
            doc["next"] = f"{base}/v1/statements/{self.key}"
        if self.state == RUNNING and self.waiting:
            doc["waiting_for"] = self.waiting
        if self.error is not None:
            doc["error"] = self.error.body()
        if self.state == SUCCEEDED and self.result is not None:
            count = results.chunk_count(self.result, chunk_rows)
            doc.update(
                columns=results.columns(self.result.schema),
                rows=results.json_rows(results.chunk(self.result, 0, chunk_rows)),
                row_count=self.result.num_rows,
                truncated=self.truncated,
                chunks=count,
                next=f"{base}/v1/statements/{self.key}/chunks/1" if count > 1 else None,
            )
        return doc


class StatementOfEarlierRun(LookupError):
    """A statement id of an earlier run of the gateway (it restarted since)."""


class Statements:
    """The statements of one gateway, by id; finished ones expire `ttl` seconds after their end,
    and their results are dropped, oldest first, while together they pass `memory` bytes."""

    def __init__(self, ttl: float, run: str = "", memory: int = 2**62):
        self.ttl = ttl
        self.run = run or new_run()
        self.memory = memory
        self._items: dict[int, Statement] = {}
        self._active: dict[int, Statement] = {}
        self._per_owner: Counter[str] = Counter()
        self._finished: deque[Statement] = deque()  # in the order they finished
        self._kept: deque[Statement] = deque()  # finished with a result, in the order they finished
        self.held = 0  # bytes of the results kept
        self.evicted = 0  # results dropped for memory, since the start
        self.totals: Counter[str] = Counter()  # finished statements by state, since the start
        self.work: Counter[str] = Counter()  # sub-queries answered and rows scanned by finished statements

    def add(self, statement: Statement) -> None:
        self.expire()
        statement.run = self.run
        self._items[statement.id] = statement
        self._active[statement.id] = statement
        self._per_owner[statement.owner] += 1

    def finished(self, statement: Statement) -> None:
        """Book a statement that has just finished."""
        if self._active.pop(statement.id, None) is not None:
            self._per_owner[statement.owner] -= 1
            self._finished.append(statement)
            self.totals[statement.state] += 1
            self.work["subqueries"] += statement.progress.subqueries_done
            self.work["rows_scanned"] += statement.progress.rows_scanned
            if statement.result is not None:
                self._kept.append(statement)
                self.held += statement.result.get_total_buffer_size()
        while self.held > self.memory and self._kept:
            self._drop(self._kept.popleft(), evicted=True)

    def _drop(self, statement: Statement, evicted: bool) -> None:
        """Forget a finished statement's result; an evicted one's readers get 410."""
        if statement.result is None:
            return
        self.held -= statement.result.get_total_buffer_size()
        statement.result = None
        if evicted:
            self.evicted += 1
            statement.error = ApiError(
                410,
                "result_evicted",
                f"the result of statement {statement.key} was dropped to keep the results this gateway holds"
                f" within gateway.result_memory ({self.memory / 2**20:g} MiB): run the query again",
                "55000",
            )

    def get(self, key: str) -> Statement | None:
        """The statement of an API id; None when unknown or expired. StatementOfEarlierRun when
        the id was given by this gateway before it restarted."""
        self.expire()
        if not _ID.fullmatch(key):
            return None  # no id this gateway gives, now or before
        run, _, number = key.partition("-")
        if run != self.run:
            raise StatementOfEarlierRun(
                f"statement {key} was accepted before the gateway restarted and is lost: submit the query again"
            )
        return self._items.get(int(number))

    def active(self, owner: str | None = None) -> int:
        """Queued and running statements (of one token)."""
        return len(self._active) if owner is None else self._per_owner[owner]

    def running(self) -> int:
        return sum(1 for s in self._active.values() if s.state == RUNNING)

    def listing(self, state: str | None = None, owner: str | None = None) -> list[Statement]:
        """Running and recent statements, newest first, of one state and one token if given."""
        self.expire()
        return [
            s
            for s in reversed(self._items.values())
            if (state is None or s.state == state) and (owner is None or s.owner == owner)
        ]

    def recent(self, count: int) -> list[Statement]:
        """The last `count` statements to finish."""
        return list(itertools.islice(reversed(self._finished), count))

    def unfinished(self) -> list[Statement]:
        return list(self._active.values())

    def done_so_far(self) -> Counter[str]:
        """Sub-queries answered and rows scanned since the start, the running statements' too."""
        work = Counter(self.work)
        for statement in self._active.values():
            work["subqueries"] += statement.progress.subqueries_done
            work["rows_scanned"] += statement.progress.rows_scanned
        return work

    def by_state(self) -> Counter[str]:
        """The statements this gateway knows (running, and finished ones not expired), by state."""
        counts = Counter(dict.fromkeys(STATES, 0))
        counts.update(s.state for s in self._items.values())
        return counts

    def expire(self) -> None:
        cutoff = time.time() - self.ttl
        while self._finished and (self._finished[0].finished_at or 0) < cutoff:
            self._items.pop(self._finished.popleft().id, None)
        while self._kept and (self._kept[0].finished_at or 0) < cutoff:
            self._drop(self._kept.popleft(), evicted=False)
