"""Scans on a storage node: a request, checked and planned; blocks pruned by their statistics;
the per-block operator run through the block pipeline; results streamed block by block.

A scan request (JSON)::

    {"table": "lineitem",
     "columns": ["l_orderkey"],                                   # projected columns
     "select": [{"name": "revenue", "expr": {...}}],              # computed columns
     "filter": {...},                                             # predicate (gpu_kernels.expr)
     "group_by": ["l_returnflag", {"name": "y", "expr": {...}}],  # with aggregates: partial
     "aggregates": [{"name": "n", "func": "count"}, {"name": "s", "func": "sum", "arg": {...}}],
     "having": {...},                                             # with aggregates: final groups
     "partition": {"keys": ["l_orderkey"], "buckets": 8},         # hash-partitioned output
     "buckets": [0, 3],                                           # only these storage buckets
     "limit": 100}

An aggregating scan sends partial states, one row per group and block. With ``having`` (a
predicate over the output names) the node merges its groups and sends those where it holds: the
client asserts that every group lives on this node alone (the group keys include the table's
hash keys, or the table is read on one node), and only count, sum, min and max are merged here.
"""

from __future__ import annotations

import functools
import os
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field, replace
from typing import Any

import pyarrow as pa

from gpu_kernels import BlockEvaluator, EncodedBlock, ScanStats
from gpu_kernels import expr as E
from gpu_kernels.aggregate import FUNCTIONS, AggSpec, NamedExpr, final_aggregate
from gpu_kernels.backend import NumpyBackend
from gpu_kernels.expr import Call, Col, Kind, Lit, Type
from gpu_kernels.operators import BlockTask
from gpu_kernels.pipeline import BlockPipeline, block_parts
from gpu_kernels.vectors import arrow_type, exact_fraction, scalar_literal
from storage.block import plain_block
from storage.blockfile import BlockEntry
from storage.catalog import TableSchema
from storage.errors import StorageError, TableNotFoundError
from storage.manifest import MANIFEST
from storage.scan_workers import ScanWorkers, run_job
from storage.store import Store, Table
from storage.types import working_type

REQUEST_KEYS = {
    "table",
    "columns",
    "select",
    "filter",
    "group_by",
    "aggregates",
    "having",
    "partition",
    "buckets",
    "block_range",
    "limit",
}


class ScanRequestError(StorageError):
    """A malformed or unsupported scan request (HTTP 400); the message names the problem."""

    code = "invalid_scan"


@dataclass(frozen=True)
class ScanPlan:
    table: str
    task: BlockTask
    buckets: frozenset[int] | None = None
    limit: int | None = None
    block_range: tuple[int, int] | None = None  # [start, stop) among the blocks kept by `buckets`
    having: E.Expr | None = None  # merge the groups, keep those where it holds

    @property
    def schema(self) -> pa.Schema:
        return self.task.schema()


# ---- planning ------------------------------------------------------------------------------------


def _names(items: Any, what: str) -> list[Any]:
    if items is None:
        return []
    if not isinstance(items, list):
        raise ScanRequestError(f"{what} must be a list")
    return items


def _named_expr(item: Any, what: str) -> tuple[str, E.Expr]:
    if isinstance(item, str):
        return item, Col(item)
    if isinstance(item, dict) and isinstance(item.get("name"), str) and "expr" in item:
        return item["name"], E.from_json(item["expr"])
    raise ScanRequestError(f"each entry of {what} is a column name or {{'name': ..., 'expr': ...}}, not {item!r}")


def plan_scan(request: Any, schema: TableSchema) -> ScanPlan:
    """Check a scan request against the table and plan it; raises ScanRequestError."""
    if not isinstance(request, dict):
        raise ScanRequestError("a scan request is a JSON object")
    unknown = sorted(set(request) - REQUEST_KEYS)
    if unknown:
        raise ScanRequestError(f"unknown field(s) in scan request: {', '.join(unknown)}")
    columns = {c.name: E.arrow_kind(c.arrow_type) for c in schema.columns}
    arrow_types = {c.name: c.arrow_type for c in schema.columns}
    try:
        return _plan(request, schema, columns, arrow_types)
    except E.ExprError as e:
        raise ScanRequestError(str(e)) from e


def _output_type(e: E.Expr, t: Type, arrow_types: dict[str, pa.DataType]) -> pa.DataType:
    """A column keeps its type (string_view is sent as string, which every consumer reads)."""
    return working_type(arrow_types[e.name]) if isinstance(e, Col) else arrow_type(t)


