"""`cxg loadtest`: N simulated users against one gateway per region, with a live progress bar,
a summary table, CSV logs, plots and a JSON summary."""

from __future__ import annotations

import argparse
import asyncio
import time
from pathlib import Path

from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

from loadtests.logs import STATS_HEADERS, stats_rows, write_logs
from loadtests.measures import Record, Summary, summarize
from loadtests.output import console, print_table
from loadtests.scenario import BUILT_IN, Scenario, ScenarioError, load_scenario
from loadtests.simulator import Run, Simulator, Target
from regions import Config


def _target(text: str) -> Target:
    region, sep, url = text.partition("=")
    if not sep:
        return Target(1, text)
    try:
        return Target(int(region), url)
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"--gateway wants REGION=URL, e.g. 2=http://10.0.0.2:8080, not {text!r}"
        ) from None


def scenario_of(args: argparse.Namespace) -> Scenario:
    if args.scenario:
        scenario = load_scenario(args.scenario)
        if args.total is not None:
            scenario.total = args.total
        return scenario
    return Scenario(BUILT_IN[args.queries](), args.mode, total=args.total or 100, seed=args.seed)


def run_load(simulator: Simulator, expected: int | None, title: str) -> Run:
    """Run the simulator with a live progress bar (answers, errors, rejections)."""
    counts = {"ok": 0, "errors": 0, "rejected": 0}
    columns = (
        TextColumn(f"[bold]{title}"),
        BarColumn(),
        MofNCompleteColumn(),
        TextColumn("{task.fields[counts]}"),
        TimeElapsedColumn(),
    )
    with Progress(*columns, console=console) as progress:
        task = progress.add_task(title, total=expected, counts="")

        def on_record(record: Record) -> None:
            key = "ok" if record.ok else "rejected" if record.rejected else "errors"
            counts[key] += 1
            progress.update(
                task,
                advance=1,
                counts=f"ok {counts['ok']}  errors {counts['errors']}  rejected {counts['rejected']}",
            )

        simulator.on_record = on_record
        return asyncio.run(simulator.run())


def report(run: Run, summary: Summary, title: str) -> None:
    print_table(
        f"{title}: {summary.counted} of {summary.sent} queries counted ({summary.excluded} excluded at each end); "
        f"T {summary.T:.3f} s, {summary.throughput:.2f} queries/s; seconds",
        STATS_HEADERS,
        stats_rows(summary),
    )


def cmd_loadtest(args: argparse.Namespace, config: Config) -> int:
    try:
        scenario = scenario_of(args)
    except ScenarioError as e:
        console.print(f"[red]error[/] [{e.code}] {e}")
        return 2
    targets = args.gateway or [Target(1, f"http://{config.gateway.host}:{config.gateway.port}")]
    token = args.token or (config.gateway.tokens[0].token if config.gateway.tokens else None)
    simulator = Simulator(targets, args.users, scenario, args.model, args.rate, token, args.wait, args.sample_every)
    title = args.title or f"{args.users} users, {scenario.mode} {len(scenario.queries)} queries"
    started = time.perf_counter()
    run = run_load(simulator, scenario.expected, "load test")
    summary = summarize(run.records, args.exclude)
    report(run, summary, title)
    out = Path(args.out or f"loadtest-{time.strftime('%Y%m%d-%H%M%S')}")
    paths = write_logs(run, summary, out, title)
    console.print(f"{len(run.records)} answers in {time.perf_counter() - started:.1f} s; logs and plots in {out}/:")
    console.print("  " + ", ".join(p.name for p in paths.values()))
    return 0


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("loadtest", help="simulate many users sending SQL to the gateway(s) and measure M, σ, T")
    p.add_argument(
        "--gateway",
        action="append",
        type=_target,
        metavar="[REGION=]URL",
        help="a gateway to send to (repeat for several regions; users are spread round-robin); "
        "default: the configured gateway",
    )
    p.add_argument("--users", type=int, default=16, help="simulated users (default 16)")
    p.add_argument("--scenario", metavar="FILE", help="a scenario TOML file (steps, queries, mode)")
    p.add_argument("--queries", choices=sorted(BUILT_IN), default="tpch14", help="built-in query list (default tpch14)")
    p.add_argument("--mode", choices=("random", "sequential", "fromlist"), default="random")
    p.add_argument("--total", type=int, help="queries to send (default 100 without a scenario file)")
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--model", choices=("closed", "open"), default="closed", help="closed: one query per user at a time")
    p.add_argument("--rate", type=float, help="open model: queries per second")
    p.add_argument("--exclude", type=int, default=10, help="answers excluded at each end (default 10)")
    p.add_argument("--wait", type=float, default=300.0, help="seconds a request waits at the gateway before polling")
    p.add_argument("--sample-every", type=float, default=0.25, help="seconds between queue-length samples")
    p.add_argument("--token", help="bearer token (default: the first configured)")
    p.add_argument("--out", help="directory for the logs and plots (default loadtest-<time>)")
    p.add_argument("--title")
    p.set_defaults(func=cmd_loadtest)
