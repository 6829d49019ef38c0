"""Faults injected into a region of real processes, and how what clients got is judged: the parts
the fault tests (`tests/test_faults.py`) and the fault report (`benchmarks.bench_faults`) share.

A `FaultRegion` is a gateway and two nodes started as `cxg up` starts them, supervised as it does
(an exited process is started again). Clients send queries whose right answers are known; each
answer is judged `right`, `wrong`, `retryable:<code>` (503 with Retry-After, or 410 for a statement
lost with its gateway) or `error:<code>`. Wrong answers, and errors that are not retryable, are
what must never happen.
"""

from __future__ import annotations

import contextlib
import json
import os
import random
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
import urllib.error
import urllib.request
from collections import Counter
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from decimal import Decimal
from pathlib import Path
from typing import Any

import duckdb
import pyarrow as pa

from gateway import Client, GatewayError
from loadtests import console
from regions import LocalRegion, load_config
from storage import Placement, Store, TableSchema, load_table, read_parquet, tpch

TABLES = ("lineitem", "orders", "customer", "nation")
RETRYABLE = {"table_unavailable", "node_unavailable", "node_lost", "no_nodes", "spark_unavailable", "statement_lost"}
# queries over hash-placed tables (on both nodes), one whose groups the nodes finish, joins, a replicated table
QUERIES = {
    "count": "SELECT count(*) AS n FROM lineitem",
    "q1": "SELECT l_returnflag, l_linestatus, sum(l_quantity) AS q, count(*) AS n FROM lineitem "
    "GROUP BY l_returnflag, l_linestatus ORDER BY l_returnflag, l_linestatus",
    "having": "SELECT o_custkey, count(*) AS n FROM orders GROUP BY o_custkey HAVING count(*) > 25 ORDER BY o_custkey",
    # joined on the order key, on which both are hash-placed: each node joins its own buckets
    "colocated": "SELECT count(*) AS n, sum(l_extendedprice) AS s FROM lineitem JOIN orders ON l_orderkey = o_orderkey "
    "WHERE o_orderstatus = 'F'",
    # customer is hash-placed on its own key: Spark joins
    "join": "SELECT count(*) AS n, sum(o_totalprice) AS s FROM customer JOIN orders ON c_custkey = o_custkey "
    "WHERE c_mktsegment = 'BUILDING'",
    "nation": "SELECT count(*) AS n, sum(n_regionkey) AS s FROM nation",
    # replicated tables only: one node answers it whole, its DataFusion joining
    "nations": "SELECT a.n_regionkey AS r, count(*) AS n FROM nation a JOIN nation b ON a.n_regionkey = b.n_regionkey "
    "GROUP BY 1 ORDER BY 1",
}
NODE_QUERIES = ("count", "q1", "having", "colocated", "nation", "nations")  # answered by the nodes, no Spark


def value(v: Any) -> Any:
    """A value as the JSON answer carries it (decimals as text, floats rounded)."""
    if isinstance(v, Decimal):
        return str(v)
    return round(v, 4) if isinstance(v, float) else v


def rows(answer: list) -> list[tuple]:
    return [tuple(map(value, row)) for row in answer]


def ask(url: str, sql: str, timeout: float = 60.0) -> tuple[int, dict, dict]:
    """POST one query and wait for its answer: (HTTP status, JSON document, headers)."""
    body = json.dumps({"sql": sql, "wait": min(timeout, 300)}).encode()
    request = urllib.request.Request(
        f"{url}/v1/statements", body, {"Content-Type": "application/json", "Accept": "application/json"}
    )
    try:
        with urllib.request.urlopen(request, timeout=timeout + 30) as response:
            return response.status, json.loads(response.read()), dict(response.headers)
    except urllib.error.HTTPError as e:
        return e.code, json.loads(e.read() or b"{}"), dict(e.headers)
    except (urllib.error.URLError, OSError) as e:
        if isinstance(e, TimeoutError) or isinstance(getattr(e, "reason", None), TimeoutError):
            return 0, {"error": {"code": "timed_out", "message": f"no answer within {timeout + 30:g} s"}}, {}
        return 0, {"error": {"code": "gateway_unreachable", "message": str(e)}}, {}  # the gateway is down