def _plan(request: dict, schema: TableSchema, columns: dict, arrow_types: dict) -> ScanPlan:
    predicate = None
    if request.get("filter") is not None:
        predicate = fold(E.from_json(request["filter"]))
        if E.check(predicate, columns).kind not in (Kind.BOOL, Kind.NULL):
            raise ScanRequestError("filter must be a boolean expression")
    outputs = [_named_expr(c, "columns") for c in _names(request.get("columns"), "columns")]
    outputs += [_named_expr(s, "select") for s in _names(request.get("select"), "select")]
    keys = [_named_expr(k, "group_by") for k in _names(request.get("group_by"), "group_by")]
    aggregates = _names(request.get("aggregates"), "aggregates")
    aggregating = bool(keys or aggregates)
    if aggregating and outputs:
        raise ScanRequestError("a scan either projects (columns/select) or aggregates (group_by/aggregates)")
    if not aggregating and not outputs:
        raise ScanRequestError("a scan needs columns, select, group_by or aggregates")

    task = BlockTask(predicate=predicate)
    if aggregating:
        key_specs = []
        for name, e in keys:
            e = fold(e)
            key_specs.append(NamedExpr(name, e, _output_type(e, E.check(e, columns), arrow_types)))
        task = replace(
            task, keys=tuple(key_specs), aggregates=tuple(_aggregate(a, columns, arrow_types) for a in aggregates)
        )
        names = [k.name for k in key_specs] + [a.name for a in task.aggregates]
    else:
        specs = []
        for name, e in outputs:
            e = fold(e)
            specs.append(NamedExpr(name, e, _output_type(e, E.check(e, columns), arrow_types)))
        task = replace(task, outputs=tuple(specs))
        names = [o.name for o in specs]
    duplicates = sorted({n for n in names if names.count(n) > 1})
    if duplicates:
        raise ScanRequestError(f"output name(s) used twice: {', '.join(duplicates)}")

    partition = request.get("partition")
    if partition is not None:
        if not isinstance(partition, dict) or not isinstance(partition.get("keys"), list) or not partition["keys"]:
            raise ScanRequestError("partition is {'keys': [output column, ...], 'buckets': N}")
        missing = [k for k in partition["keys"] if k not in names]
        if missing:
            raise ScanRequestError(f"partition key(s) {', '.join(map(str, missing))} are not output columns")
        buckets = partition.get("buckets")
        if not isinstance(buckets, int) or not 1 <= buckets <= 65536:
            raise ScanRequestError(f"partition buckets must be an integer in 1..65536, not {buckets!r}")
        task = replace(task, partition_keys=tuple(partition["keys"]), partition_buckets=buckets)

    having = request.get("having")
    if having is not None:
        if not aggregating or partition is not None:
            raise ScanRequestError("having needs group_by/aggregates, and no partition")
        merged_here = ("count", "sum", "min", "max")
        if any(a.func not in merged_here for a in task.aggregates):
            raise ScanRequestError(f"with having, the aggregates are {', '.join(merged_here)} (merged on the node)")
        having = fold(E.from_json(having))
        outputs_types = {f.name: E.arrow_kind(f.type) for f in task.schema()}
        if E.check(having, outputs_types).kind not in (Kind.BOOL, Kind.NULL):
            raise ScanRequestError("having must be a boolean expression over the output columns")

    storage_buckets = request.get("buckets")
    if storage_buckets is not None:
        if not isinstance(storage_buckets, list) or not all(isinstance(b, int) for b in storage_buckets):
            raise ScanRequestError("buckets must be a list of bucket numbers")
        storage_buckets = frozenset(storage_buckets)
    limit = request.get("limit")
    if limit is not None and (not isinstance(limit, int) or limit < 0 or aggregating):
        raise ScanRequestError("limit is a non-negative integer, for projections only")
    block_range = request.get("block_range")
    if block_range is not None:
        if not (
            isinstance(block_range, list) and len(block_range) == 2 and all(isinstance(b, int) for b in block_range)
        ):
            raise ScanRequestError("block_range is [start, stop], two block numbers")
        block_range = (block_range[0], block_range[1])
    return ScanPlan(schema.name, task, storage_buckets, limit, block_range, having)


