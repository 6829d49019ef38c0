"""Column types by name, their kinds, and their *domains*: the physical form the encodings and
kernels work on.

A type's name (`type_name` / `parse_type`: ``int32``, ``decimal(15,2)``, ``timestamp(us, UTC)``)
is how the catalog stores a column's type and how a scan request types its literals. Its kind
(`Kind`, `kind_of`) is what its values are, for the encodings and the expressions alike.

Every supported Arrow type has one domain form (`to_domain`):

- booleans, integers, dates, timestamps and decimals of precision <= 18 (as scaled integers)
  become a NumPy ``int64`` array;
- floating point becomes the ``int64`` bit patterns of its ``float64`` values, so runs and
  dictionaries compare bits and every value (NaN payloads, -0.0) round-trips exactly;
- ``string``, ``large_string`` and ``string_view`` become a ``pa.string()`` array;
- anything else the catalog accepts (wide decimals) stays an Arrow array and is stored plain.

Domain values hold no nulls: null slots are carried separately as a validity mask, and the
value under a null is filled with its predecessor so that runs are not broken.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from enum import Enum

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc


class UnsupportedTypeError(ValueError):
    """A type (or type name) that columns cannot have; the message names it."""


class Kind(Enum):
    """What a value is: a column's kind (`kind_of`) chooses its domain form and encodings, an
    expression's (`gpu_kernels.expr.Type`) how the kernels compute with it. INTERVAL and NULL are
    kinds of literals and results only."""

    INT = "int"
    DEC = "decimal"
    FLOAT = "float"
    DATE = "date"
    TS = "timestamp"
    BOOL = "bool"
    STR = "string"
    INTERVAL = "interval"
    NULL = "null"


_SIMPLE: dict[str, pa.DataType] = {
    "bool": pa.bool_(),
    "int8": pa.int8(),
    "int16": pa.int16(),
    "int32": pa.int32(),
    "int64": pa.int64(),
    "uint8": pa.uint8(),
    "uint16": pa.uint16(),
    "uint32": pa.uint32(),
    "float32": pa.float32(),
    "float64": pa.float64(),
    "date": pa.date32(),
    "string": pa.string(),
    "large_string": pa.large_string(),
    "string_view": pa.string_view(),
}
_NAMES = {t: name for name, t in _SIMPLE.items()}
_DECIMAL = re.compile(r"decimal\((\d+),\s*(\d+)\)", re.IGNORECASE)
_TIMESTAMP = re.compile(r"timestamp\((s|ms|us|ns)(?:,\s*(.+))?\)", re.IGNORECASE)
MAX_INT_DECIMAL_PRECISION = 18


def type_name(t: pa.DataType) -> str:
    """The catalog's name for an Arrow type; raises UnsupportedTypeError for the others."""
    if t in _NAMES:
        return _NAMES[t]
    if pa.types.is_decimal128(t):
        return f"decimal({t.precision},{t.scale})"
    if pa.types.is_timestamp(t):
        return f"timestamp({t.unit}, {t.tz})" if t.tz else f"timestamp({t.unit})"
    if pa.types.is_date64(t):
        raise UnsupportedTypeError("date64 columns are not supported; cast them to date32")
    raise UnsupportedTypeError(f"unsupported column type {t}")


def parse_type(name: str) -> pa.DataType:
    """Inverse of `type_name`."""
    name = name.strip()
    if name.lower() in _SIMPLE:
        return _SIMPLE[name.lower()]
    if m := _DECIMAL.fullmatch(name):
        precision, scale = int(m[1]), int(m[2])
        if not 1 <= precision <= 38 or scale > precision:
            raise UnsupportedTypeError(f"invalid decimal type {name}")
        return pa.decimal128(precision, scale)
    if m := _TIMESTAMP.fullmatch(name):
        return pa.timestamp(m[1], tz=m[2])
    raise UnsupportedTypeError(f"unknown column type {name!r}")


def kind_of(t: pa.DataType) -> Kind | None:
    """The kind of the values of Arrow type `t`; None for a type no kernel computes with."""
    if pa.types.is_boolean(t):
        return Kind.BOOL
    if pa.types.is_integer(t):
        return Kind.INT
    if pa.types.is_decimal(t):
        return Kind.DEC
    if pa.types.is_floating(t):
        return Kind.FLOAT
    if pa.types.is_date32(t):
        return Kind.DATE
    if pa.types.is_timestamp(t):
        return Kind.TS
    if pa.types.is_string(t) or pa.types.is_large_string(t) or pa.types.is_string_view(t):
        return Kind.STR
    return None


def held_as_int64(t: pa.DataType) -> bool:
    """Whether a column of type `t` is an ``int64`` array in its domain (integers, booleans, dates,
    timestamps, decimals that fit 64 bits, float bit patterns), rather than Arrow."""
    kind = kind_of(t)
    if kind is Kind.DEC:
        return pa.types.is_decimal128(t) and t.precision <= MAX_INT_DECIMAL_PRECISION
    return kind in (Kind.INT, Kind.BOOL, Kind.DATE, Kind.TS, Kind.FLOAT)


