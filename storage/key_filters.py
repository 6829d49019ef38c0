"""Semi-join filters: ``column IN keys`` of an Arrow key array, as a scan filter. The coordinator's
planner writes them for the nodes' scans, and a node answering a whole query writes them between
its own scans (`storage.node_query`).

Everything else of a scan request is the scan protocol's (`storage.scan_protocol`); this only
chooses, by the keys' Arrow type, the protocol's list form that travels best.
"""

from __future__ import annotations

import pyarrow as pa

from storage.scan_protocol import Expr, col, in_, int64_values, is_null, lit, not_, or_, values


def _values(keys: pa.Array) -> Expr | None:
    """A values list for IN, or None for types not worth it."""
    t = keys.type
    if pa.types.is_integer(t):  # as one base64 array (a JSON number list above 2**63 for uint64)
        return int64_values(keys.to_numpy(zero_copy_only=False)) if t != pa.uint64() else values(keys.to_pylist())
    if pa.types.is_date32(t):
        return values([d.isoformat() for d in keys.to_pylist()], "date")
    if pa.types.is_string(t) or pa.types.is_large_string(t):
        return values(keys.to_pylist())
    return None


def membership(column: str, keys: pa.Array) -> Expr | None:
    """``column IN keys`` as a scan filter; None for key types not worth it."""
    if not len(keys):
        return lit(False)
    listed = _values(keys)
    return None if listed is None else in_(col(column), listed)


def no_membership(column: str, condition: Expr) -> Expr:
    """What NOT EXISTS keeps, given ``column IN keys``: rows not among the keys, and NULL (which
    matches nothing)."""
    return or_(is_null(col(column)), not_(condition))
