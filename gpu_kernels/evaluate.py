"""Evaluation of predicates and expressions on one encoded block, without decoding it first.

A predicate ``column <op> literal`` is evaluated once per run on run-length columns, once per
distinct value on dictionary columns (then mapped to the codes), and row by row only on the
rows still selected otherwise. SQL's three-valued logic is kept: a `Truth` is the selection of
rows where the predicate is true plus those where it is unknown (NULL). Expressions are
evaluated as `Vec`s over the final selection only, so projection decodes only selected rows
of the projected columns. It builds on `decoding` (the selected rows of a column),
`value_predicates` (a comparison applied to values) and `vector_functions` (scalar functions).
"""

from __future__ import annotations

import functools
import operator
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Any

import pyarrow as pa

from gpu_kernels import expr as E
from gpu_kernels.backend import Array
from gpu_kernels.column_types import Kind
from gpu_kernels.decoding import BlockDecoder
from gpu_kernels.encodings import Dictionary, RunLength
from gpu_kernels.expr import Call, Col, Lit, Type
from gpu_kernels.selection import Selection
from gpu_kernels.value_predicates import (
    ValuePredicate,
    float_predicate,
    integer_predicate,
    list_membership,
    string_predicate,
)
from gpu_kernels.vector_functions import (
    arithmetic,
    compare,
    date_trunc,
    extract,
    materialize,
    string_flags,
    substring,
    where,
)
from gpu_kernels.vectors import Vec, coerce, exact_fraction, literal_vec


@dataclass
class Truth:
    true: Selection
    unknown: Selection | None = None


