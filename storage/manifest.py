"""The table manifest: definition, sizing and the list of blocks, replaced atomically.

`MANIFEST.json` in the table's directory is the single source of truth: a new version is
written to a temp file, fsynced and renamed over the old one, so readers see either the old
table or the new one, never a mix, and a load that dies leaves the old version in place.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from storage.atomic_write import fsync_dir, write_atomically
from storage.blockfile import BlockEntry
from storage.catalog import TableSchema
from storage.errors import ManifestError

MANIFEST = "MANIFEST.json"
FORMAT_VERSION = 1


@dataclass
class Sizing:
    """Block sizing of seed 004: RC = floor(BS / RS)."""

    budget_bytes: int  # BS: memory budget for one decoded block
    record_bytes: int  # RS: longest record, decoded
    block_rows: int  # RC


@dataclass
class Manifest:
    table: TableSchema
    version: int
    sizing: Sizing
    blocks: list[BlockEntry] = field(default_factory=list)
    created: str = field(default_factory=lambda: datetime.now(UTC).isoformat(timespec="seconds"))
    load: str = ""  # the load that committed this version (undone by aborting that load)
    # the rows' identity: the load that produced them, kept by copies and bucket moves (so a copy in
    # another region, or the table after a move, is known to hold the same rows); "" means `load`
    data: str = ""
    replaced: int = 0  # the version this one replaced (0: none), which undoing its load makes current again

    def __post_init__(self) -> None:
        self.data = self.data or self.load

    @property
    def rows(self) -> int:
        return sum(b.rows for b in self.blocks)

    def to_json(self) -> dict[str, Any]:
        return {
            "format": FORMAT_VERSION,
            "table": self.table.to_json(),
            "version": self.version,
            "created": self.created,
            "load": self.load,
            "data": self.data,
            "replaced": self.replaced,
            "sizing": vars(self.sizing),
            "blocks": [b.to_json() for b in self.blocks],
        }

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> Manifest:
        if data.get("format") != FORMAT_VERSION:
            raise ManifestError(f"unknown manifest format {data.get('format')!r}")
        return cls(
            table=TableSchema.from_json(data["table"]),
            version=data["version"],
            sizing=Sizing(**data["sizing"]),
            blocks=[BlockEntry.from_json(b) for b in data["blocks"]],
            created=data["created"],
            load=data.get("load", ""),
            data=data.get("data", ""),
            replaced=data.get("replaced", 0),
        )


def read_manifest(table_dir: Path, name: str = MANIFEST) -> Manifest | None:
    """The manifest `name` of a table's directory (the current one by default), None if absent."""
    path = table_dir / name
    try:
        text = path.read_text()
    except FileNotFoundError:
        return None
    try:
        return Manifest.from_json(json.loads(text))
    except (ValueError, KeyError, TypeError) as e:
        raise ManifestError(f"manifest {path} is unreadable: {e}") from e


def write_manifest(table_dir: Path, manifest: Manifest, name: str = MANIFEST) -> None:
    """Replace the manifest `name` atomically, then fsync the directory: the new version is durable."""
    write_atomically(table_dir / name, json.dumps(manifest.to_json(), indent=1).encode(), "its manifest")
    fsync_dir(table_dir)
