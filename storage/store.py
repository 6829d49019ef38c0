"""A node's store: a directory with one subdirectory per table (manifest + block files).

Loading is transactional. A `TableWriter` writes new block files under names no manifest
uses yet, then `commit()` swaps the manifest atomically. Until the commit, readers see the previous
version; a writer that dies leaves only orphan files, which a later commit removes.

Versions are snapshots. A commit keeps the version it replaces readable (its manifest is retained as
`retained-<version>.json`) until it is released (`Store.release`: the region's gateway does that
once no query pinned to it runs) or, should nobody release it, `RETAIN_S` after it was replaced;
only then are the files no kept version uses removed. A query pinned to a version therefore reads
the same blocks on every node whatever loads commit meanwhile.
"""

from __future__ import annotations

import fcntl
import re
import shutil
import threading
import time
import uuid
from collections.abc import Collection, Iterator
from contextlib import contextmanager
from pathlib import Path

import pyarrow as pa

from gpu_kernels import EncodedBlock
from storage.atomic_write import fsync_dir
from storage.blockfile import DECODED, BlockEntry, map_block, read_block, write_block
from storage.catalog import TABLE_NAME_PATTERN, TableSchema
from storage.errors import (
    CorruptBlockError,
    DiskFullError,
    SchemaError,
    StorageError,
    TableNotFoundError,
    VersionConflictError,
    VersionGoneError,
)
from storage.manifest import MANIFEST, Manifest, Sizing, read_manifest, write_manifest

LOAD_ID = re.compile(r"[0-9a-f]{8,32}")
ORPHAN_AGE_S = 3600  # files of no manifest older than this are leftovers of a dead load
RETAIN_S = 3600.0  # a replaced version nobody released is removed this long after it was replaced
_LOCK = ".lock"
_RETAINED = re.compile(r"retained-(\d+)\.json")


