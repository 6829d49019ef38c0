"""The native node backend: a storage node's slots, held by queries that the region's engine
runs. The engine plans a query, the balancer takes a slot on every node it reads (a lease),
the engine's scans run on those nodes, and the slots are released when it has finished."""

from __future__ import annotations

from balancer.packets import Answer, Request
from storage import Store


class NativeBackend:
    name = "native"

    def __init__(self, store: Store):
        self.store = store

    def info(self) -> dict[str, int]:
        tables = {}
        for name in self.store.tables():
            try:
                tables[name] = self.store.table(name).rows
            except Exception:  # a damaged table is reported by `cxg storage verify`, not here
                continue
        return tables

    async def execute(self, request: Request) -> Answer:
        return Answer(
            id=request.id,
            node="",
            ok=False,
            code="unsupported",
            message="a native node runs scans for its region's engine; send queries to the gateway",
        )
