"""Scans on a storage node: a request, typed and planned; blocks pruned by their statistics;
the per-block operator run through the block pipeline; results streamed block by block.

The request and its checks are `storage.scan_protocol` and `storage.scan_typing`; here it becomes
the node's plan (constant sub-expressions evaluated) and runs. With ``having`` the node merges its
groups and sends those where it holds (the client asserts that every group lives on this node
alone).
"""

from __future__ import annotations

import functools
import os
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np
import pyarrow as pa

from gpu_kernels import (
    BlockEvaluator,
    BlockPipeline,
    BlockTask,
    Call,
    Col,
    EncodedBlock,
    Kind,
    Lit,
    NumpyBackend,
    ResidentScan,
    ScanStats,
    StreamedScan,
    TooLarge,
    Type,
    block_parts,
    exact_fraction,
    final_aggregate,
    fold,
    fused_scan,
    plan_resident,
    plan_resident_projection,
    plan_streamed,
    plan_streamed_projection,
    streamed_chunk_bytes,
)
from gpu_kernels import expr as E
from storage.block import plain_block
from storage.blockfile import BlockEntry
from storage.catalog import TableSchema
from storage.errors import TableNotFoundError
from storage.hash_aggregate import decoding, hash_aggregate, many_groups
from storage.manifest import MANIFEST
from storage.scan_protocol import ScanRequest, ScanRequestError
from storage.scan_typing import type_scan
from storage.scan_workers import Job, Result, ScanWorkers, run_job
from storage.store import Store, Table


@dataclass(frozen=True)
class ScanPlan:
    table: str
    task: BlockTask
    buckets: frozenset[int] | None = None
    limit: int | None = None
    block_range: tuple[int, int] | None = None  # [start, stop) among the blocks kept by `buckets`
    having: E.Expr | None = None  # merge the groups, keep those where it holds
    tests: tuple[BoundsTest | None, ...] = ()  # each conjunct of the predicate as a test of a block's min/max

    @property
    def schema(self) -> pa.Schema:
        return self.task.schema()


# ---- planning ------------------------------------------------------------------------------------


def plan_scan(request: ScanRequest, schema: TableSchema) -> ScanPlan:
    """Type a request against the table and fold its constants; raises ScanRequestError."""
    typed = type_scan(request, schema)
    task = typed.task
    try:
        task = replace(
            task,
            predicate=None if task.predicate is None else fold(task.predicate),
            outputs=tuple(replace(o, expr=fold(o.expr)) for o in task.outputs),
            keys=tuple(replace(k, expr=fold(k.expr)) for k in task.keys),
            aggregates=tuple(replace(a, arg=None if a.arg is None else fold(a.arg)) for a in task.aggregates),
        )
        having = None if typed.having is None else fold(typed.having)
    except E.ExprError as e:
        raise ScanRequestError(str(e)) from e
    buckets = None if request.buckets is None else frozenset(request.buckets)
    types = {c.name: E.arrow_kind(c.arrow_type) for c in schema.columns}
    tests = tuple(bounds_tests(E.conjuncts(task.predicate), types))
    return ScanPlan(request.table, task, buckets, request.limit, request.block_range, having, tests)


kept_plan_scan = functools.lru_cache(maxsize=256)(plan_scan)  # requests a node is asked again: the same plan
_HOST = NumpyBackend()  # the merged groups of a HAVING on the node are few: evaluated on the host
PIECE_ROWS = 1 << 20  # a fused projection's answer goes out in batches of at most this many rows


# ---- pruning by block statistics ---------------------------------------------------------------


@dataclass(frozen=True)
class BoundsTest:
    """A conjunct as a test of a block's min/max: `column op values` (the values in the column's
    domain, integers where whole), made once per scan; `some_only`: it can rule rows out, never all in
    (an IN list tested as the range of its values)."""

    column: str
    op: str
    values: tuple[Any, ...]
    some_only: bool = False


def bounds_tests(conjuncts: list[E.Expr], types: dict[str, Type]) -> list[BoundsTest | None]:
    """Each conjunct's test of a block's statistics, or None where they cannot decide it."""
    return [_bounds_test(conjunct, types) for conjunct in conjuncts]


