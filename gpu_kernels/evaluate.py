"""Evaluation of predicates and expressions on one encoded block, without decoding it first.

A predicate ``column <op> literal`` is evaluated once per run on run-length columns, once per
distinct value on dictionary columns (then mapped to the codes), and row by row only on the
rows still selected otherwise. SQL's three-valued logic is kept: a `Truth` is the selection of
rows where the predicate is true plus those where it is unknown (NULL). Expressions are
evaluated as `Vec`s over the final selection only, so projection decodes only selected rows
of the projected columns.
"""

from __future__ import annotations

import functools
import operator
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from fractions import Fraction
from math import ceil, floor
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from gpu_kernels import expr as E
from gpu_kernels.backend import Array, NumpyBackend
from gpu_kernels.encoded_block import EncodedBlock
from gpu_kernels.encodings import BitPacked, DeltaRunLength, Dictionary, Encoding, Plain, RunLength
from gpu_kernels.expr import Call, Col, Kind, Lit, Type
from gpu_kernels.selection import Selection
from gpu_kernels.vectors import (
    EPOCH,
    INT64_MAX,
    UNITS_PER_DAY,
    OverflowInExpression,
    Vec,
    add_months,
    and_valid,
    civil_from_days,
    coerce,
    exact_fraction,
    literal_vec,
    strings_of,
    to_float,
)

# Past this many ranges a bit-packed column is unpacked whole and then filtered.
_MAX_RANGE_UNPACKS = 16


@dataclass
class ScanStats:
    """What a scan touched: the measure of work on compressed data."""

    blocks: int = 0
    blocks_skipped: int = 0  # pruned by their min/max statistics
    rows_scanned: int = 0  # rows of the blocks visited
    rows_selected: int = 0
    values_decoded: int = 0  # single values decoded (per column)
    runs_evaluated: int = 0  # predicate evaluations on runs instead of rows
    dictionary_evaluated: int = 0  # predicate evaluations on dictionary entries

    def add(self, other: ScanStats) -> None:
        for name in self.__dataclass_fields__:
            setattr(self, name, getattr(self, name) + getattr(other, name))

    def to_json(self) -> dict[str, int]:
        return dict(vars(self))


@dataclass
class Truth:
    true: Selection
    unknown: Selection | None = None


ValuePredicate = Callable[[Any], Any]  # values (device array or host Arrow strings) -> bool mask


