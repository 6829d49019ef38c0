"""What the region's storage nodes hold, as the SQL layer needs it: one version of each table.

Every table has versions (a load commits a new one on every node that holds the table, under one
number: `storage.ingest.commit_all`). The catalog reads the nodes' lists of the versions they keep
and serves, per table, the newest *complete* version: one of every bucket's holders has it (a
hash-placed table) or at least one node does (a replicated table). A load that has reached some nodes
but not all is not seen yet; the nodes that committed first keep the previous version, which queries
go on reading. A table with no complete version (a bucket's node is down) is listed as unavailable
and a query reading it fails with a retryable error naming what is missing, never with part of it.

A query reads one `snapshot`: the versions it pins stay kept on the nodes until the snapshot is
closed; then versions older than the one served, pinned by no query, are released on the nodes.
The catalog reads the nodes again when it is older than `max_age` seconds, so loads, new tables and
changed placements are seen without a restart. A node that does not list its tables in time is busy
or hung: what it listed last serves for `SLOW_GRACE_S`, then it serves nothing until it answers; a
node that refuses the connection serves nothing at once.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import Counter, defaultdict
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field, replace

from gateway.sql.errors import NodeUnavailable, TableUnavailable, UndefinedTable
from storage import NodeClient, NodeError, ScanRequest, TableSchema

log = logging.getLogger("cxg.catalog")
MAX_AGE_S = 1.0  # a catalog older than this reads the nodes again before a query is planned
READ_TIMEOUT_S = 1.0  # a node that does not list its tables within this is slow ...
SLOW_GRACE_S = 5.0  # ... and what it listed last serves until it has been silent this long (a node
# not listed yet has nothing to serve meanwhile: its first listing is waited for this long)
RACED_READS = 3  # readings in a row, where a version listed was released before it was described
_NEVER = float("-inf")  # when a catalog not read yet was read: older than any max_age, whatever the uptime
_RELEASER = ThreadPoolExecutor(1, thread_name_prefix="catalog-release")
_READERS = ThreadPoolExecutor(16, thread_name_prefix="catalog-read")


@dataclass
class TableInfo:
    schema: TableSchema
    nodes: list[str] = field(default_factory=list)  # names of the nodes holding it (this version)
    rows: int = 0
    version: int | None = None  # the version queries read (None: each node's current one)
    missing: str = ""  # why no version is complete ("" when the table is fully served)
    buckets: dict[str, tuple[int, ...]] | None = None  # replicated buckets: the ones each node reads
    load: str = ""  # the load that committed the version
    data: str = ""  # the rows' identity: kept by a copy to another region and by bucket moves

    @property
    def stamp(self) -> str | None:
        """The version as regions compare it: the identity of its rows, which a copy made from it
        (`cxg redistribute --to`) and the table after its buckets moved keep, whatever number
        each region gives it."""
        return None if self.version is None else self.data or f"{self.version}:{self.load}"

    @property
    def replicated(self) -> bool:
        return self.schema.placement.kind == "replicated"

    @property
    def available(self) -> bool:
        return not self.missing

    def where(self) -> str:
        if self.replicated:
            return f"any of {', '.join(self.nodes)} (replicated)"
        return f"{', '.join(self.nodes)} ({self.schema.placement})"


@dataclass
class _Held:
    """What one node said it keeps of one table version."""

    node: str
    rows: int | None  # None until read (a kept, not current, version)
    load: str = ""  # the load that committed it, when the node said (its current version)
    data: str = ""  # the identity of its rows, likewise


class RegionCatalog:
    """The tables of a region's nodes (name -> base URL), read from their HTTP API."""

    def __init__(self, nodes: dict[str, str], max_age: float = MAX_AGE_S, releases: bool = True):
        self.max_age = max_age
        self.releases = releases  # tell the nodes which versions no query reads (the gateway's catalog)
        self._lock = threading.Lock()
        self._refreshing = threading.Lock()
        self._pins: Counter[tuple[str, int]] = Counter()
        self._schemas: dict[tuple[str, int], TableSchema] = {}  # versions are immutable: read once
        self._counts: dict[tuple[str, int, str], int] = {}  # rows of a kept version on a node
        self._held: dict[tuple[str, int], list[_Held]] = {}  # (table, version) -> nodes keeping it
        self._tables: dict[str, TableInfo] = {}
        self._read_at = _NEVER  # when the last reading of the nodes ended (time.monotonic())
        self._read_from = _NEVER  # ... and when it began
        self._frozen = False
        self.set_nodes(nodes)

    def set_nodes(self, nodes: dict[str, str]) -> None:
        """The region's nodes changed (joined, left): read them again before the next query. What
        was read is kept until then, so a table whose nodes all left is unavailable, not undefined."""
        with self._lock:
            self.nodes = dict(nodes)
            self.clients = {name: NodeClient(url, timeout=READ_TIMEOUT_S) for name, url in self.nodes.items()}
            self._listed: dict[str, tuple[float, list[dict]]] = {}  # each node's last listing, and when
            self._read_at = self._read_from = _NEVER

    # ---- reading the nodes --------------------------------------------------------------------------

    def refresh(self) -> None:
        """Read every node's tables and versions (all at once, each within `READ_TIMEOUT_S`: a hung
        node holds no query up; its first listing within `SLOW_GRACE_S`); choose each table's
        served version."""
        with self._refreshing:
            self._read()
        self._release_unpinned()

    def _read(self) -> None:
        """`_refresh`, again where a table's only version listed was released before it could be
        described (appends committing one version after another): the next listing has the new one."""
        for _ in range(RACED_READS):
            if not self._refresh():
                return

    def _refresh(self) -> bool:
        """Whether a table went unserved because its version listed was released meanwhile."""
        began = time.monotonic()
        clients = dict(self.clients)
        held: dict[tuple[str, int], list[_Held]] = defaultdict(list)

        listed = self._listed

        def listing(node: str) -> list[dict] | None:
            client = clients[node] if node in listed else NodeClient(clients[node].base_url, timeout=SLOW_GRACE_S)
            try:
                rows = client.get("/v1/tables")["tables"]
            except NodeError as e:  # down, or silent past the grace: it serves nothing until it answers
                last = listed.get(node)
                if e.timed_out and last is not None and time.monotonic() - last[0] <= SLOW_GRACE_S:
                    log.info("catalog: node %s is slow to list its tables; its last listing serves", node)
                    return last[1]
                log.warning("catalog: node %s did not answer (%s)", node, e)
                return None
            listed[node] = (time.monotonic(), rows)
            return rows

        answered = set()
        for node, rows in zip(clients, _READERS.map(listing, clients), strict=True):
            if rows is not None:
                answered.add(node)
            for row in rows or []:
                for version in row.get("versions") or [row["version"]]:
                    current = version == row["version"]
                    said = (row.get("load", ""), row.get("data", "")) if current else ("", "")
                    held[(row["name"], version)].append(_Held(node, row["rows"] if current else None, *said))
        released: set[str] = set()
        for (name, version), holders in list(held.items()):
            try:
                if (name, version) not in self._schemas:
                    self._schemas[(name, version)] = self._describe(name, version, holders, clients)
            except NodeError as e:  # released or gone meanwhile: not served
                log.info("catalog: %s version %s is not readable (%s)", name, version, e)
                del held[(name, version)]
                released.add(name)
                continue
            for h in holders:
                if h.rows is None:  # a kept version's rows, read once (0 for now if it cannot be)
                    key = (name, version, h.node)
                    if key not in self._counts:
                        rows = self._rows(name, version, h.node, clients)
                        if rows is not None:
                            self._counts[key] = rows
                    h.rows = self._counts.get(key, 0)
        tables = _choose(held, self._schemas)
        for name, old in self._tables.items():  # a table whose nodes are all down or gone is not "undefined"
            silent = sorted(set(old.nodes) - answered)
            if name not in tables and silent:
                tables[name] = replace(old, missing=f"its node(s) {', '.join(silent)} are not answering", buckets=None)
        with self._lock:
            if clients.keys() == self.clients.keys():
                self._tables, self._held = tables, dict(held)
                self._read_at, self._read_from = time.monotonic(), began
            for key in [k for k in self._schemas if k not in held]:
                del self._schemas[key]
            for key in [k for k in self._counts if k[:2] not in held]:
                del self._counts[key]
        return bool(released - tables.keys())

    def _describe(self, name: str, version: int, holders: list[_Held], clients) -> TableSchema:
        return TableSchema.from_json(_once(clients[holders[0].node]).get(f"/v1/tables/{name}?version={version}"))

    def _rows(self, name: str, version: int, node: str, clients) -> int | None:
        try:
            return _once(clients[node]).get(f"/v1/tables/{name}?version={version}")["rows"]
        except NodeError:
            return None

    def refresh_since(self, moment: float) -> bool:
        """Read the nodes now unless a reading that began after `moment` (time.monotonic) is done:
        a query naming a table not seen yet, created a moment ago? Whether it read them."""
        if self._frozen or self._read_from >= moment:
            return False
        self.refresh()
        return True

    def _fresh(self) -> None:
        """Read the nodes if the catalog is older than `max_age`; while another thread reads them,
        what was read last serves (a query waits only for the first reading)."""
        if self._frozen or time.monotonic() - self._read_at <= self.max_age:
            return
        if self._refreshing.acquire(blocking=self._read_at == _NEVER):
            try:
                self._read()
            finally:
                self._refreshing.release()
            self._release_unpinned()

    # ---- what queries see -----------------------------------------------------------------------

    def table(self, name: str) -> TableInfo:
        """A table as queries read it; UndefinedTable, or TableUnavailable when not fully served."""
        self._fresh()
        info = self._tables.get(name)
        if info is None:
            raise UndefinedTable(f"table {name!r} does not exist")
        if info.missing:
            raise TableUnavailable(f"table {name!r} is not fully served: {info.missing}; retry shortly")
        return info

    def tables(self) -> dict[str, TableInfo]:
        self._fresh()
        return dict(self._tables)

    def sql_schema(self) -> dict[str, dict[str, str]]:
        """table -> column -> SQL type, for qualifying queries."""
        return {name: dict(info.schema.sql_columns) for name, info in self.tables().items()}

    def url(self, node: str) -> str:
        """A node's URL; NodeUnavailable (retried) when it left the region after the tables were read."""
        try:
            return self.nodes[node]
        except KeyError:
            raise NodeUnavailable(f"node {node} left the region; retry shortly") from None

    def routes(self, info: TableInfo, request: ScanRequest) -> list[tuple[str, ScanRequest]]:
        """Where a scan of the table goes (one node of a replicated table, every owner of a
        hash-placed one), each request reading the version this catalog serves. The nodes are this
        catalog's: a query's plan names every node holding a replicated table, the catalog it runs
        on only those whose slots it holds (`restricted`)."""
        info = self._tables.get(info.schema.name, info)
        urls = [self.url(n) for n in info.nodes]
        if info.replicated:
            urls = urls[:1]
        if info.version is not None:
            request = replace(request, version=info.version)
        if info.buckets is None:
            return [(url, request) for url in urls]
        wanted = set(request.buckets) if request.buckets is not None else None
        return [
            (self.url(node), replace(request, buckets=tuple(b for b in buckets if wanted is None or b in wanted)))
            for node, buckets in info.buckets.items()
        ]

    def restricted(self, granted: list[str]) -> RegionCatalog:
        """The same catalog with replicated tables read only from the `granted` nodes (those
        whose slots a query holds); hash-placed tables keep all their owners."""
        tables = {}
        for name, info in self.tables().items():
            nodes = [n for n in info.nodes if n in granted] if info.replicated else info.nodes
            tables[name] = replace(info, nodes=nodes or info.nodes)
        return RegionCatalog.known(self.nodes, tables)

    @classmethod
    def known(cls, nodes: dict[str, str], tables: dict[str, TableInfo]) -> RegionCatalog:
        """A catalog of `tables` on `nodes` that never asks the nodes what they hold (a query's
        snapshot; planning without a region, as tests do)."""
        catalog = cls(nodes)
        catalog._tables = dict(tables)
        catalog._frozen = True
        return catalog

    # ---- snapshots and their pins ---------------------------------------------------------------

    def snapshot(self) -> Snapshot:
        """The catalog as one query reads it, from planning to its last scan: the versions it
        serves now, pinned (kept on the nodes) until the snapshot is closed."""
        self._fresh()
        with self._lock:  # what is served and its pins together: a version pinned is never released
            tables = dict(self._tables)
            pins = [(name, info.version) for name, info in tables.items() if info.version is not None]
            self._pins.update(pins)
        return Snapshot(self.nodes, tables, self, pins)

    def unpin(self, pins: list[tuple[str, int]]) -> None:
        with self._lock:
            self._pins.subtract(pins)
            self._pins += Counter()  # drop the zeros
        self._release_unpinned()

    def _release_unpinned(self) -> None:
        """Tell the nodes to stop keeping versions older than the one served that no query reads."""
        if not self.releases:
            return
        with self._lock:
            served = {name: info.version for name, info in self._tables.items() if info.available and info.version}
            releases = [
                (name, version, [h.node for h in holders])
                for (name, version), holders in self._held.items()
                if name in served and version < served[name] and not self._pins[(name, version)]
            ]
            for name, version, _ in releases:
                self._held.pop((name, version), None)
            clients = dict(self.clients)
        if releases:  # not on the caller's thread: a query's end may be on the event loop
            _RELEASER.submit(self._send_releases, releases, clients)

    @staticmethod
    def _send_releases(releases: list[tuple[str, int, list[str]]], clients: dict[str, NodeClient]) -> None:
        for name, version, nodes in releases:
            for node in nodes:
                client = clients.get(node)
                if client is None:
                    continue
                try:
                    client.delete(f"/v1/tables/{name}/versions/{version}")
                except NodeError as e:  # kept a while longer: the node forgets it by itself (RETAIN_S)
                    log.info("catalog: could not release %s version %s on %s (%s)", name, version, node, e)


