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


class VersionGoneError(StorageError):
    """A scan asked for a table version the node no longer keeps (a newer load replaced it and no
    query held the old one); running the query again reads the current version."""

    code = "version_gone"


class VersionConflictError(StorageError):
    """A load's commit names a version the table already has or has passed (another load committed
    first)."""

    code = "version_conflict"


class DiskFullError(StorageError):
    """A block or manifest could not be written: no space left on the node's disk. The load fails
    naming its table; what was already served stays as it was."""

    code = "disk_full"


class RedistributionError(StorageError):
    """A table cannot be moved as asked (no such table or node, a bucket no node serves, the target
    region without nodes); the message says what is missing."""

    code = "cannot_redistribute"
