"""Loading an Arrow table into one or more node stores.

The steps of seed 004's data preparation: conform the source to the table definition, find
the longest record RS and the block size RC = floor(BS / RS), assign every row its hash bucket
(or replicate), sort each bucket by the table's sort key so runs form, cut RC-row blocks,
encode each block column by column and write it to the store that owns the bucket. Each
store commits atomically at the end.
"""

from __future__ import annotations

import errno
import functools
import itertools
import os
import uuid
from collections.abc import Callable, Iterable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field, replace
from pathlib import Path

import numpy as np
import pyarrow as pa

from gpu_kernels import Dictionary, sort_keys, to_domain
from storage.block import block_rows, conform, encode_block, longest_strings, record_bytes, record_size
from storage.catalog import TableSchema
from storage.encoding_choice import EncodingOptions
from storage.errors import DiskFullError, SchemaError
from storage.ingest import DirectoryTarget, abort_all, next_version
from storage.manifest import Manifest, Sizing
from storage.partitioning import buckets_of
from storage.sources import Source
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
        values = values.astype(np.int64, copy=False)
        if domain_values.valid is not None:  # nulls last, in source order (not by the values filled in)
            keys.append((~domain_values.valid).astype(np.int64))
            values = np.where(domain_values.valid, values, 0)
        keys.append(values)
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
        return np.argsort(sort_keys(packed, sum(bits)), kind="stable")
    return np.lexsort(keys[::-1])


def plan_layout(table: pa.Table, schema: TableSchema, by_sort_key: bool = True) -> tuple[np.ndarray, np.ndarray]:
    """The row order by (bucket, sort key) (by bucket alone without `by_sort_key`; stable), and
    the bucket of each row in that order."""
    placement = schema.placement
    if placement.kind == "hash":
        keys = [to_domain(table.column(k)) for k in placement.keys]
        buckets = buckets_of(keys, placement.buckets)
    else:
        buckets = np.zeros(table.num_rows, dtype=np.int32)
    sort_key = _sort_key_arrays(table, schema.sort_key) if by_sort_key else []
    order = _row_order([buckets.astype(np.int64), *sort_key])
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
        bounds = (start + np.linspace(0, stop - start, count + 1).round().astype(int)).tolist()  # as from 0
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
    schema = _owned(schema, stores)
    table = conform(source, schema).combine_chunks()  # one chunk: gathers per block stay cheap
    return _write(stores, schema, _sizing(options, record_size(table, schema)), options, [table], progress)


def load_source(
    stores: Sequence[Store],
    schema: TableSchema,
    source: Source,
    options: LoadOptions | None = None,
    progress: Progress | None = None,
) -> list[Manifest]:
    """Load a file source as `load_table` does. A hash-placed table streams: its rows are read
    in batches and spilled to a file per bucket (beside the first store's table, removed once
    written), then each bucket is sorted and written in turn, so memory holds about one bucket
    (the table over `placement.buckets`) whatever the table's size; the blocks are those
    `load_table` writes. A replicated table, small by the size rule, is read whole."""
    if schema.placement.kind != "hash":
        return load_table(stores, schema, source.read(), options, progress)
    options = options or LoadOptions()
    schema = _owned(schema, stores)
    files: dict[int, Path] = {}
    try:
        longest = _spill_buckets(schema, source.batches(SPILL_BATCH_ROWS), stores[0], files)
        sizing = _sizing(options, record_bytes(schema, longest))
        spilled = (_read_spilled(files[bucket]) for bucket in sorted(files))
        return _write(stores, schema, sizing, options, spilled, progress)
    finally:
        for path in files.values():
            path.unlink(missing_ok=True)


SPILL_BATCH_ROWS = 1 << 20  # rows read from the source at a time


