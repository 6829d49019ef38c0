"""The rows of an append (`POST /v1/tables/{name}/rows`) read into the table's columns, or refused
whole with an error naming the first bad row (counted from 1) and its column.

Two bodies are read: JSON lines (``application/x-ndjson``, ``application/jsonl``; also the default),
one object per line whose keys are column names, a column left out being NULL; and an Arrow IPC
stream (``application/vnd.apache.arrow.stream``) with the table's columns by name. In JSON, a
DECIMAL is a number or a string, a DATE or TIMESTAMP an ISO 8601 string.
"""

from __future__ import annotations

import datetime
import decimal
import json
import threading
from collections.abc import Callable
from typing import Any

import numpy as np
import pyarrow as pa

from gateway.errors import ApiError
from gateway.media import ARROW
from gateway.sql.catalog import RegionCatalog, TableInfo
from gateway.sql.errors import NodeFull, NodeUnavailable
from storage import NodeError, TableSchema
from storage.appends import Appended, append_rows
from storage.catalog import Column
from storage.errors import DiskFullError, SchemaError

_CONVERSION_ERRORS = (
    pa.ArrowInvalid,
    pa.ArrowTypeError,
    pa.ArrowNotImplementedError,
    TypeError,
    ValueError,
    OverflowError,
)


def invalid_rows(message: str) -> ApiError:
    return ApiError(400, "invalid_rows", message, "22000")


def read_rows(body: bytes, content_type: str, schema: TableSchema) -> pa.Table:
    """The rows of `body` as the table's columns (its Arrow types); `invalid_rows` when one does not fit."""
    if not body.strip():
        raise invalid_rows(f"the append to table {schema.name} has no rows")
    if content_type == ARROW:
        return _arrow_rows(body, schema)
    return _json_rows(body, schema)


def _json_rows(body: bytes, schema: TableSchema) -> pa.Table:
    names = set(schema.column_names)
    records: list[dict[str, Any]] = []
    for line_number, line in enumerate(body.splitlines(), 1):
        if not line.strip():
            continue
        row = len(records) + 1
        try:
            record = json.loads(line)
        except (json.JSONDecodeError, UnicodeDecodeError) as e:
            raise invalid_rows(f"row {row} (line {line_number}) is not JSON: {e}") from None
        if not isinstance(record, dict):
            raise invalid_rows(f"row {row} (line {line_number}) is not an object of column -> value")
        unknown = next((k for k in record if k not in names), None)
        if unknown is not None:
            raise invalid_rows(f"row {row}: table {schema.name} has no column {unknown!r}")
        records.append(record)
    arrays = []
    for column in schema.columns:
        values = [_json_value(column, r.get(column.name), i) for i, r in enumerate(records, 1)]
        arrays.append(_checked(column, lambda vs, c=column: pa.array(vs, type=c.arrow_type), values))
    return pa.Table.from_arrays(arrays, schema=schema.arrow_schema())


def _json_value(column: Column, value: Any, row: int) -> Any:
    """A JSON value as Arrow takes it for `column`'s type."""
    arrow_type = column.arrow_type
    if value is None:
        return None
    if isinstance(value, bool) != pa.types.is_boolean(arrow_type):  # true is no number, 1 no boolean
        raise _bad(column, row, value)
    try:
        if pa.types.is_decimal(arrow_type) and isinstance(value, int | float | str):
            return decimal.Decimal(str(value))
        if pa.types.is_date(arrow_type) and isinstance(value, str):
            return datetime.date.fromisoformat(value)
        if pa.types.is_timestamp(arrow_type) and isinstance(value, str):
            return datetime.datetime.fromisoformat(value)
    except (ValueError, decimal.InvalidOperation):
        raise _bad(column, row, value) from None
    return value


