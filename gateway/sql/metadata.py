"""What a client asks about the tables, answered as an ordinary result: SHOW CATALOGS, SHOW
SCHEMAS, SHOW TABLES, DESCRIBE t, SHOW COLUMNS FROM t, and queries over information_schema.schemata,
.tables and .columns. The tables are in one schema, `cxg.main`; a table named with its schema (and
catalog), as Trino's clients name them, is the same table.

Each becomes a SELECT over the catalog's facts written inline as a VALUES list, so the rest of the
engine plans and runs it like any query (filters, joins with other metadata, ORDER BY). The columns
are named as DuckDB names them (DESCRIBE: column_name, column_type, null, key, default, extra;
information_schema as the SQL standard has it)."""

from __future__ import annotations

import re

import sqlglot
from sqlglot import exp

from gateway.sql.errors import UndefinedTable

CATALOG, SCHEMA = "cxg", "main"
Schema = dict[str, dict[str, str]]  # table -> column -> SQL type
_SHOW_COLUMNS = re.compile(r"^\s*columns\s+(?:from|in)\s+(\w+)\s*;?\s*$", re.IGNORECASE)
_SHOW_SCHEMAS = re.compile(r'^\s*(catalogs|schemas(?:\s+(?:from|in)\s+"?(\w+)"?)?)\s*;?\s*$', re.IGNORECASE)
INFORMATION = "information_schema"
# information_schema's tables: their columns (name, SQL type), and their rows from a schema
_INFORMATION: dict[str, list[tuple[str, str]]] = {
    "schemata": [("catalog_name", "VARCHAR"), ("schema_name", "VARCHAR")],
    "tables": [
        ("table_catalog", "VARCHAR"),
        ("table_schema", "VARCHAR"),
        ("table_name", "VARCHAR"),
        ("table_type", "VARCHAR"),
    ],
    "columns": [
        ("table_catalog", "VARCHAR"),
        ("table_schema", "VARCHAR"),
        ("table_name", "VARCHAR"),
        ("column_name", "VARCHAR"),
        ("ordinal_position", "BIGINT"),
        ("column_default", "VARCHAR"),
        ("is_nullable", "VARCHAR"),
        ("data_type", "VARCHAR"),
        ("comment", "VARCHAR"),
    ],
}


def is_metadata(statement: exp.Expression) -> bool:
    """SHOW CATALOGS, SHOW SCHEMAS, SHOW TABLES, DESCRIBE of a table, SHOW COLUMNS FROM a table."""
    if isinstance(statement, exp.Show):
        return statement.name.upper() in ("TABLES", "ALL TABLES")
    if isinstance(statement, exp.Describe):
        return isinstance(statement.this, exp.Table)
    if not (isinstance(statement, exp.Command) and statement.name.upper() == "SHOW"):
        return False
    return bool(_columns_of(statement) or _SHOW_SCHEMAS.match(_command_text(statement)))


def _command_text(statement: exp.Command) -> str:
    text = statement.args.get("expression")
    return text.name if isinstance(text, exp.Expression) else str(text or "")


def _columns_of(statement: exp.Command) -> str | None:
    """The table of SHOW COLUMNS FROM t (which sqlglot leaves as a command: SHOW and its text)."""
    m = _SHOW_COLUMNS.match(_command_text(statement))
    return m[1] if m else None