def _spill_buckets(
    schema: TableSchema, batches: Iterable[pa.RecordBatch], store: Store, files: dict[int, Path]
) -> dict[str, int]:
    """Write each batch's rows, conformed, to an Arrow IPC file per bucket in the table's directory
    on `store` (source order kept within a bucket; a dead load's files are collected as its other
    leftovers), each added to `files` by its bucket as it is made; the longest string of each column."""
    directory = store.table_dir(schema.name)
    directory.mkdir(parents=True, exist_ok=True)
    longest: dict[str, int] = {}
    writers: dict[int, pa.ipc.RecordBatchFileWriter] = {}
    spill_id = uuid.uuid4().hex[:12]
    try:
        try:
            for batch in batches:
                table = conform(pa.Table.from_batches([batch]), schema)
                for name, length in longest_strings(table, schema).items():
                    longest[name] = max(length, longest.get(name, 0))
                order, buckets = plan_layout(table, schema, by_sort_key=False)
                table = table.take(pa.array(order))
                for bucket, start, stop in block_slices(buckets, table.num_rows):
                    if bucket not in writers:
                        files[bucket] = directory / f".spill-{spill_id}-{bucket}.arrow"
                        writers[bucket] = pa.ipc.new_file(files[bucket], table.schema)
                    writers[bucket].write_table(table.slice(start, stop - start))
        finally:  # every file closed; a failed close (its last bytes) raised once the loop has not
            failed = [e for e in map(_closed, writers.values()) if e is not None]
        if failed:
            raise failed[0]
    except OSError as e:
        if e.errno == errno.ENOSPC:
            raise DiskFullError(
                f"table {schema.name} on node {store.node}: no space left on the disk of {directory} to spill"
            ) from None
        raise
    return longest


def _closed(writer: pa.ipc.RecordBatchFileWriter) -> OSError | None:
    try:
        writer.close()
    except OSError as e:
        return e
    return None


def _read_spilled(path: Path) -> pa.Table:
    with pa.memory_map(str(path)) as source:
        return pa.ipc.open_file(source).read_all().combine_chunks()


def _owned(schema: TableSchema, stores: Sequence[Store]) -> TableSchema:
    """`schema` with a hash placement's buckets owned by `stores`, round-robin."""
    if not stores:
        raise SchemaError("no store to load into")
    if schema.placement.kind == "hash":
        return replace(schema, placement=schema.placement.with_owners([s.node for s in stores]))
    return schema


def _sizing(options: LoadOptions, record_bytes: int) -> Sizing:
    return Sizing(options.block_budget, record_bytes, block_rows(options.block_budget, record_bytes))


def _write(
    stores: Sequence[Store],
    schema: TableSchema,
    sizing: Sizing,
    options: LoadOptions,
    tables: Iterable[pa.Table],
    progress: Progress | None,
) -> list[Manifest]:
    """Write the rows of `tables` (the whole table, or its buckets one by one) as blocks into the
    stores that hold their buckets, then commit a new version on every store (or none)."""
    owners = {s.node: DirectoryTarget(s) for s in stores}
    load_id = uuid.uuid4().hex[:12]
    writers = {s.node: s.writer(schema, sizing, options.compression, options.mode, load_id) for s in stores}

    def targets(bucket: int) -> list[str]:
        if schema.placement.kind == "hash":
            return list(schema.placement.holders(bucket))
        return list(owners)

    def encode_and_write(table: pa.Table, order: np.ndarray, job: tuple[int, int, int]) -> int:
        bucket, start, stop = job
        block = encode_block(table.take(pa.array(order[start:stop])), schema, options.encoding)
        for node in targets(bucket):
            writers[node].write(block, bucket)
        return stop - start

    try:
        with ThreadPoolExecutor(max_workers=max(1, options.workers)) as pool:
            for table in tables:
                order, buckets = plan_layout(table, schema)
                jobs = block_slices(buckets, sizing.block_rows)
                for rows in pool.map(functools.partial(encode_and_write, table, order), jobs):
                    if progress:
                        progress(rows)
        version = next_version(owners.values(), schema.name)
        return [writers[node].commit(version) for node in owners]
    except BaseException:
        abort_all(owners.values(), schema.name, load_id)  # the nodes that committed go back
        raise
