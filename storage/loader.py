"""Loading an Arrow table into one or more node stores.

The steps of seed 004's data preparation: conform the source to the table definition, find
the longest record RS and the block size RC = floor(BS / RS), assign every row its hash bucket
(or replicate), sort each bucket by the table's sort key so runs form, cut RC-row blocks,
encode each block column by column and write it to the store that owns the bucket. Each
store commits atomically at the end.
"""

from __future__ import annotations

import itertools
import os
import uuid
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field, replace

import numpy as np
import pyarrow as pa

from gpu_kernels import Dictionary, to_domain
from storage.block import block_rows, conform, encode_block, record_size
from storage.catalog import TableSchema
from storage.encoding_choice import EncodingOptions
from storage.errors import SchemaError
from storage.ingest import DirectoryTarget, abort_all, next_version
from storage.manifest import Manifest, Sizing
from storage.partitioning import buckets_of
from storage.store import Store

DEFAULT_BLOCK_BUDGET = 64 * 1024 * 1024

Progress = Callable[[int], None]  # called with the number of rows just written


@dataclass(frozen=True)
class LoadOptions:
    block_budget: int = DEFAULT_BLOCK_BUDGET  # BS, bytes
    compression: str = "zstd"
    mode: str = "replace"
    encoding: EncodingOptions = field(default_factory=EncodingOptions)
    workers: int = field(default_factory=lambda: os.cpu_count() or 1)


def _sort_key_arrays(table: pa.Table, names: Sequence[str]) -> list[np.ndarray]:
    """Integer arrays whose lexicographic order is the table's order by `names` (nulls last)."""
    keys = []
    for name in names:
        column = table.column(name)
        domain_values = to_domain(column)
        values = domain_values.values
        if isinstance(values, pa.Array):  # strings: codes into a sorted dictionary
            values = Dictionary.split(values)[1]
        elif pa.types.is_floating(column.type):
            values = np.argsort(np.argsort(values.view(np.float64), kind="stable"), kind="stable")
        if domain_values.valid is not None:
            keys.append((~domain_values.valid).astype(np.int64))
        keys.append(values.astype(np.int64, copy=False))
    return keys


def _row_order(keys: list[np.ndarray]) -> np.ndarray:
    """Stable order by the keys; one packed integer sort when they fit in 63 bits."""
    if not keys:
        return np.arange(0)
    spans = [(int(k.min()), int(k.max())) if len(k) else (0, 0) for k in keys]
    bits = [max(1, (hi - lo).bit_length()) for lo, hi in spans]
    if sum(bits) <= 63:
        packed = np.zeros(len(keys[0]), dtype=np.int64)
        for key, (lo, _), width in zip(keys, spans, bits, strict=True):
            packed = (packed << width) | (key - lo)
        return np.argsort(packed, kind="stable")
    return np.lexsort(keys[::-1])


def plan_layout(table: pa.Table, schema: TableSchema) -> tuple[np.ndarray, np.ndarray]:
    """The row order by (bucket, sort key), and the bucket of each row in that order."""
    placement = schema.placement
    if placement.kind == "hash":
        keys = [to_domain(table.column(k)) for k in placement.keys]
        buckets = buckets_of(keys, placement.buckets)
    else:
        buckets = np.zeros(table.num_rows, dtype=np.int32)
    order = _row_order([buckets.astype(np.int64), *_sort_key_arrays(table, schema.sort_key)])
    return order, buckets[order]


def block_slices(buckets: np.ndarray, rows_per_block: int) -> list[tuple[int, int, int]]:
    """(bucket, start, stop) of each block: at most RC rows, equal sizes within a bucket, never across buckets."""
    if not len(buckets):
        return []
    edges = np.flatnonzero(np.diff(buckets)) + 1
    starts = np.concatenate(([0], edges))
    stops = np.concatenate((edges, [len(buckets)]))
    slices = []
    for start, stop in zip(starts.tolist(), stops.tolist(), strict=True):
        count = -(-(stop - start) // rows_per_block)
        bounds = np.linspace(start, stop, count + 1).round().astype(int).tolist()
        slices.extend((int(buckets[start]), a, b) for a, b in itertools.pairwise(bounds))
    return slices


def load_table(
    stores: Sequence[Store],
    schema: TableSchema,
    source: pa.Table,
    options: LoadOptions | None = None,
    progress: Progress | None = None,
) -> list[Manifest]:
    """Load `source` as table `schema.name` into `stores` (the nodes); returns their manifests.

    Hash-placed tables spread their buckets round-robin over the stores; replicated tables are
    written whole to every store.
    """
    options = options or LoadOptions()
    if not stores:
        raise SchemaError("no store to load into")
    if schema.placement.kind == "hash":
        schema = replace(schema, placement=schema.placement.with_owners([s.node for s in stores]))
    table = conform(source, schema).combine_chunks()  # one chunk: gathers per block stay cheap
    record_bytes = record_size(table, schema)
    sizing = Sizing(options.block_budget, record_bytes, block_rows(options.block_budget, record_bytes))
    order, buckets = plan_layout(table, schema)
    owners = {s.node: DirectoryTarget(s) for s in stores}
    load_id = uuid.uuid4().hex[:12]
    writers = {s.node: s.writer(schema, sizing, options.compression, options.mode, load_id) for s in stores}

    def targets(bucket: int) -> list[str]:
        if schema.placement.kind == "hash":
            return list(schema.placement.holders(bucket))
        return list(owners)

    def encode_and_write(job: tuple[int, int, int]) -> int:
        bucket, start, stop = job
        block = encode_block(table.take(pa.array(order[start:stop])), schema, options.encoding)
        for node in targets(bucket):
            writers[node].write(block, bucket)
        return stop - start

    try:
        with ThreadPoolExecutor(max_workers=max(1, options.workers)) as pool:
            for rows in pool.map(encode_and_write, block_slices(buckets, sizing.block_rows)):
                if progress:
                    progress(rows)
        version = next_version(owners.values(), schema.name)
        return [writers[node].commit(version) for node in owners]
    except BaseException:
        abort_all(owners.values(), schema.name, load_id)  # the nodes that committed go back
        raise
