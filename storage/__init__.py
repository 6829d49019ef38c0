"""Compressed columnar storage: catalog, encodings, blocks, tables and loaders."""

from storage.catalog import Column, Placement, TableSchema
from storage.errors import CorruptBlockError, SchemaError, StorageError, TableNotFoundError
from storage.store import Store, Table

__all__ = [
    "Column",
    "CorruptBlockError",
    "Placement",
    "SchemaError",
    "StorageError",
    "Store",
    "Table",
    "TableNotFoundError",
    "TableSchema",
]