def _arrow_rows(body: bytes, schema: TableSchema) -> pa.Table:
    try:
        table = pa.ipc.open_stream(body).read_all()
    except (pa.ArrowInvalid, OSError) as e:
        raise invalid_rows(f"the body is not an Arrow IPC stream: {e}") from None
    unknown = [n for n in table.column_names if n not in schema.column_names]
    if unknown:
        raise invalid_rows(f"table {schema.name} has no column {unknown[0]!r}")
    arrays = []
    for column in schema.columns:
        if column.name not in table.column_names:
            if not column.nullable:
                raise invalid_rows(f"row 1, column {column.name}: NOT NULL, and the rows have no such column")
            arrays.append(pa.nulls(table.num_rows, column.arrow_type))
            continue
        values = table.column(column.name).combine_chunks()
        arrays.append(_checked(column, lambda vs, c=column: vs.cast(c.arrow_type), values))
    return pa.Table.from_arrays(arrays, schema=schema.arrow_schema())


def _checked(column: Column, convert: Callable[[Any], pa.Array], values: Any) -> pa.Array:
    """`values` converted to the column's type; on failure the first value that fails named by its row."""
    try:
        array = convert(values)
    except _CONVERSION_ERRORS:
        for row in range(len(values)):
            try:
                convert(values[row : row + 1])
            except _CONVERSION_ERRORS:
                value = values[row]
                raise _bad(column, row + 1, value.as_py() if isinstance(value, pa.Scalar) else value) from None
        raise  # every value converts alone: not a value's fault
    if not column.nullable and array.null_count:
        row = int(np.flatnonzero(array.is_null().to_numpy(zero_copy_only=False))[0]) + 1
        raise invalid_rows(f"row {row}, column {column.name}: NULL in a NOT NULL column")
    return array


def _bad(column: Column, row: int, value: Any) -> ApiError:
    shown = repr(value)
    return invalid_rows(f"row {row}, column {column.name}: {shown[:80]} is not of type {column.type}")


Committed = Callable[[str, int, pa.Table, TableInfo], None]  # table, version, rows, the version appended to
_LOCKS: dict[str, threading.RLock] = {}  # appends through this gateway, one table's one at a time
_LOCKS_LOCK = threading.Lock()


def table_lock(name: str) -> threading.RLock:
    """The lock of table `name`'s appends through this gateway (and of what must not interleave with
    them: a standing query's state computed over the table)."""
    with _LOCKS_LOCK:
        return _LOCKS.setdefault(name, threading.RLock())


def append(
    catalog: RegionCatalog, name: str, body: bytes, content_type: str, committed: Committed | None = None
) -> Appended:
    """Append the rows of `body` to table `name` as its new version on every node holding it
    (`storage.appends`); the catalog reads the nodes again, so the next query reads them, and
    `committed` hears the table, its new version, the rows and the version they were appended to,
    the table's lock still held."""
    info = catalog.table(name)
    schema = info.schema
    rows = read_rows(body, content_type, schema)
    placement = schema.placement
    holding = sorted(set(placement.owners)) if placement.kind == "hash" else info.nodes
    down = [node for node in holding if node not in catalog.nodes]
    if down:
        gone = ", ".join(down)
        raise NodeUnavailable(f"table {name} is held by node(s) {gone}, not in the region now: retry shortly")
    urls = {node: catalog.url(node) for node in holding}
    try:
        with table_lock(name):  # on the version the previous append made: the catalog reads the nodes after each
            base = catalog.table(name)
            appended = append_rows(schema, rows, urls, base.version)
            catalog.refresh()
            if committed is not None:
                committed(name, appended.version, rows, base)
    except SchemaError as e:
        raise invalid_rows(str(e)) from None
    except NodeError as e:
        if e.code == "version_conflict":
            raise ApiError(409, e.code, f"appending to table {name}: {e}; retry", "40001", 1) from None
        if e.code == "table_moving":  # its buckets move (`cxg redistribute`): for seconds
            raise ApiError(409, e.code, f"appending to table {name}: {e}", "40001", 1) from None
        if e.code == DiskFullError.code:
            raise NodeFull(str(e)) from None
        raise NodeUnavailable(f"appending to table {name}: {e}; retry shortly") from None
    return appended
