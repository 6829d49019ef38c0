"""Kernels on encoded blocks against pyarrow on the decoded table, on every backend."""

from __future__ import annotations

import datetime as dt
import decimal
import threading
import time
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gpu_kernels import (
    AggSpec,
    BackendUnavailable,
    Kind,
    NumpyBackend,
    OverflowInExpression,
    Type,
    Vec,
    cuda_available,
    final_aggregate,
    get_backend,
    pipeline,
    to_domain,
)
from gpu_kernels import expr as E
from gpu_kernels.selection import Selection
from gpu_kernels.vector_functions import arithmetic
from storage import ScanRequestError, Store, TableCache, TableSchema, int64_values, load_table, scan_table
from storage.partitioning import buckets_of
from tests.kernel_cases import (
    call,
    col,
    expected_rows,
    lit,
    load,
    make_table,
    plain_strings,
    predicates,
    run_scan,
)

pytestmark = pytest.mark.check  # the fast lane (`make check`): no Spark, no server

BACKENDS = [
    pytest.param("numpy"),
    pytest.param("cupy", marks=pytest.mark.gpu),
    pytest.param("cupy", marks=pytest.mark.gpu(devices=2), id="cupy-2-devices"),
]
SETTINGS = settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])


@pytest.fixture(scope="module")
def table() -> pa.Table:
    return make_table()


@pytest.fixture(scope="module")
def cache(tmp_path_factory: pytest.TempPathFactory, table: pa.Table):
    return load(tmp_path_factory.mktemp("kernels"), table)


def test_the_test_table_uses_every_encoding(cache) -> None:
    chains = {b.columns[c].chain.split("(")[0].split("[")[0] for b in cache.get("t").table.blocks for c in b.columns}
    assert {"rle", "for+bitpack", "dict", "zstd"} <= chains | {c.split("+")[0] for c in chains}
    assert len(cache.get("t").blocks) >= 6


# ---- selections --------------------------------------------------------------------------------


@st.composite
def selections(draw: st.DrawFn, n: int = 200) -> tuple[Selection, np.ndarray]:
    backend = get_backend("numpy")
    form = draw(st.sampled_from(["mask", "runs", "window"]))
    if form == "runs":
        cuts = sorted(set([*draw(st.lists(st.integers(0, n), max_size=12)), 0, n]))
        flags = np.array(draw(st.lists(st.booleans(), min_size=len(cuts) - 1, max_size=len(cuts) - 1)), bool)
        selection = Selection.from_runs(backend, n, np.array(cuts[1:]), flags)
    else:
        bits = draw(st.lists(st.booleans(), min_size=n, max_size=n))
        mask = np.array(bits, bool)
        if form == "window":
            lo = draw(st.integers(0, n))
            mask[:lo] = False
            selection = Selection.from_mask(backend, mask[lo:], lo, n)
        else:
            selection = Selection.from_mask(backend, mask)
    return selection, selection.as_mask()


@settings(max_examples=300, deadline=None)
@given(a=selections(), b=selections(), flags=st.data())
def test_selection_algebra_matches_bitmaps(a, b, flags) -> None:
    (sa, ma), (sb, mb) = a, b
    assert np.array_equal((sa & sb).as_mask(), ma & mb)
    assert np.array_equal((sa | sb).as_mask(), ma | mb)
    assert np.array_equal((sa - sb).as_mask(), ma & ~mb)
    assert np.array_equal((~sa).as_mask(), ~ma)
    assert sa.count() == int(ma.sum())
    assert np.array_equal(sa.indices(), np.flatnonzero(ma))
    values = np.arange(200) * 3
    assert np.array_equal(sa.take(values), values[ma])
    positions = np.arange(201)
    assert np.array_equal(sa.prefix_counts(positions), np.concatenate(([0], np.cumsum(ma)))[positions])
    chosen = np.array(flags.draw(st.lists(st.booleans(), min_size=sa.count(), max_size=sa.count())), bool)
    expected = np.zeros(200, bool)
    expected[np.flatnonzero(ma)[chosen]] = True
    assert np.array_equal(sa.subset(chosen).as_mask(), expected)


