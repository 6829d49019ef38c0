"""A whole query answered by one node (PerformSys, seed 004 ch. 4): every table reference's
select-project scan runs on the node's compressed blocks with the scan kernels, as any scan does;
the results go to the embedded DataFusion as Arrow tables, without a copy, and DataFusion joins
them and evaluates everything above them.

The request and its answer are `storage.query_protocol`'s. One query is one partition of
DataFusion on one core (its slot: "one query per core plus one"), and its operators' memory is held
to the query's share of the node's budget: past it, the query fails alone with ``out_of_memory``. A
query DataFusion cannot plan or run answers 422 ``node_engine_failed`` with DataFusion's message
(the coordinator then runs it elsewhere). Identical scans of one query (a correlated subquery
reading the outer query's table as it does) run once.
"""

from __future__ import annotations

import json
import threading
import time
from dataclasses import dataclass, field, replace
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from gpu_kernels import OverflowInExpression
from storage.errors import NumericOverflowError
from storage.join_engine import QueryCancelledError, run_sql
from storage.key_filters import membership
from storage.query_protocol import QueryRequest
from storage.scan import TableCache, scan_table
from storage.scan_protocol import ScanRequest, conjoin
from storage.scan_workers import ScanWorkers

MAX_KEYS = 500_000  # values a semi-join filter between two scans may carry
MAX_SOURCE_ROWS = 1_000_000  # a scan's rows past which its join keys are not sent


@dataclass
class NodeQuery:
    """One query on this node: `run` scans every view, then DataFusion answers the SQL. Setting
    `cancel` stops it at the next block of a scan or batch of the result."""

    request: QueryRequest
    cache: TableCache
    backend: Any
    memory: int | None = None  # bytes DataFusion's operators may hold (None: no bound)
    threads: int = 1
    workers: ScanWorkers | None = None
    cancel: threading.Event = field(default_factory=threading.Event)
    stats: dict[str, Any] = field(default_factory=dict)
    _scanned: list[dict[str, Any]] = field(default_factory=list)  # the scans done, as `stats` lists them
    _views_done: int = 0
    _scanning: Any = None  # the scan running now (its statistics grow block by block)
    _answered: bool = False

    @property
    def stages(self) -> int:
        """The query's stages: each view's scan, then the engine's (DataFusion's joins and all above)."""
        return len(self.request.views) + 1

    def progress(self) -> dict[str, Any]:
        """How far it is, while it runs (read from another thread): stages done of `stages`, and
        the rows the scans have visited so far."""
        scanning = self._scanning
        rows = sum(s["rows_scanned"] for s in self._scanned) + (scanning.stats.rows_scanned if scanning else 0)
        done = self._views_done + self._answered
        return {"id": self.request.id, "stages": self.stages, "stages_done": done, "rows_scanned": rows}

    def run(self) -> pa.Table:
        """The answer (no rows with `analyze`: the operators are in `stats`)."""
        tables = self._scans(self._scanned)
        request = self.request
        answer = run_sql(tables, request.sql, request.kept, request.analyze, self.memory, self.cancel)
        self._answered = True
        if request.analyze:
            self.stats["rows"] = answer.rows
        self.stats.update(
            scans=self._scanned, stages=self.stages, engine_seconds=answer.seconds, operators=answer.operators
        )
        return answer.table

    def _scans(self, scans: list[dict[str, Any]]) -> dict[str, pa.Table]:
        """Every view's rows, filtered ones first (keys received filter too), the smallest table
        first among them (of two as large, the one that received more keys): a view whose rows are a
        part of its table's, at most `MAX_SOURCE_ROWS` of them, sends the distinct values of its join
        columns to the views at the other end of its edges not scanned yet, as ``column IN keys`` (at
        most `MAX_KEYS`), so that region -> nation -> supplier -> lineitem each shrink the next.
        Views of the same rows of a table (a correlated subquery reading the outer query's table as
        it does) are one scan of all their columns."""
        requests = dict(self.request.views)
        received: dict[str, list[str]] = {view: [] for view in requests}
        rows = {view: self.cache.get(r.table, r.version).table.rows for view, r in requests.items()}
        done: dict[str, pa.Table] = {}
        tables: dict[str, pa.Table] = {}

        def first(view: str) -> tuple[bool, int, int]:  # filtered, then smallest, then most keys received
            return requests[view].filter is None, rows[view], -len(received[view])

        while len(tables) < len(requests):  # chosen anew each time: keys received make a view filtered
            view = min((v for v in requests if v not in tables), key=first)
            twins = [v for v in requests if v not in tables and _same_rows(requests[v], requests[view])]
            request = _together([requests[v] for v in twins])
            key = json.dumps(request.to_json(), sort_keys=True)
            if key not in done:
                done[key] = self._scan(request, ", ".join(twins), scans, received[view])
            table = done[key]
            tables.update(dict.fromkeys(twins, table))
            self._views_done = len(tables)
            if request.filter is None or table.num_rows > MAX_SOURCE_ROWS:
                continue  # all of its table's keys filter nothing; the keys of millions cost more than they save
            sent = set()  # twins share their edges' keys: each sent once
            for source, column, target, target_column in self.request.edges:
                edge = (column, target, target_column)
                if source not in twins or target in tables or edge in sent or column not in table.column_names:
                    continue
                sent.add(edge)
                keys = pc.unique(table.column(column)).drop_null()
                condition = membership(target_column, keys) if len(keys) <= MAX_KEYS else None
                if condition is not None:
                    both = [f for f in (requests[target].filter, condition) if f is not None]
                    requests[target] = replace(requests[target], filter=conjoin(both))
                    received[target].append(f"{target_column} IN ({len(keys):,} values of {source}.{column})")
        return tables

    def _scan(self, request: ScanRequest, view: str, scans: list[dict[str, Any]], received: list[str]) -> pa.Table:
        started = time.perf_counter()
        scan = scan_table(self.cache, request, self.backend, self.threads, self.cancel)
        scan.workers = self.workers
        self._scanning = scan
        try:
            batches = [piece.batch for piece in scan.pieces()]  # a cancelled scan stops at its next block
        except OverflowInExpression as e:
            raise NumericOverflowError(str(e)) from None
        finally:
            self._scanning = None
        if self.cancel.is_set():
            raise QueryCancelledError("query cancelled")
        table = pa.Table.from_batches(batches, schema=scan.plan.schema)
        scans.append(
            {
                "view": view,
                "table": request.table,
                "rows": table.num_rows,
                "bytes": table.nbytes,
                "seconds": time.perf_counter() - started,
                "received": received,
                **scan.stats.to_json(),
            }
        )
        return table


def _same_rows(one: ScanRequest, other: ScanRequest) -> bool:
    """Whether two projections read the same rows of one table: what they compute may differ,
    but not under one name."""
    if one.aggregating or other.aggregating:
        return one == other
    if replace(one, columns=(), select=()) != replace(other, columns=(), select=()):
        return False
    theirs = {n.name: n.expr for n in other.outputs}
    return all(theirs.get(n.name, n.expr) == n.expr for n in one.outputs)


def _together(requests: list[ScanRequest]) -> ScanRequest:
    """One scan of the `_same_rows` projections `requests`: every column any of them asks for."""
    columns = {n.name: n for r in requests for n in r.columns}
    select = {n.name: n for r in requests for n in r.select if n.name not in columns}
    return replace(requests[0], columns=tuple(columns.values()), select=tuple(select.values()))
