"""Worker processes that run a CPU scan's blocks on every core of the node.

NumPy lets go of the GIL inside its loops, but a block's operator spends much of its time between
them (dispatch, small arrays), so the threads of one process hardly add up, even on a scan as
simple as TPC-H Q1's. Processes do add up.

A scan first runs its blocks in the node's own process. Once it has run for `SPREAD_AFTER_S`, if
the time the workers would save on the remaining blocks (estimated from the blocks done) exceeds
what spreading costs, the remaining blocks are split into contiguous chunks, two per worker, and
each chunk goes to a worker with the scan's task, pickled once per scan and unpickled once per
worker (a long IN list's lookup table is built once per worker, not once per block). A worker
maps the block files it is given itself (the node has checked and decoded them: they are shared
through the page cache, not copied per process) and keeps them mapped per table version: block files
are immutable (a load writes new names and the commit swaps the manifest), so a name mapped once
stays valid. Results come back in block order as Arrow record batches with their statistics.

A chunk a worker could not run (its file replaced by a load since the scan began, a worker that
died) is run in the node's process from the blocks the scan holds, so a scan never fails for a
reason of the workers' own; the pool is started again for the next scan.
"""

from __future__ import annotations

import ctypes
import itertools
import logging
import math
import multiprocessing
import os
import pickle
import signal
import sys
import tempfile
import threading
import time
import uuid
from collections import OrderedDict
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import Future, ProcessPoolExecutor
from concurrent.futures.process import BrokenProcessPool
from pathlib import Path
from typing import Any

import pyarrow as pa

from gpu_kernels import BlockTask, EncodedBlock, Expr, NumpyBackend, ScanStats, run_block
from gpu_kernels import expr as E
from storage.blockfile import BlockEntry, map_block
from storage.memory_budget import limit_private_memory
from storage.scan_protocol import allow_deep_expressions

log = logging.getLogger("cxg.node")
SPREAD_AFTER_S = 0.005  # a scan still running after this long may send its remaining blocks to the workers
# ... if that saves more than it costs: a round trip, and per byte of the pickled task, unpickling
# it and building its IN lists' lookup tables in each worker, and the lookups themselves, which
# slow each other down across cores (a table of megabytes per worker): a scan of long IN lists,
# as TPC-H Q3's lineitem against its order keys, is often slower spread than on one core
SPREAD_COST_S = 0.003
SPREAD_COST_PER_BYTE_S = 20e-9
CHUNKS_PER_WORKER = 2
# a chunk's results of more than this many bytes come back through a file in shared memory: sent
# pickled through the worker's pipe they cost more than the worker saved (TPC-H Q18's 1.5M groups)
SHARED_BYTES = 1 << 20
PR_SET_PDEATHSIG = 1  # prctl(2)
SHARED_DIR = "/dev/shm" if os.path.isdir("/dev/shm") else tempfile.gettempdir()

Job = tuple[BlockEntry, EncodedBlock, tuple[int, ...]]  # a block and the positions of its conjuncts left
Pieces = list[tuple[Any, int | None]]  # (record batch, hash bucket or None)
Result = tuple[BlockEntry, Pieces, ScanStats]


