"""Standing queries against re-running them and against Spark Structured Streaming, side by side.

A two-node region holds `events` (hash-placed on device). `--queries` standing queries (per-minute
aggregates, each its own grouping and filter) are registered; then `--appends` appends of
`--batch` rows arrive through the gateway, one after the other. Measured:

- standing: appends per second sustained with every query registered, and the latency from an
  append sent to its update pushed over Server-Sent Events (one listener, on the query registered
  last);
- re-running: after an append, the same queries run again from scratch through the query API
  (the time until every one has its new answer);
- Spark Structured Streaming: each append written as a Parquet file into a directory read as a
  stream by one of the same aggregates (update mode, micro-batches as fast as they go), the latency
  from the file's arrival to the micro-batch that holds it, at the same append rate.

    python -m benchmarks.bench_standing --json docs/bench/standing.json
"""

from __future__ import annotations

import argparse
import datetime
import decimal
import json
import statistics
import tempfile
import threading
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from balancer import NativeBackend, NodeServer
from gateway.background import serve
from gateway.client import Client
from gpu_kernels import get_backend
from loadtests import write_json
from regions import EmbeddedRegion, load_config
from storage import Node, Placement, Store, TableSchema, load_table

START = datetime.datetime(2026, 1, 1)
HOUR = 60  # the rows before the appends span an hour; each append is the next minute
SCHEMA = pa.schema(
    [("ts", pa.timestamp("us")), ("device", pa.int64()), ("amount", pa.decimal128(12, 2)), ("kind", pa.string())]
)


def events(rows: int, seed: int, minute: int = 0, minutes: int = 1) -> pa.Table:
    """`rows` synthetic events over `minutes` minutes from `minute` on."""
    rng = np.random.default_rng(seed)
    seconds = minute * 60 + np.sort(rng.integers(0, 60 * minutes, rows))
    return pa.table(
        {
            "ts": pa.array([START + datetime.timedelta(seconds=int(s)) for s in seconds], pa.timestamp("us")),
            "device": pa.array(rng.integers(0, 1000, rows), pa.int64()),
            "amount": pa.array(
                [decimal.Decimal(int(c)).scaleb(-2) for c in rng.integers(0, 100_000, rows)], pa.decimal128(12, 2)
            ),
            "kind": pa.array(rng.choice(["a", "b", "c", "d"], rows), pa.string()),
        },
        schema=SCHEMA,
    )


def query(i: int) -> str:
    """The i-th standing query: its own grouping (device modulo a number) and filter."""
    return (
        f"SELECT date_trunc('minute', ts) AS minute, device % {2 + i % 50} AS g, count(*) AS n, "
        f"sum(amount) AS total, avg(amount) AS mean, max(ts) AS last FROM events "
        f"WHERE kind <> '{'abcd'[i % 4]}' GROUP BY 1, 2"
    )


def _post(url: str, body: bytes, content_type: str) -> dict:
    request = urllib.request.Request(url, data=body, method="POST", headers={"Content-Type": content_type})
    try:
        with urllib.request.urlopen(request, timeout=300) as response:
            return json.loads(response.read())
    except urllib.error.HTTPError as e:
        raise RuntimeError(f"{url}: HTTP {e.code}: {e.read().decode()}") from None


def _lines(table: pa.Table) -> bytes:
    rows = table.to_pylist()
    return "\n".join(
        json.dumps({"ts": r["ts"].isoformat(), "device": r["device"], "amount": str(r["amount"]), "kind": r["kind"]})
        for r in rows
    ).encode()


def _listen(url: str, arrived: dict[int, float], stop: threading.Event) -> threading.Thread:
    """A thread noting when each version's update arrives over Server-Sent Events."""

    def read() -> None:
        with urllib.request.urlopen(url, timeout=600) as stream:
            for raw in stream:
                line = raw.decode()
                if line.startswith("data: "):
                    data = json.loads(line[6:])
                    if "version" in data and "changed" in data:
                        arrived[data["version"]] = time.perf_counter()
                if stop.is_set():
                    return

    thread = threading.Thread(target=read, daemon=True)
    thread.start()
    return thread


