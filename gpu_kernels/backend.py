"""The array backends' one interface, and the NumPy backend that defines it.

Kernels are written once against ``backend.xp`` (NumPy's API, which CuPy mirrors); the few
operations where the libraries differ (bit unpacking, run expansion, grouping, segment sums,
moving data between host and device) are methods that the CuPy backend (`gpu_kernels.cupy_backend`)
overrides. Which of the two a node runs on is `gpu_kernels.backend_choice`'s to say.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, NamedTuple

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from gpu_kernels import bitpack
from gpu_kernels.encodings import sort_keys
from gpu_kernels.placement_hash import bucket_ids

Array = Any  # numpy.ndarray or cupy.ndarray
_EXACT_FLOAT = 1 << 53


class Partitioned(NamedTuple):
    """Rows placed into buckets: bucket by bucket, their numbers (`order`: None where they were not
    asked for) and the payload's arrays in that order (`moved`), with each bucket's rows (`counts`)
    and where they start (`offsets`)."""

    order: Array | None
    counts: Array
    offsets: Array
    moved: list[Array]


class BackendUnavailable(RuntimeError):
    code = "backend_unavailable"


class DeviceOutOfMemory(RuntimeError):
    """A scan needed more of a GPU's memory area than was left: it fails alone, the node goes on."""

    code = "device_out_of_memory"


