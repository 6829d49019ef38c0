"""Partial aggregates of one block, grouped by low-cardinality keys.

Two ways to form groups. When every key is a column stored as runs (run-length, or dictionary
codes as runs) the block is cut into *segments* where no key changes, counts and sums are taken
per segment from prefix sums, and only the segments are grouped: the keys are never decoded row
by row. Otherwise each selected row gets a group id from the keys' codes. Partial states follow
seed 002's partial/reduce/final scheme: COUNT -> count, SUM -> sum, MIN/MAX -> min/max,
AVG -> (sum, count), COUNT(DISTINCT) -> the list of distinct values per group.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from gpu_kernels.backend import Array
from gpu_kernels.column_types import Kind
from gpu_kernels.encodings import Dictionary, RunLength
from gpu_kernels.evaluate import BlockEvaluator
from gpu_kernels.expr import Col, Expr, Type
from gpu_kernels.selection import Selection
from gpu_kernels.vector_functions import materialize
from gpu_kernels.vectors import Vec, compact_strings, to_arrow

FUNCTIONS = ("count", "sum", "min", "max", "avg", "count_distinct")


@dataclass(frozen=True)
class NamedExpr:
    """An expression, the name of its result and the Arrow type of its values: a projected
    column or a group key."""

    name: str
    expr: Expr
    arrow_type: pa.DataType


@dataclass(frozen=True)
class AggSpec:
    name: str
    func: str
    arg: Expr | None  # None: COUNT(*)
    arrow_type: pa.DataType  # of the argument (sum: of the sum)

    def fields(self) -> list[pa.Field]:
        """The partial state's columns."""
        if self.func == "count":
            return [pa.field(self.name, pa.int64())]
        if self.func == "avg":
            return [pa.field(f"{self.name}$sum", self.arrow_type), pa.field(f"{self.name}$count", pa.int64())]
        if self.func == "count_distinct":
            return [pa.field(f"{self.name}$distinct", pa.list_(self.arrow_type))]
        return [pa.field(self.name, self.arrow_type)]


@dataclass
class Groups:
    """Units (rows or segments) of the selection and the group of each."""

    gid: Array  # group of each unit
    count: int  # number of groups
    keys: list[pa.Array]  # key values per group
    segment_starts: Array | None = None  # segments: first selected row of each (compressed order)
    segment_rows: Array | None = None  # segments: selected rows in each

    def row_gid(self, backend) -> Array:
        """The group of every selected row."""
        if self.segment_rows is None:
            return self.gid
        return backend.repeat(self.gid, self.segment_rows)


def partial_aggregate(
    ev: BlockEvaluator, sel: Selection, keys: list[NamedExpr], aggregates: list[AggSpec]
) -> pa.RecordBatch:
    fields = [pa.field(k.name, k.arrow_type) for k in keys] + [f for a in aggregates for f in a.fields()]
    schema = pa.schema(fields)
    if sel.is_empty:
        return pa.RecordBatch.from_pylist([], schema=schema)
    groups = _segment_groups(ev, sel, keys) or _row_groups(ev, sel, keys)
    columns = list(groups.keys)
    done: dict[tuple[str, Expr | None], list[pa.Array]] = {}  # SUM(x) and AVG(x) share the sum of x
    for spec in aggregates:
        columns.extend(_aggregate(ev, sel, groups, spec, done))
    return pa.RecordBatch.from_arrays(columns, schema=schema)


# ---- forming groups ----------------------------------------------------------------------------


def _run_structure(ev: BlockEvaluator, key: NamedExpr) -> tuple[Array, Array, pa.Array | None] | None:
    """(run ends, code per run, string dictionary) of a key stored as runs without NULLs."""
    if not isinstance(key.expr, Col):
        return None
    column = ev.block.columns[key.expr.name]
    if column.validity is not None:
        return None
    encoding = column.encoding
    if isinstance(encoding, RunLength):
        if isinstance(encoding.values, np.ndarray):
            return ev.dev(encoding.run_ends), ev.dev(encoding.values).astype(ev.xp.int64), None
        return ev.dev(encoding.run_ends), ev.xp.arange(len(encoding.values), dtype=ev.xp.int64), encoding.values
    if isinstance(encoding, Dictionary) and isinstance(encoding.codes, RunLength):
        codes = ev.dev(encoding.codes.values).astype(ev.xp.int64)
        if isinstance(encoding.dictionary, np.ndarray):
            return ev.dev(encoding.codes.run_ends), ev.dev(encoding.dictionary).astype(ev.xp.int64)[codes], None
        return ev.dev(encoding.codes.run_ends), codes, encoding.dictionary
    return None


