"""The CuPy backend: the same kernels on a CUDA device.

Made only where CuPy finds a device (`gpu_kernels.backend_choice.get_backend`), and CuPy is imported
then, when it is made: the kernels load without it. Bit unpacking is a CUDA C kernel of
`gpu_kernels/cuda/` (one thread per row: the bytes its value spans, shift, mask), run expansion is
a binary search per row, grouped min/max use cupyx's scatter operations where they take the dtype,
else a sort by group and value. The backend also holds what every scan on it shares: the compiled
kernels, each device's memory areas (`gpu_kernels.device_pipeline`), and where each thread's
results are staged, and the pinned host memory arrays are read back into (`gpu_kernels.pinned`).
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from gpu_kernels.backend import Array, NumpyBackend, Partitioned
from gpu_kernels.cuda_kernels import KERNELS, MAX_BUCKETS, MAX_PARTITION_GRID, PARTITION_ROWS, THREADS, launch_shape
from gpu_kernels.fused_project import Answer, FusedProjection
from gpu_kernels.fused_scan import FusedScan
from gpu_kernels.pinned import PinnedBuffers

PINNED_READ_BACK = 64 << 20  # bytes: an array up to this size is read back into pinned host memory
PINNED_HELD = 256 << 20  # bytes of pinned host memory the read-backs hold at most


@dataclass(frozen=True)
class OnDevice:
    """What a scan kept for running again holds on the device beside its columns: each launch's
    device block table, and an aggregate's initial accumulators (None for a projection)."""

    tables: list[Array]
    initial: Array | None = None

    @property
    def nbytes(self) -> int:
        return sum(int(a.nbytes) for a in [*self.tables, *([] if self.initial is None else [self.initial])])


