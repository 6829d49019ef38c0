"""What the region's Spark is, for `GET /v1/cluster` and `cxg status`: its master, whether the
session runs, the application's executors and, for a standalone master, its workers (from the
master's web UI JSON, `spark.master_ui`, by default port 8080 of the first master's host)."""

from __future__ import annotations

import json
import urllib.parse
import urllib.request
from typing import Any

from gateway.config import SparkSettings

STANDALONE_UI_PORT = 8080  # Spark's default for a standalone master's web UI


def master_ui(settings: SparkSettings) -> str | None:
    """The web UI of a standalone master (None for any other master)."""
    if settings.master_ui:
        return settings.master_ui
    if not settings.master.startswith("spark://"):
        return None
    first = urllib.parse.urlsplit(settings.master.split(",")[0])
    return f"http://{first.hostname}:{STANDALONE_UI_PORT}"


def master_status(ui_url: str, timeout: float = 5.0) -> dict[str, Any]:
    """A standalone master's state (``status``: ALIVE), its workers (``state``: ALIVE or DEAD,
    cores, memory) and applications, from its web UI's JSON."""
    with urllib.request.urlopen(f"{ui_url.rstrip('/')}/json/", timeout=timeout) as response:
        return json.load(response)


def spark_status(settings: SparkSettings, state: str, executors: int | None) -> dict[str, Any]:
    """The region's Spark: master, session `state`, executors (a cluster's, while it runs) and a
    standalone master's workers (or why they are unknown)."""
    doc: dict[str, Any] = {"master": settings.master, "state": state}
    if not settings.local:
        doc["executors"] = executors
    ui = master_ui(settings)
    if ui is not None:
        try:
            workers = master_status(ui, timeout=2.0)["workers"]
            doc["workers"] = [{k: w.get(k) for k in ("host", "state", "cores", "coresused", "memory")} for w in workers]
        except (OSError, ValueError, KeyError, TypeError, AttributeError) as e:  # not reachable, not a master's UI
            doc["workers_error"] = f"{ui}: {e!r}"
    return doc
