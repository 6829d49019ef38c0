"""Standing queries kept up to date as rows are appended (`gateway.sql.standing` plans them).

A subscription holds its state, the partial aggregates of every row of its table up to the
version it covers, one row per group. Registering computes it once over the whole table (the
engine's partial statement); each append through this gateway then folds in the partial aggregates
of its own rows only (DataFusion over them), and the changed result rows are pushed to whoever
listens, tagged with the version they cover. A version the subscription did not see appended
(a load, another gateway's append) is consolidated: the state computed again over the whole table.
Registration and the appends to one table take the table's lock (`gateway.appends.table_lock`),
so each append is folded in exactly once, in version order.

Subscriptions live in the gateway's memory: after a restart their ids answer 404
``subscription_not_found`` saying so, and a client registers again.
"""

from __future__ import annotations

import asyncio
import threading
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import pyarrow as pa

from gateway import results
from gateway.errors import ApiError
from gateway.sql.decompose import PARTIALS
from gateway.sql.engine import Engine
from gateway.sql.errors import ForbiddenTable
from gateway.sql.standing import StandingPlan, plan_standing
from storage.join_engine import run_sql

Listener = Callable[[dict[str, Any]], None]  # called with each update, from the appending thread


@dataclass(eq=False)
class Subscription:
    id: str
    sql: str
    plan: StandingPlan
    owner: str  # the token's name ("" without tokens)
    version: int = 0  # of its table, covered by the state
    state: pa.Table | None = None  # partial aggregates, one row per group
    result: pa.Table | None = None  # the query's rows over the state
    updates: int = 0
    consolidations: int = 0
    created: float = field(default_factory=time.time)
    listeners: list[Listener] = field(default_factory=list)
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    def start(self, partials: pa.Table, version: int) -> None:
        """The state from the partial rows of the whole table at `version`."""
        with self._lock:
            self.state, self.version = None, version
            self._fold(partials)
            self.result = self._result()

    def fold(self, rows: pa.Table, version: int) -> dict[str, Any] | None:
        """The rows of the append that made `version` folded in; the update to push (None: no row changed)."""
        partials = run_sql({self.plan.table: rows}, self.plan.partial).table
        with self._lock:
            self._fold(partials)
            before, self.result, self.version = self.result, self._result(), version
            self.updates += 1
            return self._changes(before)

    def consolidated(self, partials: pa.Table, version: int) -> dict[str, Any] | None:
        """The state computed again over the whole table at `version`; the update (None: none)."""
        with self._lock:
            before = self.result
            self.state = None
            self._fold(partials)
            self.result, self.version = self._result(), version
            self.consolidations += 1
            return self._changes(before)

    def _fold(self, partials: pa.Table) -> None:
        if self.state is not None:
            partials = pa.concat_tables([self.state, partials.cast(self.state.schema)])
        compacted = run_sql({PARTIALS: partials}, self.plan.compact).table
        self.state = compacted.cast(partials.schema)

    def _result(self) -> pa.Table:
        assert self.state is not None
        rows = run_sql({PARTIALS: self.state}, self.plan.result).table
        return rows.rename_columns(list(self.plan.columns))

    def _changes(self, before: pa.Table | None) -> dict[str, Any] | None:
        """The rows now that were not before, and the groups gone (HAVING no longer holds)."""
        assert self.result is not None
        old = [tuple(r) for r in results.json_rows(before)] if before is not None else []
        new = [tuple(r) for r in results.json_rows(self.result)]
        seen = set(old)
        changed = [list(r) for r in new if r not in seen]
        keys = [self.plan.columns.index(k) for k in self.plan.keys]
        remaining = {tuple(r[i] for i in keys) for r in new}
        removed = [
            dict(zip(self.plan.keys, k, strict=True)) for k in {tuple(r[i] for i in keys) for r in old} - remaining
        ]
        if not changed and not removed:
            return None
        return {
            "subscription": self.id,
            "table": self.plan.table,
            "version": self.version,
            "changed": changed,
            "removed": removed,
        }

    def document(self) -> dict[str, Any]:
        """The subscription and its current result."""
        with self._lock:
            table = self.result
            return {
                "id": self.id,
                "sql": self.sql,
                "table": self.plan.table,
                "version": self.version,
                "updates": self.updates,
                "consolidations": self.consolidations,
                "columns": results.columns(table.schema) if table is not None else [],
                "keys": list(self.plan.keys),
                "rows": results.json_rows(table) if table is not None else [],
            }


class Subscriptions:
    """The gateway's standing queries, by id."""

    def __init__(self, engine: Engine, table_lock: Callable[[str], threading.Lock]):
        self.engine = engine
        self.table_lock = table_lock
        self._all: dict[str, Subscription] = {}
        self._lock = threading.Lock()

    def register(self, sql: str, owner: str, may_read: tuple[str, ...] = ()) -> Subscription:
        """Plan `sql` and compute its state over the whole table (blocks: a thread's work); `may_read`:
        the tables the owner may read (empty: all)."""
        plan = plan_standing(sql, self.engine.catalog.sql_schema())
        if may_read and plan.table not in may_read:
            raise ForbiddenTable(f"this token may not read table {plan.table!r}")
        subscription = Subscription(uuid.uuid4().hex[:16], sql, plan, owner)
        with self.table_lock(plan.table):
            self._start(subscription)
            with self._lock:
                self._all[subscription.id] = subscription
        return subscription

    def _start(self, subscription: Subscription) -> dict[str, Any] | None:
        """The state over the whole table, as served now (the table's lock held: no append meanwhile)."""
        catalog = self.engine.catalog
        catalog.refresh()
        version = catalog.table(subscription.plan.table).version or 0
        partials = self.engine.execute(subscription.plan.initial).table
        if subscription.state is None:
            subscription.start(partials, version)
            return None
        return subscription.consolidated(partials, version)

    def appended(self, table: str, version: int, rows: pa.Table) -> None:
        """An append through this gateway committed `version` of `table` with `rows` (the table's
        lock held): each subscription over it folds them in, or is consolidated when it missed a
        version; the listeners hear what changed."""
        with self._lock:
            over = [s for s in self._all.values() if s.plan.table == table]
        for subscription in over:
            if subscription.version == version - 1:
                update = subscription.fold(rows, version)
            else:
                update = self._start(subscription)
            if update is not None:
                for listener in list(subscription.listeners):
                    listener(update)

    def get(self, key: str, owner: str | None) -> Subscription:
        """Subscription `key` (`owner` None: anyone's); 404 when there is none or it is another token's."""
        with self._lock:
            subscription = self._all.get(key)
        if subscription is None or (owner is not None and subscription.owner != owner):
            message = f"no subscription {key!r} (one registered before the gateway restarted: register it again)"
            raise ApiError(404, "subscription_not_found", message, "42704")
        return subscription

    def delete(self, key: str, owner: str | None) -> None:
        subscription = self.get(key, owner)
        with self._lock:
            self._all.pop(subscription.id, None)
        for listener in list(subscription.listeners):
            listener({"subscription": subscription.id, "ended": True})

    def listing(self, owner: str | None) -> list[Subscription]:
        with self._lock:
            return [s for s in self._all.values() if owner is None or s.owner == owner]


def queue_listener(loop: asyncio.AbstractEventLoop, queue: asyncio.Queue) -> Listener:
    """A listener that hands each update to `queue` on `loop` (from any thread)."""
    return lambda update: loop.call_soon_threadsafe(queue.put_nowait, update)
