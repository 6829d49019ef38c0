"""The fused scan kernel (`gpu_kernels.fused_scan`): generated from random predicates, group keys and
aggregates over blocks whose columns take every encoding the kernel reads, run as C++ on the CPU
through the stand-in of CuPy, its partial aggregates equal to the NumPy backend's general kernels;
the same kernels compiled with NVRTC for the target GPUs within a register budget; and what it
refuses (NULLs, floats, keys that are neither dictionaries nor runs) left to the general kernels."""

from __future__ import annotations

import datetime as dt
import decimal
import re

import numpy as np
import pyarrow as pa
import pytest

from gpu_kernels import final_aggregate, fused_scan, get_backend
from gpu_kernels.aggregate import AggSpec, NamedExpr
from gpu_kernels.cuda_kernels import ARCHES
from gpu_kernels.decoding import ScanStats
from gpu_kernels.encoded_block import EncodedBlock, EncodedColumn
from gpu_kernels.encodings import BitPacked, Dictionary, Plain, RunLength, narrow_int
from gpu_kernels.expr import Call, Col, Kind, Lit, Type, check
from gpu_kernels.operators import BlockTask, run_block
from gpu_kernels.vectors import arrow_type
from tests.test_cuda_kernels import nvrtc_compile, run_sanitized

TYPES = {
    "a": pa.int64(),
    "p": pa.decimal128(12, 2),
    "d": pa.decimal128(4, 2),
    "s": pa.date32(),
    "k1": pa.string(),
    "k2": pa.string(),
    "k3": pa.int32(),
}
REGISTER_BUDGET = 64  # per thread, for the generated kernels of the benchmark's scans


def _domain(rng: np.random.Generator, name: str, n: int) -> np.ndarray | pa.Array:
    """A column's domain values: integers, scaled decimals, day numbers, or strings."""
    if name == "a":
        return rng.integers(-1000, 1000, n)
    if name == "p":
        return rng.integers(100, 10_000_000, n)
    if name == "d":
        return rng.integers(0, 11, n)
    if name == "s":
        return np.sort(rng.integers(8000, 8400, n))  # sorted, as a table sorted by its date
    if name == "k1":
        return pa.array(rng.choice(["A", "N", "R"], n).tolist())
    if name == "k2":
        return pa.array(sorted(rng.choice(["F", "O"], n).tolist()))
    return rng.integers(0, 7, n)


def _encode(rng: np.random.Generator, values, key: bool = False) -> object:
    """`values` in an encoding drawn from those the fused kernel reads (for a group key: a
    dictionary or runs)."""
    if isinstance(values, pa.Array) or key:
        return RunLength.encode(values) if rng.random() < 0.5 else _dictionary(rng, values)
    choice = rng.integers(4)
    if choice == 0:
        return Plain(narrow_int(values))
    if choice == 1:
        return BitPacked.encode(values)
    if choice == 2:
        return RunLength.encode(values)
    return _dictionary(rng, values)


def _dictionary(rng: np.random.Generator, values) -> Dictionary:
    dictionary, codes = Dictionary.split(values)
    if isinstance(dictionary, np.ndarray):
        dictionary = narrow_int(dictionary)
    kind = rng.integers(3)
    encoded = [Plain(narrow_int(codes)), BitPacked.encode(codes), RunLength.encode(codes)][kind]
    return Dictionary(dictionary, encoded)


def random_block(rng: np.random.Generator, n: int) -> EncodedBlock:
    columns = {
        name: EncodedColumn(name, t, _encode(rng, _domain(rng, name, n), name.startswith("k")), None, 0)
        for name, t in TYPES.items()
    }
    return EncodedBlock(n, columns)


def _literal(rng: np.random.Generator, name: str) -> Lit:
    if name == "a":
        return Lit(int(rng.integers(-1100, 1100)), Type(Kind.INT))
    if name == "p":
        number = decimal.Decimal(int(rng.integers(0, 11_000_000))).scaleb(-3)  # a finer scale than the column's
        return Lit(number, Type(Kind.DEC, 3))
    if name == "d":
        return Lit(decimal.Decimal(int(rng.integers(0, 12))).scaleb(-2), Type(Kind.DEC, 2))
    return Lit(dt.date(1970, 1, 1) + dt.timedelta(days=int(rng.integers(7990, 8410))), Type(Kind.DATE))


