"""Standing queries' state on a node (seed 000: the state split into buckets owned by nodes).

A gateway registers a standing query on each node holding its table (`Registration`: its partial
statement over the table's rows, each with its bucket in column `BUCKET`, and the statement that
compacts partial rows). Per subscription the node keeps the partial aggregates of the rows of each
bucket it answers for, one row per bucket and group, and the block files each bucket's rows came
from. The gateway asks in two ways, naming the buckets this node answers for (a bucket several
nodes hold is answered by one):

- **gather**: the state over those buckets at the table's current version. A bucket whose block
  files are those its state covers is kept; one moved here, loaded, or appended to elsewhere is
  computed again from its blocks; one no longer asked for is dropped. A new version of a table it
  joins (a dimension) computes every bucket again.
- **fold**: the append that made version V on version B: per subscription, the partial rows of
  its rows by bucket, computed by the gateway it came through (which has them), are added to the
  buckets of a state covering B. A state covering another version (a move or another gateway's
  append came between) is brought to the table's version as a gather brings it (the blocks hold
  the append's rows). A state this node does not have (restarted) answers ``unknown``: the
  gateway registers it again.

States live in the node's memory. One neither gathered nor folded into for a day is forgotten (its
subscription deleted while this node was down, or its gateway forgot it; one still registered is
registered again at its next append). `GET /v1/node` counts them, and the gathers, the buckets
computed from blocks, the folds, the states brought to a version and the unknown ones.
"""

from __future__ import annotations

import base64
import threading
import time
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from storage.block import conform, stream_bytes
from storage.catalog import TableSchema
from storage.errors import UnreadableRequestError
from storage.join_engine import run_sql
from storage.loader import plan_layout
from storage.store import Store, Table

GATHER_PATH = "/v1/standing/gather"
FOLD_PATH = "/v1/standing/fold"
FORGET_PATH = "/v1/standing/{id}"
COUNTED = ("gathers", "buckets_computed", "folds", "synced", "unknown")  # what `report` counts
BUCKET = "__bucket"  # the column of a row's bucket, in the rows the partial statement reads
STATE = "partials"  # the name the compacting statement reads the partial rows by
IDLE_S = 24 * 3600.0  # a state neither gathered nor folded into for this long is forgotten


@dataclass(frozen=True)
class Registration:
    """A standing query as a node computes its state."""

    table: str
    partial: str  # over the table's rows (with BUCKET) and its dimensions: partial rows by bucket and group
    compact: str  # over STATE: one partial row per bucket and group
    dimensions: tuple[str, ...] = ()  # the replicated tables it joins

    @classmethod
    def from_json(cls, data: object) -> Registration:
        fields = data if isinstance(data, dict) else {}
        texts = [fields.get(name) for name in ("table", "partial", "compact")]
        dimensions = fields.get("dimensions") or []
        if not isinstance(dimensions, list) or not all(isinstance(t, str) for t in [*texts, *dimensions]):
            raise _invalid(
                f"a standing query is {{'table', 'partial', 'compact', 'dimensions'}} (texts), not {str(data)[:200]}"
            )
        return cls(*texts, tuple(dimensions))

    def to_json(self) -> dict[str, Any]:
        return {
            "table": self.table,
            "partial": self.partial,
            "compact": self.compact,
            "dimensions": list(self.dimensions),
        }


@dataclass
class _State:
    registration: Registration
    version: int = 0  # of its table, covered
    files: dict[int, frozenset[str]] = field(default_factory=dict)  # per bucket covered, its block files
    dimensions: dict[str, int] = field(default_factory=dict)  # the version of each table it joins
    rows: pa.Table | None = None  # partial rows, with BUCKET
    compacted: int = 0  # rows when last compacted
    used: float = field(default_factory=time.monotonic)  # when last gathered or folded into
    lock: threading.Lock = field(default_factory=threading.Lock)


