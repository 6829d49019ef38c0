"""Standing queries kept up to date as rows are appended (`gateway.sql.standing` plans them).

The state of a standing query is kept by the nodes holding its table (`storage.standing`): each
keeps the partial aggregates of the rows of each bucket it answers for, one row per bucket and
group. Registering gathers them (each node computing its buckets' from their blocks) into this
gateway's copy of the whole state, one row per group, which `GET` reads. Each append through this
gateway then computes the partial aggregates of its own rows by bucket (DataFusion over them),
folds them into its copy and pushes the changed result rows to whoever listens, tagged with the
version they cover; and each node holding the table folds the same partial rows into its states.

A version that moved buckets between nodes (`cxg redistribute`) keeps the rows' identity (the
table's stamp): the copy stands and the next append folds into it; a node a bucket moved to
computes that bucket's state from its blocks. A version with other rows that the subscription did
not see appended (a load, another gateway's append) is consolidated: the state gathered again, each
node computing only the buckets whose blocks changed. Registration and the appends to one table
take the table's lock (`gateway.appends.table_lock`), so each append is folded in exactly once, in
version order.

With an event-time column, each update also carries the *progress indicator* (seed 002): the
latest event time folded in. Rows of an append older than it are late: they go to a partition of
their own (its partial aggregates), are not in the result yet, and are consolidated into it at the
subscription's next consolidation time (every `consolidate_every` seconds), never dropped; the
result then equals the query over every row.

With `gateway.subscriptions_file`, the registrations are kept in that file: after a restart a
subscription is gathered again from the nodes when first asked for (or appended to), under its id
(the nodes still keep their states: nothing is computed from the blocks), and its streams can be
listened to again. Without it subscriptions live in the gateway's memory: after a restart their ids
answer 404 ``subscription_not_found`` saying so, and a client registers again.
"""

from __future__ import annotations

import asyncio
import functools
import itertools
import json
import logging
import os
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from gateway import results
from gateway.errors import ApiError
from gateway.sql.catalog import TableInfo
from gateway.sql.decompose import PARTIALS
from gateway.sql.engine import Engine
from gateway.sql.errors import ForbiddenTable, InvalidQuery, NodeUnavailable, UndefinedColumn
from gateway.sql.standing import StandingPlan, plan_standing
from storage import NodeClient, NodeError, TableSchema
from storage.join_engine import run_sql
from storage.standing import (
    BUCKET,
    FOLD_PATH,
    FORGET_PATH,
    GATHER_PATH,
    Registration,
    from_base64,
    to_base64,
    with_buckets,
)

log = logging.getLogger("cxg.gateway")
Listener = Callable[[dict[str, Any]], None]  # called with each update, from the appending thread
_FOLDING = ThreadPoolExecutor(os.cpu_count() or 1, thread_name_prefix="fold")
GATHERS = 5  # times a state is gathered while the nodes' versions move, before answering 503
_NODES = ThreadPoolExecutor(16, thread_name_prefix="standing-node")  # requests to the nodes, side by side


