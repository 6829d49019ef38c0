"""Every operation a backend implements, on NumPy and on CuPy (a device, or the strict stand-in of
`benchmarks.cupy_standin`), against the same NumPy reference, over sizes from empty to several blocks of
lanes and over the dtypes the kernels give them; and the device pipeline itself: blocks round-robin
over one or two devices, results in order, a failing block's error surfaced, a cancelled scan stopped."""

from __future__ import annotations

import itertools
import threading

import numpy as np
import pytest

from gpu_kernels import BlockPipeline, bitpack, bucket_ids, get_backend

BACKENDS = [
    pytest.param("numpy"),
    pytest.param("cupy", marks=pytest.mark.gpu),
    pytest.param("cupy", marks=pytest.mark.gpu(devices=2), id="cupy-2-devices"),
]
SIZES = [0, 1, 7, 8, 9, 1000, 70_000]


def _check(backend, got, expected) -> None:
    got = backend.to_host(got)
    assert isinstance(got, np.ndarray) and got.dtype == expected.dtype, (got, expected)
    np.testing.assert_array_equal(got, expected)


@pytest.mark.parametrize("backend_name", BACKENDS)
@pytest.mark.parametrize("width", [0, 1, 3, 7, 8, 13, 16, 31, 32, 45, 56])
def test_bit_unpacking_in_ranges_at_rows_and_summed(backend_name: str, width: int) -> None:
    backend = get_backend(backend_name)
    rng = np.random.default_rng(width)
    for n in SIZES:
        values = rng.integers(0, 1 << width, n, dtype=np.uint64) if width else np.zeros(n, np.uint64)
        packed = backend.asarray(bitpack.pack(values, width))
        start, stop = n // 5, n - n // 7
        unpacked = backend.to_host(backend.unpack(packed, width, start, stop))
        np.testing.assert_array_equal(unpacked.astype(np.uint64), values[start:stop])
        rows = np.sort(rng.choice(n, n // 3, replace=False)) if n else np.zeros(0, np.int64)
        at = backend.to_host(backend.unpack_at(packed, width, backend.asarray(rows.astype(np.int64))))
        assert at.dtype == np.int64
        np.testing.assert_array_equal(at.astype(np.uint64), values[rows])
        assert backend.packed_sum(packed, width, start, stop) == int(values[start:stop].astype(object).sum())


@pytest.mark.parametrize("backend_name", BACKENDS)
def test_sums_runs_and_segments(backend_name: str) -> None:
    backend = get_backend(backend_name)
    rng = np.random.default_rng(1)
    for n in SIZES:
        offsets = rng.integers(0, 1 << 56, n, dtype=np.uint64)  # what bit-packed columns hold: sums pass 2**64
        mask = rng.random(n) < 0.4
        assert backend.masked_sum(backend.asarray(offsets), backend.asarray(mask)) == int(
            offsets[mask].astype(object).sum()
        )
        values = rng.integers(-(1 << 40), 1 << 40, n)
        assert backend.to_host(values) is values  # already on the host
        counts = rng.integers(0, 4, n)
        _check(backend, backend.repeat(backend.asarray(values), backend.asarray(counts)), np.repeat(values, counts))
        starts = np.flatnonzero(np.r_[True, rng.random(n - 1) < 0.2]) if n else np.zeros(0, np.int64)
        expected = np.add.reduceat(values, starts) if n else np.zeros(0, values.dtype)
        _check(backend, backend.segment_sum(backend.asarray(values), backend.asarray(starts)), expected)


@pytest.mark.parametrize("backend_name", BACKENDS)
@pytest.mark.parametrize("dtype", ["int8", "uint8", "int16", "int32", "uint32", "int64", "uint64", "float64"])
def test_groups_min_max_sum_count_and_distinct(backend_name: str, dtype: str) -> None:
    backend = get_backend(backend_name)
    rng = np.random.default_rng(7)
    floats = dtype.startswith("float")
    info = np.finfo(dtype) if floats else np.iinfo(dtype)
    empty_low, empty_high = (np.inf, -np.inf) if floats else (info.max, info.min)  # a group of no rows
    for n in SIZES:
        groups = max(1, n // 10)
        gid = rng.integers(0, groups, n)
        if floats:
            values = rng.normal(0, 1e6, n)
        else:
            values = rng.integers(max(info.min, -(1 << 40)), min(info.max, 1 << 40), n, dtype=dtype, endpoint=True)
        low = np.full(groups, empty_low, dtype=dtype)
        high = np.full(groups, empty_high, dtype=dtype)
        np.minimum.at(low, gid, values)
        np.maximum.at(high, gid, values)
        device_gid, device_values = backend.asarray(gid), backend.asarray(values)
        _check(backend, backend.group_min(device_gid, device_values, groups), low)
        _check(backend, backend.group_max(device_gid, device_values, groups), high)
        _check(backend, backend.group_count(device_gid, groups), np.bincount(gid, minlength=groups).astype(np.int64))
        if dtype in ("int64", "float64"):
            got = backend.to_host(backend.group_sum(device_gid, device_values, groups))
            expected = np.zeros(groups, dtype=dtype)
            np.add.at(expected, gid, values)
            if floats:  # added in the device's order: within rounding of the sum of the magnitudes
                magnitude = np.zeros(groups)
                np.add.at(magnitude, gid, np.abs(values))
                assert np.all(np.abs(got - expected) <= 1e-12 * magnitude)
            else:
                np.testing.assert_array_equal(got, expected)
        uniques, inverse = backend.unique_inverse(device_values)
        uniques, inverse = backend.to_host(uniques), backend.to_host(inverse)
        np.testing.assert_array_equal(uniques[inverse], values)
        assert len(uniques) == len(np.unique(values))


@pytest.mark.parametrize("backend_name", BACKENDS)
def test_partition_is_a_stable_scatter_by_bucket(backend_name: str) -> None:
    backend = get_backend(backend_name)
    rng = np.random.default_rng(3)
    for n, count in itertools.product(SIZES, (5, 300, 70_000)):  # sorted as 8, 16 and 32-bit keys
        buckets = rng.integers(0, count, n)
        order, counts, offsets = backend.partition(backend.asarray(buckets), count)
        expected_counts = np.bincount(buckets, minlength=count).astype(np.int64)
        _check(backend, counts, expected_counts)
        _check(backend, offsets, np.cumsum(expected_counts) - expected_counts)
        _check(backend, order, np.argsort(buckets, kind="stable"))


@pytest.mark.parametrize("backend_name", BACKENDS)
@pytest.mark.parametrize("columns", [1, 2])
def test_partitioning_by_the_placement_hash_places_every_row_in_its_bucket(backend_name: str, columns: int) -> None:
    backend = get_backend(backend_name)
    rng = np.random.default_rng(5)
    for n in SIZES:
        for count in (1, 7, 256, 1024, 1025):  # past the partitioning kernels' shared memory, the general path
            inputs = [rng.integers(0, 1 << 62, n).astype(np.uint64) for _ in range(columns)]
            payload = [rng.integers(-(1 << 31), 1 << 31, n).astype(np.int32), rng.random(n) < 0.3][:columns]
            parts = backend.partition_keys(
                [backend.asarray(i) for i in inputs], count, list(map(backend.asarray, payload))
            )
            order, counts, offsets = (backend.to_host(a) for a in parts[:3])
            for moved, values in zip(parts.moved, payload, strict=True):  # each value moved with its row
                np.testing.assert_array_equal(backend.to_host(moved), values[order])
            ids = bucket_ids(np, inputs, count)
            expected_counts = np.bincount(ids, minlength=count).astype(np.int64)
            np.testing.assert_array_equal(counts, expected_counts)
            np.testing.assert_array_equal(offsets, np.cumsum(expected_counts) - expected_counts)
            assert np.array_equal(np.sort(order), np.arange(n))  # a permutation ...
            np.testing.assert_array_equal(ids[order], np.repeat(np.arange(count), counts))  # ... bucket by bucket


# ---- the device pipeline -----------------------------------------------------------------------------


def _jobs(count: int) -> list[np.ndarray]:
    return [np.arange(i * 10, i * 10 + 10 + i, dtype=np.int64) for i in range(count)]


def _work(backend):
    def work(job: np.ndarray, parts):
        device = parts[id(job)][1] if parts else backend.asarray(job)
        return backend.device(), int(backend.to_host((device * 2).sum()))

    return work


@pytest.mark.parametrize("backend_name", BACKENDS)
def test_the_pipeline_answers_every_block_in_order_round_robin_over_the_devices(
    backend_name: str, cupy_standin
) -> None:
    backend = get_backend(backend_name)
    jobs = _jobs(7)
    results = list(BlockPipeline(backend, 2).map(jobs, _work(backend), lambda job: [job], threading.Event()))
    assert [total for _, total in results] == [int(job.sum() * 2) for job in jobs]
    devices = cupy_standin.devices if cupy_standin else (1 if backend.name == "cupy" else 0)
    if backend.name == "cupy":
        assert [device for device, _ in results] == [i % devices for i in range(len(jobs))]
    else:
        assert {device for device, _ in results} == {-1}
    assert list(BlockPipeline(backend).map([], _work(backend), lambda job: [job], threading.Event())) == []


@pytest.mark.parametrize("backend_name", BACKENDS)
def test_a_failing_block_fails_the_scan_and_a_cancelled_one_stops(backend_name: str) -> None:
    backend = get_backend(backend_name)
    jobs = _jobs(5)

    def failing(job, parts):
        if job[0] == 30:
            raise ValueError("block 3 is corrupt")
        return int(job[0])

    with pytest.raises(ValueError, match="block 3 is corrupt"):
        list(BlockPipeline(backend).map(jobs, failing, lambda job: [job], threading.Event()))
    cancel = threading.Event()

    def cancelling(job, parts):
        if job[0] == 10:
            cancel.set()
        return int(job[0])

    got = list(BlockPipeline(backend).map(jobs, cancelling, lambda job: [job], cancel))
    assert got == [0, 10][: len(got)], got  # nothing past the block that cancelled
