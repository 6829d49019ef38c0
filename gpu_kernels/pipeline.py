"""Running the per-block operator over a scan's blocks.

On the CPU, blocks are processed in order, on one thread until the scan has run for
`SPREAD_AFTER_S`, then on `threads` worker threads. On GPUs, the block pipeline of seed 004, its
device part (`gpu_kernels.device_pipeline`). Either way results come in the blocks' order.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import TypeVar

import numpy as np

from gpu_kernels.backend import NumpyBackend
from gpu_kernels.device_pipeline import Work, device_map
from gpu_kernels.encoded_block import EncodedBlock
from gpu_kernels.encodings import BitPacked, DeltaRunLength, Dictionary, Encoding, Plain, RunLength

Job = TypeVar("Job")
Result = TypeVar("Result")
SPREAD_AFTER_S = 0.05  # a CPU scan still running after this long goes on with `threads` threads


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
            yield from device_map(self.backend, jobs, work, parts_of, cancel)
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