def _aggregate(item: Any, columns: dict, arrow_types: dict) -> AggSpec:
    if not isinstance(item, dict) or not isinstance(item.get("name"), str):
        raise ScanRequestError(f"an aggregate is {{'name': ..., 'func': ..., 'arg': ...}}, not {item!r}")
    func = item.get("func")
    if func not in FUNCTIONS:
        raise ScanRequestError(f"unsupported aggregate function {func!r}; use one of {', '.join(FUNCTIONS)}")
    if item.get("arg") is None:
        if func != "count":
            raise ScanRequestError(f"{func} needs an argument")
        return AggSpec(item["name"], func, None, pa.int64())
    arg = fold(E.from_json(item["arg"]))
    t = E.check(arg, columns)
    if func in ("sum", "avg"):
        if t.kind not in (Kind.INT, Kind.DEC, Kind.FLOAT):
            raise ScanRequestError(f"{func} needs a numeric argument, not {t.kind.value}")
        return AggSpec(item["name"], func, arg, arrow_type(t) if t.kind is not Kind.DEC else pa.decimal128(38, t.scale))
    if t.kind in (Kind.INTERVAL, Kind.NULL):
        raise ScanRequestError(f"{func} of {t.kind.value} is not supported")
    return AggSpec(item["name"], func, arg, _output_type(arg, t, arrow_types))


_FOLDABLE = (*E.ARITHMETIC, "neg", "extract_year", "extract_month", "extract_day")
_HOST = NumpyBackend()
_SCALARS = BlockEvaluator(EncodedBlock(0, {}), _HOST)


def fold(e: E.Expr) -> E.Expr:
    """Evaluate constant sub-expressions (e.g. date '1998-12-01' - interval '90' day)."""
    if not isinstance(e, Call):
        return e
    args = tuple(fold(a) for a in e.args)
    e = Call(e.op, args)
    if e.op in _FOLDABLE and all(isinstance(a, Lit) for a in args):
        E.check(e, {})
        vec = _SCALARS.vec(e, _SCALARS.everything())
        if vec.is_scalar:
            return scalar_literal(vec)
    return e


# ---- pruning by block statistics ---------------------------------------------------------------


def prune(conjuncts: list[E.Expr], entry: BlockEntry, types: dict[str, Type]) -> tuple[int, ...] | None:
    """The positions of the conjuncts still to evaluate on a block, or None when its min/max rule
    out every row."""
    remaining = []
    for position, conjunct in enumerate(conjuncts):
        verdict = _decide(conjunct, entry, types)
        if verdict is False:
            return None
        if verdict is None:
            remaining.append(position)
    return tuple(remaining)


def _decide(e: E.Expr, entry: BlockEntry, types: dict[str, Type]) -> bool | None:
    """False: no row qualifies; True: every row does; None: the block must be read."""
    if not isinstance(e, Call) or e.op not in (*E.COMPARISONS, "between", "in"):
        return None
    column, literals = e.args[0], e.args[1:]
    if isinstance(column, Col) and e.op == "in" and literals and isinstance(literals[0], E.Values):
        low, high = literals[0].bounds
        literals = (Lit(low, literals[0].type), Lit(high, literals[0].type))
        e = Call("between", (column, *literals))  # for pruning: outside [min, max] of the list means no row
        verdict = _decide(e, entry, types)
        return False if verdict is False else None
    if not isinstance(column, Col) or not all(isinstance(a, Lit) and a.value is not None for a in literals):
        return None
    stats = entry.columns.get(column.name)
    t = types[column.name]
    if stats is None or stats.minimum is None or t.kind is Kind.FLOAT:
        return None
    if t.kind is Kind.STR:
        if not all(isinstance(lit.value, str) for lit in literals):
            return None
        values = [lit.value for lit in literals]
    else:
        values = [exact_fraction(lit, t) for lit in literals]
        if any(v is None for v in values):
            return None
    low, high = stats.minimum, stats.maximum
    complete = stats.null_count == 0
    op = e.op
    if op == "between":
        if values[1] < low or values[0] > high:
            return False
        return True if complete and values[0] <= low and high <= values[1] else None
    if op == "in":
        if all(v < low or v > high for v in values):
            return False
        return None
    v = values[0]
    none, every = {
        "=": (v < low or v > high, low == high == v),
        "<>": (low == high == v, v < low or v > high),
        "<": (low >= v, high < v),
        "<=": (low > v, high <= v),
        ">": (high <= v, low > v),
        ">=": (high < v, low >= v),
    }[op]
    if none:
        return False
    return True if complete and every else None


# ---- running ---------------------------------------------------------------------------------------


@dataclass
class LoadedTable:
    """A table's encoded blocks, held in memory by the node."""

    table: Table
    blocks: list[tuple[BlockEntry, EncodedBlock]]
    stamp: tuple[int, int]


