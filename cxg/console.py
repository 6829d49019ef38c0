"""Where the commands write: one console, wide when not a terminal so that tables piped to a
file or read by a test are not folded, and how they print rows on it."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

from rich.console import Console
from rich.table import Table

console = Console()
if not console.is_terminal:
    console = Console(width=160)


def cell(value: Any) -> str:
    """A value as the commands print it (NULL for a missing one)."""
    return "NULL" if value is None else str(value)


def show_rows(columns: list[str], rows: Iterable[Sequence[Any]]) -> None:
    """Rows as a table on the console."""
    view = Table(*columns)
    for row in rows:
        view.add_row(*(cell(v) for v in row))
    console.print(view)