@dataclass(frozen=True)
class ColumnBounds:
    """One column's min/max over a table version's blocks, as arrays, to test every block at once:
    `known` where the block keeps both (a long string's are not kept), `complete` where it also
    holds no NULL. An unknown bound holds a known one of another block (or None where no block
    has one), so that comparisons stay between values of one kind."""

    low: np.ndarray
    high: np.ndarray
    known: np.ndarray
    complete: np.ndarray

    @classmethod
    def of(cls, entries: list[BlockEntry], column: str) -> ColumnBounds:
        stats = [entry.columns.get(column) for entry in entries]
        known = np.array([s is not None and s.minimum is not None and s.maximum is not None for s in stats], bool)
        filler = next((s.minimum for s, k in zip(stats, known, strict=True) if k), None)
        low = [s.minimum if k else filler for s, k in zip(stats, known, strict=True)]
        high = [s.maximum if k else filler for s, k in zip(stats, known, strict=True)]
        complete = known & np.array([s is not None and s.null_count == 0 for s in stats], bool)
        return cls(_array(low), _array(high), known, complete)


def _array(values: list[Any]) -> np.ndarray:
    """Bounds as int64 where they are all integers that fit (compared fast), else as objects."""
    if all(type(v) is int and -(1 << 63) <= v < 1 << 63 for v in values):
        return np.array(values, dtype=np.int64)
    array = np.empty(len(values), dtype=object)
    array[:] = values
    return array


def prune(
    tests: Sequence[BoundsTest | None], bounds: Callable[[str], ColumnBounds], blocks: int
) -> list[tuple[int, ...] | None]:
    """For each of a table version's `blocks`, the positions of the conjuncts still to evaluate on
    it, or None where its min/max rule out every row; `bounds(column)`: the column's `ColumnBounds`.
    Each test runs over every block at once."""
    if not tests or not blocks:
        return [()] * blocks
    out = np.zeros(blocks, dtype=bool)
    settled = np.zeros((blocks, len(tests)), dtype=bool)
    for position, test in enumerate(tests):
        if test is not None:
            column = bounds(test.column)
            if column.known.any():
                none, every = _decide(test, column.low, column.high)
                out |= none & column.known
                settled[:, position] = every & column.complete & (not test.some_only)
    packed = np.packbits(settled, axis=1)  # a block's settled conjuncts as bytes: blocks alike share their positions
    kinds, kind = np.unique(packed.view(f"V{packed.shape[1]}").reshape(-1), return_inverse=True)
    bits = np.unpackbits(kinds.view(np.uint8).reshape(len(kinds), -1), axis=1)[:, : len(tests)]
    remaining = [tuple(np.flatnonzero(row == 0).tolist()) for row in bits]
    return [None if o else remaining[k] for o, k in zip(out.tolist(), kind.reshape(-1).tolist(), strict=True)]


def _bounds_test(e: E.Expr, types: dict[str, Type]) -> BoundsTest | None:
    """A comparison of a column with literals as a `BoundsTest`; None for anything else."""
    if not isinstance(e, Call) or e.op not in (*E.COMPARISONS, "between", "in"):
        return None
    column, literals = e.args[0], e.args[1:]
    if isinstance(column, Col) and e.op == "in" and literals and isinstance(literals[0], E.Values):
        low, high = literals[0].bounds
        test = _bounds_test(Call("between", (column, Lit(low, literals[0].type), Lit(high, literals[0].type))), types)
        return None if test is None else BoundsTest(test.column, test.op, test.values, some_only=True)
    if not isinstance(column, Col) or not all(isinstance(a, Lit) and a.value is not None for a in literals):
        return None
    t = types[column.name]
    if t.kind is Kind.FLOAT:
        return None
    if t.kind is Kind.STR:
        if not all(isinstance(lit.value, str) for lit in literals):
            return None
        return BoundsTest(column.name, e.op, tuple(lit.value for lit in literals))
    values = [exact_fraction(lit, t) for lit in literals]
    if any(v is None for v in values):
        return None
    return BoundsTest(column.name, e.op, tuple(int(v) if v.denominator == 1 else v for v in values))


