"""What the region's storage nodes hold, as the SQL layer needs it."""

from __future__ import annotations

import threading
from dataclasses import dataclass, field

from gateway.sql.errors import UndefinedTable
from storage import NodeClient, TableSchema, sql_name


@dataclass
class TableInfo:
    schema: TableSchema
    nodes: list[str] = field(default_factory=list)  # names of the nodes holding it
    rows: int = 0

    @property
    def replicated(self) -> bool:
        return self.schema.placement.kind == "replicated"

    def where(self) -> str:
        if self.replicated:
            return f"any of {', '.join(self.nodes)} (replicated)"
        return f"{', '.join(self.nodes)} ({self.schema.placement})"


class RegionCatalog:
    """The tables of a region's nodes (name -> base URL), read from their HTTP API."""

    def __init__(self, nodes: dict[str, str]):
        self._lock = threading.Lock()
        self.set_nodes(nodes)

    def set_nodes(self, nodes: dict[str, str]) -> None:
        """The region's nodes changed (joined, left, loaded a table): forget what was read."""
        with self._lock:
            self.nodes = dict(nodes)
            self.clients = {name: NodeClient(url) for name, url in self.nodes.items()}
            self._tables: dict[str, TableInfo] = {}

    def refresh(self) -> None:
        tables: dict[str, TableInfo] = {}
        for node, client in self.clients.items():
            for row in client.get("/v1/tables")["tables"]:
                name = row["name"]
                if name not in tables:
                    tables[name] = TableInfo(TableSchema.from_json(client.get(f"/v1/tables/{name}")))
                info = tables[name]
                info.nodes.append(node)
                info.rows = row["rows"] if info.replicated else info.rows + row["rows"]
        with self._lock:
            self._tables = tables

    def table(self, name: str) -> TableInfo:
        if name not in self._tables:
            self.refresh()
        if name not in self._tables:
            raise UndefinedTable(f"table {name!r} does not exist")
        return self._tables[name]

    def tables(self) -> dict[str, TableInfo]:
        if not self._tables:
            self.refresh()
        return dict(self._tables)

    def sql_schema(self) -> dict[str, dict[str, str]]:
        """table -> column -> SQL type, for qualifying queries."""
        return {
            name: {c.name: sql_name(c.arrow_type) for c in info.schema.columns} for name, info in self.tables().items()
        }

    def urls(self, info: TableInfo) -> list[str]:
        return [self.nodes[n] for n in info.nodes]

    def restricted(self, granted: list[str]) -> RegionCatalog:
        """The same catalog with replicated tables read only from the `granted` nodes (those
        whose slots a query holds); hash-placed tables keep all their owners."""
        tables = {}
        for name, info in self.tables().items():
            nodes = [n for n in info.nodes if n in granted] if info.replicated else info.nodes
            tables[name] = TableInfo(info.schema, nodes or info.nodes, info.rows)
        return RegionCatalog.known(self.nodes, tables)

    @classmethod
    def known(cls, nodes: dict[str, str], tables: dict[str, TableInfo]) -> RegionCatalog:
        """A catalog of `tables` on `nodes` that never asks the nodes what they hold (planning
        without a region, as tests do)."""
        catalog = cls(nodes)
        catalog._tables = dict(tables)
        return catalog
