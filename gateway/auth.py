"""Bearer tokens from the configuration, each with a limit on its queued and running queries; a
token is also taken as the password of HTTP Basic authentication (the user name is the client's
to choose), as Trino's clients send it. Without configured tokens the API is open (a local
region). Operators' requests (draining) need the cluster token when one is configured, else what a
query needs."""

from __future__ import annotations

import base64
import binascii
import hmac

from aiohttp import web

from gateway.config import TokenConfig
from gateway.errors import ApiError

ANONYMOUS = TokenConfig(name="", token="", max_concurrent=1_000_000)


class Auth:
    def __init__(self, tokens: list[TokenConfig], cluster_token: str = ""):
        self.tokens = list(tokens)
        self.cluster_token = cluster_token

    @property
    def enabled(self) -> bool:
        return bool(self.tokens)

    def identify(self, request: web.Request) -> TokenConfig:
        """The token a request carries; 401 when authentication is on and it carries none we know."""
        if not self.tokens:
            return ANONYMOUS
        value = _credential(request)
        for token in self.tokens:
            if hmac.compare_digest(token.token.encode(), value.encode()):
                return token
        raise ApiError(401, "unauthorized", "unknown token", "28000")

    def sees(self, request: web.Request) -> str | None:
        """Whose statements a request may list: None for everyone's (no authentication, or the
        cluster token), else its token's name."""
        if not self.tokens:
            return None
        if self.cluster_token and hmac.compare_digest(self.cluster_token.encode(), _credential(request).encode()):
            return None
        return self.identify(request).name

    def operator(self, request: web.Request) -> None:
        """Admit an operator's request: the cluster token when one is configured (401 otherwise),
        else whatever `identify` admits."""
        if not self.cluster_token:
            self.identify(request)
        elif not hmac.compare_digest(self.cluster_token.encode(), _credential(request).encode()):
            raise ApiError(401, "unauthorized", "this needs the cluster token (gateway.cluster_token)", "28000")

    def appender(self, request: web.Request, table: str) -> None:
        """Admit an append to `table`: anyone without tokens, else the cluster token or a token
        naming the table in its `appends` (403 otherwise)."""
        if not self.tokens:
            return
        if self.cluster_token and hmac.compare_digest(self.cluster_token.encode(), _credential(request).encode()):
            return
        token = self.identify(request)
        if table not in token.appends:
            raise ApiError(403, "forbidden", f"token {token.name!r} may not append to table {table!r}", "42501")


def _credential(request: web.Request) -> str:
    """The token a request carries, as a bearer token or a Basic password; 401 when it carries none."""
    scheme, _, value = request.headers.get("Authorization", "").partition(" ")
    if scheme.lower() == "basic" and value.strip():
        try:
            password = base64.b64decode(value.strip(), validate=True).decode().partition(":")[2]
        except (binascii.Error, UnicodeDecodeError):
            raise ApiError(401, "unauthorized", "Authorization: Basic needs base64 of user:token", "28000") from None
        if password:
            return password
    if scheme.lower() != "bearer" or not value.strip():
        message = "missing token: send Authorization: Bearer <token> (or Basic with the token as password)"
        raise ApiError(401, "unauthorized", message, "28000")
    return value.strip()
