"""Hash placement of loaded rows: the bucket of each row of a table being loaded.

The hash itself is `gpu_kernels.placement_hash`, shared with the scan kernels that partition a
result the same way; here its key inputs are computed from the columns' domain values.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import pyarrow.compute as pc

from gpu_kernels import DomainValues, bucket_ids, hash_inputs


def key_hash(column: DomainValues) -> np.ndarray:
    """uint64 hash input of one key column (before mixing)."""
    values = column.values
    if isinstance(values, np.ndarray):
        h = hash_inputs(values)
    else:  # each distinct string hashed once
        distinct = pc.unique(values)
        h = hash_inputs(distinct)[pc.index_in(values, distinct).to_numpy(zero_copy_only=False)]
    if column.valid is not None:
        h = np.where(column.valid, h, np.uint64(0))
    return h


def buckets_of(keys: Sequence[DomainValues], buckets: int) -> np.ndarray:
    """The bucket (0..buckets-1) of each row."""
    return bucket_ids(np, [key_hash(column) for column in keys], buckets).astype(np.int32)
