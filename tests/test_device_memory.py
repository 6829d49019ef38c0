"""Memory on the device: the scans on a GPU share a budget (`storage.device_memory`, four areas of a
fourth: the block pipeline's three and the resident columns'), a table larger than it goes through
within it (block by block, or streamed in chunks for an aggregate; a projection fused over resident
columns answers in the result area, or block by block where its answer would outgrow it), and a
scan that needs more than is left fails alone with `device_out_of_memory` while the node goes on.
What comes back to the host lands in pinned buffers of a few sizes."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pytest

from cxg.load import load_options
from gateway.background import serve
from gpu_kernels import cupy_backend, get_backend
from regions import load_config
from storage import LoadOptions, Node, NodeClient, NodeError, Store, TableCache, TableSchema, load_table, scan_table
from tests.waiting import eventually

BUDGET = 4 << 20  # bytes of the device the scans may use: areas of 1 MiB


@pytest.fixture
def store(tmp_path) -> Store:
    store = Store(tmp_path / "node", node="node-gpu")
    rng = np.random.default_rng(9)
    rows = 400_000
    big = pa.table({f"c{i}": rng.integers(0, 1 << 40, rows) for i in range(4)})
    load_table([store], TableSchema.from_arrow("big", big.schema), big, LoadOptions(block_budget=640_000))
    tiny = pa.table({"x": pa.array(range(100), pa.int64())})
    load_table([store], TableSchema.from_arrow("tiny", tiny.schema), tiny)
    narrow = pa.table({"x": rng.integers(0, 8, rows), "y": rng.integers(0, 1 << 12, rows)})  # a few bits a value
    load_table([store], TableSchema.from_arrow("narrow", narrow.schema), narrow, LoadOptions(block_budget=160_000))
    return store


@pytest.fixture
def cupy_node(store: Store, request: pytest.FixtureRequest):
    backend = get_backend("cupy")
    backend.device_memory = request.param
    try:
        with serve(Node(store, backend, slots=2).app()) as url:
            yield NodeClient(url)
    finally:
        del backend.device_memory


COUNT_SUM = [{"name": "n", "func": "count"}, {"name": "s", "func": "sum", "arg": {"col": "c1"}}]
SELECTIVE = {"table": "big", "columns": ["c0", "c2"], "filter": {"op": "<", "args": [{"col": "c3"}, {"lit": 1 << 30}]}}
REQUESTS = [  # streamed in chunks (an aggregate, a projection), and block by block (partitioned)
    {"table": "big", "aggregates": COUNT_SUM},
    SELECTIVE,
    {**SELECTIVE, "partition": {"keys": ["c0"], "buckets": 4}},
]


def _expected(store: Store, request: dict) -> pa.Table:
    scan = scan_table(TableCache(store), request, get_backend("numpy"))
    return pa.Table.from_batches([p.batch for p in scan.pieces()], schema=scan.plan.schema)


@pytest.mark.gpu
@pytest.mark.parametrize("cupy_node", [BUDGET], indirect=True)
def test_a_table_larger_than_the_device_budget_goes_through_within_it(store, cupy_node, cupy_standin) -> None:
    encoded = sum(block.nbytes for _, block in TableCache(store).get("big").blocks)
    assert encoded > BUDGET  # the table does not fit the device's budget at once
    for request in REQUESTS:
        partials, _ = cupy_node.scan_table(request)
        expected = _expected(store, request)
        if "columns" in request:  # streamed, its answer in one; partitioned: block by block
            assert partials.sort_by("c0").equals(expected.sort_by("c0"))
        else:  # streamed in chunks (`gpu_kernels.streamed`): a partial row a chunk
            assert 1 < partials.num_rows < expected.num_rows
            assert pc_sum(partials, "s") == pc_sum(expected, "s") and pc_sum(partials, "n") == 400_000
    if cupy_standin is not None:  # the stand-in records what each area held at most
        [areas] = [a for (_, memory), a in get_backend("cupy").areas.items() if memory == BUDGET]
        assert 0 < max(pool.peak for pool in (areas.input, areas.decoded, areas.result)) <= areas.size == BUDGET // 4
        [resident] = [a for (_, memory), a in get_backend("cupy").resident.items() if memory == BUDGET]
        assert resident.budget == BUDGET // 4 and resident.residency.loads == 0  # no column of big fits it


@pytest.mark.gpu
@pytest.mark.parametrize("cupy_node", [BUDGET], indirect=True)
def test_a_projection_whose_answer_outgrows_the_result_area_goes_block_by_block(store, cupy_node, cupy_standin):
    """The columns of `narrow` fit the resident area, so its projections are fused over them, their
    answer in the result area; one whose answer (8 bytes a value) would outgrow it is answered by the
    block pipeline instead, block by block within the budget. Both equal the NumPy backend's."""
    selective = {"table": "narrow", "columns": ["x", "y"], "filter": {"op": "<", "args": [{"col": "y"}, {"lit": 64}]}}
    everything = {"table": "narrow", "columns": ["x", "y"]}
    order = [("y", "ascending"), ("x", "ascending")]
    waits = []
    for request in (selective, everything):
        before = cupy_standin.counts.syncs if cupy_standin is not None else 0
        got, _ = cupy_node.scan_table(request)
        assert got.sort_by(order).equals(_expected(store, request).sort_by(order))
        waits.append(cupy_standin.counts.syncs - before if cupy_standin is not None else None)
    if cupy_standin is not None:  # fused: the count and the answer; then block by block: a wait a block
        assert waits[0] == 2 and waits[1] > len(TableCache(store).get("narrow").blocks) >= 40
        [resident] = [a for (_, memory), a in get_backend("cupy").resident.items() if memory == BUDGET]
        assert resident.residency.loads == 2  # x and y, kept for the second
        [areas] = [a for (_, memory), a in get_backend("cupy").areas.items() if memory == BUDGET]
        assert 0 < areas.result.peak <= areas.size