class BlockEvaluator(BlockDecoder):
    """Predicates and expressions on one block, on top of its decoder; each distinct expression
    is evaluated once per selection."""

    def __post_init__(self) -> None:
        super().__post_init__()
        self._vecs: dict[tuple[E.Expr, int], tuple[Selection, Vec]] = {}
        # a filter keeps the rows where its predicate is true: unknown is false there, and which
        # rows are unknown is worked out only beneath a NOT or for a boolean value
        self._two_valued = False

    def filter(self, predicate: E.Expr | None) -> Selection:
        """The rows where `predicate` is true."""
        sel = self.everything()
        if predicate is None:
            return sel
        self._two_valued = True
        try:
            return self.truth(predicate, sel).true
        finally:
            self._two_valued = False

    def _three_valued(self, e: E.Expr, within: Selection) -> Truth:
        """`truth`, with its unknown rows whatever the context."""
        two_valued, self._two_valued = self._two_valued, False
        try:
            return self.truth(e, within)
        finally:
            self._two_valued = two_valued

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
                inner = self._three_valued(e.args[0], within)
                decided = inner.true if inner.unknown is None else inner.true | inner.unknown
                return Truth(within - decided, inner.unknown)
            if e.op in ("is_null", "is_not_null"):
                return self._null_test(e, within)
            if e.op in (*E.COMPARISONS, "between", "in", *E.PATTERNS):
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
        if self._two_valued:
            return Truth(within.subset(data & vec.valid))
        return Truth(within.subset(data & vec.valid), within.subset(~vec.valid))

    def _and(self, args: tuple[E.Expr, ...], within: Selection) -> Truth:
        first, *rest = sorted(args, key=self._cost_class)  # stable: the written order among equals
        result = self.truth(first, within)
        for arg in rest:
            if result.unknown is None or self._two_valued:  # the next conjunct only sees rows still true
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

    def _cost_class(self, e: E.Expr) -> int:
        """Which conjuncts an AND evaluates first, each on the rows the ones before left: a column
        against literals per run or distinct value (0), then a column's membership in a long list
        (a lookup per row, mostly selective: semi-join keys) (1), then any other column against
        literals (2), then the rest (3). None of the first three can fail, so the rest only ever
        sees fewer rows."""
        if not isinstance(e, Call) or e.op not in (*E.COMPARISONS, "between", "in") or not isinstance(e.args[0], Col):
            return 3
        if not all(isinstance(a, Lit | E.Values) for a in e.args[1:]):
            return 3
        if isinstance(self.block.columns[e.args[0].name].encoding, RunLength | Dictionary):
            return 0
        return 1 if isinstance(e.args[-1], E.Values) else 2

    def _or(self, args: tuple[E.Expr, ...], within: Selection) -> Truth:
        either = self._bool_vec(Call("or", args), within) if self._two_valued else None
        if either is not None:  # one flag per row, no set operations between the branches
            return Truth(within.subset(either.data if either.valid is None else either.data & either.valid))
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
            if not isinstance(column, Col):  # an expression: its values computed, then looked up
                return None
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
        nulls_listed = e.op == "in" and any(lit.value is None for lit in literals)
        if nulls_listed and not self._two_valued:  # x IN (..., NULL): unknown unless matched
            truth = Truth(truth.true, within - truth.true)
        return truth

    def _members(self, t: Type, values: E.Values) -> ValuePredicate:
        """Membership in a (long) list of values, converted to the column's domain once."""
        if t.kind is Kind.STR:
            return string_predicate("in", [str(v) for v in values.items])
        if t.kind in (Kind.INT, Kind.DATE, Kind.BOOL) and values.type.kind is t.kind:
            return list_membership(self.backend, values)
        predicate = self._value_predicate(t, "in", [Lit(v, values.type) for v in values.items])
        if predicate is None:
            raise E.ExprError(f"IN list of {values.type.kind.value} does not compare with {t.kind.value}")
        return predicate

    def _value_predicate(self, t: Type, op: str, literals: list[Lit]) -> ValuePredicate | None:
        xp = self.xp
        if t.kind is Kind.STR:
            if not all(lit.type.kind is Kind.STR for lit in literals):
                return None
            return string_predicate(op, [lit.value for lit in literals])
        if t.kind is Kind.FLOAT:
            if not all(lit.type.kind in (Kind.INT, Kind.DEC, Kind.FLOAT) for lit in literals):
                return None
            return float_predicate(xp, op, [float(lit.value) for lit in literals])
        fractions = [exact_fraction(lit, t) for lit in literals]
        if any(f is None for f in fractions):
            return None
        return integer_predicate(self.backend, op, fractions)

    def _apply(self, name: str, t: Type, predicate: ValuePredicate, within: Selection) -> Truth:
        """Evaluate a value predicate on a column: per run, per distinct value, or per selected row.
        A NULL value is never true; it is unknown, where that is asked (`_two_valued`)."""
        xp = self.xp
        encoding = self.block.columns[name].encoding
        valid = self.valid_mask(name)

        def and_valid(flags_of: Callable[[Selection], Array]) -> Callable[[Selection], Array]:
            return flags_of if valid is None else lambda rows: flags_of(rows) & rows.take(valid)

        if isinstance(encoding, RunLength):
            self.stats.runs_evaluated += len(encoding.run_ends)
            flags = self._flags(predicate, encoding.values, t)
            true = _valid_only(
                Selection.from_runs(self.backend, self.n, self.dev(encoding.run_ends), flags) & within, valid
            )
        elif isinstance(encoding, Dictionary):
            self.stats.dictionary_evaluated += len(encoding.dictionary)
            lut = self._flags(predicate, encoding.dictionary, t)
            if isinstance(encoding.codes, RunLength):
                self.stats.runs_evaluated += len(encoding.codes.run_ends)
                flags = lut[self.dev(encoding.codes.values).astype(xp.int64)]
                runs = Selection.from_runs(self.backend, self.n, self.dev(encoding.codes.run_ends), flags)
                true = _valid_only(runs & within, valid)
            else:
                true = self._row_level(and_valid(lambda rows: lut[self.decode_rows(encoding.codes, rows)]), within)
        elif t.kind is Kind.STR:
            vec = self.column_vec(name, within)
            flags = self._flags(predicate, vec.dictionary, t)[vec.data]
            true = within.subset(flags if vec.valid is None else flags & vec.valid)
        else:
            true = self._row_level(
                and_valid(lambda rows: predicate(self.numeric(self.decode_rows(encoding, rows), t.kind))), within
            )
        if valid is None or self._two_valued:
            return Truth(true)
        return Truth(true, within.subset(~within.take(valid)))

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
        return predicate(self.numeric(self.dev(values), t.kind))

    def _generic_comparison(self, e: Call, within: Selection) -> Truth:
        """Row-by-row comparison of arbitrary expressions."""
        if e.op == "between":
            low, high = Call(">=", (e.args[0], e.args[1])), Call("<=", (e.args[0], e.args[2]))
            return self._and((low, high), within)
        if e.op == "in" and isinstance(e.args[1], E.Values):  # a long list: its items as literals
            items = e.args[1]
            return self._generic_comparison(Call("in", (e.args[0], *(Lit(v, items.type) for v in items.items))), within)
        if e.op == "in" and all(isinstance(v, Lit) and isinstance(v.value, str) for v in e.args[1:]):
            left = self.vec(e.args[0], within)  # e.g. substring(c_phone, 1, 2) IN (...): computed once
            if not left.is_scalar and left.type.kind is Kind.STR:
                return self._truth_of(string_flags(self.backend, left, "in", [v.value for v in e.args[1:]]), within)
        if e.op == "in":
            equalities = tuple(Call("=", (e.args[0], v)) for v in e.args[1:])
            return self._or(equalities, within) if len(equalities) > 1 else self.truth(equalities[0], within)
        left = self.vec(e.args[0], within)
        if e.op in E.PATTERNS:
            pattern = e.args[1].value
            if left.is_scalar:
                matches = string_predicate(e.op, [pattern])
                matched = None if left.scalar is None else bool(matches(pa.array([left.scalar]))[0])
                result = Vec(Type(Kind.BOOL), scalar=matched)
            else:
                result = string_flags(self.backend, left, e.op, [pattern])
            return self._truth_of(result, within)
        right = self.vec(e.args[1], within)
        return self._truth_of(compare(self.backend, e.op, left, right), within)

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
        if op in E.PREDICATES:  # a boolean value: NULL where unknown
            direct = self._bool_vec(e, sel)
            if direct is not None:
                return direct
            truth = self._three_valued(e, sel)
            data = sel.take(truth.true.as_mask())
            valid = None if truth.unknown is None else ~sel.take(truth.unknown.as_mask())
            return Vec(Type(Kind.BOOL), data, valid)
        if op in E.ARITHMETIC:
            return arithmetic(self.backend, op, self.vec(e.args[0], sel), self.vec(e.args[1], sel))
        if op == "neg":
            v = self.vec(e.args[0], sel)
            if v.is_scalar:
                return v if v.scalar is None else replace(v, scalar=-v.scalar)
            return replace(v, data=-v.data)
        if op == "case":
            return self._case(e, sel)
        if op.startswith("extract_"):
            return extract(self.backend, op, self.vec(e.args[0], sel))
        if op in E.TRUNCATIONS:
            return date_trunc(self.backend, op, self.vec(e.args[0], sel))
        if op == "substring":
            length = e.args[2].value if len(e.args) == 3 else None
            return substring(self.vec(e.args[0], sel), e.args[1].value, length)
        raise E.ExprError(f"unsupported operation {op!r}")

    def _bool_vec(self, e: E.Expr, sel: Selection) -> Vec | None:
        """A comparison of values, or an AND/OR/NOT of them, as one boolean per row of `sel` in
        SQL's three-valued logic: cheaper than selections where every row needs its value (a CASE
        condition). None for any other predicate (nothing computed), or where a part is one value
        for all rows."""
        if not _row_wise(e):
            return None
        if e.op in E.COMPARISONS:
            result = compare(self.backend, e.op, self.vec(e.args[0], sel), self.vec(e.args[1], sel))
            return None if result.is_scalar else result
        if e.op == "between":
            value, low, high = e.args
            return self._bool_vec(Call("and", (Call(">=", (value, low)), Call("<=", (value, high)))), sel)
        parts = [self._bool_vec(a, sel) for a in e.args]
        if any(p is None for p in parts):
            return None
        if e.op == "not":
            return replace(parts[0], data=~parts[0].data)
        return functools.reduce(functools.partial(_kleene, e.op), parts)

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
        result = materialize(self.backend, coerce(self.backend, otherwise, result_type), rows)
        for condition, value in zip(reversed(conditions), reversed(values), strict=True):
            cond = self.vec(condition, sel)
            chosen = cond.data & cond.valid if (not cond.is_scalar and cond.valid is not None) else cond.data
            if cond.is_scalar:
                chosen = xp.full(rows, bool(cond.scalar), dtype=bool)
            branch = materialize(self.backend, coerce(self.backend, value, result_type), rows)
            result = where(self.backend, chosen, branch, result)
        return result


