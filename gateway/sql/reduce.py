"""Making the select-project sub-queries of a join query as small as possible before Spark runs.

Two steps, both evaluated on the storage nodes:

- `substitute_subqueries`: an uncorrelated subquery over one table (``o_orderkey IN (SELECT
  l_orderkey FROM lineitem GROUP BY l_orderkey HAVING sum(l_quantity) > 300)``, a scalar
  ``(SELECT avg(c_acctbal) FROM customer WHERE ...)``, an uncorrelated EXISTS) runs first, as a
  one-table query on the nodes, and its answer replaces it as literals; the predicate around it
  can then be pushed into a sub-query like any other.
- `reduce_and_fetch`: sub-queries are visited from the smallest table up; a filtered one that
  turns out small is fetched whole, and the distinct values of its join columns become
  ``key IN (values)`` on the sub-query at the other end of an inner equi-join (or inside a
  correlated subquery). Along a chain of joins (region -> nation -> customer -> orders ->
  lineitem) each step shrinks the next. What was fetched is handed to Spark as is
  (`gateway.sql.exchange`).

Spark still executes every join; it only receives fewer rows.
"""

from __future__ import annotations

import datetime as dt
import decimal
from collections.abc import Hashable
from dataclasses import dataclass, field, replace
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
from sqlglot import exp
from sqlglot.optimizer.scope import traverse_scope

from gateway.sql.catalog import RegionCatalog
from gateway.sql.errors import SqlError
from gateway.sql.keysets import distinct, is_in
from gateway.sql.local import run_local, scan_nodes
from gateway.sql.parse import Statement
from gateway.sql.plan import Plan, Planner, Scan, request_key
from gpu_kernels.aggregate import final_aggregate
from storage.scan_protocol import Int64List, ScanRequest, ValueList, col, in_, int64_values, lit, values
from storage.scan_typing import type_scan

MAX_SUBSTITUTED = 10_000  # values an IN subquery may become
MAX_KEYS = 500_000  # values a semi-join filter may carry
PROBE_ROWS = 500_000  # sub-queries up to this size are fetched for their join keys (default)
SMALL_TABLE = 100_000  # an unfiltered table this small is fetched anyway (it is needed whole)
MAX_PROBES = 2  # fetch attempts per sub-query (a reduction earns it a second one)


class CardinalityError(SqlError):
    code = "cardinality_violation"
    sqlstate = "21000"


def literal(value: Any) -> exp.Expression:
    if value is None:
        return exp.null()
    if isinstance(value, bool):
        return exp.Boolean(this=value)
    if isinstance(value, (int, float, decimal.Decimal)):
        return exp.Literal.number(str(value))
    if isinstance(value, dt.datetime):
        return exp.cast(exp.Literal.string(value.isoformat(sep=" ")), "TIMESTAMP")
    if isinstance(value, dt.date):
        return exp.cast(exp.Literal.string(value.isoformat()), "DATE")
    return exp.Literal.string(str(value))


def _single_table(scope) -> bool:
    select = scope.expression
    return (
        isinstance(select, exp.Select)
        and not scope.external_columns
        and not scope.subquery_scopes
        and len(scope.sources) == 1
        and isinstance(next(iter(scope.sources.values())), exp.Table)
    )


def substitute_subqueries(statement: Statement, planner: Planner, catalog: RegionCatalog) -> list[str]:
    """Evaluate uncorrelated one-table subqueries on the nodes and put their answers in their place."""
    notes: list[str] = []
    replaced = True
    while replaced:
        replaced = False
        for scope in traverse_scope(statement.tree):
            if not scope.is_subquery or not _single_table(scope):
                continue
            select = scope.expression
            holder = select.parent  # exp.Subquery, or the IN / EXISTS node itself
            user = holder.parent if isinstance(holder, exp.Subquery) else holder
            sub = Statement(select.copy(), [p.alias_or_name for p in select.expressions], False, select.sql())
            plan = planner._local(sub)
            if plan is None:
                continue
            answer = run_local(plan, catalog)
            replacement = _replacement(holder, user, answer)
            if replacement is None:
                continue
            target, new = replacement
            notes.append(f"evaluated first on the nodes: ({select.sql()}) -> {_describe(answer)}")
            target.replace(new)
            replaced = True
            break
    return notes


def _describe(answer: pa.Table) -> str:
    if answer.num_rows == 1 and answer.num_columns == 1:
        return f"{answer.column(0)[0].as_py()!r}"
    return f"{answer.num_rows} value(s)"