class Snapshot(RegionCatalog):
    """One query's catalog: fixed versions, pinned until `close()`."""

    def __init__(
        self, nodes: dict[str, str], tables: dict[str, TableInfo], origin: RegionCatalog, pins: list[tuple[str, int]]
    ):
        super().__init__(nodes)
        self._tables = dict(tables)
        self._frozen = True
        self._origin: RegionCatalog | None = origin
        self._pinned = pins

    def close(self) -> None:
        """The query is over: its versions may be released (idempotent)."""
        origin, self._origin = self._origin, None
        if origin is not None:
            origin.unpin(self._pinned)


def _once(client: NodeClient) -> NodeClient:
    """`client` given the grace (`SLOW_GRACE_S`) for what is read once per version (its schema, its
    rows), which a node busy a moment answers late: not served meanwhile, the table would seem gone."""
    return NodeClient(client.base_url, timeout=max(READ_TIMEOUT_S, SLOW_GRACE_S))


def _choose(held: dict[tuple[str, int], list[_Held]], schemas: dict[tuple[str, int], TableSchema]) -> dict:
    """Per table, the newest complete version, or an unavailable entry saying what is missing."""
    versions: dict[str, list[int]] = defaultdict(list)
    for name, version in held:
        versions[name].append(version)
    tables: dict[str, TableInfo] = {}
    for name, numbers in versions.items():
        reasons = []
        for version in sorted(numbers, reverse=True):
            schema = schemas[(name, version)]
            holders = held[(name, version)]
            nodes = sorted({h.node for h in holders})
            missing, buckets = _coverage(schema, nodes)
            if len({h.load for h in holders if h.load}) > 1:  # two loads at once, each committed on some nodes
                missing = "its nodes hold versions of different loads under one number"
            if not missing:
                placement = schema.placement
                if placement.owners:  # a node left holding none of its buckets (moved away) reads nothing
                    holders = [h for h in holders if h.node in placement.owners]
                    nodes = [n for n in nodes if n in placement.owners]
                rows = holders[0].rows if placement.kind == "replicated" else sum(h.rows for h in holders)
                rows //= placement.replicas  # each bucket is held that many times
                load = next((h.load for h in holders if h.load), "")
                data = next((h.data for h in holders if h.data), "")
                tables[name] = TableInfo(schema, sorted(buckets or nodes), rows, version, "", buckets, load, data)
                break
            reasons.append(f"version {version} lacks {missing}")
        else:
            newest = max(numbers)
            schema = schemas[(name, newest)]
            tables[name] = TableInfo(schema, sorted({h.node for h in held[(name, newest)]}), 0, newest, reasons[0])
    return tables


def _coverage(schema: TableSchema, nodes: list[str]) -> tuple[str, dict[str, tuple[int, ...]] | None]:
    """What keeps a version held by `nodes` from being complete ("" if nothing) and, for buckets
    held by several nodes, which buckets each node reads (the first of its holders that is up)."""
    placement = schema.placement
    if placement.kind == "replicated" or not placement.owners:
        return ("" if nodes else "every node"), None
    reads: dict[str, list[int]] = defaultdict(list)
    lost: list[int] = []
    for bucket in range(placement.buckets):
        up = [n for n in placement.holders(bucket) if n in nodes]
        if up:
            reads[up[0]].append(bucket)
        else:
            lost.append(bucket)
    if lost:
        down = sorted({n for b in lost for n in placement.holders(b)})
        return f"bucket(s) {_ranges(lost)} of {placement.buckets}, on node(s) {', '.join(down)}", None
    return "", ({node: tuple(b) for node, b in sorted(reads.items())} if placement.replicas > 1 else None)


def _ranges(numbers: list[int]) -> str:
    shown = ", ".join(map(str, numbers[:8]))
    return shown + (f" and {len(numbers) - 8} more" if len(numbers) > 8 else "")
