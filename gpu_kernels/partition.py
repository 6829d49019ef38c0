"""Hash partitioning of a result for the join level (seed 004 §3.2): H = hash(keys) mod P.

The bucket of every row is computed on the device with the placement hash
(`gpu_kernels.placement_hash`), then a histogram (rows per bucket), an exclusive scan (where each bucket
starts) and a scatter (rows reordered bucket by bucket) give the partitioned result: on a GPU, two
CUDA C kernels and a scan (`gpu_kernels/cuda/partition.cu`), the scatter moving the projected
columns' values with their rows, so that they leave the device bucket by bucket. Rows keep their
order within a bucket on the CPU, not on a GPU.
"""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pyarrow as pa

from gpu_kernels.backend import Array, NumpyBackend
from gpu_kernels.column_types import Kind
from gpu_kernels.placement_hash import string_hashes
from gpu_kernels.vectors import Vec, compact_strings


def key_hash(backend: NumpyBackend, vec: Vec) -> Array:
    """uint64 hash input of one key vector, identical to the placement hash of its column."""
    xp = backend.xp
    if vec.type.kind is Kind.STR:
        vec = compact_strings(backend, vec)
        h = backend.asarray(string_hashes(vec.dictionary))[vec.data]
    elif vec.type.kind is Kind.FLOAT:
        h = vec.data.astype(xp.float64).view(xp.uint64)
    else:
        h = vec.data.astype(xp.int64).view(xp.uint64)
    if vec.valid is not None:
        h = xp.where(vec.valid, h, np.uint64(0))
    return h


def partition(backend: NumpyBackend, keys: list[Vec], buckets: int) -> tuple[np.ndarray, np.ndarray]:
    """(row order grouped by bucket, rows per bucket), on the host."""
    order, counts, _, _ = backend.partition_keys([key_hash(backend, vec) for vec in keys], buckets)
    return backend.to_host(order), backend.to_host(counts)


def partition_vecs(
    backend: NumpyBackend, vecs: list[Vec], keys: list[Vec], buckets: int
) -> tuple[list[Vec], np.ndarray]:
    """`vecs` (values of the same rows) with their rows moved on the device bucket by bucket (the
    buckets of `keys`), and the rows per bucket, on the host."""
    moving = [
        (i, field) for i, vec in enumerate(vecs) for field in ("data", "valid") if getattr(vec, field) is not None
    ]
    payload = [getattr(vecs[i], field) for i, field in moving]
    parts = backend.partition_keys([key_hash(backend, vec) for vec in keys], buckets, payload, numbered=False)
    moved = list(vecs)
    for (i, field), array in zip(moving, parts.moved, strict=True):
        moved[i] = replace(moved[i], **{field: array})
    return moved, backend.to_host(parts.counts)


def bucket_pieces(ordered: pa.RecordBatch, counts: np.ndarray) -> list[tuple[pa.RecordBatch, int]]:
    """The non-empty buckets of a batch whose rows come bucket by bucket, `counts` rows each."""
    starts = np.cumsum(counts) - counts
    return [(ordered.slice(int(s), int(c)), b) for b, (s, c) in enumerate(zip(starts, counts, strict=True)) if c]
