"""Sets of join keys at the coordinator: the distinct values of a column, and membership in them.

Integer and date keys spanning a compact range go through a table over the range (a scatter and a
scan, results in ascending order): hashing every value costs more than that, and the semi-join
reduction of the large TPC-H joins (Q9, Q21) spends a visible part of its time here. Other keys,
and integers spread too thinly over their range, use Arrow's hash kernels.
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from gpu_kernels import NumpyBackend, membership_of

SLOTS_PER_VALUE = 128  # beyond this many slots per value, filling and scanning the table costs more than hashing
MAX_SLOTS = 1 << 26

_BACKEND = NumpyBackend()
Keys = pa.Array | pa.ChunkedArray


def _integers(values: Keys) -> np.ndarray | None:
    """The values as int64 (dates as days), or None for other types and for columns with NULLs."""
    t = values.type
    if values.null_count or not (pa.types.is_date32(t) or (pa.types.is_integer(t) and t != pa.uint64())):
        return None
    if isinstance(values, pa.ChunkedArray):
        values = values.combine_chunks() if values.num_chunks else pa.array([], t)
    if pa.types.is_date32(t):
        values = values.view(pa.int32())
    return values.to_numpy(zero_copy_only=False).astype(np.int64, copy=False)


def distinct(values: Keys) -> pa.Array:
    """The distinct non-NULL values."""
    ints = _integers(values.drop_null())
    if ints is None or not len(ints):
        return pc.unique(values).drop_null()
    low, high = int(ints.min()), int(ints.max())
    span = high - low + 1
    if span > MAX_SLOTS or span > SLOTS_PER_VALUE * len(ints) + 4096:
        return pc.unique(values).drop_null()
    seen = np.zeros(span, dtype=bool)
    seen[ints - low] = True
    found = np.flatnonzero(seen) + low
    if pa.types.is_date32(values.type):
        return pa.array(found.astype(np.int32)).view(pa.date32())
    return pa.array(found).cast(values.type)


def is_in(values: Keys, keys: pa.Array) -> Keys:
    """A boolean per value: whether it is among `keys` (distinct, without NULLs); NULL is not."""
    members, ints = _integers(keys), _integers(values)
    if members is None or ints is None or not len(members) or not len(ints):
        return pc.is_in(values, value_set=keys)
    return pa.array(membership_of(_BACKEND, members)(ints))
