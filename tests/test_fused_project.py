"""Fused projections (`gpu_kernels.fused_project`): the predicate, the compaction by a prefix sum and
the gather of the projected values over all of a scan's blocks. Generated from random predicates and
outputs over blocks in every encoding the kernels read, run as C++ on the CPU through the stand-in of
CuPy, the rows equal the NumPy backend's general kernels'; compiled by NVRTC for the target GPUs
within a register budget; and through a node, over resident columns, two launches per signature,
a scan and two waits, whatever the number of blocks."""

from __future__ import annotations

import decimal
import re
import threading

import numpy as np
import pyarrow as pa
import pytest

from benchmarks.kernel_checks import compare_projections, random_block, random_literal
from gpu_kernels import (
    BitPacked,
    BlockTask,
    Call,
    Col,
    EncodedColumn,
    Kind,
    Lit,
    NamedExpr,
    Plain,
    ScanStats,
    Type,
    fused_project,
    get_backend,
    run_block,
)
from gpu_kernels.column_image import ColumnImage
from gpu_kernels.column_types import to_domain
from gpu_kernels.cuda_kernels import ARCHES
from storage import LoadOptions, Store, TableCache, TableSchema, load_table, scan_table
from storage.partitioning import buckets_of
from tests.test_cuda_kernels import nvrtc_compile

REGISTER_BUDGET = 64  # per thread, as the fused scans'


@pytest.mark.gpu
def test_fused_projections_give_the_rows_of_the_general_kernels(cupy_standin) -> None:
    assert compare_projections(80, cupy_standin) == 80


