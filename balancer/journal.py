"""The logs every PerformSys program kept (seed 004 §4.1): a general log of events (Python
logging, to the terminal and `<role>-<name>.log`), a per-query statistics log and a
queue-length log, both CSV for a spreadsheet or pandas."""

from __future__ import annotations

import csv
import logging
import time
from pathlib import Path
from typing import IO

from balancer.logs import formatter

QUERY_FIELDS = ["time", "id", "client", "tag", "seconds", "wait_seconds", "answer_bytes", "queue_length", "node", "ok"]
QUEUE_FIELDS = ["time", "client", "queue_length"]


def client_of(query_id: int) -> int:
    """The client number inside a query id (global·10^8 + region·10^6 + client)."""
    return query_id % 1_000_000


class Journal:
    """The CSV logs of one role, and its general log in `log_format` (json or text); without a
    directory it keeps nothing."""

    def __init__(self, directory: str | Path | None, role: str, name: str, log_format: str = "json"):
        self._files: list[IO[str]] = []
        self._queries = self._queue = None
        if directory is None:
            return
        root = Path(directory)
        root.mkdir(parents=True, exist_ok=True)
        stem = f"{role}-{name}"
        handler = logging.FileHandler(root / f"{stem}.log")
        handler.setFormatter(formatter(log_format))
        logging.getLogger("cxg").addHandler(handler)
        self._handler = handler
        self._queries = self._open(root / f"{stem}-queries.csv", QUERY_FIELDS)
        self._queue = self._open(root / f"{stem}-queue.csv", QUEUE_FIELDS)

    def _open(self, path: Path, header: list[str]) -> csv.writer:
        new = not path.exists() or path.stat().st_size == 0
        f = path.open("a", newline="", buffering=1)
        self._files.append(f)
        writer = csv.writer(f)
        if new:
            writer.writerow(header)
        return writer

    def query(
        self,
        query_id: int,
        tag: str,
        seconds: float,
        answer_bytes: int,
        queue_length: int,
        node: str = "",
        ok: bool = True,
        wait_seconds: float = 0.0,
    ) -> None:
        if self._queries is not None:
            self._queries.writerow(
                [
                    f"{time.time():.6f}",
                    query_id,
                    client_of(query_id),
                    tag,
                    f"{seconds:.6f}",
                    f"{wait_seconds:.6f}",
                    answer_bytes,
                    queue_length,
                    node,
                    int(ok),
                ]
            )

    def queue(self, client: int, length: int) -> None:
        if self._queue is not None:
            self._queue.writerow([f"{time.time():.6f}", client, length])

    def close(self) -> None:
        for f in self._files:
            f.close()
        self._files.clear()
        if self._queries is not None:
            logging.getLogger("cxg").removeHandler(self._handler)
            self._handler.close()
        self._queries = self._queue = None