@dataclass(eq=False)
class Subscription:
    id: str
    sql: str
    plan: StandingPlan
    owner: str  # the token's name ("" without tokens)
    may_read: tuple[str, ...] = ()  # the tables the owner may read (empty: all)
    event_time: str | None = None  # the column of the rows' event time (None: no late rows)
    consolidate_every: float = 60.0  # seconds between consolidations of the late rows
    version: int = 0  # of its table, covered by the state
    stamp: str | None = None  # the identity of that version's rows (a bucket move keeps it)
    state: pa.Table | None = None  # partial aggregates, one row per group
    progress: Any = None  # the latest event time folded in (the progress indicator)
    late: pa.Table | None = None  # the late rows' partial aggregates, not folded in yet
    late_rows: int = 0
    due: float = 0.0  # time.monotonic() of the next consolidation
    result: pa.Table | None = None  # the query's rows over the state
    updates: int = 0
    consolidations: int = 0
    failed: str | None = None  # why the last append could not be folded in (None: it was)
    created: float = field(default_factory=time.time)
    listeners: list[Listener] = field(default_factory=list)
    dimensions: dict[str, pa.Table] = field(default_factory=dict)  # the rows of the tables it joins
    dimension_stamps: dict[str, str | None] = field(default_factory=dict)  # the rows' identity of each
    _compacted: int = 0  # rows of the state when it was last compacted
    _shown: dict[tuple, tuple] = field(default_factory=dict)  # the result's rows (JSON values), by `_slot`
    _keys: pa.Schema = field(default_factory=lambda: pa.schema([]))  # the result's key columns
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    @functools.cached_property
    def _at(self) -> list[int]:
        """The positions of the result's key columns."""
        return [self.plan.columns.index(k) for k in self.plan.keys]

    def start(self, partials: pa.Table, version: int, progress: Any) -> None:
        """The state from the partial rows of the whole table at `version` (`progress`: its latest event time)."""
        with self._lock:
            self.state, self.version, self.progress = self._folded(None, partials), version, progress
            self._refresh()
            self.due = time.monotonic() + self.consolidate_every

    def fold(self, rows: pa.Table, version: int, stamp: str | None) -> tuple[dict[str, Any] | None, pa.Table]:
        """The rows of the append that made `version` (whose rows' identity is `stamp`; each with
        its bucket) folded in, its late rows set apart: the update to push (None: no row changed),
        and the partial rows of every row of it by bucket, which the nodes fold into their states."""
        late = None
        if self.event_time is not None and self.progress is not None:
            times = rows.column(self.event_time)
            behind = pc.fill_null(pc.less(times, pa.scalar(self.progress, times.type)), False)
            late, rows = rows.filter(behind), rows.filter(pc.invert(behind))
            late = late if late.num_rows else None
        by_bucket = self._partials(rows)
        late_by_bucket = self._partials(late) if late is not None else None
        for_nodes = by_bucket if late_by_bucket is None else _joined([by_bucket, late_by_bucket])
        with self._lock:
            assert self.state is not None
            partials = by_bucket.drop_columns([BUCKET]).cast(self.state.schema)
            self._grow(partials)
            if late_by_bucket is not None:
                late_partials = late_by_bucket.drop_columns([BUCKET])
                self.late, self.late_rows = self._folded(self.late, late_partials), self.late_rows + late.num_rows
            if self.event_time is not None and rows.num_rows:
                latest = pc.max(rows.column(self.event_time)).as_py()
                self.progress = latest if self.progress is None or latest is None else max(self.progress, latest)
            self.version, self.stamp = version, stamp
            self.updates += 1
            touched = self._touched(partials) if self.plan.touched_only else None
            if touched is None:
                return self._changes(*self._refresh(), told=late is not None), for_nodes
            # only the touched groups' rows can change: the result statement over the state rows of
            # groups whose every key is one of theirs (those groups and maybe a few more, unchanged)
            near = [pc.is_in(self.state[g], touched[g]) for g in self.plan.groups]
            now = _tuples(self._result(self.state.filter(functools.reduce(pc.and_, near)) if near else self.state))
            keys = {self._slot(row) for row in now} | set(
                _tuples(touched.rename_columns(self._keys.names).cast(self._keys))
            )
            before = [self._shown.pop(key) for key in keys if key in self._shown]
            self._shown.update((self._slot(row), row) for row in now)
            self.result = None  # the whole result is computed again when asked for
            return self._changes(before, now, told=late is not None), for_nodes

    def _partials(self, rows: pa.Table) -> pa.Table:
        """The partial aggregates of an append's rows by bucket (joined to the dimensions as they are)."""
        return run_sql({self.plan.table: rows, **self.dimensions}, self.plan.partial).table

    def registration(self) -> Registration:
        """How the nodes compute its state."""
        plan = self.plan
        return Registration(plan.table, plan.partial, plan.node_compact, plan.dimensions)

    def consolidate(self) -> dict[str, Any] | None:
        """The late rows folded in (their consolidation time has come); the update (None: none changed)."""
        with self._lock:
            self.due = time.monotonic() + self.consolidate_every
            if self.late is None:
                return None
            self.state, self.late, self.late_rows = self._folded(self.state, self.late), None, 0
            self.consolidations += 1
            return self._changes(*self._refresh(), consolidated=True)

    def recomputed(self, partials: pa.Table, version: int, progress: Any) -> dict[str, Any] | None:
        """The state computed again over the whole table at `version` (late rows included); the update."""
        with self._lock:
            self.state, self.late, self.late_rows = self._folded(None, partials), None, 0
            self.version, self.progress = version, progress
            self.consolidations += 1
            return self._changes(*self._refresh(), consolidated=True)

    def _folded(self, state: pa.Table | None, partials: pa.Table) -> pa.Table:
        """`partials` compacted into `state` (one row per group), in `state`'s types."""
        if state is not None:
            partials = pa.concat_tables([state, partials.cast(state.schema)])
        return run_sql({PARTIALS: partials}, self.plan.compact).table.cast(partials.schema)

    def _grow(self, partials: pa.Table) -> None:
        """An append's partial rows (in the state's types) added to the state, compacted once it
        has grown to twice its compacted rows (the result statement aggregates partial rows again)."""
        assert self.state is not None
        grown = pa.concat_tables([self.state, partials])
        if grown.num_rows > 2 * self._compacted + 1024:
            grown = self._folded(None, grown)
            self._compacted = grown.num_rows
        self.state = grown

    def _result(self, state: pa.Table) -> pa.Table:
        """The query's rows over partial rows `state`."""
        rows = run_sql({PARTIALS: state}, self.plan.result).table
        return rows.rename_columns(list(self.plan.columns))

    def _refresh(self) -> tuple[list[tuple], list[tuple]]:
        """The whole result computed again over the state: the rows shown before and now."""
        assert self.state is not None
        before = list(self._shown.values())
        self.result = self._result(self.state)
        self._keys = pa.schema([self.result.schema.field(k) for k in self.plan.keys])
        now = _tuples(self.result)
        self._shown = {self._slot(row): row for row in now}
        return before, now

    def _slot(self, row: tuple) -> tuple:
        """What identifies a result row among the shown: its keys when each names one group, else all of it."""
        return tuple(row[i] for i in self._at) if self.plan.touched_only else row

    def _touched(self, partials: pa.Table) -> pa.Table | None:
        """The groups the partial rows of an append touch (one row each), by their group columns
        (None when a key is NULL: NULL matches no key, so every row is compared)."""
        groups = partials.select(list(self.plan.groups))
        return None if any(column.null_count for column in groups.columns) else groups

    def _changes(
        self, before: list[tuple], now: list[tuple], consolidated: bool = False, told: bool = False
    ) -> dict[str, Any] | None:
        """The rows `now` that were not `before`, and the groups gone (HAVING no longer holds); None
        when nothing changed and nothing is to be `told` (late rows set apart)."""
        seen = set(before)
        changed = [list(r) for r in now if r not in seen]
        gone = {tuple(r[i] for i in self._at) for r in before} - {tuple(r[i] for i in self._at) for r in now}
        removed = [dict(zip(self.plan.keys, key, strict=True)) for key in sorted(gone, key=str)]
        if not changed and not removed and not told:
            return None
        return {
            "subscription": self.id,
            "table": self.plan.table,
            "version": self.version,
            **self._indicator(),
            "consolidated": consolidated,
            "changed": changed,
            "removed": removed,
        }

    def _indicator(self) -> dict[str, Any]:
        """The progress indicator and the late rows waiting for consolidation (with an event time)."""
        if self.event_time is None:
            return {}
        return {"progress": results.json_value(self.progress), "late_rows": self.late_rows}

    def document(self) -> dict[str, Any]:
        """The subscription and its current result."""
        with self._lock:
            if self.result is None and self.state is not None:
                self.result = self._result(self.state)
            table = self.result
            return {
                "id": self.id,
                "sql": self.sql,
                "table": self.plan.table,
                "version": self.version,
                **self._indicator(),
                "event_time": self.event_time,
                "consolidate_every": self.consolidate_every,
                "updates": self.updates,
                "consolidations": self.consolidations,
                "failed": self.failed,
                "columns": results.columns(table.schema) if table is not None else [],
                "keys": list(self.plan.keys),
                "rows": results.json_rows(table) if table is not None else [],
            }


