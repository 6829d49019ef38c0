"""The SQLAlchemy dialect `cxg://`: `create_engine("cxg://host:port")`, `pandas.read_sql` and
table reflection over the gateway's HTTP API (through the DB-API driver `gateway.dbapi`).

    cxg://host:port                      plain HTTP, no token
    cxg://:TOKEN@host:port               bearer token as the password
    cxg://host:port?token=T&protocol=https
"""

from __future__ import annotations

from typing import Any

from sqlalchemy import types as sqltypes
from sqlalchemy.engine import default
from sqlalchemy.engine.url import URL
from sqlalchemy.exc import NoSuchTableError

from gateway import dbapi
from storage import by_sql_name


def sqlalchemy_type(name: str) -> sqltypes.TypeEngine:
    """The SQLAlchemy type of a column the API calls `name` (NullType for one it does not know)."""
    names = by_sql_name(name)
    if names is None:
        return sqltypes.NullType()
    if names.sqlalchemy == "Numeric":
        precision, scale = (int(x) for x in name[len("decimal(") : -1].split(","))
        return sqltypes.Numeric(precision, scale)
    return getattr(sqltypes, names.sqlalchemy)()


class CxgDialect(default.DefaultDialect):
    name = "cxg"
    driver = "http"
    paramstyle = "named"
    supports_statement_cache = True
    supports_native_decimal = True
    supports_native_boolean = True
    supports_alter = False
    supports_sequences = False
    default_paramstyle = "named"

    @classmethod
    def import_dbapi(cls):
        return dbapi

    def create_connect_args(self, url: URL) -> tuple[list, dict[str, Any]]:
        query = dict(url.query)
        scheme = query.pop("protocol", "http")
        token = query.pop("token", None) or url.password
        if query:
            raise ValueError(f"unknown cxg:// option(s): {', '.join(query)} (known: token, protocol)")
        return [], {"url": f"{scheme}://{url.host or '127.0.0.1'}:{url.port or 8080}", "token": token}

    def do_rollback(self, dbapi_connection) -> None:
        pass

    def do_commit(self, dbapi_connection) -> None:
        pass

    def do_ping(self, dbapi_connection) -> bool:
        dbapi_connection.client.get("/healthz")
        return True

    def _get_server_version_info(self, connection) -> tuple:
        return (1,)

    def _get_default_schema_name(self, connection) -> str:
        return "main"

    def _tables(self, connection) -> dict[str, Any]:
        return connection.connection.dbapi_connection.client.tables()

    def get_schema_names(self, connection, **kw) -> list[str]:
        return ["main"]

    def get_table_names(self, connection, schema: str | None = None, **kw) -> list[str]:
        return sorted(self._tables(connection))

    def has_table(self, connection, table_name: str, schema: str | None = None, **kw) -> bool:
        return table_name.lower() in self._tables(connection)

    def get_view_names(self, connection, schema: str | None = None, **kw) -> list[str]:
        return []

    def get_columns(self, connection, table_name: str, schema: str | None = None, **kw) -> list[dict[str, Any]]:
        table = self._tables(connection).get(table_name.lower())
        if table is None:
            raise NoSuchTableError(table_name)
        return [
            {"name": c["name"], "type": sqlalchemy_type(c["type"]), "nullable": c["nullable"], "default": None}
            for c in table["columns"]
        ]

    def get_pk_constraint(self, connection, table_name: str, schema: str | None = None, **kw) -> dict[str, Any]:
        return {"constrained_columns": [], "name": None}

    def get_foreign_keys(self, connection, table_name: str, schema: str | None = None, **kw) -> list:
        return []

    def get_indexes(self, connection, table_name: str, schema: str | None = None, **kw) -> list:
        return []
