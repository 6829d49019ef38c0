"""Typed value vectors over the selected rows of a block, and the scalar arithmetic on them.

A `Vec` is one value per selected row in the backend's array module, or a broadcast scalar.
Decimals are scaled integers (``scale`` digits), dates day numbers, timestamps integers in their
unit; strings are dictionary codes on the device plus the dictionary (an Arrow array) on the
host, so string predicates run once per distinct value. `bound` is an upper bound on the
absolute integer value, tracked so that integer and decimal arithmetic prove they cannot overflow
int64; where the types' bounds cannot prove it (``88 * COUNT(*)``: a count may be any BIGINT),
the values' own bound decides (`measured`), and only values that may really overflow fail.
"""

from __future__ import annotations

import datetime as dt
import decimal
from dataclasses import dataclass, replace
from fractions import Fraction
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from gpu_kernels.backend import Array, NumpyBackend
from gpu_kernels.column_types import Kind, from_domain, to_domain
from gpu_kernels.expr import ExprError, Lit, Type, arrow_kind

EPOCH = dt.date(1970, 1, 1)
INT64_MAX = (1 << 63) - 1
UNITS_PER_DAY = {"s": 86_400, "ms": 86_400_000, "us": 86_400_000_000, "ns": 86_400_000_000_000}
_UNITS_PER_SECOND = {"s": 1, "ms": 1_000, "us": 1_000_000, "ns": 1_000_000_000}
_NO_SCALAR = object()


class OverflowInExpression(ArithmeticError):
    code = "numeric_overflow"


@dataclass
class Vec:
    type: Type
    data: Array | None = None  # one value per selected row (None for a scalar)
    valid: Array | None = None  # bool per row; None when all are valid
    dictionary: pa.Array | None = None  # STR: the strings the codes in `data` point at
    scalar: Any = _NO_SCALAR  # domain value of a broadcast scalar (None is NULL)
    bound: int = INT64_MAX  # |value| <= bound, for integer-backed kinds

    @property
    def is_scalar(self) -> bool:
        return self.scalar is not _NO_SCALAR

    @property
    def is_null_scalar(self) -> bool:
        return self.is_scalar and self.scalar is None


def literal_domain(lit: Lit) -> Any:
    """A literal's value in its domain: scaled integer, day number, epoch unit, code string."""
    kind, value = lit.type.kind, lit.value
    if value is None or kind in (Kind.INT, Kind.FLOAT, Kind.STR, Kind.INTERVAL):
        return value
    if kind is Kind.BOOL:
        return int(value)
    if kind is Kind.DEC:
        return int(decimal.Decimal(value).scaleb(lit.type.scale))
    if kind is Kind.DATE:
        return (value - EPOCH).days
    if kind is Kind.TS:
        return timestamp_value(value, lit.type.unit)
    raise ExprError(f"literal of kind {kind.value} has no domain value")


def timestamp_value(value: dt.datetime, unit: str) -> int:
    epoch = dt.datetime(1970, 1, 1, tzinfo=value.tzinfo)
    delta = value - epoch
    micros = (delta.days * 86_400 + delta.seconds) * 1_000_000 + delta.microseconds
    return micros * _UNITS_PER_SECOND[unit] // 1_000_000


def literal_vec(lit: Lit) -> Vec:
    value = literal_domain(lit)
    bound = abs(value) if isinstance(value, int) else INT64_MAX
    return Vec(lit.type, scalar=value, bound=bound)


def scalar_literal(vec: Vec) -> Lit:
    """The literal a scalar vector stands for (the inverse of `literal_vec`)."""
    kind, value = vec.type.kind, vec.scalar
    if value is None:
        return Lit(None, Type(Kind.NULL))
    if kind is Kind.DEC:
        value = decimal.Decimal(value).scaleb(-vec.type.scale)
    elif kind is Kind.DATE:
        value = EPOCH + dt.timedelta(days=int(value))
    elif kind is Kind.TS:
        micros = int(value) * 1_000_000 // _UNITS_PER_SECOND[vec.type.unit]
        value = dt.datetime(1970, 1, 1) + dt.timedelta(microseconds=micros)
    elif kind is Kind.BOOL:
        value = bool(value)
    elif kind is Kind.INT:
        value = int(value)
    elif kind is Kind.FLOAT:
        value = float(value)
    return Lit(value, vec.type)


