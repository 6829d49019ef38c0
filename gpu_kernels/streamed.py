"""A scan's partial aggregate streamed from host memory through the fused kernels, for a table whose
columns outgrow the resident area (`gpu_kernels.resident`).

The blocks go in *chunks* of about `CHUNK_BYTES` of the encoded parts the scan reads (16 MB: the
size past which a copy to the H200 reaches its bandwidth, seed 004 Tables 5.1/5.2), each with its
own column images and fused kernels (`gpu_kernels.fused_scan`). Two streams and a ring of `RING`
slots of pinned host memory, which the backend keeps across scans (each slot grown to the largest
chunk it has carried), carry them: chunk i+1 is packed into its slot and copied in on the copy
stream while chunk i's kernels run on the compute stream, which waits for the copy's event; the
copy into a slot waits, on the device, for the kernels that read the slot's previous chunk, and
the host packs a slot again only once its previous copy is done (an event, not a stream
synchronized). Each chunk's accumulators stay on the device; at the end they are read back
together, the scan's one read-back.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

import numpy as np
import pyarrow as pa

from gpu_kernels import expr as E
from gpu_kernels import fused_scan
from gpu_kernels.aggregate import AggSpec, NamedExpr
from gpu_kernels.column_image import ColumnImage
from gpu_kernels.cupy_backend import CupyBackend
from gpu_kernels.device_pipeline import DeviceAreas, device_out_of_memory
from gpu_kernels.encoded_block import EncodedBlock

CHUNK_BYTES = 16 << 20
RING = 2


@dataclass
class StreamedScan:
    """The chunks of a streamed scan, each a fused scan over its own blocks' images."""

    chunks: list[fused_scan.FusedScan]

    def run(self, backend: CupyBackend) -> list[np.ndarray]:
        """Each chunk's accumulators (see the module's doc); DeviceOutOfMemory where the device's
        areas have no room left for a chunk."""
        try:
            with _Ring._taken(backend) as ring:
                return ring.run(self.chunks)
        except backend.xp.cuda.memory.OutOfMemoryError as e:
            raise device_out_of_memory(backend, backend.device(), e) from None

    def assemble(self, accumulators: list[np.ndarray]) -> list[pa.RecordBatch]:
        """The partial aggregate of each chunk."""
        return [chunk.assemble(a) for chunk, a in zip(self.chunks, accumulators, strict=True)]


