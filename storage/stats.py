"""Storage statistics of a table: per column, the chains chosen and what they save."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field

from storage.store import Table


@dataclass
class ColumnSummary:
    name: str
    type: str
    chains: Counter = field(default_factory=Counter)  # chain -> number of blocks
    runs: int = 0  # summed over blocks
    max_distinct: int = 0  # largest distinct count of one block
    null_count: int = 0
    sorted_blocks: int = 0
    candidates: Counter = field(default_factory=Counter)  # chain -> bytes summed over blocks
    encoded_bytes: int = 0
    plain_bytes: int = 0

    @property
    def ratio(self) -> float:
        """Plain Arrow bytes per encoded byte."""
        return self.plain_bytes / self.encoded_bytes if self.encoded_bytes else 0.0

    @property
    def chain(self) -> str:
        """The chains, most used first, with block counts when there are several."""
        if len(self.chains) == 1:
            return next(iter(self.chains))
        return ", ".join(f"{c} x{n}" for c, n in self.chains.most_common())


@dataclass
class TableSummary:
    name: str
    version: int
    rows: int
    blocks: int
    block_rows: int
    record_bytes: int
    budget_bytes: int
    placement: str
    sort_key: tuple[str, ...]
    disk_bytes: int
    columns: list[ColumnSummary]

    @property
    def encoded_bytes(self) -> int:
        return sum(c.encoded_bytes for c in self.columns)

    @property
    def plain_bytes(self) -> int:
        return sum(c.plain_bytes for c in self.columns)


def summarize(table: Table) -> TableSummary:
    columns = {c.name: ColumnSummary(c.name, c.type) for c in table.schema.columns}
    for block in table.blocks:
        for name, entry in block.columns.items():
            summary = columns[name]
            summary.chains[entry.chain] += 1
            summary.runs += entry.runs
            summary.max_distinct = max(summary.max_distinct, entry.distinct)
            summary.null_count += entry.null_count
            summary.sorted_blocks += entry.sorted
            summary.candidates.update(entry.candidates)
            summary.encoded_bytes += entry.encoded_bytes
            summary.plain_bytes += entry.plain_bytes
    m = table.manifest
    return TableSummary(
        name=table.name,
        version=m.version,
        rows=m.rows,
        blocks=len(m.blocks),
        block_rows=m.sizing.block_rows,
        record_bytes=m.sizing.record_bytes,
        budget_bytes=m.sizing.budget_bytes,
        placement=str(m.table.placement),
        sort_key=m.table.sort_key,
        disk_bytes=sum(b.bytes for b in m.blocks),
        columns=list(columns.values()),
    )
