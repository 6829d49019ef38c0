"""The per-block operator a storage node runs: select, then project or partially aggregate,
optionally hash-partitioned for the join level."""

from __future__ import annotations

from dataclasses import dataclass

import pyarrow as pa

from gpu_kernels import fused_scan
from gpu_kernels.aggregate import AggSpec, NamedExpr, partial_aggregate
from gpu_kernels.backend import Array, NumpyBackend
from gpu_kernels.decoding import ScanStats
from gpu_kernels.encoded_block import EncodedBlock
from gpu_kernels.evaluate import BlockEvaluator
from gpu_kernels.expr import Expr
from gpu_kernels.partition import bucket_pieces, partition, partition_vecs
from gpu_kernels.vector_functions import materialize
from gpu_kernels.vectors import from_arrow, to_arrow


@dataclass(frozen=True)
class BlockTask:
    """What to compute on every block of a scan."""

    predicate: Expr | None
    outputs: tuple[NamedExpr, ...] = ()  # projection
    keys: tuple[NamedExpr, ...] = ()  # aggregation: group keys ...
    aggregates: tuple[AggSpec, ...] = ()  # ... and partial aggregates
    partition_keys: tuple[str, ...] = ()  # output columns to hash-partition by
    partition_buckets: int = 0

    @property
    def aggregating(self) -> bool:
        return bool(self.keys or self.aggregates)

    def schema(self) -> pa.Schema:
        if self.aggregating:
            fields = [pa.field(k.name, k.arrow_type) for k in self.keys]
            return pa.schema(fields + [f for a in self.aggregates for f in a.fields()])
        return pa.schema([pa.field(o.name, o.arrow_type) for o in self.outputs])


def run_block(
    task: BlockTask,
    block: EncodedBlock,
    backend: NumpyBackend,
    stats: ScanStats,
    predicate: Expr | None = None,
    device_parts: dict[int, tuple[object, Array]] | None = None,
) -> list[tuple[pa.RecordBatch, int | None]]:
    """The block's result as (batch, hash bucket or None) pieces; `predicate` overrides the task's
    (the scan passes the conjuncts its block statistics could not decide)."""
    ev = BlockEvaluator(block, backend, stats, dict(device_parts or {}))
    stats.blocks += 1
    stats.rows_scanned += block.rows
    fused = None
    if task.aggregating and backend.fuses:
        fused = fused_scan.plan_block(block, predicate, list(task.keys), list(task.aggregates))
    if fused is not None:
        images = fused.images
        accumulators = backend.fused_aggregate(fused, lambda column, key: ev.dev(images[column].buffers[key]))
        batch = fused.assemble(accumulators)
        stats.rows_selected += fused.selected(accumulators)
        stats.values_decoded += block.rows * fused.columns_read
        return _partitioned(task, backend, batch) if task.partition_buckets else [(batch, None)]
    sel = ev.filter(predicate)
    stats.rows_selected += sel.count()
    if task.aggregating:
        batch = partial_aggregate(ev, sel, list(task.keys), list(task.aggregates))
        return _partitioned(task, backend, batch) if task.partition_buckets else [(batch, None)]
    rows = sel.count()
    vecs = [ev.vec(o.expr, sel) for o in task.outputs]
    if task.partition_buckets:
        names = [o.name for o in task.outputs]
        keys = [materialize(backend, vecs[names.index(name)], rows) for name in task.partition_keys]
        vecs, counts = partition_vecs(backend, vecs, keys, task.partition_buckets)
    arrays = [to_arrow(backend, vec, rows, o.arrow_type) for vec, o in zip(vecs, task.outputs, strict=True)]
    batch = pa.RecordBatch.from_arrays(arrays, schema=task.schema())
    return bucket_pieces(batch, counts) if task.partition_buckets else [(batch, None)]


def _partitioned(task: BlockTask, backend: NumpyBackend, batch: pa.RecordBatch) -> list[tuple[pa.RecordBatch, int]]:
    """Partition an (already small) aggregate result by its key columns."""
    key_vecs = [from_arrow(backend, batch.column(name)) for name in task.partition_keys]
    order, counts = partition(backend, key_vecs, task.partition_buckets)
    return bucket_pieces(batch.take(pa.array(order)), counts)
