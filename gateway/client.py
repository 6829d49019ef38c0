"""A small synchronous client of the gateway's HTTP API: the DB-API driver, `cxg query` and
`cxg status` use it. Results travel as Arrow IPC streams, so types arrive exactly."""

from __future__ import annotations

import datetime
import decimal
import json
import os
import ssl
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import pyarrow as pa

from gateway.media import ARROW, EVENT_STREAM, JSON, NDJSON

DEFAULT_URL = "http://127.0.0.1:8080"


class GatewayError(Exception):
    """An error answered by the gateway (or the gateway could not be reached: status 0)."""

    def __init__(self, status: int, code: str, message: str, sqlstate: str = "", statement: str | None = None):
        super().__init__(f"[{code}] {message}")
        self.status = status
        self.code = code
        self.sqlstate = sqlstate
        self.message = message
        self.statement = statement


@dataclass
class Result:
    id: str
    table: pa.Table
    truncated: bool = False
    info: dict[str, Any] = field(default_factory=dict)


def parameter(value: Any) -> Any:
    """A Python value as the API's JSON parameter."""
    if isinstance(value, datetime.datetime):
        return {"type": "timestamp", "value": value.isoformat()}
    if isinstance(value, datetime.date):
        return {"type": "date", "value": value.isoformat()}
    if isinstance(value, decimal.Decimal):
        return {"type": "decimal", "value": str(value)}
    return value