def _retained_name(version: int) -> str:
    return f"retained-{version}.json"


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

    def table(self, name: str, version: int | None = None) -> Table:
        """The table's current version, or version `version` while it is kept (VersionGoneError
        when it is not)."""
        directory = self.table_dir(name)
        manifest = read_manifest(directory)
        if manifest is None and (version is None or not (directory / _retained_name(version)).is_file()):
            raise TableNotFoundError(f"no table {name!r} in {self.root}")
        if version is not None and (manifest is None or version != manifest.version):
            manifest = read_manifest(directory, _retained_name(version))
            if manifest is None:
                raise VersionGoneError(f"table {name!r} version {version} is no longer kept on node {self.node}")
        return Table(self, manifest)

    def versions(self, name: str) -> list[int]:
        """The versions of a table that can be read here, oldest first (the last is the current)."""
        directory = self.table_dir(name)
        current = read_manifest(directory)
        listed = directory.iterdir() if directory.is_dir() else ()
        kept = {int(m[1]) for p in listed if (m := _RETAINED.fullmatch(p.name))}
        if current is None:  # retired: only its kept versions
            if not kept:
                raise TableNotFoundError(f"no table {name!r} in {self.root}")
            return sorted(kept)
        return [*sorted(v for v in kept if v < current.version), current.version]

    def release(self, name: str, version: int) -> bool:
        """Stop keeping a replaced version and remove the files no kept version uses; False when it
        was not kept (the current version is never released)."""
        directory = self.table_dir(name)
        with _locked(directory):
            path = directory / _retained_name(version)
            manifest = read_manifest(directory, path.name)
            if manifest is None:
                return False
            path.unlink()
            collect_garbage(directory, [manifest])
        _remove_if_empty(directory)
        return True

    def revert(self, name: str, load_id: str) -> bool:
        """Undo the commit of load `load_id` if it made the current version here (the load failed on
        another node): the version it replaced is current again (none: the table is gone). False
        when the current version is another load's."""
        directory = self.table_dir(name)
        with _locked(directory):
            current = read_manifest(directory)
            if current is None or current.load != load_id:
                return False
            previous = read_manifest(directory, _retained_name(current.replaced)) if current.replaced else None
            if previous is not None:
                write_manifest(directory, previous)
                (directory / _retained_name(current.replaced)).unlink()
            else:
                (directory / MANIFEST).unlink()
            collect_garbage(directory, [current])
        return True

    def expire(self, name: str) -> None:
        """Forget replaced versions kept longer than RETAIN_S and remove their files."""
        directory = self.table_dir(name)
        with _locked(directory):
            collect_garbage(directory)
        _remove_if_empty(directory)

    def retire(self, name: str) -> int:
        """Stop serving a table here while the queries reading it finish: its current version is
        kept as a replaced one (released, or forgotten after RETAIN_S, as any other), so a scan
        pinned to it still reads it; the table is no longer listed. What a move leaves on the
        nodes it leaves. Returns the version retired."""
        directory = self.table_dir(name)
        with _locked(directory):
            current = read_manifest(directory)
            if current is None:
                raise TableNotFoundError(f"no table {name!r} in {self.root}")
            write_manifest(directory, current, _retained_name(current.version))
            (directory / MANIFEST).unlink()
            fsync_dir(directory)
        return current.version

    def retired(self) -> list[str]:
        """Tables no longer listed whose replaced versions are still kept (`retire`)."""
        return sorted(
            p.name
            for p in self.root.iterdir()
            if p.is_dir() and not (p / MANIFEST).is_file() and any(_RETAINED.fullmatch(f.name) for f in p.iterdir())
        )

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

    @property
    def version(self) -> int:
        return self.manifest.version

    @property
    def directory(self) -> Path:
        return self.store.table_dir(self.name)

    def read_block(self, entry: BlockEntry) -> EncodedBlock:
        try:
            return read_block(self.directory / entry.file, entry)
        except CorruptBlockError as e:
            raise CorruptBlockError(f"table {self.name}: {e}") from None

    def map_blocks(self) -> list[tuple[BlockEntry, EncodedBlock]]:
        """Every block, checked once and memory-mapped (shared with the node's other processes)."""
        try:
            return [(entry, map_block(self.directory / entry.file, entry)) for entry in self.blocks]
        except CorruptBlockError as e:
            raise CorruptBlockError(f"table {self.name}: {e}") from None

    def iter_blocks(self) -> Iterator[tuple[BlockEntry, EncodedBlock]]:
        for entry in self.blocks:
            yield entry, self.read_block(entry)

    def to_arrow(self, columns: list[str] | None = None, entries: list[BlockEntry] | None = None) -> pa.Table:
        """Decode the whole table (or some columns, or the rows of some of its blocks) back into Arrow."""
        schema = self.schema.arrow_schema()
        if columns is not None:
            for name in columns:
                self.schema.column(name)
            schema = pa.schema([schema.field(n) for n in columns])
        entries = self.blocks if entries is None else entries
        batches = [self.read_block(entry).decode(schema.names, schema) for entry in entries]
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
        try:
            entry = write_block(self.directory, self.block_name(bucket, sequence), block, bucket, self.compression)
        except DiskFullError as e:
            raise DiskFullError(f"loading table {self.schema.name} on node {self.store.node}: {e}") from None
        self.add([entry])
        return entry

    def add(self, entries: list[BlockEntry]) -> None:
        with self._mutex:
            self.entries.extend(entries)

    def commit(
        self,
        version: int | None = None,
        keep: Collection[int] = (),
        base: int | None = None,
        data: str = "",
        drop: Collection[str] = (),
    ) -> Manifest:
        """Swap in the new version atomically (as `version` when given: a region-wide number a load
        chooses for all its nodes) and keep the replaced one readable (see the module's doc).

        A bucket move (`storage.redistribution`) gives `keep`, the buckets whose blocks of the
        current version stay in the new one beside the blocks uploaded, so a node copies only the
        buckets it gains; `base`, the version it was planned on (VersionConflictError when this node
        holds another: a load committed meanwhile); and `data`, the identity of the rows when they
        are another version's (a copy, a move), by default this load's. An append gives `drop`, the
        blocks of the current version it leaves out (its own blocks hold their rows)."""
        with _locked(self.directory):
            old = read_manifest(self.directory)
            name, node = self.schema.name, self.store.node
            if base is not None and old is not None and old.version != base:
                raise VersionConflictError(
                    f"table {name} is at version {old.version} on node {node}, not {base}: "
                    "it changed while it was being moved"
                )
            blocks = sorted(self.entries, key=lambda e: (e.bucket, e.file))
            if (self.mode == "append" or keep) and old is not None and old.table.columns != self.schema.columns:
                doing = "keep blocks" if keep else self.mode
                raise SchemaError(f"table {name}: cannot {doing}, the columns differ")
            if self.mode == "append" and old is not None:
                kept = [b for b in old.blocks if b.file not in drop]
                if len(kept) != len(old.blocks) - len(set(drop)):
                    raise VersionConflictError(
                        f"table {name} on node {node}: blocks to replace are not in version {old.version}"
                    )
                blocks = kept + blocks
            elif keep:
                if old is None:
                    raise VersionConflictError(f"table {name} has no version on node {node} to keep buckets of")
                blocks = sorted([b for b in old.blocks if b.bucket in keep] + blocks, key=lambda e: (e.bucket, e.file))
            latest = _latest(self.directory, old)
            if version is not None and version <= latest:
                raise VersionConflictError(
                    f"table {name} is at version {latest} on node {node}: "
                    f"cannot commit version {version} (another load committed first)"
                )
            number = version if version is not None else latest + 1
            replaced = old.version if old else 0
            manifest = Manifest(
                self.schema, number, self.sizing, blocks, load=self.load_id, data=data, replaced=replaced
            )
            try:
                if old is not None:
                    write_manifest(self.directory, old, _retained_name(old.version))
                write_manifest(self.directory, manifest)
            except DiskFullError as e:
                raise DiskFullError(f"loading table {self.schema.name} on node {self.store.node}: {e}") from None
            self.finished = True
            collect_garbage(self.directory)
        return manifest

    def abort(self) -> None:
        """Remove this writer's files; the table stays as it was."""
        for path in self.directory.glob(f"{self.load_id}-*"):
            path.unlink(missing_ok=True)
        self.finished = True

    def __enter__(self) -> TableWriter:
        return self

    def __exit__(self, exc_type, exc, tb) -> None:
        if exc_type is not None and not self.finished:
            self.abort()
        elif not self.finished:
            raise StorageError("TableWriter closed without commit()")


