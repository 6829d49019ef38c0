"""Errors raised by the storage layer; each has a stable code and the HTTP status a node answers it
with (`storage.node`'s one middleware reads both): a request the node refuses is a 4xx, a failure
of the node's own files, disk or memory a 5xx."""


class StorageError(Exception):
    """Base class; `code` is stable and machine-readable. Raised as such, it is a request the node
    refuses (a malformed name or version, a block that does not belong to its load)."""

    code = "storage_error"
    status = 400


class TableNotFoundError(StorageError):
    code = "table_not_found"
    status = 404


class SchemaError(StorageError):
    """A table definition or a source's data does not fit the catalog's rules."""

    code = "invalid_schema"


class CorruptBlockError(StorageError):
    """A block file is missing, truncated or fails its checksum; the message names the file."""

    code = "corrupt_block"
    status = 500


class ManifestError(StorageError):
    code = "corrupt_manifest"
    status = 500


class VersionGoneError(StorageError):
    """A scan asked for a table version the node no longer keeps (a newer load replaced it and no
    query held the old one); running the query again reads the current version."""

    code = "version_gone"
    status = 409


class VersionConflictError(StorageError):
    """A load's commit names a version the table already has or has passed (another load committed
    first)."""

    code = "version_conflict"
    status = 409


class DiskFullError(StorageError):
    """A block or manifest could not be written: no space left on the node's disk. The load fails
    naming its table; what was already served stays as it was."""

    code = "disk_full"
    status = 507


class OutOfMemoryError(StorageError):
    """A scan needed more memory than its process may hold (`storage.memory_budget`); the node goes
    on, and the same scan may pass when fewer run beside it."""

    code = "out_of_memory"
    status = 503


class NumericOverflowError(StorageError):
    """Arithmetic of a query's scan whose result could pass 64 bits (the kernels' own
    ``numeric_overflow``): the query's fault, as on a scan's stream."""

    code = "numeric_overflow"


class UnreadableRequestError(StorageError):
    """A request body the node cannot read (not JSON, a field missing or of the wrong kind); the
    code says which request (``invalid_json``, ``invalid_commit``)."""

    def __init__(self, code: str, message: str):
        super().__init__(message)
        self.code = code


class RedistributionError(StorageError):
    """A table cannot be moved as asked (no such table or node, a bucket no node serves, the target
    region without nodes); the message says what is missing."""

    code = "cannot_redistribute"