def _segment_groups(ev: BlockEvaluator, sel: Selection, keys: list[NamedExpr]) -> Groups | None:
    """Groups of segments (stretches where no key changes), or None when the keys are not all runs."""
    if not keys:
        return None
    structures = [_run_structure(ev, k) for k in keys]
    if any(s is None for s in structures):
        return None
    xp = ev.xp
    ends = xp.unique(xp.concatenate([s[0].astype(xp.int64) for s in structures]))
    if 4 * len(ends) > sel.count():
        return None  # hardly fewer segments than rows
    starts = xp.concatenate((xp.zeros(1, dtype=xp.int64), ends[:-1]))
    before = sel.prefix_counts(xp.concatenate((starts, ends[-1:])))
    rows = xp.diff(before)
    kept = rows > 0
    starts, compressed_starts, rows = starts[kept], before[:-1][kept], rows[kept]
    ev.stats.runs_evaluated += len(ends)
    key_vecs = []
    for key, (run_ends, codes, dictionary) in zip(keys, structures, strict=True):
        per_segment = codes[xp.searchsorted(run_ends, starts, side="right")]
        t = Type(Kind.STR) if dictionary is not None else _key_type(ev, key)
        key_vecs.append(Vec(t, per_segment, None, dictionary=dictionary))
    gid, count, first = _group_ids(ev, key_vecs)
    group_keys = [_key_values(ev, v, first, k.arrow_type) for v, k in zip(key_vecs, keys, strict=True)]
    return Groups(gid, count, group_keys, compressed_starts, rows)


def _key_type(ev: BlockEvaluator, key: NamedExpr) -> Type:
    return ev.types[key.expr.name]


def _row_groups(ev: BlockEvaluator, sel: Selection, keys: list[NamedExpr]) -> Groups:
    xp = ev.xp
    rows = sel.count()
    if not keys:
        return Groups(xp.zeros(rows, dtype=xp.int64), 1, [])
    key_vecs = [ev.vec(k.expr, sel) for k in keys]
    key_vecs = [materialize(ev.backend, v, rows) for v in key_vecs]
    gid, count, first = _group_ids(ev, key_vecs)
    group_keys = [_key_values(ev, v, first, k.arrow_type) for v, k in zip(key_vecs, keys, strict=True)]
    return Groups(gid, count, group_keys)


def _codes(ev: BlockEvaluator, vec: Vec) -> tuple[Array, int]:
    """Dense codes 0..k-1 of a vector's values, NULL as its own code k."""
    xp = ev.xp
    if vec.type.kind is Kind.STR:
        vec = compact_strings(ev.backend, vec)
        codes, cardinality = vec.data.astype(xp.int64), len(vec.dictionary)
    else:
        data = vec.data.astype(xp.int64) if vec.data.dtype.kind != "f" else vec.data
        uniques, codes = ev.backend.unique_inverse(data)
        codes, cardinality = codes.astype(xp.int64), len(uniques)
    if vec.valid is not None:
        codes = xp.where(vec.valid, codes, cardinality)
    return codes, cardinality + 1


def _group_ids(ev: BlockEvaluator, key_vecs: list[Vec]) -> tuple[Array, int, Array]:
    """(group of each unit, number of groups, first unit of each group)."""
    xp = ev.xp
    combined = None
    for vec in key_vecs:
        codes, cardinality = _codes(ev, vec)
        if combined is None:
            combined = codes
        else:
            combined = combined * cardinality + codes
            if len(combined) and int(combined.max()) > (1 << 40):
                combined = ev.backend.unique_inverse(combined)[1].astype(xp.int64)
    [single] = key_vecs if len(key_vecs) == 1 else [None]
    if single is not None and single.valid is None and single.type.kind is not Kind.STR:
        gid, count = combined, cardinality - 1  # one key's codes are already dense: 0..k-1, no NULL
    else:
        uniques, gid = ev.backend.unique_inverse(combined)
        gid, count = gid.astype(xp.int64), len(uniques)
    first = ev.backend.group_min(gid, xp.arange(len(gid), dtype=xp.int64), count)
    return gid, count, first


def _key_values(ev: BlockEvaluator, vec: Vec, first: Array, target: pa.DataType) -> pa.Array:
    picked = Vec(vec.type, vec.data[first], vec.valid[first] if vec.valid is not None else None, vec.dictionary)
    return to_arrow(ev.backend, picked, len(first), target)


# ---- aggregating -------------------------------------------------------------------------------


