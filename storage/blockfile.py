"""Block files on disk: written atomically, checksummed, optionally zstd-wrapped.

A block file is the block's Arrow IPC bytes, or one zstd frame around them. Its size and
CRC-32 are recorded in the manifest; reading checks both before parsing, so a truncated or
corrupt file raises `CorruptBlockError` naming the file instead of being read as data.

A node serves its blocks memory-mapped (`map_block`): a zstd block is checked and decompressed once
into `decoded/<file>.ipc` beside it, and every process of the node (the node and its scan workers)
maps that file, so they share one copy of the encoded block in the page cache, which the kernel can
also evict under pressure, instead of a private copy per process.
"""

from __future__ import annotations

import zlib
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import pyarrow as pa
import zstandard

from gpu_kernels import EncodedBlock
from storage.atomic_write import write_atomically
from storage.block import ChosenColumn, block_from_ipc, block_to_ipc
from storage.errors import CorruptBlockError

COMPRESSIONS = ("zstd", "none")
DECODED = "decoded"  # the table directory's folder of decompressed block files (see `map_block`)
ZSTD_LEVEL = 3
_MAX_STAT_STRING = 64


@dataclass
class ColumnEntry:
    """Which chain one column of one block got, and why (see `cxg storage stats`)."""

    chain: str
    runs: int
    distinct: int
    encoded_bytes: int
    plain_bytes: int
    null_count: int
    sorted: bool = False
    minimum: Any = None
    maximum: Any = None
    candidates: dict[str, int] = field(default_factory=dict)


@dataclass
class BlockEntry:
    file: str
    bucket: int
    rows: int
    bytes: int
    crc32: int
    compression: str
    columns: dict[str, ColumnEntry]

    def to_json(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> BlockEntry:
        columns = {name: ColumnEntry(**c) for name, c in data["columns"].items()}
        return cls(**{**data, "columns": columns})


def _stat_value(value: Any) -> Any:
    if isinstance(value, str) and len(value) > _MAX_STAT_STRING:
        return None
    return value


def write_block(directory: Path, name: str, block: EncodedBlock, bucket: int, compression: str) -> BlockEntry:
    """Write `block` as `directory/name` (via a temp file and rename) and describe it."""
    payload, entry = serialize_block(block, name, bucket, compression)
    write_file(directory, name, payload)
    return entry


def write_file(directory: Path, name: str, payload: bytes | pa.Buffer) -> None:
    """Write a block file atomically; a disk that fills up leaves no part of it (DiskFullError)."""
    write_atomically(directory / name, payload, f"block {name}")


def serialize_block(block: EncodedBlock, name: str, bucket: int, compression: str) -> tuple[bytes, BlockEntry]:
    """The file bytes of `block` and the manifest entry describing them."""
    if compression not in COMPRESSIONS:
        raise ValueError(f"compression must be one of {COMPRESSIONS}, not {compression!r}")
    payload = block_to_ipc(block)
    if compression == "zstd":
        payload = zstandard.ZstdCompressor(level=ZSTD_LEVEL).compress(payload)
    payload = bytes(payload)
    columns = {}
    for column in block.columns.values():
        s = column.stats if isinstance(column, ChosenColumn) else None  # a block read back has none
        columns[column.name] = ColumnEntry(
            chain=column.encoding.chain,
            runs=s.runs if s else 0,
            distinct=s.distinct if s else 0,
            encoded_bytes=column.nbytes,
            plain_bytes=s.plain_bytes if s else 0,
            null_count=column.null_count,
            sorted=s.sorted if s else False,
            minimum=_stat_value(s.minimum) if s else None,
            maximum=_stat_value(s.maximum) if s else None,
            candidates=dict(s.candidates) if s else {},
        )
    return payload, BlockEntry(name, bucket, block.rows, len(payload), zlib.crc32(payload), compression, columns)


def check_file(path: Path, entry: BlockEntry) -> bytes:
    """The file's bytes; CorruptBlockError unless `path` has the entry's size and checksum."""
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        raise CorruptBlockError(f"block file {path} is missing") from None
    if len(data) != entry.bytes:
        raise CorruptBlockError(f"block file {path} is truncated or resized: {len(data)} bytes, expected {entry.bytes}")
    crc = zlib.crc32(data)
    if crc != entry.crc32:
        raise CorruptBlockError(f"block file {path} fails its checksum (crc32 {crc:08x}, expected {entry.crc32:08x})")
    return data


def read_block(path: Path, entry: BlockEntry) -> EncodedBlock:
    """Read and verify one block file; raises CorruptBlockError naming `path`."""
    return _parsed(pa.py_buffer(_ipc_bytes(path, entry)), path, entry)


def _ipc_bytes(path: Path, entry: BlockEntry) -> bytes:
    """The block's IPC bytes: the file checked against its entry, then decompressed."""
    data = check_file(path, entry)
    if entry.compression != "zstd":
        return data
    try:
        return zstandard.ZstdDecompressor().decompress(data)
    except zstandard.ZstdError as e:
        raise CorruptBlockError(f"block file {path} cannot be decoded: {e}") from e


def _parsed(buffer: pa.Buffer, path: Path, entry: BlockEntry) -> EncodedBlock:
    try:
        block = block_from_ipc(buffer)
    except (pa.ArrowException, ValueError, KeyError) as e:
        raise CorruptBlockError(f"block file {path} cannot be decoded: {e}") from e
    if block.rows != entry.rows:
        raise CorruptBlockError(f"block file {path} holds {block.rows} rows, expected {entry.rows}")
    return block


def decoded_path(path: Path) -> Path:
    """Where the decompressed IPC bytes of block file `path` are kept for mapping."""
    return path.parent / DECODED / f"{path.name}.ipc"


def map_block(path: Path, entry: BlockEntry, verify: bool = True) -> EncodedBlock:
    """The block of `path`, its parts views of a memory-mapped file shared by every process that
    maps it. `verify` checks the block file against its entry first (a worker mapping a block its
    node has already checked skips that); raises CorruptBlockError naming `path`."""
    mapped = path if entry.compression == "none" else decoded_path(path)
    if entry.compression == "none":
        if verify:
            check_file(path, entry)
    elif verify or not mapped.exists():
        data = _ipc_bytes(path, entry)  # checked, then its decompressed bytes kept for mapping
        if not mapped.exists():  # made by whichever process maps it first
            mapped.parent.mkdir(exist_ok=True)
            write_atomically(mapped, data, f"the decoded copy of {path.name}", durable=False)
    try:
        buffer = pa.memory_map(str(mapped)).read_buffer()
    except FileNotFoundError:
        raise CorruptBlockError(f"block file {path} is missing") from None
    return _parsed(buffer, path, entry)
