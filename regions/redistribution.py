"""Moving tables while queries keep answering (`cxg redistribute`): to another region (a copy, or a
move that then retires the table at home), between the nodes of a region (a node added or taken
out: its buckets re-owned), and from the busiest nodes to the idlest (seed 003's Balance).

A region is read through its gateway: the nodes that have joined it and, from their catalogs (read
here, never released from here), the version of each table it serves. Each move is planned
(`storage.redistribution`), run as a Spark job (`storage.spark_redistribute`) and then waited for
until the region's gateway serves the new version: until then queries read the old one, which its
nodes keep, so they answer the same before, during and after the move.
"""

from __future__ import annotations

import threading
import time
from collections import defaultdict
from collections.abc import Callable, Iterator
from contextlib import contextmanager, suppress
from dataclasses import dataclass, replace
from typing import Any

from gateway import Client, RegionCatalog, SqlError, TableInfo
from storage import (
    BucketMove,
    LoadOptions,
    NodeClient,
    NodeError,
    Placement,
    RedistributionError,
    Sizing,
    TableMove,
    balance,
    costs,
    load_target,
    moved,
    plan_move,
    row_costs,
    spark_move,
    spread,
)

HOLD_S = 60.0  # a move's hold on its table's appends lapses this long after its last refresh
SERVED_TIMEOUT_S = 60.0  # how long a move waits for its region's gateway to serve the new version


@dataclass
class RegionView:
    """A region as a move sees it: its gateway, its nodes (name -> URL) and what they hold."""

    name: str
    client: Client
    nodes: dict[str, str]
    catalog: RegionCatalog

    @classmethod
    def of(cls, client: Client, name: str = "") -> RegionView:
        cluster = client.cluster()
        nodes = {n["name"]: n["url"] for m in cluster["members"] for n in m["nodes"] if n.get("url")}
        if not nodes:
            raise RedistributionError(f"region {name or cluster.get('region')}: no storage node has joined its gateway")
        catalog = RegionCatalog(nodes, releases=False)  # the gateway's catalog decides what is released
        catalog.refresh()
        return cls(name or str(cluster.get("region", "")), client, nodes, catalog)

    def table(self, name: str) -> TableInfo:
        try:
            return self.catalog.table(name)
        except SqlError as e:
            raise RedistributionError(f"region {self.name}: {e}") from None

    def holding(self, name: str) -> list[str]:
        """The nodes of this region serving table `name` (none when it has no such table)."""
        info = self.catalog.tables().get(name)
        return list(info.nodes) if info is not None else []

    def described(self, info: TableInfo, node: str | None = None) -> dict[str, Any]:
        """A node's description of the served version: sizing, rows per bucket."""
        node = node or info.nodes[0]
        try:
            return NodeClient(self.nodes[node]).get(f"/v1/tables/{info.schema.name}?version={info.version}")
        except NodeError as e:
            message = f"region {self.name}: node {node} cannot describe {info.schema.name}: {e}"
            raise RedistributionError(message) from None

    def bucket_rows(self, info: TableInfo) -> dict[str, dict[tuple[str, int], int]]:
        """node -> (table, bucket) -> rows, for the buckets each node owns."""
        held: dict[str, dict[tuple[str, int], int]] = {}
        for node in info.nodes:
            rows = self.described(info, node)["buckets"]
            owned = [b for b in range(info.schema.placement.buckets) if info.schema.placement.owners[b] == node]
            held[node] = {(info.schema.name, b): rows.get(str(b), 0) for b in owned}
        return held

    def work(self) -> dict[str, dict]:
        """Each node's scan work so far (`storage.bucket_load.BucketWork`) and its slots."""
        readings = {}
        for node, url in self.nodes.items():
            try:
                info = NodeClient(url).get("/v1/node")
            except NodeError:
                continue
            readings[node] = {**info["work"], "slots": info["slots"]}
        return readings

    def served(self, table: str) -> dict[str, Any] | None:
        """The gateway's view of a table (version, stamp, whether available)."""
        return self.client.tables().get(table)

    def wait_until(
        self, table: str, done: Callable[[dict[str, Any] | None], bool], what: str, timeout: float = SERVED_TIMEOUT_S
    ) -> dict[str, Any] | None:
        """Wait until the gateway's view of `table` is `done`; that view. RedistributionError naming
        `what` was awaited after `timeout` seconds."""
        deadline = time.monotonic() + timeout
        while True:
            served = self.served(table)
            if done(served):
                return served
            if time.monotonic() > deadline:
                raise RedistributionError(f"region {self.name}: {what} within {timeout:g} s (it serves {served})")
            time.sleep(0.2)

    def wait_stamp(self, table: str, stamp: str | None, timeout: float = SERVED_TIMEOUT_S) -> dict[str, Any]:
        """Wait until the gateway serves `table` fully at the version of rows `stamp`."""
        return self.wait_until(
            table,
            lambda served: served is not None and bool(served.get("available")) and served.get("stamp") == stamp,
            f"the gateway did not serve {table} at its new version",
            timeout,
        )


