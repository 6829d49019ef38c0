"""Small appends: rows added to a table as its new version, without a Spark application, many
times a second, without piling up small blocks.

Two steps, as a load's. Each node holding the table *stages* the rows of the buckets it holds
(`stage`, the node's ``POST /v1/tables/{name}/appends/{load}?base=V``): per bucket, it merges them
with the bucket's small blocks in version V (fewer than `TAIL_ROWS` and RC rows: an earlier
append's; merging into larger ones would cost each append a large block's decoding), sorts them by
the sort key, cuts blocks of at most RC rows, writes them as the load's files and answers their
entries, the blocks they replace, the table's sizing and its newest version. Then `append_rows`
commits on every node under one version number, mode ``append`` with the replaced blocks dropped
(`storage.ingest.Commit.drop`): appends leave a bucket at most one small block, however many came.
A node that fails, or a version other than V (another append committed first), aborts the append
on every node: nothing of it is seen.
"""

from __future__ import annotations

import uuid
from collections.abc import Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, replace
from typing import Any

import numpy as np
import pyarrow as pa

from storage.block import conform, encode_block, stream_bytes
from storage.blockfile import BlockEntry, serialize_block, write_file
from storage.catalog import TableSchema
from storage.encoding_choice import EncodingOptions
from storage.errors import VersionConflictError
from storage.ingest import Commit, NodeTarget, Target, abort_all
from storage.loader import block_slices, plan_layout
from storage.manifest import Sizing
from storage.node_client import NodeClient
from storage.store import Table

APPENDS_PATH = "/v1/tables/{name}/appends/{load}"
COMPRESSION = "zstd"
TAIL_ROWS = 16_384  # a block is merged into by appends while it has fewer rows than this (and RC)
_STAGING = ThreadPoolExecutor(8, thread_name_prefix="append-stage")


@dataclass(frozen=True)
class Appended:
    table: str
    version: int
    rows: int
    blocks: int  # block files staged, on all nodes together


def stage(table: Table, load_id: str, rows: pa.Table, base: int) -> dict[str, Any]:
    """On a node: `rows` (of buckets held here) merged into version `base` of `table` as the blocks
    of load `load_id`, written but not committed (see the module's doc)."""
    if table.version != base:
        raise VersionConflictError(f"table {table.name} is at version {table.version}, not {base}: retry")
    schema, sizing = table.schema, table.manifest.sizing
    rows = conform(rows, schema)
    small = [e for e in table.blocks if e.rows < min(sizing.block_rows, TAIL_ROWS)]
    buckets = set(plan_layout(rows, schema, by_sort_key=False)[1].tolist())
    merged = [e for e in small if e.bucket in buckets]
    if merged:
        rows = pa.concat_tables([conform(table.to_arrow(entries=merged), schema), rows])
    rows = rows.combine_chunks()
    order, ordered = plan_layout(rows, schema)
    entries: list[dict[str, Any]] = []
    suffix = ".arrow.zst" if COMPRESSION == "zstd" else ".arrow"
    for number, (bucket, start, stop) in enumerate(block_slices(ordered, sizing.block_rows)):
        block = encode_block(rows.take(pa.array(order[start:stop])), schema, EncodingOptions())
        name = f"{load_id}-{bucket:04d}-a-{number:06d}{suffix}"
        payload, entry = serialize_block(block, name, bucket, COMPRESSION)
        write_file(table.directory, name, payload)
        entries.append(entry.to_json())
    latest = max(table.store.versions(table.name))
    return {"entries": entries, "drop": [e.file for e in merged], "sizing": vars(sizing), "latest": latest}


def append_rows(schema: TableSchema, rows: pa.Table, urls: Mapping[str, str], base: int) -> Appended:
    """Append `rows` to version `base` of table `schema` held by the nodes `urls` (node -> URL,
    every node holding the table): staged on each, then committed on all (see the module's doc)."""
    rows = conform(rows, schema)
    load_id = uuid.uuid4().hex[:12]
    parts = _parts(schema, rows, list(urls))
    targets: dict[str, Target] = {node: NodeTarget(url, node) for node, url in urls.items()}
    path = APPENDS_PATH.format(name=schema.name, load=load_id) + f"?base={base}"

    def staged(node: str) -> dict[str, Any]:
        return NodeClient(urls[node]).post_bytes(path, stream_bytes(parts[node]))

    try:
        answers = dict(zip(parts, _STAGING.map(staged, parts), strict=True))
        version = 1 + max(a["latest"] for a in answers.values())
        load = Commit(schema, Sizing(**next(iter(answers.values()))["sizing"]), COMPRESSION, "append", load_id, version)
        for node, answer in answers.items():
            entries = [BlockEntry.from_json(e) for e in answer["entries"]]
            targets[node].commit(replace(load, base=base, drop=tuple(answer["drop"])), entries)
    except BaseException:
        abort_all(targets.values(), schema.name, load_id)
        raise
    return Appended(schema.name, version, rows.num_rows, sum(len(a["entries"]) for a in answers.values()))


def _parts(schema: TableSchema, rows: pa.Table, nodes: list[str]) -> dict[str, pa.Table]:
    """The rows each node holds: those of its buckets (all of them, for a replicated table)."""
    placement = schema.placement
    if placement.kind != "hash":
        return dict.fromkeys(nodes, rows)
    order, buckets = plan_layout(rows, schema, by_sort_key=False)
    parts = {}
    for node in nodes:
        mine = np.array([node in placement.holders(b) for b in range(placement.buckets)])
        parts[node] = rows.take(pa.array(order[mine[buckets]]))
    return parts
