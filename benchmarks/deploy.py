"""The compose deployment run for real, with podman: the CPU images built (`docker/images.sh`), the
two regions of `docker/compose.yaml` up and healthy (podman-compose), TPC-H loaded by the loader
jobs, the 22 queries through each region's gateway equal to DuckDB's over the same data, then one
node container killed and started again: healthy again, and the 22 answers still equal. Writes the
report (times, image sizes, answers) to docs/bench/deploy.json.

Run as root on a machine with podman (`make deploy` installs what it needs):
`python -m benchmarks.deploy [--local-base] [--no-build]`.
"""

from __future__ import annotations

import json
import os
import shlex
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import duckdb
import yaml

from benchmarks.common import parser
from benchmarks.compare import order_columns, rows, rows_match
from gateway import Client, GatewayError
from loadtests import console, print_table, write_json
from loadtests.tpch_queries import all_queries
from storage import tpch

ROOT = Path(__file__).resolve().parents[1]
COMPOSE = ROOT / "docker" / "compose.yaml"
SCALE_FACTOR = 0.1  # what the loader jobs of compose.yaml load
GATEWAYS = {"eu": "http://127.0.0.1:8080", "us": "http://127.0.0.1:8081"}
LOADERS = ("load-eu", "load-us")
KILLED = "node-eu-0"
# podman as this kind of machine allows it: vfs storage, cgroupfs, runc; limits no higher than the host's
PODMAN_ARGS = "--storage-driver vfs --cgroup-manager cgroupfs --runtime runc"
RUN_ARGS = "--ulimit nofile=20000:20000 --ulimit nproc=4096:4096"


def podman(*args: str, check: bool = True) -> subprocess.CompletedProcess:
    return subprocess.run(["podman", *shlex.split(PODMAN_ARGS), *args], capture_output=True, text=True, check=check)


def compose(*args: str) -> None:
    options = ["--podman-args", PODMAN_ARGS, "--podman-run-args", RUN_ARGS, "-f", str(COMPOSE)]
    command = [sys.executable, "-m", "podman_compose", *options, *args]
    subprocess.run(command, check=True, capture_output=True, text=True)


def serving() -> list[str]:
    """The services that serve (all but the loader jobs and the GPU profile's)."""
    services = yaml.safe_load(COMPOSE.read_text())["services"]
    return [name for name, service in services.items() if name not in LOADERS and not service.get("profiles")]


def container(service: str) -> str:
    return f"cxg_{service}_1"


def build(local_base: bool) -> dict[str, dict[str, float]]:
    """docker/images.sh: each image's build seconds and size in MB, as it prints them."""
    out = subprocess.run(
        [str(ROOT / "docker" / "images.sh"), *(["--local-base"] if local_base else [])],
        check=True,
        capture_output=True,
        text=True,
    ).stdout
    images = {}
    for line in out.splitlines():  # "cxg-node:0.1.0 built in 162 s, 1530 MB"
        name, _, rest = line.partition(" built in ")
        seconds, _, size = rest.partition(" s, ")
        images[name] = {"build_s": float(seconds), "size_mb": float(size.split()[0])}
    return images


def wait_for(what: str, check, timeout: float) -> None:
    """Until `check()` is true; TimeoutError naming `what` after `timeout` seconds."""
    started = time.monotonic()
    with console.status(f"waiting for {what}"):
        while time.monotonic() - started < timeout:
            try:
                if check():
                    return
            except (GatewayError, OSError):
                pass
            time.sleep(0.5)
    raise TimeoutError(f"{what}: not within {timeout:g} s")


def ready(url: str, count: int) -> bool:
    return Client(url).wait_ready(timeout=2, nodes=count) is not None


def nodes(url: str) -> int:
    """The nodes joined to a region's gateway now."""
    return len([n for m in Client(url).cluster()["members"] for n in m["nodes"]])


def exited(service: str) -> int | None:
    """The exit code of a finished container; None while it runs."""
    state = json.loads(podman("inspect", "--format", "{{json .State}}", container(service)).stdout)
    return None if state["Running"] else int(state["ExitCode"])


