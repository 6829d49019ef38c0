"""Query results as the API serves them: JSON (typed columns and rows), CSV or an Arrow IPC
stream, chosen by `Accept`; cut to the row and byte limits; split into chunks."""

from __future__ import annotations

import base64
import datetime
import decimal
import io
import math
from typing import Any

import pyarrow as pa
import pyarrow.csv as pacsv

from balancer import arrow_payload
from gateway.media import ARROW, CSV, JSON
from storage import sql_name

FORMATS = {JSON: JSON, "application/*": JSON, CSV: CSV, "text/*": CSV, ARROW: ARROW, "*/*": JSON}


class NotAcceptable(ValueError):
    code = "not_acceptable"


def negotiate(accept: str | None) -> str:
    """The format for an Accept header: the first supported type by quality, JSON by default."""
    if not accept or not accept.strip():
        return JSON
    offers = []
    for position, part in enumerate(accept.split(",")):
        media, *options = (p.strip() for p in part.split(";"))
        quality = 1.0
        for option in options:
            key, _, value = option.partition("=")
            if key.strip() == "q":
                try:
                    quality = float(value)
                except ValueError:
                    quality = 0.0
        if media.lower() in FORMATS and quality > 0:
            offers.append((-quality, position, FORMATS[media.lower()]))
    if not offers:
        raise NotAcceptable(f"cannot answer with {accept!r}: ask for {JSON}, {CSV} or {ARROW}")
    return min(offers)[2]


def columns(schema: pa.Schema) -> list[dict[str, str]]:
    return [{"name": f.name, "type": sql_name(f.type)} for f in schema]


def json_value(value: Any) -> Any:
    """A Python value as JSON: decimals as strings (exact), dates and times in ISO 8601, bytes in
    base64, non-finite floats as strings."""
    if isinstance(value, decimal.Decimal):
        return str(value)
    if isinstance(value, (datetime.date, datetime.datetime, datetime.time)):
        return value.isoformat()
    if isinstance(value, float) and not math.isfinite(value):
        return str(value)
    if isinstance(value, bytes):
        return base64.b64encode(value).decode()
    return value


def json_rows(table: pa.Table) -> list[list[Any]]:
    names = table.column_names
    data = [table.column(i).to_pylist() for i in range(len(names))]
    return [[json_value(v) for v in row] for row in zip(*data, strict=True)] if names else []


def csv_bytes(table: pa.Table) -> bytes:
    out = io.BytesIO()
    pacsv.write_csv(_plain(table), out)
    return out.getvalue()


def _plain(table: pa.Table) -> pa.Table:
    """Views and encodings CSV cannot write, cast to plain types."""
    fields = []
    for f in table.schema:
        if pa.types.is_string_view(f.type):
            fields.append(pa.field(f.name, pa.string()))
        elif pa.types.is_binary_view(f.type):
            fields.append(pa.field(f.name, pa.binary()))
        else:
            fields.append(f)
    schema = pa.schema(fields)
    return table if schema == table.schema else table.cast(schema)


def limit(table: pa.Table, max_rows: int, max_bytes: int) -> tuple[pa.Table, bool]:
    """At most `max_rows` rows of `table` held in at most `max_bytes` bytes of buffers, and whether
    it was cut. A cut table is a copy: a slice would keep the whole table's buffers alive."""
    keep = min(table.num_rows, max_rows)
    while True:
        kept = table if keep == table.num_rows else table.take(pa.array(range(keep), pa.int64()))
        size = kept.get_total_buffer_size()
        if size <= max_bytes or not keep:
            return kept.combine_chunks() if kept.num_columns else kept, keep < table.num_rows
        keep = min(keep - 1, int(keep * max_bytes / size))


def chunk(table: pa.Table, index: int, rows: int) -> pa.Table:
    return table.slice(index * rows, rows)


def chunk_count(table: pa.Table, rows: int) -> int:
    return max(1, math.ceil(table.num_rows / rows))


def render(table: pa.Table, fmt: str) -> bytes:
    """CSV or Arrow bytes of `table` (JSON bodies are built by the caller)."""
    return csv_bytes(table) if fmt == CSV else arrow_payload(table)
