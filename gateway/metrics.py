"""Prometheus metrics of a gateway (base units: seconds, bytes): what it admitted, refused as
invalid and finished, how long each stage took, and, read from the region balancer at scrape time,
its queue, node slots, drain state and rejections (its count is the only one: /v1/cluster shows
the same), and the bytes of results kept. docs/metrics.md lists them all."""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Histogram, disable_created_metrics, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily

from balancer import RegionBalancer
from gateway.statements import Statements

STAGES = ("prepare", "queue", "execute", "total")
disable_created_metrics()  # the *_created series only add noise to a scrape
BUCKETS = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 300, 1800)


class RegionCollector:
    """Gauges of the region balancer and the statements, read when scraped."""

    def __init__(self, balancer: RegionBalancer, statements: Statements):
        self.balancer = balancer
        self.statements = statements

    def collect(self):
        snap = self.balancer.snapshot()
        yield GaugeMetricFamily(
            "cxg_queries_running", "Statements holding their slots", value=self.statements.running()
        )
        yield GaugeMetricFamily(
            "cxg_results_bytes", "Bytes of the results finished statements keep", value=self.statements.held
        )
        yield CounterMetricFamily(
            "cxg_results_evicted",
            "Results dropped before their time to stay within gateway.result_memory",
            value=self.statements.evicted,
        )
        known = GaugeMetricFamily(
            "cxg_statements", "Statements the gateway knows (GET /v1/statements), by state", labels=["state"]
        )
        for state, count in self.statements.by_state().items():
            known.add_metric([state], count)
        yield known
        work = self.statements.done_so_far()
        yield CounterMetricFamily(
            "cxg_subqueries_answered", "Sub-queries the nodes answered for statements", value=work["subqueries"]
        )
        yield CounterMetricFamily(
            "cxg_rows_scanned", "Rows the nodes scanned for statements' sub-queries", value=work["rows_scanned"]
        )
        yield GaugeMetricFamily("cxg_queue_length", "Queries waiting in the region's queue", value=snap["queue"])
        yield GaugeMetricFamily(
            "cxg_queries_in_flight", "Queries sent to nodes and not yet answered", value=snap["in_flight"]
        )
        yield GaugeMetricFamily(
            "cxg_region_draining", "1 while the region admits no new query (drained)", value=int(snap["draining"])
        )
        slots = GaugeMetricFamily("cxg_node_slots", "Slots (K) of each node", labels=["node"])
        busy = GaugeMetricFamily("cxg_node_slots_busy", "Slots running a query", labels=["node"])
        buffered = GaugeMetricFamily("cxg_node_buffered", "Queries in the node's one-query buffer", labels=["node"])
        ready = GaugeMetricFamily("cxg_node_ready", "1 while the node accepts a query", labels=["node"])
        draining = GaugeMetricFamily("cxg_node_draining", "1 while the node takes no new query", labels=["node"])
        for member in snap["members"]:
            for node in member["nodes"]:
                slots.add_metric([node["name"]], node["slots"])
                busy.add_metric([node["name"]], node["running"])
                buffered.add_metric([node["name"]], node["buffered"])
                ready.add_metric([node["name"]], int(node["ready"]))
                draining.add_metric([node["name"]], int(node["draining"]))
        yield from (slots, busy, buffered, ready, draining)
        rejected = CounterMetricFamily(
            "cxg_queries_rejected", "Queries refused for capacity (429, 503) before running", labels=["reason"]
        )
        for reason, count in sorted(snap["rejections"].items()):
            rejected.add_metric([reason], count)
        yield rejected


class Metrics:
    def __init__(self, balancer: RegionBalancer, statements: Statements):
        self.registry = CollectorRegistry()
        self.admitted = Counter("cxg_queries_admitted", "Queries accepted by the gateway", registry=self.registry)
        self.invalid = Counter(
            "cxg_queries_invalid", "Queries refused as invalid (4xx) before running", ["code"], registry=self.registry
        )
        self.finished = Counter("cxg_queries_finished", "Queries that ended", ["state"], registry=self.registry)
        self.stage = Histogram(
            "cxg_query_stage_seconds", "Time per stage of a query", ["stage"], buckets=BUCKETS, registry=self.registry
        )
        self.registry.register(RegionCollector(balancer, statements))

    def observe(self, timings: dict[str, float]) -> None:
        for stage in STAGES:
            if stage in timings:
                self.stage.labels(stage).observe(timings[stage])

    def render(self) -> bytes:
        return generate_latest(self.registry)
