"""Writing encoded blocks to their owners: a node's data directory, or a storage node over HTTP.

Ingest tasks (Spark executors, or anything else) cut rows into blocks, encode them with the
storage library and `put` each block file to the node that owns its bucket (every node, for a
replicated table). Nothing is visible until `commit` swaps the table's manifest on each node;
`abort` removes what a failed load uploaded.
"""

from __future__ import annotations

import logging
import re
from abc import ABC, abstractmethod
from collections.abc import Iterable
from dataclasses import dataclass, field, replace
from pathlib import Path

import pyarrow as pa

from storage.block import conform, encode_block
from storage.blockfile import BlockEntry, check_file, serialize_block, write_file
from storage.catalog import TableSchema
from storage.encoding_choice import EncodingOptions
from storage.errors import DiskFullError, StorageError, TableNotFoundError
from storage.manifest import Sizing
from storage.node_client import NodeClient, NodeError
from storage.store import LOAD_ID, Store

log = logging.getLogger("cxg.ingest")
BLOCK_FILE = re.compile(r"[0-9a-f]{8,32}-\d{4}-[0-9a-z]+-\d{6}\.arrow(\.zst)?")


class Target(ABC):
    """Where the blocks of one node go."""

    node: str

    @abstractmethod
    def put(self, table: str, load_id: str, name: str, payload: bytes) -> None: ...

    @abstractmethod
    def version(self, table: str) -> int:
        """The newest version of the table this node has had (0: none), retired ones included."""

    @abstractmethod
    def commit(self, load: Commit, entries: list[BlockEntry]) -> int:
        """Swap in the new version made of `entries` (and the blocks `load` keeps here); returns its
        version number."""

    @abstractmethod
    def abort(self, table: str, load_id: str) -> None:
        """Remove what load `load_id` uploaded; if it committed here, undo that first."""

    @abstractmethod
    def retire(self, table: str) -> None:
        """Stop serving the table here, its version kept for the queries reading it (a move)."""


class DirectoryTarget(Target):
    """A node's data directory on this machine (also what a node does with uploads)."""

    def __init__(self, store: Store):
        self.store = store
        self.node = store.node

    def put(self, table: str, load_id: str, name: str, payload: bytes) -> None:
        if not LOAD_ID.fullmatch(load_id) or not BLOCK_FILE.fullmatch(name) or not name.startswith(load_id):
            raise StorageError(f"invalid block file name {name!r} for load {load_id!r}")
        directory = self.store.table_dir(table)
        directory.mkdir(parents=True, exist_ok=True)
        try:
            write_file(directory, name, payload)
        except DiskFullError as e:
            raise DiskFullError(f"loading table {table} on node {self.node}: {e}") from None
        if _aborted(directory, load_id).exists():  # aborted while this block was on its way: remove it here
            (directory / name).unlink(missing_ok=True)
            raise StorageError(f"load {load_id} of table {table} was aborted")

    def version(self, table: str) -> int:
        try:
            return max(self.store.versions(table))
        except TableNotFoundError:
            return 0

    def commit(self, load: Commit, entries: list[BlockEntry]) -> int:
        directory = self.store.table_dir(load.schema.name)
        for entry in entries:
            if not entry.file.startswith(load.load_id):
                raise StorageError(f"block {entry.file} does not belong to load {load.load_id}")
            check_file(directory / entry.file, entry)
        writer = self.store.writer(load.schema, load.sizing, load.compression, load.mode, load.load_id)
        writer.add(entries)
        keep = load.keep.get(self.node, ())
        return writer.commit(load.version, keep, load.base, load.data, load.drop).version

    def retire(self, table: str) -> None:
        self.store.retire(table)

    def abort(self, table: str, load_id: str) -> None:
        if not LOAD_ID.fullmatch(load_id):
            raise StorageError(f"invalid load id {load_id!r}")
        directory = self.store.table_dir(table)
        directory.mkdir(parents=True, exist_ok=True)
        if self.store.exists(table):
            self.store.revert(table, load_id)  # committed here already: the previous version is back
        _aborted(directory, load_id).touch()  # first the mark, then the files: see `_aborted`
        for path in directory.glob(f"{load_id}-*"):
            path.unlink(missing_ok=True)


def _aborted(directory: Path, load_id: str) -> Path:
    """The mark an abort leaves. A task of the load may still be uploading when the load is aborted
    (Spark aborts a write when one task fails, while others still run): an upload checks the mark
    after writing its file, and an abort marks before removing files, so each late block is removed
    by one of the two. Marks are removed with other leftovers (`storage.store.ORPHAN_AGE_S`)."""
    return directory / f"{load_id}.aborted"


class NodeTarget(Target):
    """A storage node reached over HTTP."""

    def __init__(self, url: str, node: str | None = None):
        """`node`: its name when known (else asked of it)."""
        self.client = NodeClient(url)
        self.url = url
        self.node = node or self.client.get("/v1/node")["node"]

    def put(self, table: str, load_id: str, name: str, payload: bytes) -> None:
        self.client.put_bytes(f"/v1/tables/{table}/loads/{load_id}/blocks/{name}", payload)

    def version(self, table: str) -> int:
        try:
            return max(self.client.get(f"/v1/tables/{table}/versions")["versions"])
        except NodeError as e:
            if e.status == 404:
                return 0
            raise

    def commit(self, load: Commit, entries: list[BlockEntry]) -> int:
        body = {
            "definition": load.schema.to_json(),
            "sizing": vars(load.sizing),
            "compression": load.compression,
            "mode": load.mode,
            "entries": [e.to_json() for e in entries],
            "version": load.version,
            "keep": list(load.keep.get(self.node, ())),
            "base": load.base,
            "data": load.data,
            "drop": list(load.drop),
        }
        return self.client.post(f"/v1/tables/{load.schema.name}/loads/{load.load_id}/commit", body)["version"]

    def abort(self, table: str, load_id: str) -> None:
        self.client.delete(f"/v1/tables/{table}/loads/{load_id}")

    def retire(self, table: str) -> None:
        self.client.delete(f"/v1/tables/{table}")