class Subscriptions:
    """The gateway's standing queries, by id, and the thread that consolidates their late rows;
    `kept`: the file their registrations are kept in across restarts (None: none)."""

    def __init__(self, engine: Engine, table_lock: Callable[[str], threading.RLock], kept: str | None = None):
        self.engine = engine
        self.table_lock = table_lock
        # how the state of a standing query over a table is computed (from a thread): as a query of
        # the region once it serves (`Executor.serving`)
        self.admit: Callable[[str, Callable[[], Any]], Any] = lambda table, work: work()
        self._all: dict[str, Subscription] = {}
        self._kept = Path(kept) if kept else None
        self._restoring = _registrations(self._kept)  # kept ones not computed again yet, by id
        self._lock = threading.Lock()
        self._changed = threading.Event()  # a subscription came or went: the next due time changed
        self._stopped = False
        self._consolidator: threading.Thread | None = None

    def register(
        self,
        sql: str,
        owner: str,
        may_read: tuple[str, ...] = (),
        event_time: str | None = None,
        consolidate_every: float = 60.0,
        key: str | None = None,
    ) -> Subscription:
        """Plan `sql` and compute its state over the whole table (blocks: a thread's work); `may_read`:
        the tables the owner may read (empty: all); `event_time`: the column whose late rows wait
        for the consolidation every `consolidate_every` seconds; `key`: its id (a kept one's)."""
        catalog = self.engine.catalog
        replicated = {name for name, info in catalog.tables().items() if info.replicated}
        plan = plan_standing(sql, catalog.sql_schema(), replicated)
        if may_read and plan.table not in may_read:
            raise ForbiddenTable(f"this token may not read table {plan.table!r}")
        if event_time is not None:
            _check_event_time(self.engine.catalog.table(plan.table).schema, event_time)
        key = key or uuid.uuid4().hex[:16]
        subscription = Subscription(key, sql, plan, owner, may_read, event_time, consolidate_every)
        with self.table_lock(plan.table):  # no append between its state and its being listed
            with self._lock:
                restored = self._all.get(key)
            if restored is not None:  # a kept one, computed again meanwhile
                return restored
            self._start(subscription)
            with self._lock:
                self._all[subscription.id] = subscription
                self._restoring.pop(key, None)
                self._keep()
        self._consolidating()
        return subscription

    def _restore(self, keys: list[str]) -> dict[str, Exception]:
        """The kept subscriptions `keys` computed again and listed; why each that could not be was not."""
        failed = {}
        for key in keys:
            with self._lock:
                kept = self._restoring.get(key)
            if kept is None:
                continue
            try:
                self.register(
                    kept["sql"],
                    kept["owner"],
                    tuple(kept["may_read"]),
                    kept["event_time"],
                    kept["consolidate_every"],
                    key,
                )
            except Exception as e:  # its table is not served yet (or no longer is), a node is down
                failed[key] = e
        return failed

    def _keep(self) -> None:
        """Write the registrations to the kept file, whole (a new file moved over the old one); the lock held."""
        if self._kept is None:
            return
        kept = dict(self._restoring)
        kept.update(
            (
                s.id,
                {
                    "sql": s.sql,
                    "table": s.plan.table,
                    "owner": s.owner,
                    "may_read": list(s.may_read),
                    "event_time": s.event_time,
                    "consolidate_every": s.consolidate_every,
                },
            )
            for s in self._all.values()
        )
        written = self._kept.with_name(self._kept.name + ".new")
        try:
            written.write_text(json.dumps({"subscriptions": kept}, indent=1))
            os.replace(written, self._kept)
        except OSError as e:  # served from memory still; the file keeps what it had
            log.warning("standing queries not kept in %s: %s", self._kept, e)

    def _start(self, subscription: Subscription) -> dict[str, Any] | None:
        """The state over the whole table as served now, gathered from the nodes (each computing its
        buckets' where it does not keep them); its table's lock is held meanwhile (no append of it
        is folded in while this reads)."""
        catalog = self.engine.catalog
        plan = subscription.plan
        with self.table_lock(plan.table):
            for attempt in itertools.count(1):  # again if a version was made elsewhere meanwhile
                info = catalog.table(plan.table)
                stamps = {t: catalog.table(t).stamp for t in (plan.table, *plan.dimensions)}
                work = functools.partial(self._gather, info, subscription)
                partials, versions, progress, dimensions = self.admit(plan.table, work)
                if stamps == {t: catalog.table(t).stamp for t in stamps} and versions <= {info.version or 0}:
                    break
                if attempt == GATHERS:
                    seen = ", ".join(map(str, sorted(versions)))
                    raise NodeUnavailable(f"the nodes of {plan.table} hold versions {seen}, not one: retry shortly")
                catalog.refresh()  # a node has a version the catalog has not read yet
            subscription.dimensions, subscription.stamp = dimensions, stamps[plan.table]
            subscription.dimension_stamps = {d: stamps[d] for d in plan.dimensions}
            if subscription.state is None:
                subscription.start(partials, info.version or 0, progress)
                return None
            return subscription.recomputed(partials, info.version or 0, progress)

    def _gather(self, info: TableInfo, subscription: Subscription) -> tuple:
        """`subscription`'s state from the nodes holding table `info`, each over the buckets it
        answers for: the partial rows and the versions the nodes hold; then its table's latest event
        time and the rows of the tables it joins (this gateway computes appends' partial rows with them)."""
        readers, key, registration = _readers(info), subscription.id, subscription.registration()

        def gathered(node: str) -> dict[str, Any]:
            body = {"subscriptions": {key: registration.to_json()}, "buckets": readers[node]}
            return self._ask(node, GATHER_PATH, body)[key]

        answers = list(_NODES.map(gathered, readers))
        partials = _joined([from_base64(a["rows"]) for a in answers])
        progress = None
        if subscription.event_time is not None:
            latest = f'SELECT max("{subscription.event_time}") FROM "{info.schema.name}"'
            progress = self.engine.execute(latest).table.column(0)[0].as_py()
        dimensions = {d: self.engine.execute(f'SELECT * FROM "{d}"').table for d in registration.dimensions}
        return partials, {a["version"] for a in answers}, progress, dimensions

    def _ask(self, node: str, path: str, body: dict[str, Any]) -> dict[str, Any]:
        """A node's answer about standing queries, by subscription id (NodeUnavailable when it fails)."""
        try:
            return NodeClient(self.engine.catalog.url(node)).post(path, body)["subscriptions"]
        except NodeError as e:
            raise NodeUnavailable(f"standing queries on node {node}: {e}") from None

    def appended(self, table: str, version: int, rows: pa.Table, base: TableInfo) -> None:
        """An append through this gateway committed `version` of `table` with `rows`, appended to
        version `base` (the table's lock held): each subscription over it folds them in, and the
        nodes holding the table fold their partial rows by bucket into their states; one that covers
        other rows (a load, another gateway's append: not a bucket move, which keeps the identity)
        or joins `table` as a dimension is gathered again; the listeners hear what changed."""
        catalog = self.engine.catalog
        with self._lock:
            kept = [key for key, r in self._restoring.items() if r["table"] == table]
        self._restore(kept)  # computed at this version: nothing to fold in
        with self._lock:
            over = [s for s in self._all.values() if table == s.plan.table or table in s.plan.dimensions]
        info = catalog.table(table)
        rows = with_buckets(rows, info.schema)
        for_nodes: dict[str, pa.Table] = {}

        def fold(subscription: Subscription) -> bool:
            """Fold the rows in; False when the state must be gathered again instead."""
            with _failing(subscription):
                return folded(subscription)
            return True  # failed: gathered again at the next append

        def folded(subscription: Subscription) -> bool:
            plan = subscription.plan
            seen = {d: catalog.table(d).stamp for d in plan.dimensions} == subscription.dimension_stamps
            if seen and subscription.stamp == info.stamp:
                return True  # gathered since: it covers this version already
            folds = seen and table == plan.table and subscription.stamp == base.stamp
            if folds:
                update, for_nodes[subscription.id] = subscription.fold(rows, version, info.stamp)
                _tell(subscription, update)
            return folds

        # DataFusion leaves the GIL: the subscriptions fold side by side; those that cover other rows
        # or join a changed dimension are gathered again here, where the table's lock is held
        done = list(_FOLDING.map(fold, over))
        if for_nodes:
            self._fold_on_nodes(info, version, base.version or 0, for_nodes)
        for subscription, folds in zip(over, done, strict=True):
            if not folds:
                with _failing(subscription):
                    _tell(subscription, self._start(subscription))

    def _fold_on_nodes(self, info: TableInfo, version: int, base: int, partials: dict[str, pa.Table]) -> None:
        """The nodes holding `info`'s table fold the partial rows by bucket of the append that made
        `version` on `base` into the states of the subscriptions they are of (id -> rows). A node
        that cannot be told brings its states to the table's version from the blocks when next asked."""
        encoded = {key: to_base64(rows) for key, rows in partials.items()}
        readers = _readers(info)
        with self._lock:
            registrations = {key: self._all[key].registration() for key in partials if key in self._all}

        def told(node: str) -> None:
            body = {"table": info.schema.name, "version": version, "base": base, "partials": encoded}
            try:
                answers = self._ask(node, FOLD_PATH, {**body, "buckets": readers[node]})
                lost = [key for key, answer in answers.items() if answer == "unknown" and key in registrations]
                unknown = {key: registrations[key].to_json() for key in lost}
                if unknown:  # the node lost its states (restarted): it computes them again from its blocks
                    self._ask(node, GATHER_PATH, {"subscriptions": unknown, "buckets": readers[node]})
            except Exception as e:  # the append stays committed: the node's states catch up when next asked
                log.warning("standing queries' states on node %s not folded into: %s", node, e)

        list(_NODES.map(told, readers))

    def _consolidating(self) -> None:
        """Start the consolidating thread (once), or wake it: the next due time may have changed."""
        with self._lock:
            if self._consolidator is None and not self._stopped:
                self._consolidator = threading.Thread(target=self._consolidate, daemon=True, name="consolidate")
                self._consolidator.start()
        self._changed.set()

    def _consolidate(self) -> None:
        """Thread: each subscription's late rows folded in at its consolidation time."""
        while not self._stopped:
            with self._lock:
                listed = list(self._all.values())
            now = time.monotonic()
            for subscription in listed:
                if subscription.due <= now:
                    with _failing(subscription):
                        _tell(subscription, subscription.consolidate())
            wait = min((s.due for s in listed), default=now + 3600) - time.monotonic()
            self._changed.wait(max(0.0, wait))
            self._changed.clear()

    def close(self) -> None:
        """The gateway stops: the consolidating thread ends, and so does every stream of changes."""
        self._stopped = True
        self._changed.set()
        with self._lock:
            listed = list(self._all.values())
        for subscription in listed:
            _tell(subscription, {"subscription": subscription.id, "ended": True, "why": "the gateway stops"})

    def get(self, key: str, owner: str | None) -> Subscription:
        """Subscription `key` (`owner` None: anyone's), a kept one computed again first; 404 when
        there is none or it is another token's, 503 when a kept one's table is not served yet."""
        with self._lock:
            kept = self._restoring.get(key)
        if kept is not None and (owner is None or kept["owner"] == owner):
            failed = self._restore([key]).get(key)
            if failed is not None:
                message = f"subscription {key!r} is kept but cannot be computed again yet ({failed}): retry"
                raise ApiError(503, "subscription_restoring", message, "57P03", retry_after=1)
        with self._lock:
            subscription = self._all.get(key)
        if subscription is None or (owner is not None and subscription.owner != owner):
            again = (
                "" if self._kept is not None else " (one registered before the gateway restarted: register it again)"
            )
            raise ApiError(404, "subscription_not_found", f"no subscription {key!r}{again}", "42704")
        return subscription

    def delete(self, key: str, owner: str | None) -> None:
        with self._lock:
            kept = self._restoring.get(key)
            if kept is not None and (owner is None or kept["owner"] == owner):
                del self._restoring[key]  # not computed again: nobody listens
                self._keep()
                return
        subscription = self.get(key, owner)
        with self._lock:
            self._all.pop(subscription.id, None)
            self._keep()
        _tell(subscription, {"subscription": subscription.id, "ended": True})
        self._forget(subscription)

    def _forget(self, subscription: Subscription) -> None:
        """The nodes holding its table drop its state (one that cannot be told keeps it until it restarts)."""
        catalog = self.engine.catalog
        try:
            nodes = catalog.table(subscription.plan.table).nodes
        except Exception:  # the table is gone: so is what the nodes kept of it
            return
        for node in nodes:
            try:
                NodeClient(catalog.url(node), timeout=5).delete(FORGET_PATH.format(id=subscription.id))
            except (NodeError, NodeUnavailable) as e:
                log.info("node %s keeps the state of standing query %s: %s", node, subscription.id, e)

    def listing(self, owner: str | None) -> list[Subscription]:
        """The subscriptions (`owner` None: anyone's), the kept ones whose tables are served computed again."""
        with self._lock:
            kept = [key for key, r in self._restoring.items() if owner is None or r["owner"] == owner]
        self._restore(kept)
        with self._lock:
            return [s for s in self._all.values() if owner is None or s.owner == owner]