def test_selection_keeps_the_smaller_form() -> None:
    backend = get_backend("numpy")
    few_runs = Selection.from_runs(
        backend, 100_000, np.array([10_000, 20_000, 100_000]), np.array([False, True, False])
    )
    assert few_runs.is_ranges and few_runs.nbytes == 8
    noisy = np.random.default_rng(1).random(100_000) < 0.5
    assert not Selection.from_mask(backend, noisy).is_ranges


# ---- predicates --------------------------------------------------------------------------------


def for_random_predicates(
    cupy_standin, check: Callable[[Any], None], examples: int = 100, drawn: st.SearchStrategy | None = None
) -> None:
    """check(predicate) for `examples` random predicates (of `drawn`, by default `predicates()`); a
    quarter of them, at least 10, against the stand-in of CuPy, which runs every kernel on the CPU
    under its checks (the NumPy backend, and a real device, see them all)."""
    count = max(10, examples // 4) if cupy_standin is not None else examples
    settings(SETTINGS, max_examples=count)(given(predicate=predicates() if drawn is None else drawn)(check))()


@pytest.mark.parametrize("backend_name", BACKENDS)
def test_random_predicates_select_the_same_rows_as_pyarrow(cache, table, backend_name, cupy_standin) -> None:
    backend = get_backend(backend_name)

    def check(predicate: dict) -> None:
        result = run_scan(cache, {"columns": ["rid"], "filter": predicate}, backend)
        assert sorted(result.column("rid").to_pylist()) == expected_rows(table, predicate)

    for_random_predicates(cupy_standin, check)


@pytest.mark.parametrize("backend_name", BACKENDS)
def test_projection_decodes_exactly_the_selected_rows(cache, table, backend_name, cupy_standin) -> None:
    backend = get_backend(backend_name)
    columns = ["rid", "k", "d", "n", "amt", "grp", "txt", "flag", "f", "code"]
    expected_table = plain_strings(table)

    def check(predicate: dict) -> None:
        result = run_scan(cache, {"columns": columns, "filter": predicate}, backend)
        assert result.schema == expected_table.schema, "string_view is sent as string"
        result = result.sort_by("rid")
        expected = expected_table.take(pa.array(expected_rows(table, predicate), pa.int64()))
        for name in columns:
            assert result.column(name).to_pylist() == expected.column(name).to_pylist(), name

    for_random_predicates(cupy_standin, check)


def test_run_and_dictionary_predicates_skip_row_work(cache) -> None:
    backend = get_backend("numpy")
    scan = scan_table(
        cache,
        {"table": "t", "columns": ["rid"], "filter": call("=", col("grp"), lit("Lima"))},
        backend,
    )
    list(scan.pieces())
    assert scan.stats.dictionary_evaluated > 0
    scan = scan_table(
        cache, {"table": "t", "columns": ["rid"], "filter": call("<", col("d"), lit("1991-12-10", "date"))}, backend
    )
    list(scan.pieces())
    assert scan.stats.blocks_skipped > 0, "blocks beyond the date are pruned by their min/max"


@st.composite
def bounded_conjuncts(draw: st.DrawFn, table: pa.Table) -> list[dict]:
    """One to three comparisons of a column with literals near its values (a row's value, moved a
    little): what block statistics can decide, NULLs in most columns, decimals finer than the column."""
    conjuncts = []
    for _ in range(draw(st.integers(1, 3))):
        name = draw(st.sampled_from(["d", "k", "n", "amt", "grp", "code", "rid"]))
        values = [v for v in table.column(name).to_pylist() if v is not None]

        def literal(name=name, values=values) -> dict:
            v = draw(st.sampled_from(values))
            if name == "d":
                return lit(str(v + dt.timedelta(days=draw(st.integers(-2, 2)))), "date")
            if name == "amt":
                return lit(str(v + decimal.Decimal(draw(st.integers(-3, 3))) / 1000), "decimal(12,3)")
            return lit(v + draw(st.integers(-2, 2))) if isinstance(v, int) else lit(v)

        op = draw(st.sampled_from(["=", "<>", "<", "<=", ">", ">=", "between", "in"]))
        arity = {"between": 2, "in": draw(st.integers(1, 4))}.get(op, 1)
        conjuncts.append(call(op, col(name), *(literal() for _ in range(arity))))
    return conjuncts


def test_block_statistics_rule_out_and_settle_only_what_every_row_bears_out(cache, table) -> None:
    """Random comparisons with literals near the columns' values: a block its min/max rule out holds
    no row that satisfies the predicate, and a conjunct they settle for a block (not evaluated
    there) holds on every row of it, NULLs included (rows checked by Arrow)."""
    numpy = get_backend("numpy")
    loaded = cache.get("t")
    rids = [set(block.decode().column("rid").to_pylist()) for _, block in loaded.blocks]
    seen = {"ruled out": 0, "settled": 0}

    def check(conjuncts: list[dict]) -> None:
        predicate = call("and", *conjuncts) if len(conjuncts) > 1 else conjuncts[0]
        scan = scan_table(cache, {"table": "t", "columns": ["rid"], "filter": predicate}, numpy)
        assert len(E.conjuncts(scan.plan.task.predicate)) == len(conjuncts)
        read = {id(block): remaining for _, block, remaining in scan.jobs()}
        holding = [set(expected_rows(table, c)) for c in conjuncts]
        for (_, block), rows in zip(loaded.blocks, rids, strict=True):
            remaining = read.get(id(block))
            if remaining is None:
                assert not set.intersection(rows, *holding), (predicate, "ruled out")
                seen["ruled out"] += 1
                continue
            for position in set(range(len(conjuncts))) - set(remaining):
                assert rows <= holding[position], (conjuncts[position], "settled")
                seen["settled"] += 1

    settings(SETTINGS, max_examples=200)(given(conjuncts=bounded_conjuncts(table))(check))()
    assert seen["ruled out"] > 100 and seen["settled"] > 100, seen


def test_a_block_whose_string_bound_was_too_long_to_keep_is_read_not_pruned(tmp_path) -> None:
    """A block keeps no maximum for a string longer than its statistics hold (nor a minimum): a
    comparison with that column cannot prune by the missing bound, and reads the block."""
    cache = load_simple(tmp_path, pa.table({"s": ["a", "z" * 5000, "m"], "i": [1, 2, 3]}))
    [(entry, _)] = cache.get("t").blocks
    assert entry.columns["s"].minimum == "a" and entry.columns["s"].maximum is None
    for op, expected in ((">", [2, 3]), ("<", [1]), ("=", [3])):
        request = {"table": "t", "columns": ["i"], "filter": call(op, col("s"), lit("b" if op != "=" else "m"))}
        scan = scan_table(cache, request, get_backend("numpy"))
        assert sorted(r["i"] for p in scan.pieces() for r in p.batch.to_pylist()) == expected, op


# ---- aggregates --------------------------------------------------------------------------------

AGGREGATES = [
    {"name": "rows", "func": "count"},
    {"name": "n_count", "func": "count", "arg": col("n")},
    {"name": "amt_sum", "func": "sum", "arg": col("amt")},
    {"name": "n_sum", "func": "sum", "arg": col("n")},
    {"name": "amt_min", "func": "min", "arg": col("amt")},
    {"name": "grp_max", "func": "max", "arg": col("grp")},
    {"name": "d_min", "func": "min", "arg": col("d")},
    {"name": "f_avg", "func": "avg", "arg": col("f")},
    {"name": "amt_avg", "func": "avg", "arg": col("amt")},
    {"name": "grp_distinct", "func": "count_distinct", "arg": col("grp")},
    {"name": "weighted", "func": "sum", "arg": call("*", col("amt"), col("k"))},
]
KEYS = [[], ["code"], ["grp"], ["k", "code"], ["flag", "grp"]]


def _reference(table: pa.Table, keys: list[str], rows: list[int]) -> dict:
    chosen = plain_strings(table).take(pa.array(rows, pa.int64()))
    chosen = chosen.append_column("weighted", pc.multiply(chosen.column("amt"), chosen.column("k")))
    chosen = chosen.append_column("amt_float", chosen.column("amt").cast(pa.float64()))  # AVG is a double
    spec = [
        ([], "count_all"),
        ("n", "count"),
        ("amt", "sum"),
        ("n", "sum"),
        ("amt", "min"),
        ("grp", "max"),
        ("d", "min"),
        ("f", "mean"),
        ("amt_float", "mean"),
        ("grp", "count_distinct", pc.CountOptions(mode="only_valid")),
        ("weighted", "sum"),
    ]
    grouped = chosen.group_by(keys, use_threads=False).aggregate(spec) if keys else None
    if grouped is None:
        grouped = pa.table({f"{c}_{f}" if c else f: [_global(chosen, c, f)] for c, f, *_ in spec})
    return {tuple(r[k] for k in keys): r for r in grouped.to_pylist()}


def _global(table: pa.Table, column, func: str):
    if func == "count_all":
        return table.num_rows
    data = table.column(column)
    if func == "count_distinct":
        return len(pc.unique(data.drop_null()))
    return getattr(pc, func)(data).as_py()


def _close(a, b) -> bool:
    if a is None or b is None:
        return a is None and b is None
    if isinstance(a, float) or isinstance(b, float):
        return abs(float(a) - float(b)) <= 1e-9 * max(1.0, abs(float(b)))
    return a == b


@pytest.mark.parametrize("backend_name", BACKENDS)
@pytest.mark.parametrize("keys", KEYS, ids=lambda k: "+".join(k) or "global")
def test_partial_aggregates_merge_to_pyarrow_group_by(cache, table, backend_name, keys, cupy_standin) -> None:
    backend = get_backend(backend_name)
    for_random_predicates(
        cupy_standin, lambda predicate: _merged_as_pyarrow(cache, table, backend, keys, predicate), 25, NO_FILTER_OR_ANY
    )


NO_FILTER_OR_ANY = st.one_of(st.none(), predicates())


def _merged_as_pyarrow(cache, table: pa.Table, backend, keys: list[str], predicate: dict | None) -> None:
    request = {"group_by": keys, "aggregates": AGGREGATES, "filter": predicate}
    partials = run_scan(cache, request, backend)
    plan = scan_table(cache, {"table": "t", **request}, backend).plan
    final = final_aggregate(partials, keys, list(plan.task.aggregates))
    rows = expected_rows(table, predicate) if predicate else list(range(table.num_rows))
    expected = _reference(table, keys, rows)
    got = {tuple(r[k] for k in keys): r for r in final.to_pylist()}
    if keys:
        assert set(got) == set(expected)
    names = {"rows": "count_all", "n_count": "n_count", "amt_sum": "amt_sum", "n_sum": "n_sum", "amt_min": "amt_min"}
    names |= {"grp_max": "grp_max", "d_min": "d_min", "f_avg": "f_mean", "amt_avg": "amt_float_mean"}
    names |= {"grp_distinct": "grp_count_distinct", "weighted": "weighted_sum"}
    for key, row in got.items():
        for ours, theirs in names.items():
            assert _close(row[ours], expected[key][theirs]), (key, ours, row[ours], expected[key][theirs])


def test_group_keys_stored_as_runs_are_aggregated_per_run(tmp_path: Path) -> None:
    source = pa.table({"key": np.repeat(np.arange(5), 2000), "value": np.arange(10_000) % 7})
    cache = load_simple(tmp_path, source)
    assert {b.columns["key"].chain for b in cache.get("t").table.blocks} == {"rle"}
    request = {"table": "t", "group_by": ["key"], "aggregates": [{"name": "s", "func": "sum", "arg": col("value")}]}
    scan = scan_table(cache, request, get_backend("numpy"))
    partials = pa.Table.from_batches([p.batch for p in scan.pieces()])
    assert scan.stats.runs_evaluated > 0
    assert scan.stats.values_decoded == 10_000, "only the summed column is decoded, never the key"
    assert sorted(final_aggregate(partials, ["key"], list(scan.plan.task.aggregates)).to_pylist(), key=str) == [
        {"key": k, "s": int((np.arange(10_000) % 7)[k * 2000 : (k + 1) * 2000].sum())} for k in range(5)
    ]


def test_global_aggregate_of_nothing_is_one_row(cache) -> None:
    backend = get_backend("numpy")
    request = {"filter": call("<", col("k"), lit(-5)), "aggregates": AGGREGATES}
    partials = run_scan(cache, request, backend)
    assert partials.num_rows == 0
    plan = scan_table(cache, {"table": "t", **request}, backend).plan
    final = final_aggregate(partials, [], list(plan.task.aggregates)).to_pylist()
    assert final == [dict.fromkeys([a["name"] for a in AGGREGATES]) | {"rows": 0, "n_count": 0, "grp_distinct": 0}]


# ---- expressions -------------------------------------------------------------------------------


def test_arithmetic_the_types_cannot_prove_is_decided_by_the_values() -> None:
    """A vector whose bound says nothing (an aggregate's: any BIGINT) times a literal: its values
    fit, so it is answered; values that may really pass 64 bits fail, NULL rows not counted."""
    backend = NumpyBackend()
    big = Type(Kind.INT)
    counts = Vec(big, np.array([3, -7, 1 << 62]), np.array([True, True, False]))  # bound: INT64_MAX
    product = arithmetic(backend, "*", counts, Vec(big, scalar=88, bound=88))
    assert product.data[:2].tolist() == [264, -616] and product.bound == 7 * 88
    total = arithmetic(backend, "+", Vec(Type(Kind.DEC, 2), scalar=-1100, bound=1100), counts)
    assert total.type == Type(Kind.DEC, 2) and total.data[:2].tolist() == [-800, -1800]
    with pytest.raises(OverflowInExpression):
        arithmetic(backend, "*", replace(counts, valid=None), Vec(big, scalar=88, bound=88))


def test_scalar_expressions(tmp_path: Path) -> None:
    source = pa.table(
        {
            "rid": pa.array([0, 1, 2, 3], pa.int64()),
            "d": pa.array([dt.date(2024, 1, 31), dt.date(2023, 12, 31), dt.date(1969, 12, 31), None]),
            "price": pa.array(
                [decimal.Decimal("10.50"), decimal.Decimal("3.00"), None, decimal.Decimal("0.01")], pa.decimal128(15, 2)
            ),
            "disc": pa.array(
                [decimal.Decimal("0.10"), decimal.Decimal("0.00"), decimal.Decimal("0.05"), decimal.Decimal("1.00")],
                pa.decimal128(15, 2),
            ),
            "q": pa.array([3, 0, -4, 7], pa.int64()),
            "s": pa.array(["Zürich", "東京都", None, "ab"], pa.string()),
        }
    )
    cache = load_simple(tmp_path, source)
    request = {
        "columns": ["rid"],
        "select": [
            {"name": "net", "expr": call("*", col("price"), call("-", lit(1), col("disc")))},
            {"name": "ratio", "expr": call("/", col("price"), col("q"))},
            {"name": "sum", "expr": call("+", col("price"), lit("0.005", "decimal(4,3)"))},
            {"name": "neg", "expr": call("neg", col("q"))},
            {"name": "year", "expr": call("extract_year", col("d"))},
            {"name": "month", "expr": call("extract_month", col("d"))},
            {"name": "day", "expr": call("extract_day", col("d"))},
            {"name": "next_month", "expr": call("+", col("d"), lit(1, "interval_month"))},
            {"name": "week_before", "expr": call("-", col("d"), lit(7, "interval_day"))},
            {"name": "next_year", "expr": call("+", col("d"), lit(1, "interval_year"))},
            {
                "name": "size",
                "expr": call(
                    "case",
                    call(">", col("q"), lit(2)),
                    lit("big"),
                    call("=", col("q"), lit(0)),
                    lit("zero"),
                    lit("small"),
                ),
            },
            {"name": "maybe", "expr": call("case", call(">", col("q"), lit(2)), col("price"))},
            {"name": "head", "expr": call("substring", col("s"), lit(2), lit(2))},
            {"name": "tail", "expr": call("substring", col("s"), lit(3))},
            {"name": "is_big", "expr": call(">", col("q"), lit(2))},
            {"name": "folded", "expr": call("-", lit("1998-12-01", "date"), lit(90, "interval_day"))},
        ],
    }
    result = run_scan(cache, request, get_backend("numpy")).sort_by("rid").to_pydict()
    D = decimal.Decimal
    assert result["net"] == [D("9.4500"), D("3.0000"), None, D("0.0000")]
    assert result["ratio"][:2] == [3.5, None] and result["ratio"][2] is None
    assert result["sum"] == [D("10.505"), D("3.005"), None, D("0.015")]
    assert result["neg"] == [-3, 0, 4, -7]
    assert result["year"] == [2024, 2023, 1969, None]
    assert result["month"] == [1, 12, 12, None]
    assert result["day"] == [31, 31, 31, None]
    assert result["next_month"] == [dt.date(2024, 2, 29), dt.date(2024, 1, 31), dt.date(1970, 1, 31), None]
    assert result["week_before"] == [dt.date(2024, 1, 24), dt.date(2023, 12, 24), dt.date(1969, 12, 24), None]
    assert result["next_year"] == [dt.date(2025, 1, 31), dt.date(2024, 12, 31), dt.date(1970, 12, 31), None]
    assert result["size"] == ["big", "zero", "small", "big"]
    assert result["maybe"] == [D("10.50"), None, None, D("0.01")]
    assert result["head"] == ["ür", "京都", None, "b"]
    assert result["tail"] == ["rich", "都", None, ""]
    assert result["is_big"] == [True, False, False, True]
    assert result["folded"] == [dt.date(1998, 9, 2)] * 4


def load_simple(root: Path, source: pa.Table):
    store = Store(root)
    load_table([store], TableSchema.from_arrow("t", source.schema), source)
    return TableCache(store)


# ---- partitioning for the join level -----------------------------------------------------------


@pytest.mark.parametrize("backend_name", BACKENDS)
def test_hash_partitioned_output_matches_the_placement_hash(cache, table, backend_name) -> None:
    """Every row lands in its keys' bucket with all of its values (each kind, NULLs, a computed
    output, a constant), and no row is lost or made."""
    backend = get_backend(backend_name)
    columns = ["rid", "grp", "d", "n", "amt", "flag", "f", "txt", "code"]
    computed = [{"name": "twice", "expr": call("*", col("k"), lit(2))}, {"name": "one", "expr": lit(1)}]
    request = {
        "table": "t",
        "columns": columns,
        "select": computed,
        "filter": call(">", col("rid"), lit(100)),
        "partition": {"keys": ["grp", "d"], "buckets": 5},
    }
    pieces = list(scan_table(cache, request, backend).pieces())
    for piece in pieces:
        keys = [to_domain(piece.batch.column("grp")), to_domain(piece.batch.column("d"))]
        assert set(buckets_of(keys, 5).tolist()) == {piece.partition}
    got = sorted((row for p in pieces for row in p.batch.to_pylist()), key=lambda row: row["rid"])
    chosen = table.to_pylist()[101:]  # rid is the row number
    assert len(got) == len(chosen) > 0
    assert got == [{**{c: row[c] for c in columns}, "twice": 2 * row["k"], "one": 1} for row in chosen]


# ---- requests that must be refused -------------------------------------------------------------


@pytest.mark.parametrize(
    ("request_", "message"),
    [
        ({"columns": ["nope"]}, "unknown column 'nope'"),
        ({"columns": ["k"], "filter": call("like", col("k"), lit("1%"))}, "like needs a string"),
        ({"columns": ["k"], "filter": call("+", col("k"), lit(1))}, "filter must be a boolean"),
        ({"columns": ["k"], "filter": {"op": "regexp", "args": []}}, "unsupported operation 'regexp'"),
        ({"columns": ["k"], "group_by": ["k"]}, "either projects"),
        ({"aggregates": [{"name": "x", "func": "median", "arg": col("k")}]}, "unsupported aggregate function"),
        ({"aggregates": [{"name": "x", "func": "sum", "arg": col("grp")}]}, "sum needs a numeric"),
        ({"columns": ["k", "k"]}, "used twice"),
        ({"columns": ["k"], "partition": {"keys": ["d"], "buckets": 4}}, "not output columns"),
        ({"columns": ["k"], "limit": -1}, "limit"),
        ({"columns": ["k"], "colums": ["k"]}, "unknown field"),
        ({}, "needs columns"),
        ({"columns": ["k"], "filter": call("=", col("k"), lit("x", "date"))}, "not a valid date"),
    ],
)
def test_bad_requests_are_refused_with_the_reason(cache, request_, message) -> None:
    with pytest.raises(ScanRequestError, match=message):
        scan_table(cache, {"table": "t", **request_}, get_backend("numpy"))


def test_asking_for_cupy_without_a_device_fails_loudly() -> None:
    if cuda_available():
        pytest.skip("a CUDA device is present")
    with pytest.raises(BackendUnavailable, match="no CUDA device"):
        get_backend("cupy")
    assert get_backend("auto").name == "numpy"


def test_aggregate_spec_fields() -> None:
    spec = AggSpec("a", "avg", col, pa.decimal128(38, 2))
    assert [f.name for f in spec.fields()] == ["a$sum", "a$count"]


# ---- long IN lists -----------------------------------------------------------------------------


@pytest.mark.parametrize("backend_name", BACKENDS)
def test_a_values_list_selects_like_the_equivalent_literals(cache, table, backend_name) -> None:
    backend = get_backend(backend_name)
    keys = list(range(0, 3000, 7))
    as_values = run_scan(cache, {"columns": ["rid"], "filter": call("in", col("rid"), {"values": keys})}, backend)
    assert sorted(as_values.column("rid").to_pylist()) == keys
    packed = int64_values(np.array(keys[::-1])).to_json()  # the compact form: base64 of int64, any order
    as_int64 = run_scan(cache, {"columns": ["rid"], "filter": call("in", col("rid"), packed)}, backend)
    assert sorted(as_int64.column("rid").to_pylist()) == keys
    days = ["1991-12-01", "1992-01-15", "1992-03-01"]
    expected = expected_rows(table, call("in", col("d"), *(lit(d, "date") for d in days)))
    by_date = run_scan(
        cache, {"columns": ["rid"], "filter": call("in", col("d"), {"values": days, "type": "date"})}, backend
    )
    assert sorted(by_date.column("rid").to_pylist()) == expected
    names = ["Lima", "東京"]
    by_name = run_scan(cache, {"columns": ["rid"], "filter": call("in", col("grp"), {"values": names})}, backend)
    assert sorted(by_name.column("rid").to_pylist()) == expected_rows(table, call("in", col("grp"), *map(lit, names)))
    # an expression on the left (TPC-DS Q8's substring(ca_zip, 1, 5) IN 400 zips): computed, then looked up
    prefixes = ["Li", "東"]
    prefix = call("substring", col("grp"), lit(1), lit(2))
    by_prefix = run_scan(cache, {"columns": ["rid"], "filter": call("in", prefix, {"values": prefixes})}, backend)
    rids, groups = table.column("rid").to_pylist(), table.column("grp").to_pylist()
    expected = sorted(r for r, g in zip(rids, groups, strict=True) if g is not None and g[:2] in prefixes)
    assert expected and sorted(by_prefix.column("rid").to_pylist()) == expected
    doubled = call("*", col("rid"), lit(2))
    by_product = run_scan(cache, {"columns": ["rid"], "filter": call("in", doubled, {"values": keys})}, backend)
    assert sorted(by_product.column("rid").to_pylist()) == [k // 2 for k in keys if k % 2 == 0]


def test_values_lists_are_only_for_in(cache) -> None:
    with pytest.raises(ScanRequestError, match="only allowed as the right side of IN"):
        scan_table(
            cache,
            {"table": "t", "columns": ["rid"], "filter": call("=", col("rid"), {"values": [1]})},
            get_backend("numpy"),
        )
    for bad, message in (({"int64": "AAAA"}, "64-bit integers"), ({"int64": ""}, "at least one value")):
        with pytest.raises(ScanRequestError, match=message):
            scan_table(
                cache,
                {"table": "t", "columns": ["rid"], "filter": call("in", col("rid"), bad)},
                get_backend("numpy"),
            )
    with pytest.raises(ScanRequestError, match="non-empty list without NULLs"):
        scan_table(
            cache,
            {"table": "t", "columns": ["rid"], "filter": call("in", col("rid"), {"values": []})},
            get_backend("numpy"),
        )


@pytest.mark.parametrize("spread_after", [0.0, 3600.0])
def test_cpu_block_pipeline_keeps_block_order_on_one_thread_or_several(monkeypatch, spread_after: float) -> None:
    monkeypatch.setattr(pipeline, "SPREAD_AFTER_S", spread_after)
    threads = set()

    def work(job: int, parts) -> int:
        time.sleep(0.001 * (4 - job % 4))  # later blocks would finish first
        threads.add(threading.get_ident())
        return job * 2

    blocks = pipeline.BlockPipeline(NumpyBackend(), threads=3)
    assert list(blocks.map(list(range(24)), work, lambda job: [], threading.Event())) == [2 * j for j in range(24)]
    assert (len(threads) > 1) is (spread_after == 0), "a scan spreads over threads only once it has run long"
    cancel = threading.Event()
    results = blocks.map(list(range(24)), work, lambda job: [], cancel)
    assert [next(results) for _ in range(3)] == [0, 2, 4]
    cancel.set()
    assert list(results) == [], "a cancelled scan stops at the next block"


@pytest.mark.parametrize("backend_name", BACKENDS)
def test_date_trunc_gives_the_timestamp_at_the_parts_start(tmp_path: Path, backend_name: str) -> None:
    days = [dt.date(2024, 2, 29), dt.date(2023, 1, 1), dt.date(1969, 12, 31), dt.date(1970, 1, 5), None]
    source = pa.table(
        {
            "rid": pa.array(range(5), pa.int64()),
            "d": pa.array(days),
            "ts": pa.array([None, dt.datetime(2021, 7, 4, 23, 59, 59), dt.datetime(1969, 12, 31, 12), None, None]),
        }
    )
    cache = load_simple(tmp_path, source)
    parts = ("year", "quarter", "month", "week", "day")
    select = [{"name": p, "expr": call(f"date_trunc_{p}", col("d"))} for p in parts]
    select.append({"name": "ts_month", "expr": call("date_trunc_month", col("ts"))})
    result = run_scan(cache, {"columns": ["rid"], "select": select}, get_backend(backend_name)).sort_by("rid")
    at = dt.datetime
    expected = {
        "year": [at(2024, 1, 1), at(2023, 1, 1), at(1969, 1, 1), at(1970, 1, 1), None],
        "quarter": [at(2024, 1, 1), at(2023, 1, 1), at(1969, 10, 1), at(1970, 1, 1), None],
        "month": [at(2024, 2, 1), at(2023, 1, 1), at(1969, 12, 1), at(1970, 1, 1), None],
        # ISO weeks start on Monday: 2024-02-26, 2022-12-26, 1969-12-29, 1970-01-05 (itself a Monday)
        "week": [at(2024, 2, 26), at(2022, 12, 26), at(1969, 12, 29), at(1970, 1, 5), None],
        "day": [at(2024, 2, 29), at(2023, 1, 1), at(1969, 12, 31), at(1970, 1, 5), None],
        "ts_month": [None, at(2021, 7, 1), at(1969, 12, 1), None, None],
    }
    assert {name: result.column(name).to_pylist() for name in expected} == expected
    assert result.schema.field("year").type == pa.timestamp("us")
