"""Parsing and checking SQL: one read-only SELECT (or EXPLAIN of one), constructs this engine runs.

Write statements and several statements are refused as such; valid SQL using a construct the
engine does not run (window functions, set operations, LATERAL, unknown functions ...) is refused
with the construct's name. Columns are qualified against the region's catalog, so unknown tables
and columns are reported before anything runs.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

import sqlglot
from sqlglot import exp
from sqlglot.errors import OptimizeError, ParseError
from sqlglot.optimizer.qualify import qualify

from gateway.sql.errors import ReadOnlyViolation, SqlSyntaxError, UndefinedColumn, UndefinedTable, UnsupportedSql
from gateway.sql.params import bind

# DuckDB's dialect: standard SQL, and NULLs sort last unless NULLS FIRST is written.
DIALECT = "duckdb"
_EXPLAIN = re.compile(r"^\s*(?:--[^\n]*\n\s*|/\*.*?\*/\s*)*explain\b", re.IGNORECASE | re.DOTALL)

WRITES: dict[type, str] = {
    exp.Insert: "INSERT",
    exp.Update: "UPDATE",
    exp.Delete: "DELETE",
    exp.Merge: "MERGE",
    exp.Create: "CREATE",
    exp.Drop: "DROP",
    exp.Alter: "ALTER",
    exp.TruncateTable: "TRUNCATE",
    exp.Into: "SELECT INTO",
}
UNSUPPORTED: dict[type, str] = {
    exp.Window: "window functions (OVER) are not supported",
    exp.Union: "set operations (UNION) are not supported",
    exp.Intersect: "set operations (INTERSECT) are not supported",
    exp.Except: "set operations (EXCEPT) are not supported",
    exp.Lateral: "LATERAL is not supported",
    exp.Unnest: "UNNEST is not supported",
    exp.Explode: "UNNEST is not supported",
    exp.Pivot: "PIVOT is not supported",
    exp.TableSample: "TABLESAMPLE is not supported",
    exp.Rollup: "ROLLUP is not supported",
    exp.Cube: "CUBE is not supported",
    exp.GroupingSets: "GROUPING SETS are not supported",
    exp.Lock: "FOR UPDATE is not supported",
    exp.Values: "VALUES lists are not supported",
}
FUNCTIONS = (
    exp.Sum,
    exp.Avg,
    exp.Count,
    exp.Min,
    exp.Max,
    exp.Extract,
    exp.Substring,
    exp.Case,
    exp.If,
    exp.Cast,
    exp.Coalesce,
    exp.Abs,
    exp.Round,
    exp.Floor,
    exp.Ceil,
    exp.Upper,
    exp.Lower,
    exp.Length,
    exp.Trim,
    exp.Concat,
    exp.Nullif,
    exp.Interval,
    exp.Exists,
    exp.Distinct,
)


@dataclass
class Statement:
    """A checked query: its tree (columns qualified), output names, and whether it is EXPLAIN."""

    tree: exp.Select
    names: list[str]
    explain: bool
    text: str


def syntax_error(e: ParseError) -> SqlSyntaxError:
    """The user's message for a parse error: where, near what, and what was expected."""
    if not e.errors:
        return SqlSyntaxError(f"syntax error: {e}")
    error = e.errors[0]
    description = error["description"].split(" but got <Token")[0]
    near = error.get("highlight") or ""
    return SqlSyntaxError(
        f"syntax error at line {error.get('line')}, column {error.get('col')}"
        f"{f' near {near!r}' if near else ''}: {description}"
    )


def parse(sql: str) -> tuple[exp.Expression, bool]:
    """The single statement of `sql` and whether it was prefixed by EXPLAIN."""
    explain = bool(_EXPLAIN.match(sql))
    text = _EXPLAIN.sub("", sql, count=1) if explain else sql
    try:
        statements = [s for s in sqlglot.parse(text, read=DIALECT) if s is not None]
    except ParseError as e:
        raise syntax_error(e) from None
    if not statements:
        raise SqlSyntaxError("empty statement")
    if len(statements) > 1:
        error = ReadOnlyViolation if _any_write(statements) else UnsupportedSql
        raise error(f"one statement per request, got {len(statements)}")
    statement = statements[0]
    refuse_writes(statement)
    if not isinstance(statement, exp.Select):
        if isinstance(statement, (exp.Union, exp.Intersect, exp.Except)):
            raise UnsupportedSql(UNSUPPORTED[type(statement)])
        raise UnsupportedSql(f"only SELECT queries are supported, not {statement.key.upper()}")
    return statement, explain


def _any_write(statements: list[exp.Expression]) -> bool:
    kinds = (*WRITES, exp.Command)
    return any(isinstance(node, kinds) for statement in statements for node in statement.walk())


def refuse_writes(statement: exp.Expression) -> None:
    if isinstance(statement, exp.Command):
        raise ReadOnlyViolation(f"{statement.name.upper()} statements are refused: the query endpoint is read-only")
    for node in statement.walk():
        for kind, name in WRITES.items():
            if isinstance(node, kind):
                raise ReadOnlyViolation(f"{name} statements are refused: the query endpoint is read-only")


def check_constructs(tree: exp.Expression) -> None:
    for node in tree.walk():
        for kind, message in UNSUPPORTED.items():
            if isinstance(node, kind):
                raise UnsupportedSql(message)
        if isinstance(node, exp.With) and node.args.get("recursive"):
            raise UnsupportedSql("recursive WITH is not supported")
        if isinstance(node, exp.Anonymous):
            raise UnsupportedSql(f"function {node.name.upper()} is not supported")
        if isinstance(node, exp.Func) and not isinstance(node, (*FUNCTIONS, exp.Connector, exp.Binary)):
            raise UnsupportedSql(f"function {node.sql_name()} is not supported")


def output_names(select: exp.Select) -> list[str]:
    """The result's column names: aliases, column names, or the expression's text."""
    names = []
    for projection in select.expressions:
        if isinstance(projection, exp.Alias):
            names.append(projection.alias)
        elif isinstance(projection, exp.Column):
            names.append(projection.name)
        elif isinstance(projection, exp.Star):
            names.append("*")
        else:
            names.append(projection.sql().lower())
    return names


def prepare(sql: str, schema: dict[str, dict[str, str]], params: dict[str, Any] | None = None) -> Statement:
    """Parse, bind the named parameters, refuse what cannot run, and qualify every column against
    `schema` (table -> column -> type)."""
    statement, explain = parse(sql)
    bind(statement, params or {})
    check_constructs(statement)
    ctes = {cte.alias_or_name for cte in statement.find_all(exp.CTE)}
    for table in statement.find_all(exp.Table):
        if table.name and table.name not in ctes and table.name.lower() not in schema:
            raise UndefinedTable(f"table {table.name!r} does not exist")
    names = output_names(statement)
    try:
        tree = qualify(statement, schema=schema, dialect=DIALECT, quote_identifiers=False, identify=False)
    except OptimizeError as e:
        message = str(e)
        if "could not be resolved" in message or "Unknown column" in message or "Column" in message:
            raise UndefinedColumn(message.split(". Line")[0]) from None
        raise UnsupportedSql(message) from None
    if "*" in names:  # SELECT * expands to the columns' own names
        names = [p.alias_or_name for p in tree.expressions]
    return Statement(tree, names, explain, sql)