class StandingStates:
    """The standing queries' states on one node, by subscription id."""

    def __init__(self, store: Store):
        self.store = store
        self._states: dict[str, _State] = {}
        self._dimensions_read: dict[str, tuple[int, pa.Table]] = {}  # a dimension's rows, by name: version, rows
        self._lock = threading.Lock()
        self.counters: Counter[str] = Counter()  # gathers, buckets computed from blocks, folds, synced, unknown

    def report(self) -> dict[str, int]:
        """What `GET /v1/node` says of them."""
        with self._lock:
            counted = {what: self.counters[what] for what in COUNTED}
            return {"states": len(self._states), **counted}

    def _count(self, what: str, n: int) -> None:
        with self._lock:
            self.counters[what] += n

    def forget(self, key: str) -> bool:
        with self._lock:
            return self._states.pop(key, None) is not None

    def expire(self, idle_s: float = IDLE_S) -> list[str]:
        """Forget the states not gathered nor folded into for `idle_s` seconds (their subscription was
        deleted while this node was down, or its gateway forgot it); the ids forgotten."""
        now = time.monotonic()
        with self._lock:
            idle = [key for key, state in self._states.items() if now - state.used >= idle_s]
            for key in idle:
                del self._states[key]
        return idle

    def gather(self, key: str, registration: Registration, buckets: list[int] | None) -> dict[str, Any]:
        """Subscription `key`'s state over `buckets` (None: all held here) at its table's current
        version, computed where it is not kept: its partial rows (without BUCKET) and the version."""
        with self._lock:
            state = self._states.get(key)
            if state is None or state.registration != registration:
                state = self._states[key] = _State(registration)
        self._count("gathers", 1)
        with state.lock:
            state.used = time.monotonic()
            table = self.store.table(registration.table)
            wanted = _wanted(table, buckets)
            self._sync(state, table, wanted)
            return {"rows": to_base64(_over(state.rows, wanted)), "version": table.version}

    def fold(
        self, table: str, version: int, base: int, partials: dict[str, pa.Table], buckets: list[int] | None
    ) -> dict[str, str]:
        """The append that made `version` of `table` on `base`: per subscription id, the partial
        rows of its rows by bucket (`partials`, computed where the append came in), folded into
        the buckets of its state covering `base`. A state covering another version is brought to
        the table's version over `buckets` from their blocks instead (the blocks hold the append's
        rows). Per id: ``folded``, ``synced`` or ``unknown`` (no state here: the next gather makes it)."""
        current = self.store.table(table)
        files, wanted = _files(current), _wanted(current, buckets)

        def folded(key: str) -> str:
            with self._lock:
                state = self._states.get(key)
            if state is None:
                self._count("unknown", 1)
                return "unknown"
            with state.lock:
                state.used = time.monotonic()
                if (state.version, current.version) == (base, version) and self._dimensions(state) == state.dimensions:
                    self._count("folds", 1)
                    self._fold(state, current.version, files, partials[key])
                    if wanted <= state.files.keys():
                        return "folded"
                self._count("synced", 1)  # another version, or buckets it answers for now
                self._sync(state, current, wanted)
                return "synced"

        return {key: folded(key) for key in partials}  # each a few concatenations: one thread is fastest

    def _fold(self, state: _State, version: int, files: dict[int, frozenset[str]], partials: pa.Table) -> None:
        """An append's partial rows (with BUCKET) added to the buckets `state` keeps, now at `version`
        (whose block files by bucket are `files`)."""
        covered = set(state.files)
        if not covered >= set(pc.unique(partials[BUCKET]).to_pylist()):  # rows of a bucket it does not keep
            partials = _over(partials, covered, drop=False)
        self._grow(state, [partials])
        state.files = {b: files.get(b, frozenset()) for b in covered}
        state.version = version

    def _sync(self, state: _State, table: Table, wanted: set[int]) -> None:
        """`state` brought to `table`'s version over the buckets `wanted` (see the module's doc)."""
        dimensions = self._dimensions(state)
        if dimensions != state.dimensions:
            state.files, state.rows, state.dimensions = {}, None, dimensions
        files = _files(table)
        keep = {b for b, f in state.files.items() if b in wanted and files.get(b, frozenset()) == f}
        build = wanted - keep
        if not build and keep == state.files.keys() and state.rows is not None:
            state.version = table.version  # every bucket as it was
            return
        parts = [_over(state.rows, keep, drop=False)] if state.rows is not None and keep else []
        if build:
            self._count("buckets_computed", len(build))
            parts.append(self._partials(state, self._rows(table, build)))
        if not parts:  # no bucket here: no rows, in the partial rows' columns
            parts.append(self._partials(state, self._rows(table, set())))
        state.rows = pa.concat_tables([p.cast(parts[0].schema) for p in parts])
        state.files = {b: files.get(b, frozenset()) for b in keep | build}
        state.version = table.version

    def _dimensions(self, state: _State) -> dict[str, int]:
        return {d: self.store.table(d).version for d in state.registration.dimensions}

    def _rows(self, table: Table, buckets: set[int]) -> pa.Table:
        """The rows of `buckets` of `table`, with BUCKET."""
        entries = [entry for entry in table.blocks if entry.bucket in buckets]
        rows = conform(table.to_arrow(entries=entries), table.schema)
        bucket = np.repeat([e.bucket for e in entries], [e.rows for e in entries]).astype(np.int32)
        return rows.append_column(BUCKET, pa.array(bucket, pa.int32()))

    def _partials(self, state: _State, rows: pa.Table) -> pa.Table:
        """The partial rows, by bucket and group, of `rows` (joined to the dimensions as they are)."""
        registration = state.registration
        tables = {registration.table: rows, **{d: self._dimension(d) for d in registration.dimensions}}
        return run_sql(tables, registration.partial).table

    def _dimension(self, name: str) -> pa.Table:
        """The rows of table `name` (a dimension), decoded once per version."""
        table = self.store.table(name)
        with self._lock:
            kept = self._dimensions_read.get(name)
        if kept is not None and kept[0] == table.version:
            return kept[1]
        rows = conform(table.to_arrow(), table.schema)
        with self._lock:
            self._dimensions_read[name] = (table.version, rows)
        return rows

    def _grow(self, state: _State, added: list[pa.Table]) -> None:
        """Partial rows added to the state, compacted once it has grown to twice its compacted rows."""
        parts = [state.rows] if state.rows is not None else []
        parts += [a.cast(parts[0].schema) if parts else a for a in added]
        grown = pa.concat_tables(parts) if len(parts) > 1 else parts[0]
        if grown.num_rows > 2 * state.compacted + 1024:
            grown = run_sql({STATE: grown}, state.registration.compact).table.cast(grown.schema)
            state.compacted = grown.num_rows
        state.rows = grown


