"""A process's memory budget: the most private memory (heap, results) it may hold.

The limit is RLIMIT_DATA, which counts a process's private writable mappings and not the block
files it maps read-only, so the decoded blocks a node and its scan workers share through the page
cache are outside every budget. Past the limit an allocation fails with MemoryError: the scan that
asked fails with `out_of_memory`, and the machine never runs out, which would have the kernel's
OOM killer stop some process of the region, whichever holds most.
"""

from __future__ import annotations

import resource

from storage.errors import OutOfMemoryError

OUT_OF_MEMORY = OutOfMemoryError.code  # the code a scan that went past its process's budget fails with
# RLIMIT_DATA counts address space reserved, not only used. Arrow's default allocator (mimalloc)
# reserves 1 GiB at its first allocation and keeps growing arenas mapped once their memory is
# freed (a node at SF 10 held 3.4 GiB of address space for 1.3 GiB resident), so Arrow allocates
# with glibc's malloc, in two arenas. glibc's own growing thresholds are fixed where they would
# grow to: an array above 32 MiB is mapped and goes back to the system when freed, and an arena
# keeps at most 64 MiB free at its top for the next block's arrays. (A 1 MiB threshold, which
# returned every larger array at once, made each scan fault its pages in again: whole TPC-H
# queries took twice as long.) It must be in a process's environment when it starts (glibc) or
# before pyarrow allocates (Arrow): `cxg` puts it there first thing, for itself and what it starts.
# DataFusion allocates with its own mimalloc, which gives freed memory back to the system after
# 10 ms: the next query (or the next run of the same one) faulted it in again, page by page. Kept
# for a second, back-to-back queries reuse it (TPC-DS SF 1 on one node: 2-7% faster in geometric
# mean, measured side by side), and an idle node still gives it back.
ALLOCATOR_ENVIRONMENT = {
    "MIMALLOC_PURGE_DELAY": "1000",
    "ARROW_DEFAULT_MEMORY_POOL": "system",
    "GLIBC_TUNABLES": ":".join(
        ("glibc.malloc.arena_max=2", "glibc.malloc.mmap_threshold=33554432", "glibc.malloc.trim_threshold=67108864")
    ),
}


def limit_private_memory(budget: int | None) -> None:
    """Hold this process (and what it starts) to `budget` bytes of private memory; None: no limit."""
    if budget is None:
        return
    _, hard = resource.getrlimit(resource.RLIMIT_DATA)
    if hard != resource.RLIM_INFINITY:
        budget = min(budget, hard)
    resource.setrlimit(resource.RLIMIT_DATA, (budget, hard))


def private_memory_limit() -> int | None:
    """This process's budget, None when it has none."""
    soft, _ = resource.getrlimit(resource.RLIMIT_DATA)
    return None if soft == resource.RLIM_INFINITY else soft
