"""Timings on a GPU for `benchmarks.bench_gpu`: CUDA events around work after warm-up, and what the
design is measured against in the same run: the copy ceilings (device to device, host to device
from pinned and from pageable memory), the compressed-transfer sweep of the dissertation's Tables
5.1/5.2 and hash partitioning. Every function takes the `cupy` module in use (a GPU's, or the
stand-in's, where the times are the host's and mean nothing but that the code runs)."""

from __future__ import annotations

import statistics
from collections.abc import Callable
from typing import Any

import numpy as np

from gpu_kernels import bitpack, get_backend

WARM_UP = 2


def event_seconds(cupy: Any, work: Callable[[], Any], repeat: int) -> float:
    """The median of `repeat` runs of `work` timed with CUDA events on the current stream, after
    WARM_UP runs that are not counted (compilation, pool growth)."""
    for _ in range(WARM_UP):
        work()
    times = []
    for _ in range(repeat):
        start, end = cupy.cuda.Event(), cupy.cuda.Event()
        start.record()
        work()
        end.record()
        end.synchronize()
        times.append(cupy.cuda.get_elapsed_time(start, end) / 1000)
    return statistics.median(times)


def ceilings(cupy: Any, cupyx: Any, nbytes: int, repeat: int) -> dict[str, float]:
    """Bytes per second: a device-to-device copy (read and write counted once each, as a decoding
    kernel's effective bandwidth counts its output), host to device from pinned and from pageable
    memory, and device to host into pinned and into pageable memory."""
    host = np.random.default_rng(0).integers(0, 255, nbytes, dtype=np.uint8)
    pinned = cupyx.empty_pinned(nbytes, np.uint8)
    pinned[...] = host
    device, other = cupy.empty(nbytes, cupy.uint8), cupy.empty(nbytes, cupy.uint8)
    stream = cupy.cuda.get_current_stream()
    return {
        "device_to_device": 2 * nbytes / event_seconds(cupy, lambda: other.__setitem__(Ellipsis, device), repeat),
        "host_to_device_pinned": nbytes / event_seconds(cupy, lambda: device.set(pinned, stream=stream), repeat),
        "host_to_device_pageable": nbytes / event_seconds(cupy, lambda: device.set(host, stream=stream), repeat),
        "device_to_host_pinned": nbytes / event_seconds(cupy, lambda: device.get(stream=stream, out=pinned), repeat),
        "device_to_host_pageable": nbytes / event_seconds(cupy, lambda: device.get(stream=stream, out=host), repeat),
    }


BLOCK_MB = (0.4, 1, 4, 16, 64)
RATIOS = tuple(range(2, 11))


def compressed_transfer(
    cupy: Any, cupyx: Any, repeat: int, blocks_mb: tuple[float, ...] = BLOCK_MB, ratios: tuple[int, ...] = RATIOS
) -> list[dict[str, float]]:
    """Tables 5.1/5.2 redone: a block of int64 values moved plain (its bytes host to device) against
    moved compressed K times (bit-packed to 64/K bits) and decoded on the device, both from pinned
    memory; the speedup is plain time / (compressed transfer + decode)."""
    backend = get_backend("cupy")
    rng = np.random.default_rng(1)
    stream = cupy.cuda.get_current_stream()
    rows_of = {mb: int(mb * 1e6) // 8 for mb in blocks_mb}
    plain_time = {}
    for mb, rows in rows_of.items():
        pinned = cupyx.empty_pinned(rows * 8, np.uint8)
        target = cupy.empty(rows * 8, cupy.uint8)
        plain_time[mb] = event_seconds(cupy, lambda t=target, p=pinned: t.set(p, stream=stream), repeat)
    results = []
    for ratio in ratios:
        width = 64 // ratio
        for mb, rows in rows_of.items():
            packed = bitpack.pack(rng.integers(0, 1 << width, rows, dtype=np.uint64), width)
            pinned = cupyx.empty_pinned(packed.shape, np.uint8)
            pinned[...] = packed
            device = cupy.empty(packed.shape, cupy.uint8)

            def moved_and_decoded(d=device, p=pinned, r=rows, w=width) -> None:
                d.set(p, stream=stream)
                backend.unpack(d, w, 0, r)

            seconds = event_seconds(cupy, moved_and_decoded, repeat)
            results.append(
                {
                    "ratio": ratio,
                    "block_mb": mb,
                    "plain_s": plain_time[mb],
                    "compressed_s": seconds,
                    "speedup": plain_time[mb] / seconds,
                }
            )
    return results


def hash_partitioning(cupy: Any, cupyx: Any, rows: int, buckets: tuple[int, ...], repeat: int) -> dict[str, dict]:
    """Bytes of int64 keys per second moved into P buckets (the placement hash fused with a
    histogram, an exclusive scan and the write-combined scatter of the keys, no rows' numbers:
    `gpu_kernels/cuda/partition.cu`), for each P: with the keys left on the device, and copied into
    pinned host memory."""
    backend = get_backend("cupy")
    keys = cupy.asarray(np.random.default_rng(2).integers(0, 1 << 40, rows)).view(cupy.uint64)
    pinned = cupyx.empty_pinned(rows, dtype=np.uint64)

    def on_device(p: int) -> Any:
        return backend.partition_keys([keys], p, [keys], numbered=False).moved[0]

    return {
        str(p): {
            "on_device": rows * 8 / event_seconds(cupy, lambda p=p: on_device(p), repeat),
            "to_pinned_host": rows * 8 / event_seconds(cupy, lambda p=p: on_device(p).get(out=pinned), repeat),
        }
        for p in buckets
    }
