"""Query-per-core-plus-one admission: nodes, routers and the region balancer."""
