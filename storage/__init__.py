"""Compressed columnar storage: the catalog, block files, tables, loaders and the node service.

Storage builds on `gpu_kernels` (the encoded column vectors) and knows nothing above it. The
public names below load their module on first use (PEP 562), so that a client of one part (the
catalog, the MariaDB loader) does not load the others (Parquet readers, SQLAlchemy).
"""

from __future__ import annotations

import importlib
from typing import Any

_FACE: dict[str, tuple[str, ...]] = {
    "block": ("block_to_ipc", "plain_block"),
    "catalog": ("Column", "Placement", "TableSchema"),
    "encoding_choice": ("EncodingOptions",),
    "errors": ("CorruptBlockError", "SchemaError", "StorageError", "TableNotFoundError"),
    "loader": ("LoadOptions", "load_table"),
    "mysql_load": ("create_database", "load_mysql"),
    "mysql_urls": ("mysql_url",),
    "sources": ("read_parquet",),
    "store": ("Store", "Table"),
    "types": ("working_type",),
}
_HOME = {name: module for module, names in _FACE.items() for name in names}
__all__ = sorted(_HOME)


def __getattr__(name: str) -> Any:
    if name not in _HOME:
        raise AttributeError(f"module 'storage' has no attribute {name!r}")
    return getattr(importlib.import_module(f"storage.{_HOME[name]}"), name)


def __dir__() -> list[str]:
    return __all__
