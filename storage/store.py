"""A node's store: a directory with one subdirectory per table (manifest + block files).

Loading is transactional. A `TableWriter` writes new block files under names no manifest
uses yet, then `commit()` swaps the manifest atomically and removes the files only the old
version used. Until the commit, readers see the previous version; a writer that dies leaves
only orphan files, which a later commit removes.
"""

from __future__ import annotations

import fcntl
import re
import shutil
import threading
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pyarrow as pa

from gpu_kernels import EncodedBlock
from storage.blockfile import BlockEntry, read_block, write_block
from storage.catalog import TABLE_NAME_PATTERN, TableSchema
from storage.errors import CorruptBlockError, SchemaError, StorageError, TableNotFoundError
from storage.manifest import MANIFEST, Manifest, Sizing, read_manifest, write_manifest

LOAD_ID = re.compile(r"[0-9a-f]{8,32}")
ORPHAN_AGE_S = 3600  # files of no manifest older than this are leftovers of a dead load
_LOCK = ".lock"


class Store:
    """One storage node's data directory."""

    def __init__(self, root: str | Path, node: str = "local"):
        self.root = Path(root)
        self.node = node
        self.root.mkdir(parents=True, exist_ok=True)

    def __repr__(self) -> str:
        return f"Store({str(self.root)!r}, node={self.node!r})"

    def table_dir(self, name: str) -> Path:
        if not TABLE_NAME_PATTERN.fullmatch(name):
            raise TableNotFoundError(f"invalid table name {name!r}")
        return self.root / name

    def tables(self) -> list[str]:
        return sorted(p.name for p in self.root.iterdir() if (p / MANIFEST).is_file())

    def exists(self, name: str) -> bool:
        return (self.table_dir(name) / MANIFEST).is_file()

    def table(self, name: str) -> Table:
        manifest = read_manifest(self.table_dir(name))
        if manifest is None:
            raise TableNotFoundError(f"no table {name!r} in {self.root}")
        return Table(self, manifest)

    def drop(self, name: str) -> None:
        directory = self.table_dir(name)
        if not directory.exists():
            raise TableNotFoundError(f"no table {name!r} in {self.root}")
        with _locked(directory):
            (directory / MANIFEST).unlink(missing_ok=True)
        shutil.rmtree(directory)

    def writer(
        self,
        schema: TableSchema,
        sizing: Sizing,
        compression: str = "zstd",
        mode: str = "replace",
        load_id: str | None = None,
    ) -> TableWriter:
        return TableWriter(self, schema, sizing, compression, mode, load_id)


class Table:
    """One version of a table, as its manifest describes it."""

    def __init__(self, store: Store, manifest: Manifest):
        self.store = store
        self.manifest = manifest

    @property
    def name(self) -> str:
        return self.manifest.table.name

    @property
    def schema(self) -> TableSchema:
        return self.manifest.table

    @property
    def rows(self) -> int:
        return self.manifest.rows

    @property
    def blocks(self) -> list[BlockEntry]:
        return self.manifest.blocks

    def read_block(self, entry: BlockEntry) -> EncodedBlock:
        try:
            return read_block(self.store.table_dir(self.name) / entry.file, entry)
        except CorruptBlockError as e:
            raise CorruptBlockError(f"table {self.name}: {e}") from None

    def iter_blocks(self) -> Iterator[tuple[BlockEntry, EncodedBlock]]:
        for entry in self.blocks:
            yield entry, self.read_block(entry)

    def to_arrow(self, columns: list[str] | None = None) -> pa.Table:
        """Decode the whole table (or some columns) back into Arrow."""
        schema = self.schema.arrow_schema()
        if columns is not None:
            for name in columns:
                self.schema.column(name)
            schema = pa.schema([schema.field(n) for n in columns])
        batches = [block.decode(schema.names, schema) for _, block in self.iter_blocks()]
        return pa.Table.from_batches(batches, schema=schema)

    def verify(self) -> list[str]:
        """Read every block; return one message per missing, truncated or corrupt file."""
        problems = []
        for entry in self.blocks:
            try:
                self.read_block(entry)
            except CorruptBlockError as e:
                problems.append(str(e))
        return problems


@contextmanager
def _locked(directory: Path):
    directory.mkdir(parents=True, exist_ok=True)
    with open(directory / _LOCK, "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)


class TableWriter:
    """Writes one new version of a table; nothing is visible until `commit()`.

    Blocks are added either encoded here (`write`) or written elsewhere with
    `storage.blockfile.write_block` into `directory` under `block_name(...)` and handed over
    as entries (`add`), which is how ingest tasks running in other processes contribute.
    """

    def __init__(
        self, store: Store, schema: TableSchema, sizing: Sizing, compression: str, mode: str, load_id: str | None = None
    ):
        if mode not in ("replace", "append"):
            raise ValueError(f"mode must be 'replace' or 'append', not {mode!r}")
        if load_id is not None and not LOAD_ID.fullmatch(load_id):
            raise StorageError(f"invalid load id {load_id!r}")
        self.store = store
        self.schema = schema
        self.sizing = sizing
        self.compression = compression
        self.mode = mode
        self.load_id = load_id or uuid.uuid4().hex[:12]
        self.directory = store.table_dir(schema.name)
        self.directory.mkdir(parents=True, exist_ok=True)
        self.entries: list[BlockEntry] = []
        self._sequence = 0
        self._mutex = threading.Lock()
        self.finished = False

    def block_name(self, bucket: int, sequence: int) -> str:
        suffix = ".arrow.zst" if self.compression == "zstd" else ".arrow"
        return f"{self.load_id}-{bucket:04d}-{sequence:06d}{suffix}"

    def write(self, block: EncodedBlock, bucket: int = 0) -> BlockEntry:
        with self._mutex:
            sequence = self._sequence
            self._sequence += 1
        entry = write_block(self.directory, self.block_name(bucket, sequence), block, bucket, self.compression)
        self.add([entry])
        return entry

    def add(self, entries: list[BlockEntry]) -> None:
        with self._mutex:
            self.entries.extend(entries)

    def commit(self) -> Manifest:
        """Swap in the new version atomically and delete files no version needs any more."""
        with _locked(self.directory):
            old = read_manifest(self.directory)
            blocks = sorted(self.entries, key=lambda e: (e.bucket, e.file))
            if self.mode == "append" and old is not None:
                if old.table.columns != self.schema.columns:
                    raise SchemaError(f"table {self.schema.name}: cannot append, the columns differ")
                blocks = old.blocks + blocks
            manifest = Manifest(self.schema, (old.version + 1) if old else 1, self.sizing, blocks)
            write_manifest(self.directory, manifest)
            self.finished = True
            self._collect_garbage(old, manifest)
        return manifest

    def abort(self) -> None:
        """Remove this writer's files; the table stays as it was."""
        for path in self.directory.glob(f"{self.load_id}-*"):
            path.unlink(missing_ok=True)
        self.finished = True

    def _collect_garbage(self, old: Manifest | None, new: Manifest) -> None:
        live = {b.file for b in new.blocks} | {MANIFEST, _LOCK}
        dead = {b.file for b in old.blocks} - live if old else set()
        now = time.time()
        for path in self.directory.iterdir():
            if path.name in live:
                continue
            if path.name in dead or now - path.stat().st_mtime > ORPHAN_AGE_S:
                path.unlink(missing_ok=True)

    def __enter__(self) -> TableWriter:
        return self

    def __exit__(self, exc_type, exc, tb) -> None:
        if exc_type is not None and not self.finished:
            self.abort()
        elif not self.finished:
            raise StorageError("TableWriter closed without commit()")
