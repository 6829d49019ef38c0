"""What every benchmark shares: its command line, timing, a printed table and a JSON file."""

from __future__ import annotations

import argparse
import json
import os
import platform
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.table import Table

console = Console()
if not console.is_terminal:
    console = Console(width=180)


def parser(description: str, default_sf: float = 1.0) -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=description)
    p.add_argument("--sf", type=float, default=default_sf, help=f"TPC-H scale factor (default {default_sf:g})")
    p.add_argument("--json", type=Path, metavar="PATH", help="also write the figures as JSON")
    return p


def bench_main(argv: list[str] | None, doc: str, run: Any, report: Any, repeat: int) -> None:
    """The command line of a benchmark that takes a scale factor and a number of timed runs: run,
    print the report, write the JSON figures."""
    p = parser(doc.splitlines()[0])
    p.add_argument("--repeat", type=int, default=repeat, help=f"timed runs per query and system (default {repeat})")
    args = p.parse_args(argv)
    figures = run(args.sf, args.repeat)
    report(figures)
    write_json(args.json, figures)


@contextmanager
def timed() -> Iterator[dict[str, float]]:
    """`with timed() as t: ...` then t["s"] holds the elapsed seconds."""
    box: dict[str, float] = {}
    started = time.perf_counter()
    try:
        yield box
    finally:
        box["s"] = time.perf_counter() - started


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
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def save_figure(figure: Any, path: Path, what: str = "") -> None:
    """Lay out, write as PNG and close a figure (and say so when `what` names it)."""
    figure.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    figure.savefig(path, dpi=110)
    pyplot().close(figure)
    if what:
        console.print(f"{what} written to {path}")


def mb(n: float) -> str:
    return f"{n / 1e6:,.1f}"
