"""A node's worker processes give the same scan results as its own process, whatever goes wrong
with them: a block file gone, a worker killed."""

from __future__ import annotations

import glob
import os
import signal
from pathlib import Path

import pyarrow as pa
import pytest

from gpu_kernels import get_backend
from storage import TableCache, scan_table, scan_workers
from storage.scan_workers import ScanWorkers
from tests.kernel_cases import call, col, lit, load, make_table

REQUESTS = [
    {"columns": ["rid", "grp", "amt"], "filter": call("in", col("rid"), *[lit(i) for i in range(0, 3000, 3)])},
    {"columns": ["rid", "d"], "select": [{"name": "x", "expr": call("*", col("amt"), col("n"))}]},
    {
        "group_by": ["grp", "k"],
        "aggregates": [
            {"name": "c", "func": "count"},
            {"name": "s", "func": "sum", "arg": col("amt")},
            {"name": "a", "func": "avg", "arg": col("f")},
        ],
        "filter": call(">", col("n"), lit(0)),
    },
    {"columns": ["rid", "k"], "partition": {"keys": ["k"], "buckets": 4}},
]


@pytest.fixture(scope="module")
def cache(tmp_path_factory) -> TableCache:
    return load(tmp_path_factory.mktemp("workers"), make_table(11))


@pytest.fixture
def always_spread(monkeypatch) -> None:
    monkeypatch.setattr(scan_workers, "SPREAD_AFTER_S", 0.0)
    monkeypatch.setattr(scan_workers, "SPREAD_COST_S", -1.0)


def scan(cache: TableCache, request: dict, workers: ScanWorkers | None) -> tuple[pa.Table, list, dict]:
    s = scan_table(cache, {"table": "t", **request}, get_backend("numpy"))
    s.workers = workers
    pieces = list(s.pieces())
    table = pa.Table.from_batches([p.batch for p in pieces], schema=s.plan.schema)
    work = {k: v for k, v in s.stats.to_json().items() if k != "cpu_seconds"}  # times differ run to run
    return table, [(p.block, p.partition) for p in pieces], work


def test_worker_processes_return_what_the_node_computes_itself(cache, always_spread) -> None:
    assert len(cache.get("t").blocks) >= 6
    workers = ScanWorkers(2)
    try:
        for shared_bytes in (scan_workers.SHARED_BYTES, 0):  # pickled through the pipe, or a shared file
            workers.shared_bytes = shared_bytes
            for request in REQUESTS:
                assert scan(cache, request, workers) == scan(cache, request, None), request
        assert workers.chunks > 0, "the blocks were run by the workers"
        assert not glob.glob(os.path.join(scan_workers.SHARED_DIR, "cxg-scan-*")), "shared files are removed"
    finally:
        workers.close()


def test_a_block_file_gone_or_a_worker_killed_costs_no_result(tmp_path, always_spread) -> None:
    cache = load(tmp_path, make_table(12))
    expected = scan(cache, REQUESTS[2], None)
    loaded = cache.get("t")  # the node holds its blocks in memory; a worker reads the files
    entry = loaded.blocks[-1][0]
    Path(loaded.table.store.table_dir("t"), entry.file).unlink()
    workers = ScanWorkers(2)
    try:
        assert scan(cache, REQUESTS[2], workers) == expected
        for pid in list(workers._executor()._processes):
            os.kill(pid, signal.SIGKILL)
        assert scan(cache, REQUESTS[2], workers) == expected, "a dead pool: the blocks run in the node"
        chunks = workers.chunks
        assert scan(cache, REQUESTS[2], workers) == expected
        assert workers.chunks > chunks, "the pool is started again"
    finally:
        workers.close()


def test_a_scan_the_workers_would_not_shorten_stays_in_the_node(cache, monkeypatch) -> None:
    monkeypatch.setattr(scan_workers, "SPREAD_AFTER_S", 0.0)
    monkeypatch.setattr(scan_workers, "SPREAD_COST_S", 3600.0)  # more than any scan here saves
    workers = ScanWorkers(2)
    try:
        assert scan(cache, REQUESTS[0], workers) == scan(cache, REQUESTS[0], None)
        assert workers.chunks == 0
    finally:
        workers.close()


def _mapped_blocks(pid: int | str) -> set[str]:
    """The decoded block files a process has mapped."""
    return {line.split()[-1] for line in Path(f"/proc/{pid}/maps").read_text().splitlines() if "/decoded/" in line}


def test_the_node_and_its_workers_map_one_copy_of_the_blocks(tmp_path, always_spread) -> None:
    """No process holds a private copy of a block: the node and every worker map the same decoded
    files, which the page cache holds once."""
    cache = load(tmp_path, make_table(13))
    cache.get("t")
    node_maps = _mapped_blocks("self")
    blocks = {str(p) for p in Path(cache.store.table_dir("t"), "decoded").iterdir()}
    assert blocks and blocks <= node_maps, "the node maps its decoded blocks"
    workers = ScanWorkers(2)
    try:
        scan(cache, REQUESTS[2], workers)
        assert workers.chunks > 0
        mapped = [_mapped_blocks(pid) for pid in workers._executor()._processes]
        assert all(m and m <= blocks for m in mapped), "each worker maps the node's files, reads no copy"
    finally:
        workers.close()
