"""The overload report: a two-node region of real processes (as `cxg up` starts it) with its
default admission, offered twice the load it can serve, in the open model.

    python -m benchmarks.bench_overload --sf 0.1 --json docs/bench/overload_sf0.1.json

1. Capacity: closed-loop clients (one per slot and one more) for `--seconds`; served queries/s.
2. Unloaded latency: one client, one query at a time.
3. Soak: Poisson arrivals at `--factor` x capacity for `--seconds`, each query in its own thread
   (an open model: no client waits for the one before). Every answer is judged against DuckDB's:
   right, refused (429/503 with Retry-After), wrong, other error, lost (no answer); statement ids
   answered twice are counted. The region's queue and the gateway's memory are sampled.
4. Afterwards: how long until the queue is empty, and the unloaded latency again.
5. A runaway join (lineitem joined to itself on `<`: N² / 2 pairs) beside the
   ordinary join query: its latency alone and beside it.
"""

from __future__ import annotations

import json
import random
import statistics
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from benchmarks import faults
from benchmarks.common import parser
from gateway import Client
from loadtests import console, print_table, write_json

RUNAWAY = "SELECT count(*) AS n FROM lineitem a JOIN lineitem b ON a.l_orderkey < b.l_orderkey"  # N² / 2 pairs
REFUSED = {"queue_full", "too_many_queries", "no_nodes"}


def _judged(region: faults.FaultRegion, expected: dict, name: str, tally: faults.Tally) -> tuple[str, float]:
    started = time.perf_counter()
    status, doc, headers = faults.ask(region.url, faults.QUERIES[name], timeout=120)
    seconds = time.perf_counter() - started
    code = (doc.get("error") or {}).get("code", "")
    if status in (429, 503) and code in REFUSED and "Retry-After" in headers:
        outcome = "refused"
        if doc.get("id"):
            tally.ids[doc["id"]] += 1
        tally.outcomes[outcome] += 1
    else:
        outcome = tally.add(name, status, doc, headers, expected)
    return outcome, seconds


def _percentile(values: list[float], q: float) -> float:
    return statistics.quantiles(values, n=100, method="inclusive")[q - 1] if len(values) > 1 else sum(values)


def capacity(region: faults.FaultRegion, expected: dict, clients: int, seconds: float) -> float:
    """Queries per second served by `clients` closed-loop clients."""
    tally = faults.clients(region.url, expected, tuple(faults.QUERIES), faults.for_seconds(seconds), 7, clients)
    if tally.wrong:
        raise SystemExit(f"wrong answers before any overload: {tally.wrong[:3]}")
    return tally.outcomes["right"] / seconds


def latency(region: faults.FaultRegion, expected: dict, name: str, rounds: int = 3) -> float:
    """Median latency of query `name`, one at a time."""
    tally, times = faults.Tally(), []
    for _ in range(rounds):
        outcome, seconds = _judged(region, expected, name, tally)
        if outcome != "right":
            raise SystemExit(f"{name}: {outcome} {tally.wrong[-1:]}")
        times.append(seconds)
    return statistics.median(times)


def unloaded(region: faults.FaultRegion, expected: dict) -> dict[str, float]:
    """Median latency of each query alone."""
    return {name: latency(region, expected, name) for name in faults.QUERIES}


def _sample(region: faults.FaultRegion, stop: threading.Event, samples: dict[str, list[float]]) -> None:
    client, gateway = Client(region.url, timeout=5), region.pid("gateway")
    while not stop.wait(0.25):
        try:
            cluster = client.cluster()
        except Exception:
            continue
        samples["queue"].append(cluster["queue"])
        samples["rss"].append(_rss(gateway))


def _rss(pid: int) -> float:
    """Resident memory of a process and its children (Spark's JVM is the gateway's), in MiB."""
    total = 0
    for p in [pid, *faults.descendants(pid)]:
        try:
            status = Path(f"/proc/{p}/status").read_text()
        except OSError:
            continue
        total += next((int(line.split()[1]) for line in status.splitlines() if line.startswith("VmRSS:")), 0)
    return total / 1024


def soak(region: faults.FaultRegion, expected: dict, rate: float, seconds: float, seed: int = 11) -> dict[str, Any]:
    """Poisson arrivals at `rate` per second for `seconds`; what each query got."""
    rng = random.Random(seed)
    tally, lock = faults.Tally(), threading.Lock()
    latencies: list[float] = []
    samples: dict[str, list[float]] = {"queue": [], "rss": []}
    stop = threading.Event()
    sampler = threading.Thread(target=_sample, args=(region, stop, samples), daemon=True)
    sampler.start()

    def one(name: str) -> None:
        outcome, took = _judged(region, expected, name, tally)
        if outcome == "right":
            with lock:
                latencies.append(took)

    sent = 0
    with ThreadPoolExecutor(512) as pool:
        start = time.perf_counter()
        due = start
        while (due := due + rng.expovariate(rate)) < start + seconds:
            time.sleep(max(0.0, due - time.perf_counter()))
            pool.submit(one, rng.choice(list(faults.QUERIES)))
            sent += 1
        stopped = time.perf_counter()
        drained = _drained(region, stopped)
    stop.set()
    sampler.join()
    outcomes = tally.outcomes
    return {
        "offered_qps": sent / seconds,
        "sent": sent,
        "served_qps": outcomes["right"] / (time.perf_counter() - start),
        "right": outcomes["right"],
        "refused": outcomes["refused"],
        "wrong": outcomes["wrong"],
        "errors": sum(n for k, n in outcomes.items() if k.startswith(("error:", "retryable:"))),
        "lost": sent - sum(outcomes.values()) + outcomes["lost"],
        "twice": tally.twice,
        "p50_s": _percentile(latencies, 50),
        "p99_s": _percentile(latencies, 99),
        "max_queue": max(samples["queue"], default=0),
        "max_gateway_rss_mib": max(samples["rss"], default=0.0),
        "drain_s": drained,
        "examples": tally.wrong[:3],
    }


