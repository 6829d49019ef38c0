"""The fused scan kernel (`gpu_kernels.fused_scan`): generated from random predicates, group keys and
aggregates over blocks whose columns take every encoding the kernel reads, run as C++ on the CPU
through the stand-in of CuPy, its partial aggregates equal to the NumPy backend's general kernels;
the same kernels compiled with NVRTC for the target GPUs within a register budget; and what it
refuses (NULLs, floats, keys that are neither dictionaries nor runs) left to the general kernels."""

from __future__ import annotations

import datetime as dt
import decimal
import functools
import math
import operator
import re

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pytest

from benchmarks.kernel_checks import (
    ARGUMENTS,
    check_operations,
    compare_fused,
    dictionary_encoded,
    final_rows,
    random_block,
    random_literal,
)
from gpu_kernels import (
    AggSpec,
    BitPacked,
    BlockTask,
    Call,
    Col,
    EncodedBlock,
    EncodedColumn,
    Kind,
    Lit,
    NamedExpr,
    Plain,
    RunLength,
    ScanStats,
    Type,
    fused_scan,
    get_backend,
    run_block,
)
from gpu_kernels.column_image import ColumnImage
from gpu_kernels.cuda_kernels import ARCHES
from tests.test_cuda_kernels import nvrtc_compile, run_sanitized

REGISTER_BUDGET = 64  # per thread, for the generated kernels of the benchmark's scans


@pytest.mark.gpu
def test_fused_kernels_compute_what_the_general_kernels_do(cupy_standin) -> None:
    assert compare_fused(120, cupy_standin) == 120


@pytest.mark.gpu
def test_every_backend_operation_against_numpy_on_fresh_data() -> None:
    assert check_operations() == 7 * 13


@pytest.mark.slow
def test_fused_kernels_run_clean_under_address_and_undefined_behaviour_sanitizers() -> None:
    out = run_sanitized(
        "from benchmarks.cupy_standin import installed\n"
        "from benchmarks.kernel_checks import compare_fused, compare_projections\n"
        "with installed(sanitize=True) as standin:\n"
        "    print(compare_fused(40, standin), compare_projections(30, standin))"
    )
    assert out.split()[-2:] == ["40", "30"]


@pytest.mark.gpu
@pytest.mark.parametrize(
    ("grouped", "shared"),
    [(False, None), (True, None), (True, 100)],
    ids=["one group", "two groups, warp by warp", "two groups, an atomic a row"],
)
def test_exact_sums_past_64_bits(grouped: bool, shared: int | None, monkeypatch) -> None:
    """Sums of values near 2**62 pass 64 bits within a warp already: exact in registers (one group),
    reduced as two halves over a warp into its own accumulators (a few groups), and added row by
    row where those do not fit shared memory once per warp (`shared` bytes)."""
    if shared is not None:
        monkeypatch.setattr(fused_scan, "SHARED_BYTES", shared)
    n = 4000
    values = np.full(n, (1 << 62) - 1, dtype=np.int64)  # sums to about 2**74
    columns = {"a": EncodedColumn("a", pa.decimal128(38, 0), BitPacked.encode(values), None, 0)}
    keys = []
    if grouped:
        flags = pa.array(["x" if i % 3 else "y" for i in range(n)])
        columns["k"] = EncodedColumn("k", pa.string(), dictionary_encoded(np.random.default_rng(1), flags), None, 0)
        keys = [NamedExpr("k", Col("k"), pa.string())]
    spec = AggSpec("total", "sum", Col("a"), pa.decimal128(38, 0))
    backend = get_backend("cupy")
    scan = fused_scan.plan_block(EncodedBlock(n, columns), None, keys, [spec])
    assert scan.groups == (2 if grouped else 1) and "cxg_warp_sum" in scan.launches[0].source
    by_warp = grouped and shared is None  # each warp its own accumulators, ordered by __syncwarp
    assert ("(threadIdx.x / 32) *" in scan.launches[0].source) == by_warp == ("__syncwarp()" in scan.launches[0].source)
    batch = scan.assemble(backend.fused_aggregate(scan, lambda c, k: backend.asarray(scan.images[c].buffers[k])))
    counts = [n - len(range(0, n, 3)), len(range(0, n, 3))] if grouped else [n]
    rows = sorted(zip(batch.column(0).to_pylist(), batch.column("total").to_pylist(), strict=True))
    assert [total for _, total in rows] == [decimal.Decimal(c * ((1 << 62) - 1)) for c in counts]


