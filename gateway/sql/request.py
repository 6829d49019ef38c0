"""The scan requests the planner sends to the storage nodes, built in one place.

A request is the JSON object a node's scan endpoint takes: a table, a filter and either the
columns and computed expressions of a select-project sub-query or the group keys and partial
aggregates of a grouped one. Expressions are the nodes' expression language
(`gateway.sql.translate` turns SQL into it); these helpers write the parts the planner and the
semi-join reduction add themselves.
"""

from __future__ import annotations

from collections.abc import Hashable
from typing import Any

import pyarrow as pa

from gpu_kernels import expr as E

Ir = dict[str, Any]


def col(name: str) -> Ir:
    return {"col": name}


def call(op: str, *args: Ir) -> Ir:
    return {"op": op, "args": list(args)}


def conjunction(parts: list[Ir]) -> Ir | None:
    """AND of the parts (None for none, the part itself for one)."""
    if not parts:
        return None
    return parts[0] if len(parts) == 1 else call("and", *parts)


def named(name: str, expression: Ir) -> Ir:
    """A computed column or group key: ``{"name": ..., "expr": ...}``."""
    return {"name": name, "expr": expression}


def aggregate(name: str, func: str, arg: Ir | None = None) -> Ir:
    """A partial aggregate (`count` without an argument is COUNT(*))."""
    return {"name": name, "func": func} if arg is None else {"name": name, "func": func, "arg": arg}


def select_project(table: str, columns: list[str], computed: list[Ir], filters: list[Ir]) -> Ir:
    """Rows of `table` that pass every filter: its `columns` and the `computed` expressions."""
    request: Ir = {"table": table, "columns": columns}
    if computed:
        request["select"] = computed
    return _filtered(request, filters)


def grouped(table: str, keys: list[Ir], aggregates: list[Ir], filters: list[Ir]) -> Ir:
    """Rows of `table` that pass every filter, grouped by `keys`: one row per group and block."""
    return _filtered({"table": table, "group_by": keys, "aggregates": aggregates}, filters)


def _filtered(request: Ir, filters: list[Ir]) -> Ir:
    if filters:
        request["filter"] = conjunction(filters)
    return request


def _values(keys: pa.Array) -> Ir | None:
    """A values list for IN, or None for types not worth it."""
    t = keys.type
    if pa.types.is_integer(t):  # as one base64 array (a JSON number list above 2**63 for uint64)
        return E.int64_json(keys.to_numpy(zero_copy_only=False)) if t != pa.uint64() else {"values": keys.to_pylist()}
    if pa.types.is_date32(t):
        return {"values": [d.isoformat() for d in keys.to_pylist()], "type": "date"}
    if pa.types.is_string(t) or pa.types.is_large_string(t):
        return {"values": keys.to_pylist()}
    return None


def membership(column: str, keys: pa.Array) -> Ir | None:
    """``column IN keys`` as a scan filter; None for key types not worth it."""
    if not len(keys):
        return {"lit": False}
    values = _values(keys)
    return None if values is None else call("in", col(column), values)


def no_membership(column: str, condition: Ir) -> Ir:
    """What NOT EXISTS keeps, given ``column IN keys``: rows not among the keys, and NULL (which
    matches nothing)."""
    return call("or", call("is_null", col(column)), call("not", condition))


def request_key(value: Any) -> Hashable:
    """A hashable form of a scan request, equal for equal requests: finding identical sub-queries
    this way costs a fraction of writing their IN lists (up to `gateway.sql.reduce.MAX_KEYS` values) as JSON text."""
    if isinstance(value, dict):
        return tuple(sorted((k, tuple(v) if k == "values" else request_key(v)) for k, v in value.items()))
    if isinstance(value, list):
        return tuple(request_key(v) for v in value)
    return type(value), value  # 1, 1.0 and True are equal in Python, not in a request
