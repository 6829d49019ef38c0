"""Errors of the SQL layer, each with an HTTP status, a stable code and an SQLSTATE-like class."""

from __future__ import annotations


class SqlError(Exception):
    status = 400
    code = "sql_error"
    sqlstate = "42000"
    retry_after: int | None = None  # seconds after which the same query may succeed


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


class TooComplex(SqlError):
    """A query past one of the documented bounds of the service (`gateway.sql.limits`)."""

    code = "too_complex"
    sqlstate = "54001"  # statement too complex


class ResultTooLarge(SqlError):
    """A result larger than Spark's driver may collect (spark.driver.maxResultSize)."""

    code = "result_too_large"
    sqlstate = "54000"  # program limit exceeded


class NumericOutOfRange(SqlError):
    """A number past what its type holds: arithmetic that overflows 64 bits, a LIMIT past 2^63."""

    code = "numeric_value_out_of_range"
    sqlstate = "22003"


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


class PlannerError(ExecutionError):
    """The SQL the planner wrote for Spark failed where the user's query is fine: a defect of the
    planner, the service's fault (500), never the user's."""

    code = "planner_error"


class QueryCancelled(SqlError):
    status = 499
    code = "cancelled"
    sqlstate = "57014"


class Unavailable(SqlError):
    """What the query reads cannot be reached right now (a node down, a version being replaced,
    Spark restarting); the same query may succeed a moment later (503 with Retry-After)."""

    status = 503
    code = "unavailable"
    sqlstate = "08006"
    retry_after = 1


class TableUnavailable(Unavailable):
    """A table is not fully served: a bucket's node is down, or a load has not reached every node."""

    code = "table_unavailable"


class NodeUnavailable(Unavailable):
    """A node the query was reading went away (or no longer keeps the version the query reads)."""

    code = "node_unavailable"


class SparkUnavailable(Unavailable):
    """The region's Spark is down or restarting; join queries fail until it is back."""

    code = "spark_unavailable"


class OutOfMemory(SqlError):
    """A node's process went past its memory budget running the query's scans (`storage.node_memory`):
    the query needs more than a node process may hold; the node and the other queries go on."""

    status = 503
    code = "out_of_memory"
    sqlstate = "53200"


class DeviceOutOfMemory(SqlError):
    """A node's GPU had no room left in a memory area for the query's scan (the scans running on it
    share the device's memory); the node and the other queries go on, and the query may succeed
    once fewer scans run."""

    status = 503
    code = "device_out_of_memory"
    sqlstate = "53200"
    retry_after = 1


class NodeFull(SqlError):
    """A node has no disk left for the decoded copies of the blocks the query reads."""

    status = 503
    code = "disk_full"
    sqlstate = "53100"


class ForbiddenTable(SqlError):
    """The query reads a table its token may not read."""

    status = 403
    code = "forbidden_table"
    sqlstate = "42501"