def _readers(info: TableInfo) -> dict[str, list[int] | None]:
    """The nodes a standing query's state over table `info` is asked of, each with the buckets it
    answers for (None: every bucket it holds); a bucket held by several nodes is answered by one."""
    placement = info.schema.placement
    if placement.kind != "hash":
        return {info.nodes[0]: [0]}
    if info.buckets:  # held by several nodes: the one that reads it
        return {node: list(buckets) for node, buckets in info.buckets.items()}
    if placement.owners:
        return {n: [b for b, owner in enumerate(placement.owners) if owner == n] for n in info.nodes}
    return dict.fromkeys(info.nodes)


def _registrations(kept: Path | None) -> dict[str, dict[str, Any]]:
    """The registrations kept in file `kept`, by id (none when there is no file yet)."""
    if kept is None or not kept.exists():
        return {}
    try:
        return json.loads(kept.read_text())["subscriptions"]
    except (ValueError, KeyError, TypeError) as e:
        raise ValueError(f"gateway.subscriptions_file {kept}: not a file of standing queries ({e})") from None


def _joined(parts: list[pa.Table]) -> pa.Table:
    """The partial rows of several nodes, in the first one's types."""
    return pa.concat_tables([p.cast(parts[0].schema) for p in parts])


def _tuples(table: pa.Table) -> list[tuple]:
    """The rows of `table` as tuples of JSON values."""
    return [tuple(row) for row in results.json_rows(table)]