class TableCache:
    """The store's tables in memory; a table is reloaded when its manifest changes."""

    def __init__(self, store: Store):
        self.store = store
        self._tables: dict[str, LoadedTable] = {}
        self._lock = threading.Lock()

    def _stamp(self, name: str) -> tuple[int, int]:
        try:
            st = os.stat(self.store.table_dir(name) / MANIFEST)
        except FileNotFoundError:
            raise TableNotFoundError(f"no table {name!r} on node {self.store.node}") from None
        return st.st_mtime_ns, st.st_size

    def get(self, name: str) -> LoadedTable:
        with self._lock:
            stamp = self._stamp(name)
            loaded = self._tables.get(name)
            if loaded is None or loaded.stamp != stamp:
                table = self.store.table(name)
                loaded = LoadedTable(table, list(table.iter_blocks()), stamp)
                self._tables[name] = loaded
            return loaded

    def names(self) -> list[str]:
        return self.store.tables()


@dataclass
class Piece:
    """One part of a scan's result: a batch, and where it came from."""

    batch: pa.RecordBatch
    block: str
    partition: int | None = None


@dataclass
class Scan:
    """A running scan: iterate `pieces()`; `stats` fills as blocks finish."""

    plan: ScanPlan
    loaded: LoadedTable
    backend: NumpyBackend
    threads: int = 1
    cancel: threading.Event = field(default_factory=threading.Event)
    workers: ScanWorkers | None = None  # the node's worker processes (CPU kernels only)
    stats: ScanStats = field(default_factory=ScanStats)

    def pieces(self) -> Iterator[Piece]:
        if self.plan.having is None:
            yield from self._blocks()
            return
        schema = self.plan.schema
        partials = pa.Table.from_batches([p.batch for p in self._blocks()], schema=schema)
        task = self.plan.task
        merged = final_aggregate(partials, [k.name for k in task.keys], list(task.aggregates))
        merged = merged.select(schema.names).cast(schema)
        evaluator = BlockEvaluator(plain_block(merged), _HOST)
        kept = merged.take(pa.array(evaluator.filter(self.plan.having).indices()))
        for batch in kept.combine_chunks().to_batches():
            yield Piece(batch, "merged")

    def _blocks(self) -> Iterator[Piece]:
        task = self.plan.task
        types = {c.name: E.arrow_kind(c.arrow_type) for c in self.loaded.table.schema.columns}
        conjuncts = E.conjuncts(task.predicate)
        jobs = []
        blocks = [(e, b) for e, b in self.loaded.blocks if self.plan.buckets is None or e.bucket in self.plan.buckets]
        if self.plan.block_range is not None:
            blocks = blocks[slice(*self.plan.block_range)]
        for entry, block in blocks:
            remaining = prune(conjuncts, entry, types)
            if remaining is None:
                self.stats.blocks_skipped += 1
                continue
            jobs.append((entry, block, remaining))
        needed = sorted(self._columns_needed())

        def work(job, device_parts):
            entry, block, remaining = job
            return entry, *run_job(task, conjuncts, block, remaining, self.backend, device_parts)

        emitted = 0
        if self.workers is not None and self.backend.name == "numpy":
            directory = self.loaded.table.store.table_dir(self.plan.table)
            local = functools.partial(work, device_parts=None)
            results = self.workers.map(directory, self.loaded.stamp, task, jobs, local, self.cancel)
        else:
            pipeline = BlockPipeline(self.backend, self.threads)
            results = pipeline.map(jobs, work, lambda job: block_parts(job[1], needed), self.cancel)
        for entry, pieces, stats in results:
            self.stats.add(stats)
            for batch, partition in pieces:
                if self.plan.limit is not None:
                    batch = batch.slice(0, max(0, self.plan.limit - emitted))
                emitted += batch.num_rows
                yield Piece(batch, entry.file, partition)
            if self.plan.limit is not None and emitted >= self.plan.limit:
                return

    def _columns_needed(self) -> set[str]:
        task = self.plan.task
        expressions = [task.predicate, *(o.expr for o in task.outputs), *(k.expr for k in task.keys)]
        expressions += [a.arg for a in task.aggregates]
        return set().union(*(E.columns_of(e) for e in expressions if e is not None))


def scan_table(
    cache: TableCache, request: Any, backend: NumpyBackend, threads: int = 1, cancel: threading.Event | None = None
) -> Scan:
    """Plan a request against a table of the node; raises TableNotFoundError or ScanRequestError."""
    if not isinstance(request, dict) or not isinstance(request.get("table"), str):
        raise ScanRequestError("a scan request names its table: {'table': ...}")
    loaded = cache.get(request["table"])
    plan = plan_scan(request, loaded.table.schema)
    return Scan(plan, loaded, backend, threads, cancel or threading.Event())
