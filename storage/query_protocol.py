"""The contract of a whole query on one node (`storage.node_query`), beside the scan's
(`storage.scan_protocol`), whose answer format it shares:

    POST /v1/query   {"sql": "SELECT ... FROM v0 JOIN v1 ...",        # DataFusion's SQL over the views
                      "views": {"v0": <scan request>, "v1": ...},    # each view: a scan of a table here
                      "analyze": false,                              # true: DataFusion's operators too
                      "edges": [["v0", "c_custkey", "v1", "o_custkey"]],  # optional: join columns
                      "kept": [["t", "SELECT ... FROM v0"]],         # optional: computed first, read by name
                      "id": "3f2a..."}                               # optional: what a DELETE names
                     -> Arrow IPC stream: the result's batches, then a trailer batch whose metadata
                        holds what the query did (`METADATA_STATS`): each view's scan (rows, blocks,
                        seconds), the engine's seconds and, with analyze, its operators' metrics
    GET /v1/query/{id}      how far that query is while it runs: {"stages": views + 1, "stages_done",
                            "rows_scanned"} (each view's scan, then the engine); 404 ``unknown_query``
    DELETE /v1/query/{id}   stop that query at its next block or batch (it answers ``cancelled``)
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from storage.errors import StorageError
from storage.scan_protocol import ScanRequest

QUERY_PATH = "/v1/query"
_VIEW = re.compile(r"[A-Za-z_][A-Za-z0-9_]{0,127}")


class QueryRequestError(StorageError):
    code = "invalid_query_request"


class UnknownQueryError(StorageError):
    code = "unknown_query"
    status = 404


class NodeEngineError(StorageError):
    """DataFusion could not plan or run the query: its message, for the coordinator to decide."""

    code = "node_engine_failed"
    status = 422


@dataclass(frozen=True)
class QueryRequest:
    """What a node answers whole: `sql` over `views`, each the rows of one scan here."""

    sql: str
    views: dict[str, ScanRequest]
    analyze: bool = False
    id: str = ""  # what a cancellation names ("": none can)
    # (view, column, other view, its column): an equality along which the first view's keys may
    # filter the other's rows (an inner equi-join, or a correlated subquery's condition)
    edges: tuple[tuple[str, str, str, str], ...] = ()
    # (name, statement): each computed once, in order, before `sql`, over the views and the results
    # kept before it, and read by its name (a common table expression read more than once)
    kept: tuple[tuple[str, str], ...] = ()

    def to_json(self) -> dict[str, Any]:
        views = {name: request.to_json() for name, request in self.views.items()}
        edges = [list(edge) for edge in self.edges]
        kept = [list(statement) for statement in self.kept]
        return {"sql": self.sql, "views": views, "analyze": self.analyze, "id": self.id, "edges": edges, "kept": kept}

    @classmethod
    def from_json(cls, data: Any) -> QueryRequest:
        if not isinstance(data, dict):
            raise QueryRequestError(f"a query request is a JSON object, not {type(data).__name__}")
        sql, views, analyze, id = data.get("sql"), data.get("views"), data.get("analyze", False), data.get("id", "")
        if not isinstance(sql, str) or not sql.strip():
            raise QueryRequestError("sql must be a non-empty string")
        if not isinstance(views, dict) or not views:
            raise QueryRequestError("views must be an object naming at least one scan")
        bad = [name for name in views if not _VIEW.fullmatch(name)]
        if bad:
            raise QueryRequestError(f"a view's name is an identifier, not {bad[0]!r}")
        if not isinstance(analyze, bool):
            raise QueryRequestError(f"analyze must be true or false, not {analyze!r}")
        if not isinstance(id, str) or len(id) > 128:
            raise QueryRequestError(f"id must be a string of at most 128 characters, not {id!r}")
        edges = data.get("edges", [])
        if not isinstance(edges, list) or not all(_edge(edge, views) for edge in edges):
            raise QueryRequestError("edges must be a list of [view, column, view, column], naming the views")
        kept = data.get("kept", [])
        if not isinstance(kept, list) or not all(_kept(statement, views) for statement in kept):
            raise QueryRequestError("kept must be a list of [name, statement], each name new and an identifier")
        if len({name for name, _ in kept}) < len(kept):
            raise QueryRequestError("kept names each statement once")
        scans = {name: ScanRequest.from_json(scan) for name, scan in views.items()}
        return cls(sql, scans, analyze, id, tuple(tuple(edge) for edge in edges), tuple(tuple(s) for s in kept))


def _kept(statement: object, views: dict) -> bool:
    return (
        isinstance(statement, list)
        and len(statement) == 2
        and all(isinstance(part, str) for part in statement)
        and bool(_VIEW.fullmatch(statement[0]))
        and statement[0] not in views
        and bool(statement[1].strip())
    )


def _edge(edge: object, views: dict) -> bool:
    return (
        isinstance(edge, list)
        and len(edge) == 4
        and all(isinstance(part, str) for part in edge)
        and edge[0] in views
        and edge[2] in views
    )
