"""Hash placement: the bucket of each row, ``hash(key columns) mod buckets``.

The hash is splitmix64 chained over the key columns, so NumPy, CuPy and Spark tasks compute
the same bucket for the same row. Integers (and dates, decimals...) hash their domain value;
strings hash the first 8 bytes of their BLAKE2b digest; NULL hashes to 0.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from storage.types import DomainValues

SEED = np.uint64(0x9E3779B97F4A7C15)


def splitmix64(z: np.ndarray) -> np.ndarray:
    z = z.astype(np.uint64, copy=True)
    z ^= z >> np.uint64(30)
    z *= np.uint64(0xBF58476D1CE4E5B9)
    z ^= z >> np.uint64(27)
    z *= np.uint64(0x94D049BB133111EB)
    z ^= z >> np.uint64(31)
    return z


def _string_hashes(values: pa.Array) -> np.ndarray:
    distinct = pc.unique(values)
    digests = [
        int.from_bytes(hashlib.blake2b(s.encode(), digest_size=8).digest(), "little") for s in distinct.to_pylist()
    ]
    codes = pc.index_in(values, distinct).to_numpy(zero_copy_only=False)
    return np.array(digests, dtype=np.uint64)[codes]


def key_hash(column: DomainValues) -> np.ndarray:
    """uint64 hash input of one key column (before mixing)."""
    values = column.values
    if isinstance(values, np.ndarray):
        h = values.view(np.uint64) if values.dtype == np.int64 else values.astype(np.int64).view(np.uint64)
    else:
        h = _string_hashes(values)
    if column.valid is not None:
        h = np.where(column.valid, h, np.uint64(0))
    return h


def row_hashes(keys: Sequence[DomainValues]) -> np.ndarray:
    n = len(keys[0])
    h = np.full(n, SEED, dtype=np.uint64)
    for column in keys:
        h = splitmix64(h ^ key_hash(column))
    return h


def buckets_of(keys: Sequence[DomainValues], buckets: int) -> np.ndarray:
    """The bucket (0..buckets-1) of each row."""
    return (row_hashes(keys) % np.uint64(buckets)).astype(np.int32)