def exact_fraction(lit: Lit, column: Type) -> Fraction | None:
    """The literal as an exact number in the column's integer domain, or None if not comparable."""
    kind, value = lit.type.kind, lit.value
    if value is None:
        return None
    if column.kind in (Kind.INT, Kind.DEC) and kind in (Kind.INT, Kind.DEC, Kind.FLOAT):
        if kind is Kind.FLOAT and not np.isfinite(value):
            return None
        number = Fraction(value) if kind is not Kind.DEC else Fraction(decimal.Decimal(value))
        return number * 10**column.scale
    if column.kind is Kind.DATE and kind is Kind.DATE:
        return Fraction((value - EPOCH).days)
    if column.kind is Kind.TS and kind is Kind.TS:
        return Fraction(timestamp_value(value, column.unit))
    if column.kind is Kind.TS and kind is Kind.DATE:
        return Fraction((value - EPOCH).days * UNITS_PER_DAY[column.unit])
    if column.kind is Kind.BOOL and kind is Kind.BOOL:
        return Fraction(int(value))
    return None


def measured(backend: NumpyBackend, vec: Vec) -> Vec:
    """`vec` bounded by its values (the largest absolute value among its valid rows) where that is
    tighter than the bound its type and the operations on it gave."""
    if vec.is_scalar:
        found = abs(vec.scalar) if isinstance(vec.scalar, int) else vec.bound
    elif vec.data is None or len(vec.data) == 0:
        found = 0
    else:
        xp = backend.xp
        data = vec.data if vec.valid is None else xp.where(vec.valid, vec.data, 0)
        found = max(int(data.max()), -int(data.min()))  # Python ints: |INT64_MIN| fits
    return vec if found >= vec.bound else replace(vec, bound=found)


# ---- conversions between kinds ---------------------------------------------------------------


def rescale(backend: NumpyBackend, vec: Vec, scale: int) -> Vec:
    """A DEC/INT vector at a larger decimal scale."""
    factor = 10 ** (scale - vec.type.scale)
    if factor == 1:
        return vec if vec.type.kind is Kind.DEC or scale == 0 else replace(vec, type=Type(Kind.DEC, scale))
    if vec.bound * factor > INT64_MAX:
        vec = measured(backend, vec)
    bound = vec.bound * factor
    if bound > INT64_MAX:
        raise OverflowInExpression(f"decimal value does not fit 64 bits at scale {scale}")
    kind = Type(Kind.DEC, scale)
    if vec.is_scalar:
        return Vec(kind, scalar=None if vec.scalar is None else vec.scalar * factor, bound=bound)
    return Vec(kind, vec.data * factor, vec.valid, bound=bound)


def to_float(backend: NumpyBackend, vec: Vec) -> Vec:
    xp = backend.xp
    kind = vec.type.kind
    if kind is Kind.FLOAT:
        return vec
    divisor = 10**vec.type.scale if kind is Kind.DEC else 1
    if vec.is_scalar:
        return Vec(Type(Kind.FLOAT), scalar=None if vec.scalar is None else vec.scalar / divisor)
    data = vec.data.astype(xp.float64)
    return Vec(Type(Kind.FLOAT), data / divisor if divisor != 1 else data, vec.valid)


def date_to_timestamp(vec: Vec, unit: str) -> Vec:
    per_day = UNITS_PER_DAY[unit]
    kind = Type(Kind.TS, unit=unit)
    if vec.is_scalar:
        return Vec(kind, scalar=None if vec.scalar is None else vec.scalar * per_day)
    return Vec(kind, vec.data * per_day, vec.valid)


def coerce(backend: NumpyBackend, vec: Vec, target: Type) -> Vec:
    """Convert to `target` (a common type from `expr.common_type`)."""
    kind = vec.type.kind
    if kind is Kind.NULL:
        return Vec(target, scalar=None)
    if target.kind is Kind.FLOAT:
        return to_float(backend, vec)
    if target.kind is Kind.DEC:
        return rescale(backend, vec, target.scale)
    if target.kind is Kind.TS and kind is Kind.DATE:
        return date_to_timestamp(vec, target.unit)
    return vec


def and_valid(backend: NumpyBackend, *vecs: Vec) -> Array | None:
    valid = None
    for v in vecs:
        if v.valid is not None:
            valid = v.valid if valid is None else valid & v.valid
    return valid


# ---- dates -------------------------------------------------------------------------------------


