"""Several regions live: one file describes them, each gateway answers its own clients wherever
their queries ran, queries move only to regions holding their tables at the same version, each
balancing method moves them, and a region killed mid-run loses nothing and answers nothing twice.
Regions of simulation nodes, in this process (`EmbeddedRegion`) or as `cxg up` processes."""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import os
import re
import signal
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from balancer import NodeServer, SimulationBackend
from balancer.simulation import QueryType
from benchmarks.faults import rows
from cxg import main
from gateway import Client, free_port
from regions import CentralBalancer, EmbeddedRegion, load_config
from storage import ConfigError, Store, load_table, read_parquet, tpch
from tests.balancing import until
from tests.http import http
from tests.waiting import eventually

SLOW = {"slow": QueryType(0.3, 3), "long": QueryType(2.0, 3)}
LINEITEM = "SELECT * FROM lineitem"


def _file(tmp_path: Path, method: str, regions: dict[str, str], extra: str = "") -> Path:
    """A file of several regions of simulation nodes; `regions`: name -> what its table sets."""
    lines = [
        '[region]\nbackend = "simulation"\nnodes = 1\nslots = 1',
        f'[balancing]\nmethod = "{method}"\npoll = 0.05\npeer_timeout = 2.0\nport = {free_port()}',
        extra,
    ]
    for name, body in regions.items():
        port = "" if "gateway.port" in body else f"gateway.port = {free_port()}\n"
        lines.append(f"[regions.{name}]\n{port}{body}")
    path = tmp_path / "regions.toml"
    path.write_text("\n\n".join(lines) + "\n")
    return path


def _start(path: Path) -> dict[str, EmbeddedRegion]:
    started = {}
    for name in load_config(path).regions:
        config = load_config(path, region=name)
        region = EmbeddedRegion(config, [NodeServer(f"{name}-0", SimulationBackend(SLOW, 1.0), 1)])
        region.start()
        started[name] = region
    return started


@contextlib.contextmanager
def _regions(path: Path):
    started = _start(path)
    central = None
    try:
        if load_config(path).balancing.method == "centralized":
            central = _Central(load_config(path))
        yield started
    finally:
        if central is not None:
            central.stop()
        for region in started.values():
            region.stop()


class _Central:
    """The central balancer on a loop of its own, as `cxg balance-regions` runs it."""

    def __init__(self, config) -> None:
        self.balancer = CentralBalancer(config)
        self.loop = asyncio.new_event_loop()
        self.stop_event = asyncio.Event()
        self.thread = threading.Thread(target=self.loop.run_until_complete, args=(self._run(),), daemon=True)
        self.thread.start()

    async def _run(self) -> None:
        self.stop_event = asyncio.Event()
        await self.balancer.run(self.stop_event)

    def stop(self) -> None:
        self.loop.call_soon_threadsafe(self.stop_event.set)
        self.thread.join(10)


def _burst(url: str, count: int, sql: str = LINEITEM, tag: str = "slow") -> list[dict]:
    """`count` queries at once to one gateway, each waited for."""

    def one(_: int) -> dict:
        return http("POST", f"{url}/v1/statements", {"sql": sql, "tag": tag, "wait": 60}).json()

    with concurrent.futures.ThreadPoolExecutor(count) as pool:
        return list(pool.map(one, range(count)))


# ---- the file -----------------------------------------------------------------------------------


def test_a_file_describes_several_regions_each_kept_apart(tmp_path: Path) -> None:
    path = _file(
        tmp_path,
        "decentralized",
        {
            "east": 'databases = {tpch = ["lineitem", "orders"]}',
            "west": 'copies_of = ["east"]\ndefault = true\nstorage = {data = ["w/0"]}',
            "north": "region = {first_port = 9500}",
        },
    )
    west = load_config(path)
    assert west.name == "west" and [p.name for p in west.peers] == ["east", "north"]
    east, north = load_config(path, region="east"), load_config(path, region="north")
    assert [c.gateway.region for c in (east, west, north)] == [1, 2, 3]
    assert [c.region.first_port for c in (east, west, north)] == [8101, 8201, 9500]
    assert east.storage.data == ["data/east/node-0", "data/east/node-1"] and west.storage.data == ["w/0"]
    assert west.regions["west"].tables(west.regions) == {"lineitem", "orders"}  # its copy of east's
    assert west.regions["north"].tables(west.regions) is None  # names none: whatever it serves
    moved = load_config(path, [f"regions.east.gateway.port={free_port()}"], "east")
    assert moved.gateway.port != east.gateway.port and moved.regions["east"].url == moved.gateway.url