def _latest(directory: Path, current: Manifest | None) -> int:
    """The newest version number a table's directory has seen (a retired table's kept versions
    count: numbers never go back)."""
    kept = [int(m[1]) for p in directory.iterdir() if (m := _RETAINED.fullmatch(p.name))]
    return max([current.version if current else 0, *kept])


def _remove_if_empty(directory: Path) -> None:
    """Remove the directory of a retired table once nothing is left in it (no version kept, no
    upload of a load under way)."""

    def empty() -> bool:
        decoded = directory / DECODED
        left = {p.name for p in directory.iterdir()} - {_LOCK, DECODED}
        return not left and not (decoded.is_dir() and any(decoded.iterdir()))

    if directory.is_dir() and empty():
        with _locked(directory):
            if empty():
                shutil.rmtree(directory, ignore_errors=True)


def collect_garbage(directory: Path, dropped: list[Manifest] = (), retain_s: float | None = None) -> None:
    """Under the table's lock: forget replaced versions older than `retain_s` (default RETAIN_S),
    then remove the block files of the versions no longer kept (`dropped`, and those just forgotten)
    that no kept version uses, the decoded copies of removed files, and leftovers of dead loads
    older than ORPHAN_AGE_S (a load still uploading is younger)."""
    retain_s = RETAIN_S if retain_s is None else retain_s
    now = time.time()
    dropped = list(dropped)
    kept = [MANIFEST]
    for path in list(directory.iterdir()):
        if _RETAINED.fullmatch(path.name):
            if now - path.stat().st_mtime > retain_s:
                manifest = read_manifest(directory, path.name)
                path.unlink(missing_ok=True)
                dropped += [manifest] if manifest is not None else []
            else:
                kept.append(path.name)
    live = {MANIFEST, _LOCK, DECODED, *kept}
    for name in kept:
        manifest = read_manifest(directory, name)
        live |= {b.file for b in manifest.blocks} if manifest is not None else set()
    dead = {b.file for m in dropped for b in m.blocks} - live
    for path in directory.iterdir():
        if path.name not in live and (path.name in dead or _age(path, now) > ORPHAN_AGE_S):
            path.unlink(missing_ok=True)
    decoded = directory / DECODED
    if decoded.is_dir():
        for path in decoded.iterdir():
            orphan = not (directory / path.name.removesuffix(".ipc")).exists()
            if orphan and (path.name.endswith(".ipc") or _age(path, now) > ORPHAN_AGE_S):
                path.unlink(missing_ok=True)


def _age(path: Path, now: float) -> float:
    """Seconds since `path` was written; 0 when it is gone meanwhile (a block file being written is
    renamed from its temporary name while the directory is read: not garbage)."""
    try:
        return now - path.stat().st_mtime
    except FileNotFoundError:
        return 0.0