def _aggregate(
    ev: BlockEvaluator,
    sel: Selection,
    groups: Groups,
    spec: AggSpec,
    done: dict[tuple[str, Expr | None], list[pa.Array]],
) -> list[pa.Array]:
    xp, backend = ev.xp, ev.backend
    rows = sel.count()
    if spec.func in ("count", "sum", "avg"):
        if ("count", spec.arg) not in done:
            done[("count", spec.arg)] = [pa.array(backend.to_host(_count(ev, groups, _valid(ev, spec.arg, sel), rows)))]
        counts = done[("count", spec.arg)]
        if spec.func == "count":
            return counts
        if ("sum", spec.arg) not in done:
            has_value = backend.asarray(counts[0].to_numpy(zero_copy_only=False) > 0)
            on_encoding = None
            if isinstance(spec.arg, Col) and groups.count == 1 and groups.segment_starts is None:
                on_encoding = ev.column_sum(spec.arg.name, sel)
            if on_encoding is not None:
                result = Vec(ev.types[spec.arg.name], xp.asarray([on_encoding], dtype=xp.int64), has_value)
            else:
                vec = materialize(ev.backend, ev.vec(spec.arg, sel), rows)
                data = vec.data if vec.data.dtype.kind == "f" else vec.data.astype(xp.int64, copy=False)
                if vec.valid is not None:
                    data = xp.where(vec.valid, data, 0)
                result = Vec(vec.type, _sum(ev, groups, data), has_value)
            done[("sum", spec.arg)] = [to_arrow(backend, result, groups.count, spec.arrow_type)]
        sums = done[("sum", spec.arg)]
        return sums + counts if spec.func == "avg" else sums
    vec = materialize(ev.backend, ev.vec(spec.arg, sel), rows)
    valid = vec.valid
    if spec.func == "count_distinct":
        return [_distinct(ev, groups, vec, spec.arrow_type)]
    has_value = _count(ev, groups, valid, rows) > 0
    gid = groups.row_gid(backend)
    data = vec.data if vec.type.kind is not Kind.STR else _string_ranks(ev, vec)
    if valid is not None:
        gid, data = gid[valid], data[valid]
    if spec.func == "min":
        extreme = backend.group_min(gid, data, groups.count)
    else:
        extreme = backend.group_max(gid, data, groups.count)
    if vec.type.kind is Kind.STR:
        ranked = compact_strings(backend, vec).dictionary.sort()
        extreme = xp.where(has_value, extreme, 0)
        return [to_arrow(backend, Vec(vec.type, extreme, has_value, dictionary=ranked), groups.count, spec.arrow_type)]
    return [to_arrow(backend, Vec(vec.type, extreme, has_value), groups.count, spec.arrow_type)]


def _valid(ev: BlockEvaluator, arg: Expr | None, sel: Selection) -> Array | None:
    """Which selected rows have a non-NULL argument (a column's validity needs no decoding)."""
    if arg is None:
        return None
    if isinstance(arg, Col):
        valid = ev.valid_mask(arg.name)
        return None if valid is None else sel.take(valid)
    return materialize(ev.backend, ev.vec(arg, sel), sel.count()).valid


def _count(ev: BlockEvaluator, groups: Groups, valid: Array | None, rows: int) -> Array:
    xp, backend = ev.xp, ev.backend
    if valid is None:
        if groups.segment_rows is not None:
            return backend.group_sum(groups.gid, groups.segment_rows.astype(xp.int64), groups.count)
        if groups.count == 1:
            return xp.asarray([rows], dtype=xp.int64)
        return backend.group_count(groups.gid, groups.count)
    return _sum(ev, groups, valid.astype(xp.int64))


def _sum(ev: BlockEvaluator, groups: Groups, data: Array) -> Array:
    xp, backend = ev.xp, ev.backend
    if groups.segment_starts is not None:
        data = backend.segment_sum(data, groups.segment_starts)
    elif groups.count == 1:
        return xp.asarray([data.sum(dtype=data.dtype)])
    return backend.group_sum(groups.gid, data, groups.count)


def _string_ranks(ev: BlockEvaluator, vec: Vec) -> Array:
    """Codes in sorted-string order, so that min/max of codes are min/max of strings."""
    xp = ev.xp
    vec = compact_strings(ev.backend, vec)
    order = np.argsort(np.asarray(vec.dictionary.to_pylist(), dtype=object), kind="stable")
    rank = np.empty(len(order), dtype=np.int64)
    rank[order] = np.arange(len(order))
    return ev.backend.asarray(rank)[vec.data.astype(xp.int64)]


