"""Errors of the HTTP API: a status, a stable code, an SQLSTATE-like class and a message naming
the problem, answered as ``{"error": {"code", "sqlstate", "message"}}``.

`ApiError.of` is the one place where the gateway's process tells what a failure means: the SQL
layer's errors carry their own status and code; a node's error, the balancer's and Spark's are
translated here (a node refusing a scan over the query's types, or Spark failing on the query's
data or types, is the query's fault; a node or Spark going away may be retried; the rest is the
service's fault)."""

from __future__ import annotations

import asyncio
import logging
import re
from collections.abc import Callable

from aiohttp import web

from balancer import DispatchFailed
from gateway.sql.errors import (
    DeviceOutOfMemory,
    ExecutionError,
    InvalidQuery,
    NodeFull,
    NodeUnavailable,
    NumericOutOfRange,
    OutOfMemory,
    PlannerError,
    ResultTooLarge,
    SparkUnavailable,
    SqlError,
    TooComplex,
    UnsupportedSql,
)
from gpu_kernels import OverflowInExpression
from storage import OUT_OF_MEMORY, DiskFullError, NodeError, StorageError

# codes a pass-through node (MariaDB) or the balancer may report -> (HTTP status, SQLSTATE class)
DISPATCH_CODES: dict[str, tuple[int, str]] = {
    "syntax_error": (400, "42601"),
    "undefined_table": (400, "42P01"),
    "undefined_column": (400, "42703"),
    "invalid_parameter": (400, "22023"),
    "read_only": (422, "25006"),
    "unsupported": (422, "0A000"),
    "unknown_query_type": (422, "0A000"),
    "cancelled": (409, "57014"),
    "busy": (503, "53000"),
    "queue_full": (503, "53000"),
    "no_nodes": (503, "08006"),
    "node_lost": (503, "08006"),
    "draining": (503, "57P03"),
    "node_draining": (503, "57P03"),
    "timeout": (504, "57014"),
    "execution_error": (500, "XX000"),
}
DEFECTS = ("internal_error", "execution_error")  # the service's own failures: logged with their traceback
_PATH = re.compile(r"(?<![\w/:.])(?:/[^\s'\"/:,;()]+){2,}")
log = logging.getLogger("cxg.gateway")
RETRY_AFTER = {
    "busy": 1,
    "queue_full": 5,
    "no_nodes": 5,
    "node_lost": 1,
    "too_many_queries": 1,
    "draining": 5,
    "node_draining": 5,
}


class ApiError(Exception):
    def __init__(self, status: int, code: str, message: str, sqlstate: str = "42000", retry_after: int | None = None):
        super().__init__(message)
        self.status = status
        self.code = code
        self.sqlstate = sqlstate
        self.retry_after = retry_after

    @property
    def message(self) -> str:
        return str(self)

    def body(self) -> dict:
        return {"code": self.code, "sqlstate": self.sqlstate, "message": without_paths(self.message)}

    def response(self, **extra) -> web.Response:
        headers = {"Retry-After": str(self.retry_after)} if self.retry_after is not None else None
        return web.json_response({"error": self.body(), **extra}, status=self.status, headers=headers)

    @classmethod
    def of(cls, error: BaseException, query: bool = False) -> ApiError:
        """The API error for `error`. With `query`, it is a query's failure, planning or running
        (raised by the engine, a node or Spark), and what it means for the query is told: any
        failure not known otherwise is `execution_error`; without, it is a defect
        (`internal_error`)."""
        if isinstance(error, ApiError):
            return error
        if query and not isinstance(error, (SqlError, DispatchFailed)):
            error = _query_failure(error)
        if isinstance(error, SqlError):
            status = error.status if error.status != 499 else 409
            return cls(status, error.code, str(error), error.sqlstate, error.retry_after)
        if isinstance(error, DispatchFailed):
            status, sqlstate = DISPATCH_CODES.get(error.code, (500, "XX000"))
            return cls(status, error.code, str(error), sqlstate, RETRY_AFTER.get(error.code))
        return cls(500, "internal_error", f"{type(error).__name__}: {error}", "XX000")


def without_paths(message: str) -> str:
    """`message` with each server file path cut to its last part (`/srv/cxg/node-0/t/1.blk` ->
    `.../1.blk`): where the server keeps its files is not the client's business."""
    return _PATH.sub(lambda m: f".../{m[0].rsplit('/', 1)[1]}", message)


def bad_request(message: str, code: str = "invalid_request") -> ApiError:
    return ApiError(400, code, message, "22023")


def timeout(seconds: float) -> ApiError:
    return ApiError(504, "timeout", f"query did not finish within {seconds:g} s and was stopped", "57014")