class NumpyBackend:
    name = "numpy"
    xp = np
    fuses = False  # runs a block's partial aggregate as one generated kernel (`gpu_kernels.fused_scan`)
    keeps_columns = False  # keeps scanned columns on its device, a scan's aggregate one launch (`gpu_kernels.resident`)
    device_memory: int | None = None  # bytes of each GPU the scans may use together (None: 90% of it)

    def asarray(self, host: np.ndarray) -> Array:
        return host

    def to_host(self, array: Array) -> np.ndarray:
        return array

    def device(self) -> int:
        """Where this thread's arrays live: -1 for the host, else the current GPU."""
        return -1

    # -- decoding ---------------------------------------------------------------------------

    def unpack(self, packed: Array, width: int, start: int, stop: int) -> Array:
        """Bit-packed offsets of rows [start, stop), as unsigned integers of the narrowest width."""
        group = start // 8
        offset = group * width
        rows = stop - group * 8
        return bitpack.unpack(packed[offset:], rows, width)[start - group * 8 :]

    def packed_sum(self, packed: Array, width: int, start: int, stop: int) -> int:
        """Sum of the bit-packed offsets of rows [start, stop), without materializing them."""
        first, last = -(-start // 8), stop // 8  # whole groups inside the range
        if stop - start < 4096:
            return self.exact_sum(self.unpack(packed, width, start, stop))
        edges = self.exact_sum(self.unpack(packed, width, start, first * 8))
        edges += self.exact_sum(self.unpack(packed, width, last * 8, stop))
        return edges + bitpack.packed_sum(packed, width, first, last - first)

    def masked_sum(self, values: Array, mask: Array) -> int:
        """Sum of the non-negative integers `values` where `mask` holds, exact."""
        return self.exact_sum(self.xp.where(mask, values, 0))

    def exact_sum(self, values: Array) -> int:
        """The sum of non-negative integers (below 2**63) as a Python int, exact however many: the
        two 32-bit halves summed apart, read back together."""
        halves = bitpack.half_sums(values.astype(self.xp.uint64, copy=False), self.xp)
        return bitpack.joined(self.to_host(halves))

    def unpack_at(self, packed: Array, width: int, rows: Array) -> Array:
        """Bit-packed offsets of the given rows (random access)."""
        if width == 0:
            return np.zeros(len(rows), dtype=np.int64)
        bits = rows.astype(np.int64) * width
        first = bits >> 3
        word = np.zeros(len(rows), dtype=np.uint64)
        for k in range((width + 7 + 7) // 8):
            word |= packed[first + k].astype(np.uint64) << np.uint64(8 * k)
        return ((word >> (bits & 7).astype(np.uint64)) & np.uint64((1 << width) - 1)).view(np.int64)

    def repeat(self, values: Array, counts: Array) -> Array:
        return np.repeat(values, counts)

    # -- grouping ---------------------------------------------------------------------------

    def unique_inverse(self, values: Array) -> tuple[Array, Array]:
        """Distinct values (in no particular order) and the position of each value among them."""
        if values.dtype.kind in "iu":  # a hash table is faster than sorting, and group order does not matter
            encoded = pc.dictionary_encode(pa.array(values))
            return encoded.dictionary.to_numpy(), encoded.indices.to_numpy().astype(np.int64)
        uniques, inverse = np.unique(values, return_inverse=True)
        return uniques, inverse.reshape(-1)

    def group_min(self, gid: Array, values: Array, groups: int) -> Array:
        out = np.full(groups, _max_of(values.dtype), dtype=values.dtype)
        np.minimum.at(out, gid, values)
        return out

    def group_max(self, gid: Array, values: Array, groups: int) -> Array:
        out = np.full(groups, _min_of(values.dtype), dtype=values.dtype)
        np.maximum.at(out, gid, values)
        return out

    # -- shared, written once against xp ----------------------------------------------------

    def segment_sum(self, values: Array, starts: Array) -> Array:
        """Sums of the non-empty segments values[starts[i]:starts[i+1]] (the last to the end)."""
        if len(starts) == 0:
            return np.zeros(0, dtype=values.dtype)
        return np.add.reduceat(values, starts)

    def _prefix_segment_sum(self, values: Array, starts: Array) -> Array:
        """`segment_sum` from prefix sums (exact for integers: the prefix sums wrap, differences do not)."""
        xp = self.xp
        if len(starts) == 0:
            return xp.zeros(0, dtype=values.dtype)
        prefix = xp.concatenate((xp.zeros(1, dtype=values.dtype), xp.cumsum(values, dtype=values.dtype)))
        ends = xp.concatenate((starts[1:], xp.asarray([len(values)], dtype=starts.dtype)))
        return prefix[ends] - prefix[starts]

    def group_sum(self, gid: Array, values: Array, groups: int) -> Array:
        """Per-group sums; integers summed exactly as two 32-bit halves through float64 bincounts."""
        xp = self.xp
        if values.dtype.kind == "f":
            return xp.bincount(gid, weights=values, minlength=groups)
        if len(values) < (1 << 21):  # each half sums below 2**53
            low = (values & 0xFFFFFFFF).astype(xp.float64)
            high = (values >> 32).astype(xp.float64)
            low_sum = xp.rint(xp.bincount(gid, weights=low, minlength=groups)).astype(xp.int64)
            high_sum = xp.rint(xp.bincount(gid, weights=high, minlength=groups)).astype(xp.int64)
            return (high_sum << 32) + low_sum
        half = len(values) // 2
        return self.group_sum(gid[:half], values[:half], groups) + self.group_sum(gid[half:], values[half:], groups)

    def group_count(self, gid: Array, groups: int) -> Array:
        return self.xp.bincount(gid, minlength=groups).astype(self.xp.int64)

    def partition_keys(
        self, inputs: list[Array], count: int, payload: Sequence[Array] = (), numbered: bool = True
    ) -> Partitioned:
        """Rows placed into `count` buckets by the placement hash of their key columns' uint64 hash
        inputs, moving the arrays of `payload` (one value per row each) with them; not `numbered`,
        a caller needs no `order` (a backend may leave it None)."""
        order, counts, offsets = self.partition(bucket_ids(self.xp, inputs, count), count)
        return Partitioned(order, counts, offsets, [array[order] for array in payload])

    def partition(self, buckets: Array, count: int) -> tuple[Array, Array, Array]:
        """Histogram, exclusive scan and scatter: (row order grouped by bucket, counts, offsets)."""
        xp = self.xp
        counts = xp.bincount(buckets, minlength=count).astype(xp.int64)
        offsets = xp.cumsum(counts) - counts
        order = xp.argsort(sort_keys(buckets, (count - 1).bit_length()), kind="stable")
        return order, counts, offsets


def _max_of(dtype: np.dtype) -> Any:
    return np.inf if dtype.kind == "f" else np.iinfo(dtype).max


def _min_of(dtype: np.dtype) -> Any:
    return -np.inf if dtype.kind == "f" else np.iinfo(dtype).min
