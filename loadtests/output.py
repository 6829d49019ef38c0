"""Where a run's figures go: a table on the console, a JSON file stamped with the machine, a PNG."""

from __future__ import annotations

import json
import os
import platform
from collections.abc import Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.table import Table

console = Console()
if not console.is_terminal:
    console = Console(width=180)


def machine() -> dict[str, Any]:
    return {
        "cpus": os.cpu_count(),
        "platform": platform.platform(),
        "python": platform.python_version(),
        "when": datetime.now(UTC).isoformat(timespec="seconds"),
    }


def print_table(title: str, headers: Sequence[str], rows: Sequence[Sequence[Any]]) -> None:
    table = Table(title=title, title_justify="left")
    for i, header in enumerate(headers):
        table.add_column(header, justify="left" if i == 0 else "right")
    for row in rows:
        if row is None:
            table.add_section()
        else:
            table.add_row(*(str(cell) for cell in row))
    console.print(table)


def write_json(path: Path | None, figures: dict[str, Any]) -> None:
    if path is None:
        return
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps({"machine": machine(), **figures}, indent=1) + "\n")
    console.print(f"figures written to {path}")


def pyplot():
    """matplotlib's pyplot, drawing to files (no screen)."""
    import matplotlib  # heavy, and only figures need it: loaded for the first one

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt  # after the backend is chosen

    return plt


def save_figure(figure: Any, path: Path, what: str = "") -> None:
    """Lay out, write as PNG and close a figure (and say so when `what` names it)."""
    figure.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    figure.savefig(path, dpi=110)
    pyplot().close(figure)
    if what:
        console.print(f"{what} written to {path}")
