"""The placement hash: which bucket a row belongs to, ``hash(key columns) mod buckets``.

It is splitmix64 chained over the key columns, so the loader, the NumPy and CuPy scan kernels
and Spark tasks compute the same bucket for the same row. Each key column first becomes one
uint64 per row: integers (and dates, decimals...) their 64-bit pattern, strings the first
8 bytes of their BLAKE2b digest (computed once per distinct string, on the host), NULL 0. The
mixing takes NumPy or CuPy arrays alike.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from typing import Any

import numpy as np
import pyarrow as pa

SEED = np.uint64(0x9E3779B97F4A7C15)


def splitmix64(z: Any) -> Any:
    z = z ^ (z >> np.uint64(30))
    z = z * np.uint64(0xBF58476D1CE4E5B9)
    z = z ^ (z >> np.uint64(27))
    z = z * np.uint64(0x94D049BB133111EB)
    return z ^ (z >> np.uint64(31))


def string_hashes(strings: pa.Array) -> np.ndarray:
    """uint64 hash input of each string (NULL -> 0), on the host."""
    digests = [
        0 if s is None else int.from_bytes(hashlib.blake2b(s.encode(), digest_size=8).digest(), "little")
        for s in strings.to_pylist()
    ]
    return np.array(digests, dtype=np.uint64)


def hash_inputs(values: np.ndarray | pa.Array) -> np.ndarray:
    """uint64 hash input of each of a column's domain values (NumPy: their 64-bit patterns; Arrow:
    strings), on the host; NULLs are not among them."""
    if isinstance(values, np.ndarray):
        return values.astype(np.int64, copy=False).view(np.uint64)
    return string_hashes(values)


def bucket_ids(xp: Any, key_inputs: Sequence[Any], buckets: int) -> Any:
    """The bucket (0..buckets-1, int64) of each row from its key columns' uint64 hash inputs,
    with `xp` the array module (NumPy or CuPy) they live in."""
    h = xp.full(len(key_inputs[0]), SEED, dtype=xp.uint64)
    for key in key_inputs:
        h = splitmix64(h ^ key)
    return (h % np.uint64(buckets)).astype(xp.int64)
