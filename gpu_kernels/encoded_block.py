"""An encoded block: RC rows of a table, each column encoded by its own chain.

This is what the kernels read. How a block is cut from a table, which chain each column gets
and how a block is stored in a file is the storage layer's business (`storage.block`).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pyarrow as pa

from gpu_kernels.column_types import from_domain
from gpu_kernels.encodings import Encoding


@dataclass
class EncodedColumn:
    name: str
    type: pa.DataType
    encoding: Encoding
    validity: np.ndarray | None  # packed bitmap (LSB first); None when there are no nulls
    null_count: int

    @property
    def length(self) -> int:
        return self.encoding.length

    @property
    def nbytes(self) -> int:
        return self.encoding.nbytes + (self.validity.nbytes if self.validity is not None else 0)

    def valid_mask(self) -> np.ndarray | None:
        if self.validity is None:
            return None
        return np.unpackbits(self.validity, count=self.length, bitorder="little").astype(bool)

    def decode(self) -> pa.Array:
        return from_domain(self.encoding.decode(), self.valid_mask(), self.type)


@dataclass
class EncodedBlock:
    rows: int
    columns: dict[str, EncodedColumn]

    @property
    def nbytes(self) -> int:
        return sum(c.nbytes for c in self.columns.values())

    def decode(self, names: list[str] | None = None, schema: pa.Schema | None = None) -> pa.RecordBatch:
        """The block as an Arrow batch (all columns, or `names` in that order)."""
        names = list(self.columns) if names is None else names
        arrays = [self.columns[n].decode() for n in names]
        if schema is not None:
            return pa.RecordBatch.from_arrays(arrays, schema=pa.schema([schema.field(n) for n in names]))
        return pa.RecordBatch.from_arrays(arrays, names=names)
