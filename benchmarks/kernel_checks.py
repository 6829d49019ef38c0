"""The CuPy backend's kernels checked against the NumPy backend's on fresh random data: every backend
operation at several sizes, and the fused scan kernels (`gpu_kernels.fused_scan`, and the fused
projections of `gpu_kernels.fused_project`) on random blocks whose columns take every encoding they
read, with random predicates, group keys and aggregates, or projected expressions. New
device arrays hold garbage (on a GPU, what was there; under the stand-in, a poison pattern), so an
output a kernel leaves unwritten shows. Used by the tests and by `benchmarks.bench_gpu`, which runs
them first on a real GPU."""

from __future__ import annotations

import datetime as dt
import decimal
from collections.abc import Callable
from typing import Any

import numpy as np
import pyarrow as pa

from gpu_kernels import (
    AggSpec,
    BitPacked,
    BlockTask,
    Call,
    Col,
    ColumnImage,
    Dictionary,
    EncodedBlock,
    EncodedColumn,
    Kind,
    Lit,
    NamedExpr,
    Partitioned,
    Plain,
    RunLength,
    ScanStats,
    Type,
    arrow_kind,
    arrow_type,
    bitpack,
    expr,
    final_aggregate,
    fused_project,
    fused_scan,
    get_backend,
    narrow_int,
    run_block,
)

TYPES = {
    "a": pa.int64(),
    "p": pa.decimal128(12, 2),
    "d": pa.decimal128(4, 2),
    "s": pa.date32(),
    "k1": pa.string(),
    "k2": pa.string(),
    "k3": pa.int32(),
}


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
        return RunLength.encode(values) if rng.random() < 0.5 else dictionary_encoded(rng, values)
    choice = rng.integers(4)
    if choice == 0:
        return Plain(narrow_int(values))
    if choice == 1:
        return BitPacked.encode(values)
    if choice == 2:
        return RunLength.encode(values)
    return dictionary_encoded(rng, values)


def dictionary_encoded(rng: np.random.Generator, values) -> Dictionary:
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


def random_literal(rng: np.random.Generator, name: str) -> Lit:
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
        return Call(op, (Col(name), random_literal(rng, name), random_literal(rng, name)))
    if op == "in":
        return Call(op, (Col(name), *(random_literal(rng, name) for _ in range(int(rng.integers(1, 5))))))
    return Call(op, (Col(name), random_literal(rng, name)))