@pytest.mark.parametrize(
    ("regions", "message"),
    [
        ({"a": "gateway.region = 4", "b": "gateway.region = 4"}, "share gateway.region 4"),
        ({"a": "copies_of = ['z']", "b": ""}, "copies_of names no other region: z"),
        ({"a": "colour = 'red'", "b": ""}, "unknown option(s) in [regions.a]: colour"),
        ({"a": "default = true", "b": "default = true"}, "one region may be the default"),
        ({"a": "gateway.port = 0", "b": ""}, "region a: gateway.port must be set"),
        ({"a": "region = {backend = 'x'}", "b": ""}, "region a: region.backend must be"),
    ],
)
def test_a_wrong_file_of_regions_is_refused_by_name(tmp_path: Path, regions: dict, message: str) -> None:
    with pytest.raises(ConfigError, match=re.escape(message)):
        load_config(_file(tmp_path, "none", regions))


def test_region_names_and_methods_are_checked(tmp_path: Path) -> None:
    path = _file(tmp_path, "decentralized", {"a": "", "b": ""})
    with pytest.raises(ConfigError, match="--region c: no such region"):
        load_config(path, region="c")
    with pytest.raises(ConfigError, match=r"balancing\.method must be one of"):
        load_config(path, ['balancing.method="random"'])
    with pytest.raises(ConfigError, match="describes one region"):
        load_config(None, region="a")


# ---- moving queries -----------------------------------------------------------------------------


@pytest.mark.parametrize("method", ["decentralized", "idle-pull", "centralized"])
def test_each_method_moves_queries_and_the_home_gateway_answers_them(tmp_path: Path, method: str) -> None:
    path = _file(tmp_path, method, {"east": 'databases = {tpch = ["lineitem"]}', "west": 'copies_of = ["east"]'})
    with _regions(path) as regions:
        docs = _burst(regions["east"].url, 8)
        assert [d["state"] for d in docs] == ["succeeded"] * 8, docs
        assert all(d["row_count"] == 3 for d in docs)
        away = [d for d in docs if d["region"] == "west"]
        assert away, f"{method} moved nothing"
        for doc in away:  # waited at home, then in the queue of the region that ran it
            assert [q["region"] for q in doc["queues"]] == ["east", "west"] and "away" in doc["timings_ms"]
        assert all(d["region"] == "east" and len(d["queues"]) == 1 for d in docs if d not in away)
        east = http("GET", f"{regions['east'].url}/v1/cluster").json()
        assert east["counters"]["moved"] == len(away) and east["statements"]["succeeded"] == 8
        west = http("GET", f"{regions['west'].url}/v1/regions").json()
        assert west["method"] == method and west["moved"]["pulled"] == len(away)
        load = west["load"]  # each region's, as its queue summary tells it
        assert set(load) == {"east", "west"} and all(region["queued"] == 0 for region in load.values())
        assert all(region["servers"] >= 1 and region["draining"] is False for region in load.values())


def test_without_balancing_every_query_stays_home(tmp_path: Path) -> None:
    path = _file(tmp_path, "none", {"east": 'databases = {tpch = ["lineitem"]}', "west": 'copies_of = ["east"]'})
    with _regions(path) as regions:
        docs = _burst(regions["east"].url, 4)
        assert {(d["state"], d["region"]) for d in docs} == {("succeeded", "east")}


