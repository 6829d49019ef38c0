"""Columns resident on a GPU: the encoded columns a node's scans read, kept in device memory across
queries, so that a scan's partial aggregate or projection is one launch (or two) per signature
over all its blocks (`gpu_kernels.fused_scan`, `gpu_kernels.fused_project`) with nothing copied in
but its small device block table.

Each device has one `ResidentArea`, a fourth of the scans' device budget (`storage.device_memory`;
the block pipeline's three areas share the rest). A column is loaded whole on first use, as its
image (`gpu_kernels.column_image`), and the least recently used columns are evicted to make room; a
column larger than the whole area is never loaded, and its scans take the block pipeline instead.
The area also keeps the scans' plans (their kernels, and their block tables and initial accumulators
on the device, counted in its budget), so that the same request over the same blocks is planned once
while the columns it reads stay resident, and then copies nothing from the host to run again.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Callable, Hashable, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

import numpy as np

from gpu_kernels import expr as E
from gpu_kernels import fused_project, fused_scan
from gpu_kernels.aggregate import AggSpec, NamedExpr
from gpu_kernels.column_image import ColumnImage
from gpu_kernels.cupy_backend import CupyBackend, OnDevice
from gpu_kernels.device_pipeline import DeviceAreas, area_size
from gpu_kernels.encoded_block import EncodedBlock

PLANS = 256  # scans' plans an area keeps for the next scan of the same shape


class TooLarge(Exception):
    """A column that does not fit the resident area even alone."""


@dataclass
class ResidentColumn:
    image: ColumnImage
    device: dict[str, Any] = field(default_factory=dict)  # buffer key -> its device copy

    @property
    def nbytes(self) -> int:
        return sum(int(a.nbytes) for a in self.device.values())


@dataclass
class Residency:
    """What a resident area did: columns loaded, found already there, and evicted."""

    loads: int = 0
    hits: int = 0
    evictions: int = 0


class ResidentArea:
    """One device's resident columns, least recently used first, within `budget` bytes."""

    def __init__(self, cupy: Any, budget: int) -> None:
        self.cupy, self.budget = cupy, budget
        self.pool = cupy.cuda.MemoryPool()
        self.pool.set_limit(size=budget)
        self.columns: OrderedDict[Hashable, ResidentColumn] = OrderedDict()
        self.plans: OrderedDict[Hashable, ResidentScan] = OrderedDict()  # least recently used first
        self.residency = Residency()
        self.lock = threading.Lock()

    @property
    def used(self) -> int:
        """Bytes of the columns, and of the plans' block tables and accumulators on the device."""
        return sum(c.nbytes for c in self.columns.values()) + sum(p.nbytes for p in self.plans.values())

    def image(self, key: Hashable, build: Callable[[], ColumnImage]) -> ColumnImage:
        """The column's image, its buffers on the device (loaded and others evicted if needed)."""
        with self.lock:
            column = self.columns.get(key)
            if column is not None:
                self.columns.move_to_end(key)
                self.residency.hits += 1
                return column.image
            image = build()
            if image.nbytes > self.budget:
                raise TooLarge(f"column {image.name}: {image.nbytes:,} bytes, the resident area {self.budget:,}")
            column = self.columns[key] = ResidentColumn(image)
            self.residency.loads += 1
            for name in image.buffers:
                self._upload(key, column, name)
            return image

    def planned(self, key: Hashable, plan: Callable[[], ResidentScan | None]) -> ResidentScan | None:
        """The scan `plan()` makes, kept under `key` (its table, blocks and request) for the next
        scan of the same, which finds it while every column it reads is the one it was planned over
        (each such column counted as found; its block tables copied in now if they found no room
        before); the least recently used of more than PLANS dropped."""
        with self.lock:
            kept = self.plans.get(key)
            if kept is not None and self._holds(kept):
                self.plans.move_to_end(key)
                if kept.kept is None:
                    kept.kept = self._on_device(kept)
                return kept
        made = plan()
        with self.lock:  # kept only while its columns are resident (loading one may evict another)
            if made is not None and self._current(made):
                self.plans.pop(key, None)
                while len(self.plans) >= PLANS:
                    self.plans.popitem(last=False)
                made.kept = self._on_device(made)
                self.plans[key] = made
        return made

    def _on_device(self, scan: ResidentScan) -> OnDevice | None:
        """The scan's block tables and initial accumulators copied into the area, or None where
        they do not fit beside its columns and plans (the scan then copies them at each run)."""
        launches, initial = scan.scan.launches, getattr(scan.scan, "initial", None)
        host = [launch.table for launch in launches] + ([] if initial is None else [initial])
        device = self._copied(host) if self.used + sum(a.nbytes for a in host) <= self.budget else None
        if device is None:
            return None
        return OnDevice(device[: len(launches)], None if initial is None else device[-1])

    def _current(self, scan: ResidentScan) -> bool:
        """Whether every column `scan` reads is still the image it was planned over."""
        images = scan.scan.images
        return all(getattr(self.columns.get(key), "image", None) is images[key[1]] for key in scan.columns)

    def _holds(self, scan: ResidentScan) -> bool:
        """`_current`, and if so, its columns used again (the most recently used, each counted as
        found)."""
        if not self._current(scan):
            return False
        for key in scan.columns:
            self.columns.move_to_end(key)
            self.residency.hits += 1
        return True

    def _drop(self, key: Hashable) -> None:
        """A column no longer resident, and the plans that read it."""
        del self.columns[key]
        for stale in [k for k, scan in self.plans.items() if key in scan.columns]:
            del self.plans[stale]

    def report(self) -> dict[str, int]:
        """What the area holds (bytes, columns and plans kept, within `budget`) and has done, as numbers."""
        with self.lock:
            held = {"budget": self.budget, "bytes": self.used, "columns": len(self.columns), "plans": len(self.plans)}
            return held | asdict(self.residency)

    def buffer(self, key: Hashable, name: str) -> Any:
        """The device copy of one buffer of a resident column (one built since it was loaded, such
        as a key's codes, is copied now)."""
        with self.lock:
            column = self.columns[key]
            if name not in column.device:
                self._upload(key, column, name)
            return column.device[name]

    def _upload(self, key: Hashable, column: ResidentColumn, name: str) -> None:
        host = column.image.buffers[name]
        while self.used + host.nbytes > self.budget and len(self.columns) > 1:
            self._drop(next(k for k in self.columns if k != key))
            self.residency.evictions += 1
        if self.used + host.nbytes > self.budget:
            self._drop(key)
            raise TooLarge(f"column {column.image.name} with its key codes outgrows the resident area")
        copied = self._copied([host])
        if copied is None:
            self._drop(key)
            raise TooLarge(f"column {column.image.name}: no room left while scans hold evicted columns")
        column.device[name] = copied[0]

    def _copied(self, arrays: list[np.ndarray]) -> list[Any] | None:
        """Host arrays copied into the area's memory, or None where it has no room left: the bytes
        of columns and plans dropped but still read by a running scan are not free yet."""
        try:
            with self.cupy.cuda.using_allocator(self.pool.malloc):
                return [self.cupy.asarray(a) for a in arrays]
        except self.cupy.cuda.memory.OutOfMemoryError:
            return None


