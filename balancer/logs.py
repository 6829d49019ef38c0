"""The log lines of every role (gateway, router, node, central balancer): one JSON object per line
(`gateway.log_format = "json"`) or one line of text, each line logged while a query is handled
carrying that query's id. The id (global·10^8 + region·10^6 + client, the same on the gateway and
the nodes) lives in a context variable, set where the gateway starts a statement and where a node
runs a query; asyncio tasks and the threads started with a copy of their context inherit it."""

from __future__ import annotations

import datetime
import json
import logging
from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar

QUERY_ID: ContextVar[int | None] = ContextVar("query_id", default=None)
LOG_FORMATS = ("json", "text")
TEXT = "%(asctime)s %(levelname)s %(name)s%(query)s: %(message)s"


@contextmanager
def logged_as(query_id: int) -> Iterator[None]:
    """Lines logged within (and in the tasks started within) carry `query_id`."""
    token = QUERY_ID.set(query_id)
    try:
        yield
    finally:
        QUERY_ID.reset(token)


class JsonFormatter(logging.Formatter):
    """A line as one JSON object: time (UTC, ISO 8601), level, logger, message, the query's id while
    one is handled, and the exception's traceback when there is one."""

    def format(self, record: logging.LogRecord) -> str:
        line: dict[str, object] = {
            "time": datetime.datetime.fromtimestamp(record.created, datetime.UTC).isoformat(timespec="milliseconds"),
            "level": record.levelname,
            "logger": record.name,
            "message": record.getMessage(),
        }
        query_id = QUERY_ID.get()
        if query_id is not None:
            line["query_id"] = query_id
        if record.exc_info:
            line["exception"] = self.formatException(record.exc_info)
        if record.stack_info:
            line["stack"] = self.formatStack(record.stack_info)
        return json.dumps(line, ensure_ascii=False, default=str)


class TextFormatter(logging.Formatter):
    """`TEXT`: `[query N]` after the logger's name while a query is handled."""

    def __init__(self) -> None:
        super().__init__(TEXT)

    def format(self, record: logging.LogRecord) -> str:
        query_id = QUERY_ID.get()
        record.query = "" if query_id is None else f" [query {query_id}]"
        return super().format(record)


def formatter(log_format: str) -> logging.Formatter:
    """The formatter of `log_format` (json or text)."""
    if log_format not in LOG_FORMATS:
        raise ValueError(f"log format must be json or text, not {log_format!r}")
    return JsonFormatter() if log_format == "json" else TextFormatter()


def configure_logs(log_format: str, level: int = logging.INFO) -> None:
    """Log this process's lines to stderr in `log_format` (in place of any handler set before)."""
    handler = logging.StreamHandler()
    handler.setFormatter(formatter(log_format))
    logging.basicConfig(level=level, handlers=[handler], force=True)