@pytest.mark.gpu
@pytest.mark.parametrize(
    ("top", "reduced"),
    [
        ((1 << 26) - 1, "cxg_warp_sum26("),
        (1 << 26, "cxg_warp_sum51("),
        ((1 << 51) - 1, "cxg_warp_sum51("),
        (1 << 51, "cxg_warp_sum((unsigned long long)"),
    ],
)
def test_a_warps_sums_in_32_bit_parts_are_exact_up_to_their_bounds(top: int, reduced: str) -> None:
    """Values of either sign up to `top` in magnitude, whole warps of one sign and group, summed warp
    by warp in one or two 32-bit reductions (values under 2^26, 2^51), else in 64 bits: exact."""
    n = 4000
    values = np.where(np.arange(n) % 640 < 320, top, -top).astype(np.int64)
    values[::7] = np.random.default_rng(5).integers(-top, top, len(values[::7]))
    flags = pa.array(["x" if (i // 100) % 2 else "y" for i in range(n)])
    columns = {
        "a": EncodedColumn("a", pa.decimal128(38, 0), RunLength.encode(values), None, 0),
        "k": EncodedColumn("k", pa.string(), dictionary_encoded(np.random.default_rng(1), flags), None, 0),
    }
    spec = AggSpec("total", "sum", Col("a"), pa.decimal128(38, 0))
    backend = get_backend("cupy")
    scan = fused_scan.plan_block(EncodedBlock(n, columns), None, [NamedExpr("k", Col("k"), pa.string())], [spec])
    assert reduced in scan.launches[0].source
    batch = scan.assemble(backend.fused_aggregate(scan, lambda c, k: backend.asarray(scan.images[c].buffers[k])))
    got = dict(zip(batch.column(0).to_pylist(), batch.column("total").to_pylist(), strict=True))
    flag = np.array(flags.to_pylist())
    assert got == {f: decimal.Decimal(int(values[flag == f].astype(object).sum())) for f in ("x", "y")}


@pytest.mark.gpu
@pytest.mark.parametrize(
    ("top", "narrow"),
    [((1 << 31) - 1, True), (1 << 31, False), ((1 << 32) + 5, False), ((1 << 62) + 3, False)],
)
def test_many_groups_add_by_32_bit_atomics_exactly_and_keep_small_extremes_in_32_bits(top: int, narrow: bool) -> None:
    """More groups than go warp by warp: a row's sum goes into its group's two 64-bit halves as
    32-bit words, a word's wrap carried into the next (values of both signs, whose low words wrap
    many times a CUDA block); a minimum or maximum of values under 2^31 in magnitude by a native
    32-bit atomic on its low word, sign-extended before the fold. All exact against Python's."""
    n = 6000
    rng = np.random.default_rng(top % 1000)
    values = rng.choice(np.array([top, -top, top - 1, -1, 1, 0, (top >> 1) + 1, -(top >> 3)], dtype=np.int64), n)
    flags = pa.array([f"g{i % 12}" for i in range(n)])
    columns = {
        "a": EncodedColumn("a", pa.decimal128(38, 0), RunLength.encode(values), None, 0),
        "k": EncodedColumn("k", pa.string(), dictionary_encoded(np.random.default_rng(1), flags), None, 0),
    }
    specs = [AggSpec(f, f, Col("a"), pa.decimal128(38, 0)) for f in ("sum", "min", "max")]
    backend = get_backend("cupy")
    scan = fused_scan.plan_block(EncodedBlock(n, columns), None, [NamedExpr("k", Col("k"), pa.string())], specs)
    source = scan.launches[0].source
    assert scan.groups == 12 and "__syncwarp()" not in source and "cxg_add(" in source  # an atomic a row
    assert ("atomicMin((int*)" in source) == ("atomicMax((int*)" in source) == narrow
    batch = scan.assemble(backend.fused_aggregate(scan, lambda c, k: backend.asarray(scan.images[c].buffers[k])))
    flag = np.array(flags.to_pylist())
    got = {r["k"]: (r["sum"], r["min"], r["max"]) for r in batch.to_pylist()}
    mine = {f: values[flag == f].astype(object) for f in set(flag)}
    assert got == {f: tuple(decimal.Decimal(int(x)) for x in (v.sum(), v.min(), v.max())) for f, v in mine.items()}


@pytest.mark.gpu
def test_a_column_holding_the_least_int64_is_bounded_by_2_to_the_63(cupy_standin) -> None:
    """|-2^63| is past int64 (NumPy's abs gives -2^63 back): the bound that picks how a warp sums must
    be 2^63, or the value is summed in 32 bits and lost."""
    values = np.sort(np.r_[-(2**63), np.zeros(5), np.ones(594)]).astype(np.int64)
    flags = pa.array(["x" if i % 2 else "y" for i in range(600)])
    columns = {
        "a": EncodedColumn("a", pa.int64(), RunLength.encode(values), None, 0),
        "k": EncodedColumn("k", pa.string(), dictionary_encoded(np.random.default_rng(1), flags), None, 0),
    }
    spec = AggSpec("total", "sum", Col("a"), pa.decimal128(38, 0))
    backend = get_backend("cupy")
    scan = fused_scan.plan_block(EncodedBlock(600, columns), None, [NamedExpr("k", Col("k"), pa.string())], [spec])
    assert scan.images["a"].bounds[0] == 2**63 and "cxg_warp_sum26(mine ? v" not in scan.launches[0].source
    batch = scan.assemble(backend.fused_aggregate(scan, lambda c, k: backend.asarray(scan.images[c].buffers[k])))
    got = dict(zip(batch.column(0).to_pylist(), batch.column("total").to_pylist(), strict=True))
    flag = np.array(flags.to_pylist())
    assert got == {f: decimal.Decimal(int(values[flag == f].astype(object).sum())) for f in ("x", "y")}


@pytest.mark.gpu
@pytest.mark.parametrize("op", ["=", "<", ">=", "<>"])
@pytest.mark.parametrize("literal", [2**63, -(2**63) - 1])
def test_a_literal_past_int64_against_sorted_runs_is_left_to_the_general_kernels(cupy_standin, op, literal) -> None:
    """A literal past int64 narrows no range (the runs are int64) and is not fused: the general
    kernels answer, as the NumPy backend does."""
    values = np.array([7] * 300 + [2**63 - 1] * 300, dtype=np.int64)
    block = EncodedBlock(600, {"s": EncodedColumn("s", pa.int64(), RunLength.encode(values), None, 0)})
    images = {"s": ColumnImage.of("s", [block.columns["s"]])}
    predicate = Call(op, (Col("s"), Lit(literal, Type(Kind.INT))))
    first, end, settled = fused_scan.row_ranges(images, np.arange(1), predicate)
    assert (first[0], end[0], settled) == (0, 600, [frozenset()])
    count = [AggSpec("n", "count", None, pa.int64())]
    assert fused_scan.plan(images, [0], predicate, [], count) is None
    task = BlockTask(predicate, aggregates=tuple(count))
    holds = {"=": operator.eq, "<": operator.lt, ">=": operator.ge, "<>": operator.ne}[op]
    expected = sum(holds(int(v), literal) for v in values)
    for name in ("numpy", "cupy"):
        [(batch, _)] = run_block(task, block, get_backend(name), ScanStats(), predicate)
        assert sum(batch.column("n").to_pylist()) == expected, name  # no row: no partial group


DAY = Type(Kind.DATE)


def _day(n: int) -> Lit:
    return Lit(dt.date(1970, 1, 1) + dt.timedelta(days=n), DAY)


@pytest.mark.gpu
@pytest.mark.parametrize(
    "predicate",
    [
        Call("and", (Call(">=", (Col("s"), _day(8100))), Call("<", (Col("s"), _day(8200))))),  # Q6's shape
        Call("between", (Col("s"), _day(8390), _day(8500))),  # in the last block only
        Call(">", (_day(8050), Col("s"))),  # the literal on the left
        Call("and", (Call("=", (Col("s"), _day(8123))), Call(">", (Col("a"), Lit(0, Type(Kind.INT)))))),
        Call("<", (Col("s"), _day(7000))),  # no row of any block: nothing launched
        Call("or", (Call("<", (Col("s"), _day(8100))), Call(">", (Col("a"), Lit(0, Type(Kind.INT)))))),  # no range
    ],
)
def test_a_range_on_a_column_stored_as_sorted_runs_narrows_the_rows_the_kernel_reads(
    cupy_standin, predicate: Call
) -> None:
    """Comparisons of a sorted run-length column with literals become, per block, the range of rows
    whose runs can hold (as the CPU path's run ranges): the launch's tiles cover only those rows, a
    block with none is not launched, and the answer equals the NumPy backend's general kernels."""
    rng = np.random.default_rng(11)
    blocks = []
    for start in (8000, 8130, 8260):  # a table sorted by its date, three blocks of 3,000 rows
        block = random_block(rng, 3000)
        days = np.sort(rng.integers(start, start + 140, 3000))
        block.columns["s"] = EncodedColumn("s", pa.date32(), RunLength.encode(days), None, 0)
        blocks.append(block)
    task = BlockTask(predicate, keys=(NamedExpr("k3", Col("k3"), pa.int32()),), aggregates=tuple(_TOTALS))
    numpy = get_backend("numpy")
    expected = final_rows([run_block(task, b, numpy, ScanStats(), predicate)[0][0] for b in blocks], task)
    images = {n: ColumnImage.of(n, [b.columns[n] for b in blocks]) for n in blocks[0].columns}
    scan = fused_scan.plan(images, [0, 1, 2], predicate, list(task.keys), list(task.aggregates))
    assert scan is not None
    backend = get_backend("cupy")
    accumulators = backend.fused_aggregate(scan, lambda c, k: backend.asarray(images[c].buffers[k]))
    assert final_rows(scan.assemble(accumulators), task) == expected
    first, end, _ = fused_scan.row_ranges(images, np.arange(3), predicate)
    tiles = sum(launch.tiles for launch in scan.launches)
    assert scan.rows_read == int((end - first).sum()) and scan.rows == 9000
    assert tiles == sum(-(-(z - a) // fused_scan.TILE) for a, z in zip(first, end, strict=True))
    tested = [t for _, _, t in fused_scan.launch_groups(images, np.arange(3), predicate)]
    if predicate.op == "or":  # not a conjunction: every row is read, and tested
        assert list(first) == [0, 0, 0] and list(end) == [3000, 3000, 3000] and set(tested) == {predicate}
        return
    others = [a for a in (predicate.args if predicate.op == "and" else [predicate]) if Col("s") not in a.args]
    assert all(t == (others[0] if others else None) for t in tested)  # s's comparisons hold on every row read
    held = [_held(block, predicate) for block in blocks]
    for rows, a, z in zip(held, first, end, strict=True):  # every row that holds is in its block's range
        assert not rows.any() or (a <= np.flatnonzero(rows)[0] and np.flatnonzero(rows)[-1] < z)
    assert tiles < 3 * -(-3000 // fused_scan.TILE)  # fewer than every row's
    assert sum(len(launch.table) for launch in scan.launches) == int((end > first).sum())  # empty: not launched


def test_the_bytes_a_scan_reads_are_its_launched_blocks_parts_of_the_columns_it_still_reads() -> None:
    """What a benchmark's rate over compressed bytes counts: of the columns the kernels still read
    (not one whose comparison the row ranges settle), the parts of the blocks launched (not those
    min/max or the ranges rule out), each part as aligned in its buffer."""
    rng = np.random.default_rng(13)
    blocks = []
    for start in (8000, 8130, 8260):
        block = random_block(rng, 3000)
        block.columns["s"] = EncodedColumn(
            "s", pa.date32(), RunLength.encode(np.sort(rng.integers(start, start + 140, 3000))), None, 0
        )
        blocks.append(block)
    images = {n: ColumnImage.of(n, [b.columns[n] for b in blocks]) for n in ("p", "s")}
    predicate = Call("and", (Call(">=", (Col("s"), _day(8100))), Call("<", (Col("s"), _day(8200)))))
    total = AggSpec("total", "sum", Col("p"), pa.decimal128(38, 2))
    scan = fused_scan.plan(images, [0, 1, 2], predicate, [], [AggSpec("n", "count", None, pa.int64()), total])
    assert scan is not None and {c for launch in scan.launches for c, _ in launch.buffers} == {"p"}
    alone = [ColumnImage.of("p", [blocks[b].columns["p"]]) for b in (0, 1)]  # the third block holds no day asked
    expected = sum(-(-buffer.nbytes // 8) * 8 for image in alone for buffer in image.buffers.values())
    assert scan.bytes_read == expected < images["p"].nbytes + images["s"].nbytes


@pytest.mark.gpu
def test_a_range_on_sorted_runs_with_nulls_is_still_tested_on_each_row(cupy_standin) -> None:
    """A NULL's slot holds a value of its run, yet its row does not hold: a sorted column with NULLs
    narrows the rows read, but its comparison stays in the predicate (and so the general kernels,
    which read NULLs, run it)."""
    rng = np.random.default_rng(12)
    block = random_block(rng, 3000)
    days = np.sort(rng.integers(8000, 8140, 3000))
    validity = np.packbits(np.arange(3000) % 7 != 0, bitorder="little")
    block.columns["s"] = EncodedColumn("s", pa.date32(), RunLength.encode(days), validity, 429)
    images = {n: ColumnImage.of(n, [block.columns[n]]) for n in block.columns}
    predicate = Call("<", (Col("s"), _day(8070)))
    first, end, settled = fused_scan.row_ranges(images, np.arange(1), predicate)
    assert end[0] - first[0] < 3000 and settled == [frozenset()]
    assert [t for _, _, t in fused_scan.launch_groups(images, np.arange(1), predicate)] == [predicate]
    assert fused_scan.plan(images, [0], predicate, [], [AggSpec("n", "count", None, pa.int64())]) is None


_TOTALS = [
    AggSpec("n", "count", None, pa.int64()),
    AggSpec("total", "sum", Col("p"), pa.decimal128(38, 2)),
    AggSpec("first", "min", Col("s"), pa.date32()),
]


def _held(block: EncodedBlock, predicate: Call) -> np.ndarray:
    """Which rows of `block` hold `predicate` (evaluated by Arrow over the decoded rows)."""
    batch = block.decode()
    ops = {"and": pc.and_, "or": pc.or_, "=": pc.equal, "<": pc.less, "<=": pc.less_equal, ">": pc.greater}
    ops[">="] = pc.greater_equal

    def evaluated(e):
        if isinstance(e, Col):
            return batch.column(e.name)
        if isinstance(e, Lit):
            return pa.scalar(e.value)
        if e.op == "between":
            x, lo, hi = (evaluated(a) for a in e.args)
            return pc.and_(pc.greater_equal(x, lo), pc.less_equal(x, hi))
        return functools.reduce(ops[e.op], (evaluated(a) for a in e.args))

    return evaluated(predicate).to_numpy(zero_copy_only=False)


@pytest.mark.gpu
@pytest.mark.parametrize(
    "why",
    [
        "nulls",
        "count of nulls",
        "float",
        "key expression",
        "key stored plain",
        "division",
        "too many groups",
        "count distinct",
    ],
)
def test_what_the_fused_kernel_leaves_to_the_general_kernels(why: str) -> None:
    rng = np.random.default_rng(3)
    n = 300
    block = random_block(rng, n)
    columns = dict(block.columns)
    keys: list[NamedExpr] = []
    specs = [AggSpec("n", "count", None, pa.int64())]
    if why == "nulls":
        columns["a"] = EncodedColumn("a", pa.int64(), Plain(np.arange(n)), np.packbits(np.ones(n, bool)), 0)
        specs.append(AggSpec("s", "sum", Col("a"), pa.int64()))
    elif why == "count of nulls":
        valid = np.packbits(np.arange(n) % 3 > 0, bitorder="little")
        columns["a"] = EncodedColumn("a", pa.int64(), Plain(np.arange(n)), valid, n // 3 + 1)
        specs.append(AggSpec("c", "count", Col("a"), pa.int64()))
    elif why == "float":
        columns["f"] = EncodedColumn("f", pa.float64(), Plain(np.zeros(n).view(np.int64)), None, 0)
        specs.append(AggSpec("s", "sum", Col("f"), pa.float64()))
    elif why == "key expression":
        keys = [NamedExpr("k", Call("+", (Col("k3"), Lit(1, Type(Kind.INT)))), pa.int64())]
    elif why == "key stored plain":
        columns["k3"] = EncodedColumn("k3", pa.int32(), Plain(np.zeros(n, np.int8)), None, 0)
        keys = [NamedExpr("k3", Col("k3"), pa.int32())]
    elif why == "division":
        specs.append(AggSpec("q", "sum", Call("/", (Col("p"), Col("d"))), pa.float64()))
    elif why == "too many groups":
        values = np.arange(n)
        columns["k3"] = EncodedColumn("k3", pa.int32(), dictionary_encoded(rng, values), None, 0)
        names = RunLength.encode(pa.array([str(i) for i in range(n)]))
        columns["k1"] = EncodedColumn("k1", pa.string(), names, None, 0)
        keys = [NamedExpr("k3", Col("k3"), pa.int32()), NamedExpr("k1", Col("k1"), pa.string())]
    else:
        specs.append(AggSpec("c", "count_distinct", Col("a"), pa.int64()))
    block = EncodedBlock(n, columns)
    assert fused_scan.plan_block(block, None, keys, specs) is None
    task = BlockTask(None, keys=tuple(keys), aggregates=tuple(specs))
    numpy = get_backend("numpy")
    expected = final_rows(run_block(task, block, numpy, ScanStats(), None)[0][0], task)
    got = final_rows(run_block(task, block, get_backend("cupy"), ScanStats(), None)[0][0], task)
    assert [row.keys() for row in got] == [row.keys() for row in expected]
    for row, want in zip(got, expected, strict=True):  # a float sum's order is the device's: not exact
        assert all(
            math.isclose(v, want[k], rel_tol=1e-12) if isinstance(v, float) else v == want[k] for k, v in row.items()
        )


def benchmark_kernels() -> dict[str, str]:
    """The generated kernels of the benchmark's Q1 and Q6 for typical lineitem blocks."""
    rng = np.random.default_rng(1)
    block = random_block(rng, 1000)
    q6 = Call(
        "and",
        (
            Call(">=", (Col("s"), random_literal(rng, "s"))),
            Call("<", (Col("s"), random_literal(rng, "s"))),
            Call("between", (Col("d"), random_literal(rng, "d"), random_literal(rng, "d"))),
            Call("<", (Col("a"), Lit(24, Type(Kind.INT)))),
        ),
    )
    revenue = AggSpec("revenue", "sum", Call("*", (Col("p"), Col("d"))), pa.decimal128(38, 4))
    q1_specs = [
        AggSpec("sum_qty", "sum", Col("a"), pa.int64()),
        AggSpec("sum_price", "sum", Col("p"), pa.decimal128(38, 2)),
        AggSpec("sum_disc_price", "sum", ARGUMENTS[2], pa.decimal128(38, 4)),
        AggSpec("avg_disc", "avg", Col("d"), pa.decimal128(38, 2)),
        AggSpec("latest", "max", Col("s"), pa.date32()),
        AggSpec("count_order", "count", None, pa.int64()),
    ]
    keys = [NamedExpr("k1", Col("k1"), pa.string()), NamedExpr("k2", Col("k2"), pa.string())]
    q1 = fused_scan.plan_block(block, Call("<=", (Col("s"), random_literal(rng, "s"))), keys, q1_specs)
    q6_scan = fused_scan.plan_block(block, q6, [], [revenue])
    return {"Q1": q1.launches[0].source, "Q6": q6_scan.launches[0].source}


def test_before_sm_80_a_warps_sums_are_shuffled_as_its_32_bit_reductions_are_not_there() -> None:
    """sm_80 reduces a warp's 32-bit values in one instruction; an older GPU's kernels still compile."""
    from cupy.cuda import nvrtc

    source = benchmark_kernels()["Q1"]
    assert "cxg_warp_sum26(" in source
    assert "warning" not in nvrtc_compile(source, "Q1", "sm_75")
    for arch, reductions in (("compute_75", 0), ("compute_80", 1)):
        program = nvrtc.createProgram(source, "Q1.cu", [], [])
        try:
            nvrtc.compileProgram(program, [f"--gpu-architecture={arch}", "--std=c++17"])
            ptx = nvrtc.getPTX(program)
        finally:
            nvrtc.destroyProgram(program)
        assert (b"redux.sync" in ptx) == bool(reductions), arch


@pytest.mark.parametrize("arch", ARCHES)
@pytest.mark.parametrize("query", ["Q1", "Q6"])
def test_generated_kernels_compile_for_the_target_gpus_within_the_register_budget(query: str, arch: str) -> None:
    source = benchmark_kernels()[query]
    log = nvrtc_compile(source, query, arch)
    assert "warning" not in log, log
    functions = re.findall(r"Compiling entry function '(\w+)'.*?Used (\d+) registers", log, re.S)
    assert len(functions) == 1, log  # the scan alone: no kernels to prepare or fold its accumulators
    for name, registers in functions:
        assert int(registers) <= REGISTER_BUDGET, f"{name} on {arch}: {registers} registers"
    spills = [int(n) for n in re.findall(r"(\d+) bytes spill (?:stores|loads)", log)]
    assert len(spills) == 2 and not any(spills), log
