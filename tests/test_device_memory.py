"""Memory on the device: the scans on a GPU share a budget (`storage.device_memory`, four areas of a
fourth: the block pipeline's three and the resident columns'), a table larger than it goes through
within it (block by block, or streamed in chunks for an aggregate; a projection fused over resident
columns answers in the result area, or block by block where its answer would outgrow it), and a
scan that needs more than is left fails alone with `device_out_of_memory` while the node goes on.
What comes back to the host lands in pinned buffers, reused, within a limit."""

from __future__ import annotations

import types

import numpy as np
import pyarrow as pa
import pytest

from cxg.load import load_options
from gateway.background import serve
from gpu_kernels import cupy_backend, get_backend
from gpu_kernels.pinned import PinnedBuffers
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


@pytest.mark.gpu
def test_what_comes_back_lands_in_pinned_buffers_reused_within_a_limit(cupy_standin, monkeypatch) -> None:
    """An array read back lands in pinned host memory, in a buffer of a power-of-two size of at
    least 4 KiB, which comes back for the next of its size once no array (nor view) made in it is
    left; at most the limit's bytes held: past it the buffers kept are freed, and where that leaves
    no room, or the array passes PINNED_READ_BACK bytes, it lands in pageable memory."""
    import cupy
    import cupyx

    backend = get_backend("cupy")
    pinned = PinnedBuffers(cupy, cupyx, 32 << 10)
    monkeypatch.setattr(backend, "pinned", pinned)
    counts = cupy_standin.counts if cupy_standin is not None else None

    def read(n: int) -> np.ndarray:
        got = backend.copy_to_host(cupy.arange(n, dtype=cupy.int64).reshape(1, n))
        assert got.tolist() == [list(range(n))]
        return got

    small, larger = read(1), read(513)  # 8 bytes, 4,104 bytes
    assert (pinned.held, pinned.kept) == (4096 + 8192, {})
    view = larger[:, :3]
    del larger
    assert not pinned.returned  # its view holds its buffer
    del view
    assert [size for size, _ in pinned.returned] == [8192]  # back, kept at the next read-back
    again = read(600)  # 4,800 bytes: the same buffer
    assert pinned.held == 4096 + 8192 and not any(pinned.kept.values())
    del again, small
    assert read(0).shape == (1, 0) and pinned.held == 4096 + 8192  # nothing to copy: no buffer
    big = read(3000)  # 24,000 bytes: a buffer of 32 KiB, for which the two kept ones are freed
    assert pinned.held == 32 << 10 and not any(pinned.kept.values())
    if counts is not None:
        assert counts.pinned_released >= 2 and counts.to_host_pinned == counts.to_host
    before = (counts.to_host, counts.to_host_pinned) if counts is not None else None
    read(600)  # no room left beside the one in use: pageable memory
    monkeypatch.setattr(cupy_backend, "PINNED_READ_BACK", 1000)
    del big
    read(200)  # 1,600 bytes: past PINNED_READ_BACK
    if counts is not None:
        assert (counts.to_host - before[0], counts.to_host_pinned - before[1]) == (4800 + 1600, 0)
    assert pinned.held == 32 << 10

    def refused(*args: object) -> None:
        raise MemoryError("the host has no more to pin")

    fresh = PinnedBuffers(cupy, types.SimpleNamespace(empty_pinned=refused), 1 << 20)
    assert fresh.array((10,), np.int64) is None and fresh.held == 0  # refused by the host: pageable memory
    tight = PinnedBuffers(cupy, cupyx, 32 << 10)
    first, in_use = tight.array((1024,), np.int64), tight.array((4,), np.int64)  # 8 KiB and 4 KiB
    del first
    assert tight.array((4000,), np.int64) is None  # 32 KiB: freeing the kept 8 KiB would not make room
    assert tight.held == 12 << 10 and [len(b) for b in tight.kept.values()] == [1] and in_use.size == 4
