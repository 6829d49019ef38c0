"""Table definitions: columns and types, sort key and placement.

A table definition is stored in the table's manifest, next to its blocks, so schema and data
are replaced together by one atomic rename.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

import pyarrow as pa

from gpu_kernels import Kind, UnsupportedTypeError, kind_of, parse_type, type_name
from storage.errors import SchemaError
from storage.sql_types import sql_name

TABLE_NAME_PATTERN = re.compile(r"[A-Za-z_][A-Za-z0-9_]{0,127}")
_HASH = re.compile(r"hash\((.*)\)(?:\s+replicas\s+(\d+))?")
DEFAULT_BUCKETS = 16


def catalog_type_name(t: pa.DataType | str) -> str:
    """The catalog's name of an Arrow type, or of a type name (normalized); SchemaError when
    columns cannot have that type."""
    try:
        return type_name(parse_type(t) if isinstance(t, str) else t)
    except UnsupportedTypeError as e:
        raise SchemaError(str(e)) from e


@dataclass(frozen=True)
class Column:
    name: str
    type: str  # catalog type name, see gpu_kernels.column_types
    nullable: bool = True

    def __post_init__(self) -> None:
        if not self.name or "/" in self.name or any(ord(c) < 32 for c in self.name):
            raise SchemaError(f"invalid column name {self.name!r}")
        object.__setattr__(self, "type", catalog_type_name(self.type))

    @property
    def arrow_type(self) -> pa.DataType:
        return parse_type(self.type)

    @property
    def kind(self) -> Kind | None:
        return kind_of(self.arrow_type)

    def field(self) -> pa.Field:
        return pa.field(self.name, self.arrow_type, nullable=self.nullable)


@dataclass(frozen=True)
class Placement:
    """Where a table's rows live: on every node (`replicated`) or in hash buckets owned by nodes.

    Row r goes to bucket ``hash(key columns of r) mod buckets`` (`storage.partitioning`);
    `owners[b]` names the node holding bucket b. With ``replicas`` k > 1 each bucket is also held
    by the next k - 1 nodes after its owner (in the order the owners first appear), so a query can
    read every bucket while a node is down.
    """

    kind: Literal["replicated", "hash"] = "replicated"
    keys: tuple[str, ...] = ()
    buckets: int = 1
    owners: tuple[str, ...] = field(default=())
    replicas: int = 1

    def __post_init__(self) -> None:
        if self.kind == "replicated":
            if self.keys or self.buckets != 1:
                raise SchemaError("a replicated placement has no keys and one bucket")
        elif self.kind == "hash":
            if not self.keys:
                raise SchemaError("hash placement needs at least one key column")
            if not 1 <= self.buckets <= 4096:
                raise SchemaError(f"bucket count {self.buckets} outside 1..4096")
        else:
            raise SchemaError(f"unknown placement {self.kind!r}")
        if self.owners and len(self.owners) != self.buckets:
            raise SchemaError(f"{len(self.owners)} bucket owners for {self.buckets} buckets")
        if self.replicas < 1 or (self.kind == "replicated" and self.replicas != 1):
            raise SchemaError("replicas is a number from 1, for a hash placement")
        if self.owners and self.replicas > len(set(self.owners)):
            raise SchemaError(
                f"{self.replicas} replicas of each bucket need as many nodes, not {len(set(self.owners))}"
            )

    @classmethod
    def parse(cls, text: str, buckets: int = DEFAULT_BUCKETS) -> Placement:
        """`replicated`, `hash(col, ...)` or `hash(col, ...) replicas K`."""
        text = text.strip()
        if text == "replicated":
            return cls()
        if m := _HASH.fullmatch(text):
            keys = tuple(k.strip() for k in m[1].split(",") if k.strip())
            return cls("hash", keys, buckets, replicas=int(m[2] or 1))
        raise SchemaError(
            f"placement must be 'replicated', 'hash(col, ...)' or 'hash(col, ...) replicas K', not {text!r}"
        )

    def with_owners(self, nodes: Sequence[str]) -> Placement:
        """Buckets assigned round-robin to `nodes`."""
        owners = tuple(nodes[b % len(nodes)] for b in range(self.buckets))
        return Placement(self.kind, self.keys, self.buckets, owners, self.replicas)

    def holders(self, bucket: int) -> tuple[str, ...]:
        """The nodes holding a bucket: its owner first, then its replicas."""
        ring = list(dict.fromkeys(self.owners))
        start = ring.index(self.owners[bucket])
        return tuple(ring[(start + r) % len(ring)] for r in range(self.replicas))

    def __str__(self) -> str:
        if self.kind == "replicated":
            return "replicated"
        return f"hash({', '.join(self.keys)}) x{self.buckets}" + (
            f" replicas {self.replicas}" if self.replicas > 1 else ""
        )


@dataclass(frozen=True)
class TableSchema:
    name: str
    columns: tuple[Column, ...]
    sort_key: tuple[str, ...] = ()
    placement: Placement = Placement()

    def __post_init__(self) -> None:
        if not TABLE_NAME_PATTERN.fullmatch(self.name):
            raise SchemaError(f"invalid table name {self.name!r}: use letters, digits and _")
        if not self.columns:
            raise SchemaError(f"table {self.name} has no columns")
        seen: set[str] = set()
        for column in self.columns:
            if column.name.lower() in seen:
                raise SchemaError(f"table {self.name} has two columns named {column.name!r}")
            seen.add(column.name.lower())
        for key in (*self.sort_key, *self.placement.keys):
            self.column(key)

    def column(self, name: str) -> Column:
        for column in self.columns:
            if column.name == name:
                return column
        raise SchemaError(f"table {self.name} has no column {name!r}")

    @property
    def column_names(self) -> list[str]:
        return [c.name for c in self.columns]

    @functools.cached_property
    def sql_columns(self) -> tuple[tuple[str, str], ...]:
        """(name, SQL type) of each column, as queries are checked against them (read once)."""
        return tuple((c.name, sql_name(c.arrow_type)) for c in self.columns)

    def arrow_schema(self) -> pa.Schema:
        return pa.schema([c.field() for c in self.columns])

    @classmethod
    def from_arrow(
        cls,
        name: str,
        schema: pa.Schema,
        sort_key: Iterable[str] = (),
        placement: Placement = Placement(),
    ) -> TableSchema:
        columns = tuple(Column(f.name, catalog_type_name(f.type), f.nullable) for f in schema)
        return cls(name, columns, tuple(sort_key), placement)

    def to_json(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "columns": [{"name": c.name, "type": c.type, "nullable": c.nullable} for c in self.columns],
            "sort_key": list(self.sort_key),
            "placement": {
                "kind": self.placement.kind,
                "keys": list(self.placement.keys),
                "buckets": self.placement.buckets,
                "owners": list(self.placement.owners),
                "replicas": self.placement.replicas,
            },
        }

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> TableSchema:
        p = data["placement"]
        return cls(
            data["name"],
            tuple(Column(c["name"], c["type"], c["nullable"]) for c in data["columns"]),
            tuple(data["sort_key"]),
            Placement(p["kind"], tuple(p["keys"]), p["buckets"], tuple(p["owners"]), p.get("replicas", 1)),
        )