def _replacement(holder: exp.Expression, user: exp.Expression, answer: pa.Table):
    """(node to replace, its replacement) for a subquery's answer, or None to leave it to Spark."""
    if isinstance(user, exp.Exists):
        return user, exp.Boolean(this=answer.num_rows > 0)
    if isinstance(user, exp.In) and user.args.get("query") is holder:
        if answer.num_columns != 1 or answer.num_rows > MAX_SUBSTITUTED:
            return None
        values = pc.unique(answer.column(0)).to_pylist()
        if None in values:  # x NOT IN (..., NULL) is never true: keep SQL's exact rule in Spark
            return None
        if not values:
            return user, exp.false()
        return user, exp.In(this=user.this.copy(), expressions=[literal(v) for v in values])
    if isinstance(holder, exp.Subquery) and answer.num_columns == 1:
        if answer.num_rows > 1:
            raise CardinalityError("a scalar subquery returned more than one row")
        return holder, literal(answer.column(0)[0].as_py() if answer.num_rows else None)
    return None


# ---- semi-join reduction ------------------------------------------------------------------------


def _values(keys: pa.Array) -> ValueList | Int64List | None:
    """A values list for IN, or None for types not worth it."""
    t = keys.type
    if pa.types.is_integer(t):  # as one base64 array (a JSON number list above 2**63 for uint64)
        return int64_values(keys.to_numpy(zero_copy_only=False)) if t != pa.uint64() else values(keys.to_pylist())
    if pa.types.is_date32(t):
        return values([d.isoformat() for d in keys.to_pylist()], "date")
    if pa.types.is_string(t) or pa.types.is_large_string(t):
        return values(keys.to_pylist())
    return None


def membership_filter(column: str, keys: pa.Array) -> dict[str, Any] | None:
    """``column IN keys`` as a scan filter in its JSON form (what a sub-query's filters hold); None
    for key types not worth it."""
    if not len(keys):
        return lit(False).to_json()
    listed = _values(keys)
    return None if listed is None else in_(col(column), listed).to_json()


def _probe(catalog: RegionCatalog, scan: Scan, limit: int, seen: dict[Hashable, pa.Table | None]) -> pa.Table | None:
    """The sub-query's rows if there are at most `limit` of them, else None; an identical request
    (the same table in a subquery and outside it) is answered from `seen`. A grouped (pre-aggregated
    or distinct) sub-query, to which no row limit applies, is fetched when its table is at most
    4 x `limit` rows, and the partial groups of every block and node are merged here."""
    if scan.group_by and scan.info.rows > 4 * limit:
        return None
    request = ScanRequest.from_json(scan.request())
    if not scan.group_by:
        request = replace(request, limit=limit + 1)
    key = request_key(request.to_json())
    if key not in seen:
        data = scan_nodes(catalog, scan.info, request)
        if scan.group_by:
            typed = type_scan(request, scan.info.schema)
            keys = [k.name for k in request.group_by]
            data = final_aggregate(data, keys, list(typed.task.aggregates))
            data = data.select(typed.schema.names).cast(typed.schema)
        seen[key] = data if data.num_rows <= limit else None
    return seen[key]


@dataclass
class _Received:
    """The semi-join filter on one column of a sub-query: the keys every source sent it, intersected."""

    keys: pa.Array | None = None  # (None for a fetched sub-query, filtered where it is)
    sources: list[str] = field(default_factory=list)  # those whose keys are in the filter
    notes: dict[str, int] = field(default_factory=dict)  # source or "" -> position among its reductions
    filter: int | None = None  # position among the target's filters (None: it was filtered locally)


def reduce_and_fetch(plan: Plan, catalog: RegionCatalog, probe_rows: int = PROBE_ROWS) -> dict[int, pa.Table]:
    """Semi-join reduction, from the smallest sub-queries up; returns the rows of the sub-queries
    it fetched (index -> rows). The others are scanned again when Spark needs them.

    A sub-query with filters (its own, or a reduction) is fetched when it has at most `probe_rows`
    rows, and the distinct values of its join columns then filter the sub-queries at the other end
    of its edges; one that receives a reduction is visited again, and sends its keys again if it
    shrank. An unfiltered table's join keys are the whole domain and filter nothing.
    """
    fetched: dict[int, pa.Table] = {}
    seen: dict[Hashable, pa.Table | None] = {}
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
    target: Scan,
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
    condition = membership_filter(column, keys)
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


def _note(target: Scan, slot: _Received, key: str, text: str) -> None:
    """Say what reduced `target` in its explanation: one line per source for a fetched sub-query
    (filtered by each in turn), one for the filter of a column sent to the nodes (key "")."""
    if key not in slot.notes:
        slot.notes[key] = len(target.reductions)
        target.reductions.append(text)
    target.reductions[slot.notes[key]] = text
