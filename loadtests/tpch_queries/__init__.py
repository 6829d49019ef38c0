"""The 22 TPC-H queries (standard text, default substitution parameters)."""

from __future__ import annotations

from pathlib import Path

HERE = Path(__file__).parent
SINGLE_TABLE = (1, 6)


def query(number: int) -> str:
    """The text of TPC-H query `number` (1..22)."""
    return (HERE / f"q{number:02d}.sql").read_text()


def all_queries() -> dict[int, str]:
    return {n: query(n) for n in range(1, 23)}
