"""The block pipeline on GPUs (seed 004 §5.1, Fig. 5.1): each device's memory is split into three
equal pools (compressed input, decoded data, results); while block i is evaluated on the compute
stream, block i+1's encoded parts are copied in on a copy stream from pinned host memory (the
buffers kept until the copies are done), and results are staged in the result pool and copied out
on the copy stream once the compute stream has made them. With several GPUs the blocks go
round-robin: blocks 0, 2, 4 to GPU 0, blocks 1, 3 to GPU 1, each GPU driven by a thread of its own.

It runs on the CuPy backend it is given (its `cupy`, and the areas its scans share); the CPU side of
the pipeline is `gpu_kernels.pipeline`, which hands GPU scans to it.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator, Sequence
from typing import Any

import numpy as np

from gpu_kernels.backend import DeviceOutOfMemory
from gpu_kernels.cupy_backend import CupyBackend

DeviceParts = dict[int, tuple[np.ndarray, Any]]  # id(host array) -> (host array, its device copy)
Work = Callable[[Any, DeviceParts | None], Any]  # work(job, its parts on the device, or None on the CPU)


def device_map(
    backend: CupyBackend,
    jobs: Sequence[Any],
    work: Work,
    parts_of: Callable[[Any], list[np.ndarray]],
    cancel: threading.Event,
) -> Iterator[Any]:
    """work(job, its parts on the device) for every job, over every device, results in job order;
    the scans on a device use `backend.device_memory` bytes of it together (None:
    DEVICE_MEMORY_FRACTION of it)."""
    cupy = backend.xp
    devices = cupy.cuda.runtime.getDeviceCount()
    shares = [list(range(d, len(jobs), devices)) for d in range(devices)]
    results: dict[int, Any] = {}
    ready = threading.Condition()
    errors: list[BaseException] = []
    finished = threading.Event()  # the consumer stopped (a LIMIT reached, a failure): no more blocks

    def stopped() -> bool:
        return cancel.is_set() or finished.is_set()

    def device_worker(device: int) -> None:
        try:
            with cupy.cuda.Device(device):
                lane = _DeviceLane(backend)
                for index, result in lane.run([jobs[i] for i in shares[device]], work, parts_of, stopped):
                    with ready:
                        results[shares[device][index]] = result
                        ready.notify_all()
        except BaseException as e:  # surfaced to the consumer below
            if isinstance(e, cupy.cuda.memory.OutOfMemoryError):
                e = device_out_of_memory(backend, device, e)
            with ready:
                errors.append(e)
                ready.notify_all()

    workers = [
        threading.Thread(target=device_worker, args=(d,), name=f"cxg-device-{d}", daemon=True) for d in range(devices)
    ]
    for w in workers:
        w.start()
    try:
        for i in range(len(jobs)):
            with ready:
                ready.wait_for(lambda i=i: i in results or errors or cancel.is_set())
                if errors:
                    raise errors[0]
                if cancel.is_set():
                    return
                yield results.pop(i)
    finally:  # whatever ended it, the devices stop after their current block, before the scan ends
        finished.set()
        for w in workers:
            w.join()


DEVICE_MEMORY_FRACTION = 0.9  # of each device's memory, split into four areas: the three below, resident columns


class DeviceAreas:
    """A device's three memory areas (compressed input, decoded data, results), pools of equal
    limits shared by every scan running on the device: however many run, together they stay within
    their share of the budget (by default DEVICE_MEMORY_FRACTION of its memory; the fourth share is
    the resident columns', `gpu_kernels.resident`), and one that needs more than is left fails alone."""

    def __init__(self, cupy: Any, memory: int | None) -> None:
        self.size = area_size(cupy, memory)
        self.input, self.decoded, self.result = (cupy.cuda.MemoryPool() for _ in range(3))
        for pool in (self.input, self.decoded, self.result):
            pool.set_limit(size=self.size)

    @classmethod
    def of_current_device(cls, backend: CupyBackend) -> DeviceAreas:
        key = (backend.xp.cuda.runtime.getDevice(), backend.device_memory)
        with backend.areas_lock:
            if key not in backend.areas:
                backend.areas[key] = cls(backend.xp, backend.device_memory)
            return backend.areas[key]


def area_size(cupy: Any, memory: int | None) -> int:
    """Bytes of each of the current device's four areas under a budget of `memory` (None: the
    default share of the device)."""
    if memory is None:
        memory = int(cupy.cuda.runtime.memGetInfo()[1] * DEVICE_MEMORY_FRACTION)
    return memory // 4


def block_budget(memory: int | None, scans: int) -> int:
    """BS of seed 004's rule (RC = BS / RS) on this machine's GPUs: the decoded-data area of the
    smallest, over the `scans` that may decode a block on it at once."""
    import cupy  # the gpu extra: asked only where CuPy finds a device

    sizes = []
    for device in range(cupy.cuda.runtime.getDeviceCount()):
        with cupy.cuda.Device(device):
            sizes.append(area_size(cupy, memory))
    return min(sizes) // max(1, scans)


def device_out_of_memory(backend: CupyBackend, device: int, error: BaseException) -> DeviceOutOfMemory:
    areas = backend.areas.get((device, backend.device_memory))
    area = f" of {areas.size:,} bytes" if areas else ""
    return DeviceOutOfMemory(
        f"GPU {device} has no room left in a memory area{area} for this scan ({error}): fewer scans at once "
        "leave more to each, and a table loaded with a smaller storage.block_budget needs less per block"
    )


class _DeviceLane:
    """One GPU: its three memory areas and two streams, block i+1 copied in while block i runs."""

    def __init__(self, backend: CupyBackend) -> None:
        self.backend, self.cupy = backend, backend.xp
        self.areas = DeviceAreas.of_current_device(backend)
        self.copy_stream = self.cupy.cuda.Stream(non_blocking=True)
        self.compute_stream = self.cupy.cuda.Stream(non_blocking=True)

    def _upload(self, parts: list[np.ndarray]) -> tuple[DeviceParts, Any, list[np.ndarray]]:
        """A block's parts copied in on the copy stream: the device arrays, the event after the
        copies, and the pinned host buffers, which must live until the copies are done."""
        cupy = self.cupy
        uploaded: DeviceParts = {}
        staged = []
        with cupy.cuda.using_allocator(self.areas.input.malloc), self.copy_stream:
            for host in parts:
                pinned = self.backend.cupyx.empty_pinned(host.shape, host.dtype)
                pinned[...] = host
                device = cupy.empty(host.shape, host.dtype)
                device.set(pinned, stream=self.copy_stream)
                uploaded[id(host)] = (host, device)
                staged.append(pinned)
            done = self.copy_stream.record()
        return uploaded, done, staged

    def run(self, jobs, work, parts_of, stopped: Callable[[], bool]) -> Iterator[tuple[int, Any]]:
        if not jobs:
            return
        self.backend.stage_results(self.areas.result, self.copy_stream)
        upcoming = self._upload(parts_of(jobs[0]))
        try:
            for index, job in enumerate(jobs):
                if stopped():
                    return
                parts, copied, staged = upcoming
                if index + 1 < len(jobs):
                    upcoming = self._upload(parts_of(jobs[index + 1]))  # overlaps with this block's work
                self.compute_stream.wait_event(copied)
                with self.cupy.cuda.using_allocator(self.areas.decoded.malloc), self.compute_stream:
                    result = work(job, parts)
                self.compute_stream.synchronize()  # after the copies it waited for: their buffers may go
                del parts, staged
                yield index, result
        finally:  # stopped early (cancelled, failed): copies still in flight end before their buffers go
            self.copy_stream.synchronize()
