"""Holds on a table's appends, one node's: a move of the table's buckets (`cxg redistribute`)
reads one version and makes the next under its new placement, so while it runs no append may
make another. The mover holds the table at the version it reads on every node holding it
(``PUT /v1/tables/{name}/hold?version=V&seconds=S``, refreshed while it runs, released at its
end); meanwhile an append is refused whole with ``table_moving`` (409: retry). A hold the mover
did not refresh lapses after its seconds: a mover that died holds nothing for long.

A hold and an append's commit exclude each other (one lock): once every node answered its hold,
the table is at the version held on each of them and stays there until the holds end.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager

from storage.errors import StorageError, VersionConflictError

MAX_HOLD_S = 600.0  # the longest a hold lasts without being refreshed


class TableMovingError(StorageError):
    """An append to a table whose buckets are being moved: retry once the move is done."""

    code = "table_moving"
    status = 409


class AppendHolds:
    """The tables whose appends are held on this node, until when (time.monotonic())."""

    def __init__(self) -> None:
        self._until: dict[str, tuple[int, float]] = {}  # table -> (version held, until)
        self._lock = threading.Lock()

    def hold(self, table: str, version: int, seconds: float, current: Callable[[], int]) -> float:
        """Hold `table`'s appends for `seconds` (at most MAX_HOLD_S) at `version`, which must be its
        `current()` one (VersionConflictError otherwise: an append committed since); the seconds held."""
        seconds = min(max(seconds, 0.0), MAX_HOLD_S)
        with self._lock:
            now = current()
            if now != version:
                raise VersionConflictError(f"table {table} is at version {now}, not {version}: plan the move again")
            self._until[table] = (version, time.monotonic() + seconds)
        return seconds

    def release(self, table: str) -> bool:
        """End the hold of `table`; False when there was none."""
        with self._lock:
            return self._until.pop(table, None) is not None

    def held(self) -> dict[str, int]:
        """The tables held now and the version each is held at."""
        now = time.monotonic()
        with self._lock:
            return {t: v for t, (v, until) in self._until.items() if until > now}

    def check(self, table: str) -> None:
        """TableMovingError when `table`'s appends are held."""
        version = self.held().get(table)
        if version is not None:
            raise _moving(table, version)

    @contextmanager
    def committing(self, table: str) -> Iterator[None]:
        """An append's commit of `table`: refused while the table is held, no hold placed meanwhile."""
        with self._lock:
            version, until = self._until.get(table, (0, 0.0))
            if until > time.monotonic():
                raise _moving(table, version)
            yield


def _moving(table: str, version: int) -> TableMovingError:
    return TableMovingError(
        f"table {table} is being moved between nodes (held at version {version}): appends wait until it is"
        " served at its new placement; retry"
    )
