"""Decoding one encoded block on the device, only the selected rows of the columns asked for.

Integer columns decode straight from their encoding (bit-packed ranges, runs, dictionary codes)
into domain integers; strings become a `Vec` over a dictionary (the column's own, its runs'
values, or the selected strings themselves). Sums of bit-packed and run-length columns are
computed on the encoding without decoding it. `ScanStats` counts the work done.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pyarrow as pa

from gpu_kernels import expr as E
from gpu_kernels.backend import Array, NumpyBackend
from gpu_kernels.column_types import Kind
from gpu_kernels.encoded_block import EncodedBlock
from gpu_kernels.encodings import BitPacked, DeltaRunLength, Dictionary, Encoding, Plain, RunLength
from gpu_kernels.expr import Type
from gpu_kernels.selection import Selection
from gpu_kernels.vectors import INT64_MAX, Vec

# Past this many ranges a bit-packed column is unpacked whole and then filtered.
_MAX_RANGE_UNPACKS = 16


@dataclass
class ScanStats:
    """What a scan touched: the measure of work on compressed data."""

    blocks: int = 0
    blocks_skipped: int = 0  # pruned by their min/max statistics
    rows_scanned: int = 0  # rows of the blocks visited
    rows_selected: int = 0
    values_decoded: int = 0  # single values decoded (per column)
    runs_evaluated: int = 0  # predicate evaluations on runs instead of rows
    dictionary_evaluated: int = 0  # predicate evaluations on dictionary entries
    cpu_seconds: float = 0.0  # CPU time of the threads that ran the blocks' kernels

    def add(self, other: ScanStats) -> None:
        for name in self.__dataclass_fields__:
            setattr(self, name, getattr(self, name) + getattr(other, name))

    def to_json(self) -> dict[str, float]:
        return dict(vars(self))


@dataclass
class BlockDecoder:
    """The columns of one block, decoded on demand; what it copies to the device stays there for
    the block's lifetime."""

    block: EncodedBlock
    backend: NumpyBackend
    stats: ScanStats = field(default_factory=ScanStats)
    # id(host array) -> (host array, device copy); a pipeline hands in the parts it prefetched
    device: dict[int, tuple[Any, Array]] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self.xp = self.backend.xp
        self.n = self.block.rows
        self.types = {name: E.arrow_kind(c.type) for name, c in self.block.columns.items()}
        self._valid: dict[str, Array | None] = {}

    def dev(self, host: np.ndarray) -> Array:
        """The device copy of a host array (cached for the block)."""
        key = id(host)
        if key not in self.device:
            self.device[key] = (host, self.backend.asarray(host))
        return self.device[key][1]

    def everything(self) -> Selection:
        return Selection.all(self.backend, self.n)

    def valid_mask(self, name: str) -> Array | None:
        """The column's validity over the block's rows, on the device (None: no NULLs)."""
        if name not in self._valid:
            column = self.block.columns[name]
            self._valid[name] = None if column.validity is None else self.backend.asarray(column.valid_mask())
        return self._valid[name]

    def numeric(self, values: Array, kind: Kind) -> Array:
        """Domain integers as the values they stand for (float bit patterns as float64)."""
        values = values.astype(self.xp.int64, copy=False)
        return values.view(self.xp.float64) if kind is Kind.FLOAT else values

    def _run_index(self, run_ends: np.ndarray, sel: Selection) -> Array:
        xp = self.xp
        ends = self.dev(run_ends)
        if sel.is_all:
            lengths = xp.diff(ends.astype(xp.int64), prepend=0)
            return self.backend.repeat(xp.arange(len(ends), dtype=xp.int64), lengths)
        return xp.searchsorted(ends, sel.indices(), side="right")

    def decode_rows(self, encoding: Encoding, sel: Selection) -> Array:
        """Integer domain values of the selected rows only."""
        xp = self.xp
        self.stats.values_decoded += sel.count()
        if isinstance(encoding, Plain):
            return sel.take(self.dev(encoding.values)).astype(xp.int64, copy=False)
        if isinstance(encoding, BitPacked):
            packed, width = self.dev(encoding.packed), encoding.width
            if sel.is_ranges and len(sel.starts) <= _MAX_RANGE_UNPACKS:
                parts = [
                    self.backend.unpack(packed, width, int(a), int(b))
                    for a, b in zip(sel.starts, sel.stops, strict=True)
                ]
                offsets = parts[0] if len(parts) == 1 else xp.concatenate(parts) if parts else xp.zeros(0, xp.int64)
            else:
                lo, hi = sel.span()
                if sel.count() * 4 < hi - lo:  # sparse (measured crossover ~25%): read just those rows
                    offsets = self.backend.unpack_at(packed, width, sel.indices())
                else:
                    offsets = sel.take_span(self.backend.unpack(packed, width, lo, hi), lo)
            return xp.add(offsets, xp.int64(encoding.reference), dtype=xp.int64)  # widen and add in one pass
        if isinstance(encoding, RunLength):
            return self.dev(encoding.values).astype(xp.int64)[self._run_index(encoding.run_ends, sel)]
        if isinstance(encoding, DeltaRunLength):
            deltas = self.dev(encoding.deltas.values).astype(xp.int64)[
                self._run_index(encoding.deltas.run_ends, self.everything())
            ]
            return sel.take(xp.cumsum(deltas))
        if isinstance(encoding, Dictionary):
            return self.dev(encoding.dictionary).astype(xp.int64)[self.decode_rows(encoding.codes, sel)]
        raise TypeError(f"{encoding.kind} does not hold integers")

    def column_sum(self, name: str, sel: Selection) -> int | None:
        """SUM of an integer or decimal column without NULLs over the selection, computed on the
        encoding itself (packed lanes, or value x rows per run); None when it has to be decoded."""
        column = self.block.columns[name]
        if column.validity is not None or self.types[name].kind not in (Kind.INT, Kind.DEC):
            return None
        encoding = column.encoding
        xp = self.xp
        if isinstance(encoding, BitPacked):
            packed, width = self.dev(encoding.packed), encoding.width
            if sel.is_ranges and len(sel.starts) <= 64:
                ranges = zip(sel.starts.tolist(), sel.stops.tolist(), strict=True)
                offsets = sum(self.backend.packed_sum(packed, width, a, b) for a, b in ranges)
            else:
                lo, hi = sel.span()
                if 4 * sel.count() < hi - lo:  # sparse: gathering the rows is cheaper
                    return None
                offsets = self.backend.masked_sum(self.backend.unpack(packed, width, lo, hi), sel.window(lo, hi))
            return offsets + encoding.reference * sel.count()
        if isinstance(encoding, RunLength) and isinstance(encoding.values, np.ndarray):
            self.stats.runs_evaluated += len(encoding.run_ends)
            ends = self.dev(encoding.run_ends).astype(xp.int64)
            begins = xp.concatenate((xp.zeros(1, dtype=xp.int64), ends[:-1]))
            rows = sel.prefix_counts(ends) - sel.prefix_counts(begins)
            return int(xp.sum(self.dev(encoding.values).astype(xp.int64) * rows))
        return None

    def column_vec(self, name: str, sel: Selection) -> Vec:
        """The column's values on the selected rows."""
        column = self.block.columns[name]
        t = self.types[name]
        valid = self.valid_mask(name)
        valid = sel.take(valid) if valid is not None else None
        if t.kind is Kind.STR:
            vec = self._string_vec(column.encoding, sel, valid)
        else:
            data = self.numeric(self.decode_rows(column.encoding, sel), t.kind)
            if t.kind is Kind.BOOL:
                data = data != 0
            vec = Vec(t, data, valid, bound=encoding_bound(column.encoding) if t.kind is not Kind.FLOAT else INT64_MAX)
        return vec

    def _string_vec(self, encoding: Encoding, sel: Selection, valid: Array | None) -> Vec:
        t = Type(Kind.STR)
        if isinstance(encoding, Dictionary):
            return Vec(t, self.decode_rows(encoding.codes, sel), valid, dictionary=encoding.dictionary)
        if isinstance(encoding, RunLength):
            self.stats.values_decoded += sel.count()
            return Vec(t, self._run_index(encoding.run_ends, sel), valid, dictionary=encoding.values)
        # Plain or Zstd (chosen for mostly distinct strings): on the host, each row its own entry
        # (hashing them into a distinct dictionary cost as much as a LIKE on them; grouping
        # makes a dictionary distinct when it needs one)
        strings = encoding.decode()
        self.stats.values_decoded += sel.count()
        if not sel.is_all:
            strings = strings.filter(pa.array(self.backend.to_host(sel.as_mask())))
        codes = self.backend.xp.arange(len(strings), dtype=np.int64)
        return Vec(t, codes, valid, dictionary=strings)


def encoding_bound(encoding: Encoding) -> int:
    """An upper bound on |value| of an integer column, from its encoding alone."""
    if isinstance(encoding, BitPacked):
        return max(abs(encoding.reference), abs(encoding.reference + (1 << encoding.width) - 1))
    if isinstance(encoding, Plain) and isinstance(encoding.values, np.ndarray):
        return int(np.iinfo(encoding.values.dtype).max) + 1
    if isinstance(encoding, RunLength) and len(encoding.values):
        return magnitude(encoding.values)
    if isinstance(encoding, Dictionary) and isinstance(encoding.dictionary, np.ndarray) and len(encoding.dictionary):
        return magnitude(encoding.dictionary)
    return INT64_MAX


def magnitude(values: np.ndarray) -> int:
    """The largest |value| of integers, as a Python int (NumPy's abs of -2^63 is -2^63)."""
    return max(abs(int(values.min())), abs(int(values.max())))
