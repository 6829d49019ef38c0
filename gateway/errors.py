"""Errors of the HTTP API: a status, a stable code, an SQLSTATE-like class and a message naming
the problem, answered as ``{"error": {"code", "sqlstate", "message"}}``."""

from __future__ import annotations

import asyncio
import logging
import re

from aiohttp import web

from balancer import DispatchFailed
from gateway.sql.errors import SqlError

# codes a node or the balancer may report -> (HTTP status, SQLSTATE class)
NODE_CODES: dict[str, tuple[int, str]] = {
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
    def of(cls, error: BaseException) -> ApiError:
        """The API error for anything a query can fail with."""
        if isinstance(error, ApiError):
            return error
        if isinstance(error, SqlError):
            status = error.status if error.status != 499 else 409
            return cls(status, error.code, str(error), error.sqlstate, error.retry_after)
        if isinstance(error, DispatchFailed):
            status, sqlstate = NODE_CODES.get(error.code, (500, "XX000"))
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
