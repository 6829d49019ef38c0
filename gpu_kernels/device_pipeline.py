"""The block pipeline on GPUs (seed 004 §5.1, Fig. 5.1): each device's memory is split into three
equal pools (compressed input, decoded data, results); while block i is evaluated on the compute
stream, block i+1's encoded parts are copied in on a copy stream from pinned host memory (the
buffers kept until the copies are done), and results are staged in the result pool and copied out
on the copy stream once the compute stream has made them. With several GPUs the blocks go
round-robin: blocks 0, 2, 4 to GPU 0, blocks 1, 3 to GPU 1, each GPU driven by a thread of its own.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator, Sequence
from typing import Any

import cupy
import cupyx
import numpy as np

from gpu_kernels.backend import DeviceOutOfMemory
from gpu_kernels.cupy_backend import stage_results
from gpu_kernels.pipeline import DeviceParts, Work


def device_map(
    jobs: Sequence[Any],
    work: Work,
    parts_of: Callable[[Any], list[np.ndarray]],
    cancel: threading.Event,
    memory: int | None = None,
) -> Iterator[Any]:
    """work(job, its parts on the device) for every job, over every device, results in job order;
    the scans on a device use `memory` bytes of it together (None: DEVICE_MEMORY_FRACTION of it)."""
    devices = cupy.cuda.runtime.getDeviceCount()
    shares = [list(range(d, len(jobs), devices)) for d in range(devices)]
    results: dict[int, Any] = {}
    ready = threading.Condition()
    errors: list[BaseException] = []

    def device_worker(device: int) -> None:
        try:
            with cupy.cuda.Device(device):
                lane = _DeviceLane(memory)
                for index, result in lane.run([jobs[i] for i in shares[device]], work, parts_of, cancel):
                    with ready:
                        results[shares[device][index]] = result
                        ready.notify_all()
        except BaseException as e:  # surfaced to the consumer below
            if isinstance(e, cupy.cuda.memory.OutOfMemoryError):
                e = _out_of_memory(device, memory, e)
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


DEVICE_MEMORY_FRACTION = 0.9  # of each device's memory, split into the three areas


class _Areas:
    """A device's three memory areas (compressed input, decoded data, results), pools of equal
    limits shared by every scan running on the device: however many run, together they stay within
    the budget (by default DEVICE_MEMORY_FRACTION of its memory), and one that needs more than is
    left fails alone."""

    def __init__(self, memory: int | None) -> None:
        self.size = _area_size(memory)
        self.input, self.decoded, self.result = (cupy.cuda.MemoryPool() for _ in range(3))
        for pool in (self.input, self.decoded, self.result):
            pool.set_limit(size=self.size)

    @classmethod
    def of_current_device(cls, memory: int | None) -> _Areas:
        key = (cupy.cuda.runtime.getDevice(), memory)
        with _AREAS_LOCK:
            if key not in _AREAS:
                _AREAS[key] = cls(memory)
            return _AREAS[key]


def _area_size(memory: int | None) -> int:
    """Bytes of each of the current device's three areas under a budget of `memory` (None: the
    default share of the device)."""
    if memory is None:
        memory = int(cupy.cuda.runtime.memGetInfo()[1] * DEVICE_MEMORY_FRACTION)
    return memory // 3


def block_budget(memory: int | None, scans: int) -> int:
    """BS of seed 004's rule (RC = BS / RS) on this machine's GPUs: the decoded-data area of the
    smallest, over the `scans` that may decode a block on it at once."""
    sizes = []
    for device in range(cupy.cuda.runtime.getDeviceCount()):
        with cupy.cuda.Device(device):
            sizes.append(_area_size(memory))
    return min(sizes) // max(1, scans)


_AREAS: dict[tuple[int, int | None], _Areas] = {}  # (device, budget) -> its areas
_AREAS_LOCK = threading.Lock()


def _out_of_memory(device: int, memory: int | None, error: BaseException) -> DeviceOutOfMemory:
    areas = _AREAS.get((device, memory))
    area = f" of {areas.size:,} bytes" if areas else ""
    return DeviceOutOfMemory(
        f"GPU {device} has no room left in a memory area{area} for this scan ({error}): fewer scans at once "
        "leave more to each, and a table loaded with a smaller storage.block_budget needs less per block"
    )


class _DeviceLane:
    """One GPU: its three memory areas and two streams, block i+1 copied in while block i runs."""

    def __init__(self, memory: int | None) -> None:
        self.areas = _Areas.of_current_device(memory)
        self.copy_stream = cupy.cuda.Stream(non_blocking=True)
        self.compute_stream = cupy.cuda.Stream(non_blocking=True)

    def _upload(self, parts: list[np.ndarray]) -> tuple[DeviceParts, Any, list[np.ndarray]]:
        """A block's parts copied in on the copy stream: the device arrays, the event after the
        copies, and the pinned host buffers, which must live until the copies are done."""
        uploaded: DeviceParts = {}
        staged = []
        with cupy.cuda.using_allocator(self.areas.input.malloc), self.copy_stream:
            for host in parts:
                pinned = cupyx.empty_pinned(host.shape, host.dtype)
                pinned[...] = host
                device = cupy.empty(host.shape, host.dtype)
                device.set(pinned, stream=self.copy_stream)
                uploaded[id(host)] = (host, device)
                staged.append(pinned)
            done = self.copy_stream.record()
        return uploaded, done, staged

    def run(self, jobs, work, parts_of, cancel) -> Iterator[tuple[int, Any]]:
        if not jobs:
            return
        stage_results(self.areas.result, self.copy_stream)
        upcoming = self._upload(parts_of(jobs[0]))
        try:
            for index, job in enumerate(jobs):
                if cancel.is_set():
                    return
                parts, copied, staged = upcoming
                if index + 1 < len(jobs):
                    upcoming = self._upload(parts_of(jobs[index + 1]))  # overlaps with this block's work
                self.compute_stream.wait_event(copied)
                with cupy.cuda.using_allocator(self.areas.decoded.malloc), self.compute_stream:
                    result = work(job, parts)
                self.compute_stream.synchronize()  # after the copies it waited for: their buffers may go
                del parts, staged
                yield index, result
        finally:  # stopped early (cancelled, failed): copies still in flight end before their buffers go
            self.copy_stream.synchronize()