def answers(duck: duckdb.DuckDBPyConnection, queries: dict[int, str]) -> dict[str, list[int]]:
    """Per region, the queries whose answer through its gateway equals DuckDB's."""
    right: dict[str, list[int]] = {}
    for region, url in GATEWAYS.items():
        client = Client(url, timeout=600)
        right[region] = []
        for number, sql in queries.items():
            with console.status(f"Q{number} through region {region}"):
                table = client.execute(sql, timeout=600).table
            expected = duck.sql(sql).fetchall()
            ordered = order_columns(sql, table.column_names)
            if rows_match(rows(table), expected, ordered is not None, order=ordered):
                right[region].append(number)
            else:
                console.print(f"[red]Q{number} through {region} differs from DuckDB's[/red]")
    return right


def run(local_base: bool, build_images: bool) -> dict[str, Any]:
    figures: dict[str, Any] = {"scale_factor": SCALE_FACTOR, "podman": podman("--version").stdout.strip()}
    figures["images"] = build(local_base) if build_images else {}
    for image in ("cxg-node", "cxg-gateway", "cxg-spark"):  # the sizes of those built before too
        size = podman("image", "inspect", "--format", "{{.Size}}", f"{image}:0.1.0").stdout.strip()
        figures["images"].setdefault(f"{image}:0.1.0", {})["size_mb"] = round(int(size) / 1e6)
    queries = all_queries(SCALE_FACTOR)
    with tempfile.TemporaryDirectory() as scratch:
        files = tpch.generate(SCALE_FACTOR, Path(scratch))
        duck = duckdb.connect()
        duck.execute("SET ieee_floating_point_ops = false")
        duck.execute("SET error_on_division_by_zero = false")
        for name, path in files.items():
            duck.execute(f"CREATE TABLE {name} AS SELECT * FROM read_parquet('{path}')")
    compose("down", "-v")
    started = time.monotonic()
    compose("up", "-d", *serving())
    figures["up_s"] = round(time.monotonic() - started, 1)
    try:
        figures["healthy_s"] = {}  # seconds after `up` until each region was ready with both its nodes
        for region, url in GATEWAYS.items():
            wait_for(f"region {region} ready with 2 nodes", lambda u=url: ready(u, 2), 600)
            figures["healthy_s"][region] = round(time.monotonic() - started, 1)
        compose("up", "-d", *LOADERS)  # once their regions are ready: podman before 4.6 waits for no health
        loading = time.monotonic()
        figures["loaded_s"] = {}
        for loader in LOADERS:
            wait_for(f"{loader} to finish", lambda s=loader: exited(s) is not None, 1800)
            figures["loaded_s"][loader] = round(time.monotonic() - loading, 1)
        figures["loaders_exit"] = {s: exited(s) for s in LOADERS}
        figures["right"] = answers(duck, queries)
        podman("kill", container(KILLED))
        wait_for(f"region eu to see {KILLED} gone", lambda: nodes(GATEWAYS["eu"]) < 2, 120)
        restarted = time.monotonic()
        podman("start", container(KILLED))
        wait_for(f"{KILLED} back in its region", lambda: nodes(GATEWAYS["eu"]) == 2, 600)
        figures["restarted_joined_s"] = round(time.monotonic() - restarted, 1)
        figures["right_after_restart"] = answers(duck, queries)
    finally:
        compose("down", "-v")
    return figures


def main(argv: list[str] | None = None) -> None:
    p = parser(__doc__, default_sf=SCALE_FACTOR)
    p.add_argument("--local-base", action="store_true", help="build on a base made from Debian's packages")
    p.add_argument("--no-build", action="store_true", help="use the images already built")
    args = p.parse_args(argv)
    if args.sf != SCALE_FACTOR:
        raise SystemExit(f"the loader jobs of docker/compose.yaml load SF {SCALE_FACTOR:g}")
    if os.geteuid() != 0:
        raise SystemExit("benchmarks.deploy runs podman as root")
    figures = run(args.local_base, not args.no_build)
    table = [
        [region, f"{len(figures['right'][region])}/22", f"{len(figures['right_after_restart'][region])}/22"]
        for region in GATEWAYS
    ]
    print_table("the compose deployment", ["region", "TPC-H answers equal DuckDB's", "after a node restart"], table)
    write_json(args.json or ROOT / "docs" / "bench" / "deploy.json", figures)


if __name__ == "__main__":
    main()