def judge(name: str, status: int, doc: dict, headers: dict, expected: dict[str, list[tuple]]) -> str:
    """What a client got for query `name`: right, wrong, retryable:<code>, error:<code>, or lost (no
    answer at all)."""
    if status == 200 and doc.get("state") == "succeeded":
        return "right" if rows(doc["rows"]) == expected[name] and not doc.get("truncated") else "wrong"
    code = (doc.get("error") or {}).get("code", f"http_{status}")
    if code == "timed_out":
        return "lost"  # sent, and never answered
    if code == "gateway_unreachable":
        return f"retryable:{code}"  # nothing answered: the client knows to send it again
    retryable = code in RETRYABLE and status in (503, 410) and ("Retry-After" in headers or status == 410)
    return f"{'retryable' if retryable else 'error'}:{code}"


@dataclass
class Tally:
    """The outcomes of the queries sent during one fault, and the statement ids they carried."""

    outcomes: Counter = field(default_factory=Counter)
    ids: Counter = field(default_factory=Counter)
    wrong: list[str] = field(default_factory=list)

    def add(self, name: str, status: int, doc: dict, headers: dict, expected: dict) -> str:
        outcome = judge(name, status, doc, headers, expected)
        self.outcomes[outcome] += 1
        if doc.get("id"):
            self.ids[doc["id"]] += 1
        if outcome in ("wrong", "lost") or outcome.startswith("error:"):
            self.wrong.append(f"{name}: {status} {json.dumps(doc)[:300]}")
        return outcome

    @property
    def twice(self) -> int:
        """Statement ids that answered more than one query."""
        return sum(1 for n in self.ids.values() if n > 1)


def clients(
    url: str,
    expected: dict,
    names: tuple[str, ...],
    until: Callable[[], bool],
    seed: int,
    count: int = 3,
    queries: dict[str, str] = QUERIES,
) -> Tally:
    """`count` clients sending the `queries` named `names` in a seeded random order until `until()`."""
    tally = Tally()
    lock = threading.Lock()

    def client(k: int) -> None:
        rng = random.Random(seed * 100 + k)
        while not until():
            name = rng.choice(names)
            answer = ask(url, queries[name])
            with lock:
                tally.add(name, *answer, expected)
            if answer[0] == 0:
                time.sleep(0.05)  # the gateway is down: a client waits a moment before sending again

    with ThreadPoolExecutor(count) as pool:
        list(pool.map(client, range(count)))
    return tally


def for_seconds(seconds: float) -> Callable[[], bool]:
    deadline = time.monotonic() + seconds
    return lambda: time.monotonic() > deadline


def wait_until(check: Callable[[], bool], seconds: float, what: str) -> None:
    deadline = time.monotonic() + seconds
    while not check():
        if time.monotonic() > deadline:
            raise AssertionError(f"not within {seconds} s: {what}")
        time.sleep(0.1)