class ScanWorkers:
    """A pool of `processes` worker processes shared by a node's scans, started on first use, each
    held to `memory` bytes of its own (`storage.memory_budget`; None: the node's budget)."""

    def __init__(self, processes: int, memory: int | None = None):
        self.processes = processes
        self.memory = memory
        self.shared_bytes = SHARED_BYTES
        self.chunks = 0  # chunks run by the workers
        self._pool: ProcessPoolExecutor | None = None
        self._lock = threading.Lock()

    def _executor(self) -> ProcessPoolExecutor:
        with self._lock:
            if self._pool is None:
                context = multiprocessing.get_context("forkserver")
                self._pool = ProcessPoolExecutor(
                    self.processes, mp_context=context, initializer=_start_worker, initargs=(self.memory,)
                )
            return self._pool

    def start(self) -> list[int]:
        """Start every worker now, not on the first long scan (which would wait for them); their
        process ids."""
        pool = self._executor()
        futures = [pool.submit(_started, 0.05) for _ in range(self.processes)]  # a pause: one each
        return sorted({f.result() for f in futures})

    def _broken(self, pool: ProcessPoolExecutor) -> None:
        with self._lock:
            if self._pool is pool:
                self._pool = None
        pool.shutdown(wait=False, cancel_futures=True)

    def close(self) -> None:
        with self._lock:
            pool, self._pool = self._pool, None
        if pool is not None:
            pool.shutdown(wait=False, cancel_futures=True)

    def map(
        self,
        directory: Path,
        version: Any,
        task: BlockTask,
        jobs: Sequence[Job],
        local: Callable[[Job], Result],
        cancel: threading.Event,
    ) -> Iterator[Result]:
        """`local(job)` for every job, in job order: in this process, or once the scan has run
        `SPREAD_AFTER_S` and if it pays, the rest on the workers (`version` names the table's
        version, so a worker never mixes blocks of two)."""
        started = first = time.perf_counter()
        spread_after = SPREAD_AFTER_S
        for i, job in enumerate(jobs):
            if cancel.is_set():
                return
            now = time.perf_counter()
            if i == 1:
                first = now  # the first block also paid the scan's setup (IN lists' lookup tables)
            if 1 < i < len(jobs) - 1 and now - started >= spread_after:
                spread_after = math.inf  # decided once
                blob = pickle.dumps(task, protocol=pickle.HIGHEST_PROTOCOL)
                saved = (now - first) / (i - 1) * (len(jobs) - i) * (1 - 1 / self.processes)
                if saved > SPREAD_COST_S + len(blob) * SPREAD_COST_PER_BYTE_S:
                    yield from self._spread(directory, version, blob, jobs[i:], local, cancel)
                    return
            yield local(job)

    def _spread(self, directory, version, blob: bytes, jobs: Sequence[Job], local, cancel) -> Iterator[Result]:
        count = min(len(jobs), self.processes * CHUNKS_PER_WORKER)
        bounds = [len(jobs) * k // count for k in range(count + 1)]
        chunks = [jobs[a:b] for a, b in itertools.pairwise(bounds)]
        pool = self._executor()
        futures: list[Future | None] = []
        token = uuid.uuid4().hex
        try:
            for chunk in chunks:
                work = [(entry, remaining) for entry, _, remaining in chunk]
                futures.append(pool.submit(_run_chunk, str(directory), version, token, blob, work, self.shared_bytes))
        except (BrokenProcessPool, RuntimeError):  # a worker died earlier, or the pool was shut down
            self._broken(pool)
            futures += [None] * (len(chunks) - len(futures))
        taken = 0
        try:
            for chunk, future in zip(chunks, futures, strict=True):
                if cancel.is_set():
                    return
                taken += 1
                outcomes = self._outcomes(pool, future, chunk)
                for job, outcome in zip(chunk, outcomes or [None] * len(chunk), strict=True):
                    if cancel.is_set():
                        return
                    yield (job[0], *outcome) if outcome is not None else local(job)
        finally:
            for future in futures[taken:]:
                if future is not None and not future.cancel():
                    future.add_done_callback(_discard)  # a chunk finished but not taken: its file goes

    def _outcomes(self, pool: ProcessPoolExecutor, future: Future | None, chunk) -> list | None:
        """A chunk's (pieces, stats) per block from its worker; None to run it here instead."""
        if future is None:
            return None
        try:
            outcomes = _received(future.result())
            self.chunks += 1
            return outcomes
        except BrokenProcessPool:
            log.warning("a scan worker died; its blocks run in the node's process and the pool restarts")
            self._broken(pool)
        except Exception as e:  # a block file replaced by a load since the scan began, say
            log.info("a scan worker failed on blocks from %s (%s); they run in the node's process", chunk[0][0].file, e)
        return None


def run_job(
    task: BlockTask,
    conjuncts: list[Expr],
    block: EncodedBlock,
    remaining: tuple[int, ...],
    backend: NumpyBackend,
    device_parts: dict | None = None,
) -> tuple[Pieces, ScanStats]:
    """One block of a scan, in whichever process: `remaining` are the positions of the task's
    conjuncts its statistics left to evaluate."""
    started = time.thread_time()
    stats = ScanStats()
    predicate = E.conjoin([conjuncts[i] for i in remaining])
    pieces = run_block(task, block, backend, stats, predicate, device_parts)
    stats.cpu_seconds = time.thread_time() - started
    return pieces, stats


def _received(sent: tuple[str | None, list]) -> list[tuple[Pieces, ScanStats]]:
    """A chunk's results as `_run_chunk` sent them: pieces in a shared-memory file are mapped, not
    copied (the file is removed at once; the mapping lives as long as the batches)."""
    path, results = sent
    if path is None:
        return results
    try:
        batches = iter(pa.ipc.open_stream(pa.memory_map(path)))
        return [([(next(batches), part) for part in parts], stats) for parts, stats in results]
    finally:
        os.unlink(path)


def _discard(future: Future) -> None:
    if not future.cancelled() and future.exception() is None:
        path = future.result()[0]
        if path is not None:
            Path(path).unlink(missing_ok=True)


# ---- in the worker processes ------------------------------------------------------------------------


def _started(pause: float) -> int:
    time.sleep(pause)
    return os.getpid()


def _start_worker(memory: int | None) -> None:
    """A worker's first acts: ask the kernel to kill it when its parent exits (the pool's fork
    server, which exits when the node does, however the node died, SIGKILL included, so no worker
    outlives its node holding memory); then take its memory budget."""
    if sys.platform.startswith("linux"):
        ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGKILL)
        if os.getppid() == 1:  # the parent went before the request was made
            os._exit(0)
    limit_private_memory(memory)
    allow_deep_expressions()


