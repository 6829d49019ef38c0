"""A test table with every kind of column and encoding, random predicates over it, and an
independent oracle that evaluates them with pyarrow on the decoded table."""

from __future__ import annotations

import datetime as dt
import decimal
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from hypothesis import strategies as st

from gpu_kernels import expr as E
from storage import LoadOptions, Placement, Store, TableCache, TableSchema, load_table, scan_table

ROWS = 3000
CITIES = ["Berlin", "Lima", "Москва", "Zürich", "東京"]
WORDS = ["alpha", "beta", "gamma", "delta", "ünïcode", "furious", "quickly", "sleep"]


def _with_nulls(rng: np.random.Generator, values: list, rate: float) -> list:
    return [None if rng.random() < rate else v for v in values]


def make_table(seed: int = 7) -> pa.Table:
    rng = np.random.default_rng(seed)
    days = np.sort(rng.integers(8000, 8120, ROWS))
    words = rng.choice(WORDS, (ROWS, 4))
    return pa.table(
        {
            "rid": pa.array(np.arange(ROWS), pa.int64()),
            "k": pa.array(rng.integers(0, 20, ROWS), pa.int64()),
            "d": pa.array(days.astype(np.int32), pa.int32()).cast(pa.date32()),
            "n": pa.array(_with_nulls(rng, rng.integers(-(10**6), 10**6, ROWS).tolist(), 0.1), pa.int32()),
            "amt": pa.array(
                _with_nulls(
                    rng, [decimal.Decimal(int(c)).scaleb(-2) for c in rng.integers(-50_000, 500_000, ROWS)], 0.05
                ),
                pa.decimal128(12, 2),
            ),
            "grp": pa.array(_with_nulls(rng, rng.choice(CITIES, ROWS).tolist(), 0.08), pa.string()),
            "txt": pa.array([" ".join(w) + f" {i}" for i, w in enumerate(words)], pa.string()),
            "flag": pa.array(_with_nulls(rng, (rng.random(ROWS) < 0.4).tolist(), 0.1), pa.bool_()),
            "f": pa.array(_with_nulls(rng, np.round(rng.normal(0, 100, ROWS), 3).tolist(), 0.1), pa.float64()),
            "code": pa.array(rng.choice(["A", "B", "C"], ROWS).tolist(), pa.string_view()),
        }
    )


def load(root: Path, table: pa.Table) -> TableCache:
    schema = TableSchema.from_arrow("t", table.schema, ("d", "k", "code"), Placement.parse("hash(rid)", 3))
    store = Store(root)
    load_table([store], schema, table, LoadOptions(block_budget=20_000))
    return TableCache(store)


def run_scan(cache: TableCache, request: dict, backend) -> pa.Table:
    scan = scan_table(cache, {"table": "t", **request}, backend)
    batches = [piece.batch for piece in scan.pieces()]
    return pa.Table.from_batches(batches, schema=scan.plan.schema)


# ---- literals and predicates ---------------------------------------------------------------


def lit(value: Any, type_name: str | None = None) -> dict:
    return {"lit": value} if type_name is None else {"lit": value, "type": type_name}


def col(name: str) -> dict:
    return {"col": name}


def call(op: str, *args: dict) -> dict:
    return {"op": op, "args": list(args)}


LITERALS = {
    "k": st.integers(-2, 22).map(lit),
    "n": st.one_of(st.integers(-(10**6), 10**6).map(lit), st.sampled_from([lit("0.5", "decimal(3,1)"), lit(None)])),
    "amt": st.one_of(
        st.decimals(min_value=-600, max_value=6000, places=2).map(lambda v: lit(str(v), "decimal(12,2)")),
        st.decimals(min_value=-600, max_value=6000, places=3).map(lambda v: lit(str(v), "decimal(12,3)")),
        st.integers(-600, 6000).map(lit),
    ),
    "d": st.dates(dt.date(1991, 11, 1), dt.date(1992, 5, 1)).map(lambda v: lit(v.isoformat(), "date")),
    "grp": st.sampled_from([*CITIES, "Aaa", "Zzz", "Лима"]).map(lit),
    "code": st.sampled_from(["A", "B", "C", "D", ""]).map(lit),
    "f": st.floats(-300, 300, allow_nan=False).map(lit),
    "flag": st.booleans().map(lit),
}
LIKE_PATTERNS = ["%a%", "B%", "%o", "Z_rich", "%é%", "%", "М%", "alpha%", "%sleep%", "%1_"]


@st.composite
def leaves(draw: st.DrawFn) -> dict:
    kind = draw(st.sampled_from(["cmp", "cmp", "between", "in", "null", "like", "columns", "arith"]))
    column = draw(st.sampled_from(list(LITERALS)))
    if kind == "cmp":
        op = draw(st.sampled_from(E.COMPARISONS))
        return call(op, col(column), draw(LITERALS[column]))
    if kind == "between" and column not in ("flag",):
        return call("between", col(column), draw(LITERALS[column]), draw(LITERALS[column]))
    if kind == "in":
        values = draw(st.lists(LITERALS[column], min_size=1, max_size=4))
        return call("in", col(column), *values)
    if kind == "null":
        return call(
            draw(st.sampled_from(["is_null", "is_not_null"])), col(draw(st.sampled_from([*list(LITERALS), "txt"])))
        )
    if kind == "like":
        target = draw(st.sampled_from(["grp", "txt", "code"]))
        return call(draw(st.sampled_from(["like", "not_like"])), col(target), lit(draw(st.sampled_from(LIKE_PATTERNS))))
    if kind == "columns":
        a, b = draw(st.sampled_from([("n", "k"), ("amt", "n"), ("k", "amt"), ("grp", "code"), ("f", "amt")]))
        return call(draw(st.sampled_from(E.COMPARISONS)), col(a), col(b))
    a, b = draw(st.sampled_from([("n", "k"), ("amt", "k"), ("f", "n")]))
    arithmetic = call(draw(st.sampled_from(["+", "-", "*"])), col(a), col(b))
    return call(draw(st.sampled_from(E.COMPARISONS)), arithmetic, draw(LITERALS["n"]))