@dataclass(frozen=True)
class Commit:
    """What one load commits on every node it wrote to: the table's new definition, sizing and
    storage, under one version number. A bucket move (`storage.redistribution`) adds, per node, the
    buckets whose blocks it keeps from version `base`, and `data`, the identity of rows copied. An
    append (`storage.appends`) names the blocks its own replace, merged into them, in `drop`."""

    schema: TableSchema
    sizing: Sizing
    compression: str
    mode: str
    load_id: str
    version: int | None = None
    keep: dict[str, tuple[int, ...]] = field(default_factory=dict)  # node -> buckets it keeps
    base: int | None = None
    data: str = ""
    drop: tuple[str, ...] = ()  # an append: the blocks of the current version its blocks replace


def commit_all(targets: list[Target], load: Commit, entries: dict[str, list[BlockEntry]]) -> int:
    """Commit a load on each of its nodes under one version number, one past the newest any of them
    has: a gateway shows the new version only once every node holding the table has it, and until
    then reads the previous one, which the nodes that committed first keep. When a node's commit
    fails (another load committed first, a full disk, a node gone), the load is aborted on every
    node, undoing the commits made: no node is left a version ahead of the others."""
    load = replace(load, version=next_version(targets, load.schema.name))
    try:
        for t in targets:
            t.commit(load, entries.get(t.node, []))
    except BaseException:
        abort_all(targets, load.schema.name, load.load_id)
        raise
    return load.version


def next_version(targets: Iterable[Target], table: str) -> int:
    """The version a load commits on all its nodes: one past the newest any of them has, so that one
    number names the same load on every node."""
    return 1 + max((t.version(table) for t in targets), default=0)


def abort_all(targets: Iterable[Target], table: str, load_id: str) -> None:
    """Abort a load on every node it reached that can be reached (a node that cannot keeps the
    load's files until its leftovers are collected, and reverts nothing it never committed)."""
    for t in targets:
        try:
            t.abort(table, load_id)
        except (StorageError, OSError) as e:
            log.warning("aborting load %s of table %s on node %s failed: %s", load_id, table, t.node, e)


def load_target(spec: str, index: int = 0) -> Target:
    """`http://host:port` (a running node) or a directory path (named node-<index>)."""
    if spec.startswith(("http://", "https://")):
        return NodeTarget(spec)
    return DirectoryTarget(Store(spec, node=f"node-{index}"))


@dataclass
class BlockCutter:
    """Cuts the rows of one bucket into RC-row blocks, encodes and uploads them; block names are
    numbered across all of one task's writes."""

    schema: TableSchema
    sizing: Sizing
    compression: str
    load_id: str
    encoding: EncodingOptions
    written: int = field(default=0, init=False)

    def write(self, rows: pa.Table, bucket: int, targets: list[Target], part: str) -> dict[str, list[BlockEntry]]:
        """Upload the bucket's blocks to each target; entries per target node."""
        rows = conform(rows, self.schema).combine_chunks()
        count = -(-rows.num_rows // self.sizing.block_rows)
        entries: dict[str, list[BlockEntry]] = {t.node: [] for t in targets}
        for i in range(count):
            start = rows.num_rows * i // count
            stop = rows.num_rows * (i + 1) // count
            block = encode_block(rows.slice(start, stop - start), self.schema, self.encoding)
            suffix = ".arrow.zst" if self.compression == "zstd" else ".arrow"
            name = f"{self.load_id}-{bucket:04d}-{part}-{self.written:06d}{suffix}"
            self.written += 1
            payload, entry = serialize_block(block, name, bucket, self.compression)
            for t in targets:
                t.put(self.schema.name, self.load_id, name, payload)
                entries[t.node].append(entry)
        return entries


class BlockStream:
    """The rows of one bucket as they stream in, handed on as whole blocks: at most two blocks' rows
    (and the batch being added) are held, whatever the bucket's size. What is left at the end (one
    to two blocks' rows) is cut into equal blocks."""

    def __init__(self, block_rows: int):
        self.block_rows = block_rows
        self.held = 0
        self._batches: list[pa.RecordBatch] = []

    def add(self, batch: pa.RecordBatch) -> pa.Table | None:
        """Hold `batch`; rows whose blocks are whole (a multiple of RC) once two blocks' rows are held."""
        self._batches.append(batch)
        self.held += batch.num_rows
        if self.held < 2 * self.block_rows:
            return None
        whole = (self.held // self.block_rows - 1) * self.block_rows
        rows = pa.Table.from_batches(self._batches)
        self._batches = rows.slice(whole).to_batches()
        self.held -= whole
        return rows.slice(0, whole)

    def end(self) -> pa.Table | None:
        """The rows still held, if any; the stream is then empty."""
        rows = pa.Table.from_batches(self._batches) if self._batches else None
        self._batches, self.held = [], 0
        return rows
