"""The gateway's OpenAPI 3.1 document, served at /openapi.json."""

from __future__ import annotations

from typing import Any

from gateway.errors import DISPATCH_CODES
from gateway.media import ARROW, CSV, JSON
from gateway.statements import STATES

FORMATS = {
    JSON: {"schema": {"$ref": "#/components/schemas/Statement"}},
    CSV: {"schema": {"type": "string"}},
    ARROW: {"schema": {"type": "string", "format": "binary"}},
}


def _error(description: str) -> dict[str, Any]:
    return {
        "description": description,
        "content": {JSON: {"schema": {"$ref": "#/components/schemas/Error"}}},
    }


ERRORS = {
    "400": _error("Bad SQL, unknown table or column, bad parameter or malformed request"),
    "401": _error("Missing or unknown bearer token"),
    "403": _error("The statement belongs to another token"),
    "404": _error("No such statement (or it expired), or no such chunk"),
    "406": _error("The Accept header asks for a format the gateway does not write"),
    "409": _error("The statement was cancelled, or its result is not ready"),
    "410": _error(
        "The statement was accepted before the gateway restarted and is lost, or its result was dropped to"
        " stay within gateway.result_memory: submit it again"
    ),
    "422": _error("A write statement, or valid SQL the engine does not run"),
    "429": _error("The token's limit of concurrent queries is reached (see Retry-After)"),
    "503": _error(
        "The region is overloaded, drained (draining) or has no node, a node it needs is drained (node_draining), a "
        "table misses buckets, a node went away mid-query, or Spark is "
        "restarting, or a node's GPU had no room left for the scan (device_out_of_memory) (see Retry-After); or a "
        "scan needed more memory than a node process may hold (out_of_memory), "
        "or a node's disk is full (disk_full)"
    ),
    "504": _error("The query ran past its timeout and was stopped"),
}
STATEMENT_ID = {"name": "id", "in": "path", "required": True, "schema": {"type": "string"}}
TRINO_PAGE = {"name": "page", "in": "path", "required": True, "schema": {"type": "integer", "minimum": 0}}
AUTH = [{"bearer": []}, {"basic": []}]
SUBSCRIPTION_ID = {"name": "id", "in": "path", "required": True, "schema": {"type": "string"}}
SUBSCRIPTION_ERRORS = {
    "401": ERRORS["401"],
    "404": _error("No such subscription (one registered before a restart is gone: register it again)"),
    "422": _error("The region keeps no standing queries"),
}