def _combined(children: st.SearchStrategy) -> st.SearchStrategy:
    return st.one_of(
        st.lists(children, min_size=2, max_size=3).map(lambda xs: call("and", *xs)),
        st.lists(children, min_size=2, max_size=3).map(lambda xs: call("or", *xs)),
        children.map(lambda x: call("not", x)),
    )


def predicates(depth: int = 3) -> st.SearchStrategy:
    """Random predicates over every column, or combinations of comparisons of one column."""
    return st.one_of(st.recursive(leaves(), _combined, max_leaves=6), one_column_predicates())


def _comparison(column: str) -> st.SearchStrategy:
    values = LITERALS[column]
    return st.one_of(
        st.tuples(st.sampled_from(E.COMPARISONS), values).map(lambda a: call(a[0], col(column), a[1])),
        st.tuples(values, values).map(lambda a: call("between", col(column), *a)),
        st.lists(values, min_size=1, max_size=4).map(lambda vs: call("in", col(column), *vs)),
    )


def one_column_predicates() -> st.SearchStrategy:
    """AND/OR/NOT of comparisons of a single column with literals (Q19's quantity ranges)."""
    columns = st.sampled_from(["k", "n", "amt", "d", "flag", "f", "grp"])
    return columns.flatmap(lambda column: st.recursive(_comparison(column), _combined, max_leaves=6))


# ---- the oracle: pyarrow on the decoded table ------------------------------------------------

_ARROW = {"=": pc.equal, "<>": pc.not_equal, "<": pc.less, "<=": pc.less_equal, ">": pc.greater, ">=": pc.greater_equal}


def _scalar(node: dict) -> pa.Scalar:
    value, type_name = node["lit"], node.get("type")
    if value is None:
        return pa.scalar(None, pa.null())
    if type_name == "date":
        return pa.scalar(dt.date.fromisoformat(value), pa.date32())
    if type_name and type_name.startswith("decimal"):
        number = decimal.Decimal(value)
        return pa.scalar(
            number, pa.decimal128(max(len(number.as_tuple().digits), 1) + 2, max(0, -number.as_tuple().exponent))
        )
    if isinstance(value, bool):
        return pa.scalar(value)
    if isinstance(value, int):
        return pa.scalar(value, pa.int64())
    return pa.scalar(value)


def oracle(node: dict, table: pa.Table) -> pa.ChunkedArray | pa.Array | pa.Scalar:
    """SQL semantics with pyarrow's Kleene logic; strings compared as plain strings."""
    if "col" in node:
        column = table.column(node["col"])
        return column.cast(pa.string()) if pa.types.is_string_view(column.type) else column
    if "lit" in node:
        return _scalar(node)
    op, args = node["op"], node["args"]
    if op == "and":
        result = oracle(args[0], table)
        for a in args[1:]:
            result = pc.and_kleene(result, oracle(a, table))
        return result
    if op == "or":
        result = oracle(args[0], table)
        for a in args[1:]:
            result = pc.or_kleene(result, oracle(a, table))
        return result
    if op == "not":
        return pc.invert(oracle(args[0], table))
    if op in ("is_null", "is_not_null"):
        null = pc.is_null(oracle(args[0], table))
        return null if op == "is_null" else pc.invert(null)
    if op in ("like", "not_like"):
        matched = pc.match_like(oracle(args[0], table), args[1]["lit"])
        return matched if op == "like" else pc.invert(matched)
    if op == "between":
        return oracle(call("and", call(">=", args[0], args[1]), call("<=", args[0], args[2])), table)
    if op == "in":
        equalities = [call("=", args[0], v) for v in args[1:]]
        return oracle(call("or", *equalities), table) if len(equalities) > 1 else oracle(equalities[0], table)
    values = [oracle(a, table) for a in args]
    if any(isinstance(v, pa.Scalar) and not v.is_valid for v in values):
        return pa.nulls(table.num_rows, pa.bool_()) if op in _ARROW else pa.nulls(table.num_rows)
    if op in _ARROW:
        return _ARROW[op](*values)
    return {"+": pc.add, "-": pc.subtract, "*": pc.multiply}[op](*values)


def expected_rows(table: pa.Table, predicate: dict) -> list[int]:
    mask = oracle(predicate, table)
    if isinstance(mask, pa.Scalar):
        mask = pa.array([mask.as_py()] * table.num_rows, pa.bool_())
    return sorted(table.column("rid").filter(mask).to_pylist())


def plain_strings(table: pa.Table) -> pa.Table:
    """pyarrow cannot take or filter string_view: compare such columns as string."""
    return table.cast(pa.schema([f.with_type(pa.string()) if f.type == pa.string_view() else f for f in table.schema]))
