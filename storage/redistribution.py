"""Moving a table's buckets: between the nodes of a region (a node added or removed, work
rebalanced) or to another region (a copy), planned as one load (`storage.spark_redistribute` runs
it).

A move reads one version of the table (`base`) and makes the next one under the new placement. In
its own region a node keeps the blocks of the buckets it holds under both placements and receives
only the buckets it gains (seed 000's live migration: what stays is not copied); a node of another
region receives everything. The new version keeps the rows' identity (`data`), so regions and
queries know it holds the same rows. Nothing changes for readers until every node has committed it:
the catalog serves the old version, whose holders keep it, until the new one is complete, and then
the new one; a node left holding none of the table retires it after the commit (it stays readable
for the queries pinned to it).
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, replace

from storage.bucket_balance import BucketMove
from storage.catalog import Placement, TableSchema
from storage.errors import RedistributionError


@dataclass(frozen=True)
class TableMove:
    """One table's move, planned."""

    schema: TableSchema  # the new definition: the target placement
    base: int  # the version read
    data: str  # the identity of its rows, kept
    nodes: tuple[str, ...]  # the nodes the new version is committed on
    reads: dict[str, tuple[int, ...]]  # source node -> the buckets read from it
    keep: dict[str, tuple[int, ...]]  # node -> the buckets it keeps of `base`
    gains: dict[str, tuple[int, ...]]  # node -> the buckets written to it
    retire: tuple[str, ...]  # nodes that hold the table and will hold none of it
    local: bool = True  # within the region it is on (the nodes check `base`), or a copy to another
    origin: Placement | None = None  # the placement it was planned from

    @property
    def table(self) -> str:
        return self.schema.name

    @property
    def copied(self) -> int:
        """How many bucket copies travel."""
        return sum(len(buckets) for buckets in self.gains.values())

    def __str__(self) -> str:
        gains = ", ".join(f"{node} +{len(b)}" for node, b in self.gains.items() if b) or "nothing to copy"
        retired = f"; retired on {', '.join(self.retire)}" if self.retire else ""
        return f"{self.table} v{self.base}: {gains}{retired}"


def holders(placement: Placement, nodes: list[str] | tuple[str, ...], bucket: int) -> tuple[str, ...]:
    """The nodes holding a bucket: its holders under a hash placement; every node of a replicated one."""
    return placement.holders(bucket) if placement.kind == "hash" else tuple(nodes)


def plan_move(
    schema: TableSchema,
    base: int,
    data: str,
    held: list[str],
    placement: Placement,
    nodes: list[str],
    same_region: bool = True,
    holding: list[str] = (),
) -> TableMove:
    """The move of `schema` (version `base`, read from the nodes `held` that hold it and answer)
    to `placement` over `nodes` (a replicated table: every one of them; a hash placement: its
    owners). `same_region`: the targets are the nodes the table is on now, so what a node holds
    under both placements stays; else every bucket is copied. `holding`: the target region's nodes
    holding the table now (those the new placement leaves out retire it). Another kind, other keys
    or another number of buckets (a replicated table hash-placed, or the reverse) read every row
    and place it again."""
    if placement.kind == "hash":
        nodes = list(dict.fromkeys(placement.owners))
    if not nodes:
        raise RedistributionError(f"table {schema.name}: no node to move it to")
    keep: dict[str, list[int]] = defaultdict(list)
    gains: dict[str, list[int]] = defaultdict(list)
    reads: dict[str, list[int]] = defaultdict(list)
    before_placement = schema.placement
    rehashed = (placement.kind, placement.keys, placement.buckets) != (
        before_placement.kind,
        before_placement.keys,
        before_placement.buckets,
    )
    for bucket in range(placement.buckets):
        before = _answering(schema, held, bucket) if same_region and not rehashed else []
        after = holders(placement, nodes, bucket)
        for node in after:
            (keep if node in before else gains)[node].append(bucket)
        if not rehashed and any(node not in before for node in after):
            reads[_source(schema, held, bucket, base)].append(bucket)
    if rehashed:  # every row is read and placed again
        buckets = schema.placement.buckets if schema.placement.kind == "hash" else 1
        for bucket in range(buckets):
            reads[_source(schema, held, bucket, base)].append(bucket)
    retire = [n for n in (sorted(held) if same_region else holding) if n not in nodes]
    return TableMove(
        replace(schema, placement=placement),
        base,
        data,
        tuple(nodes),
        {n: tuple(b) for n, b in sorted(reads.items())},
        {n: tuple(keep.get(n, ())) for n in nodes},
        {n: tuple(gains.get(n, ())) for n in nodes},
        tuple(sorted(retire)),
        same_region,
        before_placement,
    )


def _answering(schema: TableSchema, held: list[str], bucket: int) -> list[str]:
    """The holders of a bucket of version `base` that answer."""
    return [n for n in holders(schema.placement, sorted(held), bucket) if n in held]


def _source(schema: TableSchema, held: list[str], bucket: int, base: int) -> str:
    """The node a bucket is read from: the first of its holders that answers."""
    answering = _answering(schema, held, bucket)
    if not answering:
        raise RedistributionError(f"table {schema.name}: no node holding bucket {bucket} of version {base} answers")
    return answering[0]


def moved(placement: Placement, moves: list[BucketMove]) -> Placement:
    """The placement with the `moves` of its buckets applied (each bucket's owner changed)."""
    owners = list(placement.owners)
    for move in moves:
        if owners[move.bucket] != move.source:
            raise RedistributionError(f"bucket {move.bucket} is owned by {owners[move.bucket]}, not {move.source}")
        owners[move.bucket] = move.target
    return replace(placement, owners=tuple(owners))