def area_of(backend: CupyBackend) -> ResidentArea:
    """The current device's resident area (a fourth of the scans' device budget)."""
    key = (backend.xp.cuda.runtime.getDevice(), backend.device_memory)
    with backend.areas_lock:
        if key not in backend.resident:
            backend.resident[key] = ResidentArea(backend.xp, area_size(backend.xp, backend.device_memory))
        return backend.resident[key]


def resident_report(backend: CupyBackend) -> list[dict[str, int]]:
    """Each resident area of the backend's devices (one per device and budget, made by its first
    scan), as `ResidentArea.report` says, with its device: for a node's status."""
    with backend.areas_lock:
        areas = sorted(backend.resident.items(), key=lambda item: (item[0][0], item[0][1] or 0))
    return [{"device": device, **area.report()} for (device, _), area in areas]


@dataclass
class ResidentScan:
    """A fused scan (a partial aggregate or a projection) over resident columns, ready to run
    (again and again)."""

    scan: fused_scan.FusedScan | fused_project.FusedProjection
    area: ResidentArea
    table: Hashable
    kept: OnDevice | None = None  # its block tables (and accumulators) on the device, once the area keeps it

    @property
    def nbytes(self) -> int:
        """Bytes it holds on the device."""
        return 0 if self.kept is None else self.kept.nbytes

    @property
    def columns(self) -> list[tuple[Hashable, str]]:
        """The keys of the resident columns it reads."""
        return [(self.table, name) for name in self.scan.images]

    def buffer(self, column: str, key: str) -> Any:
        return self.area.buffer((self.table, column), key)

    def run(self, backend: CupyBackend) -> np.ndarray | fused_project.Answer | None:
        """The accumulators (or the projection's answer), or None if a column was evicted meanwhile
        by a concurrent scan's load, or a projection's answer outgrows the result area."""
        try:
            if not isinstance(self.scan, fused_project.FusedProjection):
                return backend.fused_aggregate(self.scan, self.buffer, self.kept)
            result = DeviceAreas.of_current_device(backend).result  # the answer stays within the budget
            try:
                with backend.xp.cuda.using_allocator(result.malloc):
                    return backend.fused_project(self.scan, self.buffer, self.kept)
            except backend.xp.cuda.memory.OutOfMemoryError:
                return None  # the block pipeline answers it, block by block
        except (TooLarge, KeyError):
            return None


