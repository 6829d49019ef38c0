"""Where `cxg load` puts a table it is given no placement for, by its size: replicated on every
node when its size is below `storage.replicate_below` of a node's memory budget (each node then
holds it whole and answers the queries over it alone, PerformSys), hash-placed on its key when
larger (the nodes then scan it in parallel and Spark joins it). A placement the user gives wins.

The size is the source's on disk (Parquet files are compressed and encoded much as the nodes keep
a table; CSV text is larger than that, so a CSV table is replicated a little less readily).
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

from regions import Config, machine_memory, node_memory_budget
from storage import Placement, TableSchema


def replicate_limit(config: Config, nodes: int) -> int:
    """The largest table, in bytes, replicated on each of `nodes` nodes."""
    budget = node_memory_budget(config, nodes) or machine_memory() // max(1, nodes)
    return int(config.storage.replicate_below * budget)


def files_size(paths: list[Path]) -> int:
    """Bytes of the files (a directory's files, recursively)."""
    files = [f for p in paths for f in ([p] if p.is_file() else p.rglob("*")) if f.is_file()]
    return sum(f.stat().st_size for f in files)


def by_size(schema: TableSchema, size: int, limit: int, buckets: int) -> tuple[TableSchema, str]:
    """`schema` placed by its `size` (its own placement is the one for a large table; a replicated
    one becomes hash-placed on its first sort-key column, else its first column), and why."""
    if size <= limit:
        placed = replace(schema, placement=Placement.parse("replicated", buckets))
        return placed, f"{size / 2**20:,.1f} MiB, at most {limit / 2**20:,.0f} MiB: replicated on every node"
    if schema.placement.kind == "hash":
        return schema, f"{size / 2**20:,.1f} MiB, more than {limit / 2**20:,.0f} MiB: {schema.placement}"
    key = (schema.sort_key or [c.name for c in schema.columns])[0]
    placed = replace(schema, placement=Placement.parse(f"hash({key})", buckets))
    return placed, f"{size / 2**20:,.1f} MiB, more than {limit / 2**20:,.0f} MiB: {placed.placement}"