def _quantiles(values: list[float]) -> dict[str, float]:
    ordered = sorted(values)
    return {
        "p50_ms": round(statistics.median(ordered) * 1000, 1),
        "p99_ms": round(ordered[min(len(ordered) - 1, int(0.99 * len(ordered)))] * 1000, 1),
    }


def standing_and_rerun(rows: int, queries: int, appends: int, batch: int, reruns: int) -> dict[str, Any]:
    with tempfile.TemporaryDirectory() as root:
        stores = [Store(Path(root) / f"n{i}", node=f"node-{i}") for i in range(2)]
        schema = TableSchema.from_arrow("events", SCHEMA, placement=Placement.parse("hash(device)", 8))
        load_table(stores, schema, events(rows, 1, minutes=HOUR))
        with (
            serve(Node(stores[0], get_backend("numpy"), slots=2).app()) as u0,
            serve(Node(stores[1], get_backend("numpy"), slots=2).app()) as u1,
        ):
            urls = {"node-0": u0, "node-1": u1}
            nodes = [NodeServer(s.node, NativeBackend(s), 2, urls[s.node]) for s in stores]
            with EmbeddedRegion(load_config(None, ["gateway.port=0"]), nodes) as region:
                return _measure(region.url, queries, appends, batch, reruns, rows)


def _measure(url: str, queries: int, appends: int, batch: int, reruns: int, rows: int) -> dict[str, Any]:
    Client(url).wait_ready(timeout=120, nodes=2)
    started = time.perf_counter()
    registered = [
        _post(f"{url}/v1/subscriptions", json.dumps({"sql": query(i)}).encode(), "application/json")
        for i in range(queries)
    ]
    register_s = time.perf_counter() - started
    print(f"registered {queries} standing queries in {register_s:.1f} s", flush=True)
    arrived: dict[int, float] = {}
    stop = threading.Event()
    listener = _listen(registered[-1]["events"], arrived, stop)  # the last registered: folded last
    time.sleep(0.5)  # the listener connected (a benchmark paces; tests wait for states)
    sent: dict[int, float] = {}
    answered: list[float] = []
    minute = HOUR
    began = time.perf_counter()
    for i in range(appends):
        body = _lines(events(batch, 100 + i, minute + i))
        t = time.perf_counter()
        version = _post(f"{url}/v1/tables/events/rows", body, "application/x-ndjson")["version"]
        answered.append(time.perf_counter() - t)
        sent[version] = t
    sustained = appends / (time.perf_counter() - began)
    deadline = time.perf_counter() + 30
    while len(arrived) < len(sent) and time.perf_counter() < deadline:
        time.sleep(0.05)
    stop.set()
    latencies = [arrived[v] - t for v, t in sent.items() if v in arrived]
    print(f"standing: {sustained:.1f} appends/s with {queries} queries", flush=True)
    client = Client(url)
    rerun: list[float] = []
    for i in range(reruns):
        _post(
            f"{url}/v1/tables/events/rows", _lines(events(batch, 900 + i, minute + appends + i)), "application/x-ndjson"
        )
        t = time.perf_counter()
        for q in range(queries):
            client.execute(query(q))
        rerun.append(time.perf_counter() - t)
        print(f"re-running {queries} queries after an append: {rerun[-1]:.1f} s", flush=True)
    listener.join(0)
    return {
        "queries": queries,
        "rows": rows,
        "appends": appends,
        "batch": batch,
        "register_s": round(register_s, 2),
        "standing": {
            "appends_per_s": round(sustained, 2),
            "append_request": _quantiles(answered),
            "pushed_after_sent": _quantiles(latencies),
            "updates_received": len(latencies),
        },
        "rerun": {
            "runs": reruns,
            "all_queries": _quantiles(rerun),
            "per_query_ms": round(1000 * sum(rerun) / max(1, reruns * queries), 1),
        },
    }


