"""Lightweight column encodings over domain values (see `gpu_kernels.column_types`).

Each encoding holds its data as NumPy arrays or Arrow arrays (the *parts*), can decode itself
back to domain values, and serializes to named Arrow parts plus a small JSON description, so a
block of them stores as a plain Arrow IPC file. The encodings are the chains of seed 004, chapter 5.1:

- `Plain`: the values themselves (integers narrowed to the smallest signed width);
- `BitPacked`: frame of reference + bit-width narrowing (`value - reference` in `width` bits);
- `RunLength`: Arrow RunEndEncoded (`run_ends` int32 + one value per run);
- `DeltaRunLength`: first differences, then RunLength; decoding is a prefix sum;
- `Dictionary`: sorted distinct values + codes, the codes themselves encoded (narrow, bit-packed
  or RunLength); the sort order lets range predicates run on codes;
- `Zstd`: free-text strings kept zstd-compressed until they are projected.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass
from typing import Any, ClassVar

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import zstandard

from gpu_kernels import bitpack

Values = np.ndarray | pa.Array
Parts = dict[str, pa.Array]


def narrow_int(values: np.ndarray) -> np.ndarray:
    """The values in the smallest signed integer dtype that holds them."""
    if len(values) == 0:
        return values.astype(np.int8)
    lo, hi = int(values.min()), int(values.max())
    for dtype in (np.int8, np.int16, np.int32, np.int64):
        info = np.iinfo(dtype)
        if info.min <= lo and hi <= info.max:
            return values.astype(dtype, copy=False)
    raise AssertionError("unreachable")


def sort_keys(values: np.ndarray, bits: int) -> np.ndarray:
    """Non-negative integers below 2**bits in the narrowest unsigned dtype that holds them: a
    stable sort of 16-bit keys or narrower is a radix sort in NumPy (ten times a 64-bit sort's speed),
    and fewer passes of CuPy's."""
    for dtype in (np.uint8, np.uint16, np.uint32):
        if bits <= np.iinfo(dtype).bits:
            return values.astype(dtype, copy=False)
    return values


def nbytes_of(values: Values) -> int:
    if isinstance(values, np.ndarray):
        return values.nbytes
    return plain_nbytes(values)


def plain_nbytes(arr: pa.Array, t: pa.DataType | None = None) -> int:
    """Bytes `arr` occupies as plain Arrow of type `t` (default its own), counted from the type."""
    n = len(arr)
    validity = (n + 7) // 8 if arr.null_count else 0
    t = t or arr.type
    if pa.types.is_boolean(t):
        return validity + (n + 7) // 8
    if pa.types.is_string(t) or pa.types.is_large_string(t):
        offset_width = 8 if pa.types.is_large_string(t) else 4
        data = pc.sum(pc.binary_length(arr)).as_py() or 0
        return validity + offset_width * (n + 1) + data
    if pa.types.is_string_view(t):
        if pa.types.is_string_view(arr.type):
            arr = arr.cast(pa.string())
        lengths = pc.binary_length(arr).to_numpy(zero_copy_only=False)
        return validity + 16 * n + int(lengths[lengths > 12].sum())
    return validity + n * t.byte_width


def _to_arrow(values: Values) -> pa.Array:
    return values if isinstance(values, pa.Array) else pa.array(values)


def _from_arrow(arr: pa.Array, like_numpy: bool) -> Values:
    return arr.to_numpy(zero_copy_only=True) if like_numpy else arr


def widen(values: Values) -> Values:
    """Narrowed integers back to the int64 domain; anything else unchanged."""
    if isinstance(values, np.ndarray) and values.dtype.kind == "i":
        return values.astype(np.int64, copy=False)
    return values


def take(values: Values, indices: np.ndarray) -> Values:
    if isinstance(values, np.ndarray):
        return values[indices]
    return values.take(pa.array(indices))


def run_starts(values: Values) -> np.ndarray:
    """Row index where each run of equal values starts."""
    n = len(values)
    if n == 0:
        return np.zeros(0, dtype=np.int64)
    if isinstance(values, np.ndarray):
        changed = values[1:] != values[:-1]
    else:
        changed = pc.not_equal(values.slice(1), values.slice(0, n - 1)).to_numpy(zero_copy_only=False)
    return np.concatenate(([0], np.flatnonzero(changed) + 1))


def expand_runs(run_ends: np.ndarray, values: Values, length: int) -> Values:
    """Decode runs: repeat each value up to its run end."""
    if len(run_ends) == 0:
        return values[:0]
    counts = np.diff(run_ends, prepend=0)
    if isinstance(values, np.ndarray):
        return np.repeat(values, counts)
    return values.take(pa.array(np.repeat(np.arange(len(values)), counts)))


class Encoding(ABC):
    """A column's values in one encoding chain; `length` is the number of rows."""

    kind: ClassVar[str]
    length: int

    @abstractmethod
    def decode(self) -> Values:
        """The domain values, fully decoded."""

    @abstractmethod
    def parts(self) -> Parts:
        """Named Arrow arrays holding this encoding's data."""

    @abstractmethod
    def describe(self) -> dict[str, Any]:
        """JSON-able parameters, enough with `parts()` to rebuild the encoding."""

    @property
    def chain(self) -> str:
        return self.kind

    @property
    def nbytes(self) -> int:
        return sum(plain_nbytes(p) for p in self.parts().values())


@dataclass
class Plain(Encoding):
    values: Values
    kind: ClassVar[str] = "plain"

    @property
    def length(self) -> int:
        return len(self.values)

    def decode(self) -> Values:
        return widen(self.values)

    def parts(self) -> Parts:
        return {"values": _to_arrow(self.values)}

    def describe(self) -> dict[str, Any]:
        return {"numpy": isinstance(self.values, np.ndarray)}

    @property
    def chain(self) -> str:
        if isinstance(self.values, np.ndarray) and self.values.dtype.kind == "i":
            return f"plain(int{self.values.dtype.itemsize * 8})"
        return "plain"

    @classmethod
    def restore(cls, meta: dict[str, Any], parts: Parts) -> Plain:
        return cls(_from_arrow(parts["values"], meta["numpy"]))


@dataclass
class BitPacked(Encoding):
    packed: np.ndarray  # uint8, see gpu_kernels.bitpack
    reference: int
    width: int
    length: int
    kind: ClassVar[str] = "bitpack"

    @classmethod
    def encode(cls, values: np.ndarray) -> BitPacked:
        reference = int(values.min()) if len(values) else 0
        width = bitpack.width_for(int(values.max()) - reference) if len(values) else 0
        offsets = (values - reference).astype(np.uint64)
        return cls(bitpack.pack(offsets, width), reference, width, len(values))

    def decode(self) -> np.ndarray:
        return bitpack.unpack(self.packed, self.length, self.width).astype(np.int64) + self.reference

    def parts(self) -> Parts:
        return {"packed": pa.array(self.packed)}

    def describe(self) -> dict[str, Any]:
        return {"reference": self.reference, "width": self.width, "length": self.length}

    @property
    def chain(self) -> str:
        return f"for+bitpack({self.width}b)"

    @property
    def nbytes(self) -> int:
        return self.packed.nbytes

    @classmethod
    def restore(cls, meta: dict[str, Any], parts: Parts) -> BitPacked:
        packed = parts["packed"].to_numpy(zero_copy_only=True)
        return cls(packed, meta["reference"], meta["width"], meta["length"])


@dataclass
class RunLength(Encoding):
    run_ends: np.ndarray  # int32, exclusive end row of each run
    values: Values  # one value per run
    kind: ClassVar[str] = "rle"

    @classmethod
    def encode(cls, values: Values) -> RunLength:
        starts = run_starts(values)
        ends = np.append(starts[1:], len(values)).astype(np.int32)
        run_values = take(values, starts)
        if isinstance(run_values, np.ndarray) and run_values.dtype.kind == "i":
            run_values = narrow_int(run_values)
        return cls(ends, run_values)

    @property
    def length(self) -> int:
        return int(self.run_ends[-1]) if len(self.run_ends) else 0

    @property
    def runs(self) -> int:
        return len(self.run_ends)

    def as_arrow(self) -> pa.RunEndEncodedArray:
        """The runs as an Arrow RunEndEncoded array (zero-copy)."""
        return pa.RunEndEncodedArray.from_arrays(pa.array(self.run_ends), _to_arrow(self.values))

    def decode(self) -> Values:
        return widen(expand_runs(self.run_ends, self.values, self.length))

    def parts(self) -> Parts:
        return {"run_ends": pa.array(self.run_ends), "values": _to_arrow(self.values)}

    def describe(self) -> dict[str, Any]:
        return {"numpy": isinstance(self.values, np.ndarray)}

    @classmethod
    def restore(cls, meta: dict[str, Any], parts: Parts) -> RunLength:
        return cls(parts["run_ends"].to_numpy(zero_copy_only=True), _from_arrow(parts["values"], meta["numpy"]))


@dataclass
class DeltaRunLength(Encoding):
    deltas: RunLength  # d[0] = v[0], d[i] = v[i] - v[i-1]
    kind: ClassVar[str] = "delta+rle"

    @classmethod
    def encode(cls, values: np.ndarray) -> DeltaRunLength:
        return cls(RunLength.encode(np.diff(values, prepend=np.int64(0))))

    @property
    def length(self) -> int:
        return self.deltas.length

    def decode(self) -> np.ndarray:
        return np.cumsum(self.deltas.decode(), dtype=np.int64)

    def parts(self) -> Parts:
        return self.deltas.parts()

    def describe(self) -> dict[str, Any]:
        return self.deltas.describe()

    @classmethod
    def restore(cls, meta: dict[str, Any], parts: Parts) -> DeltaRunLength:
        return cls(RunLength.restore(meta, parts))


@dataclass
class Dictionary(Encoding):
    dictionary: Values  # sorted distinct values
    codes: Encoding  # integer codes into `dictionary`, encoded
    kind: ClassVar[str] = "dict"

    @classmethod
    def split(cls, values: Values) -> tuple[Values, np.ndarray]:
        """Sorted distinct values and the code of each row."""
        if isinstance(values, np.ndarray):
            dictionary, codes = np.unique(values, return_inverse=True)
            return dictionary, codes.astype(np.int64)
        distinct = pc.unique(values)
        dictionary = distinct.take(pc.sort_indices(distinct))
        codes = pc.index_in(values, dictionary).to_numpy(zero_copy_only=False).astype(np.int64)
        return dictionary, codes

    @property
    def length(self) -> int:
        return self.codes.length

    def as_arrow(self) -> pa.DictionaryArray:
        """An Arrow DictionaryArray over the decoded codes."""
        codes = narrow_int(self.codes.decode())
        return pa.DictionaryArray.from_arrays(pa.array(codes), _to_arrow(self.dictionary))

    def decode(self) -> Values:
        return widen(take(self.dictionary, self.codes.decode()))

    def parts(self) -> Parts:
        own = {"dictionary": _to_arrow(self.dictionary)}
        return own | {f"codes.{name}": part for name, part in self.codes.parts().items()}

    def describe(self) -> dict[str, Any]:
        return {
            "numpy": isinstance(self.dictionary, np.ndarray),
            "codes": {"kind": self.codes.kind, **self.codes.describe()},
        }

    @property
    def chain(self) -> str:
        return f"dict[{len(self.dictionary)}]+{self.codes.chain}"

    @property
    def nbytes(self) -> int:
        return nbytes_of(self.dictionary) + self.codes.nbytes

    @classmethod
    def restore(cls, meta: dict[str, Any], parts: Parts) -> Dictionary:
        code_parts = {name[6:]: part for name, part in parts.items() if name.startswith("codes.")}
        codes = restore(meta["codes"], code_parts)
        return cls(_from_arrow(parts["dictionary"], meta["numpy"]), codes)


@dataclass
class Zstd(Encoding):
    """Strings as one zstd frame over their Arrow offsets and data buffers."""

    frame: bytes
    length: int
    kind: ClassVar[str] = "zstd"
    level: ClassVar[int] = 3

    @classmethod
    def encode(cls, values: pa.Array) -> Zstd:
        values = pa.concat_arrays([values])  # unsliced offsets starting at 0
        offsets = np.frombuffer(values.buffers()[1], dtype=np.int32, count=len(values) + 1)
        data = values.buffers()[2]
        used = data[: int(offsets[-1])] if data is not None else b""
        raw = offsets.tobytes() + bytes(used)
        return cls(zstandard.ZstdCompressor(level=cls.level).compress(raw), len(values))

    def decode(self) -> pa.Array:
        raw = zstandard.ZstdDecompressor().decompress(self.frame)
        offsets_size = 4 * (self.length + 1)
        buffers = [None, pa.py_buffer(raw[:offsets_size]), pa.py_buffer(raw[offsets_size:])]
        return pa.Array.from_buffers(pa.string(), self.length, buffers)

    def parts(self) -> Parts:
        return {"frame": pa.array([self.frame], pa.binary())}

    def describe(self) -> dict[str, Any]:
        return {"length": self.length}

    @property
    def nbytes(self) -> int:
        return len(self.frame)

    @classmethod
    def restore(cls, meta: dict[str, Any], parts: Parts) -> Zstd:
        return cls(parts["frame"][0].as_buffer().to_pybytes(), meta["length"])


KINDS: dict[str, type[Encoding]] = {
    cls.kind: cls for cls in (Plain, BitPacked, RunLength, DeltaRunLength, Dictionary, Zstd)
}


def restore(meta: dict[str, Any], parts: Parts) -> Encoding:
    """Rebuild an encoding from `describe()` output (with its `kind`) and its parts."""
    return KINDS[meta["kind"]].restore(meta, parts)


def describe(encoding: Encoding) -> dict[str, Any]:
    return {"kind": encoding.kind, **encoding.describe()}
