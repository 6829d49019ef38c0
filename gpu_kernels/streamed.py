"""A scan's partial aggregate or projection streamed from host memory through the fused kernels, for
a table whose columns outgrow the resident area (`gpu_kernels.resident`).

The blocks go in *chunks* of about `CHUNK_BYTES` of the encoded parts the scan reads (16 MB: the
size past which a copy to the H200 reaches its bandwidth, seed 004 Tables 5.1/5.2), each with its
own column images and fused kernels (`gpu_kernels.fused_scan`, `gpu_kernels.fused_project`). Two
streams and a ring of `RING` slots of pinned host memory, which the backend keeps across scans
(each slot grown to the largest chunk it has carried), carry them: chunk i+1 is packed into its
slot and copied in on the copy stream while chunk i's kernels run on the compute stream, which
waits for the copy's event; the copy into a slot waits, on the device, for the kernels that read
the slot's previous chunk, and the host packs a slot again only once its previous copy is done (an
event, not a stream synchronized). Each chunk's accumulators stay on the device; at the end they
are read back together, the scan's one read-back. A projection's chunks write into one answer on
the device, each tile's place the scan of the tile counts of all chunks so far (a chunk's counts
scanned on the device and added to the previous chunks' total there): the host waits once for
where each chunk's rows end and once for the answer, whatever the chunks. A projection asked for
hash-partitioned has each chunk's rows moved bucket by bucket on the device before that one
read-back (a chunk's pieces are its buckets). The answer has room for as many rows as the result
area holds with the copies they need (`_words_a_row`: half of it unpartitioned); one that outgrows
it goes block by block.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

import numpy as np
import pyarrow as pa

from gpu_kernels import expr as E
from gpu_kernels import fused_project, fused_scan
from gpu_kernels.aggregate import AggSpec, NamedExpr
from gpu_kernels.column_image import ColumnImage
from gpu_kernels.cuda_kernels import MAX_BUCKETS
from gpu_kernels.cupy_backend import CupyBackend
from gpu_kernels.device_pipeline import DeviceAreas, device_out_of_memory
from gpu_kernels.encoded_block import EncodedBlock

Buffer = Callable[[str, str], Any]  # (column, key) -> the device copy of a chunk's buffer
CHUNK_BYTES = 16 << 20
RING = 2


Chunk = fused_scan.FusedScan | fused_project.FusedProjection


@dataclass
class StreamedScan:
    """The chunks of a streamed scan, each a fused scan (or projection) over its own blocks' images."""

    chunks: list[Chunk]

    def run(self, backend: CupyBackend) -> list[np.ndarray] | list[fused_project.Answer] | None:
        """Each chunk's accumulators or answer (see the module's doc); None where a projection's
        answer outgrows its room, or the device has no room left for it; DeviceOutOfMemory where
        the device's areas have no room left for an aggregate's chunk."""
        try:
            with _Ring._taken(backend) as ring:
                if not isinstance(self.chunks[0], fused_project.FusedProjection):
                    return _aggregated(ring, self.chunks)
                try:
                    return _projected(ring, self.chunks)
                except backend.xp.cuda.memory.OutOfMemoryError:
                    return None  # no room beside the device's other scans: block by block
        except backend.xp.cuda.memory.OutOfMemoryError as e:
            raise device_out_of_memory(backend, backend.device(), e) from None

    def assemble(self, accumulators: list[np.ndarray]) -> list[pa.RecordBatch]:
        """The partial aggregate of each chunk."""
        return [chunk.assemble(a) for chunk, a in zip(self.chunks, accumulators, strict=True)]


def _aggregated(ring: _Ring, chunks: list[fused_scan.FusedScan]) -> list[np.ndarray]:
    """Each chunk's accumulators, added into on the device and read back together."""
    outs = []

    def launch(chunk: fused_scan.FusedScan, buffer: Buffer) -> None:
        outs.append(out := ring.cupy.asarray(chunk.initial))
        ring.backend.fused_launch(chunk, buffer, out)

    held = ring.stream(chunks, launch)
    with ring.computing():
        host = ring.read(ring.cupy.concatenate(outs) if len(outs) > 1 else outs[0])
    del held  # the last chunks' buffers, kept until the kernels that read them were done
    bounds = np.cumsum([0, *(len(c.initial) for c in chunks)])
    return [host[a:z] for a, z in itertools.pairwise(bounds)]


