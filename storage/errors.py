"""Errors raised by the storage layer; each has a stable code for the HTTP API."""


class StorageError(Exception):
    """Base class; `code` is stable and machine-readable."""

    code = "storage_error"


class TableNotFoundError(StorageError):
    code = "table_not_found"


class SchemaError(StorageError):
    """A table definition or a source's data does not fit the catalog's rules."""

    code = "invalid_schema"


class CorruptBlockError(StorageError):
    """A block file is missing, truncated or fails its checksum; the message names the file."""

    code = "corrupt_block"


class ManifestError(StorageError):
    code = "corrupt_manifest"
