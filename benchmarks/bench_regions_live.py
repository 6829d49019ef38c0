"""Balancing between live regions: seed 004 §5.2's experiment compressed in time, each region on a
host of its own (a network namespace), the links between regions delayed, every query answered by
its own region's gateway wherever it ran.

    python -m benchmarks.bench_regions_live [--day-seconds 144] [--wan-delay 0.005]
                                            [--json PATH] [--plot PATH]
    python -m benchmarks.bench_regions_live --native --sf 0.1 [--day-seconds 60] [--json PATH]

Simulation nodes (the default): 3 regions, region r with r nodes of one slot, 30·r users and the
query times of Table 5.5 for its 5·r GB database; users active 16 h of each model day, each region
4 h after the one before; one model day lasts `--day-seconds` real seconds. A query's type carries
its database, so a query moved elsewhere runs with its own database's time, as in the published
model. Each method runs once on fresh regions; beside it, the discrete-event simulation of the same
day (`regions.cross_simulation`, with the same WAN delay in model time).

Native nodes (`--native`): the same schedule over TPC-H at `--sf`, loaded into region 1 and copied to
regions 2 and 3 by `cxg redistribute`'s moves (the same rows' identity, so queries may move), with
fewer users (`--users-per-node`): every region shares this machine's cores, so the run shows the
mechanism under real queries, not three regions' capacity.

Each region's gateway is reached by the others through a WAN link (`benchmarks.wan`) adding
`--wan-delay` seconds each way; its own users reach it directly. Without root (no namespaces) the
regions run on loopback with the same links (`--no-netns`).
"""

from __future__ import annotations

import argparse
import asyncio
import random
import statistics
import subprocess
import sys
import tempfile
import time
from collections import defaultdict
from contextlib import ExitStack
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import aiohttp
import duckdb

from balancer import TABLE_5_5, TABLE_5_6
from benchmarks import faults, netns
from cxg.simulate import plot_hourly
from gateway import Client, SparkSettings, free_port
from loadtests import console, print_table, write_json
from regions import (
    METHODS,
    Experiment,
    LocalRegion,
    RegionView,
    load_config,
    plan_copy,
    run_move,
    simulate,
    spark_session,
    wait_served,
)
from regions import method as balancing_method
from regions.cross_figures import TABLE_5_7
from regions.cross_simulation import DAY, HOUR
from storage import LoadOptions, Store, load_table, read_parquet, tpch

NAMES = ("r1", "r2", "r3")
GATEWAY_PORT = 8080
NATIVE_QUERIES = {  # answered by the nodes (partial aggregates), no Spark: each region's cores are shared
    "q1": "SELECT l_returnflag, l_linestatus, sum(l_quantity) AS q, sum(l_extendedprice) AS p, count(*) AS n "
    "FROM lineitem WHERE l_shipdate <= DATE '1998-09-02' GROUP BY l_returnflag, l_linestatus "
    "ORDER BY l_returnflag, l_linestatus",
    "q6": "SELECT sum(l_extendedprice * l_discount) AS revenue FROM lineitem WHERE l_shipdate >= DATE '1994-01-01' "
    "AND l_shipdate < DATE '1995-01-01' AND l_discount BETWEEN 0.05 AND 0.07 AND l_quantity < 24",
    "orders": "SELECT o_orderpriority, count(*) AS n FROM orders WHERE o_orderdate >= DATE '1993-07-01' "
    "AND o_orderdate < DATE '1993-10-01' GROUP BY o_orderpriority ORDER BY o_orderpriority",
}