def document() -> dict[str, Any]:
    return {
        "openapi": "3.1.0",
        "info": {
            "title": "cxg gateway",
            "version": "1",
            "description": "Read-only SQL over HTTP on a compressed, GPU-accelerated analytical database.",
        },
        "components": {
            "securitySchemes": {
                "bearer": {"type": "http", "scheme": "bearer"},
                "basic": {"type": "http", "scheme": "basic", "description": "any user name, the token as password"},
            },
            "schemas": {
                "StatementRequest": {
                    "type": "object",
                    "required": ["sql"],
                    "properties": {
                        "sql": {"type": "string", "description": "one read-only query; named parameters as :name"},
                        "params": {
                            "type": "object",
                            "description": "name -> null | boolean | number | string | "
                            '{"type": "date|timestamp|decimal", "value": "..."}',
                        },
                        "wait": {"type": "number", "description": "seconds to wait for the answer (0: async)"},
                        "timeout": {"type": "number", "description": "seconds before the query is stopped"},
                        "max_rows": {"type": "integer", "description": "rows kept of the result"},
                        "tag": {"type": "string", "description": "query label for logs and simulation nodes"},
                        "client": {"type": "integer", "description": "client number in the query id, 0..999999"},
                    },
                },
                "Column": {
                    "type": "object",
                    "properties": {"name": {"type": "string"}, "type": {"type": "string"}},
                },
                "Statement": {
                    "type": "object",
                    "properties": {
                        "id": {"type": "string"},
                        "state": {"enum": ["queued", "running", "succeeded", "failed", "cancelled"]},
                        "columns": {"type": "array", "items": {"$ref": "#/components/schemas/Column"}},
                        "rows": {"type": "array", "items": {"type": "array"}},
                        "row_count": {"type": "integer"},
                        "truncated": {"type": "boolean"},
                        "chunks": {"type": "integer"},
                        "next": {"type": ["string", "null"]},
                        "timings_ms": {"type": "object"},
                        "waiting_for": {
                            "type": "string",
                            "description": "what a running query waits for (a Spark cluster's executors)",
                        },
                        "error": {"$ref": "#/components/schemas/ErrorBody"},
                    },
                },
                "ErrorBody": {
                    "type": "object",
                    "properties": {
                        "code": {
                            "type": "string",
                            "examples": sorted({*DISPATCH_CODES, "too_many_queries", "forbidden"}),
                        },
                        "sqlstate": {"type": "string"},
                        "message": {"type": "string"},
                    },
                },
                "Error": {
                    "type": "object",
                    "properties": {"error": {"$ref": "#/components/schemas/ErrorBody"}, "id": {"type": "string"}},
                },
            },
        },
        "paths": {
            "/v1/statements": {
                "get": {
                    "summary": "Running and recent statements, newest first (a token sees its own)",
                    "security": AUTH,
                    "parameters": [
                        {"name": "state", "in": "query", "schema": {"enum": list(STATES)}},
                        {"name": "token", "in": "query", "schema": {"type": "string"}},
                        {"name": "limit", "in": "query", "schema": {"type": "integer", "minimum": 1, "maximum": 10000}},
                    ],
                    "responses": {
                        "200": {"description": "statements (their summaries) and total"},
                        "400": ERRORS["400"],
                        "401": ERRORS["401"],
                        "403": _error("Another token's statements"),
                    },
                },
                "post": {
                    "summary": "Submit a query",
                    "security": AUTH,
                    "requestBody": {
                        "required": True,
                        "content": {
                            JSON: {"schema": {"$ref": "#/components/schemas/StatementRequest"}},
                            "text/plain": {"schema": {"type": "string"}},
                        },
                    },
                    "responses": {
                        "200": {"description": "Finished within the wait", "content": FORMATS},
                        "202": {"description": "Still queued or running: poll `next`", "content": FORMATS},
                        **ERRORS,
                        "500": _error("The query failed while running"),
                    },
                },
            },
            "/v1/statements/{id}": {
                "get": {
                    "summary": "State of a statement; once succeeded its columns and first chunk",
                    "security": AUTH,
                    "parameters": [
                        STATEMENT_ID,
                        {"name": "wait", "in": "query", "schema": {"type": "number"}, "description": "long poll"},
                    ],
                    "responses": {"200": {"description": "The statement", "content": FORMATS}, **ERRORS},
                },
                "delete": {
                    "summary": "Cancel a statement (its slots on the nodes are freed)",
                    "security": AUTH,
                    "parameters": [STATEMENT_ID],
                    "responses": {"200": {"description": "Its state after cancelling"}, **ERRORS},
                },
            },
            "/v1/statements/{id}/chunks/{n}": {
                "get": {
                    "summary": "One chunk of the result",
                    "security": AUTH,
                    "parameters": [
                        STATEMENT_ID,
                        {"name": "n", "in": "path", "required": True, "schema": {"type": "integer"}},
                    ],
                    "responses": {"200": {"description": "Rows of chunk n", "content": FORMATS}, **ERRORS},
                }
            },
            "/v1/statements/{id}/result": {
                "get": {
                    "summary": "The whole result",
                    "security": AUTH,
                    "parameters": [STATEMENT_ID],
                    "responses": {"200": {"description": "All rows kept", "content": FORMATS}, **ERRORS},
                }
            },
            "/v1/statement": {
                "post": {
                    "summary": "Submit a query by the Trino client protocol (X-Trino-* headers; Basic or bearer auth)",
                    "security": AUTH,
                    "requestBody": {"required": True, "content": {"text/plain": {"schema": {"type": "string"}}}},
                    "responses": {
                        "200": {"description": "Trino's QueryResults: follow nextUri; a refused query carries error"},
                        "400": ERRORS["400"],
                        "401": ERRORS["401"],
                    },
                }
            },
            "/v1/statement/executing/{id}/{page}": {
                "get": {
                    "summary": "Trino protocol: the statement's state (long poll, 1 s), then its data page by page",
                    "security": AUTH,
                    "parameters": [STATEMENT_ID, TRINO_PAGE],
                    "responses": {"200": {"description": "Trino's QueryResults"}, **ERRORS},
                },
                "delete": {
                    "summary": "Trino protocol: cancel the statement",
                    "security": AUTH,
                    "parameters": [STATEMENT_ID, TRINO_PAGE],
                    "responses": {"204": {"description": "Cancelled (or already finished)"}, **ERRORS},
                },
            },
            "/v1/info": {
                "get": {
                    "summary": "Trino protocol: the server's version, as Trino's clients ask for it",
                    "responses": {"200": {"description": "nodeVersion, environment, coordinator, starting"}},
                }
            },
            "/v1/tables": {
                "get": {
                    "summary": "Tables, columns, placement, the version served and whether every bucket is",
                    "security": AUTH,
                    "responses": {"200": {"description": "Tables"}},
                }
            },
            "/v1/tables/{name}/rows": {
                "post": {
                    "summary": "Append rows to a table as its new version (refused whole when one does not fit)",
                    "security": AUTH,
                    "parameters": [{"name": "name", "in": "path", "required": True, "schema": {"type": "string"}}],
                    "requestBody": {
                        "required": True,
                        "content": {
                            "application/x-ndjson": {"schema": {"type": "string"}},
                            ARROW: {"schema": {"type": "string", "format": "binary"}},
                        },
                    },
                    "responses": {
                        "201": {"description": "table, version, rows and blocks of the append"},
                        "400": _error("No such table, or a row that does not fit it (its number and column named)"),
                        "401": ERRORS["401"],
                        "403": _error("The token may not append to this table"),
                        "409": _error("Another append committed first: retry"),
                        "413": _error("The body is past gateway.max_append_bytes"),
                        "422": _error("The region takes no appends"),
                        "503": _error("A node holding the table is not in the region: retry"),
                        "507": _error("A node's disk is full"),
                    },
                }
            },
            "/v1/subscriptions": {
                "get": {
                    "summary": "Standing queries (a token sees its own)",
                    "security": AUTH,
                    "responses": {"200": {"description": "subscriptions"}, "401": ERRORS["401"]},
                },
                "post": {
                    "summary": "Register a standing query, kept up to date as rows are appended",
                    "security": AUTH,
                    "requestBody": {
                        "required": True,
                        "content": {
                            JSON: {
                                "schema": {
                                    "type": "object",
                                    "required": ["sql"],
                                    "properties": {"sql": {"type": "string"}},
                                }
                            }
                        },
                    },
                    "responses": {
                        "201": {"description": "The subscription, its result and where its changes are pushed"},
                        "400": ERRORS["400"],
                        "401": ERRORS["401"],
                        "403": _error("The token may not read the table"),
                        "422": _error("What cannot be kept up to date from each append (named), or no tables here"),
                        "503": ERRORS["503"],
                    },
                },
            },
            "/v1/subscriptions/{id}": {
                "get": {
                    "summary": "A standing query and its current result",
                    "security": AUTH,
                    "parameters": [SUBSCRIPTION_ID],
                    "responses": {"200": {"description": "The subscription"}, **SUBSCRIPTION_ERRORS},
                },
                "delete": {
                    "summary": "End a standing query (its streams end)",
                    "security": AUTH,
                    "parameters": [SUBSCRIPTION_ID],
                    "responses": {"200": {"description": "Deleted"}, **SUBSCRIPTION_ERRORS},
                },
            },
            "/v1/subscriptions/{id}/events": {
                "get": {
                    "summary": "Server-Sent Events: the snapshot, then each update, until deleted",
                    "security": AUTH,
                    "parameters": [SUBSCRIPTION_ID],
                    "responses": {
                        "200": {
                            "description": "The events",
                            "content": {"text/event-stream": {"schema": {"type": "string"}}},
                        },
                        **SUBSCRIPTION_ERRORS,
                    },
                }
            },
            "/v1/subscriptions/{id}/ws": {
                "get": {
                    "summary": "WebSocket: the snapshot, then each update, as JSON messages",
                    "security": AUTH,
                    "parameters": [SUBSCRIPTION_ID],
                    "responses": {
                        "101": {"description": "Switching to the WebSocket protocol"},
                        "400": _error("Not a WebSocket upgrade"),
                        **SUBSCRIPTION_ERRORS,
                    },
                }
            },
            "/v1/cluster": {
                "get": {
                    "summary": "Queue, nodes and slots of the region",
                    "security": AUTH,
                    "responses": {"200": {"description": "Region"}},
                }
            },
            "/healthz": {"get": {"summary": "Liveness", "responses": {"200": {"description": "Alive"}}}},
            "/readyz": {
                "get": {
                    "summary": "Readiness: a node is connected, every table fully served, Spark not down",
                    "responses": {
                        "200": {"description": "Ready"},
                        "503": {"description": "No node yet, a table missing buckets (unavailable_tables), Spark down"},
                    },
                }
            },
            "/metrics": {"get": {"summary": "Prometheus metrics", "responses": {"200": {"description": "Metrics"}}}},
        },
    }
