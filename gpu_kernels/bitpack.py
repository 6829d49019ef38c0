"""Frame-of-reference bit packing (null suppression) for non-negative integers, in NumPy.

Value ``i`` occupies bits ``[i*w, (i+1)*w)`` of a little-endian byte string (LSB first), the
layout a GPU thread decodes with one unaligned 8-byte load. Every 8 values span exactly ``w``
bytes, so value ``8q + r`` starts at byte ``q*w + (r*w >> 3)``, bit ``(r*w) & 7``: for each
of the 8 residues the values sit at a fixed byte stride of ``w``, and both directions are 8
strided NumPy operations. The buffer carries 8 bytes of slack so the last load stays inside.
"""

from __future__ import annotations

from typing import Any

import numpy as np

MAX_WIDTH = 56  # a value plus its bit shift must fit one 8-byte load
_CHUNK_GROUPS = 16384  # groups of 8 values summed at a time: the lane stays in cache


def packed_size(length: int, width: int) -> int:
    return ((length + 7) // 8) * width + 8


def pack(values: np.ndarray, width: int) -> np.ndarray:
    """Pack non-negative integers below ``2**width`` into a uint8 array."""
    if not 0 <= width <= MAX_WIDTH:
        raise ValueError(f"bit width {width} outside 0..{MAX_WIDTH}")
    n = len(values)
    groups = (n + 7) // 8
    out = np.zeros(packed_size(n, width), dtype=np.uint8)
    if width == 0 or n == 0:
        return out
    padded = np.zeros(groups * 8, dtype=np.uint64)
    padded[:n] = values
    for r in range(8):
        shift = (r * width) & 7
        base = (r * width) >> 3
        lane = padded[r::8] << np.uint64(shift)
        for k in range((shift + width + 7) // 8):
            byte = ((lane >> np.uint64(8 * k)) & np.uint64(0xFF)).astype(np.uint8)
            out[base + k : base + k + groups * width : width] |= byte
    return out


def unpack(packed: np.ndarray, length: int, width: int) -> np.ndarray:
    """Inverse of `pack`: `length` non-negative integers (a narrow unsigned dtype for byte-friendly
    widths, int64 otherwise)."""
    if width == 0 or length == 0:
        return np.zeros(length, dtype=unsigned_dtype(width))
    buf = np.ascontiguousarray(packed, dtype=np.uint8)
    if width in (8, 16, 32):  # byte-aligned: the buffer is the array
        return buf[: length * width // 8].view(unsigned_dtype(width)).copy()
    if 8 % width == 0:  # several values per byte
        per_byte = 8 // width
        data = buf[: (length * width + 7) // 8]
        out = np.empty((len(data), per_byte), dtype=np.uint8)
        for k in range(per_byte):
            np.bitwise_and(data >> (k * width), (1 << width) - 1, out=out[:, k])
        return out.reshape(-1)[:length]
    groups = (length + 7) // 8
    out = np.empty(groups * 8, dtype=np.int64)
    by_residue = out.view(np.uint64).reshape(groups, 8)  # column r: the values 8q + r
    mask = np.uint64((1 << width) - 1)
    for r in range(8):  # one strided 8-byte load per value, written straight to its place
        lane = np.ndarray((groups,), dtype="<u8", buffer=buf, offset=(r * width) >> 3, strides=(width,))
        np.bitwise_and(lane >> np.uint64((r * width) & 7), mask, out=by_residue[:, r])
    return out[:length]


def packed_sum(packed: np.ndarray, width: int, first_group: int, groups: int) -> int:
    """Sum of the values in groups [first_group, first_group + groups) (8 values each), computed
    lane by lane without materializing the values."""
    if width == 0 or groups <= 0:
        return 0
    buf = np.ascontiguousarray(packed, dtype=np.uint8)
    mask = np.uint64((1 << width) - 1)
    chunk = min(groups, _CHUNK_GROUPS)
    lane = np.empty(chunk, dtype=np.uint64)
    total = 0
    for start in range(first_group, first_group + groups, chunk):
        count = min(chunk, first_group + groups - start)
        for r in range(8):
            offset = start * width + ((r * width) >> 3)
            view = np.ndarray((count,), dtype="<u8", buffer=buf, offset=offset, strides=(width,))
            np.right_shift(view, np.uint64((r * width) & 7), out=lane[:count])
            np.bitwise_and(lane[:count], mask, out=lane[:count])
            total += joined(half_sums(lane[:count]))
    return total


def half_sums(values: Any, xp: Any = np) -> Any:
    """The sums of the high and of the low 32-bit halves of unsigned 64-bit integers, as one array
    of two (NumPy's or CuPy's): exact for fewer than 2**32 values, where a plain uint64 sum wraps
    past 2**64. `joined` makes the sum of them."""
    high = (values >> xp.uint64(32)).sum(dtype=xp.uint64)
    low = (values & xp.uint64(0xFFFFFFFF)).sum(dtype=xp.uint64)
    return xp.stack((high, low))


def joined(halves: np.ndarray) -> int:
    """The exact sum from `half_sums`, read on the host."""
    high, low = (int(h) for h in halves)
    return (high << 32) + low


def unsigned_dtype(width: int) -> np.dtype:
    for dtype in (np.uint8, np.uint16, np.uint32):
        if width <= np.iinfo(dtype).bits:
            return np.dtype(dtype)
    return np.dtype(np.uint64)


def width_for(span: int) -> int:
    """Bits needed for values in ``0..span``."""
    return int(span).bit_length()
