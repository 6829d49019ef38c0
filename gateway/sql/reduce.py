"""Semi-join reduction: the select-project sub-queries of a join query made as small as possible
on the nodes before Spark runs.

Sub-queries are visited from the smallest table up; a filtered one that turns out small is
fetched whole, and the distinct values of its join columns become ``key IN (values)`` on the
sub-query at the other end of an inner equi-join (or inside a correlated subquery). Along a chain
of joins (region -> nation -> customer -> orders -> lineitem) each step shrinks the next. What was
fetched is handed to Spark as is (`gateway.sql.exchange`). Spark still executes every join; it
only receives fewer rows.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field

import pyarrow as pa

from gateway.sql.catalog import RegionCatalog
from gateway.sql.keysets import distinct, is_in
from gateway.sql.local import scan_nodes_up_to
from gateway.sql.plan import Plan, TableQuery
from gpu_kernels import final_aggregate
from storage import ScanRequest, membership, type_scan

MAX_KEYS = 500_000  # values a semi-join filter may carry
PROBE_ROWS = 500_000  # sub-queries up to this size are fetched for their join keys (default)
SMALL_TABLE = 100_000  # an unfiltered table this small is fetched anyway (it is needed whole)
MAX_PROBES = 2  # fetch attempts per sub-query (a reduction earns it a second one)


def _probe(
    catalog: RegionCatalog, scan: TableQuery, limit: int, seen: dict[ScanRequest, pa.Table | None]
) -> pa.Table | None:
    """The sub-query's rows if there are at most `limit` of them, else None; an identical request
    (the same table in a subquery and outside it) is answered from `seen`. A grouped (pre-aggregated
    or distinct) sub-query, to which no row limit applies, is read until more than 4 x `limit`
    partial groups arrived (a table of at most that many rows whole), and the partial groups of
    every block and node are merged here."""
    request = scan.request()
    if not scan.group_by:
        request = dataclasses.replace(request, limit=limit + 1)
    if request not in seen:
        step = f"[{scan.index}] {scan.table} AS {scan.alias}, fetched first"
        data = scan_nodes_up_to(catalog, scan.info, request, 4 * limit, step)
        if data is not None and scan.group_by:
            task = type_scan(request, scan.info.schema)
            keys = [k.name for k in scan.group_by]
            data = final_aggregate(data, keys, list(task.task.aggregates)).select(task.schema.names).cast(task.schema)
        seen[request] = data if data is not None and data.num_rows <= limit else None
    return seen[request]


@dataclass
class _Received:
    """The semi-join filter on one column of a sub-query: the keys every source sent it, intersected."""

    keys: pa.Array | None = None  # (None for a fetched sub-query, filtered where it is)
    sources: list[str] = field(default_factory=list)  # those whose keys are in the filter
    notes: dict[str, int] = field(default_factory=dict)  # source or "" -> position among its reductions
    filter: int | None = None  # position among the target's filters (None: it was filtered locally)


def reduce_and_fetch(plan: Plan, catalog: RegionCatalog, probe_rows: int = PROBE_ROWS) -> dict[int, pa.Table]:
    """Semi-join reduction of `plan`'s sub-queries (their filters, reductions and row counts are
    updated), from the smallest up; returns the rows of the sub-queries it fetched (index ->
    rows). The others are scanned again when Spark needs them.

    A sub-query with filters (its own, or a reduction) is fetched when it has at most `probe_rows`
    rows (an unfiltered table of at most `SMALL_TABLE` rows too: Spark needs it whole), and the
    distinct values of its join columns then filter the sub-queries at the other end of its
    edges; one that receives a reduction is visited again, and sends its keys again if it
    shrank. An unfiltered table's join keys are the whole domain and filter nothing.
    """
    fetched: dict[int, pa.Table] = {}
    seen: dict[ScanRequest, pa.Table | None] = {}  # equal requests are equal sub-queries
    probes: dict[int, int] = {}
    pending = {scan.index: scan for scan in plan.scans}
    sent: dict[tuple[int, str, int], int] = {}  # (source, column, target) -> the source's rows when it sent
    received: dict[tuple[int, str], _Received] = {}  # (target, column) -> its filter
    uniques: dict[tuple[int, str], tuple[int, pa.Array]] = {}  # (source, column) -> (rows, distinct keys)
    # a correlated subquery's scan only receives values from the outer query: visit it after them
    outer_of: dict[int, set[int]] = {}
    for edge in plan.edges:
        if not edge.both_ways:
            outer_of.setdefault(edge.right.index, set()).add(edge.left.index)
    visited: set[int] = set()
    while pending:
        ready = [s for s in pending.values() if outer_of.get(s.index, set()) <= visited] or list(pending.values())
        scan = min(ready, key=lambda s: (s.rows if s.rows is not None else s.info.rows, s.index))
        del pending[scan.index]
        visited.add(scan.index)
        worth = scan.filters or scan.info.rows <= SMALL_TABLE
        if scan.index not in fetched and worth and probes.get(scan.index, 0) < MAX_PROBES:
            probes[scan.index] = probes.get(scan.index, 0) + 1
            data = _probe(catalog, scan, probe_rows, seen)
            if data is not None:
                fetched[scan.index] = data
        scan.rows = fetched[scan.index].num_rows if scan.index in fetched else None if scan.filters else scan.info.rows
        if scan.index not in fetched or not (scan.filters or scan.reductions):
            continue  # an unreduced table's join keys are the whole domain
        data = fetched[scan.index]
        for edge in plan.edges:
            for source, column, target, target_column in edge.directions():
                if source is not scan:
                    continue
                if sent.get((scan.index, column, target.index)) == data.num_rows:
                    continue  # sent already, and it has not shrunk since
                sent[(scan.index, column, target.index)] = data.num_rows
                if uniques.get((scan.index, column), (None,))[0] != data.num_rows:
                    uniques[(scan.index, column)] = data.num_rows, distinct(data.column(column))
                keys = uniques[(scan.index, column)][1]
                if _send(f"{scan.alias}.{column}", keys, target, target_column, fetched, received):
                    pending[target.index] = target  # visit again: it may now be small
    return fetched


def _send(
    source: str,
    keys: pa.Array,
    target: TableQuery,
    column: str,
    fetched: dict[int, pa.Table],
    received: dict[tuple[int, str], _Received],
) -> bool:
    """Filter `target` by `keys` of `source`: a fetched one where it is, another by one filter per
    column (the keys intersected with what the column received before); whether that reduced it."""
    if len(keys) > MAX_KEYS:
        return False
    slot = received.setdefault((target.index, column), _Received())
    if target.index in fetched:  # already here: filter it locally
        rows = fetched[target.index]
        kept = rows.filter(is_in(rows.column(column), keys))
        if kept.num_rows == rows.num_rows:  # unchanged stays the same object (shared by equal scans)
            return False
        fetched[target.index] = kept
        target.rows = kept.num_rows
        _note(target, slot, source, f"semi-join filter: {column} IN ({len(keys):,} values of {source})")
        return True
    if slot.keys is not None:
        keys = keys.filter(is_in(keys, slot.keys))
        if len(keys) >= len(slot.keys):
            return False
    condition = membership(column, keys)
    if condition is None:
        return False
    slot.keys = keys
    slot.sources += [] if source in slot.sources else [source]
    _note(target, slot, "", f"semi-join filter: {column} IN ({len(keys):,} values of {' and '.join(slot.sources)})")
    if slot.filter is None:
        slot.filter = len(target.filters)
        target.filters.append(condition)
    target.filters[slot.filter] = condition
    target.rows = None
    return True


def _note(target: TableQuery, slot: _Received, key: str, text: str) -> None:
    """Say what reduced `target` in its explanation: one line per source for a fetched sub-query
    (filtered by each in turn), one for the filter of a column sent to the nodes (key "")."""
    if key not in slot.notes:
        slot.notes[key] = len(target.reductions)
        target.reductions.append(text)
    target.reductions[slot.notes[key]] = text
