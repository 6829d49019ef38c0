"""The MySQL/MariaDB node backend, as PerformSys ran: K connections to a MariaDB server
(SQLAlchemy + PyMySQL), one query per connection at a time, the SQL sent unchanged and its
named parameters bound by the driver. Cancelling a query sends KILL QUERY on a separate
connection."""

from __future__ import annotations

import asyncio
import logging

import pyarrow as pa
from sqlalchemy import create_engine, text
from sqlalchemy.engine import make_url
from sqlalchemy.exc import SQLAlchemyError
from sqlalchemy.pool import NullPool

from balancer.packets import Answer, Request, arrow_payload
from storage import mysql_url

log = logging.getLogger("cxg.mysql")

# MariaDB error numbers -> the gateway's error codes
_CODES = {
    1064: "syntax_error",
    1146: "undefined_table",
    1054: "undefined_column",
    1317: "cancelled",
    1142: "read_only",
    1792: "read_only",
}


def rows_to_arrow(names: list[str], rows: list[tuple]) -> pa.Table:
    columns = list(zip(*rows, strict=True)) if rows else [() for _ in names]
    arrays = []
    for values in columns:
        try:
            arrays.append(pa.array(list(values)))
        except (pa.ArrowInvalid, pa.ArrowTypeError):
            arrays.append(pa.array([None if v is None else str(v) for v in values], pa.string()))
    return pa.Table.from_arrays(arrays, names=names)


class MysqlBackend:
    name = "mysql"

    def __init__(self, url: str, slots: int):
        self.url = mysql_url(url)
        self.engine = create_engine(self.url, pool_size=slots, max_overflow=0, pool_pre_ping=True, pool_recycle=3600)
        self._killer = create_engine(self.url, poolclass=NullPool)
        self._tables: dict[str, int] | None = None

    def info(self) -> dict[str, int]:
        """Tables of the database and their (estimated) rows, as DataBaseInfoPacket carried."""
        if self._tables is None:
            with self.engine.connect() as conn:
                rows = conn.execute(
                    text(
                        "SELECT table_name, COALESCE(table_rows, 0) FROM information_schema.tables "
                        "WHERE table_schema = DATABASE()"
                    )
                ).all()
            self._tables = {str(name).lower(): int(count) for name, count in rows}
        return self._tables

    def check(self) -> None:
        """Fail now (a clear message) when the server cannot be reached."""
        try:
            self.info()
        except SQLAlchemyError as e:
            where = make_url(self.url).render_as_string(hide_password=True)
            raise ConnectionError(f"cannot reach MariaDB at {where}: {e.__cause__ or e}") from None

    def _run(self, request: Request, connection_id: list[int]) -> tuple[list[str], list[tuple]]:
        with self.engine.connect() as conn:
            connection_id.append(conn.exec_driver_sql("SELECT CONNECTION_ID()").scalar())
            if request.params:
                result = conn.execute(text(request.sql), request.params)
            else:  # unchanged: no parameter markers interpreted, so '%' in LIKE stays as written
                cursor = conn.connection.dbapi_connection.cursor()
                try:
                    cursor.execute(request.sql)
                    names = [d[0] for d in cursor.description or []]
                    return names, list(cursor.fetchall()) if cursor.description else []
                finally:
                    cursor.close()
            names = list(result.keys()) if result.returns_rows else []
            return names, [tuple(r) for r in result.all()] if result.returns_rows else []

    def _kill(self, connection_id: int) -> None:
        try:
            with self._killer.connect() as conn:
                conn.exec_driver_sql(f"KILL QUERY {int(connection_id)}")
        except SQLAlchemyError as e:
            log.warning("KILL QUERY %s failed: %s", connection_id, e)

    async def execute(self, request: Request) -> Answer:
        connection_id: list[int] = []
        work = asyncio.ensure_future(asyncio.to_thread(self._run, request, connection_id))
        try:
            names, rows = await asyncio.shield(work)
        except asyncio.CancelledError:
            if connection_id:
                await asyncio.to_thread(self._kill, connection_id[0])
            raise
        except Exception as e:  # the server's error, by its number
            args = getattr(getattr(e, "orig", None) or e, "args", ())
            number = args[0] if args and isinstance(args[0], int) else 0
            message = str(args[1]) if len(args) > 1 else str(e)
            return Answer(id=request.id, node="", ok=False, code=_CODES.get(number, "execution_error"), message=message)
        table = rows_to_arrow(names, rows)
        return Answer(id=request.id, node="", rows=table.num_rows, payload=arrow_payload(table))

    def close(self) -> None:
        self.engine.dispose()
        self._killer.dispose()
