"""The measures of a load test (seed 004 §4.2): with the first and last k answers excluded
(warm-up and cool-down; answers counted in the order they arrive, as in the dissertation's
query logs), M = mean response time from entering the queue to the answer, σ its standard
deviation, T the time in which the counted answers arrived (from the k-th answer to the
(n-k)-th); plus throughput, HDR-histogram percentiles, and errors and rejections counted apart,
overall and per query type."""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field
from typing import Any

from hdrh.histogram import HdrHistogram

REJECTED = (429, 503)
PERCENTILES = (50.0, 95.0, 99.0, 99.9)


@dataclass
class Record:
    """One query as a user saw it; times in seconds from the start of the run."""

    number: int  # in sending order, from 1
    user: int
    region: int
    tag: str
    query: int  # index in the scenario's list
    scheduled: float  # open model: when it was due; closed: = sent
    sent: float
    answered: float | None = None
    status: int = 0  # HTTP status; 0: no answer (connection failed)
    code: str = ""  # error code when not ok
    statement: str = ""
    rows: int = 0
    answer_bytes: int = 0
    queue_ms: float | None = None  # from the gateway's timings
    execute_ms: float | None = None
    queue_length: int | None = None  # the region's queue when the answer left

    @property
    def ok(self) -> bool:
        return self.status == 200 and not self.code

    @property
    def rejected(self) -> bool:
        return self.status in REJECTED

    @property
    def response(self) -> float | None:
        """Seconds from when the query was due (open) or sent (closed) to its answer."""
        return None if self.answered is None else self.answered - self.scheduled


@dataclass
class Stats:
    count: int = 0
    ok: int = 0
    errors: int = 0
    rejections: int = 0
    mean: float = math.nan  # M, seconds
    sigma: float = math.nan  # σ, seconds
    p50: float = math.nan
    p95: float = math.nan
    p99: float = math.nan
    p999: float = math.nan
    max: float = math.nan


@dataclass
class Summary:
    sent: int
    answered: int
    excluded: int  # per end
    counted: int
    T: float  # seconds to process the counted queries
    throughput: float  # counted queries per second of T
    overall: Stats
    by_type: dict[str, Stats] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


def stats(records: list[Record]) -> Stats:
    times = [r.response for r in records if r.ok and r.response is not None]
    out = Stats(
        count=len(records),
        ok=len(times),
        errors=sum(1 for r in records if not r.ok and not r.rejected),
        rejections=sum(1 for r in records if r.rejected),
    )
    if not times:
        return out
    out.mean = sum(times) / len(times)
    out.sigma = math.sqrt(sum((t - out.mean) ** 2 for t in times) / len(times))
    histogram = HdrHistogram(1, max(2, int(max(times) * 1e6) + 1), 3)  # microseconds, 3 significant digits
    for t in times:
        histogram.record_value(max(1, int(t * 1e6)))
    out.p50, out.p95, out.p99, out.p999 = (histogram.get_value_at_percentile(p) / 1e6 for p in PERCENTILES)
    out.max = max(times)
    return out


def by_answer(records: list[Record]) -> list[Record]:
    """Records in the order their answers arrived (as the dissertation's logs list them)."""
    return sorted(records, key=lambda r: (r.answered is None, r.answered or 0.0, r.number))


def counted(records: list[Record], exclude: int) -> tuple[list[Record], float]:
    """Answers exclude+1 .. n-exclude in arrival order (all when that leaves none), and T: the
    time from the exclude-th answer to the last counted one."""
    ordered = by_answer(records)
    if exclude <= 0 or len(ordered) <= 2 * exclude:
        kept, start = ordered, min((r.sent for r in ordered), default=0.0)
    else:
        kept, start = ordered[exclude : len(ordered) - exclude], ordered[exclude - 1].answered or 0.0
    ends = [r.answered for r in kept if r.answered is not None]
    return kept, (max(ends) - start) if ends else 0.0


def summarize(records: list[Record], exclude: int) -> Summary:
    kept, span = counted(records, exclude)
    by_type: dict[str, list[Record]] = {}
    for r in kept:
        by_type.setdefault(r.tag, []).append(r)
    return Summary(
        sent=len(records),
        answered=sum(1 for r in records if r.answered is not None),
        excluded=(len(records) - len(kept)) // 2,
        counted=len(kept),
        T=span,
        throughput=len(kept) / span if span > 0 else 0.0,
        overall=stats(kept),
        by_type={tag: stats(rs) for tag, rs in sorted(by_type.items(), key=lambda kv: _tag_order(kv[0]))},
    )


def _tag_order(tag: str) -> tuple[int, str]:
    digits = "".join(c for c in tag if c.isdigit())
    return (int(digits) if digits else 1 << 30, tag)