def _movable(info: TableInfo) -> bool:
    placement = info.schema.placement
    return placement.kind == "hash" and placement.replicas == 1 and bool(placement.owners)


def plan_nodes(view: RegionView, table: str, nodes: list[str]) -> TableMove:
    """`table` re-owned over `nodes` of its region: the buckets of nodes left out spread over the
    others, then buckets moved until every node holds about as many rows (a node added takes its
    share); a replicated table copied to every one of them."""
    unknown = [n for n in nodes if n not in view.nodes]
    if unknown:
        raise RedistributionError(
            f"region {view.name}: no node {', '.join(unknown)} has joined (it has {', '.join(view.nodes)})"
        )
    info = view.table(table)
    placement = info.schema.placement
    if placement.kind == "hash":
        if len(set(nodes)) < placement.replicas:
            raise RedistributionError(f"table {table} keeps {placement.replicas} replicas: it needs as many nodes")
        rows = row_costs(view.bucket_rows(info)) if placement.replicas == 1 else _even(info)
        leaving = [n for n in rows if n not in nodes]
        moves = spread(rows, leaving, nodes)
        after = _apply(rows, moves)
        moves += balance({n: after.get(n, {}) for n in nodes}, nodes, threshold=0.0)
        placement = moved(placement, moves)
    return plan_move(info.schema, info.version, info.data, info.nodes, placement, nodes)


def plan_placement(view: RegionView, table: str, placement: str, buckets: int) -> TableMove:
    """`table` placed otherwise over its region's nodes: replicated on every one of them, or
    hash-placed (`placement` as `cxg load` reads it, `buckets` of them, owned round-robin); every
    row is read and placed again."""
    info = view.table(table)
    nodes = sorted(view.nodes)
    target = Placement.parse(placement, buckets)
    if target.kind == "hash":
        missing = [k for k in target.keys if k not in info.schema.column_names]
        if missing:
            raise RedistributionError(f"table {table} has no column {', '.join(missing)} to hash on")
        target = target.with_owners(nodes)
    return plan_move(info.schema, info.version, info.data, info.nodes, target, nodes)


def _even(info: TableInfo) -> dict[str, dict[tuple[str, int], float]]:
    """Costs that count each owned bucket alike (replicated buckets: rows are not known per owner)."""
    placement = info.schema.placement
    held: dict[str, dict[tuple[str, int], float]] = defaultdict(dict)
    for bucket, owner in enumerate(placement.owners):
        held[owner][(info.schema.name, bucket)] = 1.0 / placement.buckets
    return dict(held)


def _apply(table: dict[str, dict], moves: list[BucketMove]) -> dict[str, dict]:
    after = {node: dict(buckets) for node, buckets in table.items()}
    for move in moves:
        cost = after[move.source].pop((move.table, move.bucket))
        after.setdefault(move.target, {})[(move.table, move.bucket)] = cost
    return after


def measure_costs(view: RegionView, window: float, sleep: Callable[[float], None] = time.sleep) -> dict:
    """The region's cost table over the next `window` seconds of its load (`storage.bucket_load`)."""
    before = view.work()
    started = time.monotonic()
    sleep(window)
    after = view.work()
    slots = {node: reading["slots"] for node, reading in after.items()}
    return costs(before, after, time.monotonic() - started, slots)


def plan_rebalance(
    view: RegionView, table_costs: dict, threshold: float, tables: list[str] | None = None
) -> tuple[list[TableMove], list[BucketMove]]:
    """Seed 003's Balance over the region's hash-placed tables (one replica; `tables` only, when
    given): buckets from the busiest nodes to the idlest, every node of the region taking part
    (a node just added holds none and costs nothing). The moves, and the table moves that make them."""
    infos = {name: info for name, info in view.catalog.tables().items() if info.available and _movable(info)}
    if tables:
        missing = [t for t in tables if t not in infos]
        if missing:
            raise RedistributionError(
                f"region {view.name}: {', '.join(missing)} is not a served hash-placed table of one replica"
            )
        infos = {name: infos[name] for name in tables}
    owned = {
        node: {
            (name, b): table_costs.get(node, {}).get((name, b), 0.0)
            for name, info in infos.items()
            for b, owner in enumerate(info.schema.placement.owners)
            if owner == node
        }
        for node in view.nodes
    }
    moves = balance(owned, list(view.nodes), threshold)
    by_table: dict[str, list[BucketMove]] = defaultdict(list)
    for move in moves:
        by_table[move.table].append(move)
    planned = []
    for name, table_moves in sorted(by_table.items()):
        info = infos[name]
        placement = moved(info.schema.placement, table_moves)
        planned.append(plan_move(info.schema, info.version, info.data, info.nodes, placement, list(view.nodes)))
    return planned, moves


