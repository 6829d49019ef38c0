"""The SQL-over-HTTP gateway in front of one region, and its Python clients.

The public names below load their module on first use (`lazy_loader.attach`, PEP 562), and `import gateway` imports
no module at all, so that a client (`from gateway import dbapi`) loads neither the HTTP server
nor Spark nor the kernels:

- `dbapi`: the DB-API 2.0 driver (`dbapi.connect(url)`);
- `sqlalchemy_dialect`: `create_engine("cxg://host:port")`;
- `Client`: the small HTTP client both of them use;
- `Gateway`: the composition root of the service, built from its sections of the configuration
  (`GatewayConfig`, `SparkSettings`); the whole file is read on the regions floor
  (`regions.load_config`).
"""

from __future__ import annotations

import lazy_loader

_FACE: dict[str, tuple[str, ...]] = {
    "background": ("free_port",),
    "client": ("Client", "GatewayError"),
    "config": ("GatewayConfig", "SparkFactory", "SparkSettings", "SqlSettings", "TokenConfig", "reachable"),
    "errors": ("ApiError", "bad_request"),
    "lifecycle": ("RemoteResult",),
    "results": ("json_rows",),
    "server": ("Gateway",),
    "spark_status": ("master_status",),
    "sql.catalog": ("RegionCatalog", "TableInfo"),
    "sql.errors": ("SqlError",),
    "statements": ("FAILED", "SUCCEEDED", "Statement"),
}
_MODULES = ("dbapi", "sqlalchemy_dialect")
__getattr__, __dir__, __all__ = lazy_loader.attach(__name__, submodules=_MODULES, submod_attrs=_FACE)
