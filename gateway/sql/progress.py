"""How far a running query is, as its statement shows it while it runs: the sub-queries sent to
the nodes (scans and whole queries) and those answered, the rows the nodes scanned for it, and,
for its Spark part, Spark's stages done of those planned so far (read from Spark when asked).

A query carries its `Progress` in the context variable `PROGRESS` (the engine sets it; threads
the query starts copy it); the places that ask nodes report through `subquery`.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass, field
from typing import Any


@dataclass
class Progress:
    subqueries: int = 0  # sent to a node
    subqueries_done: int = 0  # answered whole
    rows_scanned: int = 0  # by the nodes, in the sub-queries answered
    spark_stages: Callable[[], tuple[int, int]] | None = None  # (done, planned) of the query's Spark jobs
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    def sent(self) -> None:
        with self._lock:
            self.subqueries += 1

    def answered(self, stats: dict[str, Any]) -> None:
        """A sub-query answered; `stats` its node's account (a scan's, or a whole query's with its scans)."""
        scanned = stats.get("rows_scanned", 0) + sum(s.get("rows_scanned", 0) for s in stats.get("scans", []))
        with self._lock:
            self.subqueries_done += 1
            self.rows_scanned += scanned

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
        """The query has ended: Spark's stages as they are now, asked no more."""
        stages = self._stages()
        self.spark_stages = None if stages is None else lambda: stages

    def document(self) -> dict[str, Any]:
        doc: dict[str, Any] = {
            "subqueries": self.subqueries,
            "subqueries_done": self.subqueries_done,
            "rows_scanned": self.rows_scanned,
        }
        stages = self._stages()
        if stages is not None:
            doc["spark_stages_done"], doc["spark_stages"] = stages
        return doc


PROGRESS: ContextVar[Progress | None] = ContextVar("cxg_progress", default=None)


@contextmanager
def subquery() -> Iterator[Callable[[dict[str, Any]], None]]:
    """Around one sub-query sent to a node: counted as sent now; call what it yields with the
    node's stats once it is answered."""
    progress = PROGRESS.get()
    if progress is None:
        yield lambda stats: None
        return
    progress.sent()
    yield progress.answered


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