def streamed_chunk_bytes(backend: CupyBackend) -> int:
    """Bytes of a chunk on the current device: `CHUNK_BYTES`, or less where the input area could not
    hold the ring's chunks and the next (with room for their alignment)."""
    return max(1, min(CHUNK_BYTES, DeviceAreas.of_current_device(backend).size // (RING + 2)))


def plan_streamed(
    blocks: Sequence[EncodedBlock],
    selected: Sequence[int],
    predicate: E.Expr | None,
    keys: list[NamedExpr],
    aggregates: list[AggSpec],
    chunk_bytes: int = CHUNK_BYTES,
) -> StreamedScan | None:
    """The partial aggregate over the `selected` of `blocks`, in chunks of consecutive blocks of up to
    `chunk_bytes` of the parts it reads (a larger block alone); None where the fused kernels cannot
    run it."""
    names = fused_scan.columns_read(predicate, keys, aggregates)
    if not names or not selected:
        return None
    groups: list[list[int]] = [[]]
    size = 0
    for b in selected:
        block = sum(blocks[b].columns[n].nbytes for n in names if n in blocks[b].columns)
        if groups[-1] and size + block > chunk_bytes:
            groups.append([])
            size = 0
        groups[-1].append(b)
        size += block
    chunks = []
    for group in groups:
        images = {n: ColumnImage.of(n, [blocks[b].columns[n] for b in group]) for n in names}
        scan = fused_scan.plan(images, range(len(group)), predicate, keys, aggregates)
        if scan is None:
            return None
        chunks.append(scan)
    return StreamedScan(chunks)


class _Ring:
    """One device's two streams and `RING` slots of pinned host memory, each as large as the
    largest chunk it has carried, kept by the backend across scans (`_taken`)."""

    def __init__(self, backend: CupyBackend) -> None:
        self.backend, self.cupy = backend, backend.xp
        self.copy_stream = self.cupy.cuda.Stream(non_blocking=True)
        self.compute_stream = self.cupy.cuda.Stream(non_blocking=True)
        self.slots: list[np.ndarray | None] = [None] * RING  # per slot: its pinned bytes

    def run(self, chunks: list[fused_scan.FusedScan]) -> list[np.ndarray]:
        cupy = self.cupy
        areas = DeviceAreas.of_current_device(self.backend)
        largest = max(int(_packed(chunk)[2][-1]) for chunk in chunks)
        for slot, staged in enumerate(self.slots):  # grown once, before any copy from it is in flight
            if staged is None or staged.nbytes < largest:
                self.slots[slot] = self.backend.cupyx.empty_pinned(max(largest, 8), np.uint8)
        copied: list[Any] = [None] * RING  # per slot: the event after its last copy in
        consumed: list[Any] = [None] * RING  # per slot: the event after the kernels that read it
        held: list[Any] = [None] * RING  # per slot: its chunk's device buffers, kept until read
        outs = []
        for i, chunk in enumerate(chunks):
            slot = i % RING
            if copied[slot] is not None and not copied[slot].done:
                copied[slot].synchronize()  # its pinned bytes are free again (mostly they are already)
            if consumed[slot] is not None:
                self.copy_stream.wait_event(consumed[slot])  # its device buffers may be reused
                held[slot] = None
            with self.copy_stream, cupy.cuda.using_allocator(areas.input.malloc):
                held[slot] = device = self._copied_in(chunk, slot)
            copied[slot] = self.copy_stream.record()
            self.compute_stream.wait_event(copied[slot])
            with self.compute_stream, cupy.cuda.using_allocator(areas.result.malloc):
                out = cupy.asarray(chunk.initial)
                self.backend.fused_launch(chunk, lambda c, k, d=device: d[(c, k)], out)
                outs.append(out)
            consumed[slot] = self.compute_stream.record()
        with self.compute_stream, cupy.cuda.using_allocator(areas.result.malloc):
            joined = cupy.concatenate(outs) if len(outs) > 1 else outs[0]
            host = joined.get(stream=self.compute_stream)
        self.compute_stream.synchronize()  # the read-back: the scan's one wait for the device
        bounds = np.cumsum([0, *(len(c.initial) for c in chunks)])
        return [host[a:z] for a, z in itertools.pairwise(bounds)]

    def _copied_in(self, chunk: fused_scan.FusedScan, slot: int) -> dict[tuple[str, str], Any]:
        """The chunk's buffers packed into the slot's pinned bytes and copied in on the copy stream."""
        needed, hosts, offsets = _packed(chunk)
        staged = self.slots[slot]
        device = {}
        for pair, host, at in zip(needed, hosts, offsets[:-1], strict=True):
            view = staged[at : at + host.nbytes].view(host.dtype).reshape(host.shape)
            view[...] = host
            device[pair] = on_device = self.cupy.empty(host.shape, host.dtype)
            on_device.set(view, stream=self.copy_stream)
        return device

    @classmethod
    @contextmanager
    def _taken(cls, backend: CupyBackend) -> Iterator[_Ring]:
        """A ring of the current device the backend keeps (a new one when every one is in use)."""
        device = backend.device()
        with backend.areas_lock:
            free = backend.rings.setdefault(device, [])
            ring = free.pop() if free else cls(backend)
        try:
            yield ring
        finally:  # a scan stopped midway leaves copies in flight: done before the next packs the slots
            ring.copy_stream.synchronize()
            with backend.areas_lock:
                free.append(ring)


def _packed(chunk: fused_scan.FusedScan) -> tuple[list[tuple[str, str]], list[np.ndarray], np.ndarray]:
    """The buffers a chunk's kernels read, their host arrays, and where each starts in a slot
    (8-byte aligned; the last offset is the bytes they take)."""
    needed = sorted({pair for launch in chunk.launches for pair in launch.buffers})
    hosts = [chunk.images[column].buffers[key] for column, key in needed]
    return needed, hosts, np.cumsum([0, *(-(-h.nbytes // 8) * 8 for h in hosts)])