def random_predicate(rng: np.random.Generator, depth: int = 0) -> Call:
    if depth < 2 and rng.random() < 0.4:
        op = ["and", "or", "not"][rng.integers(3)]
        arity = 1 if op == "not" else int(rng.integers(2, 4))
        return Call(op, tuple(random_predicate(rng, depth + 1) for _ in range(arity)))
    name = ["a", "p", "d", "s"][rng.integers(4)]
    op = ["=", "<>", "<", "<=", ">", ">=", "between", "in"][rng.integers(8)]
    if op == "between":
        return Call(op, (Col(name), _literal(rng, name), _literal(rng, name)))
    if op == "in":
        return Call(op, (Col(name), *(_literal(rng, name) for _ in range(int(rng.integers(1, 5))))))
    return Call(op, (Col(name), _literal(rng, name)))


_ARGUMENTS = [
    Col("a"),
    Col("p"),
    Call("*", (Col("p"), Call("-", (Lit(1, Type(Kind.INT)), Col("d"))))),  # Q1's discounted price
    Call("+", (Col("p"), Call("neg", (Col("a"),)))),
    Call("-", (Col("s"), Col("s"))),
]


def random_aggregates(rng: np.random.Generator) -> list[AggSpec]:
    specs = [AggSpec("n", "count", None, pa.int64())]
    for i in range(int(rng.integers(1, 5))):
        func = ["sum", "avg", "min", "max", "count"][rng.integers(5)]
        arg = Col("s") if func in ("min", "max") and rng.random() < 0.3 else _ARGUMENTS[rng.integers(len(_ARGUMENTS))]
        t = check(arg, {name: _kind(t) for name, t in TYPES.items()})
        specs.append(AggSpec(f"x{i}", func, arg, pa.int64() if func == "count" else arrow_type(t)))
    return specs


def _kind(t: pa.DataType) -> Type:
    from gpu_kernels.expr import arrow_kind

    return arrow_kind(t)


def random_keys(rng: np.random.Generator) -> list[NamedExpr]:
    names = [n for n in ("k1", "k2", "k3") if rng.random() < 0.5]
    return [NamedExpr(n, Col(n), TYPES[n]) for n in names]


def _final(batch: pa.RecordBatch, task: BlockTask) -> list[dict]:
    keys = [k.name for k in task.keys]
    table = final_aggregate(pa.Table.from_batches([batch]), keys, list(task.aggregates))
    return table.sort_by([(k, "ascending") for k in keys]).to_pylist() if keys else table.to_pylist()


def compare_fused(cases: int, standin=None, seed: int = 5) -> int:
    """Random blocks, predicates, keys and aggregates through the fused kernel (on the device, or as
    C++ on the CPU under the stand-in, whose count of host waits is checked too) and through the
    NumPy backend's general kernels, partial aggregates compared; how many were fused."""
    rng = np.random.default_rng(seed)
    numpy = get_backend("numpy")
    fused = 0
    cupy_backend = get_backend("cupy")
    for case in range(cases):
        n = int(rng.choice([1, 7, 255, 256, 257, 3000]))
        block = random_block(rng, n)
        predicate = random_predicate(rng) if case % 5 else None
        task = BlockTask(predicate, keys=tuple(random_keys(rng)), aggregates=tuple(random_aggregates(rng)))
        expected = _final(run_block(task, block, numpy, ScanStats(), predicate)[0][0], task)
        scan = fused_scan.plan(block, predicate, list(task.keys), list(task.aggregates))
        assert scan is not None, f"case {case}: {task} is not fused"
        if case % 3 == 0:  # a handful of CUDA blocks, so that several slices are folded
            scan.max_blocks = int(rng.integers(1, 4))
        stats = ScanStats()
        syncs = standin.counts.syncs if standin else 0
        accumulators = cupy_backend.fused_aggregate(scan, cupy_backend.asarray)
        assert not standin or standin.counts.syncs == syncs + 1  # the result, read back once
        got = _final(scan.assemble(accumulators), task)
        assert got == expected, f"case {case}: {task}\n{got}\n{expected}"
        assert scan.selected(accumulators) == (sum(r["n"] for r in expected) if expected else 0) or not task.keys
        run_block(task, block, cupy_backend, stats, predicate)  # the operator takes the fused path too
        fused += 1
    return fused


@pytest.mark.gpu
def test_fused_kernels_compute_what_the_general_kernels_do(cupy_standin) -> None:
    assert compare_fused(120, cupy_standin) == 120


@pytest.mark.slow
def test_fused_kernels_run_clean_under_address_and_undefined_behaviour_sanitizers() -> None:
    out = run_sanitized(
        "from tests.cupy_standin import installed\nfrom tests.test_fused_scan import compare_fused\n"
        "with installed(sanitize=True) as standin:\n    print(compare_fused(40, standin))"
    )
    assert int(out.split()[-1]) == 40