@dataclass
class FaultRegion:
    """A supervised region of real processes (gateway and two nodes) over TPC-H tables."""

    region: LocalRegion
    url: str
    stores: list[Store]
    events: list[str] = field(default_factory=list)
    _stop: threading.Event = field(default_factory=threading.Event)
    _supervisor: threading.Thread | None = None

    @classmethod
    def start(cls, root: Path, files: dict[str, Path], buckets: int = 8, extra: tuple[str, ...] = ()) -> FaultRegion:
        """Load the tables and start the region; `extra`: more `--set` options."""
        stores = [Store(root / f"node-{i}", node=f"node-{i}") for i in range(2)]
        for name in TABLES:
            source = read_parquet([files[name]])
            load_table(stores, tpch.schema_for(name, source.schema, buckets=buckets), source)
        sets = [
            "gateway.port=0",
            "region.first_port=0",
            f'storage.data=["{stores[0].root}", "{stores[1].root}"]',
            'spark.master="local[1]"',
            'spark.driver_memory="1g"',
            "spark.warm_up=false",
            "spark.gather_rows=0",  # joins whose rows move run on Spark, however few: Spark's faults are tested
            *extra,
        ]
        region = LocalRegion(load_config(None, sets), [x for s in sets for x in ("--set", s)], root / "run")
        running = cls(region, region.start(timeout=120), stores)
        running._supervisor = threading.Thread(target=running._supervise, daemon=True)
        running._supervisor.start()
        return running

    def _supervise(self) -> None:  # what `cxg up` does
        while not self._stop.is_set():
            self.events.extend(self.region.supervise())
            self._stop.wait(0.1)

    def stop(self) -> None:
        self._stop.set()
        if self._supervisor is not None:
            self._supervisor.join()
        self.region.stop()

    def pid(self, role: str) -> int:
        process = next(r for r in self.region.roles if r.name == role).process
        assert process is not None
        return process.pid

    def whole(self) -> bool:
        """Whether /readyz says every table is fully served."""
        try:
            return Client(self.url, timeout=5).get("/readyz").get("ready") is True
        except GatewayError:
            return False

    def members(self) -> int:
        return len(Client(self.url, timeout=5).cluster()["members"])

    def jvm(self) -> int | None:
        """Spark's JVM, started by the gateway."""
        return next((p for p in descendants(self.pid("gateway")) if "java" in command(p).split(" ", 1)[0]), None)

    def expected(self) -> dict[str, list[tuple]]:
        """The answers of the whole region (before any fault)."""
        answers = {}
        for name, sql in QUERIES.items():
            status, doc, _ = ask(self.url, sql)
            if status != 200:
                raise AssertionError(f"{name} did not answer on the whole region: {doc}")
            answers[name] = rows(doc["rows"])
        return answers

    def load_options(self) -> list[str]:
        """`cxg` options that load into this region's data directories."""
        data = f'storage.data=["{self.stores[0].root}", "{self.stores[1].root}"]'
        return ["--set", data, "--set", 'spark.master="local[1]"', "--set", 'spark.driver_memory="1g"']


def duckdb_answers(files: dict[str, Path]) -> dict[str, list[tuple]]:
    """DuckDB's answers to `QUERIES` over the TPC-H `files`."""
    con = duckdb.connect()
    for name in TABLES:
        con.execute(f"CREATE TABLE {name} AS SELECT * FROM read_parquet('{files[name]}')")
    return {name: rows(con.sql(sql).fetchall()) for name, sql in QUERIES.items()}


@contextlib.contextmanager
def serving_tpch(
    sf: float, extra: tuple[str, ...] = ()
) -> Iterator[tuple[FaultRegion, dict[str, Path], dict[str, list[tuple]]]]:
    """TPC-H at `sf` generated in a temporary directory, DuckDB's answers to `QUERIES` over it, and
    a region serving it (`extra`: more `--set` options), checked to answer as DuckDB does; stopped
    and removed on exit."""
    with tempfile.TemporaryDirectory(prefix="cxg-region-") as tmp:
        with console.status(f"generating TPC-H SF {sf:g}"):
            files = tpch.generate(sf, Path(tmp) / "tpch", list(TABLES))
            expected = duckdb_answers(files)
        with console.status("starting a two-node region"):
            region = FaultRegion.start(Path(tmp) / "region", files, extra=extra)
        try:
            if region.expected() != expected:
                raise SystemExit("the region does not answer as DuckDB does before anything is tried")
            yield region, files, expected
        finally:
            region.stop()


# ---- processes -------------------------------------------------------------------------------------


def _stat(pid: int) -> list[str]:
    return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()


def alive(pid: int) -> bool:
    try:
        return _stat(pid)[0] != "Z"
    except OSError:
        return False


def _all() -> dict[int, list[str]]:
    found = {}
    for stat in Path("/proc").glob("[0-9]*/stat"):
        with contextlib.suppress(OSError, IndexError, ValueError):
            found[int(stat.parent.name)] = _stat(int(stat.parent.name))
    return found


def group(pid: int) -> list[int]:
    """The other processes of `pid`'s process group (a node's scan workers)."""
    return [p for p, stat in _all().items() if int(stat[2]) == pid and p != pid]


def descendants(pid: int) -> list[int]:
    parents = {p: int(stat[1]) for p, stat in _all().items()}
    found, frontier = [], [pid]
    while frontier:
        frontier = [p for p, parent in parents.items() if parent in frontier]
        found += frontier
    return found


def command(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
    except OSError:
        return ""


def kill(pid: int, signum: int) -> None:
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, signum)