_BACKEND = NumpyBackend()
_TABLES: dict[str, tuple[Any, dict[str, EncodedBlock]]] = {}  # table directory -> (version, blocks by file)
# the tasks of the latest scans, unpickled once per worker: a chunk of the same scan finds its long
# IN lists' lookup tables already built (they are cached by the list's identity)
_TASKS: OrderedDict[str, tuple[BlockTask, list[Expr]]] = OrderedDict()
_TASKS_KEPT = 8


def _task(token: str, blob: bytes) -> tuple[BlockTask, list[Expr]]:
    known = _TASKS.get(token)
    if known is None:
        task = pickle.loads(blob)
        known = _TASKS[token] = (task, E.conjuncts(task.predicate))
        while len(_TASKS) > _TASKS_KEPT:
            _TASKS.popitem(last=False)
    return known


def _run_chunk(
    directory: str,
    version: Any,
    token: str,
    blob: bytes,
    jobs: list[tuple[BlockEntry, tuple[int, ...]]],
    shared_bytes: int,
) -> tuple[str | None, list]:
    """Run blocks of one scan: each job is a block and the positions of the task's conjuncts
    its statistics left to evaluate. Results of `shared_bytes` or more go back through a file
    in shared memory (one Arrow stream; the pieces' buckets and the statistics travel pickled)."""
    task, conjuncts = _task(token, blob)
    known = _TABLES.get(directory)
    if known is None or known[0] != version:
        known = _TABLES[directory] = (version, {})
    blocks = known[1]
    results = []
    for entry, remaining in jobs:
        block = blocks.get(entry.file)
        if block is None:
            block = blocks[entry.file] = map_block(Path(directory) / entry.file, entry, verify=False)
        results.append(run_job(task, conjuncts, block, remaining, _BACKEND))
    batches = [batch for pieces, _ in results for batch, _ in pieces]
    if sum(b.nbytes for b in batches) < shared_bytes or len({b.schema for b in batches}) != 1:
        return None, results
    path = os.path.join(SHARED_DIR, f"cxg-scan-{token}-{uuid.uuid4().hex[:8]}.arrow")
    try:
        with pa.OSFile(path, "wb") as sink, pa.ipc.new_stream(sink, batches[0].schema) as writer:
            for batch in batches:
                writer.write_batch(batch)
    except BaseException:
        Path(path).unlink(missing_ok=True)
        raise
    return path, [([part for _, part in pieces], stats) for pieces, stats in results]