@contextmanager
def _failing(subscription: Subscription) -> Iterator[None]:
    """Keeping `subscription` up to date; when that fails (a table it reads gone, a node down), the
    append stays committed: the subscription says why in `failed`, keeps the result of the version
    it covers and is computed again at the next append."""
    try:
        yield
        subscription.failed = None
    except Exception as e:
        log.warning("standing query %s not kept up to date: %s", subscription.id, e)
        subscription.stamp, subscription.failed = None, str(e)


def _tell(subscription: Subscription, update: dict[str, Any] | None) -> None:
    if update is not None:
        for listener in list(subscription.listeners):
            listener(update)


def _check_event_time(schema: TableSchema, column: str) -> None:
    """An event-time column is one of the table's, a timestamp, a date or a number (400 otherwise)."""
    if column not in schema.column_names:
        raise UndefinedColumn(f"table {schema.name} has no column {column!r} (the event_time)")
    kind = schema.column(column).arrow_type
    if not (pa.types.is_temporal(kind) or pa.types.is_integer(kind) or pa.types.is_floating(kind)):
        raise InvalidQuery(f"event_time {column!r} is a {schema.column(column).type}, not a time or a number")


def queue_listener(loop: asyncio.AbstractEventLoop, queue: asyncio.Queue) -> Listener:
    """A listener that hands each update to `queue` on `loop` (from any thread)."""
    return lambda update: loop.call_soon_threadsafe(queue.put_nowait, update)