# ---- the faults ----------------------------------------------------------------------------------


@dataclass
class Report:
    """One fault: what was injected, what clients got while it lasted, and once the region was whole."""

    fault: str
    during: Tally
    after: Tally
    notes: list[str] = field(default_factory=list)


def _recovered(region: FaultRegion, expected: dict, names: tuple[str, ...], seconds: float = 60.0) -> Tally:
    wait_until(region.whole, seconds, "the region is whole again")
    return clients(region.url, expected, names, for_seconds(1.0), seed=99)


def kill_node(
    region: FaultRegion, expected: dict, seed: int = 1, role: str = "node-1", names: tuple[str, ...] = NODE_QUERIES
) -> Report:
    """SIGKILL a node while clients send the queries `names`; the supervisor starts it again."""
    pid = region.pid(role)
    workers = group(pid)
    timer = threading.Timer(random.Random(seed).uniform(0.3, 1.5), kill, (pid, signal.SIGKILL))
    timer.start()
    during = clients(region.url, expected, names, for_seconds(4.0), seed)
    timer.join()
    wait_until(lambda: not [p for p in workers if alive(p)], 10, "the dead node's scan workers are gone")
    after = _recovered(region, expected, names)
    return Report(f"{role} killed (SIGKILL) mid-query", during, after, [f"{len(workers)} scan workers went with it"])


def hang_node(region: FaultRegion, expected: dict, seconds: float = 3.0, role: str = "node-1") -> Report:
    """SIGSTOP a node for `seconds`, then SIGCONT."""
    pid = region.pid(role)
    dropped: list[float] = []

    def watch() -> None:  # when the balancer lets the hung node go
        while not dropped and time.monotonic() - started < seconds:
            if region.members() == 1:
                dropped.append(time.monotonic() - started)
            time.sleep(0.05)

    kill(pid, signal.SIGSTOP)
    started = time.monotonic()
    watcher = threading.Thread(target=watch)
    watcher.start()
    try:
        during = clients(region.url, expected, NODE_QUERIES, for_seconds(seconds), seed=7)
    finally:
        watcher.join()
        kill(pid, signal.SIGCONT)
    after = _recovered(region, expected, NODE_QUERIES)
    note = f"dropped by the balancer after {dropped[0]:.2f} s" if dropped else "not dropped while hung"
    return Report(f"{role} hung (SIGSTOP {seconds:g} s)", during, after, [note])


def kill_scan_worker(region: FaultRegion, expected: dict, role: str = "node-0") -> Report:
    """SIGKILL one scan worker process of a node while clients query."""
    workers = group(region.pid(role))
    timer = threading.Timer(0.5, kill, (workers[0], signal.SIGKILL)) if workers else None
    if timer:
        timer.start()
    during = clients(region.url, expected, NODE_QUERIES, for_seconds(3.0), seed=5)
    if timer:
        timer.join()
    after = _recovered(region, expected, NODE_QUERIES)
    return Report(f"a scan worker of {role} killed (SIGKILL)", during, after)


def kill_spark(region: FaultRegion, expected: dict) -> Report:
    """SIGKILL Spark's JVM (started by a join query first) while clients send joins."""
    if ask(region.url, QUERIES["join"], 180)[0] != 200:
        raise AssertionError("a join query did not answer before the fault")
    jvm = region.jvm()
    if jvm is None:
        raise AssertionError("no Spark JVM under the gateway")
    timer = threading.Timer(0.5, kill, (jvm, signal.SIGKILL))
    timer.start()
    during = clients(region.url, expected, ("join", "count"), for_seconds(3.0), seed=3, count=2)
    timer.join()
    after = Tally()
    for _ in range(3):  # the session is started again by the next join
        after.add("join", *ask(region.url, QUERIES["join"], 240), expected)
    reaped = not alive(jvm) and jvm not in descendants(region.pid("gateway"))
    return Report("Spark's JVM killed (SIGKILL)", during, after, [f"the dead JVM reaped: {reaped}"])


