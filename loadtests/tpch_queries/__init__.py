"""The 22 TPC-H queries (standard text, default substitution parameters)."""

from __future__ import annotations

from pathlib import Path

HERE = Path(__file__).parent
SINGLE_TABLE = (1, 6)


def query(number: int) -> str:
    """The text of TPC-H query `number` (1..22)."""
    return (HERE / f"q{number:02d}.sql").read_text()


def all_queries(scale_factor: float = 1) -> dict[int, str]:
    """The 22 queries; Q11's FRACTION is 0.0001 / SF, as the specification substitutes it."""
    texts = {n: query(n) for n in range(1, 23)}
    fraction = f"{0.0001 / scale_factor:.12f}".rstrip("0")
    texts[11] = texts[11].replace("* 0.0001", f"* {fraction}")
    return texts