def pc_sum(table: pa.Table, column: str) -> int:
    return sum(v for v in table.column(column).to_pylist() if v is not None)


@pytest.mark.gpu
@pytest.mark.parametrize("cupy_node", [30_000], indirect=True)
def test_a_scan_past_the_device_memory_fails_alone_and_the_node_goes_on(cupy_node) -> None:
    for request in REQUESTS:
        with pytest.raises(NodeError) as failed:
            cupy_node.scan_table(request)
        assert failed.value.code == "device_out_of_memory" and "GPU 0 has no room left" in str(failed.value)
    total = {"name": "s", "func": "sum", "arg": {"col": "x"}}
    partials, _ = cupy_node.scan_table({"table": "tiny", "aggregates": [total]})
    assert partials.column("s").to_pylist() == [4950]

    def released() -> dict | None:  # a slot is freed once its answer is sent: after the client has read it
        info = cupy_node.get("/v1/node")
        return info if info["free_slots"] == info["slots"] == 2 else None

    assert eventually(released, 10, "both slots free once the scans answered")["backend"] == "cupy"


@pytest.mark.gpu
def test_blocks_are_sized_by_the_rule_from_the_device_budget() -> None:
    """RC = BS / RS with BS the decoded-data area (a fourth of the budget) over the scans sharing it."""
    config = load_config(None, ["storage.device_memory=4GiB", "region.slots=4"])
    assert load_options(config).block_budget == (4 << 30) // 4 // 4
    import cupy

    default = int(cupy.cuda.runtime.memGetInfo()[1] * 0.9) // 4 // 4
    assert load_options(load_config(None, ["region.slots=4"])).block_budget == default
    on_cpu = load_config(None, ["storage.backend=numpy"])
    assert load_options(on_cpu).block_budget == on_cpu.storage.block_budget == 64 << 20


def _buffer(array: np.ndarray) -> np.ndarray:
    """The host array a view is of."""
    while isinstance(array.base, np.ndarray):
        array = array.base
    return array


@pytest.mark.gpu
def test_what_comes_back_lands_in_pinned_buffers_of_a_few_sizes(cupy_standin, monkeypatch) -> None:
    """An array read back lands in pinned host memory, in a buffer of a power-of-two size of at
    least 4 KiB (CuPy's pinned pool reuses a freed buffer for the same size only); one past
    PINNED_READ_BACK bytes, in pageable memory of its own size."""
    import cupy

    backend = get_backend("cupy")
    sizes = set()
    for n in (0, 1, 500, 513, 1000, 4000, 5000):
        got = backend.copy_to_host(cupy.arange(n, dtype=cupy.int64).reshape(1, n))
        assert got.shape == (1, n) and got.tolist() == [list(range(n))]
        sizes.add(_buffer(got).nbytes)
    assert sizes == {4096, 8192, 32768, 65536}
    if cupy_standin is not None:
        assert cupy_standin.counts.to_host_pinned == cupy_standin.counts.to_host
        allocated = cupy_standin.counts.pinned
        for n in range(1000, 5000, 100):  # 40 sizes, each answer dropped at once: the pool's buffers reused
            backend.copy_to_host(cupy.zeros(n, cupy.int64))
        assert cupy_standin.counts.pinned - allocated <= 4
    monkeypatch.setattr(cupy_backend, "PINNED_READ_BACK", 1000)
    got = backend.copy_to_host(cupy.arange(200, dtype=cupy.int64))
    assert got.tolist() == list(range(200)) and _buffer(got).nbytes == 1600
    if cupy_standin is not None:
        assert cupy_standin.counts.to_host - cupy_standin.counts.to_host_pinned == 1600