def _projected(ring: _Ring, chunks: list[fused_project.FusedProjection]) -> list[fused_project.Answer] | None:
    """Each chunk's answer: all written into one on the device, then read back (two waits)."""
    cupy, outputs = ring.cupy, chunks[0].outputs
    starts = np.cumsum([0, *(chunk.tiles for chunk in chunks)])
    room = DeviceAreas.of_current_device(ring.backend).size // (8 * _words_a_row(chunks[0]))
    with ring.computing():
        counts = cupy.empty(max(1, int(starts[-1])), dtype=cupy.int64)
        ends = cupy.zeros(int(starts[-1]) + 1, dtype=cupy.int64)  # ends[t + 1]: rows up to tile t's end
        out = cupy.empty((outputs, max(1, min(room, sum(chunk.rows_read for chunk in chunks)))), dtype=cupy.int64)
    chunk_start = iter(starts)

    def launch(chunk: fused_project.FusedProjection, buffer: Buffer) -> None:
        base = int(next(chunk_start))
        if chunk.tiles:
            write = ring.backend.project_counts(chunk, buffer, counts, base)
            part = slice(base, base + chunk.tiles)
            ends[base + 1 : base + 1 + chunk.tiles] = cupy.cumsum(counts[part]) + ends[base : base + 1]
            write(counts, ends[1:], out)

    held = ring.stream(chunks, launch)
    with ring.computing():
        bounds = ring.read(ends[cupy.asarray(starts)])
    del held  # as in _aggregated
    if bounds[-1] > out.shape[1]:
        return None
    if chunks[0].partition is not None:
        return _partitioned(ring, chunks, out, bounds)
    with ring.computing():
        values = ring.read(cupy.ascontiguousarray(out[:, : int(bounds[-1])]))
    return [fused_project.Answer(values[:, a:z]) for a, z in itertools.pairwise(bounds)]


def _words_a_row(chunk: fused_project.FusedProjection) -> int:
    """The 64-bit words a row of a streamed projection's answer may take in the result area at once:
    the answer and its compacted copy; partitioned, the answer, a chunk's rows copied out of it and
    moved, and its keys' hash inputs (gathered, then put together); past MAX_BUCKETS, the general
    kernels' row order, bucket ids and sort keys, and the moved values' gathered copy too."""
    if chunk.partition is None:
        return 2 * chunk.outputs
    keys, buckets = chunk.partition
    general = chunk.outputs + 3 if buckets > MAX_BUCKETS else 0
    return 3 * chunk.outputs + 2 * len(keys) + general


def _partitioned(
    ring: _Ring, chunks: list[fused_project.FusedProjection], out: Any, bounds: np.ndarray
) -> list[fused_project.Answer]:
    """Each chunk's rows of the answer (`out[:, a:z]`, `bounds` the chunks' ends) moved bucket by
    bucket on the device, a chunk at a time (a string key's codes are its chunk's), and read back
    with every chunk's rows per bucket in one copy."""
    cupy, outputs, buckets = ring.cupy, chunks[0].outputs, chunks[0].partition[1]
    counted = len(chunks) * buckets
    with ring.computing():
        both = cupy.zeros(counted + outputs * int(bounds[-1]), dtype=cupy.int64)
        for c, (chunk, (a, z)) in enumerate(zip(chunks, itertools.pairwise(bounds), strict=True)):
            if z > a:
                moved = both[counted + outputs * a : counted + outputs * z].reshape(outputs, z - a)
                part = cupy.ascontiguousarray(out[:, a:z])
                both[c * buckets : (c + 1) * buckets] = ring.backend.partition_answer(
                    chunk, _copied_from(cupy, chunk.images), part, moved
                )
        host = ring.read(both)
    return [
        fused_project.Answer(
            host[counted + outputs * a : counted + outputs * z].reshape(outputs, z - a),
            host[c * buckets : (c + 1) * buckets],
        )
        for c, (a, z) in enumerate(itertools.pairwise(bounds))
    ]


def _copied_from(cupy: Any, images: dict[str, ColumnImage]) -> Buffer:
    """A chunk's buffer copied to the device when asked (a string key's hash inputs: a few KB)."""
    return lambda column, key: cupy.asarray(images[column].buffers[key])


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
    return _planned(
        blocks,
        selected,
        names,
        chunk_bytes,
        lambda images, n: fused_scan.plan(images, range(n), predicate, keys, aggregates),
    )


