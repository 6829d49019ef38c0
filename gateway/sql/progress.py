"""How far a running query is, as its statement shows it while it runs: the sub-queries sent to
the nodes (scans and whole queries) and those answered, the rows the nodes scanned for it, the
stages of its whole queries on nodes done of all (each view's scan, then the node's engine: asked
of the nodes, `storage.query_protocol`'s GET), and, for its Spark part, Spark's stages done of
those planned so far (read from Spark when asked).

A query carries its `Progress` in the context variable `PROGRESS` (the engine sets it; threads
the query starts copy it); the places that ask nodes report through `subquery`. Whoever shows a
running query's progress first awaits `heard`, which asks its nodes (at most every `ASK_S`).
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
import time
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass, field
from typing import Any

from storage.node_client import NodeClient, NodeError
from storage.query_protocol import QUERY_PATH

ASK_S = 0.25  # a node's whole query is asked how far it is at most this often
HEARD_S = 0.5  # how long `heard` waits for the nodes' answers (a slow node's is left for later)
_ASKING = ThreadPoolExecutor(4, thread_name_prefix="node-progress")


@dataclass
class NodeStages:
    """A whole query on one node: its stages done of all and rows scanned, as last heard."""

    url: str
    id: str
    stages: int  # each view's scan, then the engine
    done: int = 0
    rows_scanned: int = 0
    finished: bool = False  # answered
    _asked: float = float("-inf")  # monotonic time of the last ask
    _asking: Future | None = None

    def ask(self) -> Future | None:
        """Ask the node, unless it was asked less than `ASK_S` ago."""
        if self._asking is not None and not self._asking.done():
            return self._asking
        if time.monotonic() - self._asked < ASK_S:
            return None
        self._asked = time.monotonic()
        self._asking = _ASKING.submit(self._hear)
        return self._asking

    def _hear(self) -> None:
        with contextlib.suppress(NodeError):  # answered meanwhile (404), or the node is gone: the query says so
            heard = NodeClient(self.url, timeout=HEARD_S * 4).get(f"{QUERY_PATH}/{self.id}")
            if not self.finished:
                self.done = max(self.done, min(int(heard["stages_done"]), self.stages))
                self.rows_scanned = max(self.rows_scanned, int(heard["rows_scanned"]))

    def end(self, stats: dict[str, Any]) -> None:
        self.finished = True
        self.stages = self.done = int(stats.get("stages", self.stages))


@dataclass
class Progress:
    subqueries: int = 0  # sent to a node
    subqueries_done: int = 0  # answered whole
    rows_scanned: int = 0  # by the nodes, in the sub-queries answered
    spark_stages: Callable[[], tuple[int, int]] | None = None  # (done, planned) of the query's Spark jobs
    whole: list[NodeStages] = field(default_factory=list)  # its whole queries on nodes
    _ended: bool = False
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    def sent(self, whole: NodeStages | None = None) -> None:
        with self._lock:
            self.subqueries += 1
            if whole is not None:
                self.whole.append(whole)

    def answered(self, stats: dict[str, Any], whole: NodeStages | None = None) -> None:
        """A sub-query answered; `stats` its node's account (a scan's, or a whole query's with its scans)."""
        scanned = stats.get("rows_scanned", 0) + sum(s.get("rows_scanned", 0) for s in stats.get("scans", []))
        with self._lock:
            self.subqueries_done += 1
            self.rows_scanned += scanned
            if whole is not None:
                whole.end(stats)

    def ask(self) -> list[Future]:
        """Ask the nodes running its whole queries how far they are (`NodeStages.ask`)."""
        with self._lock:
            running = [] if self._ended else [w for w in self.whole if not w.finished]
        return [f for f in (w.ask() for w in running) if f is not None]

    def fraction(self) -> float | None:
        """The part of its node work done (None before any): a scan counts one, a whole query on a
        node its stages."""
        with self._lock:
            if not self.subqueries:
                return None
            whole = self.whole
            units = self.subqueries - len(whole) + sum(w.stages for w in whole)
            done = self.subqueries_done - sum(w.finished for w in whole) + sum(w.done for w in whole)
        return done / units

    def _stages(self) -> tuple[int, int] | None:
        """Spark's stages (done, planned); None without a Spark part, or when Spark went away
        meanwhile (the query then fails on its own: the figure is left out)."""
        if self.spark_stages is None:
            return None
        try:
            return self.spark_stages()
        except Exception:
            return None

    def freeze(self) -> None:
        """The query has ended: Spark's stages as they are now, asked no more; its nodes asked no more."""
        stages = self._stages()
        self.spark_stages = None if stages is None else lambda: stages
        self._ended = True

    def document(self) -> dict[str, Any]:
        with self._lock:
            whole = list(self.whole)
            doc: dict[str, Any] = {
                "subqueries": self.subqueries,
                "subqueries_done": self.subqueries_done,
                "rows_scanned": self.rows_scanned + sum(w.rows_scanned for w in whole if not w.finished),
            }
        if whole:
            doc["node_stages_done"] = sum(w.done for w in whole)
            doc["node_stages"] = sum(w.stages for w in whole)
        stages = self._stages()
        if stages is not None:
            doc["spark_stages_done"], doc["spark_stages"] = stages
        return doc


PROGRESS: ContextVar[Progress | None] = ContextVar("cxg_progress", default=None)


@contextmanager
def subquery(whole: NodeStages | None = None) -> Iterator[Callable[[dict[str, Any]], None]]:
    """Around one sub-query sent to a node (`whole`: a whole query, its stages asked of the node
    while it runs): counted as sent now; call what it yields with the node's stats once it is answered."""
    progress = PROGRESS.get()
    if progress is None:
        yield lambda stats: None
        return
    progress.sent(whole)
    yield lambda stats: progress.answered(stats, whole)


async def heard(progresses: Iterable[Progress]) -> None:
    """Ask the nodes how far these queries' whole queries on them are, and wait for their answers
    (at most `HEARD_S`), so that the progress shown is the nodes' of now."""
    asked = [asyncio.wrap_future(f) for p in progresses for f in p.ask()]
    if asked:
        await asyncio.wait(asked, timeout=HEARD_S)


def spark_stages(context: Any, group: str) -> Callable[[], tuple[int, int]]:
    """The stages of job group `group`'s jobs, done and planned, as Spark's status tracker knows them."""
    tracker = context.statusTracker()

    def count() -> tuple[int, int]:
        done = planned = 0
        for job in tracker.getJobIdsForGroup(group):
            info = tracker.getJobInfo(job)
            for stage in info.stageIds if info else ():
                planned += 1
                stage_info = tracker.getStageInfo(stage)
                done += bool(stage_info and stage_info.numTasks and stage_info.numCompletedTasks >= stage_info.numTasks)
        return done, planned

    return count