def plan_resident(
    backend: CupyBackend,
    table: Hashable,
    blocks: Sequence[EncodedBlock],
    selected: Sequence[int],
    predicate: E.Expr | None,
    keys: list[NamedExpr],
    aggregates: list[AggSpec],
) -> ResidentScan | None:
    """The partial aggregate over the `selected` of a table's `blocks` (all of them, in the table's
    order: `table` names them) on the current device, its columns made resident; None where the
    fused kernels cannot run it; TooLarge where a column outgrows the area (`gpu_kernels.streamed`
    then streams it from host memory). Planned once for scans alike (`ResidentArea.planned`)."""

    def plan() -> ResidentScan | None:
        area, images = _images(backend, table, blocks, fused_scan.columns_read(predicate, keys, aggregates))
        scan = fused_scan.plan(images, selected, predicate, keys, aggregates) if images else None
        return None if scan is None else ResidentScan(scan, area, table)

    shape = ("aggregate", table, tuple(selected), predicate, tuple(keys), tuple(aggregates))
    return area_of(backend).planned(shape, plan)


def plan_resident_projection(
    backend: CupyBackend,
    table: Hashable,
    blocks: Sequence[EncodedBlock],
    selected: Sequence[int],
    predicate: E.Expr | None,
    outputs: list[NamedExpr],
    partition: fused_project.Partition | None = None,
) -> ResidentScan | None:
    """The projection of the `selected` of a table's `blocks` as `plan_resident` plans an aggregate
    (`gpu_kernels.fused_project`), hash-partitioned on the device where `partition` says; TooLarge
    where a column outgrows the area."""

    def plan() -> ResidentScan | None:
        if not fused_project.may_fuse([blocks[i].columns for i in selected], predicate, outputs):
            return None
        area, images = _images(backend, table, blocks, fused_project.columns_read(predicate, outputs))
        scan = fused_project.plan(images, selected, predicate, outputs, partition) if images else None
        return None if scan is None else ResidentScan(scan, area, table)

    shape = ("projection", table, tuple(selected), predicate, tuple(outputs), partition)
    return area_of(backend).planned(shape, plan)


def _images(
    backend: CupyBackend, table: Hashable, blocks: Sequence[EncodedBlock], names: list[str]
) -> tuple[ResidentArea, dict[str, ColumnImage]]:
    """The current device's resident area and the images of the columns `names` there (none for
    COUNT(*) alone: no column to keep)."""
    area = area_of(backend)
    columns = [b.columns for b in blocks]
    return area, {n: area.image((table, n), lambda n=n: ColumnImage.of(n, [b[n] for b in columns])) for n in names}
