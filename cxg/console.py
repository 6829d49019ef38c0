"""Where the commands write: one console, wide when not a terminal so that tables piped to a
file or read by a test are not folded."""

from __future__ import annotations

from rich.console import Console

console = Console()
if not console.is_terminal:
    console = Console(width=160)