def test_a_query_moves_only_to_a_region_holding_its_tables(tmp_path: Path) -> None:
    path = _file(
        tmp_path,
        "decentralized",
        {
            "east": 'databases = {tpch = ["lineitem", "orders"]}',
            "west": 'copies_of = ["east"]',
            "north": 'databases = {geo = ["nation"]}',
        },
    )
    with _regions(path) as regions:
        docs = _burst(regions["east"].url, 8)
        assert {d["state"] for d in docs} == {"succeeded"}, [d.get("error") for d in docs if d["state"] != "succeeded"]
        assert {d["region"] for d in docs} == {"east", "west"}, "north holds no lineitem: nothing may run there"
        nation = _burst(regions["north"].url, 6, "SELECT * FROM nation")
        assert {(d["state"], d["region"]) for d in nation} == {("succeeded", "north")}


def test_a_region_gets_only_queries_it_holds_at_their_version(tmp_path: Path) -> None:
    """The handover itself: an asker holding another version of the table, or not holding it,
    gets nothing; one holding the same version gets the head query."""
    path = _file(tmp_path, "none", {"east": 'databases = {tpch = ["lineitem"]}', "west": 'copies_of = ["east"]'})
    with _regions(path) as regions:
        url = regions["east"].url
        with concurrent.futures.ThreadPoolExecutor(4) as pool:
            pending = [pool.submit(_burst, url, 1, LINEITEM, "long") for _ in range(4)]
            east = regions["east"]  # one runs, one is buffered on the node, two wait in the queue
            until(east, lambda: len(east.gateway.balancer.queue) == 2, what="two queries queued")
            asked = [
                {"lineitem": "3:load-a"},  # the nodes keep no versions: a versioned copy is another one
                {"orders": None},
            ]
            for holdings in asked:
                body = {"region": "west", "holdings": holdings}
                assert http("POST", f"{url}/v1/regions/handover", body).json() == {"queries": []}
            taken = http("POST", f"{url}/v1/regions/handover", {"region": "west", "holdings": {"lineitem": None}})
            (query,) = taken.json()["queries"]
            assert query["sql"] == LINEITEM and query["versions"] == {"lineitem": None}
            refused = http("POST", f"{url}/v1/regions/handover", {"region": "nowhere", "holdings": {}})
            assert refused.status == 400
            # west never ran it: the origin takes it back once west says it does not hold it
            docs = [d for f in pending for d in f.result()]
        assert {(d["state"], d["region"]) for d in docs} == {("succeeded", "east")}
        assert http("GET", f"{url}/v1/regions").json()["moved"]["came_back"] == 1


def test_bad_requests_between_regions_get_clear_errors(tmp_path: Path) -> None:
    path = _file(tmp_path, "none", {"east": "", "west": ""})
    with _regions(path) as regions:
        url = regions["east"].url
        for route, body in [
            ("handover", "not json"),
            ("handover", {"region": "west", "count": "two"}),
            ("handover", {"region": "west", "end": "middle"}),
            ("handover", {"region": "west", "holdings": ["lineitem"]}),
            ("pull", {"source": "east"}),  # not a region east may pull from: itself
            ("pull", {"source": "west", "count": 0}),
        ]:
            reply = http("POST", f"{url}/v1/regions/{route}", body, {"Content-Type": "application/json"})
            assert reply.status == 400 and reply.json()["error"]["code"] == "invalid_request", (route, body)
        doc = http("POST", f"{url}/v1/statements", {"sql": LINEITEM, "tag": "slow", "wait": 0}).json()
        for body in [{"status": "bad"}, {"status": 400, "error": {"code": 1}}, ["go_home"]]:
            reply = http("POST", f"{url}/v1/regions/outcomes/{doc['id']}?region=west", body)
            assert reply.status == 400, body
        late = http("POST", f"{url}/v1/regions/outcomes/{doc['id']}?region=west", {"go_home": "never taken"})
        assert late.status == 409 and late.json()["error"]["code"] == "not_away"
        assert http("GET", f"{url}/v1/statements/{doc['id']}?wait=10").json()["state"] == "succeeded"


# ---- a region killed ------------------------------------------------------------------------------

CLI = [sys.executable, "-m", "cxg"]


def _pids(*words: str) -> list[int]:
    """Processes whose command line holds all of `words` in order (from /proc)."""
    found = []
    for cmdline in Path("/proc").glob("[0-9]*/cmdline"):
        with contextlib.suppress(OSError):
            args = cmdline.read_bytes().decode(errors="replace").split("\0")
            if any(args[i : i + len(words)] == list(words) for i in range(len(args))):
                found.append(int(cmdline.parent.name))
    return found