class CupyBackend(NumpyBackend):
    name = "cupy"
    fuses = True
    keeps_columns = True

    def __init__(self) -> None:
        import cupy  # the gpu extra, needed once a device is chosen
        import cupyx

        self.xp, self.cupyx = cupy, cupyx
        self._modules: dict[str, Any] = {}  # CUDA C source -> its cupy.RawModule
        self._staging = threading.local()
        self.areas: dict[tuple[int, int | None], Any] = {}  # (device, budget) -> the pipeline's memory areas
        self.resident: dict[tuple[int, int | None], Any] = {}  # (device, budget) -> its resident columns
        self.rings: dict[int, list[Any]] = {}  # device -> the streamed scans' rings not in use (`gpu_kernels.streamed`)
        self.areas_lock = threading.Lock()
        self.pinned = PinnedBuffers(cupy, cupyx, PINNED_HELD)  # what arrays are read back into

    def _module(self, source: str) -> Any:
        """A CUDA C source as a module, compiled for the device on first use of one of its kernels."""
        if source not in self._modules:
            self._modules[source] = self.xp.RawModule(code=source)
        return self._modules[source]

    def _kernel(self, name: str) -> Any:
        """A CUDA C kernel of `gpu_kernels.cuda_kernels`."""
        return self._module(KERNELS[name].source()).get_function(name)

    def stage_results(self, pool: Any, stream: Any) -> None:
        """Results of this thread's blocks go through `pool` (the result area) and out on `stream`."""
        self._staging.pool, self._staging.stream = pool, stream

    def copy_to_host(self, array: Array, stream: Any = None) -> np.ndarray:
        """`array` copied to the host on `stream` (the current one by default), the host waiting: into
        pinned memory up to PINNED_READ_BACK bytes while `pinned` has room, else into pageable memory."""
        out = self.pinned.array(array.shape, array.dtype) if array.nbytes <= PINNED_READ_BACK else None
        return array.get(stream=stream, out=out)

    def _copied_out(self, staged: Array) -> np.ndarray:
        """An array of the result area copied to the host on the result stream, once the compute stream
        has made it."""
        self._staging.stream.wait_event(self.xp.cuda.get_current_stream().record())
        return self.copy_to_host(staged, self._staging.stream)

    def _in_result_area(self) -> contextlib.AbstractContextManager:
        """New device arrays go into this thread's result area, if it has one."""
        pool = getattr(self._staging, "pool", None)
        return self.xp.cuda.using_allocator(pool.malloc) if pool is not None else contextlib.nullcontext()

    def _read_back(self, array: Array) -> np.ndarray:
        """An array made in `_in_result_area`, on the host: the host waits for the device."""
        return self._copied_out(array) if getattr(self._staging, "pool", None) is not None else self.copy_to_host(array)

    def fused_aggregate(
        self, scan: FusedScan, buffer: Callable[[str, str], Array], kept: OnDevice | None = None
    ) -> np.ndarray:
        """Run a scan's fused kernels (`gpu_kernels.fused_scan`): the accumulators copied in, one
        launch per signature over all its blocks (each with its device block table), and the
        accumulators read back, the scan's only wait for the device. `buffer(column, key)` is the
        device copy of a column image's buffer; with `kept`, the tables and initial accumulators
        are copied from there, device to device, and nothing goes from the host to the device."""
        with self._in_result_area():
            out = self.xp.asarray(scan.initial) if kept is None else kept.initial.copy()
        self.fused_launch(scan, buffer, out, None if kept is None else kept.tables)
        return self._read_back(out)

    def fused_project(
        self, scan: FusedProjection, buffer: Callable[[str, str], Array], kept: OnDevice | None = None
    ) -> Answer:
        """Run a projection's fused kernels (`gpu_kernels.fused_project`): per signature the count
        kernel, a scan of the tiles' counts, the number of rows read back (the first wait), then per
        signature the write kernel into an answer of that size, read back (the second): one row of
        64-bit values per output. A partitioned projection's answer is moved bucket by bucket by the
        partitioning kernels first (`partition_answer`), its rows per bucket read back with it.
        `kept` as in `fused_aggregate`. Raises CuPy's OutOfMemoryError where the answer outgrows the
        result area."""
        if not scan.tiles:
            return scan.nothing()
        cupy = self.xp
        with self._in_result_area():
            counts = cupy.empty(scan.tiles, dtype=cupy.int64)
            write = self.project_counts(scan, buffer, counts, 0, None if kept is None else kept.tables)
            ends = cupy.cumsum(counts)
            rows = int(self._read_back(ends[-1:])[0])
            if rows == 0:
                return scan.nothing()
            out = cupy.empty((scan.outputs, rows), dtype=cupy.int64)
        write(counts, ends, out)
        if scan.partition is None:
            return Answer(self._read_back(out))
        buckets = scan.partition[1]
        with self._in_result_area():  # the counts per bucket, then the answer moved bucket by bucket
            both = cupy.empty(buckets + scan.outputs * rows, dtype=cupy.int64)
            both[:buckets] = self.partition_answer(scan, buffer, out, both[buckets:].reshape(scan.outputs, rows))
            host = self._read_back(both)
        return Answer(host[buckets:].reshape(scan.outputs, rows), host[:buckets])

    def partition_answer(
        self, scan: FusedProjection, buffer: Callable[[str, str], Array], out: Array, moved: Array
    ) -> Array:
        """A partitioned projection's answer `out` (one row per output) moved bucket by bucket into
        `moved` on the device (its key rows hashed; a key projected as codes, through its codes' hash
        inputs, a buffer of the scan's images); the rows per bucket, on the device."""
        keys, buckets = scan.partition
        inputs = [
            out[k].view(self.xp.uint64) if through is None else buffer(*through)[out[k]]
            for k, through in zip(keys, scan.hashed, strict=True)
        ]
        return self._partition_words(inputs, buckets, out, moved, numbered=False).counts

    def project_counts(
        self,
        scan: FusedProjection,
        buffer: Callable[[str, str], Array],
        counts: Array,
        base: int,
        tables: Sequence[Array] | None = None,
    ) -> Callable[[Array, Array, Array], None]:
        """A projection's count kernels launched on the current stream, each of its tiles' holding
        rows counted into `counts` from index `base` on; returns the launch of its write kernels
        once `counts` is scanned into `ends`: `write(counts, ends, out)`, each row at its place in
        `out` (one row per output; a place past its end is not written). `tables`: the launches'
        device block tables, if on the device already."""
        calls = []
        for launch, table in zip(scan.launches, tables or self._tables(scan), strict=True):
            pointers = [buffer(column, key) for column, key in launch.buffers]
            head = (np.int64(launch.tiles), np.int64(len(launch.table)), table)
            arguments = (*head, *pointers, *launch.scalars, np.int64(base))
            module = self._module(launch.source)
            module.get_function(f"{launch.name}_count")((launch.grid,), (THREADS,), (*arguments, counts))
            calls.append((module.get_function(f"{launch.name}_write"), launch.grid, arguments))
            base += launch.tiles

        def write(counts: Array, ends: Array, out: Array) -> None:
            for kernel, grid, arguments in calls:
                kernel((grid,), (THREADS,), (*arguments, counts, ends, np.int64(out.shape[1]), out))

        return write

    def fused_launch(
        self, scan: FusedScan, buffer: Callable[[str, str], Array], out: Array, tables: Sequence[Array] | None = None
    ) -> None:
        """A scan's fused kernels launched on the current stream, adding into the accumulators `out`
        on the device (set to the scan's initial ones), with nothing read back; `tables` as in
        `project_counts`."""
        for launch, table in zip(scan.launches, tables or self._tables(scan), strict=True):
            kernel = self._module(launch.source).get_function(launch.name)
            pointers = [buffer(column, key) for column, key in launch.buffers]
            arguments = (np.int64(launch.tiles), np.int64(len(launch.table)), table, *pointers, *launch.scalars, out)
            kernel((launch.grid,), (THREADS,), arguments)

    def _tables(self, scan: FusedScan | FusedProjection) -> list[Array]:
        """The device block tables of a scan's launches, copied to the current device now."""
        return [self.xp.asarray(launch.table) for launch in scan.launches]

    def partition_keys(
        self, inputs: list[Array], count: int, payload: Sequence[Array] = (), numbered: bool = True
    ) -> Partitioned:
        """The partitioning kernels (`gpu_kernels/cuda/partition.cu`): the hash fused with a
        shared-memory histogram per CUDA block, an exclusive scan of the counts, and the
        write-combined scatter of the rows' numbers (where `numbered`) and payload (as 64-bit words,
        one launch for all of its arrays)."""
        n = len(inputs[0])
        if n == 0:
            return super().partition_keys(inputs, count, payload)
        words = [_words(array) for array in payload]
        if len(words) == 1:
            words = words[0].reshape(1, n)
        else:
            words = self.xp.stack(words) if words else self.xp.empty((0, n), "i8")
        parts = self._partition_words(inputs, count, words, numbered=numbered)
        return parts._replace(moved=[_from_words(w, a.dtype) for w, a in zip(parts.moved[0], payload, strict=True)])

    def _partition_words(
        self, inputs: list[Array], count: int, words: Array, into: Array | None = None, numbered: bool = True
    ) -> Partitioned:
        """`partition_keys` with the payload a matrix of int64 words (a row per array), moved as one
        matrix (`moved[0]`: `into` where given); past MAX_BUCKETS, the general kernels. Not
        `numbered`: no rows' numbers are written (`order` None)."""
        cupy, n = self.xp, len(inputs[0])
        moved = cupy.empty_like(words) if into is None else into
        if count > MAX_BUCKETS:
            order, counts, offsets, _ = super().partition_keys(inputs, count)
            moved[...] = words[:, order]
            return Partitioned(order, counts, offsets, [moved])
        keys = inputs[0] if len(inputs) == 1 else cupy.concatenate(inputs)
        grid = max(1, min(MAX_PARTITION_GRID, -(-n // PARTITION_ROWS)))
        shape = (np.int64(n), np.int32(len(inputs)), np.int32(count))
        counts = cupy.empty(count * grid, dtype=cupy.int64)
        self._kernel("cxg_bucket_counts")((grid,), (THREADS,), (keys, *shape, counts))
        starts = cupy.cumsum(counts) - counts
        order = cupy.empty(n if numbered else 1, dtype=cupy.int64)
        arguments = (keys, *shape, starts, words, np.int32(len(words)), np.int32(numbered), order, moved)
        self._kernel("cxg_bucket_scatter")((grid,), (THREADS,), arguments)
        offsets = cupy.ascontiguousarray(starts[::grid])
        return Partitioned(order if numbered else None, counts.reshape(count, grid).sum(axis=1), offsets, [moved])

    def asarray(self, host: np.ndarray) -> Array:
        return self.xp.asarray(host)

    def to_host(self, array: Array) -> np.ndarray:
        cupy = self.xp
        if not isinstance(array, cupy.ndarray):
            return array
        if getattr(self._staging, "pool", None) is None:
            return self.copy_to_host(array)
        with cupy.cuda.using_allocator(self._staging.pool.malloc):
            staged = array.copy()  # on the compute stream, into the result area
        return self._copied_out(staged)

    def device(self) -> int:
        return self.xp.cuda.runtime.getDevice()

    def unpack(self, packed: Array, width: int, start: int, stop: int) -> Array:
        rows = self.xp.arange(start, stop, dtype=self.xp.int64)
        return self.unpack_at(packed, width, rows)

    def packed_sum(self, packed: Array, width: int, start: int, stop: int) -> int:
        return self.exact_sum(self.unpack(packed, width, start, stop))

    def unpack_at(self, packed: Array, width: int, rows: Array) -> Array:
        cupy = self.xp
        n = len(rows)
        if width == 0 or n == 0:
            return cupy.zeros(n, dtype=cupy.int64)
        out = cupy.empty(n, dtype=cupy.int64)
        grid, block = launch_shape(n)
        self._kernel("cxg_unpack")(
            grid, block, (packed, rows.astype(cupy.int64, copy=False), np.int64(n), np.int32(width), out)
        )
        return out

    def repeat(self, values: Array, counts: Array) -> Array:
        cupy = self.xp
        ends = cupy.cumsum(counts)
        total = int(ends[-1]) if len(ends) else 0
        rows = cupy.arange(total, dtype=ends.dtype)
        return values[cupy.searchsorted(ends, rows, side="right")]

    def segment_sum(self, values: Array, starts: Array) -> Array:
        return self._prefix_segment_sum(values, starts)

    def unique_inverse(self, values: Array) -> tuple[Array, Array]:
        uniques, inverse = self.xp.unique(values, return_inverse=True)
        return uniques, inverse.reshape(-1)

    def group_min(self, gid: Array, values: Array, groups: int) -> Array:
        out = self.xp.full(groups, _extreme(values.dtype, high=True), dtype=values.dtype)
        if values.dtype in _SCATTER_EXTREMES:
            self.cupyx.scatter_min(out, gid, values)
            return out
        return self._sorted_extreme(out, gid, values, last=False)

    def group_max(self, gid: Array, values: Array, groups: int) -> Array:
        out = self.xp.full(groups, _extreme(values.dtype, high=False), dtype=values.dtype)
        if values.dtype in _SCATTER_EXTREMES:
            self.cupyx.scatter_max(out, gid, values)
            return out
        return self._sorted_extreme(out, gid, values, last=True)

    def _sorted_extreme(self, out: Array, gid: Array, values: Array, last: bool) -> Array:
        """Each group's least value (or, `last`, its greatest) into `out`: the rows sorted by group
        then value, the first (last) row of each group's run taken."""
        if len(values) == 0:
            return out
        cupy = self.xp
        order = cupy.lexsort(cupy.stack((values, gid)))
        groups, ordered = gid[order], values[order]
        edges = cupy.flatnonzero(groups[1:] != groups[:-1])
        if last:
            picked = cupy.concatenate((edges, cupy.full(1, len(groups) - 1, dtype=edges.dtype)))
        else:
            picked = cupy.concatenate((cupy.zeros(1, dtype=edges.dtype), edges + 1))
        out[groups[picked]] = ordered[picked]
        return out


def _words(array: Array) -> Array:
    """An array of up to 8-byte values as int64 words (its bits, sign-extended)."""
    return array.view(f"i{array.dtype.itemsize}").astype("i8", copy=False)


def _from_words(words: Array, dtype: np.dtype) -> Array:
    """The array `_words` made `words` of."""
    return words.astype(f"i{dtype.itemsize}", copy=False).view(dtype)


# the dtypes cupyx.scatter_min and scatter_max take exactly: no 64-bit signed integers and no narrow
# ones (refused), no floats (taken, but a float64 comes back rounded to float32's precision on a GPU)
_SCATTER_EXTREMES = {np.dtype(t) for t in ("int32", "uint32", "uint64")}


def _extreme(dtype: np.dtype, high: bool):
    if dtype.kind == "f":
        return np.inf if high else -np.inf
    info = np.iinfo(dtype)
    return info.max if high else info.min
