"""Scans streamed from host memory through the fused kernels (`gpu_kernels.streamed`): random
predicates, keys and aggregates over random blocks in chunks of any size, through the strict stand-in
of CuPy (which fails a kernel reading a copy it was not ordered after, and a pinned buffer freed
under its copy): the answers equal the NumPy backend's, with one wait for the device per scan and
the ring's pinned memory kept across scans."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pytest

from benchmarks.kernel_checks import final_rows, random_aggregates, random_block, random_keys, random_predicate
from gpu_kernels import AggSpec, BlockTask, Call, Col, NamedExpr, ScanStats, get_backend, plan_streamed, run_block


@pytest.mark.gpu
@pytest.mark.parametrize("chunk_bytes", [1, 20_000, 1 << 30], ids=["a block a chunk", "a few blocks", "one chunk"])
def test_streamed_scans_in_chunks_equal_the_general_kernels_with_one_wait(cupy_standin, chunk_bytes: int) -> None:
    rng = np.random.default_rng(chunk_bytes % 97)
    numpy, cupy = get_backend("numpy"), get_backend("cupy")
    counts = cupy_standin.counts
    compared = 0
    for _ in range(12):
        blocks = [random_block(rng, int(rng.choice([1, 255, 3000]))) for _ in range(int(rng.integers(1, 8)))]
        chosen = sorted(int(b) for b in rng.choice(len(blocks), int(rng.integers(1, len(blocks) + 1)), replace=False))
        predicate = random_predicate(rng) if rng.random() < 0.8 else None
        task = BlockTask(predicate, keys=tuple(random_keys(rng)), aggregates=tuple(random_aggregates(rng)))
        expected = final_rows([run_block(task, blocks[b], numpy, ScanStats(), predicate)[0][0] for b in chosen], task)
        scan = plan_streamed(blocks, chosen, predicate, list(task.keys), list(task.aggregates), chunk_bytes)
        if scan is None:  # a shape the fused kernels leave to the general ones (a key of too many groups)
            continue
        waits, pinned = counts.syncs, counts.pinned
        accumulators = scan.run(cupy)
        assert counts.syncs - waits == 1
        assert counts.pinned - pinned <= 3  # each slot grown at most once a scan, to its largest chunk; the answer's
        assert final_rows(scan.assemble(scan.run(cupy)), task) == expected  # its answer's buffer back to the pool
        again, waits = counts.pinned, counts.syncs
        assert final_rows(scan.assemble(scan.run(cupy)), task) == expected
        assert (counts.pinned, counts.syncs) == (again, waits + 1)  # the same ring and answer's buffer: none allocated
        assert final_rows(scan.assemble(accumulators), task) == expected
        selected = sum(chunk.selected(a) for chunk, a in zip(scan.chunks, accumulators, strict=True))
        assert selected == sum(row["n"] for row in expected)
        if chunk_bytes == 1:
            assert len(scan.chunks) == len(chosen)
        compared += 1
    assert compared >= 8


@pytest.mark.gpu
def test_on_a_busy_device_a_ring_slot_is_packed_again_once_its_copy_is_done(cupy_standin) -> None:
    """With events not done until waited for (a device still busy), the host waits for a slot's
    previous copy before packing it again: one wait per chunk past the ring's, then the read-back."""
    rng = np.random.default_rng(8)
    blocks = [random_block(rng, 3000) for _ in range(5)]
    task = BlockTask(None, keys=(), aggregates=tuple(random_aggregates(rng)))
    numpy, cupy = get_backend("numpy"), get_backend("cupy")
    expected = final_rows([run_block(task, b, numpy, ScanStats(), None)[0][0] for b in blocks], task)
    scan = plan_streamed(blocks, range(5), None, [], list(task.aggregates), chunk_bytes=1)
    assert scan is not None and len(scan.chunks) == 5
    cupy_standin.slow_device = True
    try:
        waits = cupy_standin.counts.syncs
        accumulators = scan.run(cupy)
        assert cupy_standin.counts.syncs - waits == 5 - 2 + 1
    finally:
        cupy_standin.slow_device = False
    assert final_rows(scan.assemble(accumulators), task) == expected


@pytest.mark.gpu
def test_what_the_fused_kernels_cannot_run_is_not_streamed() -> None:
    rng = np.random.default_rng(2)
    blocks = [random_block(rng, 300)]
    count = [AggSpec("n", "count", None, pa.int64())]
    assert plan_streamed(blocks, [0], None, [], count) is None  # no column to read
    twice = NamedExpr("twice", Call("+", (Col("a"), Col("a"))), pa.int64())  # a key that is an expression
    assert plan_streamed(blocks, [0], None, [twice], count) is None