def kill_gateway(region: FaultRegion, expected: dict) -> Report:
    """SIGKILL the gateway while clients query; statements it had accepted are asked for afterwards."""
    held = [ask(region.url, QUERIES["nation"])[1]["id"] for _ in range(3)]
    timer = threading.Timer(0.5, kill, (region.pid("gateway"), signal.SIGKILL))
    timer.start()
    during = clients(region.url, expected, NODE_QUERIES, for_seconds(2.0), seed=11)
    timer.join()
    wait_until(region.whole, 60, "the gateway is back and its nodes rejoined")
    for statement in held:  # a client polling a statement of the dead gateway
        during.add("nation", *_get(region.url, statement), expected)
    return Report("gateway killed (SIGKILL)", during, _recovered(region, expected, NODE_QUERIES))


def _get(url: str, statement: str) -> tuple[int, dict, dict]:
    try:
        with urllib.request.urlopen(f"{url}/v1/statements/{statement}", timeout=30) as response:
            return response.status, json.loads(response.read()), dict(response.headers)
    except urllib.error.HTTPError as e:
        return e.code, json.loads(e.read() or b"{}"), dict(e.headers)


def kill_load(region: FaultRegion, expected: dict, scale_factor: float = 0.05) -> Report:
    """`cxg load tpch` (Spark ingest) of lineitem killed while it uploads blocks, under queries."""
    store = region.stores[0]
    before = set(store.versions("lineitem"))
    command = [sys.executable, "-m", "cxg", *region.load_options(), "load", "tpch", "--sf", f"{scale_factor:g}"]
    scratch = tempfile.mkdtemp(prefix="cxg-killed-load-")  # its generated files: a killed process leaves them
    process = subprocess.Popen(
        [*command, "--tables", "lineitem", "--mode", "replace", "--engine", "spark"],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
        env={**os.environ, "TMPDIR": scratch},
    )
    served = {b.file for b in store.table("lineitem").blocks}

    def uploading() -> bool:
        return any(
            p.name.endswith(".arrow.zst") and p.name not in served for p in store.table_dir("lineitem").iterdir()
        )

    try:
        during = clients(region.url, expected, NODE_QUERIES, lambda: uploading() or process.poll() is not None, seed=13)
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(process.pid, signal.SIGKILL)
        process.wait()
        shutil.rmtree(scratch, ignore_errors=True)
    more = clients(region.url, expected, NODE_QUERIES, for_seconds(1.0), seed=14)
    during.outcomes.update(more.outcomes)
    during.wrong += more.wrong
    unchanged = all(set(s.versions("lineitem")) == before for s in region.stores)
    return Report(
        "a load killed half-way (SIGKILL while uploading)",
        during,
        _recovered(region, expected, NODE_QUERIES),
        [f"killed while uploading: {process.returncode == -signal.SIGKILL}", f"table versions unchanged: {unchanged}"],
    )


