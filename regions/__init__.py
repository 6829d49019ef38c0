"""Composing a region: the launcher that starts its processes (`launcher.LocalRegion`: the gateway
with the region's balancer, its routers and storage nodes), the same region embedded in one
process for tests and examples (`embedded.EmbeddedRegion`), and the region's Spark session
(`spark_session`). Balancing between regions will live here too; none exists yet.

The public face is these modules, imported by name and never here: composing a region imports
the gateway, which must stay importable without this package.
"""

__all__ = ["embedded", "launcher", "spark_session"]
