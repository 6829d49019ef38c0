"""A DB-API 2.0 (PEP 249) driver over the gateway's HTTP API.

    from gateway import dbapi
    conn = dbapi.connect("http://127.0.0.1:8080", token="...")
    cur = conn.cursor()
    cur.execute("SELECT o_orderpriority, count(*) FROM orders WHERE o_orderdate >= :since GROUP BY 1",
                {"since": datetime.date(1995, 1, 1)})
    cur.fetchall()

Parameters are named (`:name`, paramstyle "named") and bound by the server in the syntax tree.
The database is read-only: `commit` and `rollback` have nothing to do.
"""

from __future__ import annotations

import datetime
import time
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

import pyarrow as pa

from gateway.client import Client, GatewayError
from storage import sql_name

apilevel = "2.0"
threadsafety = 2  # threads may share the module and connections, not cursors
paramstyle = "named"


class Warning(Exception):
    pass


class Error(Exception):
    def __init__(self, message: str, code: str = "", sqlstate: str = "", status: int = 0):
        super().__init__(message)
        self.code = code
        self.sqlstate = sqlstate
        self.status = status


class InterfaceError(Error):
    pass


class DatabaseError(Error):
    pass


class DataError(DatabaseError):
    pass


class OperationalError(DatabaseError):
    pass


class IntegrityError(DatabaseError):
    pass


class InternalError(DatabaseError):
    pass


class ProgrammingError(DatabaseError):
    pass


class NotSupportedError(DatabaseError):
    pass


def _error(e: GatewayError) -> Error:
    if e.status == 400:
        # the values are wrong (SQLSTATE class 22: data exception), not the statement
        data = e.code in ("invalid_parameter", "invalid_literal") or e.sqlstate.startswith("22")
        kind = DataError if data else ProgrammingError
    elif e.status == 422:
        kind = NotSupportedError
    elif e.status == 500:
        kind = InternalError
    elif e.status == 0:
        kind = InterfaceError
    else:
        kind = OperationalError  # 401/403, 409 cancelled, 429/503 overload, 504 timeout
    return kind(e.message, e.code, e.sqlstate, e.status)


# ---- types (PEP 249 type objects compare equal to the SQL type names of `description`) ----------


class _Type(frozenset):
    def __eq__(self, other: object) -> bool:
        if isinstance(other, str):
            return other.split("(")[0] in self
        return super().__eq__(other)

    def __hash__(self) -> int:
        return super().__hash__()


STRING = _Type({"varchar"})
BINARY = _Type({"varbinary"})
NUMBER = _Type({"tinyint", "smallint", "integer", "bigint", "real", "double", "decimal", "boolean"})
DATETIME = _Type({"date", "timestamp"})
ROWID = _Type()

Date = datetime.date
Time = datetime.time
Timestamp = datetime.datetime
Binary = bytes


def DateFromTicks(ticks: float) -> datetime.date:
    return datetime.date(*time.localtime(ticks)[:3])


def TimeFromTicks(ticks: float) -> datetime.time:
    return datetime.time(*time.localtime(ticks)[3:6])


def TimestampFromTicks(ticks: float) -> datetime.datetime:
    return datetime.datetime(*time.localtime(ticks)[:6])


# ---- connection and cursor ------------------------------------------------------------------------


def connect(
    url: str | None = None,
    token: str | None = None,
    host: str | None = None,
    port: int | None = None,
    scheme: str = "http",
    timeout: float = 3600.0,
) -> Connection:
    """A connection to the gateway at `url` (or scheme://host:port)."""
    if url is None and host is not None:
        url = f"{scheme}://{host}:{port or 8080}"
    return Connection(Client(url, token, timeout))


class Connection:
    def __init__(self, client: Client):
        self.client = client
        self.closed = False

    def cursor(self) -> Cursor:
        self._check()
        return Cursor(self)

    def commit(self) -> None:
        self._check()

    def rollback(self) -> None:
        self._check()

    def close(self) -> None:
        self.closed = True

    def _check(self) -> None:
        if self.closed:
            raise InterfaceError("the connection is closed")

    def __enter__(self) -> Connection:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class Cursor:
    arraysize = 1

    def __init__(self, connection: Connection):
        self.connection = connection
        self.description: list[tuple] | None = None
        self.rowcount = -1
        self.statement_id: str | None = None
        self.truncated = False
        self._rows: list[tuple] = []
        self._position = 0
        self.closed = False

    def execute(self, operation: str, parameters: Mapping[str, Any] | None = None) -> Cursor:
        self._check()
        if parameters is not None and not isinstance(parameters, Mapping):
            raise ProgrammingError("parameters are named (paramstyle 'named'): pass a mapping of name -> value")
        try:
            result = self.connection.client.execute(operation, dict(parameters or {}))
        except GatewayError as e:
            raise _error(e) from None
        self._load(result.table)
        self.statement_id, self.truncated = result.id, result.truncated
        return self

    def executemany(self, operation: str, seq_of_parameters: Sequence[Mapping[str, Any]]) -> Cursor:
        for parameters in seq_of_parameters:
            self.execute(operation, parameters)
        return self

    def _load(self, table: pa.Table) -> None:
        self.description = [
            (field.name, sql_name(field.type), None, None, *_precision(field.type), field.nullable)
            for field in table.schema
        ]
        columns = [c.to_pylist() for c in table.columns]
        self._rows = list(zip(*columns, strict=True)) if columns else []
        self._position = 0
        self.rowcount = table.num_rows

    def fetchone(self) -> tuple | None:
        self._results()
        if self._position >= len(self._rows):
            return None
        self._position += 1
        return self._rows[self._position - 1]

    def fetchmany(self, size: int | None = None) -> list[tuple]:
        self._results()
        size = self.arraysize if size is None else size
        rows = self._rows[self._position : self._position + size]
        self._position += len(rows)
        return rows

    def fetchall(self) -> list[tuple]:
        self._results()
        rows = self._rows[self._position :]
        self._position = len(self._rows)
        return rows

    def __iter__(self) -> Iterator[tuple]:
        while (row := self.fetchone()) is not None:
            yield row

    def setinputsizes(self, sizes: Any) -> None:
        pass

    def setoutputsize(self, size: Any, column: Any = None) -> None:
        pass

    def close(self) -> None:
        self.closed = True

    def _check(self) -> None:
        if self.closed:
            raise InterfaceError("the cursor is closed")
        self.connection._check()

    def _results(self) -> None:
        self._check()
        if self.description is None:
            raise ProgrammingError("no query has been executed")

    def __enter__(self) -> Cursor:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _precision(t: pa.DataType) -> tuple[int | None, int | None]:
    return (t.precision, t.scale) if pa.types.is_decimal(t) else (None, None)