def as_select(statement: exp.Expression, schema: Schema) -> exp.Select:
    """A metadata statement (`is_metadata`) as the SELECT that answers it."""
    if isinstance(statement, exp.Show):
        where = statement.args.get("from_") or statement.args.get("from")
        if isinstance(where, exp.Table):
            _known_schema(where.name, where.db)
        return _values_select([("name", "VARCHAR")], [(t,) for t in sorted(schema)], "tables", order="name")
    if isinstance(statement, exp.Command) and (shown := _SHOW_SCHEMAS.match(_command_text(statement))):
        if shown[1].lower() == "catalogs":
            return _values_select([("Catalog", "VARCHAR")], [(CATALOG,)], "catalogs")
        if shown[2] and shown[2].lower() != CATALOG:
            raise UndefinedTable(f"catalog {shown[2]!r} does not exist (the one catalog is {CATALOG})")
        return _values_select([("Schema", "VARCHAR")], [(INFORMATION,), (SCHEMA,)], "schemata", order="Schema")
    table = statement.this.name if isinstance(statement, exp.Describe) else _columns_of(statement)
    columns = schema.get(table.lower())
    if columns is None:
        raise UndefinedTable(f"table {table!r} does not exist")
    described = [
        ("column_name", "VARCHAR"),
        ("column_type", "VARCHAR"),
        ("null", "VARCHAR"),
        ("key", "VARCHAR"),
        ("default", "VARCHAR"),
        ("extra", "VARCHAR"),
    ]
    rows = [(name, kind.upper(), "YES", None, None, None) for name, kind in columns.items()]
    return _values_select(described, rows, "columns")


def inline_information_schema(tree: exp.Expression, schema: Schema) -> None:
    """Every reference to information_schema's tables replaced by its rows, in place, and the
    tables named with their schema (`main.t`, `cxg.main.t`) named by their name alone."""
    for table in list(tree.find_all(exp.Table)):
        if not table.db:
            continue
        _known_schema(table.db, table.catalog)
        if table.db.lower() != INFORMATION:
            table.set("db", None)
            table.set("catalog", None)
            continue
        name = table.name.lower()
        if name not in _INFORMATION:
            known = ", ".join(_INFORMATION)
            raise UndefinedTable(f"table {INFORMATION}.{table.name} does not exist ({known} do)")
        rows = _information_rows(name, schema)
        inline = _values_select(_INFORMATION[name], rows, name)
        table.replace(exp.Subquery(this=inline, alias=exp.TableAlias(this=exp.to_identifier(table.alias_or_name))))


def _known_schema(name: str, catalog: str = "") -> None:
    """Refuse a schema (or catalog) other than this service's."""
    if catalog and catalog.lower() != CATALOG:
        raise UndefinedTable(f"catalog {catalog!r} does not exist (the one catalog is {CATALOG})")
    if name.lower() not in (SCHEMA, INFORMATION):
        raise UndefinedTable(f"schema {name!r} does not exist (the tables are in {CATALOG}.{SCHEMA})")


def _information_rows(name: str, schema: Schema) -> list[tuple]:
    if name == "schemata":
        return [(CATALOG, INFORMATION), (CATALOG, SCHEMA)]
    if name == "tables":
        return [(CATALOG, SCHEMA, table, "BASE TABLE") for table in sorted(schema)]
    return [
        (CATALOG, SCHEMA, table, column, position, None, "YES", kind.upper(), None)
        for table in sorted(schema)
        for position, (column, kind) in enumerate(schema[table].items(), start=1)
    ]


def _values_select(
    columns: list[tuple[str, str]], rows: list[tuple], alias: str, order: str | None = None
) -> exp.Select:
    """SELECT the named, typed columns FROM (VALUES rows) AS alias, typed even without rows."""
    names = [name for name, _ in columns]
    typed = ", ".join(f'CAST("{n}" AS {kind}) AS "{n}"' for n, kind in columns)
    if rows:
        values = ", ".join("(" + ", ".join(_literal(v) for v in row) + ")" for row in rows)
        quoted = ", ".join(f'"{n}"' for n in names)
        source = f"(VALUES {values}) AS {alias}({quoted})"
        sql = f"SELECT {typed} FROM {source}"
    else:
        nulls = ", ".join(f'CAST(NULL AS {kind}) AS "{n}"' for n, kind in columns)
        sql = f"SELECT {typed} FROM (SELECT {nulls}) AS {alias} WHERE FALSE"
    select = sqlglot.parse_one(sql, read="duckdb")
    if order:
        select = select.order_by(exp.column(order, quoted=True))
    return select


def _literal(value: object) -> str:
    if value is None:
        return "NULL"
    if isinstance(value, int):
        return str(value)
    return "'" + str(value).replace("'", "''") + "'"
