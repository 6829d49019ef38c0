"""The Trino client protocol's documents, written from its public description: a statement's
`QueryResults` (id, infoUri, nextUri, columns with type signatures, data pages, stats, error),
the client's session headers, the statements that only change the session (USE, SET SESSION,
RESET SESSION, PREPARE, DEALLOCATE PREPARE: answered in headers, no query runs), and parameters
as Trino's clients send them (`EXECUTE IMMEDIATE 'sql' USING ...`, or `EXECUTE name USING ...` of
a statement prepared earlier). The handlers (`gateway.handlers.trino`) serve them over the same
admission, limits and statements as the service's own API.
"""

from __future__ import annotations

import base64
import datetime
import decimal
import math
import re
import time
import urllib.parse
import zlib
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import pyarrow as pa
import sqlglot
from sqlglot.tokens import TokenType

from gateway.errors import ApiError
from gateway.sql.metadata import CATALOG, INFORMATION, SCHEMA
from gateway.sql.parse import DIALECT
from gateway.statements import CANCELLED, FAILED, QUEUED, RUNNING, SUCCEEDED, Statement
from storage import sql_name

PAGE_BYTES = 1 << 20  # about this many bytes of JSON per data page
_STATES = {QUEUED: "QUEUED", RUNNING: "RUNNING", SUCCEEDED: "FINISHED", FAILED: "FAILED", CANCELLED: "FAILED"}
_ERROR_TYPES = {"USER_ERROR": 0, "INTERNAL_ERROR": 0x10000, "INSUFFICIENT_RESOURCES": 0x20000}
_CAPACITY = (429, 503, 504, 507)  # statuses that mean the service had no room or time for the query
_PRECISION = {"s": 0, "ms": 3, "us": 6, "ns": 9}
_DURATION = re.compile(r"\s*(\d+(?:\.\d+)?)\s*(ns|us|ms|s|m|h|d)\s*")
_UNITS = {"ns": 1e-9, "us": 1e-6, "ms": 1e-3, "s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0}
_IMMEDIATE = re.compile(r"\s*EXECUTE\s+IMMEDIATE\s+'((?:[^']|'')*)'\s*(?:USING\s+(.+?))?\s*;?\s*", re.I | re.S)
_EXECUTE = re.compile(r"\s*EXECUTE\s+(\w+)\s*(?:USING\s+(.+?))?\s*;?\s*", re.I | re.S)
_PREPARE = re.compile(r"\s*PREPARE\s+(\w+)\s+FROM\s+(.+?)\s*;?\s*", re.I | re.S)
_DEALLOCATE = re.compile(r"\s*DEALLOCATE\s+PREPARE\s+(\w+)\s*;?\s*", re.I)
_USE = re.compile(r'\s*USE\s+(?:"?(\w+)"?\.)?"?(\w+)"?\s*;?\s*', re.I)
_SET = re.compile(r"\s*SET\s+SESSION\s+(\w+)\s*=\s*'?([^';]*)'?\s*;?\s*", re.I)
_RESET = re.compile(r"\s*RESET\s+SESSION\s+(\w+)\s*;?\s*", re.I)
TIME_LIMITS = ("query_max_run_time", "query_max_execution_time")  # the session properties we honour


@dataclass
class Session:
    """What a client's headers say about its session: where, its properties and prepared statements
    (X-Trino-User names the client's user, which the service does not need: the token says who it is)."""

    source: str = ""
    catalog: str = ""
    schema: str = ""
    properties: dict[str, str] = field(default_factory=dict)
    prepared: dict[str, str] = field(default_factory=dict)  # name -> SQL, as the client keeps them

    @classmethod
    def of(cls, headers: Mapping[str, str]) -> Session:
        return cls(
            source=headers.get("X-Trino-Source", ""),
            catalog=headers.get("X-Trino-Catalog", ""),
            schema=headers.get("X-Trino-Schema", ""),
            properties=_pairs(headers.get("X-Trino-Session", ""), "X-Trino-Session"),
            prepared=_pairs(headers.get("X-Trino-Prepared-Statement", ""), "X-Trino-Prepared-Statement"),
        )

    def time_limit(self, default: float) -> float:
        """The query's time limit: the smallest of `default` and the session's limits. A catalog,
        schema or property this service does not have is refused, as Trino refuses them."""
        _known(self.catalog, self.schema)
        limit = default
        for name, value in self.properties.items():
            limit = min(limit, _property(name, value))
        return limit

    def statement(self, sql: str) -> str:
        """The SQL to run: `EXECUTE IMMEDIATE` and `EXECUTE name` with their values bound."""
        if m := _IMMEDIATE.fullmatch(sql):
            return bind(m[1].replace("''", "'"), m[2])
        if m := _EXECUTE.fullmatch(sql):
            if m[1] not in self.prepared:
                raise ApiError(404, "statement_not_prepared", f"no prepared statement {m[1]!r} in this session")
            return bind(self.prepared[m[1]], m[2])
        return sql


def session_change(sql: str) -> tuple[str, dict[str, str]] | None:
    """What a statement that only changes the client's session is (USE, SET SESSION, RESET
    SESSION, PREPARE, DEALLOCATE) and the response headers that tell the client; None for any other."""
    if m := _USE.fullmatch(sql):
        catalog, schema = m[1] or CATALOG, m[2]
        _known(catalog, schema)
        return "USE", {"X-Trino-Set-Catalog": catalog.lower(), "X-Trino-Set-Schema": schema.lower()}
    if m := _SET.fullmatch(sql):
        _property(m[1], m[2])
        return "SET SESSION", {"X-Trino-Set-Session": f"{m[1]}={urllib.parse.quote(m[2])}"}
    if m := _RESET.fullmatch(sql):
        return "RESET SESSION", {"X-Trino-Clear-Session": m[1]}
    if m := _PREPARE.fullmatch(sql):
        return "PREPARE", {"X-Trino-Added-Prepare": f"{m[1]}={urllib.parse.quote_plus(m[2])}"}
    if m := _DEALLOCATE.fullmatch(sql):
        return "DEALLOCATE", {"X-Trino-Deallocated-Prepare": m[1]}
    return None


def _pairs(header: str, name: str) -> dict[str, str]:
    """name=value pairs of a session header, the values URL-encoded."""
    pairs = {}
    for item in filter(None, (p.strip() for p in header.split(","))):
        key, equals, value = item.partition("=")
        if not equals:
            raise ApiError(400, "invalid_session_property", f"{name}: {item!r} is not name=value")
        pairs[key.strip()] = urllib.parse.unquote_plus(value.strip())
    return pairs


def _known(catalog: str, schema: str) -> None:
    if catalog and catalog.lower() != CATALOG:
        raise ApiError(404, "catalog_not_found", f"catalog {catalog!r} does not exist (it is {CATALOG})")
    if schema and schema.lower() not in (SCHEMA, INFORMATION):
        raise ApiError(404, "schema_not_found", f"schema {schema!r} does not exist (it is {SCHEMA})")


def _property(name: str, value: str) -> float:
    """A session property's value (seconds: the only ones are time limits)."""
    if name not in TIME_LIMITS:
        message = f"session property {name!r} does not exist ({', '.join(TIME_LIMITS)} do)"
        raise ApiError(400, "invalid_session_property", message)
    return duration(value, name)


def duration(text: str, name: str) -> float:
    """Seconds of a Trino duration ("30s", "1.5m", "100ms")."""
    m = _DURATION.fullmatch(text)
    if not m or float(m[1]) <= 0:
        raise ApiError(400, "invalid_session_property", f"session property {name}: {text!r} is not a duration like 30s")
    return float(m[1]) * _UNITS[m[2]]


def bind(text: str, using: str | None) -> str:
    """A statement with each `?` replaced by the value of the USING list at its place."""
    try:
        values = sqlglot.parse_one(f"SELECT {using}", read=DIALECT).expressions if using else []
        holes = [t for t in sqlglot.tokenize(text, read=DIALECT) if t.token_type == TokenType.PLACEHOLDER]
    except sqlglot.errors.SqlglotError as e:
        raise ApiError(400, "syntax_error", f"EXECUTE ... USING: {e}", "42601") from None
    holes = [t for t in holes if t.text == "?"]
    if len(holes) != len(values):
        message = f"EXECUTE: the statement has {len(holes)} parameter(s) and USING {len(values)} value(s)"
        raise ApiError(400, "invalid_parameter", message, "22023")
    for hole, value in sorted(zip(holes, values, strict=True), key=lambda pair: -pair[0].start):
        text = text[: hole.start] + value.sql(dialect=DIALECT) + text[hole.end + 1 :]
    return text


def trino_type(t: pa.DataType) -> tuple[str, dict[str, Any]]:
    """A column's Trino type and its type signature."""
    if pa.types.is_timestamp(t):
        precision = _PRECISION[t.unit]
        raw = "timestamp with time zone" if t.tz else "timestamp"
        name = f"timestamp({precision})" + (" with time zone" if t.tz else "")
        return name, _signature(raw, precision)
    if pa.types.is_decimal(t):
        return f"decimal({t.precision},{t.scale})", _signature("decimal", t.precision, t.scale)
    if pa.types.is_null(t):
        return "unknown", _signature("unknown")
    name = sql_name(t)
    if name == "varchar":
        return name, _signature(name, 2147483647)
    if name in ("boolean", "tinyint", "smallint", "integer", "bigint", "real", "double", "date", "varbinary"):
        return name, _signature(name)
    return "varchar", _signature("varchar", 2147483647)  # what Trino has no type for, as its text


def _signature(raw: str, *numbers: int) -> dict[str, Any]:
    return {"rawType": raw, "arguments": [{"kind": "LONG", "value": n} for n in numbers]}


def columns(schema: pa.Schema) -> list[dict[str, Any]]:
    out = []
    for f in schema:
        name, signature = trino_type(f.type)
        out.append({"name": f.name, "type": name, "typeSignature": signature})
    return out


def _value(value: Any, t: pa.DataType) -> Any:
    """A value as Trino's JSON writes it."""
    if value is None or isinstance(value, (bool, int, str)):
        return value
    if isinstance(value, float):
        if math.isfinite(value):
            return value
        return "NaN" if math.isnan(value) else ("Infinity" if value > 0 else "-Infinity")
    if isinstance(value, decimal.Decimal):
        return format(value, "f")
    if isinstance(value, datetime.datetime):
        precision = _PRECISION[t.unit] if pa.types.is_timestamp(t) else 6
        text = value.strftime("%Y-%m-%d %H:%M:%S")
        if precision:
            nanos = value.microsecond * 1000 + int(getattr(value, "nanosecond", 0))
            text += "." + f"{nanos:09d}"[:precision]
        return f"{text} {t.tz}" if pa.types.is_timestamp(t) and t.tz else text
    if isinstance(value, datetime.date):
        return value.isoformat()
    if isinstance(value, bytes):
        return base64.b64encode(value).decode()
    return str(value)


def data(table: pa.Table) -> list[list[Any]]:
    types = [f.type for f in table.schema]
    values = [table.column(i).to_pylist() for i in range(table.num_columns)]
    return [[_value(v, t) for v, t in zip(row, types, strict=True)] for row in zip(*values, strict=True)]


def page_rows(table: pa.Table) -> int:
    """Rows per data page: about PAGE_BYTES of the result's buffers, at least one."""
    if not table.num_rows:
        return 1
    per_row = max(1, table.get_total_buffer_size() // table.num_rows)
    return max(1, PAGE_BYTES // per_row)


def stats(statement: Statement) -> dict[str, Any]:
    end = statement.finished_at or time.time()
    queued = statement.timings.get("queue", end - statement.submitted if statement.state == QUEUED else 0.0)
    execute = statement.timings.get("execute", 0.0)
    doc = _stats(_STATES[statement.state], len(statement.nodes), queued, execute, end - statement.submitted)
    progress = statement.progress.document()  # its sub-queries on the nodes are Trino's splits
    sent, done, rows = progress["subqueries"], progress["subqueries_done"], progress["rows_scanned"]
    doc.update(totalSplits=sent, runningSplits=sent - done, completedSplits=done, processedRows=rows)
    fraction = statement.progress.fraction()
    if fraction is not None:
        doc["progressPercentage"] = round(100.0 * fraction, 1)
    return doc


def _stats(state: str, nodes: int, queued: float, execute: float, elapsed: float) -> dict[str, Any]:
    """A statement's stats as Trino's clients read them (what this service does not count: 0)."""
    counted = {
        "state": state,
        "queued": state == "QUEUED",
        "scheduled": state != "QUEUED",
        "nodes": nodes,
        "wallTimeMillis": round(execute * 1000),
        "queuedTimeMillis": round(queued * 1000),
        "elapsedTimeMillis": round(elapsed * 1000),
    }
    splits = ("totalSplits", "queuedSplits", "runningSplits", "completedSplits", "cpuTimeMillis")
    sizes = ("processedRows", "processedBytes", "physicalInputBytes", "peakMemoryBytes", "spilledBytes")
    return counted | dict.fromkeys(splits + sizes, 0)


def error_object(error: ApiError) -> dict[str, Any]:
    """Trino's error object for one of ours: our code as its name, our SQLSTATE inside."""
    if error.status in _CAPACITY:
        kind = "INSUFFICIENT_RESOURCES"
    else:
        kind = "USER_ERROR" if error.status < 500 else "INTERNAL_ERROR"
    name = "USER_CANCELED" if error.code == "cancelled" else error.code.upper()
    return {
        "message": error.message,
        "errorCode": _ERROR_TYPES[kind] + zlib.crc32(error.code.encode()) % 0x10000,
        "errorName": name,
        "errorType": kind,
        "sqlState": error.sqlstate,
        "code": error.code,
        "failureInfo": {"type": f"cxg.{error.code}", "message": error.message, "suppressed": [], "stack": []},
    }


def failed_document(key: str, error: ApiError, info_uri: str) -> dict[str, Any]:
    """The document of a query refused before it was a statement."""
    stats = _stats("FAILED", 0, 0.0, 0.0, 0.0)
    return {"id": key, "infoUri": info_uri, "stats": stats, "error": error_object(error), "warnings": []}


def session_document(key: str, kind: str, info_uri: str) -> dict[str, Any]:
    """The document of a statement that only changed the session (`kind`): finished, no rows."""
    return {"id": key, "infoUri": info_uri, "stats": _stats("FINISHED", 0, 0.0, 0.0, 0.0), "updateType": kind}


def document(statement: Statement, base: str, page: int) -> dict[str, Any]:
    """The QueryResults of a statement at data page `page`: its state while it runs (nextUri the
    same page), then its pages in turn (nextUri the next one, none after the last)."""
    key = statement.key
    doc: dict[str, Any] = {
        "id": key,
        "infoUri": f"{base}/v1/statements/{key}",
        "stats": stats(statement),
        "warnings": [],
    }
    if not statement.finished:
        doc["nextUri"] = f"{base}/v1/statement/executing/{key}/{page}"
        return doc
    if statement.error is not None or statement.result is None:
        error = statement.error or ApiError(410, "result_evicted", f"the result of {key} is gone", "55000")
        doc["error"] = error_object(error)
        return doc
    table = statement.result
    doc["columns"] = columns(table.schema)
    rows = page_rows(table)
    part = table.slice(page * rows, rows)
    if part.num_rows:
        doc["data"] = data(part)
    if (page + 1) * rows < table.num_rows:
        doc["nextUri"] = f"{base}/v1/statement/executing/{key}/{page + 1}"
    if statement.truncated:
        doc["warnings"] = [
            {
                "warningCode": {"code": 1, "name": "RESULT_TRUNCATED"},
                "message": f"the result was cut to {table.num_rows:,} rows (gateway.max_rows, gateway.result_bytes)",
            }
        ]
    return doc
