"""The join engine: DataFusion's SQL over Arrow tables held in memory, as a node answers a whole
query (`storage.node_query`) and as the coordinator joins sub-queries it fetched whole. One query
is one partition on one core; its operators' memory is bounded when asked; what DataFusion cannot
plan or run is ``node_engine_failed`` with DataFusion's message (whoever asked runs it elsewhere).
"""

from __future__ import annotations

import re
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass

import pyarrow as pa

from storage.errors import OutOfMemoryError, StorageError
from storage.query_protocol import NodeEngineError

_OUTPUT_ROWS = re.compile(r"output_rows=(\d+)")


class QueryCancelledError(StorageError):
    code = "cancelled"
    status = 499


@dataclass
class Answer:
    """What the join engine returned: the rows (none when analyzed), its operators with their
    metrics (when analyzed), the rows of the result and the seconds it took."""

    table: pa.Table
    operators: list[str]
    rows: int
    seconds: float


def run_sql(
    tables: dict[str, pa.Table],
    sql: str,
    kept: Sequence[tuple[str, str]] = (),
    analyze: bool = False,
    memory: int | None = None,
    cancel: threading.Event | None = None,
) -> Answer:
    """`sql` over `tables` (view name -> rows), after each `kept` (name, statement), computed once
    and read by name; `memory` bounds the bytes its operators hold, past which it fails with
    ``out_of_memory``; `cancel` set stops it at the next batch."""
    import datafusion  # loaded where the first joined query runs (`cxg node` loads it at start-up)

    config = datafusion.SessionConfig().with_target_partitions(1)
    runtime = datafusion.RuntimeEnvBuilder()
    if memory is not None:
        runtime = runtime.with_greedy_memory_pool(memory)
    context = datafusion.SessionContext(config, runtime)
    for view, table in tables.items():
        context.from_arrow(table, name=view)
    started = time.perf_counter()
    stopped = cancel or threading.Event()
    try:
        for name, statement in kept:
            if stopped.is_set():
                raise QueryCancelledError("query cancelled")
            context.register_view(name, context.sql(statement).cache())
        if analyze:
            text = context.sql("EXPLAIN ANALYZE " + sql).to_arrow_table().column("plan")[0].as_py()
            found = _OUTPUT_ROWS.search(text)
            rows = int(found[1]) if found else 0
            return Answer(pa.table({}), text.splitlines(), rows, time.perf_counter() - started)
        frame, batches = context.sql(sql), []
        for batch in frame.execute_stream():
            if stopped.is_set():
                raise QueryCancelledError("query cancelled")
            batches.append(batch.to_pyarrow())
        table = pa.Table.from_batches(batches, batches[0].schema if batches else frame.schema())
        return Answer(table, [], table.num_rows, time.perf_counter() - started)
    except Exception as e:  # DataFusion raises plain exceptions: its message says what failed
        raise _engine_error(e) from None


def _engine_error(error: Exception) -> StorageError:
    if isinstance(error, StorageError):
        return error
    message = str(error)
    if isinstance(error, MemoryError) or "Resources exhausted" in message:
        return OutOfMemoryError(f"the query needed more memory than its share of the node's budget ({message})")
    return NodeEngineError(message)
