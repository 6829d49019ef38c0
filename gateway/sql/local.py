"""Finishing queries at the coordinator: one-table queries run on the nodes, and queries without a
table. The nodes' partial aggregates are merged (reduce/final), then HAVING, the select list,
ORDER BY and LIMIT are evaluated over the merged result with the same kernels the nodes use."""

from __future__ import annotations

import contextvars
import functools
import threading
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from contextvars import ContextVar
from typing import TypeVar

import pyarrow as pa
import pyarrow.compute as pc

from gateway.sql.catalog import RegionCatalog, TableInfo
from gateway.sql.plan import Plan
from gateway.sql.profile import node_scan
from gpu_kernels import AggSpec, BlockEvaluator, NumpyBackend, final_aggregate, fold, to_arrow
from storage import (
    Expr,
    NodeClient,
    ScanCancelled,
    ScanRequest,
    TableSchema,
    kernel_expr,
    plain_block,
    type_scan,
    typed_output,
)

_BACKEND = NumpyBackend()
T = TypeVar("T")
R = TypeVar("R")
# set while a query runs; `Engine.cancel` sets the event and the query's scans stop at the next batch
CANCELLED: ContextVar[threading.Event | None] = ContextVar("cxg_cancelled", default=None)


def in_threads(work: Callable[[T], R], items: Sequence[T], threads: int | None = None) -> list[R]:
    """`work` on each of `items`, on a pool of `threads` (default: one an item), each call in a copy
    of the caller's context: the query's cancellation event and profile go with it."""
    contexts = [contextvars.copy_context() for _ in items]
    with ThreadPoolExecutor(threads or len(items)) as pool:
        return list(pool.map(lambda context, item: context.run(work, item), contexts, items))


def evaluate(table: pa.Table, outputs: list[tuple[str, Expr]], predicate: Expr | None = None) -> pa.Table:
    """The `outputs` (name, expression) over the rows of `table` where `predicate` holds."""
    block = plain_block(table)
    ev = BlockEvaluator(block, _BACKEND)
    arrow_types = {name: column.type for name, column in block.columns.items()}
    sel = ev.filter(fold(kernel_expr(predicate))) if predicate is not None else ev.everything()
    arrays, names = [], []
    for name, ir in outputs:
        output = typed_output(name, ir, arrow_types)
        arrays.append(to_arrow(_BACKEND, ev.vec(fold(output.expr), sel), sel.count(), output.arrow_type))
        names.append(name)
    return pa.Table.from_arrays(arrays, names=names)


def scan_nodes(catalog: RegionCatalog, info: TableInfo, request: ScanRequest, step: str = "a scan") -> pa.Table:
    """A scan on every node holding the table (one node for a replicated table), at the version the
    catalog serves, results concatenated; `step` says what it is for (EXPLAIN ANALYZE)."""
    return _scan_nodes(catalog, info, request, step, None)


def scan_nodes_up_to(
    catalog: RegionCatalog, info: TableInfo, request: ScanRequest, most: int, step: str = "a scan"
) -> pa.Table | None:
    """`scan_nodes`, or None as soon as more than `most` rows arrived from the nodes together
    (every node's scan then stops at its next batch)."""
    return _scan_nodes(catalog, info, request, step, most)


def _scan_nodes(
    catalog: RegionCatalog, info: TableInfo, request: ScanRequest, step: str, most: int | None
) -> pa.Table | None:
    routes = catalog.routes(info, request)
    cancelled = CANCELLED.get()
    arrived, lock, enough = [0], threading.Lock(), threading.Event()

    def one(route: tuple[str, ScanRequest]) -> pa.Table | None:
        url, routed = route
        batches = []
        with node_scan(NodeClient(url), routed, step) as stream:
            for batch, _ in stream:
                if cancelled is not None and cancelled.is_set():
                    raise ScanCancelled("scan cancelled")
                if most is not None:
                    with lock:
                        arrived[0] += batch.num_rows
                        if arrived[0] > most:
                            enough.set()
                    if enough.is_set():
                        return None
                batches.append(batch)
            return pa.Table.from_batches(batches, schema=stream.schema)

    parts = [one(routes[0])] if len(routes) == 1 else in_threads(one, routes)
    return None if enough.is_set() else pa.concat_tables(parts)


def _aggregates(request: ScanRequest, schema: TableSchema) -> tuple[AggSpec, ...]:
    """The typed aggregates of a one-table query's scan: typed once for a kept plan run again (by
    what they depend on, not by the filter, which may hold a long IN list)."""
    return _typed_aggregates(request.table, request.group_by, request.aggregates, schema)


@functools.lru_cache(maxsize=256)
def _typed_aggregates(table: str, group_by: tuple, aggregates: tuple, schema: TableSchema) -> tuple[AggSpec, ...]:
    return type_scan(ScanRequest(table, group_by=group_by, aggregates=aggregates), schema).task.aggregates


def answer_one_table(plan: Plan, catalog: RegionCatalog, step: str = "the query") -> pa.Table:
    """The rows of a "nodes" or "coordinator" plan: its scan on the nodes, finished here; the result
    columns are the query's output names. Its scan is named `step` in EXPLAIN ANALYZE."""
    query = plan.local
    if plan.engine == "coordinator":
        return evaluate(pa.table({"_": [0]}), query.outputs)
    info = query.scan.info
    request = query.request
    merged = scan_nodes(catalog, info, request, f"{step}: {query.scan.table}")
    if query.aggregating:
        merged = final_aggregate(merged, query.keys, list(_aggregates(request, info.schema)))
    sort_keys = [(f"__k{i}", key) for i, (key, _, _) in enumerate(query.order)]
    result = evaluate(merged, query.outputs + sort_keys, query.having)
    if sort_keys:
        directions = [
            (name, "descending" if desc else "ascending", "at_start" if nulls_first else "at_end")
            for (name, _), (_, desc, nulls_first) in zip(sort_keys, query.order, strict=True)
        ]
        indices = pc.sort_indices(result.select([n for n, _ in sort_keys]), sort_keys=directions)
        result = result.take(indices).drop_columns([n for n, _ in sort_keys])
    if query.offset or query.limit is not None:
        result = result.slice(query.offset, query.limit)
    return result