def plan_copy(source: RegionView, target: RegionView, table: str) -> TableMove:
    """`table` as `source` serves it, copied to every node of `target` (its buckets spread round
    robin over them, the rows' identity kept so that queries may move between the two regions)."""
    info = source.table(table)
    nodes = sorted(target.nodes)
    placement = info.schema.placement
    if placement.kind == "hash":
        if len(nodes) < placement.replicas:
            raise RedistributionError(
                f"table {table} keeps {placement.replicas} replicas: region {target.name} has fewer nodes"
            )
        placement = placement.with_owners(nodes)
    holding = target.holding(table)
    return plan_move(info.schema, info.version, info.data, info.nodes, placement, nodes, False, holding)


def run_move(spark: Any, move: TableMove, source: RegionView, target: RegionView, options: LoadOptions) -> TableMove:
    """Run one planned move (a Spark job), with the source's sizing for the blocks it writes and
    its table's appends held meanwhile; the move as run (on the version the appends were held at)."""
    with appends_held(source, move) as held:
        sizing = Sizing(**source.described(source.table(held.table))["sizing"])
        spark_move(spark, held, source.nodes, target.nodes, sizing, options)
    return held


@contextmanager
def appends_held(view: RegionView, move: TableMove, attempts: int = 20) -> Iterator[TableMove]:
    """Hold the appends to the table of `move` on the nodes of `view` holding it (`storage.holds`),
    at the version they hold now (read again when an append commits meanwhile), refreshed while the
    move runs and released at its end; the move rebased on that version: appends change neither
    the placement nor the nodes, so the plan stands (RedistributionError when the table was placed
    otherwise since it was planned)."""
    for _ in range(attempts):
        view.catalog.refresh()
        info = view.table(move.table)
        if (move.origin is not None and info.schema.placement != move.origin) or not set(move.reads) <= set(info.nodes):
            raise RedistributionError(
                f"table {move.table} was placed otherwise since the move was planned: plan it again"
            )
        urls = [view.nodes[node] for node in info.nodes]
        path = f"/v1/tables/{move.table}/hold?version={info.version}&seconds={HOLD_S:g}"
        held: list[str] = []
        try:
            for url in urls:
                NodeClient(url).put_bytes(path, b"")
                held.append(url)
        except NodeError as e:
            _release(move.table, held)
            if e.code != "version_conflict":
                raise RedistributionError(f"region {view.name}: holding the appends to {move.table}: {e}") from None
            continue  # an append committed meanwhile: hold the version it made
        stop = threading.Event()
        refresher = threading.Thread(target=_refresh_holds, args=(path, urls, stop), daemon=True, name="holds")
        refresher.start()
        try:
            yield replace(move, base=info.version, data=info.data)
        finally:
            stop.set()
            refresher.join()
            _release(move.table, urls)
        return
    raise RedistributionError(f"table {move.table}: appends kept committing; its appends could not be held")


def _refresh_holds(path: str, urls: list[str], stop: threading.Event) -> None:
    """Thread: the holds placed again every third of their time, until `stop` (a node that
    misses one still refuses the move's commit if an append came: the move checks its base)."""
    while not stop.wait(HOLD_S / 3):
        for url in urls:
            with suppress(NodeError):
                NodeClient(url).put_bytes(path, b"")


def _release(table: str, urls: list[str]) -> None:
    """End the holds on `table` (a node that cannot be reached lets its hold lapse)."""
    for url in urls:
        with suppress(NodeError):
            NodeClient(url).delete(f"/v1/tables/{table}/hold")


def wait_served(target: RegionView, move: TableMove, timeout: float = SERVED_TIMEOUT_S) -> dict[str, Any]:
    """Wait until the target region's gateway serves the table at its new version (with the rows'
    identity kept); what it serves."""

    def new(served: dict[str, Any] | None) -> bool:
        fresh = served is not None and (not move.local or served["version"] > move.base)
        return fresh and bool(served.get("available")) and served.get("stamp") == move.data

    return target.wait_until(move.table, new, f"the gateway did not serve {move.table} at its new version", timeout)


def retire_everywhere(view: RegionView, table: str, timeout: float = SERVED_TIMEOUT_S) -> list[str]:
    """Retire `table` on every node of `view` holding it (a move's last step at home) and wait until
    the region's gateway no longer serves it (the queries reading it still finish); the nodes."""
    done = []
    for node in view.holding(table):
        load_target(view.nodes[node]).retire(table)
        done.append(node)
    view.wait_until(table, lambda served: served is None, f"the gateway still serves {table}", timeout)
    return done
