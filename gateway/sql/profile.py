"""What a query did, for EXPLAIN ANALYZE: every scan the coordinator asked of a node (what it was
for, which node, rows and bytes that came back, the time, the blocks the node read or skipped), and
Spark's jobs, stages and operators with the rows each put out.

A query being analyzed carries a `Profile` in the context variable `PROFILE`; the places that scan
nodes open their scans through `node_scan`, which records each one there (and does nothing more
when no profile is set). Scans that Spark's executors make themselves (the `cxg` data source) show
as Spark's operators, not here.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass, field
from typing import Any

from gateway.sql.progress import subquery
from storage import NodeClient, ScanRequest, ScanStream, format_size


@dataclass
class NodeScan:
    """One scan on one node, as the coordinator saw it."""

    step: str  # what it was for: "[1] orders AS o, fetched first", ...
    node: str
    rows: int
    bytes: int
    seconds: float
    stats: dict[str, Any]  # the node's own account: blocks, blocks_skipped, rows_scanned, backend ...

    def line(self) -> str:
        s = self.stats
        blocks = f"{s.get('blocks', 0):,} block(s) read, {s.get('blocks_skipped', 0):,} skipped by min/max"
        return (
            f"{self.node}: {self.rows:,} rows, {format_size(self.bytes)} in {self.seconds * 1000:.1f} ms "
            f"({blocks}; {s.get('rows_scanned', 0):,} rows scanned on {s.get('backend', '?')})"
        )


@dataclass
class Profile:
    scans: list[NodeScan] = field(default_factory=list)
    spark: list[str] = field(default_factory=list)  # Spark's jobs, stages and operators, as lines
    node: list[str] = field(default_factory=list)  # a whole query on one node: its scans and DataFusion's operators
    rows: int | None = None  # the result's rows, where the query ran analyzed returned none (on a node)
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    def record(self, scan: NodeScan) -> None:
        with self._lock:
            self.scans.append(scan)

    def lines(self, rows: int, seconds: float) -> list[str]:
        lines = [f"executed in {seconds:.3f} s: {self.rows if self.rows is not None else rows:,} row(s)"]
        if self.scans:
            lines.append("scans on the nodes (as the coordinator received them):")
            by_step: dict[str, list[NodeScan]] = {}
            for scan in self.scans:
                by_step.setdefault(scan.step, []).append(scan)
            for step, scans in by_step.items():
                lines.append(f"  {step}")
                lines += [f"    {scan.line()}" for scan in sorted(scans, key=lambda s: s.node)]
        return lines + self.node + self.spark


def node_lines(node: str, stats: dict[str, Any], seconds: float, part: str = "the whole query") -> list[str]:
    """A node's account of a query (`part` of one) it answered (`storage.node_query`): each view's
    scan, then DataFusion's operators with their metrics."""
    lines = [f"{part} on {node} in {seconds * 1000:.1f} ms ({stats.get('backend', '?')} scans, then DataFusion):"]
    for scan in stats.get("scans", []):
        lines.append(
            f"  scan {scan['table']} -> {scan['view']}: {scan['rows']:,} rows, {format_size(scan['bytes'])} "
            f"in {scan['seconds'] * 1000:.1f} ms ({scan.get('blocks', 0):,} block(s) read, "
            f"{scan.get('blocks_skipped', 0):,} skipped by min/max)"
        )
        lines += [f"    semi-join filter: {received}" for received in scan.get("received", [])]
    lines.append(f"  DataFusion: {stats.get('engine_seconds', 0) * 1000:.1f} ms; operators (rows out, time):")
    return lines + [f"    {line}" for line in stats.get("operators", [])]


PROFILE: ContextVar[Profile | None] = ContextVar("cxg_profile", default=None)


@contextmanager
def node_scan(client: NodeClient, request: ScanRequest, step: str) -> Iterator[ScanStream]:
    """`client.scan(request)`, recorded in the query's profile and progress once read to its end."""
    profile = PROFILE.get()
    started = time.perf_counter()
    with subquery() as answered, client.scan(request) as stream:
        yield stream
        answered(stream.stats)
    if profile is not None:
        seconds = time.perf_counter() - started
        profile.record(NodeScan(step, stream.node, stream.rows, stream.bytes, seconds, stream.stats))


def codegen_counters(spark: Any) -> tuple[int, int]:
    """The driver's code generation so far: nanoseconds spent generating whole-stage code, and
    the classes compiled (those not found in the generated-code cache)."""
    jvm = spark._jvm
    return (
        jvm.org.apache.spark.sql.execution.WholeStageCodegenExec.codeGenTime(),
        jvm.org.apache.spark.metrics.source.CodegenMetrics.METRIC_COMPILATION_TIME().getCount(),
    )