def structured_streaming(appends: int, batch: int, rate: float, rows: int) -> dict[str, Any]:
    """One of the aggregates as a Spark Structured Streaming query over a directory of Parquet
    files, one file per append at `rate` appends a second: the latency from a file's arrival to
    the end of the micro-batch holding it."""
    from pyspark.sql import SparkSession
    from pyspark.sql import functions as F

    spark = SparkSession.builder.master("local[2]").appName("standing-bench").getOrCreate()
    spark.sparkContext.setLogLevel("ERROR")
    with tempfile.TemporaryDirectory() as root:
        inbox = Path(root) / "inbox"
        inbox.mkdir()
        pq.write_table(events(rows, 1, minutes=HOUR), inbox / "initial.parquet")
        stream = spark.readStream.schema(spark.read.parquet(str(inbox)).schema).parquet(str(inbox))
        counts = (
            stream.where(F.col("kind") != "a")
            .groupBy(F.date_trunc("minute", "ts").alias("minute"), (F.col("device") % 2).alias("g"))
            .agg(F.count("*").alias("n"), F.sum("amount").alias("total"), F.avg("amount").alias("mean"), F.max("ts"))
        )
        done: dict[int, float] = {}

        def on_batch(frame: Any, batch_id: int) -> None:
            frame.count()
            done[batch_id] = time.perf_counter()

        running = (
            counts.writeStream.outputMode("update").foreachBatch(on_batch).trigger(processingTime="0 seconds").start()
        )
        while 0 not in done:
            time.sleep(0.05)
        arrivals: list[tuple[float, int]] = []
        minute = HOUR
        for i in range(appends):
            table = events(batch, 100 + i, minute + i)
            staging = Path(root) / f"part-{i:05d}.parquet"
            pq.write_table(table, staging)
            arrivals.append((time.perf_counter(), len(done)))
            staging.rename(inbox / staging.name)  # whole files only
            time.sleep(1 / rate)
        deadline = time.perf_counter() + 60
        latencies = []
        for t, seen in arrivals:
            while time.perf_counter() < deadline and not any(b >= seen and s >= t for b, s in done.items()):
                time.sleep(0.05)
            after = [s for b, s in done.items() if b >= seen and s >= t]
            if after:
                latencies.append(min(after) - t)
        running.stop()
    spark.stop()
    return {
        "appends": appends,
        "rate_per_s": round(rate, 2),
        "queries": 1,
        "batch_done_after_file": _quantiles(latencies),
    }


def report(figures: dict[str, Any]) -> None:
    s, r, ss = figures["standing"], figures["rerun"], figures["structured_streaming"]
    rows = [
        ("standing: append sent -> pushed", s["pushed_after_sent"], f"{s['appends_per_s']} appends/s sustained"),
        ("re-running every query", r["all_queries"], f"{r['per_query_ms']} ms a query"),
        ("Structured Streaming, 1 query", ss["batch_done_after_file"], f"at {ss['rate_per_s']} appends/s"),
    ]
    print(f"\n{figures['queries']} standing queries over {figures['rows']:,} rows; appends of {figures['batch']} rows")
    print(f"{'system':<34}{'p50 ms':>10}{'p99 ms':>10}  note")
    for name, q, note in rows:
        print(f"{name:<34}{q['p50_ms']:>10}{q['p99_ms']:>10}  {note}")
    print(
        f"updates {figures['sooner_than_rerun']}x sooner than re-running; "
        f"{figures['sooner_than_structured_streaming']}x sooner than Structured Streaming (p50)"
    )


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--rows", type=int, default=200_000, help="rows of events before the appends")
    p.add_argument("--queries", type=int, default=100)
    p.add_argument("--appends", type=int, default=40)
    p.add_argument("--batch", type=int, default=100, help="rows an append carries")
    p.add_argument("--reruns", type=int, default=3, help="appends after which every query is run again")
    p.add_argument("--json", type=Path, metavar="PATH")
    args = p.parse_args(argv)
    figures = standing_and_rerun(args.rows, args.queries, args.appends, args.batch, args.reruns)
    rate = figures["standing"]["appends_per_s"]
    figures["structured_streaming"] = structured_streaming(min(args.appends, 20), args.batch, rate, args.rows)
    pushed = figures["standing"]["pushed_after_sent"]["p50_ms"]
    figures["sooner_than_rerun"] = round(figures["rerun"]["all_queries"]["p50_ms"] / pushed, 1)
    figures["sooner_than_structured_streaming"] = round(
        figures["structured_streaming"]["batch_done_after_file"]["p50_ms"] / pushed, 1
    )
    report(figures)
    write_json(args.json, figures)


if __name__ == "__main__":
    main()