@pytest.mark.gpu
def test_exact_sums_past_64_bits() -> None:
    n = 4000
    values = np.full(n, (1 << 62) - 1, dtype=np.int64)  # sums to about 2**74
    block = EncodedBlock(n, {"a": EncodedColumn("a", pa.decimal128(38, 0), BitPacked.encode(values), None, 0)})
    spec = AggSpec("total", "sum", Col("a"), pa.decimal128(38, 0))
    backend = get_backend("cupy")
    scan = fused_scan.plan(block, None, [], [spec])
    batch = scan.assemble(backend.fused_aggregate(scan, backend.asarray))
    assert batch.column("total").to_pylist() == [decimal.Decimal(n * ((1 << 62) - 1))]


@pytest.mark.gpu
@pytest.mark.parametrize(
    "why",
    ["nulls", "float", "key expression", "key stored plain", "division", "too many groups", "count distinct"],
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
        columns["k3"] = EncodedColumn("k3", pa.int32(), _dictionary(rng, values), None, 0)
        names = RunLength.encode(pa.array([str(i) for i in range(n)]))
        columns["k1"] = EncodedColumn("k1", pa.string(), names, None, 0)
        keys = [NamedExpr("k3", Col("k3"), pa.int32()), NamedExpr("k1", Col("k1"), pa.string())]
    else:
        specs.append(AggSpec("c", "count_distinct", Col("a"), pa.int64()))
    block = EncodedBlock(n, columns)
    assert fused_scan.plan(block, None, keys, specs) is None
    task = BlockTask(None, keys=tuple(keys), aggregates=tuple(specs))
    numpy = get_backend("numpy")
    expected = _final(run_block(task, block, numpy, ScanStats(), None)[0][0], task)
    got = _final(run_block(task, block, get_backend("cupy"), ScanStats(), None)[0][0], task)
    assert got == expected


def benchmark_kernels() -> dict[str, str]:
    """The generated kernels of the benchmark's Q1 and Q6 for typical lineitem blocks."""
    rng = np.random.default_rng(1)
    block = random_block(rng, 1000)
    q6 = Call(
        "and",
        (
            Call(">=", (Col("s"), _literal(rng, "s"))),
            Call("<", (Col("s"), _literal(rng, "s"))),
            Call("between", (Col("d"), _literal(rng, "d"), _literal(rng, "d"))),
            Call("<", (Col("a"), Lit(24, Type(Kind.INT)))),
        ),
    )
    revenue = AggSpec("revenue", "sum", Call("*", (Col("p"), Col("d"))), pa.decimal128(38, 4))
    q1_specs = [
        AggSpec("sum_qty", "sum", Col("a"), pa.int64()),
        AggSpec("sum_price", "sum", Col("p"), pa.decimal128(38, 2)),
        AggSpec("sum_disc_price", "sum", _ARGUMENTS[2], pa.decimal128(38, 4)),
        AggSpec("avg_disc", "avg", Col("d"), pa.decimal128(38, 2)),
        AggSpec("latest", "max", Col("s"), pa.date32()),
        AggSpec("count_order", "count", None, pa.int64()),
    ]
    keys = [NamedExpr("k1", Col("k1"), pa.string()), NamedExpr("k2", Col("k2"), pa.string())]
    q1 = fused_scan.plan(block, Call("<=", (Col("s"), _literal(rng, "s"))), keys, q1_specs)
    q6_scan = fused_scan.plan(block, q6, [], [revenue])
    return {"Q1": q1.source, "Q6": q6_scan.source}


@pytest.mark.parametrize("arch", ARCHES)
@pytest.mark.parametrize("query", ["Q1", "Q6"])
def test_generated_kernels_compile_for_the_target_gpus_within_the_register_budget(query: str, arch: str) -> None:
    source = benchmark_kernels()[query]
    log = nvrtc_compile(source, query, arch)
    assert "warning" not in log, log
    functions = re.findall(r"Compiling entry function '(\w+)'.*?Used (\d+) registers", log, re.S)
    assert len(functions) == 3, log  # the scan, its _init and its _reduce
    for name, registers in functions:
        assert int(registers) <= REGISTER_BUDGET, f"{name} on {arch}: {registers} registers"
    spills = [int(n) for n in re.findall(r"(\d+) bytes spill (?:stores|loads)", log)]
    assert len(spills) == 6 and not any(spills), log
