"""Scalar expressions pushed down to the storage nodes, as the kernels evaluate them.

A column (`Col`), a typed literal (`Lit`: `literal` reads one as the scan protocol sends it, dates
as ISO strings, decimals as strings, intervals as ``interval_day``, ``interval_month`` or
``interval_year`` counts), the right side of a long IN (`Values`) and an operation (`Call`).
`check` types an expression against a table so that a bad request fails before any block is read.
"""

from __future__ import annotations

import datetime as dt
import decimal
import functools
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import pyarrow as pa

from gpu_kernels.column_types import Kind, kind_of, parse_type


class ExprError(ValueError):
    """The expression is malformed or mistyped; the message names the problem."""


@dataclass(frozen=True)
class Type:
    kind: Kind
    scale: int = 0  # decimals: digits after the point; intervals: 0 day, 1 month
    unit: str = ""  # timestamps


@dataclass(frozen=True)
class Col:
    name: str


@dataclass(frozen=True)
class Lit:
    value: Any  # Python value: int, Decimal, float, str, bool, date, None; intervals an int count
    type: Type


@dataclass(frozen=True)
class Values:
    """A list of literals of one type: the right side of a (long) IN list."""

    items: tuple
    type: Type

    @functools.cached_property
    def bounds(self) -> tuple[Any, Any]:
        """The smallest and the largest item (for pruning blocks by their min/max)."""
        if not self.items:
            return None, None
        if self.type.kind is Kind.INT:
            return int(self.integers.min()), int(self.integers.max())
        return min(self.items), max(self.items)

    @functools.cached_property
    def integers(self) -> np.ndarray:
        """The items of an INT list as int64 (what membership tests look up)."""
        return np.asarray(self.items, dtype=np.int64)

    def __reduce__(self):
        # an INT list travels to a scan worker as one int64 array, not as many Python ints
        if self.type.kind is Kind.INT and self.items:
            return _int_values, (self.integers, self.type)
        return Values, (self.items, self.type)


def _int_values(integers: np.ndarray, type_: Type) -> Values:
    values = Values(tuple(integers.tolist()), type_)
    values.__dict__["integers"] = integers  # what the sender had computed
    return values


@dataclass(frozen=True)
class Call:
    op: str
    args: tuple[Expr, ...]


Expr = Col | Lit | Values | Call

COMPARISONS = ("=", "<>", "<", "<=", ">", ">=")
ARITHMETIC = ("+", "-", "*", "/")
PATTERNS = ("like", "not_like", "ilike", "not_ilike")  # ilike: LIKE ignoring case
PREDICATES = (*COMPARISONS, "between", "in", "is_null", "is_not_null", *PATTERNS, "and", "or", "not")
TRUNCATIONS = ("date_trunc_year", "date_trunc_quarter", "date_trunc_month", "date_trunc_week", "date_trunc_day")
FUNCTIONS = ("neg", "case", "extract_year", "extract_month", "extract_day", *TRUNCATIONS, "substring")
OPS = (*PREDICATES, *ARITHMETIC, *FUNCTIONS)
INTERVALS = {"interval_day": 0, "interval_month": 1, "interval_year": 12}


@functools.cache
def arrow_kind(t: pa.DataType) -> Type:
    """The expression type of a column of Arrow type `t`."""
    kind = kind_of(t)
    if kind is None:
        raise ExprError(f"columns of type {t} cannot be used in expressions")
    if kind is Kind.DEC:
        return Type(kind, t.scale)
    if kind is Kind.TS:
        return Type(kind, unit=t.unit)
    return Type(kind)


def literal(value: Any, type_name: str | None) -> Lit:
    """A literal as the kernels compute with it: `value` read as `type_name` (None: as JSON types it)."""
    if value is None:
        return Lit(None, Type(Kind.NULL))
    if type_name in INTERVALS:
        if not isinstance(value, int):
            raise ExprError(f"an {type_name} literal needs an integer count, not {value!r}")
        months = INTERVALS[type_name]
        return Lit(value * (months or 1), Type(Kind.INTERVAL, 1 if months else 0))
    if type_name is None:
        if isinstance(value, bool):
            return Lit(value, Type(Kind.BOOL))
        if isinstance(value, int):
            return Lit(value, Type(Kind.INT))
        if isinstance(value, float):
            return Lit(value, Type(Kind.FLOAT))
        if isinstance(value, str):
            return Lit(value, Type(Kind.STR))
        raise ExprError(f"literal {value!r} needs a type")
    try:
        arrow_type = parse_type(type_name)
        kind = arrow_kind(arrow_type)
        if kind.kind is Kind.DATE:
            return Lit(dt.date.fromisoformat(value) if isinstance(value, str) else value, kind)
        if kind.kind is Kind.DEC:
            number = decimal.Decimal(str(value))
            return Lit(number, Type(Kind.DEC, max(0, -number.as_tuple().exponent)))
        if kind.kind is Kind.INT:
            return Lit(int(value), kind)
        if kind.kind is Kind.FLOAT:
            return Lit(float(value), kind)
        if kind.kind is Kind.BOOL:
            return Lit(bool(value), kind)
        if kind.kind is Kind.STR:
            return Lit(str(value), kind)
        if kind.kind is Kind.TS:
            return Lit(dt.datetime.fromisoformat(value) if isinstance(value, str) else value, kind)
    except (ValueError, TypeError, decimal.InvalidOperation) as e:
        raise ExprError(f"literal {value!r} is not a valid {type_name}: {e}") from e
    raise ExprError(f"literal of type {type_name} is not supported")