def fill_disk(
    region: FaultRegion, expected: dict, files: dict[str, Path], size: str = "1m", engine: str = "local"
) -> Report:
    """A load that fills its disk, under queries: table `filled` lives on a file system of `size` on
    each node (tmpfs, mounted for it; skipped where mounting is not allowed); its first version (25
    rows, loaded in process) fits, then `cxg load parquet --engine <engine>` (in process, as `cxg
    load` loads this host's directories by default, or the Spark ingest) replaces it with lineitem,
    which does not."""
    dirs = [s.table_dir("filled") for s in region.stores]
    mounted: list[Path] = []
    try:
        for directory in dirs:
            directory.mkdir(parents=True)
            if subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(directory)]).returncode:
                return Report("a disk full during a load: skipped (mounting needs root)", Tally(), Tally())
            mounted.append(directory)
        load = [sys.executable, "-m", "cxg", *region.load_options(), "load", "parquet", "filled", "--mode", "replace"]
        load += ["--placement", "replicated"]
        subprocess.run([*load, str(files["nation"]), "--engine", "local"], check=True, capture_output=True)
        queries = {**QUERIES, "filled": "SELECT count(*) AS n FROM filled"}
        expected = {**expected, "filled": [(25,)]}
        wait_until(lambda: ask(region.url, queries["filled"])[0] == 200, 10, "the first version is served")
        before = _files(dirs)
        replacing = [*load, str(files["lineitem"]), "--engine", engine]
        process = subprocess.Popen(replacing, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
        names = ("filled", *NODE_QUERIES)
        during = clients(region.url, expected, names, lambda: process.poll() is not None, seed=17, queries=queries)
        output = process.communicate()[0].decode(errors="replace")
        after = clients(region.url, expected, names, for_seconds(1.0), seed=18, queries=queries)
        left = _files(dirs) - before
        said = next((line.strip() for line in output.splitlines() if "no space left" in line), output.strip()[-200:])
        notes = [f"the load exited {process.returncode}: {said}", f"files of it left on the nodes: {sorted(left)}"]
        how = "Spark ingest" if engine == "spark" else "in process"
        return Report(f"a disk full during a load ({how})", during, after, notes)
    finally:
        for directory in mounted:
            subprocess.run(["umount", "-l", str(directory)], check=False)
        for directory in dirs:
            with contextlib.suppress(OSError):
                directory.rmdir()


def _files(dirs: list[Path]) -> set[str]:
    """The files of tables' directories but the decoded copies the nodes make as they read and the
    empty marks an aborted load leaves (`storage.ingest`; removed with leftovers an hour later)."""
    return {
        str(p)
        for d in dirs
        for p in d.rglob("*")
        if p.is_file() and "decoded" not in p.parts and not (p.suffix == ".aborted" and not p.stat().st_size)
    }


VERSIONED = "SELECT count(*), sum(v) FROM versioned"


def version_rows(i: int) -> pa.Table:
    """Version i of table `versioned`: 100·(i+1) rows, all v = i, so that an answer mixing two
    versions (some buckets of one, some of another) matches none."""
    count = 100 * (i + 1)
    return pa.table({"k": pa.array(range(count), pa.int64()), "v": pa.array([i] * count, pa.int64())})


def one_version(doc: dict) -> bool:
    n, total = doc["rows"][0]
    return n > 0 and n % 100 == 0 and total == (n // 100 - 1) * n


def reload_under_load(region: FaultRegion, expected: dict, files: dict[str, Path], reloads: int = 6) -> Report:
    """Tables reloaded while clients query: lineitem's and orders' same rows under other placements
    (hash <-> replicated, another hash key), and a table whose rows change with each version."""
    versioned = TableSchema.from_arrow("versioned", version_rows(0).schema, placement=Placement.parse("hash(k)", 4))
    load_table(region.stores, versioned, version_rows(0))
    tally, lock, done = Tally(), threading.Lock(), threading.Event()

    def client(k: int) -> None:
        rng = random.Random(k)
        while not done.is_set():
            name = rng.choice(("join", "colocated", "count", "having", "versioned"))
            if name != "versioned":
                answer = ask(region.url, QUERIES[name])
                with lock:
                    tally.add(name, *answer, expected)
                continue
            status, doc, headers = ask(region.url, VERSIONED)
            with lock:
                if status == 200 and not one_version(doc):
                    tally.outcomes["wrong"] += 1
                    tally.wrong.append(f"versioned: {doc['rows']} is no one version")
                elif status == 200:
                    tally.outcomes["right"] += 1
                else:
                    tally.add(name, status, doc, headers, expected)

    def reload(table: str, placement: str) -> None:  # as a user does, with `cxg load parquet`
        command = [sys.executable, "-m", "cxg", *region.load_options(), "load", "parquet", table, str(files[table])]
        command += ["--placement", placement, "--buckets", "8", "--mode", "replace", "--engine", "local"]
        subprocess.run(command, check=True, capture_output=True)

    with ThreadPoolExecutor(3) as pool:
        running = [pool.submit(client, k) for k in range(3)]
        try:
            for i in range(1, reloads + 1):
                reload("lineitem", "replicated" if i % 2 else "hash(l_orderkey)")
                reload("orders", "hash(o_custkey)" if i % 2 else "hash(o_orderkey)")
                load_table(region.stores, versioned, version_rows(i))
        finally:
            done.set()
            for future in running:
                future.result()
    wait_until(
        lambda: ask(region.url, VERSIONED)[1].get("rows") == [[100 * (reloads + 1), reloads * 100 * (reloads + 1)]],
        5,
        "the last version is served",
    )
    note = f"{reloads} reloads of 3 tables, placements alternating"
    return Report(
        "tables reloaded under other placements, under queries",
        tally,
        _recovered(region, expected, NODE_QUERIES),
        [note],
    )
