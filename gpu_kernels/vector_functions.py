"""Scalar functions computed on vectors: comparison, arithmetic, CASE's choice, EXTRACT and
SUBSTRING, with SQL's NULLs (a NULL operand gives NULL) and exact decimals.

Each takes the backend the vectors live on and returns a new `Vec`; a scalar operand stays a
scalar until `materialize` spreads it over the rows.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from gpu_kernels import expr as E
from gpu_kernels.backend import Array, NumpyBackend
from gpu_kernels.column_types import Kind
from gpu_kernels.expr import Type
from gpu_kernels.value_predicates import ARROW_COMPARE, COMPARE, string_predicate
from gpu_kernels.vectors import (
    INT64_MAX,
    UNITS_PER_DAY,
    OverflowInExpression,
    Vec,
    add_months,
    and_valid,
    civil_from_days,
    coerce,
    days_from_civil,
    measured,
    strings_of,
    to_float,
)

_FLIP = {"=": "=", "<>": "<>", "<": ">", "<=": ">=", ">": "<", ">=": "<="}
_ARITH: dict[str, Callable[[Any, Any], Any]] = {
    "+": lambda x, y: x + y,
    "-": lambda x, y: x - y,
    "*": lambda x, y: x * y,
}


def compare(backend: NumpyBackend, op: str, left: Vec, right: Vec) -> Vec:
    """A boolean vector: left <op> right, NULL where either side is."""
    xp = backend.xp
    boolean = Type(Kind.BOOL)
    if left.is_null_scalar or right.is_null_scalar:
        return Vec(boolean, scalar=None)
    common = E.common_type(left.type, right.type, op)
    if common.kind is Kind.STR:
        return _compare_strings(backend, op, left, right)
    a, b = coerce(backend, left, common), coerce(backend, right, common)
    x = a.scalar if a.is_scalar else a.data
    y = b.scalar if b.is_scalar else b.data
    data = COMPARE[op](x, y)
    if a.is_scalar and b.is_scalar:
        return Vec(boolean, scalar=bool(data))
    return Vec(boolean, xp.asarray(data), and_valid(backend, a, b))


def string_flags(backend: NumpyBackend, vec: Vec, op: str, values: list[str]) -> Vec:
    """A string predicate on a STR vector: evaluated once per dictionary entry, then gathered."""
    lut = backend.asarray(string_predicate(op, values)(vec.dictionary))
    return Vec(Type(Kind.BOOL), lut[vec.data], vec.valid)


def _compare_strings(backend: NumpyBackend, op: str, left: Vec, right: Vec) -> Vec:
    boolean = Type(Kind.BOOL)
    if left.is_scalar and right.is_scalar:
        return Vec(boolean, scalar=bool(COMPARE[op](left.scalar, right.scalar)))
    if right.is_scalar or left.is_scalar:
        vec, literal = (left, right.scalar) if right.is_scalar else (right, left.scalar)
        flipped = op if right.is_scalar else _FLIP[op]
        return string_flags(backend, vec, flipped, [literal])
    result = ARROW_COMPARE[op](strings_of(backend, left), strings_of(backend, right))
    data = backend.asarray(result.fill_null(False).to_numpy(zero_copy_only=False))
    return Vec(boolean, data, and_valid(backend, left, right))


def arithmetic(backend: NumpyBackend, op: str, a: Vec, b: Vec) -> Vec:
    """a <op> b for + - * /, exact on decimals (an overflow risk raises), NULL where either side is."""
    result_type = E.arithmetic_type(op, a.type, b.type)
    if a.is_null_scalar or b.is_null_scalar:
        return Vec(result_type, scalar=None)
    if Kind.INTERVAL in (a.type.kind, b.type.kind):
        return _interval(backend, op, a, b, result_type)
    if a.type.kind is Kind.DATE and b.type.kind is Kind.DATE:
        return _combine(backend, lambda x, y: x - y, a, b, Type(Kind.INT), a.bound + b.bound)
    if result_type.kind is Kind.FLOAT:
        fa, fb = to_float(backend, a), to_float(backend, b)
        if op == "/":
            return _divide(backend, fa, fb)
        return _combine(backend, _ARITH[op], fa, fb, result_type, INT64_MAX)
    if op == "*":
        if a.bound * b.bound > INT64_MAX:  # the types cannot prove it fits: the values decide
            a, b = measured(backend, a), measured(backend, b)
        bound = a.bound * b.bound
        if bound > INT64_MAX:
            raise OverflowInExpression("a product may not fit 64 bits")
    else:
        scale = result_type.scale
        if scale:
            a, b = coerce(backend, a, Type(Kind.DEC, scale)), coerce(backend, b, Type(Kind.DEC, scale))
        if a.bound + b.bound > INT64_MAX:
            a, b = measured(backend, a), measured(backend, b)
        bound = a.bound + b.bound
        if bound > INT64_MAX:
            raise OverflowInExpression("a sum may not fit 64 bits")
    return _combine(backend, _ARITH[op], a, b, result_type, bound)


def _combine(backend: NumpyBackend, fn: Callable, a: Vec, b: Vec, t: Type, bound: int) -> Vec:
    x = a.scalar if a.is_scalar else a.data
    y = b.scalar if b.is_scalar else b.data
    if a.is_scalar and b.is_scalar:
        return Vec(t, scalar=fn(x, y), bound=bound)
    return Vec(t, fn(x, y), and_valid(backend, a, b), bound=bound)


def _divide(backend: NumpyBackend, a: Vec, b: Vec) -> Vec:
    """Float division, NULL where the divisor is zero."""
    xp = backend.xp
    t = Type(Kind.FLOAT)
    if b.is_scalar:
        if b.scalar == 0:
            return Vec(t, scalar=None)
        return _combine(backend, lambda x, y: x / y, a, b, t, INT64_MAX)
    zero = b.data == 0
    safe = xp.where(zero, 1.0, b.data)
    x = a.scalar if a.is_scalar else a.data
    valid = and_valid(backend, a, b)
    valid = ~zero if valid is None else valid & ~zero
    return Vec(t, x / safe, valid)


def _interval(backend: NumpyBackend, op: str, a: Vec, b: Vec, t: Type) -> Vec:
    xp = backend.xp
    date, interval = (a, b) if b.type.kind is Kind.INTERVAL else (b, a)
    count = interval.scalar if op == "+" else -interval.scalar
    months = interval.type.scale == 1
    per_day = UNITS_PER_DAY[date.type.unit] if date.type.kind is Kind.TS else 1
    values = xp.asarray([date.scalar], dtype=xp.int64) if date.is_scalar else date.data
    if not months:
        shifted = values + count * per_day
    elif per_day == 1:
        shifted = add_months(xp, values, count)
    else:
        days = values // per_day
        shifted = add_months(xp, days, count) * per_day + (values - days * per_day)
    if date.is_scalar:
        return Vec(t, scalar=int(shifted[0]))
    return Vec(t, shifted, date.valid, bound=INT64_MAX)


def materialize(backend: NumpyBackend, vec: Vec, rows: int) -> Vec:
    """A scalar as an array of `rows` values (strings as a one-entry dictionary)."""
    xp = backend.xp
    if not vec.is_scalar:
        return vec
    if vec.scalar is None:
        dtype = xp.float64 if vec.type.kind is Kind.FLOAT else xp.int64
        data = xp.zeros(rows, dtype=bool if vec.type.kind is Kind.BOOL else dtype)
        dictionary = pa.array([""]) if vec.type.kind is Kind.STR else None
        return Vec(vec.type, data, xp.zeros(rows, dtype=bool), dictionary=dictionary, bound=0)
    if vec.type.kind is Kind.STR:
        return Vec(vec.type, xp.zeros(rows, dtype=xp.int64), None, dictionary=pa.array([vec.scalar]))
    dtype = xp.float64 if vec.type.kind is Kind.FLOAT else (bool if vec.type.kind is Kind.BOOL else xp.int64)
    return Vec(vec.type, xp.full(rows, vec.scalar, dtype=dtype), None, bound=vec.bound)


def where(backend: NumpyBackend, chosen: Array, a: Vec, b: Vec) -> Vec:
    """`a` where `chosen`, `b` elsewhere (both of one type, as arrays)."""
    xp = backend.xp
    if a.type.kind is Kind.STR:
        offset = len(a.dictionary)
        data = xp.where(chosen, a.data, b.data + offset)
        dictionary = pa.concat_arrays([a.dictionary.cast(pa.string()), b.dictionary.cast(pa.string())])
    else:
        data, dictionary = xp.where(chosen, a.data, b.data), None
    valid = None
    if a.valid is not None or b.valid is not None:
        va = a.valid if a.valid is not None else xp.ones(len(chosen), dtype=bool)
        vb = b.valid if b.valid is not None else xp.ones(len(chosen), dtype=bool)
        valid = xp.where(chosen, va, vb)
    return Vec(a.type, data, valid, dictionary=dictionary, bound=max(a.bound, b.bound))


def extract(backend: NumpyBackend, op: str, v: Vec) -> Vec:
    """EXTRACT(YEAR | MONTH | DAY FROM v) of a date or timestamp."""
    xp = backend.xp
    t = Type(Kind.INT)
    part = {"extract_year": 0, "extract_month": 1, "extract_day": 2}[op]
    if v.is_scalar:
        if v.scalar is None:
            return Vec(t, scalar=None)
        days = xp.asarray([v.scalar // (UNITS_PER_DAY[v.type.unit] if v.type.kind is Kind.TS else 1)])
        return Vec(t, scalar=int(civil_from_days(xp, days)[part][0]))
    days = v.data // UNITS_PER_DAY[v.type.unit] if v.type.kind is Kind.TS else v.data
    return Vec(t, civil_from_days(xp, days)[part].astype(xp.int64), v.valid, bound=1 << 40)


def date_trunc(backend: NumpyBackend, op: str, v: Vec) -> Vec:
    """DATE_TRUNC(part, v) of a date or timestamp, as DuckDB gives it: a TIMESTAMP in microseconds
    at the start of the year, quarter, month, ISO week (a Monday) or day."""
    xp = backend.xp
    t = Type(Kind.TS, unit="us")
    if v.is_scalar:
        if v.scalar is None:
            return Vec(t, scalar=None)
        return Vec(t, scalar=int(_truncated(xp, op, _days(v, xp.asarray([v.scalar])))[0]) * UNITS_PER_DAY["us"])
    micros = _truncated(xp, op, _days(v, v.data)).astype(xp.int64) * UNITS_PER_DAY["us"]
    return Vec(t, micros, v.valid)


def _days(v: Vec, data: Array) -> Array:
    return data // UNITS_PER_DAY[v.type.unit] if v.type.kind is Kind.TS else data.astype(np.int64)


def _truncated(xp: Any, op: str, days: Array) -> Array:
    """The day number at which the part of each day starts."""
    part = op.removeprefix("date_trunc_")
    if part == "day":
        return days
    if part == "week":  # day 0 (1970-01-01) was a Thursday: 3 days after a Monday
        return days - (days + 3) % 7
    year, month, _ = civil_from_days(xp, days)
    if part == "year":
        month = xp.ones_like(month)
    elif part == "quarter":
        month = (month - 1) // 3 * 3 + 1
    return days_from_civil(xp, year, month, xp.ones_like(month))


def substring(v: Vec, start: int, length: int | None) -> Vec:
    """SUBSTRING(v FROM start [FOR length]), on the dictionary of a string vector."""
    begin = max(start, 1) - 1
    end = None if length is None else max(start - 1 + length, begin)

    def cut(strings: pa.Array) -> pa.Array:
        return pc.utf8_slice_codeunits(strings, begin, end if end is not None else np.iinfo(np.int64).max)

    if v.is_scalar:
        return Vec(v.type, scalar=None if v.scalar is None else cut(pa.array([v.scalar]))[0].as_py())
    return replace(v, dictionary=cut(v.dictionary.cast(pa.string())))
