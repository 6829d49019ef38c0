"""What a load test leaves behind (seed 004 §4.1, the client's logs): the events log, one row per
query, the region's queue length over time, a JSON summary, and two plots (response time per
query number; queue length over time)."""

from __future__ import annotations

import csv
import json
import math
from pathlib import Path
from typing import Any

from loadtests.measures import Stats, Summary
from loadtests.output import pyplot, save_figure
from loadtests.simulator import Run

QUERY_COLUMNS = [
    "time_s",
    "statement",
    "user",
    "region",
    "number",
    "tag",
    "status",
    "code",
    "response_s",
    "queue_s",
    "execute_s",
    "answer_bytes",
    "rows",
    "queue_length",
]


def _seconds(ms: float | None) -> str:
    return "" if ms is None else f"{ms / 1000:.6f}"


def write_logs(run: Run, summary: Summary, directory: Path, title: str = "load test") -> dict[str, Path]:
    """Write the CSV logs, the JSON summary and the PNG plots into `directory`; their paths."""
    directory.mkdir(parents=True, exist_ok=True)
    paths = {
        "events": directory / "events.csv",
        "queries": directory / "queries.csv",
        "queue": directory / "queue.csv",
        "summary": directory / "summary.json",
        "response_plot": directory / "response_times.png",
        "queue_plot": directory / "queue_length.png",
    }
    with paths["events"].open("w", newline="") as f:
        writer = csv.writer(f)
        writer.writerow(["time_s", "event", "detail"])
        writer.writerows([(f"{t:.6f}", event, detail) for t, event, detail in run.events])
    with paths["queries"].open("w", newline="") as f:
        writer = csv.writer(f)
        writer.writerow(QUERY_COLUMNS)
        for r in run.records:
            writer.writerow(
                [
                    f"{r.answered:.6f}" if r.answered is not None else "",
                    r.statement,
                    r.user,
                    r.region,
                    r.number,
                    r.tag,
                    r.status,
                    r.code,
                    f"{r.response:.6f}" if r.response is not None else "",
                    _seconds(r.queue_ms),
                    _seconds(r.execute_ms),
                    r.answer_bytes,
                    r.rows,
                    "" if r.queue_length is None else r.queue_length,
                ]
            )
    with paths["queue"].open("w", newline="") as f:
        writer = csv.writer(f)
        writer.writerow(["time_s", "region", "queue_length", "in_flight"])
        writer.writerows([(f"{t:.6f}", region, q, n) for t, region, q, n in run.queue])
    paths["summary"].write_text(
        json.dumps(
            {
                "title": title,
                "users": run.users,
                "model": run.model,
                "started": run.started,
                "seconds": run.seconds,
                **_finite(summary.to_json()),
            },
            indent=1,
        )
        + "\n"
    )
    plot_responses(run, paths["response_plot"], title)
    plot_queue(run, paths["queue_plot"], title)
    return paths


def _finite(value: Any) -> Any:
    """NaN (no answers of a kind) as null, so the JSON stays standard."""
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, dict):
        return {k: _finite(v) for k, v in value.items()}
    return value


def plot_responses(run: Run, path: Path, title: str) -> None:
    figure, axes = pyplot().subplots(figsize=(9, 4.5))
    ok = [r for r in run.records if r.ok and r.response is not None]
    failed = [r for r in run.records if not r.ok and r.response is not None]
    axes.scatter([r.number for r in ok], [r.response for r in ok], s=6, label="answered")
    if failed:
        axes.scatter([r.number for r in failed], [r.response for r in failed], s=12, marker="x", label="error")
    if ok:
        mean = sum(r.response for r in ok) / len(ok)
        axes.axhline(mean, linestyle="--", linewidth=1, color="gray", label=f"mean {mean:.3g} s")
    axes.set_xlabel("query number (sending order)")
    axes.set_ylabel("response time, s")
    axes.set_title(f"{title}: response time per query")
    axes.legend(loc="upper right")
    save_figure(figure, path)


def plot_queue(run: Run, path: Path, title: str) -> None:
    figure, axes = pyplot().subplots(figsize=(9, 4.5))
    for region in sorted({q[1] for q in run.queue}):
        points = [q for q in run.queue if q[1] == region]
        axes.step([q[0] for q in points], [q[2] for q in points], where="post", label=f"region {region} queue")
        axes.step(
            [q[0] for q in points], [q[3] for q in points], where="post", alpha=0.5, label=f"region {region} in flight"
        )
    axes.set_xlabel("time since start, s")
    axes.set_ylabel("queries")
    axes.set_title(f"{title}: the region's queue")
    if run.queue:
        axes.legend(loc="best")
    save_figure(figure, path)


def stats_rows(summary: Summary, unit: float = 1.0) -> list[list[str]]:
    """Rows of the summary table (overall first, then per query type), times divided by `unit`."""

    def row(name: str, s: Stats) -> list[str]:
        def t(v: float) -> str:
            return "-" if not math.isfinite(v) else f"{v / unit:.3f}"

        return [
            name,
            str(s.count),
            str(s.ok),
            str(s.errors),
            str(s.rejections),
            t(s.mean),
            t(s.sigma),
            t(s.p50),
            t(s.p95),
            t(s.p99),
            t(s.p999),
            t(s.max),
        ]

    return [row("all", summary.overall), *[row(tag, s) for tag, s in summary.by_type.items()]]


STATS_HEADERS = ["query", "counted", "ok", "errors", "rejected", "M", "σ", "p50", "p95", "p99", "p99.9", "max"]