def _drained(region: faults.FaultRegion, since: float) -> float:
    """Seconds from `since` until the region's queue is empty and nothing is in flight."""
    client = Client(region.url, timeout=30)
    while (cluster := client.cluster())["queue"] or cluster["in_flight"]:
        time.sleep(0.1)
    return time.perf_counter() - since


def runaway(region: faults.FaultRegion, expected: dict, patience: float = 240.0) -> dict[str, Any]:
    """The join query's median latency alone, and its latency beside a runaway join (None: no
    answer within `patience` seconds)."""
    alone = latency(region, expected, "join")
    client = Client(region.url)
    statement = json.loads(client.submit(RUNAWAY, wait=0)[2])["id"]
    time.sleep(2.0)  # the runaway's tasks hold the cores
    started = time.perf_counter()
    status, doc, _ = faults.ask(region.url, faults.QUERIES["join"], timeout=patience)
    beside = time.perf_counter() - started if status == 200 else None
    state = client.cancel(statement)["state"]  # "cancelled": it was still running
    if beside is None:
        client.cancel(doc["id"])
    return {"alone_s": alone, "beside_s": beside, "slowdown": beside / alone if beside else None, "runaway": state}


def main(argv: list[str] | None = None) -> None:
    p = parser(__doc__.splitlines()[0], default_sf=0.1)
    p.add_argument("--seconds", type=float, default=60.0, help="length of the capacity run and of the soak")
    p.add_argument("--factor", type=float, default=2.0, help="offered load as a multiple of capacity")
    p.add_argument("--set", action="append", default=[], help="a configuration option of the region (repeatable)")
    args = p.parse_args(argv)
    with faults.serving_tpch(args.sf, tuple(args.set)) as (region, _, expected):
        slots = sum(n["slots"] for m in Client(region.url).cluster()["members"] for n in m["nodes"])
        with console.status("measuring capacity"):
            served = capacity(region, expected, slots + 1, args.seconds)
            before = unloaded(region, expected)
        with console.status(f"soak at {args.factor:g} x {served:.1f} q/s for {args.seconds:g} s"):
            soaked = soak(region, expected, args.factor * served, args.seconds)
        with console.status("after the load"):
            after = unloaded(region, expected)
        with console.status("a runaway join"):
            runaway_join = runaway(region, expected)
    p50 = statistics.median(before.values())
    figures = {
        "sf": args.sf,
        "capacity_qps": served,
        "slots": slots,
        "unloaded_p50_s": p50,
        "after_p50_s": statistics.median(after.values()),
        "soak": soaked,
        "runaway": runaway_join,
        "settings": args.set,
    }
    print_table(
        f"Overload, two-node region, TPC-H SF {args.sf:g}, default admission, {args.seconds:g} s at "
        f"{args.factor:g} x capacity ({served:.1f} q/s with {slots} slots)",
        [
            "offered q/s",
            "served q/s",
            "right",
            "refused 429/503",
            "wrong",
            "errors",
            "lost",
            "twice",
            "p50 s",
            "p99 s",
            "max queue",
            "gateway+Spark MiB",
            "drained in s",
            "p50 unloaded / after s",
        ],
        [
            (
                f"{soaked['offered_qps']:.1f}",
                f"{soaked['served_qps']:.1f}",
                soaked["right"],
                soaked["refused"],
                soaked["wrong"],
                soaked["errors"],
                soaked["lost"],
                soaked["twice"],
                f"{soaked['p50_s']:.2f}",
                f"{soaked['p99_s']:.2f}",
                soaked["max_queue"],
                f"{soaked['max_gateway_rss_mib']:.0f}",
                f"{soaked['drain_s']:.1f}",
                f"{p50:.3f} / {figures['after_p50_s']:.3f}",
            )
        ],
    )
    print_table(
        "A runaway join beside the ordinary join query",
        ["join alone s", "join beside the runaway s", "slowdown", "the runaway then"],
        [
            (
                f"{runaway_join['alone_s']:.2f}",
                f"{runaway_join['beside_s']:.2f}" if runaway_join["beside_s"] else "no answer in 240 s",
                f"{runaway_join['slowdown']:.1f}x" if runaway_join["slowdown"] else "-",
                runaway_join["runaway"],
            )
        ],
    )
    write_json(args.json, figures)


if __name__ == "__main__":
    main()
