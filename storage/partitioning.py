"""Hash placement: the bucket of each row, ``hash(key columns) mod buckets``.

The hash is splitmix64 chained over the key columns, so the loader, the NumPy and CuPy scan
kernels and Spark tasks compute the same bucket for the same row. Integers (and dates,
decimals...) hash their domain value; strings hash the first 8 bytes of their BLAKE2b digest
(computed once per distinct string, on the host); NULL hashes to 0. The mixing functions take
NumPy or CuPy arrays alike.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from storage.types import DomainValues

SEED = np.uint64(0x9E3779B97F4A7C15)


def splitmix64(z: Any) -> Any:
    z = z ^ (z >> np.uint64(30))
    z = z * np.uint64(0xBF58476D1CE4E5B9)
    z = z ^ (z >> np.uint64(27))
    z = z * np.uint64(0x94D049BB133111EB)
    return z ^ (z >> np.uint64(31))


def string_hashes(strings: pa.Array) -> np.ndarray:
    """uint64 hash of each string (NULL -> 0), on the host."""
    digests = [
        0 if s is None else int.from_bytes(hashlib.blake2b(s.encode(), digest_size=8).digest(), "little")
        for s in strings.to_pylist()
    ]
    return np.array(digests, dtype=np.uint64)


def mix(h: Any, key: Any) -> Any:
    """Chain one key column's uint64 hash input into the running row hash."""
    return splitmix64(h ^ key)


def key_hash(column: DomainValues) -> np.ndarray:
    """uint64 hash input of one key column (before mixing)."""
    values = column.values
    if isinstance(values, np.ndarray):
        h = values.astype(np.int64, copy=False).view(np.uint64)
    else:
        distinct = pc.unique(values)
        h = string_hashes(distinct)[pc.index_in(values, distinct).to_numpy(zero_copy_only=False)]
    if column.valid is not None:
        h = np.where(column.valid, h, np.uint64(0))
    return h


def row_hashes(keys: Sequence[DomainValues]) -> np.ndarray:
    h = np.full(len(keys[0]), SEED, dtype=np.uint64)
    for column in keys:
        h = mix(h, key_hash(column))
    return h


def buckets_of(keys: Sequence[DomainValues], buckets: int) -> np.ndarray:
    """The bucket (0..buckets-1) of each row."""
    return (row_hashes(keys) % np.uint64(buckets)).astype(np.int32)