def value_list(items: Sequence[Any], type_name: str | None) -> Values:
    """The right side of a long IN: `items` read as literals of `type_name`; raises ExprError."""
    if None in items:
        raise ExprError("values must be a non-empty list without NULLs")
    kind = literal(items[0], type_name).type
    if kind.kind is Kind.DATE:
        return Values(tuple(dt.date.fromisoformat(v) for v in items), kind)
    if kind.kind is Kind.DEC:
        return Values(tuple(literal(v, type_name).value for v in items), kind)
    return Values(tuple(items), kind)


def integer_list(integers: np.ndarray) -> Values:
    """The right side of a long IN over integers, kept as the array it arrived as."""
    return _int_values(integers.astype(np.int64), Type(Kind.INT))


def columns_of(expr: Expr) -> set[str]:
    if isinstance(expr, Col):
        return {expr.name}
    if isinstance(expr, Call):
        return set().union(*(columns_of(a) for a in expr.args)) if expr.args else set()
    return set()


def conjuncts(expr: Expr | None) -> list[Expr]:
    """The AND-ed parts of a predicate."""
    if expr is None:
        return []
    if isinstance(expr, Call) and expr.op == "and":
        return [c for a in expr.args for c in conjuncts(a)]
    return [expr]


def conjoin(parts: list[Expr]) -> Expr | None:
    """The AND of `parts` (None for none)."""
    if not parts:
        return None
    return parts[0] if len(parts) == 1 else Call("and", tuple(parts))


# ---- typing ---------------------------------------------------------------------------------

_NUMERIC = (Kind.INT, Kind.DEC, Kind.FLOAT)


def _arity(call: Call, *counts: int) -> None:
    if len(call.args) not in counts:
        expected = " or ".join(str(c) for c in counts)
        raise ExprError(f"{call.op} takes {expected} argument(s), got {len(call.args)}")


def common_type(a: Type, b: Type, what: str) -> Type:
    """The type both sides of a comparison or CASE branch are converted to."""
    if a.kind is Kind.NULL:
        return b
    if b.kind is Kind.NULL:
        return a
    if a.kind in _NUMERIC and b.kind in _NUMERIC:
        if Kind.FLOAT in (a.kind, b.kind):
            return Type(Kind.FLOAT)
        if Kind.DEC in (a.kind, b.kind):
            return Type(Kind.DEC, max(a.scale, b.scale))
        return Type(Kind.INT)
    if a.kind == b.kind and a.kind is not Kind.INTERVAL:
        return a if a.kind is not Kind.TS else Type(Kind.TS, unit=a.unit or b.unit)
    if {a.kind, b.kind} == {Kind.DATE, Kind.TS}:
        return Type(Kind.TS, unit=a.unit or b.unit)
    raise ExprError(f"{what}: cannot combine {a.kind.value} and {b.kind.value}")


def arithmetic_type(op: str, a: Type, b: Type) -> Type:
    """The result type of `a op b` (op one of + - * /)."""
    if Kind.INTERVAL in (a.kind, b.kind):
        date = a if b.kind is Kind.INTERVAL else b
        if date.kind not in (Kind.DATE, Kind.TS) or op not in ("+", "-") or (op == "-" and a.kind is Kind.INTERVAL):
            raise ExprError(f"interval arithmetic needs date {op} interval, not {a.kind.value} {op} {b.kind.value}")
        return date
    if a.kind is Kind.DATE and b.kind is Kind.DATE and op == "-":
        return Type(Kind.INT)
    if Kind.NULL in (a.kind, b.kind):
        return a if b.kind is Kind.NULL else b
    if a.kind not in _NUMERIC or b.kind not in _NUMERIC:
        raise ExprError(f"{op} needs numbers, not {a.kind.value} and {b.kind.value}")
    if op == "/" or Kind.FLOAT in (a.kind, b.kind):
        return Type(Kind.FLOAT)
    if Kind.DEC in (a.kind, b.kind):
        return Type(Kind.DEC, a.scale + b.scale if op == "*" else max(a.scale, b.scale))
    return Type(Kind.INT)


