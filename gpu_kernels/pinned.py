"""Pinned host memory for what comes back from a device: a copy into it runs at the link's speed
(55 GB/s on the H200 machine, where host to device from pageable memory ran at 9), and an answer
read into it is handed on as it is, without a copy to pageable memory.

Buffers are of power-of-two sizes of at least 4 KiB, each kept for the next read-back of its size
once every array made in it is gone, at most `limit` bytes of them held, handed out or kept: past
it, kept buffers are freed (CuPy's pinned pool, which they come from, releasing them to the host),
and where that leaves no room, or the host refuses pinned memory, the read-back goes to pageable
memory instead. CuPy's pool alone keeps every buffer it ever made.
"""

from __future__ import annotations

import collections
import math
import threading
import weakref
from typing import Any

import numpy as np

SMALLEST = 4096  # bytes: the smallest buffer


class PinnedBuffers:
    """One process's pinned buffers for read-backs, at most `limit` bytes held."""

    def __init__(self, cupy: Any, cupyx: Any, limit: int) -> None:
        self.cupy, self.cupyx, self.limit = cupy, cupyx, limit
        self.kept: dict[int, list[np.ndarray]] = {}  # size -> buffers no array uses now
        self.held = 0  # bytes of buffers handed out or kept
        self.lock = threading.Lock()
        # buffers back from their arrays (a finalizer, run at any point, in any thread, maybe one that
        # holds CuPy's pool lock this one waits for under `lock`): kept at the next `array`, so that
        # coming back takes no lock
        self.returned: collections.deque[tuple[int, np.ndarray]] = collections.deque()

    def array(self, shape: tuple[int, ...], dtype: Any) -> np.ndarray | None:
        """An uninitialized array in pinned memory, or None where no room is left for it."""
        dtype = np.dtype(dtype)
        nbytes = math.prod(shape) * dtype.itemsize
        if nbytes == 0:
            return np.empty(shape, dtype)
        size = 1 << (max(nbytes, SMALLEST) - 1).bit_length()
        with self.lock:
            self._keep_returned()
            spare = self.kept.get(size)
            buffer = spare.pop() if spare else self._new(size)
        if buffer is None:
            return None
        # over a memoryview, not the buffer itself, so that every view of it has it as its base (NumPy
        # would give them the buffer): it goes once none is left, and the buffer then comes back
        handed = np.frombuffer(memoryview(buffer), np.uint8, nbytes)
        weakref.finalize(handed, self._back, size, buffer)
        return handed.view(dtype).reshape(shape)

    def _keep_returned(self) -> None:
        """The buffers back from their arrays kept for their sizes (in a call of its own: no local
        name here holds one past it, which would keep a buffer freed below from going)."""
        while self.returned:
            size, buffer = self.returned.popleft()
            self.kept.setdefault(size, []).append(buffer)

    def _new(self, size: int) -> np.ndarray | None:
        """A new buffer of `size` bytes, kept ones freed first where it would pass the limit."""
        if self.held + size > self.limit:
            if self.held - sum(b.nbytes for kept in self.kept.values() for b in kept) + size > self.limit:
                return None  # the kept ones would not make room: they stay for their sizes
            for kept in self.kept.values():
                while kept and self.held + size > self.limit:
                    self.held -= kept.pop().nbytes
            self.cupy.get_default_pinned_memory_pool().free_all_blocks()  # back to the host
        try:
            buffer = self.cupyx.empty_pinned(size, np.uint8)
        except (self.cupy.cuda.runtime.CUDARuntimeError, MemoryError):  # the host has no more to pin
            return None
        self.held += size
        return buffer

    def _back(self, size: int, buffer: np.ndarray) -> None:
        self.returned.append((size, buffer))
