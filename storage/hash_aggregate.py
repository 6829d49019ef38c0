"""Grouped scans over many groups. Each block's partial aggregates shrink its rows only when a
block holds few groups; grouped by a key with nearly as many values as rows (an order key), the
blocks' groups are hashed once per block and again to merge them, for little gain. Such a scan
instead decodes its keys and its aggregates' arguments and groups them once, in DataFusion (the
node's join engine), into the partial states the block path would have merged to.

Whether a scan groups so is estimated before it runs, from each block's distinct counts of its key
columns (`storage.blockfile.ColumnEntry.distinct`)."""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import replace

import pyarrow as pa

from gpu_kernels import BlockTask, Col, Expr
from storage.blockfile import BlockEntry
from storage.scan_typing import kernel_output

SHRINK = 8  # the blocks' partial aggregates must cut the rows this many times to be worth their hashing


def many_groups(task: BlockTask, entries: list[BlockEntry]) -> bool:
    """Whether the blocks of `entries` hold more than 1/`SHRINK` as many groups of `task`'s keys as
    rows (a key that is not a column, or a COUNT(DISTINCT), keeps the block path)."""
    if not task.keys or task.partition_buckets or any(a.func == "count_distinct" for a in task.aggregates):
        return False
    if not all(isinstance(k.expr, Col) for k in task.keys):
        return False
    rows = groups = 0
    for entry in entries:
        distinct = math.prod(entry.columns[k.expr.name].distinct for k in task.keys)
        rows, groups = rows + entry.rows, groups + min(entry.rows, distinct)
    return rows > 0 and groups * SHRINK > rows


def decoding(task: BlockTask, arrow_types: Mapping[str, pa.DataType]) -> BlockTask:
    """The projection of what `task` groups: its keys, then each distinct argument of its
    aggregates as ``__a0``, ``__a1`` ..."""
    arguments = _arguments(task)
    outputs = [*task.keys, *(kernel_output(f"__a{i}", arg, arrow_types) for i, arg in enumerate(arguments))]
    return replace(task, outputs=tuple(outputs), keys=(), aggregates=())


def hash_aggregate(rows: pa.Table, task: BlockTask) -> pa.Table:
    """`task`'s aggregates of `rows` (as `decoding` projects them), one row per group: the partial
    states of `task.schema()` (AVG as its sum and count)."""
    import datafusion  # the node's join engine (`cxg node` loads it in the background at start-up)

    arguments = _arguments(task)
    keys = [_quoted(k.name) for k in task.keys]
    outputs = list(keys)
    for spec in task.aggregates:
        argument = "*" if spec.arg is None else f"__a{arguments.index(spec.arg)}"
        if spec.func == "avg":
            outputs += [f"SUM({argument})", f"COUNT({argument})"]
        else:
            outputs.append(f"{spec.func.upper()}({argument})")
    schema = task.schema()
    named = [f"{value} AS {_quoted(field.name)}" for value, field in zip(outputs, schema, strict=True)]
    context = datafusion.SessionContext(datafusion.SessionConfig().with_target_partitions(1))
    context.from_arrow(rows, name="decoded")
    grouped = context.sql(f"SELECT {', '.join(named)} FROM decoded GROUP BY {', '.join(keys)}").to_arrow_table()
    return grouped.cast(schema)


def _arguments(task: BlockTask) -> list[Expr]:
    """The distinct arguments of `task`'s aggregates, in order: ``__a0``, ``__a1`` ..."""
    return list(dict.fromkeys(a.arg for a in task.aggregates if a.arg is not None))


def _quoted(name: str) -> str:
    return '"' + name.replace('"', '""') + '"'