def to_base64(table: pa.Table) -> str:
    """`table` as an Arrow IPC stream in base64 (a JSON answer's)."""
    return base64.b64encode(stream_bytes(table)).decode()


def from_base64(text: str) -> pa.Table:
    try:
        return pa.ipc.open_stream(base64.b64decode(text, validate=True)).read_all()
    except (ValueError, pa.ArrowInvalid) as e:
        raise _invalid(f"not an Arrow IPC stream in base64: {e}") from None


def with_buckets(rows: pa.Table, schema: TableSchema) -> pa.Table:
    """`rows` with the bucket of each in BUCKET."""
    order, sorted_buckets = plan_layout(rows, schema, by_sort_key=False)
    buckets = np.empty(len(order), np.int32)
    buckets[order] = sorted_buckets
    return rows.append_column(BUCKET, pa.array(buckets, pa.int32()))


def _files(table: Table) -> dict[int, frozenset[str]]:
    """The block files of each bucket of `table` held here."""
    files: dict[int, set[str]] = {}
    for entry in table.blocks:
        files.setdefault(entry.bucket, set()).add(entry.file)
    return {b: frozenset(f) for b, f in files.items()}


def _wanted(table: Table, buckets: list[int] | None) -> set[int]:
    return {e.bucket for e in table.blocks} if buckets is None else set(buckets)


def _over(rows: pa.Table | None, buckets: set[int], drop: bool = True) -> pa.Table:
    """The partial rows of `buckets` (without BUCKET unless not `drop`)."""
    assert rows is not None
    kept = rows.filter(pc.is_in(rows[BUCKET], pa.array(sorted(buckets), pa.int32())))
    return kept.drop_columns([BUCKET]) if drop else kept


def gather_request(body: object) -> tuple[dict[str, Registration], list[int] | None]:
    """A gather's body ``{"subscriptions": {id: registration}, "buckets": [...] | null}``, checked."""
    if not isinstance(body, dict) or not isinstance(body.get("subscriptions"), dict):
        raise _invalid('a gather is {"subscriptions": {id: standing query}, "buckets": [...]}')
    registrations = {str(key): Registration.from_json(r) for key, r in body["subscriptions"].items()}
    return registrations, _buckets(body.get("buckets"))


def fold_request(body: object) -> tuple[str, int, int, dict[str, pa.Table], list[int] | None]:
    """A fold's body ``{"table", "version", "base", "partials": {id: Arrow IPC in base64}, "buckets"}``, checked."""
    if not isinstance(body, dict) or not isinstance(body.get("partials"), dict):
        raise _invalid('a fold is {"table", "version", "base", "partials": {id: partial rows}, "buckets": [...]}')
    table, version, base = body.get("table"), body.get("version"), body.get("base")
    numbers = (version, base)
    if not isinstance(table, str) or not all(isinstance(n, int) and not isinstance(n, bool) for n in numbers):
        raise _invalid(f"a fold names a table, its version and the version appended to, not {table!r}, {numbers!r}")
    partials = {str(key): from_base64(str(value)) for key, value in body["partials"].items()}
    missing = next((key for key, rows in partials.items() if BUCKET not in rows.column_names), None)
    if missing is not None:
        raise _invalid(f"the partial rows of {missing} have no {BUCKET} column")
    return table, version, base, partials, _buckets(body.get("buckets"))


def _buckets(value: object) -> list[int] | None:
    if value is not None and (
        not isinstance(value, list) or not all(isinstance(b, int) and not isinstance(b, bool) for b in value)
    ):
        raise _invalid(f"buckets is a list of bucket numbers or null, not {str(value)[:80]}")
    return value


def _invalid(message: str) -> UnreadableRequestError:
    return UnreadableRequestError("invalid_standing_request", message)