@dataclass
class BlockEvaluator:
    block: EncodedBlock
    backend: NumpyBackend
    stats: ScanStats = field(default_factory=ScanStats)

    def __post_init__(self) -> None:
        self.xp = self.backend.xp
        self.n = self.block.rows
        self.types = {name: E.arrow_kind(c.type) for name, c in self.block.columns.items()}
        self._device: dict[int, tuple[Any, Array]] = {}
        self._valid: dict[str, Array | None] = {}
        self._vecs: dict[tuple[E.Expr, int], tuple[Selection, Vec]] = {}

    # ---- data on the device -------------------------------------------------------------------

    def dev(self, host: np.ndarray) -> Array:
        """The device copy of a host array (cached for the block)."""
        key = id(host)
        if key not in self._device:
            self._device[key] = (host, self.backend.asarray(host))
        return self._device[key][1]

    def everything(self) -> Selection:
        return Selection.all(self.backend, self.n)

    def valid_mask(self, name: str) -> Array | None:
        """The column's validity over the block's rows, on the device (None: no NULLs)."""
        if name not in self._valid:
            column = self.block.columns[name]
            self._valid[name] = None if column.validity is None else self.backend.asarray(column.valid_mask())
        return self._valid[name]

    def _numeric(self, values: Array, kind: Kind) -> Array:
        """Domain integers as the values they stand for (float bit patterns as float64)."""
        values = values.astype(self.xp.int64, copy=False)
        return values.view(self.xp.float64) if kind is Kind.FLOAT else values

    def _run_index(self, run_ends: np.ndarray, sel: Selection) -> Array:
        xp = self.xp
        ends = self.dev(run_ends)
        if sel.is_all:
            lengths = xp.diff(ends.astype(xp.int64), prepend=0)
            return self.backend.repeat(xp.arange(len(ends), dtype=xp.int64), lengths)
        return xp.searchsorted(ends, sel.indices(), side="right")

    def decode_rows(self, encoding: Encoding, sel: Selection) -> Array:
        """Integer domain values of the selected rows only."""
        xp = self.xp
        self.stats.values_decoded += sel.count()
        if isinstance(encoding, Plain):
            return sel.take(self.dev(encoding.values)).astype(xp.int64, copy=False)
        if isinstance(encoding, BitPacked):
            packed, width = self.dev(encoding.packed), encoding.width
            if sel.is_ranges and len(sel.starts) <= _MAX_RANGE_UNPACKS:
                parts = [
                    self.backend.unpack(packed, width, int(a), int(b))
                    for a, b in zip(sel.starts, sel.stops, strict=True)
                ]
                offsets = parts[0] if len(parts) == 1 else xp.concatenate(parts) if parts else xp.zeros(0, xp.int64)
            else:
                lo, hi = sel.span()
                if sel.count() * 4 < hi - lo:  # sparse (measured crossover ~25%): read just those rows
                    offsets = self.backend.unpack_at(packed, width, sel.indices())
                else:
                    offsets = sel.take_span(self.backend.unpack(packed, width, lo, hi), lo)
            return xp.add(offsets, xp.int64(encoding.reference), dtype=xp.int64)  # widen and add in one pass
        if isinstance(encoding, RunLength):
            return self.dev(encoding.values).astype(xp.int64)[self._run_index(encoding.run_ends, sel)]
        if isinstance(encoding, DeltaRunLength):
            deltas = self.dev(encoding.deltas.values).astype(xp.int64)[
                self._run_index(encoding.deltas.run_ends, self.everything())
            ]
            return sel.take(xp.cumsum(deltas))
        if isinstance(encoding, Dictionary):
            return self.dev(encoding.dictionary).astype(xp.int64)[self.decode_rows(encoding.codes, sel)]
        raise TypeError(f"{encoding.kind} does not hold integers")

    def column_sum(self, name: str, sel: Selection) -> int | None:
        """SUM of an integer or decimal column without NULLs over the selection, computed on the
        encoding itself (packed lanes, or value x rows per run); None when it has to be decoded."""
        column = self.block.columns[name]
        if column.validity is not None or self.types[name].kind not in (Kind.INT, Kind.DEC):
            return None
        encoding = column.encoding
        xp = self.xp
        if isinstance(encoding, BitPacked):
            packed, width = self.dev(encoding.packed), encoding.width
            if sel.is_ranges and len(sel.starts) <= 64:
                ranges = zip(sel.starts.tolist(), sel.stops.tolist(), strict=True)
                offsets = sum(self.backend.packed_sum(packed, width, a, b) for a, b in ranges)
            else:
                lo, hi = sel.span()
                if 4 * sel.count() < hi - lo:  # sparse: gathering the rows is cheaper
                    return None
                offsets = self.backend.masked_sum(self.backend.unpack(packed, width, lo, hi), sel.window(lo, hi))
            return offsets + encoding.reference * sel.count()
        if isinstance(encoding, RunLength) and isinstance(encoding.values, np.ndarray):
            self.stats.runs_evaluated += len(encoding.run_ends)
            ends = self.dev(encoding.run_ends).astype(xp.int64)
            begins = xp.concatenate((xp.zeros(1, dtype=xp.int64), ends[:-1]))
            rows = sel.prefix_counts(ends) - sel.prefix_counts(begins)
            return int(xp.sum(self.dev(encoding.values).astype(xp.int64) * rows))
        return None

    def bound(self, encoding: Encoding) -> int:
        """An upper bound on |value| of an integer column, from the encoding alone."""
        if isinstance(encoding, BitPacked):
            return max(abs(encoding.reference), abs(encoding.reference + (1 << encoding.width) - 1))
        if isinstance(encoding, Plain) and isinstance(encoding.values, np.ndarray):
            return int(np.iinfo(encoding.values.dtype).max) + 1
        if isinstance(encoding, RunLength) and len(encoding.values):
            return int(np.abs(encoding.values.astype(np.int64)).max())
        if (
            isinstance(encoding, Dictionary)
            and isinstance(encoding.dictionary, np.ndarray)
            and len(encoding.dictionary)
        ):
            return int(np.abs(encoding.dictionary.astype(np.int64)).max())
        return INT64_MAX

    def column_vec(self, name: str, sel: Selection) -> Vec:
        """The column's values on the selected rows."""
        column = self.block.columns[name]
        t = self.types[name]
        valid = self.valid_mask(name)
        valid = sel.take(valid) if valid is not None else None
        if t.kind is Kind.STR:
            vec = self._string_vec(column.encoding, sel, valid)
        else:
            data = self._numeric(self.decode_rows(column.encoding, sel), t.kind)
            if t.kind is Kind.BOOL:
                data = data != 0
            vec = Vec(t, data, valid, bound=self.bound(column.encoding) if t.kind is not Kind.FLOAT else INT64_MAX)
        return vec

    def _string_vec(self, encoding: Encoding, sel: Selection, valid: Array | None) -> Vec:
        t = Type(Kind.STR)
        if isinstance(encoding, Dictionary):
            return Vec(t, self.decode_rows(encoding.codes, sel), valid, dictionary=encoding.dictionary)
        if isinstance(encoding, RunLength):
            self.stats.values_decoded += sel.count()
            return Vec(t, self._run_index(encoding.run_ends, sel), valid, dictionary=encoding.values)
        # Plain or Zstd (chosen for mostly distinct strings): on the host, each row its own entry
        # (hashing them into a distinct dictionary cost as much as a LIKE on them; grouping
        # makes a dictionary distinct when it needs one)
        strings = encoding.decode()
        self.stats.values_decoded += sel.count()
        if not sel.is_all:
            strings = strings.filter(pa.array(self.backend.to_host(sel.as_mask())))
        codes = self.backend.xp.arange(len(strings), dtype=np.int64)
        return Vec(t, codes, valid, dictionary=strings)

    # ---- predicates ---------------------------------------------------------------------------

    def filter(self, predicate: E.Expr | None) -> Selection:
        """The rows where `predicate` is true."""
        sel = self.everything()
        return sel if predicate is None else self.truth(predicate, sel).true

    def truth(self, e: E.Expr, within: Selection) -> Truth:
        if within.is_empty:
            return Truth(within)
        if isinstance(e, Lit):
            if e.value is None:
                return Truth(Selection.none(self.backend, self.n), within)
            return Truth(within if e.value else Selection.none(self.backend, self.n))
        if isinstance(e, Call):
            if e.op in ("and", "or", "not"):
                one = self._one_column(e)
                if one is not None:
                    return self._apply(*one, within)
            if e.op == "and":
                return self._and(e.args, within)
            if e.op == "or":
                return self._or(e.args, within)
            if e.op == "not":
                inner = self.truth(e.args[0], within)
                decided = inner.true if inner.unknown is None else inner.true | inner.unknown
                return Truth(within - decided, inner.unknown)
            if e.op in ("is_null", "is_not_null"):
                return self._null_test(e, within)
            if e.op in (*E.COMPARISONS, "between", "in", "like", "not_like"):
                column_level = self._column_predicate(e, within)
                if column_level is not None:
                    return column_level
                return self._generic_comparison(e, within)
        vec = self.vec(e, within)  # a boolean-valued column or expression
        return self._truth_of(vec, within)

    def _one_column(self, e: E.Expr) -> tuple[str, Type, ValuePredicate] | None:
        """An AND/OR/NOT of comparisons of one numeric or date column with literals (Q19's
        ``l_quantity >= 1 AND l_quantity <= 11 OR l_quantity >= 10 AND ...``) as one predicate on
        its values: the column is decoded once, not once per comparison. A NULL value leaves every
        comparison unknown, and so the whole combination, as `_apply` reports it."""
        if not isinstance(e, Call):
            return None
        if e.op in ("and", "or", "not"):
            parts = [self._one_column(a) for a in e.args]
            if any(p is None for p in parts) or len({p[0] for p in parts}) != 1:
                return None
            name, t, _ = parts[0]
            predicates = [p[2] for p in parts]
            if e.op == "not":
                return name, t, lambda v: ~predicates[0](v)
            if e.op == "and":
                return name, t, lambda v: functools.reduce(operator.and_, (p(v) for p in predicates))
            return name, t, lambda v: functools.reduce(operator.or_, (p(v) for p in predicates))
        column, literals = e.args[0], e.args[1:]
        if e.op not in (*E.COMPARISONS, "between", "in") or not isinstance(column, Col) or not literals:
            return None
        t = self.types[column.name]
        if t.kind in (Kind.STR, Kind.FLOAT) or not all(isinstance(a, Lit) and a.value is not None for a in literals):
            return None
        predicate = self._value_predicate(t, e.op, list(literals))
        return None if predicate is None else (column.name, t, predicate)

    def _truth_of(self, vec: Vec, within: Selection) -> Truth:
        if vec.is_scalar:
            if vec.scalar is None:
                return Truth(Selection.none(self.backend, self.n), within)
            return Truth(within if vec.scalar else Selection.none(self.backend, self.n))
        data = vec.data.astype(bool)
        if vec.valid is None:
            return Truth(within.subset(data))
        return Truth(within.subset(data & vec.valid), within.subset(~vec.valid))

    def _and(self, args: tuple[E.Expr, ...], within: Selection) -> Truth:
        result = self.truth(args[0], within)
        for arg in args[1:]:
            if result.unknown is None:  # the next conjunct only sees rows still true
                result = self.truth(arg, result.true)
                continue
            pending = result.true | result.unknown
            nxt = self.truth(arg, pending)
            true = result.true & nxt.true
            unknown = None
            if result.unknown is not None:
                unknown = result.unknown & (nxt.true if nxt.unknown is None else nxt.true | nxt.unknown)
            if nxt.unknown is not None:
                both = result.true & nxt.unknown
                unknown = both if unknown is None else unknown | both
            result = Truth(true, unknown)
        return result

    def _or(self, args: tuple[E.Expr, ...], within: Selection) -> Truth:
        result = self.truth(args[0], within)
        for arg in args[1:]:
            nxt = self.truth(arg, within - result.true)
            true = result.true | nxt.true
            unknowns = [u for u in (result.unknown, nxt.unknown) if u is not None]
            unknown = None
            if unknowns:
                union = unknowns[0] if len(unknowns) == 1 else unknowns[0] | unknowns[1]
                unknown = union - true
            result = Truth(true, unknown)
        return result

    def _null_test(self, e: Call, within: Selection) -> Truth:
        arg = e.args[0]
        if isinstance(arg, Col):
            valid = self.valid_mask(arg.name)
            nulls = (
                Selection.none(self.backend, self.n)
                if valid is None
                else Selection.from_mask(self.backend, ~valid) & within
            )
        else:
            vec = self.vec(arg, within)
            if vec.is_scalar:
                nulls = within if vec.scalar is None else Selection.none(self.backend, self.n)
            else:
                nulls = within.subset(~vec.valid) if vec.valid is not None else Selection.none(self.backend, self.n)
        return Truth(nulls if e.op == "is_null" else within - nulls)

    def _column_predicate(self, e: Call, within: Selection) -> Truth | None:
        """`column op literal(s)` on the encoded column, or None when it must go row by row."""
        column, literals = e.args[0], e.args[1:]
        if e.op == "in" and isinstance(literals[0], E.Values):
            if not isinstance(column, Col):
                raise E.ExprError("IN with a values list needs a column on its left")
            t = self.types[column.name]
            return self._apply(column.name, t, self._members(t, literals[0]), within)
        if not isinstance(column, Col) or not all(isinstance(a, Lit) for a in literals):
            return None
        t = self.types[column.name]
        if any(lit.value is None for lit in literals):
            if e.op == "between":  # x BETWEEN NULL AND 5 can still be false: go through AND
                return None
            if e.op != "in":
                return Truth(Selection.none(self.backend, self.n), within)
        predicate = self._value_predicate(t, e.op, [lit for lit in literals if lit.value is not None])
        if predicate is None:
            return None
        truth = self._apply(column.name, t, predicate, within)
        if e.op == "in" and any(lit.value is None for lit in literals):  # x IN (..., NULL): unknown unless matched
            truth = Truth(truth.true, within - truth.true)
        return truth

    def _members(self, t: Type, values: E.Values) -> ValuePredicate:
        """Membership in a (long) list of values, converted to the column's domain once."""
        if t.kind is Kind.STR:
            return _string_predicate("in", [str(v) for v in values.items])
        if t.kind in (Kind.INT, Kind.DATE, Kind.BOOL) and values.type.kind is t.kind:
            return _membership(self.backend, values)
        predicate = self._value_predicate(t, "in", [Lit(v, values.type) for v in values.items])
        if predicate is None:
            raise E.ExprError(f"IN list of {values.type.kind.value} does not compare with {t.kind.value}")
        return predicate

    def _value_predicate(self, t: Type, op: str, literals: list[Lit]) -> ValuePredicate | None:
        xp = self.xp
        if t.kind is Kind.STR:
            if not all(lit.type.kind is Kind.STR for lit in literals):
                return None
            return _string_predicate(op, [lit.value for lit in literals])
        if t.kind is Kind.FLOAT:
            if not all(lit.type.kind in (Kind.INT, Kind.DEC, Kind.FLOAT) for lit in literals):
                return None
            return _float_predicate(xp, op, [float(lit.value) for lit in literals])
        fractions = [exact_fraction(lit, t) for lit in literals]
        if any(f is None for f in fractions):
            return None
        return _integer_predicate(xp, op, fractions)

    def _apply(self, name: str, t: Type, predicate: ValuePredicate, within: Selection) -> Truth:
        """Evaluate a value predicate on a column: per run, per distinct value, or per selected row."""
        xp = self.xp
        encoding = self.block.columns[name].encoding
        if isinstance(encoding, RunLength):
            self.stats.runs_evaluated += len(encoding.run_ends)
            flags = self._flags(predicate, encoding.values, t)
            true = Selection.from_runs(self.backend, self.n, self.dev(encoding.run_ends), flags) & within
        elif isinstance(encoding, Dictionary):
            self.stats.dictionary_evaluated += len(encoding.dictionary)
            lut = self._flags(predicate, encoding.dictionary, t)
            if isinstance(encoding.codes, RunLength):
                self.stats.runs_evaluated += len(encoding.codes.run_ends)
                flags = lut[self.dev(encoding.codes.values).astype(xp.int64)]
                true = Selection.from_runs(self.backend, self.n, self.dev(encoding.codes.run_ends), flags) & within
            else:
                true = self._row_level(lambda rows: lut[self.decode_rows(encoding.codes, rows)], within)
        elif t.kind is Kind.STR:
            vec = self.column_vec(name, within)
            true = within.subset(self._flags(predicate, vec.dictionary, t)[vec.data])
        else:
            true = self._row_level(
                lambda rows: predicate(self._numeric(self.decode_rows(encoding, rows), t.kind)), within
            )
        valid = self.valid_mask(name)
        if valid is None:
            return Truth(true)
        valid_rows = Selection.from_mask(self.backend, valid)
        return Truth(true & valid_rows, within - valid_rows)

    def _row_level(self, flags_of: Callable[[Selection], Array], within: Selection) -> Selection:
        """Rows of `within` whose flag is set; `flags_of(rows)` gives one flag per row of `rows`.

        A dense selection is evaluated on every row of its span and the bitmaps are combined
        (no compaction); a sparse one only on its rows.
        """
        lo, hi = within.span()
        if (within.is_ranges and len(within.starts) == 1) or 4 * within.count() < hi - lo:
            return within.subset(flags_of(within))
        span = Selection(self.backend, self.n, self.xp.asarray([lo]), self.xp.asarray([hi]))
        return Selection.from_mask(self.backend, within.window(lo, hi) & flags_of(span), lo, self.n)

    def _flags(self, predicate: ValuePredicate, values: Any, t: Type) -> Array:
        """The predicate on a small set of values (runs or dictionary entries), on the device."""
        if t.kind is Kind.STR:
            return self.backend.asarray(predicate(values))
        return predicate(self._numeric(self.dev(values), t.kind))

    def _generic_comparison(self, e: Call, within: Selection) -> Truth:
        """Row-by-row comparison of arbitrary expressions."""
        if e.op == "between":
            low, high = Call(">=", (e.args[0], e.args[1])), Call("<=", (e.args[0], e.args[2]))
            return self._and((low, high), within)
        if e.op == "in" and all(isinstance(v, Lit) and isinstance(v.value, str) for v in e.args[1:]):
            left = self.vec(e.args[0], within)  # e.g. substring(c_phone, 1, 2) IN (...): computed once
            if not left.is_scalar and left.type.kind is Kind.STR:
                return self._truth_of(self._string_flags(left, "in", [v.value for v in e.args[1:]]), within)
        if e.op == "in":
            equalities = tuple(Call("=", (e.args[0], v)) for v in e.args[1:])
            return self._or(equalities, within) if len(equalities) > 1 else self.truth(equalities[0], within)
        left = self.vec(e.args[0], within)
        if e.op in ("like", "not_like"):
            pattern = e.args[1].value
            if left.is_scalar:
                matched = None if left.scalar is None else pc.match_like(pa.array([left.scalar]), pattern)[0].as_py()
                result = Vec(Type(Kind.BOOL), scalar=None if matched is None else matched == (e.op == "like"))
            else:
                result = self._string_flags(left, e.op, [pattern])
            return self._truth_of(result, within)
        right = self.vec(e.args[1], within)
        return self._truth_of(self.compare(e.op, left, right), within)

    def compare(self, op: str, left: Vec, right: Vec) -> Vec:
        """A boolean vector: left <op> right, NULL where either side is."""
        xp = self.xp
        boolean = Type(Kind.BOOL)
        if left.is_null_scalar or right.is_null_scalar:
            return Vec(boolean, scalar=None)
        common = E.common_type(left.type, right.type, op)
        if common.kind is Kind.STR:
            return self._compare_strings(op, left, right)
        a, b = coerce(self.backend, left, common), coerce(self.backend, right, common)
        x = a.scalar if a.is_scalar else a.data
        y = b.scalar if b.is_scalar else b.data
        data = _COMPARE[op](x, y)
        if a.is_scalar and b.is_scalar:
            return Vec(boolean, scalar=bool(data))
        return Vec(boolean, xp.asarray(data), and_valid(self.backend, a, b))

    def _string_flags(self, vec: Vec, op: str, values: list[str]) -> Vec:
        """A string predicate on a STR vector: evaluated once per dictionary entry, then gathered."""
        lut = self.backend.asarray(_string_predicate(op, values)(vec.dictionary))
        return Vec(Type(Kind.BOOL), lut[vec.data], vec.valid)

    def _compare_strings(self, op: str, left: Vec, right: Vec) -> Vec:
        boolean = Type(Kind.BOOL)
        if left.is_scalar and right.is_scalar:
            return Vec(boolean, scalar=bool(_COMPARE[op](left.scalar, right.scalar)))
        if right.is_scalar or left.is_scalar:
            vec, literal = (left, right.scalar) if right.is_scalar else (right, left.scalar)
            flipped = op if right.is_scalar else _FLIP[op]
            return self._string_flags(vec, flipped, [literal])
        result = _ARROW_COMPARE[op](strings_of(self.backend, left), strings_of(self.backend, right))
        data = self.backend.asarray(result.fill_null(False).to_numpy(zero_copy_only=False))
        return Vec(boolean, data, and_valid(self.backend, left, right))

    # ---- expressions --------------------------------------------------------------------------

    def vec(self, e: E.Expr, sel: Selection) -> Vec:
        """Evaluate an expression on the selected rows (each distinct expression once per selection)."""
        if isinstance(e, Lit):
            return literal_vec(e)
        key = (e, id(sel))
        cached = self._vecs.get(key)
        if cached is not None and cached[0] is sel:
            return cached[1]
        vec = self.column_vec(e.name, sel) if isinstance(e, Col) else self._compute(e, sel)
        self._vecs[key] = (sel, vec)
        return vec

    def _compute(self, e: Call, sel: Selection) -> Vec:
        op = e.op
        if op in E.PREDICATES:
            truth = self.truth(e, sel)
            data = sel.take(truth.true.as_mask())
            valid = None if truth.unknown is None else ~sel.take(truth.unknown.as_mask())
            return Vec(Type(Kind.BOOL), data, valid)
        if op in E.ARITHMETIC:
            return self.arithmetic(op, self.vec(e.args[0], sel), self.vec(e.args[1], sel))
        if op == "neg":
            v = self.vec(e.args[0], sel)
            if v.is_scalar:
                return v if v.scalar is None else replace(v, scalar=-v.scalar)
            return replace(v, data=-v.data)
        if op == "case":
            return self._case(e, sel)
        if op.startswith("extract_"):
            return self._extract(op, self.vec(e.args[0], sel))
        if op == "substring":
            return self._substring(e, self.vec(e.args[0], sel))
        raise E.ExprError(f"unsupported operation {op!r}")

    def arithmetic(self, op: str, a: Vec, b: Vec) -> Vec:
        result_type = E.arithmetic_type(op, a.type, b.type)
        if a.is_null_scalar or b.is_null_scalar:
            return Vec(result_type, scalar=None)
        if Kind.INTERVAL in (a.type.kind, b.type.kind):
            return self._interval(op, a, b, result_type)
        if a.type.kind is Kind.DATE and b.type.kind is Kind.DATE:
            return self._combine(lambda x, y: x - y, a, b, Type(Kind.INT), a.bound + b.bound)
        if result_type.kind is Kind.FLOAT:
            fa, fb = to_float(self.backend, a), to_float(self.backend, b)
            if op == "/":
                return self._divide(fa, fb)
            return self._combine(_ARITH[op], fa, fb, result_type, INT64_MAX)
        if op == "*":
            bound = a.bound * b.bound
            if bound > INT64_MAX:
                raise OverflowInExpression("product of decimals may not fit 64 bits")
            scaled = (a, b)
        else:
            scale = result_type.scale
            scaled = (
                coerce(self.backend, a, Type(Kind.DEC, scale)) if scale else a,
                coerce(self.backend, b, Type(Kind.DEC, scale)) if scale else b,
            )
            bound = scaled[0].bound + scaled[1].bound
            if bound > INT64_MAX:
                raise OverflowInExpression("sum of decimals may not fit 64 bits")
        return self._combine(_ARITH[op], scaled[0], scaled[1], result_type, bound)

    def _combine(self, fn: Callable, a: Vec, b: Vec, t: Type, bound: int) -> Vec:
        x = a.scalar if a.is_scalar else a.data
        y = b.scalar if b.is_scalar else b.data
        if a.is_scalar and b.is_scalar:
            return Vec(t, scalar=fn(x, y), bound=bound)
        return Vec(t, fn(x, y), and_valid(self.backend, a, b), bound=bound)

    def _divide(self, a: Vec, b: Vec) -> Vec:
        xp = self.xp
        t = Type(Kind.FLOAT)
        if b.is_scalar:
            if b.scalar == 0:
                return Vec(t, scalar=None)
            return self._combine(lambda x, y: x / y, a, b, t, INT64_MAX)
        zero = b.data == 0
        safe = xp.where(zero, 1.0, b.data)
        x = a.scalar if a.is_scalar else a.data
        valid = and_valid(self.backend, a, b)
        valid = ~zero if valid is None else valid & ~zero
        return Vec(t, x / safe, valid)

    def _interval(self, op: str, a: Vec, b: Vec, t: Type) -> Vec:
        xp = self.xp
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

    def _case(self, e: Call, sel: Selection) -> Vec:
        xp = self.xp
        args = e.args
        pairs = len(args) // 2
        conditions = [args[2 * i] for i in range(pairs)]
        values = [self.vec(args[2 * i + 1], sel) for i in range(pairs)]
        otherwise = self.vec(args[-1], sel) if len(args) % 2 else Vec(Type(Kind.NULL), scalar=None)
        result_type = Type(Kind.NULL)
        for v in (*values, otherwise):
            result_type = E.common_type(result_type, v.type, "case")
        rows = sel.count()
        result = self._materialize(coerce(self.backend, otherwise, result_type), rows)
        for condition, value in zip(reversed(conditions), reversed(values), strict=True):
            cond = self.vec(condition, sel)
            chosen = cond.data & cond.valid if (not cond.is_scalar and cond.valid is not None) else cond.data
            if cond.is_scalar:
                chosen = xp.full(rows, bool(cond.scalar), dtype=bool)
            branch = self._materialize(coerce(self.backend, value, result_type), rows)
            result = self._select(chosen, branch, result)
        return result

    def _materialize(self, vec: Vec, rows: int) -> Vec:
        """A scalar as an array of `rows` values (strings as a one-entry dictionary)."""
        xp = self.xp
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

    def _select(self, chosen: Array, a: Vec, b: Vec) -> Vec:
        xp = self.xp
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

    def _extract(self, op: str, v: Vec) -> Vec:
        xp = self.xp
        t = Type(Kind.INT)
        part = {"extract_year": 0, "extract_month": 1, "extract_day": 2}[op]
        if v.is_scalar:
            if v.scalar is None:
                return Vec(t, scalar=None)
            days = xp.asarray([v.scalar // (UNITS_PER_DAY[v.type.unit] if v.type.kind is Kind.TS else 1)])
            return Vec(t, scalar=int(civil_from_days(xp, days)[part][0]))
        days = v.data // UNITS_PER_DAY[v.type.unit] if v.type.kind is Kind.TS else v.data
        return Vec(t, civil_from_days(xp, days)[part].astype(xp.int64), v.valid, bound=1 << 40)

    def _substring(self, e: Call, v: Vec) -> Vec:
        start = e.args[1].value
        length = e.args[2].value if len(e.args) == 3 else None
        begin = max(start, 1) - 1
        end = None if length is None else max(start - 1 + length, begin)

        def cut(strings: pa.Array) -> pa.Array:
            return pc.utf8_slice_codeunits(strings, begin, end if end is not None else np.iinfo(np.int64).max)

        if v.is_scalar:
            return Vec(v.type, scalar=None if v.scalar is None else cut(pa.array([v.scalar]))[0].as_py())
        return replace(v, dictionary=cut(v.dictionary.cast(pa.string())))


_COMPARE: dict[str, Callable[[Any, Any], Any]] = {
    "=": lambda x, y: x == y,
    "<>": lambda x, y: x != y,
    "<": lambda x, y: x < y,
    "<=": lambda x, y: x <= y,
    ">": lambda x, y: x > y,
    ">=": lambda x, y: x >= y,
}
_FLIP = {"=": "=", "<>": "<>", "<": ">", "<=": ">=", ">": "<", ">=": "<="}
_ARITH: dict[str, Callable[[Any, Any], Any]] = {
    "+": lambda x, y: x + y,
    "-": lambda x, y: x - y,
    "*": lambda x, y: x * y,
}
_ARROW_COMPARE = {
    "=": pc.equal,
    "<>": pc.not_equal,
    "<": pc.less,
    "<=": pc.less_equal,
    ">": pc.greater,
    ">=": pc.greater_equal,
}


def _string_predicate(op: str, values: list[str]) -> ValuePredicate:
    """A predicate on Arrow strings returning a NumPy bool mask."""

    def run(strings: pa.Array) -> np.ndarray:
        strings = strings.cast(pa.string()) if not pa.types.is_string(strings.type) else strings
        if op in _ARROW_COMPARE:
            result = _ARROW_COMPARE[op](strings, pa.scalar(values[0], pa.string()))
        elif op == "between":
            result = pc.and_(pc.greater_equal(strings, values[0]), pc.less_equal(strings, values[1]))
        elif op == "in":
            result = pc.is_in(strings, value_set=pa.array(values, pa.string()))
        elif op in ("like", "not_like"):
            result = pc.match_like(strings, values[0])
            if op == "not_like":
                result = pc.invert(result)
        else:
            raise E.ExprError(f"{op} is not a string predicate")
        return result.fill_null(False).to_numpy(zero_copy_only=False)

    return run


def _float_predicate(xp: Any, op: str, values: list[float]) -> ValuePredicate:
    if op in _COMPARE:
        return lambda v: _COMPARE[op](v, values[0])
    if op == "between":
        return lambda v: (v >= values[0]) & (v <= values[1])
    if op == "in":
        return lambda v: xp.isin(v, xp.asarray(values))
    return None


def _integer_predicate(xp: Any, op: str, bounds: list[Fraction]) -> ValuePredicate:
    """Exact comparisons of integer domain values with rational literals (e.g. cents vs 0.055)."""

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
        return lambda v: xp.isin(v, xp.asarray(members, dtype=xp.int64))
    return None


_TABLE_SPAN = 1 << 26  # membership by lookup table up to this many distinct possible values


_MEMBERSHIPS: dict[tuple[int, str], tuple[E.Values, ValuePredicate]] = {}


def _membership(backend: NumpyBackend, values: E.Values) -> ValuePredicate:
    """v IN values for integer domains, built once per values list (every block of a scan shares it)."""
    key = (id(values), backend.name)
    cached = _MEMBERSHIPS.get(key)
    if cached is not None and cached[0] is values:
        return cached[1]
    if values.type.kind is Kind.DATE:
        members = np.asarray([(v - EPOCH).days for v in values.items], dtype=np.int64)
    else:
        members = values.integers
    predicate = membership_of(backend, members)
    if len(_MEMBERSHIPS) > 64:
        _MEMBERSHIPS.clear()
    _MEMBERSHIPS[key] = (values, predicate)
    return predicate


def membership_of(backend: NumpyBackend, members: np.ndarray) -> ValuePredicate:
    """A lookup table over the members' range when it is small enough (one gather per row), a
    sorted search otherwise."""
    xp = backend.xp
    low, high = int(members.min()), int(members.max())
    if high - low < _TABLE_SPAN:
        # one False slot on each side: a value outside [low, high] is clipped onto one (a clip and
        # a gather, no masks: a quarter faster than gathering only the values inside)
        span = high - low + 2
        table = np.zeros(span + 1, dtype=bool)
        table[members - (low - 1)] = True
        table = backend.asarray(table)

        def lookup(v: Array) -> Array:
            return table[xp.clip(v.astype(xp.int64, copy=False) - (low - 1), 0, span)]

        return lookup
    sorted_members = backend.asarray(np.unique(members))

    def search(v: Array) -> Array:
        position = xp.clip(xp.searchsorted(sorted_members, v), 0, len(sorted_members) - 1)
        return sorted_members[position] == v

    return search