@pytest.mark.gpu
@pytest.mark.parametrize("grid", [1, 3, None], ids=["one CUDA block", "three", "a CUDA block a tile"])
def test_the_rows_that_hold_come_out_in_row_order(cupy_standin, grid: int | None) -> None:
    """Two blocks of several tiles, rows held at random: the one packed scan per tile ranks each
    thread's four rows (THREADS apart) among all the tile's, and the tiles' counts place the tiles,
    so the answer is the held rows in order, whichever CUDA block strides over which tiles."""
    rng = np.random.default_rng(3)
    sizes = (5000, 2100)
    columns = {"a": [], "m": []}
    for start, n in zip((0, 5000), sizes, strict=True):
        columns["a"].append(EncodedColumn("a", pa.int64(), BitPacked.encode(np.arange(start, start + n)), None, 0))
        columns["m"].append(EncodedColumn("m", pa.int64(), BitPacked.encode(rng.integers(0, 2, n)), None, 0))
    images = {name: ColumnImage.of(name, parts) for name, parts in columns.items()}
    held = Call("=", (Col("m"), Lit(1, Type(Kind.INT))))
    scan = fused_project.plan(images, [0, 1], held, [NamedExpr("a", Col("a"), pa.int64())])
    assert scan is not None and len(scan.launches) == 1
    assert scan.tiles == sum(-(-n // fused_project.TILE) for n in sizes)
    if grid is not None:
        scan.launches[0].max_grid = grid
    backend = get_backend("cupy")
    waits = cupy_standin.counts.syncs
    values = backend.fused_project(scan, lambda c, k: backend.asarray(images[c].buffers[k]))
    assert cupy_standin.counts.syncs - waits == 2
    m = np.concatenate([images["m"].encodings[b].decode() for b in (0, 1)])
    assert list(scan.assemble(values).column("a").to_numpy()) == list(np.flatnonzero(m == 1))


def _lineitem_like(rows: int, seed: int = 2) -> pa.Table:
    rng = np.random.default_rng(seed)
    return pa.table(
        {
            "day": pa.array(np.sort(rng.integers(8000, 8400, rows)).astype("int32"), pa.int32()).cast(pa.date32()),
            "key": rng.integers(1, 200_000, rows),
            "price": pa.array(
                [decimal.Decimal(int(v)).scaleb(-2) for v in rng.integers(100, 10**7, rows)], pa.decimal128(12, 2)
            ),
            "flag": pa.array(rng.choice(["A", "N", "R"], rows).tolist()),
        }
    )


PROJECTIONS = {
    "a range of the sorted column": {
        "filter": {
            "op": "between",
            "args": [{"col": "day"}, {"lit": "1992-03-01", "type": "date"}, {"lit": "1992-03-09", "type": "date"}],
        },
        "columns": ["key", "price", "flag", "day"],
    },
    "a range of the unsorted column": {
        "filter": {"op": "<", "args": [{"col": "key"}, {"lit": 20_000}]},
        "columns": ["price", "flag"],
    },
    "nothing holds": {  # each conjunct may hold in every block: the blocks are read
        "filter": {
            "op": "and",
            "args": [
                {"op": "<", "args": [{"col": "key"}, {"lit": 20_000}]},
                {"op": ">", "args": [{"col": "key"}, {"lit": 30_000}]},
            ],
        },
        "columns": ["key"],
    },
}


def _rows(store: Store, backend, request: dict) -> tuple[list[tuple], list[str]]:
    scan = scan_table(TableCache(store), {"table": "t", **request}, backend)
    pieces = list(scan.pieces())
    table = pa.Table.from_batches([p.batch for p in pieces], schema=scan.plan.schema)
    return sorted(tuple(r.values()) for r in table.to_pylist()), [p.block for p in pieces]


@pytest.mark.gpu
@pytest.mark.parametrize("name", sorted(PROJECTIONS))
def test_a_node_projects_over_its_resident_columns_in_two_waits(tmp_path, cupy_standin, name: str) -> None:
    """Through a node's scan: the projection of 50 blocks is one piece from the resident columns,
    two kernels per signature and a scan, two waits for the device (one where no row holds), its
    rows the NumPy backend's, read back into pinned host memory; the same with a LIMIT goes block
    by block, and stops early."""
    store = Store(tmp_path / "node")
    data = _lineitem_like(50_000)
    load_table([store], TableSchema.from_arrow("t", data.schema), data, LoadOptions(block_budget=20_000))
    assert len(TableCache(store).get("t").blocks) >= 40
    request = PROJECTIONS[name]
    cupy = get_backend("cupy")
    expected, _ = _rows(store, get_backend("numpy"), request)
    assert _rows(store, cupy, request)[0] == expected  # loads the columns
    counts = cupy_standin.counts
    launches, waits, to_host, pinned = counts.total_launches, counts.syncs, counts.to_host, counts.to_host_pinned
    got, blocks = _rows(store, cupy, request)
    assert got == expected and set(blocks) <= {"resident"}
    assert counts.to_host_pinned - pinned == counts.to_host - to_host > 0  # read back into pinned memory only
    scan = scan_table(TableCache(store), {"table": "t", **request}, cupy)
    signatures = len(scan.resident(scan.jobs()).scan.launches)
    assert 1 <= signatures <= 4
    held = 1 if expected else 0  # the count, then the answer
    assert counts.syncs - waits == 1 + held
    # per signature the count and the write kernels, the scan of the counts, and its last taken (a view on
    # CuPy, an operation on the stand-in)
    assert counts.total_launches - launches == signatures * (1 + held) + 2
    limited, blocks = _rows(store, cupy, {**request, "limit": 3})
    assert len(limited) == min(3, len(expected)) and "resident" not in blocks
    assert not [t for t in threading.enumerate() if t.name.startswith("cxg-device")]  # no block after the answer


@pytest.mark.parametrize(
    "devices", [pytest.param(1, marks=pytest.mark.gpu), pytest.param(2, marks=pytest.mark.gpu(devices=2))]
)
def test_a_partitioned_projection_moves_its_rows_into_buckets_on_the_device(tmp_path, cupy_standin, devices) -> None:
    """Partitioned by integer, date and string keys, a projection runs over the resident columns and
    is partitioned where it was computed (two waits per GPU, whatever the blocks and buckets): every
    row is in its keys' bucket with its values, as on the CPU (a string key's codes hashed through
    its values' hash inputs, loaded once beside its codes)."""
    store = Store(tmp_path / "node")
    data = _lineitem_like(30_000)
    load_table([store], TableSchema.from_arrow("t", data.schema), data, LoadOptions(block_budget=20_000))
    request = {**PROJECTIONS["a range of the unsorted column"], "columns": ["key", "price", "flag", "day"]}
    cupy, numpy = get_backend("cupy"), get_backend("numpy")
    partitions = ((["key"], 16), (["day", "key"], 300), (["key"], 1500), (["flag"], 4), (["flag", "key"], 64))
    for keys, buckets in partitions:
        partitioned = {**request, "partition": {"keys": keys, "buckets": buckets}}
        _rows(store, cupy, partitioned)  # loads the columns
        waits = cupy_standin.counts.syncs
        pieces = list(scan_table(TableCache(store), {"table": "t", **partitioned}, cupy).pieces())
        assert cupy_standin.counts.syncs - waits == 2 * devices
        assert {p.block for p in pieces} == {"resident"}
        for piece in pieces:
            hashed = [to_domain(piece.batch.column(k)) for k in keys]
            assert set(buckets_of(hashed, buckets).tolist()) == {piece.partition}
        got = sorted(tuple(r.values()) for p in pieces for r in p.batch.to_pylist())
        assert got == _rows(store, numpy, partitioned)[0] == _rows(store, numpy, request)[0]
        on_the_cpu = scan_table(TableCache(store), {"table": "t", **partitioned}, numpy).pieces()
        assert {p.partition for p in pieces} == {p.partition for p in on_the_cpu}
    flags = [c for area in cupy.resident.values() for c in area.columns.values() if c.image.name == "flag"]
    assert len(flags) == devices and all("hash:<u8" in c.device for c in flags)  # resident beside its codes


@pytest.mark.gpu
def test_a_projection_of_free_text_leaves_the_resident_columns_alone(tmp_path, cupy_standin) -> None:
    """Free text is stored neither as a dictionary nor as runs: its projection runs block by block,
    and no column is made resident for it (nor evicted for it)."""
    store = Store(tmp_path / "node")
    rng = np.random.default_rng(5)
    data = pa.table({"key": rng.integers(0, 1000, 20_000), "note": [f"note {i} {i * 7919}" for i in range(20_000)]})
    load_table([store], TableSchema.from_arrow("t", data.schema), data, LoadOptions(block_budget=20_000))
    request = {"filter": {"op": "<", "args": [{"col": "key"}, {"lit": 10}]}, "columns": ["key", "note"]}
    cupy = get_backend("cupy")
    got, blocks = _rows(store, cupy, request)
    assert got == _rows(store, get_backend("numpy"), request)[0] and "resident" not in blocks
    assert sum(area.residency.loads for area in cupy.resident.values()) == 0


def projection_kernels() -> str:
    """The generated kernels of a typical projection: a date range, a decimal product, a string."""
    rng = np.random.default_rng(1)
    block = random_block(rng, 1000)
    images = {n: ColumnImage.of(n, [block.columns[n]]) for n in block.columns}
    predicate = Call("between", (Col("s"), random_literal(rng, "s"), random_literal(rng, "s")))
    outputs = [
        NamedExpr("p", Col("p"), pa.decimal128(12, 2)),
        NamedExpr("k1", Col("k1"), pa.string()),
        NamedExpr("x", Call("*", (Col("p"), Col("d"))), pa.decimal128(38, 4)),
    ]
    scan = fused_project.plan(images, [0], predicate, outputs)
    assert scan is not None
    return scan.launches[0].source


@pytest.mark.parametrize("arch", ARCHES)
def test_projection_kernels_compile_for_the_target_gpus_within_the_register_budget(arch: str) -> None:
    log = nvrtc_compile(projection_kernels(), "projection", arch)
    assert "warning" not in log, log
    functions = re.findall(r"Compiling entry function '(\w+)'.*?Used (\d+) registers", log, re.S)
    assert sorted(name.rsplit("_", 1)[1] for name, _ in functions) == ["count", "write"], log
    for name, registers in functions:
        assert int(registers) <= REGISTER_BUDGET, f"{name} on {arch}: {registers} registers"
    spills = [int(n) for n in re.findall(r"(\d+) bytes spill (?:stores|loads)", log)]
    assert len(spills) == 4 and not any(spills), log


@pytest.mark.gpu
@pytest.mark.parametrize("why", ["nulls", "float", "division", "strings stored plain"])
def test_what_the_fused_projection_leaves_to_the_general_kernels(why: str) -> None:
    """A projection the kernels do not compute is not planned (the block pipeline runs it), and the
    CuPy backend's general kernels still give the NumPy backend's rows."""
    rng = np.random.default_rng(4)
    n = 300
    block = random_block(rng, n)
    outputs = [NamedExpr("a", Col("a"), pa.int64())]
    if why == "nulls":
        valid = np.packbits(np.arange(n) % 3 > 0, bitorder="little")
        block.columns["a"] = EncodedColumn("a", pa.int64(), Plain(np.arange(n)), valid, n // 3 + 1)
    elif why == "float":
        block.columns["f"] = EncodedColumn("f", pa.float64(), Plain(rng.random(n).view(np.int64)), None, 0)
        outputs.append(NamedExpr("f", Col("f"), pa.float64()))
    elif why == "division":
        outputs.append(NamedExpr("q", Call("/", (Col("p"), Col("a"))), pa.float64()))
    else:
        names = pa.array([f"name {i}" for i in rng.integers(0, 1000, n)])
        block.columns["t"] = EncodedColumn("t", pa.string(), Plain(names), None, 0)
        outputs.append(NamedExpr("t", Col("t"), pa.string()))
    images = {name: ColumnImage.of(name, [column]) for name, column in block.columns.items()}
    predicate = Call(">", (Col("s"), random_literal(rng, "s")))
    assert fused_project.plan(images, [0], predicate, outputs) is None
    assert fused_project.may_fuse([block.columns], predicate, outputs) is (why == "division")  # asked first
    task = BlockTask(predicate, outputs=tuple(outputs))
    expected = run_block(task, block, get_backend("numpy"), ScanStats(), predicate)[0][0]
    got = run_block(task, block, get_backend("cupy"), ScanStats(), predicate)[0][0]
    assert got.equals(expected)
