"""A column's encoded parts over many blocks laid out as a few flat buffers, and per block where its
parts start and how to read them: what a GPU keeps resident (`gpu_kernels.resident`), and what one
kernel launch reads for every block at once (`gpu_kernels.fused_scan`, whose device block table
holds the per-block fields).

Each part of an encoding (bit-packed bytes, plain values, run ends, run values, a dictionary, its
codes) goes into the buffer of its place in the encoding and its dtype, each block's part starting
on an 8-byte boundary, so that a kernel may load aligned 64-bit words of it. A buffer of one block
is that block's own array, not a copy. A block's *signature* says which encodings it has where: a
kernel's source depends on it, and blocks alike share one launch.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from gpu_kernels.decoding import encoding_bound, magnitude
from gpu_kernels.encoded_block import EncodedColumn
from gpu_kernels.encodings import BitPacked, Dictionary, Encoding, Plain, RunLength, Values
from gpu_kernels.placement_hash import hash_inputs
from gpu_kernels.vectors import INT64_MAX

ALIGN = 8  # bytes: every block's part starts on this boundary in its buffer


@dataclass
class _Layout:
    """One block's parts of one column: how they are laid (its signature), where they go, and its scalars."""

    signature: list[str] = field(default_factory=list)
    parts: dict[str, np.ndarray] = field(default_factory=dict)  # buffer key -> this block's part
    scalars: dict[str, int] = field(default_factory=dict)  # field -> value
    key_values: Values | None = None  # the values a group key's codes index (a dictionary, a run's values)


def buffer_key(path: str, values: np.ndarray) -> str:
    """The buffer holding the part at `path` of this dtype (its C type follows from the dtype)."""
    return f"{path}:{values.dtype.str}"


def _layout(encoding: Encoding, path: str, out: _Layout) -> None:
    """The parts of `encoding` (at `path` inside its column's encoding) added to `out`."""
    if isinstance(encoding, Plain) and isinstance(encoding.values, np.ndarray):
        out.signature.append(f"{path}=plain:{encoding.values.dtype.str}")
        out.parts[buffer_key(path, encoding.values)] = encoding.values
    elif isinstance(encoding, BitPacked):
        out.signature.append(f"{path}=bits")
        out.parts[buffer_key(path, encoding.packed)] = encoding.packed
        out.scalars[f"{path}.width"] = encoding.width
        out.scalars[f"{path}.reference"] = encoding.reference
    elif isinstance(encoding, RunLength):
        values = encoding.values
        kind = values.dtype.str if isinstance(values, np.ndarray) else "arrow"
        out.signature.append(f"{path}=runs:{kind}")
        out.parts[buffer_key(f"{path}.ends", encoding.run_ends)] = encoding.run_ends
        if isinstance(values, np.ndarray):
            out.parts[buffer_key(f"{path}.values", values)] = values
        out.scalars[f"{path}.runs"] = len(encoding.run_ends)
        out.key_values = values
    elif isinstance(encoding, Dictionary):
        dictionary = encoding.dictionary
        kind = dictionary.dtype.str if isinstance(dictionary, np.ndarray) else "arrow"
        out.signature.append(f"{path}=dictionary:{kind}")
        if isinstance(dictionary, np.ndarray):
            out.parts[buffer_key(f"{path}.dictionary", dictionary)] = dictionary
        out.key_values = dictionary
        codes = _Layout()
        _layout(encoding.codes, f"{path}.codes", codes)
        out.signature += codes.signature
        out.parts |= codes.parts
        out.scalars |= codes.scalars
    else:  # read by the general kernels only
        out.signature.append(f"{path}={encoding.kind}")


@dataclass(frozen=True)
class SortedRuns:
    """One block's runs in order: their values and ends (int64), and the largest |value|."""

    values: np.ndarray
    ends: np.ndarray
    largest: int