def plan_streamed_projection(
    blocks: Sequence[EncodedBlock],
    selected: Sequence[int],
    predicate: E.Expr | None,
    outputs: list[NamedExpr],
    chunk_bytes: int = CHUNK_BYTES,
    partition: fused_project.Partition | None = None,
) -> StreamedScan | None:
    """The projection of the `selected` of `blocks` as `plan_streamed` plans an aggregate, each
    chunk's answer hash-partitioned on the device where `partition` says."""
    names = fused_project.columns_read(predicate, outputs)
    return _planned(
        blocks,
        selected,
        names,
        chunk_bytes,
        lambda images, n: fused_project.plan(images, range(n), predicate, outputs, partition),
    )


def _planned(
    blocks: Sequence[EncodedBlock],
    selected: Sequence[int],
    names: list[str],
    chunk_bytes: int,
    plan: Callable[[dict[str, ColumnImage], int], Chunk | None],
) -> StreamedScan | None:
    """`plan(images, blocks)` of each chunk of the `selected` of `blocks` (the columns `names` of
    consecutive blocks, up to `chunk_bytes` of them; a larger block alone); None where any is."""
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
        scan = plan(images, len(group))
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

    def stream(self, chunks: Sequence[Chunk], launch: Callable[[Chunk, Buffer], None]) -> list[Any]:
        """Each chunk copied in and `launch(chunk, buffer)` called on the compute stream once its copy
        is in, allocating in the result area (see the module's doc); nothing waited for. Returns the
        device buffers of the last chunks, for the caller to hold until it has read the results."""
        areas = DeviceAreas.of_current_device(self.backend)
        largest = max(int(_packed(chunk)[2][-1]) for chunk in chunks)
        for slot, staged in enumerate(self.slots):  # grown once, before any copy from it is in flight
            if staged is None or staged.nbytes < largest:
                self.slots[slot] = self.backend.cupyx.empty_pinned(max(largest, 8), np.uint8)
        copied: list[Any] = [None] * RING  # per slot: the event after its last copy in
        consumed: list[Any] = [None] * RING  # per slot: the event after the kernels that read it
        held: list[Any] = [None] * RING  # per slot: its chunk's device buffers, until its slot is reused
        for i, chunk in enumerate(chunks):
            slot = i % RING
            if copied[slot] is not None and not copied[slot].done:
                copied[slot].synchronize()  # its pinned bytes are free again (mostly they are already)
            if consumed[slot] is not None:
                self.copy_stream.wait_event(consumed[slot])  # its device buffers may be reused
                held[slot] = None
            with self.copy_stream, self.cupy.cuda.using_allocator(areas.input.malloc):
                held[slot] = device = self._copied_in(chunk, slot)
            copied[slot] = self.copy_stream.record()
            self.compute_stream.wait_event(copied[slot])
            with self.computing():
                launch(chunk, lambda c, k, d=device: d[(c, k)])
            consumed[slot] = self.compute_stream.record()
        return held

    @contextmanager
    def computing(self) -> Iterator[None]:
        """Work on the compute stream, allocating in the result area."""
        with (
            self.compute_stream,
            self.cupy.cuda.using_allocator(DeviceAreas.of_current_device(self.backend).result.malloc),
        ):
            yield

    def read(self, array: Any) -> np.ndarray:
        """A device array made on the compute stream, on the host: a wait for the device."""
        return self.backend.copy_to_host(array, self.compute_stream)

    def _copied_in(self, chunk: Chunk, slot: int) -> dict[tuple[str, str], Any]:
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


def _packed(chunk: Chunk) -> tuple[list[tuple[str, str]], list[np.ndarray], np.ndarray]:
    """The buffers a chunk's kernels read, their host arrays, and where each starts in a slot
    (8-byte aligned; the last offset is the bytes they take)."""
    needed = sorted({pair for launch in chunk.launches for pair in launch.buffers})
    hosts = [chunk.images[column].buffers[key] for column, key in needed]
    return needed, hosts, np.cumsum([0, *(-(-h.nbytes // 8) * 8 for h in hosts)])
