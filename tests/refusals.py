"""What a client is told when a query run in this process fails: the engine raises what failed (a
node's error, Spark's), and the gateway's `ApiError.of` says what it means."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from gateway import ApiError


def refusal(call: Callable[[], object]) -> ApiError:
    """The API error for the failure of `call` (which must fail)."""
    with pytest.raises(Exception) as failed:
        call()
    return ApiError.of(failed.value, query=True)
