"""Memory at scale: load TPC-H with the defaults (`cxg load tpch`), serve it with a two-node region
started as `cxg up` starts it, answer the 22 queries through the HTTP API, and report the peak memory
of every process, sampled twice a second.

    python -m benchmarks.bench_memory --sf 10 --json docs/bench/memory_sf10.json

RSS counts a page each process maps, shared or not; PSS divides a shared page among the processes
mapping it, so the region's PSS is what it really holds (the nodes and their scan workers map the
same decoded block files); anonymous memory is a process's own (heap, results), what its budget
bounds. Not a CI test: at SF 10 it takes minutes.
"""

from __future__ import annotations

import json
import subprocess
import sys
import tempfile
import threading
import time
from collections import defaultdict
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from benchmarks.common import parser
from gateway import Client, GatewayError
from loadtests import console, print_table, write_json
from loadtests.tpch_queries import all_queries
from regions import LocalRegion, load_config, machine_memory

GIB = 2**30


def _descendants(pids: list[int]) -> list[int]:
    parents: dict[int, int] = {}
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            parents[int(stat.parent.name)] = int(stat.read_text().rsplit(")", 1)[1].split()[1])
        except (OSError, IndexError, ValueError):
            continue
    found, frontier = list(pids), list(pids)
    while frontier:
        frontier = [p for p, parent in parents.items() if parent in frontier]
        found += frontier
    return found


def _memory(pid: int) -> tuple[int, int, int] | None:
    """(RSS, PSS, anonymous) in bytes, None when the process is gone."""
    try:
        fields = dict(line.split(":", 1) for line in Path(f"/proc/{pid}/smaps_rollup").read_text().splitlines()[1:])
    except (OSError, ValueError):
        return None
    return tuple(int(fields[name].split()[0]) * 1024 for name in ("Rss", "Pss", "Anonymous"))


def _kind(pid: int, names: dict[int, str]) -> str:
    """What a process is: a role of the region, its JVM, a scan worker or Spark's Python worker."""
    if pid in names:
        return names[pid]
    try:
        command = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
    except OSError:
        return "gone"
    if "java" in command.split(" ", 1)[0]:
        return "spark jvm"
    if "tpchgen" in command:
        return "tpchgen-cli"
    if "forkserver" in command or "multiprocessing" in command:
        return "scan worker"
    if "pyspark" in command:
        return "spark python worker"
    return command.split(" ", 2)[-1][:40] or "other"


class Sampler:
    """Peak RSS, PSS and anonymous memory per process kind, and PSS of all together, sampled every
    `every` seconds."""

    def __init__(self, roots: dict[int, str], every: float = 0.5):
        self.roots = roots
        self.every = every
        self.peaks: dict[str, list[int]] = defaultdict(lambda: [0, 0, 0])  # kind -> [RSS, PSS, anon] of one process
        self.total_pss = 0
        self.least_available = machine_memory()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        while not self._stop.is_set():
            total = 0
            for pid in _descendants(list(self.roots)):
                sample = _memory(pid)
                if sample is None:
                    continue
                peak = self.peaks[_kind(pid, self.roots)]
                peak[:] = [max(p, s) for p, s in zip(peak, sample, strict=True)]
                total += sample[1]
            self.total_pss = max(self.total_pss, total)
            available = _available()
            self.least_available = min(self.least_available, available)
            self._stop.wait(self.every)

    @contextmanager
    def running(self) -> Iterator[Sampler]:
        self._thread.start()
        try:
            yield self
        finally:
            self._stop.set()
            self._thread.join()


def _available() -> int:
    for line in Path("/proc/meminfo").read_text().splitlines():
        if line.startswith("MemAvailable:"):
            return int(line.split()[1]) * 1024
    return 0


def load(sf: float, dirs: list[Path]) -> dict[str, Any]:
    """`cxg load tpch` with the default settings, its memory sampled."""
    command = [sys.executable, "-m", "cxg", "load", "tpch", "--sf", f"{sf:g}"]
    command += [x for d in dirs for x in ("--data", str(d))]
    started = time.perf_counter()
    process = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    with Sampler({process.pid: "cxg load"}).running() as sampler:
        output, _ = process.communicate()
    if process.returncode != 0:
        raise SystemExit(f"the load failed:\n{output[-3000:]}")
    return {"seconds": round(time.perf_counter() - started, 1), **_figures(sampler)}