def civil_from_days(xp: Any, days: Array) -> tuple[Array, Array, Array]:
    """(year, month, day) of day numbers since 1970-01-01 (proleptic Gregorian)."""
    z = days + 719_468
    era = z // 146_097
    doe = z - era * 146_097
    yoe = (doe - doe // 1460 + doe // 36_524 - doe // 146_096) // 365
    doy = doe - (365 * yoe + yoe // 4 - yoe // 100)
    mp = (5 * doy + 2) // 153
    day = doy - (153 * mp + 2) // 5 + 1
    month = xp.where(mp < 10, mp + 3, mp - 9)
    year = yoe + era * 400 + (month <= 2)
    return year, month, day


def days_from_civil(xp: Any, year: Array, month: Array, day: Array) -> Array:
    year = year - (month <= 2)
    era = year // 400
    yoe = year - era * 400
    doy = (153 * xp.where(month > 2, month - 3, month + 9) + 2) // 5 + day - 1
    doe = yoe * 365 + yoe // 4 - yoe // 100 + doy
    return era * 146_097 + doe - 719_468


def add_months(xp: Any, days: Array, months: int) -> Array:
    """Calendar month arithmetic; the day is clamped to the target month's length."""
    year, month, day = civil_from_days(xp, days)
    total = year * 12 + (month - 1) + months
    year, month = total // 12, total % 12 + 1
    next_year, next_month = xp.where(month == 12, year + 1, year), xp.where(month == 12, 1, month + 1)
    length = days_from_civil(xp, next_year, next_month, 1) - days_from_civil(xp, year, month, 1)
    return days_from_civil(xp, year, month, xp.minimum(day, length))


# ---- strings -----------------------------------------------------------------------------------


def compact_strings(backend: NumpyBackend, vec: Vec) -> Vec:
    """Make the dictionary distinct (codes renumbered), as grouping needs."""
    encoded = pc.dictionary_encode(vec.dictionary)
    if len(encoded.dictionary) == len(vec.dictionary):
        return vec
    remap = backend.asarray(encoded.indices.to_numpy(zero_copy_only=False).astype(np.int64))
    return replace(vec, data=remap[vec.data], dictionary=encoded.dictionary)


def strings_of(backend: NumpyBackend, vec: Vec) -> pa.Array:
    """The strings of a STR vector, on the host."""
    codes = backend.to_host(vec.data)
    strings = vec.dictionary.take(pa.array(codes))
    if vec.valid is not None:
        valid = backend.to_host(vec.valid)
        strings = pc.if_else(pa.array(valid), strings, pa.nulls(len(strings), pa.string()))
    return strings


# ---- results -----------------------------------------------------------------------------------


def arrow_type(t: Type) -> pa.DataType:
    """The Arrow type an expression of type `t` is returned as."""
    return {
        Kind.INT: pa.int64(),
        Kind.FLOAT: pa.float64(),
        Kind.DATE: pa.date32(),
        Kind.BOOL: pa.bool_(),
        Kind.STR: pa.string(),
        Kind.NULL: pa.null(),
    }.get(t.kind) or (pa.decimal128(38, t.scale) if t.kind is Kind.DEC else pa.timestamp(t.unit or "us"))


def to_arrow(backend: NumpyBackend, vec: Vec, rows: int, target: pa.DataType) -> pa.Array:
    """Materialize `rows` values of `vec` as an Arrow array of type `target`, on the host."""
    xp = backend.xp
    if vec.is_scalar:
        if vec.scalar is None:
            return pa.nulls(rows, target)
        if vec.type.kind is Kind.STR:
            return pa.array([vec.scalar] * rows, pa.string()).cast(target)
        filled = xp.full(rows, vec.scalar, dtype=xp.float64 if vec.type.kind is Kind.FLOAT else xp.int64)
        vec = replace(vec, data=filled, scalar=_NO_SCALAR)
    if vec.type.kind is Kind.STR:
        return strings_of(backend, vec).cast(target)
    values = backend.to_host(vec.data)
    valid = backend.to_host(vec.valid) if vec.valid is not None else None
    if vec.type.kind is Kind.FLOAT:
        values = values.astype(np.float64).view(np.int64)
    elif vec.type.kind is Kind.BOOL:
        values = values.astype(np.int64)
    if valid is not None and bool(valid.all()):
        valid = None
    return from_domain(values.astype(np.int64, copy=False), valid, target)


def from_arrow(backend: NumpyBackend, array: pa.Array) -> Vec:
    """A vector holding an Arrow array's values (on the device)."""
    t = arrow_kind(array.type)
    if t.kind is Kind.STR:
        encoded = pc.dictionary_encode(array.cast(pa.string()))
        codes = encoded.indices.fill_null(0).to_numpy(zero_copy_only=False).astype(np.int64)
        valid = None if array.null_count == 0 else backend.asarray(array.is_valid().to_numpy(zero_copy_only=False))
        return Vec(t, backend.asarray(codes), valid, dictionary=encoded.dictionary)
    domain = to_domain(array)
    data = backend.asarray(domain.values)
    if t.kind is Kind.FLOAT:
        data = data.view(backend.xp.float64)
    elif t.kind is Kind.BOOL:
        data = data != 0
    valid = None if domain.valid is None else backend.asarray(domain.valid)
    return Vec(t, data, valid)
