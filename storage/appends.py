"""A small append: rows added to a table as its new version, without a Spark application.

The rows are laid out as a load lays out its rows (a bucket each, sorted by the sort key within
it, cut into blocks of at most the table's RC rows), encoded, uploaded to each of their bucket's
holders (every node holding the table, for a replicated one), and committed with mode ``append``
on every node holding the table under one version number (`storage.ingest.commit_all`): the new
version is the previous one's blocks and these. A node that fails or a load that committed first
aborts the append on every node: nothing of it is seen.
"""

from __future__ import annotations

import uuid
from collections.abc import Mapping
from dataclasses import dataclass

import pyarrow as pa

from storage.block import conform, encode_block
from storage.blockfile import BlockEntry, serialize_block
from storage.catalog import TableSchema
from storage.encoding_choice import EncodingOptions
from storage.ingest import Commit, Target, abort_all, commit_all
from storage.loader import block_slices, plan_layout
from storage.manifest import Sizing

COMPRESSION = "zstd"


@dataclass(frozen=True)
class Appended:
    table: str
    version: int
    rows: int
    blocks: int  # block files written (a replicated table's once, however many nodes hold it)


def append_rows(schema: TableSchema, sizing: Sizing, rows: pa.Table, targets: Mapping[str, Target]) -> Appended:
    """Append `rows` (the table's columns) to table `schema` held by `targets` (node -> target,
    every node holding the table); `sizing` is the table's, whose RC cuts the blocks."""
    rows = conform(rows, schema).combine_chunks()
    order, buckets = plan_layout(rows, schema)
    load_id = uuid.uuid4().hex[:12]
    entries: dict[str, list[BlockEntry]] = {node: [] for node in targets}
    suffix = ".arrow.zst" if COMPRESSION == "zstd" else ".arrow"
    slices = block_slices(buckets, sizing.block_rows)
    try:
        for number, (bucket, start, stop) in enumerate(slices):
            block = encode_block(rows.take(pa.array(order[start:stop])), schema, EncodingOptions())
            name = f"{load_id}-{bucket:04d}-a-{number:06d}{suffix}"
            payload, entry = serialize_block(block, name, bucket, COMPRESSION)
            holders = schema.placement.holders(bucket) if schema.placement.kind == "hash" else list(targets)
            for node in holders:
                targets[node].put(schema.name, load_id, name, payload)
                entries[node].append(entry)
        version = commit_all(list(targets.values()), Commit(schema, sizing, COMPRESSION, "append", load_id), entries)
    except BaseException:
        abort_all(targets.values(), schema.name, load_id)
        raise
    return Appended(schema.name, version, rows.num_rows, len(slices))
