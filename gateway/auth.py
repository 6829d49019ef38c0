"""Bearer tokens from the configuration, each with a limit on its queued and running queries.
Without configured tokens the API is open (a local region)."""

from __future__ import annotations

import hmac

from aiohttp import web

from gateway.config import TokenConfig
from gateway.errors import ApiError

ANONYMOUS = TokenConfig(name="", token="", max_concurrent=1_000_000)


class Auth:
    def __init__(self, tokens: list[TokenConfig]):
        self.tokens = list(tokens)

    @property
    def enabled(self) -> bool:
        return bool(self.tokens)

    def identify(self, request: web.Request) -> TokenConfig:
        """The token a request carries; 401 when authentication is on and it carries none we know."""
        if not self.tokens:
            return ANONYMOUS
        header = request.headers.get("Authorization", "")
        scheme, _, value = header.partition(" ")
        if scheme.lower() != "bearer" or not value.strip():
            raise ApiError(401, "unauthorized", "missing bearer token: send Authorization: Bearer <token>", "28000")
        for token in self.tokens:
            if hmac.compare_digest(token.token.encode(), value.strip().encode()):
                return token
        raise ApiError(401, "unauthorized", "unknown bearer token", "28000")