ARGUMENTS = [
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
        arg = Col("s") if func in ("min", "max") and rng.random() < 0.3 else ARGUMENTS[rng.integers(len(ARGUMENTS))]
        t = expr.check(arg, {name: arrow_kind(t) for name, t in TYPES.items()})
        specs.append(AggSpec(f"x{i}", func, arg, pa.int64() if func == "count" else arrow_type(t)))
    return specs


def random_keys(rng: np.random.Generator) -> list[NamedExpr]:
    names = [n for n in ("k1", "k2", "k3") if rng.random() < 0.5]
    return [NamedExpr(n, Col(n), TYPES[n]) for n in names]


def final_rows(batches: pa.RecordBatch | list[pa.RecordBatch], task: BlockTask) -> list[dict]:
    """The final aggregate of partial results, rows in key order."""
    keys = [k.name for k in task.keys]
    batches = batches if isinstance(batches, list) else [batches]
    table = final_aggregate(pa.Table.from_batches(batches, schema=task.schema()), keys, list(task.aggregates))
    return table.sort_by([(k, "ascending") for k in keys]).to_pylist() if keys else table.to_pylist()


FUSED_SIZES = (1, 7, 255, 256, 257, 3000)  # rows of the random blocks


class CheckFailed(AssertionError):
    """The CuPy backend computed something else than the NumPy backend."""


def _require(condition: bool, message: str) -> None:
    if not condition:
        raise CheckFailed(message)


def compare_fused(
    cases: int, standin: Any = None, seed: int = 5, sizes: tuple[int, ...] = (1, 7, 255, 256, 257, 3000)
) -> int:
    """Random scans through the fused kernels (on the device, or as C++ on the CPU under the
    stand-in, whose count of host waits is checked too) and through the NumPy backend's general
    kernels, final aggregates compared; how many were compared. A scan reads one to four random
    blocks, each with its own encodings and values (so several launches, and keys whose codes span
    blocks), or a subset of them as after pruning, over a grid of 1 to 3 CUDA blocks now and then
    (so that they stride over many tiles)."""
    rng = np.random.default_rng(seed)
    numpy, cupy_backend = get_backend("numpy"), get_backend("cupy")
    for case in range(cases):
        blocks, chosen, predicate = _random_scan(rng, sizes, case)
        task = BlockTask(predicate, keys=tuple(random_keys(rng)), aggregates=tuple(random_aggregates(rng)))
        partials = [run_block(task, blocks[b], numpy, ScanStats(), predicate)[0][0] for b in chosen]
        expected = final_rows(partials, task)
        images = {n: ColumnImage.of(n, [b.columns[n] for b in blocks]) for n in TYPES}
        scan = fused_scan.plan(images, chosen, predicate, list(task.keys), list(task.aggregates))
        _require(scan is not None, f"case {case}: {task} is not fused")
        on_device = _on_device(scan, images, cupy_backend, rng, case)
        syncs = standin.counts.syncs if standin else 0
        accumulators = cupy_backend.fused_aggregate(scan, on_device)
        _require(not standin or standin.counts.syncs == syncs + 1, "the result is not read back in one wait")
        got = final_rows(scan.assemble(accumulators), task)
        _require(got == expected, f"case {case}: {task}\nfused: {got}\nnumpy: {expected}")
        selected = sum(row["n"] for row in expected)
        _require(scan.selected(accumulators) == selected, f"case {case}: rows selected")
        block = blocks[chosen[0]]
        through_operator = final_rows(run_block(task, block, cupy_backend, ScanStats(), predicate)[0][0], task)
        _require(through_operator == final_rows(partials[0], task), f"case {case}: the operator's fused path differs")
    return cases


def _random_scan(rng: np.random.Generator, sizes: tuple[int, ...], case: int) -> tuple[list, list[int], Call | None]:
    """One to four random blocks, the subset a scan reads (as after pruning), and its predicate."""
    blocks = [random_block(rng, int(rng.choice(sizes))) for _ in range(int(rng.integers(1, 5)))]
    chosen = sorted(int(b) for b in rng.choice(len(blocks), int(rng.integers(1, len(blocks) + 1)), replace=False))
    return blocks, chosen, random_predicate(rng) if case % 5 else None


def _on_device(scan: Any, images: dict, backend: Any, rng: np.random.Generator, case: int) -> Callable[[str, str], Any]:
    """The buffers the scan's launches read, copied to the device; now and then its launches on a
    grid of 1 to 3 CUDA blocks, so that they stride over many tiles."""
    if case % 3 == 0:
        for launch in scan.launches:
            launch.max_grid = int(rng.integers(1, 4))
    buffers = {pair for launch in scan.launches for pair in launch.buffers}
    on_device = {(c, k): backend.asarray(images[c].buffers[k]) for c, k in buffers}
    return lambda column, key: on_device[(column, key)]


def random_outputs(rng: np.random.Generator) -> list[NamedExpr]:
    """One to four projected expressions: columns of every type (strings too) and arithmetic."""
    choices = [Col(name) for name in TYPES] + ARGUMENTS
    types = {name: arrow_kind(t) for name, t in TYPES.items()}
    picked = [choices[i] for i in rng.choice(len(choices), int(rng.integers(1, 5)), replace=False)]
    return [NamedExpr(f"o{i}", e, arrow_type(expr.check(e, types))) for i, e in enumerate(picked)]


def compare_projections(
    cases: int, standin: Any = None, seed: int = 6, sizes: tuple[int, ...] = (1, 7, 255, 256, 257, 3000)
) -> int:
    """Random projections through the fused kernels (`gpu_kernels.fused_project`) and through the
    NumPy backend's general kernels, their rows compared (as sorted lists: launches of different
    encodings follow one another; the rows of one block keep their order); how many were compared.
    Blocks, subsets and grids are drawn as in `compare_fused`; under the stand-in the answer must
    come back in two waits for the device (one when no row holds)."""
    rng = np.random.default_rng(seed)
    numpy, cupy_backend = get_backend("numpy"), get_backend("cupy")
    for case in range(cases):
        blocks, chosen, predicate = _random_scan(rng, sizes, case)
        task = BlockTask(predicate, outputs=tuple(random_outputs(rng)))
        expected = [
            row for b in chosen for row in run_block(task, blocks[b], numpy, ScanStats(), predicate)[0][0].to_pylist()
        ]
        images = {n: ColumnImage.of(n, [b.columns[n] for b in blocks]) for n in TYPES}
        scan = fused_project.plan(images, chosen, predicate, list(task.outputs))
        _require(scan is not None, f"case {case}: {task} is not fused")
        on_device = _on_device(scan, images, cupy_backend, rng, case)
        syncs = standin.counts.syncs if standin else 0
        values = cupy_backend.fused_project(scan, on_device)
        waits = 2 if expected else (1 if scan.tiles else 0)
        _require(not standin or standin.counts.syncs == syncs + waits, f"case {case}: not read back in {waits} waits")
        got = scan.assemble(values).to_pylist()
        _require(scan.selected(values) == len(expected), f"case {case}: rows selected")
        wrong = [pair for pair in zip(_sorted(got), _sorted(expected), strict=False) if pair[0] != pair[1]][:3]
        _require(not wrong and len(got) == len(expected), f"case {case}: {task}\n(fused, numpy): {wrong}")
        if len(scan.launches) == 1:  # one launch: the rows in the blocks' order
            _require(got == expected, f"case {case}: rows out of order")
    return cases


def _sorted(rows: list[dict]) -> list[tuple]:
    return sorted(tuple(row.values()) for row in rows)


def _operations(rng: np.random.Generator, n: int) -> dict[str, tuple[Callable[[Any], Any], ...]]:
    """Each backend operation on one random input of `n` rows: name -> a call on a backend."""
    width = int(rng.integers(1, bitpack.MAX_WIDTH + 1))
    offsets = rng.integers(0, 1 << width, n, dtype=np.uint64)
    packed = bitpack.pack(offsets, width)
    rows = rng.integers(0, max(n, 1), n).astype(np.int64) if n else np.zeros(0, np.int64)
    mask = rng.random(n) < 0.4
    values = rng.integers(-(1 << 40), 1 << 40, n)
    counts = rng.integers(0, 4, n)
    starts = np.flatnonzero(np.r_[True, rng.random(n - 1) < 0.2]) if n else np.zeros(0, np.int64)
    groups = max(1, n // 10)
    gid = rng.integers(0, groups, n)
    floats = rng.normal(0, 1e6, n)
    hashed = rng.integers(0, 1 << 63, n).astype(np.uint64)
    start, stop = n // 5, n - n // 7

    def on(backend: Any, *arrays: np.ndarray) -> list[Any]:
        return [backend.asarray(a) for a in arrays]

    return {
        "unpack": lambda b: b.unpack(*on(b, packed), width, start, stop).astype(np.uint64),
        "unpack_at": lambda b: b.unpack_at(*on(b, packed), width, *on(b, rows)),
        "packed_sum": lambda b: b.packed_sum(*on(b, packed), width, start, stop),
        "masked_sum": lambda b: b.masked_sum(*on(b, offsets, mask)),
        "repeat": lambda b: b.repeat(*on(b, values, counts)),
        "segment_sum": lambda b: b.segment_sum(*on(b, values, starts)),
        "group_min": lambda b: b.group_min(*on(b, gid, values), groups),
        "group_max": lambda b: b.group_max(*on(b, gid, floats), groups),
        "group_sum": lambda b: b.group_sum(*on(b, gid, values), groups),
        "group_count": lambda b: b.group_count(*on(b, gid), groups),
        "partition": lambda b: b.partition(*on(b, gid % 16), 16),
        "partition_keys": lambda b: _rows_of_buckets(
            b, b.partition_keys(on(b, hashed, hashed ^ offsets), 16, on(b, values, floats, mask, gid.astype(np.int32)))
        ),
        "unique_inverse": lambda b: _distinct_values_of_rows(b, *b.unique_inverse(*on(b, values % 1000))),
    }


def _rows_of_buckets(backend: Any, parts: Partitioned) -> tuple[np.ndarray, ...]:
    """What `partition_keys` promises, whatever the order of rows within a bucket: each bucket's
    rows, and the payload's values moved with them."""
    order, counts, offsets = (backend.to_host(a) for a in parts[:3])
    within = np.concatenate([o + np.argsort(order[o : o + c]) for o, c in zip(offsets, counts, strict=True)])
    return (order[within].astype(np.int64), counts, offsets, *(backend.to_host(a)[within] for a in parts.moved))


def _distinct_values_of_rows(backend: Any, uniques: Any, inverse: Any) -> tuple[np.ndarray, np.ndarray]:
    """What `unique_inverse` promises, whatever the order of its groups: the set, and each row's value."""
    uniques, inverse = backend.to_host(uniques), backend.to_host(inverse)
    return np.sort(uniques), uniques[inverse]


def check_operations(sizes: tuple[int, ...] = (0, 1, 7, 8, 9, 1000, 70_000), seed: int = 3) -> int:
    """Every backend operation on the CuPy backend against the NumPy backend, on fresh random inputs
    of each size; how many were compared."""
    numpy, cupy_backend = get_backend("numpy"), get_backend("cupy")
    compared = 0
    for n in sizes:
        operations = _operations(np.random.default_rng(seed + n), n)
        for name, operation in operations.items():
            expected, got = operation(numpy), operation(cupy_backend)
            for e, g in zip(_flat(numpy, expected), _flat(cupy_backend, got), strict=True):
                same = e.dtype == g.dtype and np.array_equal(e, g, equal_nan=e.dtype.kind == "f")
                _require(same, f"{name} at {n} rows: cupy {g[:8]}, numpy {e[:8]}")
            compared += 1
    return compared


def _flat(backend: Any, result: Any) -> list[np.ndarray]:
    results = result if isinstance(result, tuple) else (result,)
    return [np.atleast_1d(np.asarray(backend.to_host(r) if not isinstance(r, int) else r)) for r in results]
