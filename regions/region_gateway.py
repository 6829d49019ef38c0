"""A region's gateway composed from the whole configuration.

The gateway takes only its own sections; what the other sections decide for it (the kind of its
nodes, how its balancer dispatches, the region's name in a file of several) is handed to it here,
and its application gets the regions floor's parts: the report of overload and, in a file of
several regions, the links to the others.
"""

from __future__ import annotations

from aiohttp import web

from gateway import Gateway, SparkFactory
from regions.config import Config
from regions.interregional import InterRegional
from regions.region_load import OverloadWatch, QueueView


def region_gateway(config: Config, spark: SparkFactory | None = None) -> Gateway:
    """The gateway of the region `config` describes, with `spark`, the region's session factory."""
    return Gateway(
        config.gateway,
        config.spark,
        spark,
        sql=config.sql,
        backend=config.region.backend,
        free_slot_first=config.region.dispatch == "free-slot-first",
        name=config.name,
    )


def gateway_app(config: Config, gateway: Gateway) -> web.Application:
    """The gateway's application: its report of overload, and the links to the other regions when it
    has any."""
    app = gateway.app()
    view = QueueView(config, gateway)
    region = config.region
    OverloadWatch(view, region.overload_weight, region.overload_seconds).install(app, gateway)
    if config.regions:
        InterRegional(config, gateway).install(app)
    return app