def serve(sf: float, dirs: list[Path]) -> dict[str, Any]:
    """A two-node region on the loaded data; the 22 queries one after another through HTTP."""
    sets = ["gateway.port=0", "region.first_port=0", f"storage.data={[str(d) for d in dirs]!r}".replace("'", '"')]
    region = LocalRegion(load_config(None, sets), [x for s in sets for x in ("--set", s)])
    url = region.start(timeout=600)
    queries: dict[str, Any] = {}
    try:
        roles = {r.process.pid: r.name.rstrip("0123456789-") or r.name for r in region.roles if r.process}
        with Sampler(roles).running() as sampler:
            client = Client(url, timeout=1800)
            for number, sql in all_queries().items():
                started = time.perf_counter()
                try:
                    result = client.execute(sql, wait=300)
                    queries[f"q{number}"] = {"state": "succeeded", "rows": result.table.num_rows}
                except GatewayError as e:
                    queries[f"q{number}"] = {"state": "failed", "error": str(e)}
                queries[f"q{number}"]["seconds"] = round(time.perf_counter() - started, 2)
                console.print(f"Q{number}: {queries[f'q{number}']}")
    finally:
        region.stop()
    return {"queries": queries, **_figures(sampler)}


def _figures(sampler: Sampler) -> dict[str, Any]:
    return {
        "peak_per_process": {
            kind: dict(zip(("rss", "pss", "anonymous"), peak, strict=True))
            for kind, peak in sorted(sampler.peaks.items())
        },
        "peak_total_pss": sampler.total_pss,
        "least_available": sampler.least_available,
    }


def report(figures: dict[str, Any]) -> None:
    rows: list[Any] = []
    for phase in ("load", "serve"):
        for kind, peak in figures[phase]["peak_per_process"].items():
            sizes = (peak["rss"], peak["pss"], peak.get("anonymous", 0))
            rows.append((phase, kind, *(f"{size / GIB:.2f}" for size in sizes)))
        rows.append((phase, "all processes together", "", f"{figures[phase]['peak_total_pss'] / GIB:.2f}", ""))
        rows.append((phase, "least memory available", "", f"{figures[phase]['least_available'] / GIB:.2f}", ""))
        rows.append(None)
    machine = f"{figures['machine_gib']:.1f} GiB"
    print_table(
        f"TPC-H SF {figures['sf']:g}: peak memory (GiB) of one process of each kind, on a machine of {machine}",
        ["phase", "process", "peak RSS", "peak PSS", "peak anonymous"],
        rows,
    )
    answered = [q for q, r in figures["serve"]["queries"].items() if r["state"] == "succeeded"]
    console.print(f"{len(answered)}/22 queries answered; load took {figures['load']['seconds']} s")


def main(argv: list[str] | None = None) -> None:
    p = parser(__doc__.splitlines()[0], default_sf=10)
    p.add_argument("--data", type=Path, help="where the two nodes' data goes (default: a temporary directory)")
    p.add_argument(
        "--skip-load", action="store_true", help="serve what --data already holds (the load's figures: --json's)"
    )
    args = p.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="cxg-memory-") as tmp:
        root = args.data or Path(tmp)
        dirs = [root / "node-0", root / "node-1"]
        figures: dict[str, Any] = {"sf": args.sf, "machine_gib": machine_memory() / GIB}
        if args.skip_load:
            earlier = json.loads(args.json.read_text()) if args.json and args.json.exists() else {}
            figures["load"] = earlier.get("load") or {"seconds": 0, "peak_per_process": {}, "peak_total_pss": 0}
            figures["load"].setdefault("least_available", 0)
        else:
            figures["load"] = load(args.sf, dirs)
        figures["serve"] = serve(args.sf, dirs)
    report(figures)
    write_json(args.json, figures)


if __name__ == "__main__":
    main()