def check(expr: Expr, columns: dict[str, Type]) -> Type:
    """The type of `expr` over `columns` (name -> type); raises ExprError when it is wrong."""
    if isinstance(expr, Col):
        if expr.name not in columns:
            raise ExprError(f"unknown column {expr.name!r}")
        return columns[expr.name]
    if isinstance(expr, Lit):
        return expr.type
    if isinstance(expr, Values):
        raise ExprError("a values list is only allowed as the right side of IN")
    if expr.op != "in" and any(isinstance(a, Values) for a in expr.args):
        raise ExprError("a values list is only allowed as the right side of IN")
    types = [check(a, columns) if not isinstance(a, Values) else a.type for a in expr.args]
    op = expr.op
    if op in COMPARISONS:
        _arity(expr, 2)
        common_type(types[0], types[1], op)
        return Type(Kind.BOOL)
    if op == "between":
        _arity(expr, 3)
        common_type(common_type(types[0], types[1], op), types[2], op)
        return Type(Kind.BOOL)
    if op == "in":
        if len(expr.args) == 2 and isinstance(expr.args[1], Values):
            common_type(types[0], expr.args[1].type, op)
            return Type(Kind.BOOL)
        if len(expr.args) < 2 or not all(isinstance(a, Lit) for a in expr.args[1:]):
            raise ExprError("in takes an expression and one or more literals")
        for t in types[1:]:
            common_type(types[0], t, op)
        return Type(Kind.BOOL)
    if op in ("is_null", "is_not_null"):
        _arity(expr, 1)
        return Type(Kind.BOOL)
    if op in PATTERNS:
        _arity(expr, 2)
        if types[0].kind is not Kind.STR or not isinstance(expr.args[1], Lit) or types[1].kind is not Kind.STR:
            raise ExprError(f"{op} needs a string expression and a string literal pattern")
        return Type(Kind.BOOL)
    if op in ("and", "or", "not"):
        if op == "not":
            _arity(expr, 1)
        elif len(expr.args) < 2:
            raise ExprError(f"{op} takes two or more arguments")
        for t in types:
            if t.kind not in (Kind.BOOL, Kind.NULL):
                raise ExprError(f"{op} needs boolean arguments, not {t.kind.value}")
        return Type(Kind.BOOL)
    if op in ARITHMETIC:
        _arity(expr, 2)
        return arithmetic_type(op, types[0], types[1])
    if op == "neg":
        _arity(expr, 1)
        if types[0].kind not in _NUMERIC:
            raise ExprError(f"neg needs a number, not {types[0].kind.value}")
        return types[0]
    if op == "case":
        if len(expr.args) < 2:
            raise ExprError("case takes condition, value pairs and an optional else value")
        pairs = len(types) // 2
        for condition in types[0 : 2 * pairs : 2]:
            if condition.kind not in (Kind.BOOL, Kind.NULL):
                raise ExprError(f"case conditions must be boolean, not {condition.kind.value}")
        values = types[1 : 2 * pairs : 2] + types[2 * pairs :]
        result = Type(Kind.NULL)
        for t in values:
            result = common_type(result, t, "case")
        return result
    if op.startswith("extract_"):
        _arity(expr, 1)
        if types[0].kind not in (Kind.DATE, Kind.TS):
            raise ExprError(f"{op} needs a date, not {types[0].kind.value}")
        return Type(Kind.INT)
    if op in TRUNCATIONS:  # DuckDB's date_trunc: a TIMESTAMP (without time zone) at the part's start
        _arity(expr, 1)
        if types[0].kind not in (Kind.DATE, Kind.TS):
            raise ExprError(f"{op} needs a date, not {types[0].kind.value}")
        return Type(Kind.TS, unit="us")
    if op == "substring":
        _arity(expr, 2, 3)
        bounds_ok = all(isinstance(a, Lit) and a.type.kind is Kind.INT for a in expr.args[1:])
        if types[0].kind is not Kind.STR or not bounds_ok:
            raise ExprError("substring takes a string and integer literal start [and length]")
        return Type(Kind.STR)
    raise ExprError(f"unsupported operation {op!r}")