def _decide(test: BoundsTest, low: np.ndarray, high: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Per block of bounds [low, high]: whether no row can qualify, and whether every row with a
    value does."""
    values, op = test.values, test.op
    if op == "between":
        return (low > values[1]) | (high < values[0]), (values[0] <= low) & (high <= values[1])
    if op == "in":
        none = np.ones(len(low), dtype=bool)
        for v in values:
            none &= (low > v) | (high < v)
        return none, np.zeros(len(low), dtype=bool)
    v = values[0]
    if op in ("=", "<>"):
        outside, single = (low > v) | (high < v), (low == v) & (high == v)
        return (outside, single) if op == "=" else (single, outside)
    if op == "<":
        return low >= v, high < v
    if op == "<=":
        return low > v, high <= v
    if op == ">":
        return high <= v, low > v
    return high < v, low >= v  # >=


# ---- running ---------------------------------------------------------------------------------------


@dataclass
class LoadedTable:
    """One version of a table, its encoded blocks mapped by the node."""

    table: Table
    blocks: list[tuple[BlockEntry, EncodedBlock]]
    stamp: tuple[int, int] = (0, 0)  # of the current manifest it was read from (a kept version: none)
    _bounds: dict[str, ColumnBounds] = field(default_factory=dict, repr=False, compare=False)

    def bounds(self, column: str) -> ColumnBounds:
        """The column's min/max over the blocks (made on first use; made twice at once, alike)."""
        if column not in self._bounds:
            self._bounds[column] = ColumnBounds.of([entry for entry, _ in self.blocks], column)
        return self._bounds[column]

    @property
    def version(self) -> int:
        return self.table.version


class TableCache:
    """The store's tables, mapped: the current version of each, reloaded when its manifest
    changes, and the replaced versions that queries still read (until the store stops keeping
    them)."""

    def __init__(self, store: Store):
        self.store = store
        self._current: dict[str, LoadedTable] = {}
        self._kept: dict[tuple[str, int], LoadedTable] = {}
        self._lock = threading.Lock()

    def _stamp(self, name: str) -> tuple[int, int]:
        try:
            st = os.stat(self.store.table_dir(name) / MANIFEST)
        except FileNotFoundError:
            raise TableNotFoundError(f"no table {name!r} on node {self.store.node}") from None
        return st.st_mtime_ns, st.st_size

    def get(self, name: str, version: int | None = None) -> LoadedTable:
        """The current version of a table, or version `version` (VersionGoneError once it is not kept)."""
        with self._lock:
            try:
                stamp = self._stamp(name)
            except TableNotFoundError:  # retired (moved away): a scan pinned to a kept version reads it
                if version is None:
                    raise
                current = self._current.pop(name, None)
                if current is not None:
                    self._kept[(name, current.version)] = current
            else:
                current = self._current.get(name)
                if current is None or current.stamp != stamp:
                    if current is not None:
                        self._kept[(name, current.version)] = current
                    table = self.store.table(name)
                    current = self._kept.pop((name, table.version), None)
                    current = LoadedTable(table, current.blocks if current else table.map_blocks(), stamp)
                    self._current[name] = current
                if version is None or version == current.version:
                    return current
            loaded = self._kept.get((name, version))
            if loaded is None:
                table = self.store.table(name, version)
                loaded = self._kept[(name, version)] = LoadedTable(table, table.map_blocks())
            return loaded

    def forget(self, name: str) -> None:
        """Unmap the versions of `name` the store no longer keeps (released, expired)."""
        with self._lock:
            try:
                kept = set(self.store.versions(name))
            except TableNotFoundError:
                kept = set()
            for key in [k for k in self._kept if k[0] == name and k[1] not in kept]:
                del self._kept[key]

    def names(self) -> list[str]:
        return self.store.tables()


@dataclass
class Piece:
    """One part of a scan's result: a batch, and where it came from."""

    batch: pa.RecordBatch
    block: str
    partition: int | None = None


@dataclass
class BlockScan:
    """A running scan of a node's blocks: iterate `pieces()`; `stats` fills as blocks finish."""

    plan: ScanPlan
    loaded: LoadedTable
    backend: NumpyBackend
    threads: int = 1
    cancel: threading.Event = field(default_factory=threading.Event)
    workers: ScanWorkers | None = None  # the node's worker processes (CPU kernels only)
    stats: ScanStats = field(default_factory=ScanStats)
    rows_read: Counter[int] = field(default_factory=Counter)  # bucket -> rows of its blocks read
    seconds_read: Counter[int] = field(default_factory=Counter)  # bucket -> CPU seconds its blocks took

    def pieces(self) -> Iterator[Piece]:
        jobs, task, schema = self.jobs(), self.plan.task, self.plan.schema
        if self.backend.name == "numpy" and self.plan.limit is None and many_groups(task, [j[0] for j in jobs]):
            merged = self._hashed(jobs)
        elif self.plan.having is None:
            yield from self._blocks(jobs)
            return
        else:
            partials = pa.Table.from_batches([p.batch for p in self._blocks(jobs)], schema=schema)
            merged = final_aggregate(partials, [k.name for k in task.keys], list(task.aggregates))
            merged = merged.select(schema.names).cast(schema)
        if self.plan.having is not None:
            evaluator = BlockEvaluator(plain_block(merged), _HOST)
            merged = merged.take(pa.array(evaluator.filter(self.plan.having).indices()))
        for batch in merged.combine_chunks().to_batches():
            yield Piece(batch, "merged")

    def _hashed(self, jobs: list[Job]) -> pa.Table:
        """The scan's groups, each once: its keys and arguments decoded, then grouped in one pass
        (`storage.hash_aggregate`)."""
        arrow_types = {c.name: c.arrow_type for c in self.loaded.table.schema.columns}
        decode = replace(self.plan, task=decoding(self.plan.task, arrow_types), having=None)
        scan = replace(self, plan=decode)  # its stats and counters are this scan's
        rows = pa.Table.from_batches([p.batch for p in scan._blocks(jobs)], schema=decode.schema)
        return hash_aggregate(rows, self.plan.task)

    def jobs(self) -> list[Job]:
        """The blocks to read, each with the positions of the conjuncts its statistics left to
        evaluate (the others pruned: a block none of whose rows can match is skipped)."""
        pruned = prune(self.plan.tests, self.loaded.bounds, len(self.loaded.blocks))
        jobs = []
        buckets = self.plan.buckets
        blocks = [(i, e, b) for i, (e, b) in enumerate(self.loaded.blocks) if buckets is None or e.bucket in buckets]
        if self.plan.block_range is not None:
            blocks = blocks[slice(*self.plan.block_range)]
        for i, entry, block in blocks:
            remaining = pruned[i]
            if remaining is None:
                self.stats.blocks_skipped += 1
                continue
            jobs.append((entry, block, remaining))
            self.rows_read[entry.bucket] += entry.rows
        return jobs

    def run(self, job: Job, device_parts: dict | None = None) -> Result:
        """One job's block: its result pieces and what it touched."""
        entry, block, remaining = job
        task = self.plan.task
        return entry, *run_job(task, E.conjuncts(task.predicate), block, remaining, self.backend, device_parts)

    def columns_needed(self) -> list[str]:
        """The columns the task reads, in name order."""
        task = self.plan.task
        outputs = [*(o.expr for o in task.outputs), *(k.expr for k in task.keys), *(a.arg for a in task.aggregates)]
        return fused_scan.columns_of([task.predicate, *outputs])

    def _blocks(self, jobs: list[Job]) -> Iterator[Piece]:
        task = self.plan.task
        fused = self.backend.keeps_columns and self.backend.fuses and not (task.aggregating and task.partition_buckets)
        if fused and jobs and (task.aggregating or self.plan.limit is None):  # a LIMIT stops early, block by block
            pieces, jobs = self._fused(jobs)
            yield from pieces
            if not jobs:
                return
        needed = self.columns_needed()
        emitted = 0
        if self.workers is not None and self.backend.name == "numpy":
            local = functools.partial(self.run, device_parts=None)
            results = self.workers.map(self.loaded.table.directory, self.loaded.version, task, jobs, local, self.cancel)
        else:
            pipeline = BlockPipeline(self.backend, self.threads)
            results = pipeline.map(jobs, self.run, lambda job: block_parts(job[1], needed), self.cancel)
        for entry, pieces, stats in results:
            self.stats.add(stats)
            self.seconds_read[entry.bucket] += stats.cpu_seconds
            for batch, partition in pieces:
                if self.plan.limit is not None:
                    batch = batch.slice(0, max(0, self.plan.limit - emitted))
                emitted += batch.num_rows
                yield Piece(batch, entry.file, partition)
            if self.plan.limit is not None and emitted >= self.plan.limit:
                return

    def resident(self, jobs: list[Job], share: tuple[int, int] = (0, 1)) -> ResidentScan | None:
        """The partial aggregate (or the projection) of every job's block at once over the current
        GPU's resident columns (`gpu_kernels.resident`), ready to run; None where it cannot run so.
        `share` (d, n): the GPU is the d-th of n, which keeps the table's blocks at positions d,
        d + n, ... (the jobs must be among them)."""
        task, loaded = self.plan.task, self.loaded
        device, devices = share
        kept = range(device, len(loaded.blocks), devices)
        position = {loaded.blocks[p][0].file: i for i, p in enumerate(kept)}
        where = (
            self.backend,
            (
                str(loaded.table.store.root),
                loaded.table.name,
                loaded.version,
                loaded.stamp,
                *(share if devices > 1 else ()),
            ),
            [loaded.blocks[p][1] for p in kept],
            [position[entry.file] for entry, _, _ in jobs],
            task.predicate,
        )
        if not task.aggregating:
            return plan_resident_projection(*where, list(task.outputs), _partition(task))
        return plan_resident(*where, list(task.keys), list(task.aggregates))

    def streamed(self, jobs: list[Job]) -> StreamedScan | None:
        """The partial aggregate (or the projection) of every job's block streamed from host memory
        through the fused kernels, in chunks (`gpu_kernels.streamed`); None where they cannot run it."""
        task = self.plan.task
        blocks, chunk = [block for _, block, _ in jobs], streamed_chunk_bytes(self.backend)
        if not task.aggregating:
            outputs, partition = list(task.outputs), _partition(task)
            return plan_streamed_projection(blocks, range(len(blocks)), task.predicate, outputs, chunk, partition)
        return plan_streamed(blocks, range(len(blocks)), task.predicate, list(task.keys), list(task.aggregates), chunk)

    def _fused(self, jobs: list[Job]) -> tuple[list[Piece], list[Job]]:
        """The partial aggregate of every job's block at once through the fused kernels: from the
        GPU's resident columns (one launch per signature, one wait), or, for columns that outgrow
        the resident area, streamed from host memory in chunks (one wait). A projection likewise
        (two launches per signature, a scan, two waits), hash-partitioned on the device where the
        request asks. Over several GPUs, each takes the blocks at its positions (position mod GPUs)
        at once, on a thread of its own. Returns the pieces and the jobs left to the block
        pipeline: those of each GPU whose share the fused kernels cannot run (all of them on one)."""
        devices = self.backend.xp.cuda.runtime.getDeviceCount()
        if devices == 1:
            shares, outcomes = [jobs], [_timed(lambda: self._fused_on_this_device(jobs, (0, 1)))]
        else:
            position = {entry.file: i for i, (entry, _) in enumerate(self.loaded.blocks)}
            on = [(d, [j for j in jobs if position[j[0].file] % devices == d]) for d in range(devices)]
            on = [(d, share) for d, share in on if share]
            with ThreadPoolExecutor(len(on), thread_name_prefix="cxg-fused") as pool:
                outcomes = list(pool.map(lambda s: _timed(lambda: self._fused_on(s[0], devices, s[1])), on))
            shares = [share for _, share in on]
        done = [(share, *outcome) for share, outcome in zip(shares, outcomes, strict=True) if outcome[0] is not None]
        if not done:
            return [], jobs
        ran = [
            (scan, result, name)
            for _, (scans, results, name), _ in done
            for scan, result in zip(scans, results, strict=True)
        ]
        scans, results = [scan for scan, _, _ in ran], [result for _, result, _ in ran]
        self.stats.add(
            ScanStats(
                blocks=sum(len(share) for share, _, _ in done),
                rows_scanned=sum(scan.rows for scan in scans),
                rows_selected=sum(scan.selected(a) for scan, a in zip(scans, results, strict=True)),
                values_decoded=sum(scan.rows_read * scan.columns_read for scan in scans),  # a sorted range narrows
                cpu_seconds=sum(seconds for _, _, seconds in done),
            )
        )
        for share, _, seconds in done:  # each GPU's time shared by the buckets of its blocks, as their rows
            rows = sum(entry.rows for entry, _, _ in share)
            for entry, _, _ in share:
                self.seconds_read[entry.bucket] += seconds * entry.rows / max(1, rows)
        pieces = [
            Piece(piece, name, bucket)
            for scan, result, name in ran
            for batch, bucket in scan.pieces(result)
            for piece in _slices(batch)
        ]
        fused = {entry.file for share, _, _ in done for entry, _, _ in share}
        return pieces, [job for job in jobs if job[0].file not in fused]

    def _fused_on(self, device: int, devices: int, jobs: list[Job]) -> tuple[list, list, str] | None:
        with self.backend.xp.cuda.Device(device):
            return self._fused_on_this_device(jobs, (device, devices))

    def _fused_on_this_device(self, jobs: list[Job], share: tuple[int, int]) -> tuple[list, list, str] | None:
        """(the fused scans, their results, where they ran) of `jobs` on the current GPU, the
        `share` it keeps; None where they cannot run so."""
        try:
            prepared = self.resident(jobs, share)
            result = prepared.run(self.backend) if prepared is not None else None
            return None if result is None else ([prepared.scan], [result], "resident")
        except TooLarge:  # streamed from host memory
            streamed = self.streamed(jobs)
            results = None if streamed is None else streamed.run(self.backend)
            return None if results is None else (streamed.chunks, results, "streamed")


def _timed(work: Callable[[], Any]) -> tuple[Any, float]:
    """What `work` returns, and the seconds it took."""
    started = time.perf_counter()
    return work(), time.perf_counter() - started


def _partition(task: BlockTask) -> tuple[tuple[int, ...], int] | None:
    """The outputs a projection is hash-partitioned by and its buckets, if it is."""
    if not task.partition_buckets:
        return None
    names = [o.name for o in task.outputs]
    return tuple(names.index(key) for key in task.partition_keys), task.partition_buckets


def _slices(batch: pa.RecordBatch) -> list[pa.RecordBatch]:
    """A fused scan's answer in batches of at most PIECE_ROWS rows (a projection's can be large)."""
    if batch.num_rows <= PIECE_ROWS:
        return [batch]
    return [batch.slice(start, PIECE_ROWS) for start in range(0, batch.num_rows, PIECE_ROWS)]


def scan_table(
    cache: TableCache,
    request: ScanRequest | dict[str, Any],
    backend: NumpyBackend,
    threads: int = 1,
    cancel: threading.Event | None = None,
    kept: bool = False,
) -> BlockScan:
    """Plan a request (or its JSON form) against a table of the node; raises TableNotFoundError or
    ScanRequestError. `kept`: its plan kept for the same request on the same schema (a small
    request: a long IN list is not worth keeping)."""
    if not isinstance(request, ScanRequest):
        request = ScanRequest.from_json(request)
    loaded = cache.get(request.table, request.version)
    plan = (kept_plan_scan if kept else plan_scan)(request, loaded.table.schema)
    return BlockScan(plan, loaded, backend, threads, cancel or threading.Event())
