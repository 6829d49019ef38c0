"""Running the per-block operator over a scan's blocks.

On the CPU, blocks are processed in order, on one thread until the scan has run for
`SPREAD_AFTER_S`, then on `threads` worker threads. On GPUs the block
pipeline of seed 004 (§5.1, Fig. 5.1): each device's memory is split into three equal pools
(compressed input, decoded data, results); while block i is evaluated on the compute stream,
block i+1's encoded parts are copied in on a second stream from pinned host memory, and results
are staged in the result pool before they are copied out. With several GPUs the blocks go
round-robin: blocks 0, 2, 4 to GPU 0, blocks 1, 3 to GPU 1.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any, TypeVar

import numpy as np

from gpu_kernels.backend import NumpyBackend
from gpu_kernels.encoded_block import EncodedBlock
from gpu_kernels.encodings import BitPacked, DeltaRunLength, Dictionary, Encoding, Plain, RunLength

Job = TypeVar("Job")
Result = TypeVar("Result")
SPREAD_AFTER_S = 0.05  # a CPU scan still running after this long goes on with `threads` threads
DeviceParts = dict[int, tuple[np.ndarray, Any]]
Work = Callable[[Any, DeviceParts | None], Any]


def host_parts(encoding: Encoding) -> list[np.ndarray]:
    """The NumPy arrays an encoding's kernels read on the device."""
    if isinstance(encoding, Plain):
        return [encoding.values] if isinstance(encoding.values, np.ndarray) else []
    if isinstance(encoding, BitPacked):
        return [encoding.packed]
    if isinstance(encoding, RunLength):
        values = [encoding.values] if isinstance(encoding.values, np.ndarray) else []
        return [encoding.run_ends, *values]
    if isinstance(encoding, DeltaRunLength):
        return host_parts(encoding.deltas)
    if isinstance(encoding, Dictionary):
        dictionary = [encoding.dictionary] if isinstance(encoding.dictionary, np.ndarray) else []
        return dictionary + host_parts(encoding.codes)
    return []


def block_parts(block: EncodedBlock, columns: Sequence[str]) -> list[np.ndarray]:
    return [part for name in columns if name in block.columns for part in host_parts(block.columns[name].encoding)]


class BlockPipeline:
    def __init__(self, backend: NumpyBackend, threads: int = 1):
        self.backend = backend
        self.threads = max(1, threads)

    def map(
        self, jobs: Sequence[Job], work: Work, parts_of: Callable[[Job], list[np.ndarray]], cancel: threading.Event
    ) -> Iterator[Result]:
        """work(job, prefetched device parts or None) for every job, results in job order."""
        if self.backend.name == "cupy":
            yield from self._gpu_map(jobs, work, parts_of, cancel)
            return
        # a short scan stays on one thread (a pool costs it more than it saves); a long one spreads
        started = time.perf_counter()
        for i, job in enumerate(jobs):
            if cancel.is_set():
                return
            if self.threads > 1 and i + 1 < len(jobs) and time.perf_counter() - started > SPREAD_AFTER_S:
                yield from self._pooled(jobs[i:], work, cancel)
                return
            yield work(job, None)

    def _pooled(self, jobs: Sequence[Job], work: Work, cancel: threading.Event) -> Iterator[Result]:
        with ThreadPoolExecutor(self.threads) as pool:
            pending = [pool.submit(lambda j=job: None if cancel.is_set() else work(j, None)) for job in jobs]
            try:
                for future in pending:
                    result = future.result()
                    if cancel.is_set():
                        return
                    yield result
            finally:
                for future in pending:
                    future.cancel()

    def _gpu_map(self, jobs, work, parts_of, cancel) -> Iterator[Result]:
        import cupy

        devices = cupy.cuda.runtime.getDeviceCount()
        shares = [list(range(d, len(jobs), devices)) for d in range(devices)]
        results: dict[int, Any] = {}
        ready = threading.Condition()
        errors: list[BaseException] = []

        def device_worker(device: int) -> None:
            try:
                with cupy.cuda.Device(device):
                    lane = _DeviceLane()
                    for index, result in lane.run([jobs[i] for i in shares[device]], work, parts_of, cancel):
                        with ready:
                            results[shares[device][index]] = result
                            ready.notify_all()
            except BaseException as e:  # surfaced to the consumer below
                with ready:
                    errors.append(e)
                    ready.notify_all()

        workers = [threading.Thread(target=device_worker, args=(d,), daemon=True) for d in range(devices)]
        for w in workers:
            w.start()
        for i in range(len(jobs)):
            with ready:
                ready.wait_for(lambda i=i: i in results or errors or cancel.is_set())
                if errors:
                    raise errors[0]
                if cancel.is_set():
                    return
                yield results.pop(i)
        for w in workers:
            w.join()


class _DeviceLane:
    """One GPU: three memory pools and two streams, block i+1 copied in while block i runs."""

    AREAS = 3

    def __init__(self) -> None:
        import cupy

        free, _ = cupy.cuda.runtime.memGetInfo()
        area = int(free * 0.9) // self.AREAS
        self.input_pool, self.decoded_pool, self.result_pool = (cupy.cuda.MemoryPool() for _ in range(self.AREAS))
        for pool in (self.input_pool, self.decoded_pool, self.result_pool):
            pool.set_limit(size=area)
        self.copy_stream = cupy.cuda.Stream(non_blocking=True)
        self.compute_stream = cupy.cuda.Stream(non_blocking=True)

    def _upload(self, parts: list[np.ndarray]) -> tuple[DeviceParts, Any]:
        import cupy
        import cupyx

        uploaded: DeviceParts = {}
        with cupy.cuda.using_allocator(self.input_pool.malloc), self.copy_stream:
            for host in parts:
                pinned = cupyx.empty_pinned(host.shape, host.dtype)
                pinned[...] = host
                device = cupy.empty(host.shape, host.dtype)
                device.set(pinned, stream=self.copy_stream)
                uploaded[id(host)] = (host, device)
            done = self.copy_stream.record()
        return uploaded, done

    def run(self, jobs, work, parts_of, cancel) -> Iterator[tuple[int, Any]]:
        import cupy

        from gpu_kernels.cupy_backend import stage_results

        if not jobs:
            return
        stage_results(self.result_pool, self.copy_stream)
        upcoming = self._upload(parts_of(jobs[0]))
        for index, job in enumerate(jobs):
            if cancel.is_set():
                return
            parts, copied = upcoming
            if index + 1 < len(jobs):
                upcoming = self._upload(parts_of(jobs[index + 1]))  # overlaps with this block's work
            self.compute_stream.wait_event(copied)
            with cupy.cuda.using_allocator(self.decoded_pool.malloc), self.compute_stream:
                result = work(job, parts)
            self.compute_stream.synchronize()
            del parts
            yield index, result
