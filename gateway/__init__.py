"""The SQL-over-HTTP gateway in front of one region, and its Python clients.

The public names below load their module on first use (PEP 562), and `import gateway` imports
no module at all, so that a client (`from gateway import dbapi`) loads neither the HTTP server
nor Spark nor the kernels:

- `dbapi`: the DB-API 2.0 driver (`dbapi.connect(url)`);
- `sqlalchemy_dialect`: `create_engine("cxg://host:port")`;
- `Client`: the small HTTP client both of them use;
- `Gateway`: the composition root of the service, and `Config` with `load_config`: its
  configuration.
"""

from __future__ import annotations

import importlib
from typing import Any

_FACE: dict[str, tuple[str, ...]] = {
    "background": ("free_port",),
    "client": ("Client", "GatewayError"),
    "config": ("Config", "ConfigError", "SparkFactory", "SparkSettings", "load_config", "parse_size"),
    "results": ("json_rows",),
    "server": ("Gateway",),
}
_MODULES = ("dbapi", "sqlalchemy_dialect")
_HOME = {name: module for module, names in _FACE.items() for name in names}
__all__ = sorted([*_HOME, *_MODULES])


def __getattr__(name: str) -> Any:
    if name in _MODULES:
        return importlib.import_module(f"gateway.{name}")
    if name not in _HOME:
        raise AttributeError(f"module 'gateway' has no attribute {name!r}")
    return getattr(importlib.import_module(f"gateway.{_HOME[name]}"), name)


def __dir__() -> list[str]:
    return __all__