def spark_lines(spark: Any, frame: Any, group: str, codegen_before: tuple[int, int]) -> list[str]:
    """Spark's account of a query it ran as the job group `group`, `frame` the DataFrame collected:
    its fixed cost (the phases and slowest rules of its planning, from its own tracker, and the
    code generated and compiled since `codegen_before`), its jobs, stages and tasks, and its
    physical operators (after adaptive execution) with the rows each put out and the time its
    generated code took."""
    lines = _fixed_cost_lines(frame, fixed_cost(spark, frame, codegen_before))
    tracker = spark.sparkContext.statusTracker()
    jobs = tracker.getJobIdsForGroup(group)
    stages = [tracker.getStageInfo(s) for j in jobs if (info := tracker.getJobInfo(j)) for s in info.stageIds]
    stages = [s for s in stages if s is not None]
    ran = [s for s in stages if s.numCompletedTasks or s.numFailedTasks]
    tasks = sum(s.numCompletedTasks for s in ran)
    failed = sum(s.numFailedTasks for s in ran)
    lines += [
        f"Spark: {len(jobs)} job(s), {len(ran)} stage(s) run ({len(stages) - len(ran)} skipped, their output reused), "
        f"{tasks:,} task(s), {failed} failed",
        "  operators (rows out; time of each stage's generated code):",
    ]
    lines += [f"    {line}" for line in _operators(frame._jdf.queryExecution().executedPlan(), 0)]
    return lines


PHASES = ("parsing", "analysis", "optimization", "planning")  # QueryPlanningTracker's, in order
SLOWEST_RULES = 3


def fixed_cost(spark: Any, frame: Any, codegen_before: tuple[int, int]) -> dict[str, float]:
    """Spark's fixed cost of the query `frame` ran: milliseconds of each planning phase (its
    QueryPlanningTracker), of whole-stage code generation and the classes compiled on the driver
    since `codegen_before` (the JVM's counters: a query running beside it counts too)."""
    phases, entries = {}, frame._jdf.queryExecution().tracker().phases().iterator()
    while entries.hasNext():
        entry = entries.next()
        phases[entry._1()] = entry._2().durationMs()
    after = codegen_counters(spark)
    return {
        **{f"{name}_ms": float(phases.get(name, 0)) for name in PHASES},
        "codegen_ms": (after[0] - codegen_before[0]) / 1e6,
        "compiled": float(after[1] - codegen_before[1]),
    }


def _fixed_cost_lines(frame: Any, cost: dict[str, float]) -> list[str]:
    """The fixed cost as EXPLAIN ANALYZE shows it, with the slowest rules of the query's planning."""
    timed = ", ".join(f"{name} {cost[f'{name}_ms']:.0f} ms" for name in PHASES)
    lines = [
        f"Spark's fixed cost: {timed}; whole-stage code generated in {cost['codegen_ms']:.1f} ms, "
        f"{cost['compiled']:.0f} class(es) compiled (not in the generated-code cache)"
    ]
    rules = frame._jdf.queryExecution().tracker().topRulesByTime(SLOWEST_RULES)
    slowest = []
    for i in range(rules.size()):
        name, summary = rules.apply(i)._1(), rules.apply(i)._2()
        slowest.append(
            f"{name.rsplit('.', 1)[-1]} {summary.totalTimeNs() / 1e6:.1f} ms "
            f"({summary.numInvocations()} run(s), {summary.numEffectiveInvocations()} changing the plan)"
        )
    if slowest:
        lines.append("  slowest rules: " + "; ".join(slowest))
    return lines


_WRAPPERS = ("InputAdapter", "ResultQueryStage", "ShuffleQueryStage", "BroadcastQueryStage", "TableCacheQueryStage")


def _operators(node: Any, depth: int) -> Iterator[str]:
    """The operator tree under a physical plan node (py4j), one line each, wrappers left out."""
    name = node.nodeName()
    if name == "AdaptiveSparkPlan":
        yield from _operators(node.executedPlan(), depth)
        return
    if name in _WRAPPERS:
        inner = node.plan() if name.endswith("QueryStage") else node.child()
        yield from _operators(inner, depth)
        return
    metrics = {}
    entries = node.metrics().iterator()
    while entries.hasNext():
        entry = entries.next()
        metrics[entry._1()] = entry._2().value()
    figures = []
    if "numOutputRows" in metrics:
        figures.append(f"{metrics['numOutputRows']:,} rows")
    if metrics.get("pipelineTime"):
        figures.append(f"{metrics['pipelineTime']:,} ms")
    if metrics.get("dataSize"):
        figures.append(format_size(metrics["dataSize"]))
    yield "  " * depth + name + (f": {', '.join(figures)}" if figures else "")
    children = node.children()
    for i in range(children.size()):
        yield from _operators(children.apply(i), depth + 1)
