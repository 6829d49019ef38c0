"""Frame-of-reference bit packing (null suppression) for non-negative integers, in NumPy.

Value ``i`` occupies bits ``[i*w, (i+1)*w)`` of a little-endian byte string (LSB first), the
layout a GPU thread decodes with one unaligned 8-byte load. Every 8 values span exactly ``w``
bytes, so value ``8q + r`` starts at byte ``q*w + (r*w >> 3)``, bit ``(r*w) & 7``: for each
of the 8 residues the values sit at a fixed byte stride of ``w``, and both directions are 8
strided NumPy operations. The buffer carries 8 bytes of slack so the last load stays inside.
"""

from __future__ import annotations

import numpy as np

MAX_WIDTH = 56  # a value plus its bit shift must fit one 8-byte load


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
    """Inverse of `pack`: a uint64 array of `length` values."""
    if width == 0 or length == 0:
        return np.zeros(length, dtype=np.uint64)
    groups = (length + 7) // 8
    out = np.empty(groups * 8, dtype=np.uint64)
    mask = np.uint64((1 << width) - 1)
    buf = np.ascontiguousarray(packed, dtype=np.uint8)
    for r in range(8):
        offset = (r * width) >> 3
        lane = np.ndarray((groups,), dtype="<u8", buffer=buf, offset=offset, strides=(width,))
        out[r::8] = (lane >> np.uint64((r * width) & 7)) & mask
    return out[:length]


def width_for(span: int) -> int:
    """Bits needed for values in ``0..span``."""
    return int(span).bit_length()
