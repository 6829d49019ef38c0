"""Query-per-core-plus-one admission (PerformSys): the region balancer's FIFO queue, routers
that fan out to groups of nodes, and nodes with K slots and a one-query buffer, linked by
WebSockets that carry the packets of `balancer.packets`.

What a node's slot does with a query is its backend's business; the backends (`native_backend`,
`mysql_backend`, `simulation`) are imported by module, so a region loads only the one it runs.
"""

from balancer.journal import Journal
from balancer.packets import Answer, NodeInfo, Request, arrow_payload, read_payload
from balancer.region_balancer import DispatchFailed, HandedOver, Overloaded, RegionBalancer, Ticket, query_id
from balancer.router import Router
from balancer.server import Backend, NodeServer
from balancer.service import serve, settled

__all__ = [
    "Answer",
    "Backend",
    "DispatchFailed",
    "HandedOver",
    "Journal",
    "NodeInfo",
    "NodeServer",
    "Overloaded",
    "RegionBalancer",
    "Request",
    "Router",
    "Ticket",
    "arrow_payload",
    "query_id",
    "read_payload",
    "serve",
    "settled",
]