def _up(path: Path, tmp_path: Path) -> subprocess.Popen:
    """`cxg up` of every region of the file, its output piped."""
    command = [*CLI, "--config", str(path), "up", "--run-dir", str(tmp_path / "run")]
    return subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)


def test_cxg_up_starts_every_region_and_a_killed_region_loses_nothing(tmp_path: Path) -> None:
    path = _file(
        tmp_path,
        "decentralized",
        {"east": 'databases = {tpch = ["lineitem"]}', "west": 'copies_of = ["east"]'},
        "[simulation]\ntime_scale = 1.0\nqueries = {slow = {seconds = 1.0, rows = 2}}",
    )
    east, west = (load_config(path, region=name) for name in ("east", "west"))
    up = _up(path, tmp_path)
    lines: list[str] = []
    reader = threading.Thread(target=lambda: lines.extend(up.stdout), daemon=True)
    reader.start()
    try:
        for config in (east, west):
            Client(config.gateway.url).wait_ready(timeout=90, nodes=1)

        def supervising() -> bool:  # cxg up supervises once it has started them all: then a kill is a restart
            assert up.poll() is None, "".join(lines)
            return any("region west (2) is up" in line for line in lines)

        eventually(supervising, 90, "cxg up saying region west is up")
        status = [*CLI, "--config", str(path), "status"]  # a row per region of the file, then this region's nodes
        shown = subprocess.run(status, capture_output=True, text=True, timeout=60, env={**os.environ, "COLUMNS": "200"})
        assert shown.returncode == 0 and east.gateway.url in shown.stdout and west.gateway.url in shown.stdout, shown
        submitted = [
            http("POST", f"{east.gateway.url}/v1/statements", {"sql": LINEITEM, "tag": "slow", "wait": 0}).json()
            for _ in range(10)
        ]
        moves = f"{east.gateway.url}/v1/regions"
        eventually(lambda: http("GET", moves).json()["moved"]["handed_over"] >= 2, 30, "west pulling two queries")
        (gateway,) = _pids("--region", "west", "gateway")
        os.kill(gateway, signal.SIGKILL)
        final = [http("GET", f"{east.gateway.url}/v1/statements/{doc['id']}?wait=60").json() for doc in submitted]
        assert [d["state"] for d in final] == ["succeeded"] * 10, final
        regions = http("GET", f"{east.gateway.url}/v1/regions").json()["moved"]
        assert regions["came_back"] >= 1, regions  # what the killed gateway held ran at home (or elsewhere)
        cluster = http("GET", f"{east.gateway.url}/v1/cluster").json()
        assert cluster["statements"]["succeeded"] == 10 and cluster["queue"] == 0
    finally:
        up.send_signal(signal.SIGINT)
        up.wait(timeout=60)
        reader.join(10)
    output = "".join(lines)
    assert "region east (1) is up" in output and "region west (2) is up" in output, output
    assert "west: gateway exited" in output, output


# ---- native regions: a copy lets queries move ------------------------------------------------------

Q1 = (
    "SELECT l_returnflag, l_linestatus, sum(l_quantity) AS q, sum(l_extendedprice * (1 - l_discount)) AS r, "
    "count(*) AS n FROM lineitem GROUP BY l_returnflag, l_linestatus ORDER BY l_returnflag, l_linestatus"
)