class Client:
    def __init__(
        self, url: str | None = None, token: str | None = None, timeout: float = 3600.0, ca: str | None = None
    ):
        """`ca`: the certificate (or bundle) an https gateway is verified with, default $CXG_CA,
        else the system's authorities."""
        self.url = (url or os.environ.get("CXG_URL") or DEFAULT_URL).rstrip("/")
        self.token = token if token is not None else os.environ.get("CXG_TOKEN")
        self.timeout = timeout
        ca = ca or os.environ.get("CXG_CA")
        self.tls = ssl.create_default_context(cafile=ca) if ca else None

    def _request(
        self, method: str, path: str, body: dict | None = None, accept: str = JSON, raw: tuple[bytes, str] | None = None
    ) -> tuple[int, dict[str, str], bytes]:
        """One request (`body` as JSON, or `raw`: bytes and their content type); status, headers, payload."""
        with self._open(method, path, body, accept, raw) as response:
            return response.status, dict(response.headers), response.read()

    def _open(
        self, method: str, path: str, body: dict | None = None, accept: str = JSON, raw: tuple[bytes, str] | None = None
    ) -> Any:
        """The response to one request, to be read (a stream of events too); GatewayError for an error."""
        headers = {"Accept": accept}
        if self.token:
            headers["Authorization"] = f"Bearer {self.token}"
        data = None
        if body is not None:
            data = json.dumps(body).encode()
            headers["Content-Type"] = JSON
        elif raw is not None:
            data, headers["Content-Type"] = raw
        request = urllib.request.Request(self.url + path, data=data, method=method, headers=headers)
        try:
            return urllib.request.urlopen(request, timeout=self.timeout, context=self.tls)
        except urllib.error.HTTPError as e:
            payload = e.read()
            try:
                doc = json.loads(payload)
                error = doc["error"]
            except (ValueError, KeyError, TypeError):
                raise GatewayError(e.code, "http_error", f"HTTP {e.code} from {self.url}{path}") from None
            raise GatewayError(
                e.code, error["code"], error["message"], error.get("sqlstate", ""), doc.get("id")
            ) from None
        except (urllib.error.URLError, OSError) as e:
            reason = e.reason if isinstance(e, urllib.error.URLError) else e
            raise GatewayError(0, "unreachable", f"cannot reach the gateway at {self.url}: {reason}") from None

    def get(self, path: str) -> dict[str, Any]:
        return json.loads(self._request("GET", path)[2])

    def submit(self, sql: str, params: dict[str, Any] | None = None, **options: Any) -> tuple[int, dict, bytes]:
        body = {"sql": sql, **{k: v for k, v in options.items() if v is not None}}
        if params:
            body["params"] = {k: parameter(v) for k, v in params.items()}
        return self._request("POST", "/v1/statements", body, accept=f"{ARROW}, {JSON};q=0.5")

    def execute(self, sql: str, params: dict[str, Any] | None = None, **options: Any) -> Result:
        """Run one query to its end (polling while it is queued or running)."""
        status, headers, payload = self.submit(sql, params, **options)
        while status == 202:
            doc = json.loads(payload)
            status, headers, payload = self._request(
                "GET", f"/v1/statements/{doc['id']}?wait=30", accept=f"{ARROW}, {JSON};q=0.5"
            )
        if headers.get("Content-Type", "").startswith(JSON):
            doc = json.loads(payload)  # a finished statement in JSON: an error or an empty result
            if "error" in doc:
                error = doc["error"]
                raise GatewayError(status, error["code"], error["message"], error.get("sqlstate", ""), doc.get("id"))
            return Result(doc["id"], pa.table({}), doc.get("truncated", False), doc)
        table = pa.ipc.open_stream(payload).read_all()
        return Result(headers.get("X-Cxg-Statement-Id", ""), table, headers.get("X-Cxg-Truncated") == "true")

    def cancel(self, statement: str) -> dict[str, Any]:
        return json.loads(self._request("DELETE", f"/v1/statements/{statement}")[2])

    def statements(self, state: str | None = None, limit: int = 100) -> dict[str, Any]:
        """Running and recent statements, newest first (`GET /v1/statements`)."""
        query = urllib.parse.urlencode({k: v for k, v in (("state", state), ("limit", limit)) if v is not None})
        return self.get(f"/v1/statements?{query}")

    def append(self, table: str, rows: pa.Table | bytes) -> dict[str, Any]:
        """Append `rows` to `table` as its new version (`POST /v1/tables/{name}/rows`): an Arrow
        table, or JSON lines as bytes; the table, its new version and the rows and blocks written."""
        if isinstance(rows, pa.Table):
            sink = pa.BufferOutputStream()
            with pa.ipc.new_stream(sink, rows.schema) as writer:
                writer.write_table(rows)
            raw = (sink.getvalue().to_pybytes(), ARROW)
        else:
            raw = (rows, NDJSON)
        path = f"/v1/tables/{urllib.parse.quote(table, safe='')}/rows"
        return json.loads(self._request("POST", path, raw=raw)[2])

    def subscribe(
        self, sql: str, event_time: str | None = None, consolidate_every: float | None = None
    ) -> dict[str, Any]:
        """Register a standing query (`POST /v1/subscriptions`): its id, current result and streams."""
        options = {"event_time": event_time, "consolidate_every": consolidate_every}
        body = {"sql": sql, **{k: v for k, v in options.items() if v is not None}}
        return json.loads(self._request("POST", "/v1/subscriptions", body)[2])

    def subscription(self, key: str) -> dict[str, Any]:
        """A standing query and its current result."""
        return self.get(f"/v1/subscriptions/{urllib.parse.quote(key, safe='')}")

    def unsubscribe(self, key: str) -> dict[str, Any]:
        return json.loads(self._request("DELETE", f"/v1/subscriptions/{urllib.parse.quote(key, safe='')}")[2])

    def updates(self, key: str) -> Iterator[tuple[str, dict[str, Any]]]:
        """A standing query's events as they come (its Server-Sent Events): ("snapshot", its result),
        then ("update", the changed rows and removed groups) for each, until ("ended", why)."""
        path = f"/v1/subscriptions/{urllib.parse.quote(key, safe='')}/events"
        with self._open("GET", path, accept=EVENT_STREAM) as stream:
            kind = ""
            for raw in stream:
                line = raw.decode().rstrip("\n")
                if line.startswith("event: "):
                    kind = line.removeprefix("event: ")
                elif line.startswith("data: "):
                    yield kind, json.loads(line.removeprefix("data: "))
                    if kind == "ended":
                        return

    def tables(self) -> dict[str, Any]:
        return self.get("/v1/tables")["tables"]

    def cluster(self) -> dict[str, Any]:
        return self.get("/v1/cluster")

    def drain(self, node: str | None = None, on: bool = True) -> dict[str, Any]:
        """Drain the region, or one node (`on` false: take it back into rotation); the drain state
        after (`draining`, `draining_nodes`)."""
        path = "/v1/cluster/drain" if node is None else f"/v1/cluster/nodes/{urllib.parse.quote(node, safe='')}/drain"
        return json.loads(self._request("POST" if on else "DELETE", path)[2])

    def wait_ready(self, timeout: float = 60.0, nodes: int = 1) -> dict[str, Any]:
        """Wait until the gateway answers and at least `nodes` nodes have joined."""
        deadline = time.monotonic() + timeout
        while True:
            try:
                doc = json.loads(self._request("GET", "/readyz")[2])
                if doc["nodes"] >= nodes:
                    return doc
            except GatewayError as e:
                if time.monotonic() > deadline:
                    raise GatewayError(e.status, "not_ready", f"gateway not ready after {timeout:g} s: {e}") from None
            if time.monotonic() > deadline:
                raise GatewayError(503, "not_ready", f"fewer than {nodes} nodes joined within {timeout:g} s")
            time.sleep(0.1)
