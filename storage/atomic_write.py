"""Files replaced whole: a reader finds the old file or the new one, never a part of one.

Every file a node writes (block files, their decoded copies, manifests) is written to a temporary
file beside its place and renamed over it, so a process that dies mid-write leaves the old file and
a leftover the garbage collection removes (`storage.store.collect_garbage`). A disk that fills up
mid-write leaves nothing behind either, and says so with `DiskFullError`, which the node answers
as 507 and a load reports naming its table.
"""

from __future__ import annotations

import errno
import os
import threading
from pathlib import Path

import pyarrow as pa

from storage.errors import DiskFullError


def write_atomically(path: Path, data: bytes | pa.Buffer, what: str, durable: bool = True) -> None:
    """Put `data` at `path` in one step; `durable` fsyncs it before the rename (a decoded copy,
    which can be made again, is not). `what` names the file in the DiskFullError of a full disk.
    The temporary file is named for this process and thread: several may write the same file."""
    partial = path.with_name(f"{path.name}.{os.getpid()}-{threading.get_ident()}.tmp")
    try:
        with open(partial, "wb") as f:
            f.write(data)
            if durable:
                f.flush()
                os.fsync(f.fileno())
        os.replace(partial, path)
    except OSError as e:
        partial.unlink(missing_ok=True)
        if e.errno == errno.ENOSPC:
            raise DiskFullError(f"no space left on the disk of {path.parent} for {what}") from None
        raise


def fsync_dir(directory: Path) -> None:
    """Make the renames in `directory` durable (a manifest replaced, a table retired)."""
    fd = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