@web.middleware
async def error_middleware(request: web.Request, handler) -> web.StreamResponse:
    """Every failure of a handler as the API's error body; aiohttp's own (404, 405, 413) too."""
    try:
        return await handler(request)
    except ApiError as e:
        return e.response()
    except SqlError as e:  # the SQL layer's refusal (an append's or a subscription's table): no defect
        return ApiError.of(e).response()
    except web.HTTPException as e:
        if e.status < 400:
            raise
        code = {404: "not_found", 405: "method_not_allowed", 413: "request_too_large"}.get(e.status, "http_error")
        message = e.text if e.status == 413 else f"{e.reason}: {request.method} {request.path}"
        return ApiError(e.status, code, message, "42000").response()
    except asyncio.CancelledError:
        raise
    except Exception as e:  # a defect: answered in the API's format, told in the log
        log.exception("%s %s failed", request.method, request.path)
        return ApiError.of(e).response()


MAX_RESULT_SIZE = "spark.driver.maxResultSize"  # named by Spark's error for a result past it
USER_ERROR_CLASSES = ("21", "22", "42")  # SQLSTATE classes: cardinality, data, syntax or access rule
# a node that went away mid-query, or no longer keeps the version the query reads: the same query
# run again reads what is served then
NODE_GONE = ("node_unreachable", "version_gone", "table_not_found")
# a node's error code (or the kernels' at the coordinator) -> what it tells the user (any other
# storage error is the service's fault)
NODE_ERRORS: dict[str, Callable[[str], SqlError]] = {
    "invalid_scan": InvalidQuery,  # the scan does not type-check: a string where a number is needed
    "numeric_overflow": lambda message: NumericOutOfRange(  # arithmetic that may pass 64 bits
        f"{message}: the result could pass 64 bits (cast to DOUBLE to compute it approximately)"
    ),
    **dict.fromkeys(NODE_GONE, lambda message: NodeUnavailable(f"{message}; retry shortly")),
    OUT_OF_MEMORY: OutOfMemory,
    DeviceOutOfMemory.code: DeviceOutOfMemory,
    DiskFullError.code: NodeFull,
}


def _query_failure(error: BaseException) -> SqlError:
    """What a failure while a query was planned or ran tells the user: a node refusing a scan over
    the query's types (a string where a number is needed) and Spark failing on the query's data or
    types are the query's fault (400); anything else is the service's (500)."""
    if isinstance(error, (NodeError, OverflowInExpression)) and error.code in NODE_ERRORS:  # a node's, or ours
        return NODE_ERRORS[error.code](str(error))
    if isinstance(error, StorageError):
        return ExecutionError(f"{error.code}: {error}")
    if _spark_gone(error):
        return SparkUnavailable("Spark stopped answering while the query ran (it is restarted for the next one)")
    text = str(error).strip()
    if MAX_RESULT_SIZE in text:
        return ResultTooLarge(
            f"the result is larger than Spark may collect ({MAX_RESULT_SIZE}): select fewer rows or columns"
        )
    message = f"query failed: {text.splitlines()[0] if text else type(error).__name__}"
    sql_state = getattr(error, "getSqlState", None)  # Spark's errors carry one (pyspark is imported lazily)
    sqlstate = sql_state() if callable(sql_state) else None
    if sqlstate == NumericOutOfRange.sqlstate:
        return NumericOutOfRange(message)
    if sqlstate and sqlstate.startswith("54"):  # program limit exceeded: too complex for Spark's parser
        return TooComplex(message)
    if sqlstate and sqlstate.startswith("0A"):  # a feature Spark lacks (its message names it)
        return UnsupportedSql(f"not supported: {message.removeprefix('query failed: ')}")
    if sqlstate and sqlstate.startswith(USER_ERROR_CLASSES):
        if _planners_fault(error, text):
            return PlannerError(f"the SQL written for Spark failed, not the query: {message} (please report it)")
        return InvalidQuery(message, sqlstate)
    return ExecutionError(message)


# Spark's analysis errors that a checked query cannot cause: every column it names was resolved
# against the catalog before planning
_UNRESOLVABLE = ("UNRESOLVED_COLUMN", "AMBIGUOUS_REFERENCE", "UNRESOLVED_ATTRIBUTE")
_GENERATED_NAME = re.compile(r"\b__[eagk]\d+\b")  # the columns the planner computes in sub-queries


def _planners_fault(error: BaseException, text: str) -> bool:
    """Whether a Spark analysis error is of the SQL the planner wrote rather than of the user's
    query: a name a checked query cannot leave unresolved, or one of the planner's own names."""
    condition = getattr(error, "getCondition", None) or getattr(error, "getErrorClass", None)
    name = condition() if callable(condition) else ""
    return bool(name and name.startswith(_UNRESOLVABLE)) or bool(_GENERATED_NAME.search(text.splitlines()[0]))


def _spark_gone(error: BaseException) -> bool:
    """Whether the error is the driver JVM going away (py4j's connection to it broken), not a
    failure of the query in Spark (a Java exception, which py4j wraps in Py4JJavaError)."""
    names = {cls.__name__ for cls in type(error).__mro__}
    if "Py4JJavaError" in names:
        return False
    return "Py4JError" in names or isinstance(error, ConnectionError)
