"""Predicates on a column's values, built once per comparison and applied to a small set of
values (the runs of a run-length column, the entries of a dictionary) or to every selected row.

A `ValuePredicate` maps values (a device array of domain integers or floats, or host Arrow
strings) to a bool mask. Integer domains compare exactly with rational literals (cents against
0.055); long IN lists become a lookup table or a sorted search.
"""

from __future__ import annotations

from collections.abc import Callable
from fractions import Fraction
from math import ceil, floor
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from gpu_kernels import expr as E
from gpu_kernels.backend import Array, NumpyBackend
from gpu_kernels.column_types import Kind
from gpu_kernels.vectors import EPOCH

ValuePredicate = Callable[[Any], Any]  # values (device array or host Arrow strings) -> bool mask


COMPARE: dict[str, Callable[[Any, Any], Any]] = {
    "=": lambda x, y: x == y,
    "<>": lambda x, y: x != y,
    "<": lambda x, y: x < y,
    "<=": lambda x, y: x <= y,
    ">": lambda x, y: x > y,
    ">=": lambda x, y: x >= y,
}
ARROW_COMPARE = {
    "=": pc.equal,
    "<>": pc.not_equal,
    "<": pc.less,
    "<=": pc.less_equal,
    ">": pc.greater,
    ">=": pc.greater_equal,
}


def string_predicate(op: str, values: list[str]) -> ValuePredicate:
    """A predicate on Arrow strings returning a NumPy bool mask."""

    def run(strings: pa.Array) -> np.ndarray:
        strings = strings.cast(pa.string()) if not pa.types.is_string(strings.type) else strings
        if op in ARROW_COMPARE:
            result = ARROW_COMPARE[op](strings, pa.scalar(values[0], pa.string()))
        elif op == "between":
            result = pc.and_(pc.greater_equal(strings, values[0]), pc.less_equal(strings, values[1]))
        elif op == "in":
            result = pc.is_in(strings, value_set=pa.array(values, pa.string()))
        elif op in E.PATTERNS:
            result = pc.match_like(strings, values[0], ignore_case=op.endswith("ilike"))
            if op.startswith("not_"):
                result = pc.invert(result)
        else:
            raise E.ExprError(f"{op} is not a string predicate")
        return result.fill_null(False).to_numpy(zero_copy_only=False)

    return run


def float_predicate(xp: Any, op: str, values: list[float]) -> ValuePredicate | None:
    if op in COMPARE:
        return lambda v: COMPARE[op](v, values[0])
    if op == "between":
        return lambda v: (v >= values[0]) & (v <= values[1])
    if op == "in":
        return lambda v: xp.isin(v, xp.asarray(values))
    return None


_FEW_MEMBERS = 8  # IN lists longer than this are looked up (`membership_of`), not compared one by one


def integer_predicate(backend: NumpyBackend, op: str, bounds: list[Fraction]) -> ValuePredicate | None:
    """Exact comparisons of integer domain values with rational literals (e.g. cents vs 0.055)."""
    xp = backend.xp

    def none(v: Array) -> Array:
        return xp.zeros(len(v), dtype=bool)

    def every(v: Array) -> Array:
        return xp.ones(len(v), dtype=bool)

    f = bounds[0] if bounds else None
    if op == "=":
        return (lambda v: v == int(f)) if f.denominator == 1 else none
    if op == "<>":
        return (lambda v: v != int(f)) if f.denominator == 1 else every
    if op == "<":
        return lambda v: v < ceil(f)
    if op == "<=":
        return lambda v: v <= floor(f)
    if op == ">":
        return lambda v: v > floor(f)
    if op == ">=":
        return lambda v: v >= ceil(f)
    if op == "between":
        low, high = ceil(bounds[0]), floor(bounds[1])
        return lambda v: (v >= low) & (v <= high)
    if op == "in":
        members = [int(b) for b in bounds if b.denominator == 1]
        if not members:
            return none
        if len(members) > _FEW_MEMBERS:  # one lookup per row, not one comparison per member
            listed = tuple(members)
            return _membership_once(backend, listed, listed, lambda: np.asarray(listed, dtype=np.int64))
        return lambda v: xp.isin(v, xp.asarray(members, dtype=xp.int64))
    return None


_TABLE_SPAN = 1 << 26  # membership by lookup table up to this many distinct possible values


_MEMBERSHIPS: dict[tuple[object, str, int], tuple[object, ValuePredicate]] = {}


def list_membership(backend: NumpyBackend, values: E.Values) -> ValuePredicate:
    """v IN values for integer domains, built once per values list and device."""

    def members() -> np.ndarray:
        if values.type.kind is Kind.DATE:
            return np.asarray([(v - EPOCH).days for v in values.items], dtype=np.int64)
        return values.integers

    return _membership_once(backend, id(values), values, members)


def _membership_once(
    backend: NumpyBackend, key: object, owner: object, members: Callable[[], np.ndarray]
) -> ValuePredicate:
    """`membership_of` the `members()` of `owner`, built once per owner and device: every block of
    a scan a device runs shares it (its table lives on that device). `key` finds it: an id, checked
    against the owner kept, or the owner itself (a literal list, equal when its key is)."""
    full = (key, backend.name, backend.device())
    cached = _MEMBERSHIPS.get(full)
    if cached is not None and (cached[0] is owner or key is owner):
        return cached[1]
    predicate = membership_of(backend, members())
    if len(_MEMBERSHIPS) > 64:
        _MEMBERSHIPS.clear()
    _MEMBERSHIPS[full] = (owner, predicate)
    return predicate


def membership_of(backend: NumpyBackend, members: np.ndarray) -> ValuePredicate:
    """A lookup table over the members' range when it is small enough (one gather per row), a
    sorted search otherwise."""
    xp = backend.xp
    low, high = int(members.min()), int(members.max())
    if high - low < _TABLE_SPAN:
        # one False slot on each side: a value outside [low, high] is clipped onto one (a clip and
        # a gather, no masks: faster than gathering only the values inside)
        span = high - low + 2
        table = np.zeros(span + 1, dtype=bool)
        table[members - (low - 1)] = True
        table = backend.asarray(table)

        def lookup(v: Array) -> Array:
            slots = v.astype(xp.int64, copy=False) - (low - 1)
            if xp is np:  # NumPy's clipping gather is one pass, ten times a clip and then a gather
                return table.take(slots, mode="clip")
            return table[xp.clip(slots, 0, span)]

        return lookup
    sorted_members = backend.asarray(np.unique(members))

    def search(v: Array) -> Array:
        position = xp.clip(xp.searchsorted(sorted_members, v), 0, len(sorted_members) - 1)
        return sorted_members[position] == v

    return search
