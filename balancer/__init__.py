"""Query-per-core-plus-one admission (PerformSys): the region balancer's FIFO queue, routers
that fan out to groups of nodes, and nodes with K slots and a one-query buffer, linked by
WebSockets that carry the packets of `balancer.packets`. It builds on storage and knows nothing
of the gateway above it.

The public names below load their module on first use (`lazy_loader.attach`, PEP 562), so that a
region loads only the node backend it runs (`NativeBackend` reads storage, `MysqlBackend` a
MariaDB server, `SimulationBackend` neither).
"""

from __future__ import annotations

import lazy_loader

_FACE: dict[str, tuple[str, ...]] = {
    "journal": ("Journal",),
    "logs": ("LOG_FORMATS", "configure_logs", "logged_as"),
    "mysql_backend": ("MysqlBackend",),
    "native_backend": ("NativeBackend",),
    "packets": ("Answer", "NodeInfo", "NodeState", "Request", "arrow_payload", "read_payload"),
    "region_balancer": ("DispatchFailed", "HandedOver", "Overloaded", "RegionBalancer", "Ticket", "query_id"),
    "router": ("Router",),
    "server": ("Backend", "NodeServer"),
    "service": ("serve", "settled"),
    "simulation": ("TABLE_5_5", "TABLE_5_6", "SimulationBackend", "SimulationConfig"),
}
__getattr__, __dir__, __all__ = lazy_loader.attach(__name__, submod_attrs=_FACE)
