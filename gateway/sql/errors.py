"""Errors of the SQL layer, each with an HTTP status, a stable code and an SQLSTATE-like class."""

from __future__ import annotations


class SqlError(Exception):
    status = 400
    code = "sql_error"
    sqlstate = "42000"


class SqlSyntaxError(SqlError):
    code = "syntax_error"
    sqlstate = "42601"


class ReadOnlyViolation(SqlError):
    """A write statement (INSERT, UPDATE, DELETE, DDL ...) sent to the query endpoint."""

    status = 422
    code = "read_only"
    sqlstate = "25006"


class UnsupportedSql(SqlError):
    """Valid SQL this engine does not run; the message names the construct."""

    status = 422
    code = "unsupported"
    sqlstate = "0A000"


class UndefinedTable(SqlError):
    code = "undefined_table"
    sqlstate = "42P01"


class UndefinedColumn(SqlError):
    code = "undefined_column"
    sqlstate = "42703"


class InvalidLiteral(SqlError):
    """A literal that does not read as the type it is used as (a DATE '1995-13-45')."""

    code = "invalid_literal"
    sqlstate = "22007"


class InvalidQuery(SqlError):
    """Valid SQL whose types or data make it fail: a string added to a number, a cast that does not
    parse, several rows from a scalar subquery. The SQLSTATE names the class of failure."""

    code = "invalid_query"
    sqlstate = "42804"  # datatype mismatch

    def __init__(self, message: str, sqlstate: str | None = None):
        super().__init__(message)
        if sqlstate:
            self.sqlstate = sqlstate


class ExecutionError(SqlError):
    status = 500
    code = "execution_error"
    sqlstate = "XX000"


class QueryCancelled(SqlError):
    status = 499
    code = "cancelled"
    sqlstate = "57014"