@dataclass
class ColumnImage:
    """One column over a list of blocks: its parts in flat buffers and each block's fields."""

    name: str
    type: pa.DataType
    encodings: list[Encoding]  # per block, as the host holds them
    rows: np.ndarray  # per block
    nulls: np.ndarray  # per block: whether it holds NULLs (the fused kernel reads none)
    bounds: np.ndarray  # per block: a bound on |value| (Python ints: it may pass int64)
    signatures: list[str]  # per block
    buffers: dict[str, np.ndarray]  # buffer key -> every block's part, each aligned
    fields: dict[str, np.ndarray]  # field -> one int64 per block: f"{key}.at" (element offsets), widths, ...
    key_values: list[Values | None]  # per block
    _keys: tuple[Values, np.ndarray, np.ndarray] | None = None
    _runs: dict[int, SortedRuns | None] = field(default_factory=dict)  # per block, on first use

    @classmethod
    def of(cls, name: str, columns: list[EncodedColumn]) -> ColumnImage:
        layouts = []
        for column in columns:
            layout = _Layout()
            _layout(column.encoding, "v", layout)
            layouts.append(layout)
        buffers: dict[str, np.ndarray] = {}
        fields: dict[str, np.ndarray] = {}
        for key in sorted({k for layout in layouts for k in layout.parts}):
            parts = [layout.parts.get(key) for layout in layouts]
            buffers[key], fields[f"{key}.at"] = _concatenated(parts)
        for scalar in sorted({k for layout in layouts for k in layout.scalars}):
            fields[scalar] = np.array([layout.scalars.get(scalar, 0) for layout in layouts], dtype=np.int64)
        return cls(
            name,
            columns[0].type,
            [c.encoding for c in columns],
            np.array([c.length for c in columns], dtype=np.int64),
            np.array([c.validity is not None for c in columns], dtype=bool),
            np.array([_bound(c.encoding) for c in columns], dtype=object),
            ["|".join(layout.signature) for layout in layouts],
            buffers,
            fields,
            [layout.key_values for layout in layouts],
        )

    @property
    def nbytes(self) -> int:
        return sum(b.nbytes for b in self.buffers.values())

    def block_bytes(self, key: str, blocks: np.ndarray) -> int:
        """The bytes of buffer `key` that the parts of `blocks` take, each with its alignment (a buffer
        not laid out by block, as the hash inputs, whole)."""
        buffer, at = self.buffers[key], self.fields.get(f"{key}.at")
        if at is None:
            return int(buffer.nbytes)
        return int((np.append(at[1:], len(buffer)) - at)[blocks].sum()) * buffer.itemsize

    def key_codes(self) -> tuple[Values, np.ndarray]:
        """The distinct values of this column over every block (the codes of a group key), and the
        buffer (at place "key") that maps each block's dictionary entry or run to its code among
        them. Built on first use."""
        if self._keys is None:
            values = self.key_values
            if any(v is None for v in values):
                raise ValueError(f"column {self.name} is not stored as a dictionary or as runs in every block")
            if all(isinstance(v, np.ndarray) for v in values):
                union = np.unique(np.concatenate([v.astype(np.int64) for v in values]))
                codes = [np.searchsorted(union, v.astype(np.int64)).astype(np.int32) for v in values]
            elif not any(isinstance(v, np.ndarray) for v in values):
                encoded = pc.dictionary_encode(pa.chunked_array(values)).unify_dictionaries()
                union = encoded.chunk(0).dictionary if encoded.num_chunks else pa.array([], values[0].type)
                codes = [chunk.indices.to_numpy(zero_copy_only=False).astype(np.int32) for chunk in encoded.chunks]
            else:
                raise ValueError(f"column {self.name} holds its values in NumPy in some blocks and in Arrow in others")
            buffer, at = _concatenated(codes)
            self._keys = (union, buffer, at)
        union, buffer, at = self._keys
        key = buffer_key("key", buffer)
        self.buffers[key], self.fields[f"{key}.at"] = buffer, at
        return union, buffer

    def sorted_runs(self, block: int) -> SortedRuns | None:
        """A block's runs where it is stored as runs of integers in order (what a comparison with a
        literal narrows to a range of rows), else None. Built on first use."""
        if block not in self._runs:
            encoding = self.encodings[block]
            runs = None
            if isinstance(encoding, RunLength) and isinstance(encoding.values, np.ndarray):
                values = encoding.values.astype(np.int64)
                if not (np.diff(values) < 0).any():
                    largest = magnitude(values) if len(values) else 0
                    runs = SortedRuns(values, encoding.run_ends.astype(np.int64), largest)
            self._runs[block] = runs
        return self._runs[block]

    def key_hashes(self) -> str:
        """The buffer (its key) of the placement hash's input for each of `key_codes`' values, by
        code: a partition key projected as its codes is hashed through it. Built on first use."""
        key = buffer_key("hash", np.empty(0, dtype=np.uint64))
        if key not in self.buffers:
            self.buffers[key] = hash_inputs(self.key_codes()[0])
        return key


def _bound(encoding: Encoding) -> int:
    """A bound on |value| of an integer column from its encoding (any bound of another: never read)."""
    if isinstance(encoding, RunLength) and not isinstance(encoding.values, np.ndarray):
        return INT64_MAX
    return encoding_bound(encoding)


def _concatenated(parts: list[np.ndarray | None]) -> tuple[np.ndarray, np.ndarray]:
    """The parts one after another, each starting on an ALIGN-byte boundary (a block without one
    takes none), and each one's offset in elements. One part is returned as it is."""
    present = [p for p in parts if p is not None]
    if len(parts) == 1 and present:
        return present[0], np.zeros(1, dtype=np.int64)
    dtype = present[0].dtype
    step = max(1, ALIGN // dtype.itemsize)
    offsets = np.zeros(len(parts), dtype=np.int64)
    at = 0
    for i, part in enumerate(parts):
        offsets[i] = at
        if part is not None:
            at += -(-len(part) // step) * step
    out = np.zeros(max(at, 1), dtype=dtype)
    for offset, part in zip(offsets, parts, strict=True):
        if part is not None:
            out[offset : offset + len(part)] = part
    return out, offsets