def _distinct(ev: BlockEvaluator, groups: Groups, vec: Vec, element: pa.DataType) -> pa.Array:
    """Per group, the list of distinct non-NULL values (the partial state of COUNT(DISTINCT))."""
    xp, backend = ev.xp, ev.backend
    gid = groups.row_gid(backend)
    if vec.type.kind is Kind.STR:
        vec = compact_strings(backend, vec)
        codes, cardinality = vec.data.astype(xp.int64), len(vec.dictionary)
        values = vec.dictionary
    else:
        uniques, codes = backend.unique_inverse(vec.data)
        cardinality = len(uniques)
        values = None
    if vec.valid is not None:
        gid, codes = gid[vec.valid], codes[vec.valid]
    pairs = xp.unique(gid * max(cardinality, 1) + codes)
    pair_groups = backend.to_host(pairs // max(cardinality, 1))
    pair_codes = backend.to_host(pairs % max(cardinality, 1))
    if values is None:
        element_values = to_arrow(
            backend, Vec(vec.type, uniques[backend.asarray(pair_codes)]), len(pair_codes), element
        )
    else:
        element_values = values.take(pa.array(pair_codes)).cast(element)
    offsets = np.searchsorted(pair_groups, np.arange(groups.count + 1)).astype(np.int32)
    return pa.ListArray.from_arrays(pa.array(offsets), element_values, type=pa.list_(element))


# ---- reduce and final (seed 002): merging the partial states of every block and node ---------------


def final_aggregate(partials: pa.Table, keys: list[str], aggregates: list[AggSpec]) -> pa.Table:
    """Merge partial states into one row per group: counts and sums add up, min/max of min/max,
    AVG = sum of sums / sum of counts, COUNT(DISTINCT) = size of the union of the value lists.
    A global aggregate (no keys) over no rows gives one row (COUNT 0, the others NULL)."""
    partials = partials.combine_chunks()
    reduce = []
    for spec in aggregates:
        if spec.func in ("count", "sum"):
            reduce.append((spec.name, "sum"))
        elif spec.func in ("min", "max"):
            reduce.append((spec.name, spec.func))
        elif spec.func == "avg":
            reduce += [(f"{spec.name}$sum", "sum"), (f"{spec.name}$count", "sum")]
    grouped = partials.group_by(keys, use_threads=False).aggregate(reduce) if keys else _global(partials, reduce)
    columns = {name: grouped.column(name) for name in keys}
    for spec in aggregates:
        if spec.func in ("count", "sum", "min", "max"):
            merged = grouped.column(f"{spec.name}_{'sum' if spec.func == 'count' else spec.func}")
            columns[spec.name] = merged.fill_null(0) if spec.func == "count" else merged
        elif spec.func == "avg":
            total = grouped.column(f"{spec.name}$sum_sum")
            count = grouped.column(f"{spec.name}$count_sum")
            total = total.cast(pa.float64()) if not pa.types.is_floating(total.type) else total
            columns[spec.name] = pc.divide(total, pc.if_else(pc.equal(count, 0), None, count).cast(pa.float64()))
        else:
            columns[spec.name] = _distinct_counts(partials, grouped, keys, spec)
    return pa.table(columns)


def _global(partials: pa.Table, reduce: list[tuple[str, str]]) -> pa.Table:
    """The reduce step without keys: always exactly one row."""
    columns = {}
    for name, func in reduce:
        column = partials.column(name)
        value = getattr(pc, func)(column) if len(column) else pa.scalar(None, column.type)
        columns[f"{name}_{func}"] = pa.array([value.as_py()], column.type if func != "sum" else value.type)
    return pa.table(columns) if columns else pa.table({"_": [0]})


def _distinct_counts(partials: pa.Table, grouped: pa.Table, keys: list[str], spec: AggSpec) -> pa.Array:
    lists = partials.column(f"{spec.name}$distinct")
    parents = pc.list_parent_indices(lists)
    values = pc.list_flatten(lists)
    exploded = {k: partials.column(k).take(parents) for k in keys}
    exploded["$value"] = values
    distinct = pa.table(exploded).group_by([*keys, "$value"], use_threads=False).aggregate([])
    if not keys:
        return pa.array([distinct.num_rows], pa.int64())
    counts = distinct.group_by(keys, use_threads=False).aggregate([([], "count_all")])
    # looked up by key in Python: a join would not match NULL keys
    by_key = {tuple(row[k] for k in keys): row["count_all"] for row in counts.to_pylist()}
    return pa.array([by_key.get(tuple(row.values()), 0) for row in grouped.select(keys).to_pylist()], pa.int64())