@dataclass(frozen=True)
class DomainValues:
    """A column in its domain: `values` (NumPy or Arrow) plus an optional validity mask."""

    values: np.ndarray | pa.Array
    valid: np.ndarray | None  # bool mask, None when there are no nulls

    def __len__(self) -> int:
        return len(self.values)


def _fixed_view(arr: pa.Array, dtype: np.dtype, per_value: int = 1) -> np.ndarray:
    """Zero-copy NumPy view of a fixed-width Arrow array's value buffer."""
    buf = arr.buffers()[1]
    count = len(arr) * per_value
    return np.frombuffer(buf, dtype=dtype, count=count, offset=arr.offset * per_value * dtype.itemsize)


def _validity(arr: pa.Array) -> np.ndarray | None:
    if arr.null_count == 0:
        return None
    return arr.is_valid().to_numpy(zero_copy_only=False)


def _fill_nulls(values: np.ndarray, valid: np.ndarray | None) -> np.ndarray:
    """Replace the value under each null by the previous valid one (the first valid for leading nulls)."""
    if valid is None:
        return values
    if not valid.any():
        return np.zeros_like(values)
    idx = np.where(valid, np.arange(len(values)), 0)
    np.maximum.accumulate(idx, out=idx)
    idx[: int(np.argmax(valid))] = int(np.argmax(valid))
    return values[idx]


def to_domain(arr: pa.Array) -> DomainValues:
    """Convert an Arrow array into its domain form (see module docstring)."""
    if isinstance(arr, pa.ChunkedArray):
        arr = arr.combine_chunks()
    t = arr.type
    valid = _validity(arr)
    kind = kind_of(t)
    if kind is Kind.STR:
        if not pa.types.is_string(t):
            arr = arr.cast(pa.string())
        if valid is not None:
            arr = pc.fill_null_backward(pc.fill_null_forward(arr)) if valid.any() else pa.array([""] * len(arr))
        return DomainValues(arr, valid)
    if not held_as_int64(t):
        return DomainValues(arr, valid)
    if kind is Kind.FLOAT:
        values = _fixed_view(arr, np.dtype(t.to_pandas_dtype())).astype(np.float64).view(np.int64)
    elif pa.types.is_boolean(t):
        values = arr.fill_null(False).to_numpy(zero_copy_only=False).astype(np.int64)
    elif pa.types.is_decimal128(t):
        values = _fixed_view(arr, np.dtype("<i8"), per_value=2)[::2].astype(np.int64)
    elif pa.types.is_date32(t):
        values = _fixed_view(arr, np.dtype("<i4")).astype(np.int64)
    elif pa.types.is_timestamp(t):
        values = _fixed_view(arr, np.dtype("<i8")).astype(np.int64)
    else:
        values = _fixed_view(arr, np.dtype(t.to_pandas_dtype())).astype(np.int64)
    return DomainValues(_fill_nulls(values, valid), valid)


def validity_buffer(valid: np.ndarray | None) -> pa.Buffer | None:
    if valid is None:
        return None
    return pa.py_buffer(np.packbits(valid, bitorder="little"))


def from_domain(values: np.ndarray | pa.Array, valid: np.ndarray | None, t: pa.DataType) -> pa.Array:
    """Build the Arrow array of type `t` from domain values and a validity mask."""
    n = len(values)
    bitmap = validity_buffer(valid)
    null_count = 0 if valid is None else int(n - np.count_nonzero(valid))
    scaled = pa.types.is_decimal128(t) and isinstance(values, np.ndarray)  # whatever the declared precision
    if not (held_as_int64(t) or scaled):
        arr = values if isinstance(values, pa.Array) else pa.array(values)
        if valid is not None and arr.null_count != null_count:
            arr = pa.Array.from_buffers(arr.type, n, [bitmap, *arr.buffers()[1:]], null_count)
        return arr if arr.type == t else arr.cast(t)
    values = np.asarray(values)
    if kind_of(t) is Kind.FLOAT:
        data = values.view(np.float64).astype(t.to_pandas_dtype())
    elif pa.types.is_boolean(t):
        data = np.packbits(values.astype(bool), bitorder="little")
    elif pa.types.is_decimal128(t):
        data = np.empty((n, 2), dtype=np.int64)
        data[:, 0] = values
        data[:, 1] = values >> 63
    elif pa.types.is_date32(t):
        data = values.astype(np.int32)
    elif pa.types.is_timestamp(t):
        data = values.astype(np.int64)
    else:
        data = values.astype(t.to_pandas_dtype())
    return pa.Array.from_buffers(t, n, [bitmap, pa.py_buffer(np.ascontiguousarray(data))], null_count)
