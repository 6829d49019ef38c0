"""A plain HTTP helper for tests that talk to servers on loopback."""

from __future__ import annotations

import json
import ssl
import urllib.error
import urllib.request
from dataclasses import dataclass
from typing import Any


@dataclass
class Reply:
    status: int
    headers: dict[str, str]
    body: bytes

    def json(self) -> Any:
        return json.loads(self.body)


def http(
    method: str,
    url: str,
    body: dict | str | bytes | None = None,
    headers: dict[str, str] | None = None,
    timeout: float = 60.0,
    context: ssl.SSLContext | None = None,
) -> Reply:
    headers = dict(headers or {})
    data = None
    if isinstance(body, dict):
        data = json.dumps(body).encode()
        headers.setdefault("Content-Type", "application/json")
    elif isinstance(body, str):
        data = body.encode()
        headers.setdefault("Content-Type", "text/plain")
    elif isinstance(body, bytes):
        data = body
    request = urllib.request.Request(url, data=data, method=method, headers=headers)
    try:
        with urllib.request.urlopen(request, timeout=timeout, context=context) as response:
            return Reply(response.status, dict(response.headers), response.read())
    except urllib.error.HTTPError as e:
        return Reply(e.code, dict(e.headers), e.read())