def test_a_copy_made_by_cxg_redistribute_is_the_same_version_and_queries_move_to_it(
    tmp_path: Path, tpch_files, duck, spark, capsys
) -> None:
    """Two regions of storage nodes: east serves TPC-H, west (empty) keeps copies of east's tables.
    Before the copy no query may move to west; `cxg redistribute lineitem --to west` makes the copy,
    which both regions then serve with the same identity, and queries of east's clients run in west
    and are answered right by east's gateway; `--move` leaves a table served by west alone."""
    east_dirs = [str(tmp_path / "east-0"), str(tmp_path / "east-1")]
    stores = [Store(d, node=f"node-{i}") for i, d in enumerate(east_dirs)]
    for name in ("lineitem", "nation"):
        source = read_parquet([tpch_files[name]])
        load_table(stores, tpch.schema_for(name, source.schema, buckets=8), source)
    common = (
        '[region]\nbackend = "native"\nslots = 1\nfirst_port = 0\n'
        '[storage]\nnode_memory = "none"\n'
        '[spark]\nmaster = "local[1]"\ndriver_memory = "1g"\nwarm_up = false\n'
    )
    path = _file(
        tmp_path,
        "decentralized",
        {
            "east": f'databases = {{tpch = ["lineitem", "nation"]}}\nstorage = {{data = {east_dirs}}}',
            "west": f'copies_of = ["east"]\nstorage = {{data = ["{tmp_path / "west-0"}"]}}',
        },
        common,
    )
    path.write_text(path.read_text().replace('[region]\nbackend = "simulation"\nnodes = 1\nslots = 1\n', ""))
    east, west = (load_config(path, region=name) for name in ("east", "west"))
    up = _up(path, tmp_path)
    right = rows(duck.sql(Q1).fetchall())
    try:
        Client(east.gateway.url).wait_ready(timeout=90, nodes=2)
        Client(west.gateway.url).wait_ready(timeout=90, nodes=1)
        before = _burst(east.gateway.url, 12, Q1, "")
        assert {(d["state"], d["region"]) for d in before} == {("succeeded", "east")}, "west holds nothing yet"
        code = main(["--config", str(path), "--region", "east", "redistribute", "lineitem", "--to", "west"])
        out, err = capsys.readouterr()
        assert code == 0, err
        assert "lineitem: version 1 served by region west on node-0" in out and "Spark tasks" in out, out
        tables = {c.name: Client(c.gateway.url).tables() for c in (east, west)}
        assert tables["east"]["lineitem"]["stamp"] == tables["west"]["lineitem"]["stamp"]
        assert "nation" not in tables["west"]
        moved = []
        for _ in range(10):  # bursts until west has taken some (it pulls whenever its queue is empty)
            docs = _burst(east.gateway.url, 16, Q1, "")
            assert all(d["state"] == "succeeded" for d in docs), docs
            assert all(rows(d["rows"]) == right for d in docs)
            moved += [d for d in docs if d["region"] == "west"]
            if moved:
                break
        assert moved, "no query of east ran on west's copy"
        code = main(["--config", str(path), "--region", "east", "redistribute", "nation", "--to", "west", "--move"])
        out, err = capsys.readouterr()
        assert code == 0 and "nation: retired in region east on node-0, node-1" in out, (out, err)
        assert "nation" not in Client(east.gateway.url).tables() and "nation" in Client(west.gateway.url).tables()
        answer = http("POST", f"{west.gateway.url}/v1/statements", {"sql": "SELECT count(*) AS n FROM nation"})
        assert answer.json()["rows"] == [[25]]
    finally:
        up.send_signal(signal.SIGINT)
        up.communicate(timeout=60)


def test_a_region_whose_queue_stays_heavy_reports_itself_overloaded(tmp_path: Path) -> None:
    config = load_config(
        None,
        ["gateway.port=0", 'region.backend="simulation"', "region.overload_weight=1.0", "region.overload_seconds=0.5"],
    )
    with EmbeddedRegion(config, [NodeServer("node-0", SimulationBackend(SLOW, 1.0), 1)]) as region:
        assert http("GET", f"{region.url}/v1/regions/load").json()["overloaded"] is False
        with concurrent.futures.ThreadPoolExecutor(1) as pool:
            pending = pool.submit(_burst, region.url, 5, LINEITEM, "long")  # 1 runs, 1 buffered, 3 queued

            def overloaded() -> dict | None:
                load = http("GET", f"{region.url}/v1/regions/load").json()
                return load if load["overloaded"] else None

            load = eventually(overloaded, 10, "the region reporting itself overloaded")
            assert load["weight"] > 1.0 and load["reports"] == 1
            assert "cxg_region_overloaded 1.0" in http("GET", f"{region.url}/metrics").body.decode()
            assert {d["state"] for d in pending.result()} == {"succeeded"}
        eventually(lambda: not overloaded(), 10, "the watch (every second) seeing the queue light again")