@dataclass
class Setup:
    """What one run is: the method, the nodes, the clock; the published experiment's regions and
    schedule (`regions.cross_simulation.Experiment`) over one model day."""

    method: str
    day_seconds: float
    wan_delay: float
    native: bool
    users_per_node: int
    poll: float

    @property
    def scale(self) -> float:
        """Real seconds per model second."""
        return self.day_seconds / DAY

    @property
    def experiment(self) -> Experiment:
        return Experiment(
            users_per_server=self.users_per_node, days=1, warm_up_days=0, wan_delay=self.wan_delay / self.scale
        )

    def nodes(self, r: int) -> int:
        return self.experiment.servers(r)

    def users(self, r: int) -> int:
        return self.experiment.users_per_server * self.nodes(r)

    def _start(self, r: int) -> float:
        return (r - 1) * self.experiment.shift_hours * HOUR

    def active(self, r: int, model: float) -> bool:
        """Region r's users are active `active_hours` a day from (r - 1)·`shift_hours` (Fig. 5.4)."""
        start = self._start(r)
        return model >= start and (model - start) % DAY < self.experiment.active_hours * HOUR

    def next_activation(self, r: int, model: float) -> float:
        start = self._start(r)
        return start if model < start else start + ((model - start) // DAY + 1) * DAY


@dataclass
class Record:
    origin: int
    id: str  # its statement id
    ran: str
    finished: float  # model seconds
    response: float  # model seconds
    ok: bool


@dataclass
class Run:
    records: list[Record] = field(default_factory=list)
    sent: dict[int, int] = field(default_factory=lambda: defaultdict(int))
    errors: list[str] = field(default_factory=list)
    wrong: int = 0  # answers (native) other than DuckDB's


# ---- the regions --------------------------------------------------------------------------------


def sim_queries() -> dict[str, dict[str, float]]:
    """Query types q1..q14 of each database (5, 10, 15 GB): Table 5.5 times, Table 5.6 volumes."""
    return {
        f"q{i + 1}_{gb}gb": {"seconds": TABLE_5_5[gb][i], "volume": TABLE_5_6[gb][i]}
        for gb in (5, 10, 15)
        for i in range(14)
    }


def write_config(
    directory: Path, setup: Setup, hosts: dict[str, str], machine: str, links: dict[str, int], data: dict
) -> Path:
    """The file of the three regions: each on its host's address, reached by the others through
    its WAN link on this machine."""
    lines = [
        "[region]",
        f'backend = "{"native" if setup.native else "simulation"}"',
        "slots = 1",
        "first_port = 0",
        "[gateway]",
        "max_queue = 100000",
        "[storage]",
        'node_memory = "none"',
        "[spark]",
        'master = "local[1]"\ndriver_memory = "1g"\nwarm_up = false',
        "[simulation]",
        f"time_scale = {setup.scale!r}",
        "[simulation.queries]",
        *(f'"{tag}" = {{seconds = {q["seconds"]}, volume = {q["volume"]}}}' for tag, q in sim_queries().items()),
        "[balancing]",
        f'method = "{setup.method}"',
        f"poll = {setup.poll}",
        "peer_timeout = 10.0",
        f'host = "{hosts["r1"]}"',
        f"port = {free_port()}",
    ]
    for r, name in enumerate(NAMES, start=1):
        port = GATEWAY_PORT if len(set(hosts.values())) == len(hosts) else free_port()
        lines += [
            f"[regions.{name}]",
            f'gateway = {{host = "{hosts[name]}", port = {port}}}',
            f'url = "http://{machine}:{links[name]}"',
            'databases = {tpch = ["lineitem", "orders"]}',
            f"region = {{nodes = {setup.nodes(r)}}}",
        ]
        if setup.native:
            lines.append(f"storage = {{data = {[str(d) for d in data[name]]}}}")
    path = directory / f"regions-{setup.method}.toml"
    path.write_text("\n".join(lines) + "\n")
    return path


class Regions:
    """The three regions of a file started as `cxg up` starts them, each on its host, and the WAN
    links in front of their gateways."""

    def __init__(self, path: Path, setup: Setup, hosts: netns.Hosts | None, links: dict[str, int], run_dir: Path):
        self.path, self.setup, self.hosts, self.links, self.run_dir = path, setup, hosts, links, run_dir
        self.regions: dict[str, LocalRegion] = {}
        self.link_processes: list[subprocess.Popen] = []

    def __enter__(self) -> Regions:
        machine = self.hosts.machine if self.hosts else "127.0.0.1"
        try:
            for name in NAMES:
                config = load_config(self.path, region=name)
                prefix = self.hosts.prefix(name) if self.hosts else []
                region = LocalRegion(
                    config,
                    ["--config", str(self.path), "--region", name],
                    self.run_dir / name,
                    command=[*prefix, sys.executable, "-m", "cxg"],
                )
                self.regions[name] = region
                region.start(timeout=120)
                link = [sys.executable, "-m", "benchmarks.wan", "--listen", f"{machine}:{self.links[name]}"]
                link += ["--to", f"{config.gateway.host}:{config.gateway.port}", "--delay", str(self.setup.wan_delay)]
                self.link_processes.append(subprocess.Popen(link))
        except BaseException:
            self.__exit__()
            raise
        return self

    def url(self, name: str) -> str:
        return self.regions[name].url

    def __exit__(self, *exc: object) -> None:
        for process in self.link_processes:
            process.terminate()
            process.wait()
        for region in self.regions.values():
            region.stop()


# ---- the users ------------------------------------------------------------------------------------


async def _ask(session: aiohttp.ClientSession, url: str, body: dict) -> dict:
    async with session.post(f"{url}/v1/statements", json=body) as answer:
        doc = await answer.json()
    while doc.get("state") in ("queued", "running"):
        async with session.get(f"{url}/v1/statements/{doc['id']}", params={"wait": "60"}) as answer:
            doc = await answer.json()
    return doc


async def run_users(regions: Regions, setup: Setup, seed: int, expected: dict[str, list] | None = None) -> Run:
    """Every region's users for one model day: closed loops while their region is active."""
    run = Run()
    started = time.monotonic()
    end = DAY

    def model_now() -> float:
        return (time.monotonic() - started) / setup.scale

    async def user(r: int, k: int, session: aiohttp.ClientSession) -> None:
        rng = random.Random(seed * 100_000 + r * 1000 + k)
        url = regions.url(NAMES[r - 1])
        while (now := model_now()) < end:
            if not setup.active(r, now):
                await asyncio.sleep(max(0.0, (setup.next_activation(r, now) - now) * setup.scale))
                continue
            name = ""
            if setup.native:
                name = rng.choice(list(NATIVE_QUERIES))
                body = {"sql": NATIVE_QUERIES[name], "wait": 60}
            else:
                body = {"sql": "SELECT * FROM lineitem", "tag": f"q{rng.randrange(14) + 1}_{5 * r}gb", "wait": 60}
            run.sent[r] += 1
            sent = model_now()
            try:
                doc = await _ask(session, url, body)
            except (aiohttp.ClientError, TimeoutError, ValueError) as e:
                run.errors.append(f"region {r}: {e}")
                await asyncio.sleep(0.05)
                continue
            done = model_now()
            ok = doc.get("state") == "succeeded"
            if not ok:
                run.errors.append(f"region {r}: {str(doc)[:200]}")
            elif expected is not None and faults.rows(doc["rows"]) != expected[name]:
                run.wrong += 1
                ok = False
            if done <= end:
                run.records.append(Record(r, doc.get("id", ""), doc.get("region", "?"), done, done - sent, ok))

    connector = aiohttp.TCPConnector(limit=0)
    async with aiohttp.ClientSession(connector=connector, timeout=aiohttp.ClientTimeout(total=None)) as session:
        tasks = [user(r, k, session) for r in (1, 2, 3) for k in range(setup.users(r))]
        await asyncio.gather(*tasks)
    return run


def outcome(run: Run, setup: Setup) -> dict[str, Any]:
    finished = {r: sum(1 for x in run.records if x.origin == r and x.ok) for r in (1, 2, 3)}
    responses = [x.response for x in run.records if x.ok]
    hourly = {r: [0] * 24 for r in (1, 2, 3)}
    for x in run.records:
        if x.ok:
            hourly[x.origin][min(23, int(x.finished // HOUR))] += 1
    home = {r: NAMES[r - 1] for r in (1, 2, 3)}
    return {
        "finished": [finished[r] for r in (1, 2, 3)],
        "total": sum(finished.values()),
        "mean_response_model_s": statistics.fmean(responses) if responses else 0.0,
        "moved_pct": 100 * sum(1 for x in run.records if x.ok and x.ran != home[x.origin]) / max(1, len(responses)),
        "sent": sum(run.sent.values()),
        "failed": sum(1 for x in run.records if not x.ok),
        "wrong": run.wrong,
        "answered_twice": len(run.records) - len({x.id for x in run.records}),
        "errors": run.errors[:5],
        "hourly": [hourly[r] for r in (1, 2, 3)],
    }


def simulated(setup: Setup, seed: int) -> dict[str, Any]:
    """The discrete-event simulation of the same day (sim nodes' setup), for the ordering."""
    experiment = setup.experiment
    balancing = balancing_method(setup.method, "printed", experiment.scale(), 2 * experiment.wan_delay)
    result = simulate(experiment, balancing, seed)
    measured = sum(result.measured.values())
    return {
        "finished": [result.finished[r] for r in (1, 2, 3)],
        "total": sum(result.finished.values()),
        "mean_response_model_s": sum(result.response[r] * result.measured[r] for r in (1, 2, 3)) / max(1, measured),
    }


# ---- native data --------------------------------------------------------------------------------


def native_data(root: Path, sf: float) -> tuple[dict[str, list[Path]], dict[str, list]]:
    """TPC-H's lineitem and orders at `sf` in region 1's node directories (the copies are made
    live, once the regions run): every region's directories, and DuckDB's answers."""
    dirs = {name: [root / name / f"node-{i}" for i in range(r)] for r, name in enumerate(NAMES, start=1)}
    with console.status(f"generating TPC-H SF {sf:g} and loading it into region r1"):
        files = tpch.generate(sf, root / "tpch", ["lineitem", "orders"])
        stores = [Store(d, node=f"node-{i}") for i, d in enumerate(dirs["r1"])]
        for name, path in files.items():
            source = read_parquet([path])
            load_table(stores, tpch.schema_for(name, source.schema), source)
        con = duckdb.connect()
        for name, path in files.items():
            con.execute(f"CREATE TABLE {name} AS SELECT * FROM read_parquet('{path}')")
        expected = {name: faults.rows(con.sql(sql).fetchall()) for name, sql in NATIVE_QUERIES.items()}
    return dirs, expected


def copy_tables(regions: Regions) -> list[str]:
    """lineitem and orders copied from r1 to r2 and r3 (`cxg redistribute --to`); what it did."""
    spark = spark_session(SparkSettings(master="local[2]", driver_memory="2g"))
    home = RegionView.of(Client(regions.url("r1")), "r1")
    done = []
    for name in ("r2", "r3"):
        target = RegionView.of(Client(regions.url(name)), name)
        for table in ("lineitem", "orders"):
            if target.served(table) and target.served(table)["stamp"] == home.table(table).stamp:
                continue  # copied by an earlier run
            move = plan_copy(home, target, table)
            ran = run_move(spark, move, home, target, LoadOptions())
            wait_served(target, ran)
            done.append(f"{table} -> {name}")
    return done


# ---- the report ---------------------------------------------------------------------------------


def report(figures: dict[str, Any]) -> None:
    rows = []
    base = figures["methods"].get("none")
    for name, m in figures["methods"].items():
        gains = "-"
        if base and name != "none":
            gains = " / ".join(
                f"{100 * (f / b - 1):+.0f}" for f, b in zip(m["finished"], base["finished"], strict=True)
            )
        sim = m.get("simulated")
        published = "-"
        if name in TABLE_5_7 and name != "none":
            pairs = zip(TABLE_5_7[name], TABLE_5_7["none"], strict=True)
            published = " / ".join(f"{100 * (p / b - 1):+.0f}" for p, b in pairs)
        rows.append(
            [
                name,
                " / ".join(f"{c:,}" for c in m["finished"]),
                f"{m['total']:,}",
                gains,
                published,
                f"{m['mean_response_model_s']:.0f}",
                f"{m['moved_pct']:.0f}%",
                f"{m['failed']} / {m['wrong']}",
                f"{sim['total']:,}" if sim else "-",
                f"{sim['mean_response_model_s']:.0f}" if sim else "-",
            ]
        )
    setup = figures["setup"]
    print_table(
        f"Live regions ({'native nodes, TPC-H SF ' + str(setup['sf']) if setup['native'] else 'simulation nodes'}): "
        f"queries finished in one model day of {setup['day_seconds']:g} s, WAN {1000 * setup['wan_delay']:g} ms "
        f"each way, {'namespaces' if setup['netns'] else 'loopback'}",
        [
            "method",
            "finished, regions 1/2/3",
            "total",
            "gain % 1/2/3",
            "Table 5.8",
            "mean response (model s)",
            "run elsewhere",
            "failed / wrong",
            "simulated total",
            "simulated response",
        ],
        rows,
    )
    order = sorted(figures["methods"], key=lambda n: figures["methods"][n]["total"])
    console.print(f"ordering by queries finished: {' < '.join(order)}")


def plot(figures: dict[str, Any], path: Path) -> None:
    panels = {
        f"{name} (live): {m['total']:,} queries, mean response {m['mean_response_model_s']:.0f} s": m["hourly"]
        for name, m in figures["methods"].items()
    }
    plot_hourly(panels, path, "model hours")


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--methods", default=",".join(METHODS), help="comma-separated (default: all four)")
    p.add_argument("--day-seconds", type=float, help="real seconds per model day (default 144; --native 60)")
    p.add_argument("--wan-delay", type=float, default=0.005, help="seconds each way between regions (default 0.005)")
    p.add_argument("--poll", type=float, default=0.02, help="balancing.poll, real seconds (default 0.02)")
    p.add_argument("--native", action="store_true", help="storage nodes over TPC-H instead of simulation nodes")
    p.add_argument("--sf", type=float, default=0.1, help="--native: TPC-H scale factor (default 0.1)")
    p.add_argument("--users-per-node", type=int, help="users per node of a region (default 30; --native 2)")
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--no-netns", action="store_true", help="run the regions on loopback, not on hosts of their own")
    p.add_argument("--json", type=Path, metavar="PATH", help="also write the figures as JSON")
    p.add_argument("--plot", type=Path, metavar="PATH", help="also draw the queries finished per hour as a PNG")
    args = p.parse_args(argv)
    day = args.day_seconds or (60.0 if args.native else 144.0)
    users = args.users_per_node or (2 if args.native else 30)
    why_not = None if args.no_netns else netns.available()
    if why_not:
        console.print(f"regions on loopback: {why_not}")
    figures: dict[str, Any] = {
        "setup": {
            "day_seconds": day,
            "wan_delay": args.wan_delay,
            "native": args.native,
            "sf": args.sf if args.native else None,
            "users_per_node": users,
            "poll": args.poll,
            "netns": not (args.no_netns or why_not),
        },
        "methods": {},
    }
    with tempfile.TemporaryDirectory(prefix="cxg-regions-live-") as tmp, ExitStack() as stack:
        root = Path(tmp)
        hosts = stack.enter_context(netns.Hosts(list(NAMES))) if figures["setup"]["netns"] else None
        addresses = hosts.addresses if hosts else dict.fromkeys(NAMES, "127.0.0.1")
        machine = hosts.machine if hosts else "127.0.0.1"
        links = {name: free_port() for name in NAMES}
        data, expected = native_data(root, args.sf) if args.native else ({}, None)
        for name in args.methods.split(","):
            setup = Setup(name, day, args.wan_delay, args.native, users, args.poll)
            path = write_config(root, setup, addresses, machine, links, data)
            with ExitStack() as running:
                with console.status(f"{name}: starting three regions"):
                    regions = running.enter_context(Regions(path, setup, hosts, links, root / name))
                if args.native and "copies" not in figures["setup"]:
                    figures["setup"]["copies"] = copy_tables(regions)
                console.print(f"{name}: one model day ({day:g} s) of {sum(setup.users(r) for r in (1, 2, 3))} users")
                run = asyncio.run(run_users(regions, setup, args.seed, expected))
            result = outcome(run, setup)
            if not args.native:
                result["simulated"] = simulated(setup, args.seed)
            if name in TABLE_5_7:  # the published counts are of 3-day runs: their gains compare
                result["published_3_days"] = list(TABLE_5_7[name])
            figures["methods"][name] = result
            console.print(f"{name}: {result['total']:,} finished, {result['failed']} failed", highlight=False)
    report(figures)
    write_json(args.json, figures)
    if args.plot:
        plot(figures, args.plot)


if __name__ == "__main__":
    main()