def _row_wise(e: E.Expr) -> bool:
    """Whether `_bool_vec` takes `e`: comparisons of anything but two literals, and AND/OR/NOT of
    them."""
    if not isinstance(e, Call):
        return False
    if e.op in (*E.COMPARISONS, "between"):
        return not all(isinstance(a, Lit) for a in e.args)
    return e.op in ("and", "or", "not") and all(_row_wise(a) for a in e.args)


def _valid_only(sel: Selection, valid: Array | None) -> Selection:
    """The rows of `sel` whose value is not NULL."""
    return sel if valid is None or sel.is_empty else sel.subset(sel.take(valid))


def _kleene(op: str, a: Vec, b: Vec) -> Vec:
    """`a AND b` or `a OR b` of two boolean vectors, NULL where SQL leaves it unknown."""
    a_true = a.data if a.valid is None else a.data & a.valid
    b_true = b.data if b.valid is None else b.data & b.valid
    if a.valid is None and b.valid is None:
        return Vec(Type(Kind.BOOL), (a_true & b_true) if op == "and" else (a_true | b_true))
    a_false = ~a.data if a.valid is None else ~a.data & a.valid
    b_false = ~b.data if b.valid is None else ~b.data & b.valid
    if op == "and":
        true = a_true & b_true
        return Vec(Type(Kind.BOOL), true, true | a_false | b_false)
    true = a_true | b_true
    return Vec(Type(Kind.BOOL), true, true | (a_false & b_false))
