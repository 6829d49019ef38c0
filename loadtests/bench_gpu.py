"""The GPU path's work per block, counted: TPC-H Q1 and Q6 and range filters on the sorted and the
unsorted column of lineitem (the scans of `loadtests.bench_scan`), run by the CuPy backend.

    python -m loadtests.bench_gpu --dry-run [--sf 0.01] [--json PATH]

With `--dry-run` the backend runs against the strict stand-in of CuPy (`tests/cupy_standin.py`,
from the repository's root: no GPU needed), which counts, per block, the kernel launches, the
times the host waits for the device (each value read back), and the bytes copied each way; every
answer is compared with the NumPy backend's. The counts are what the design is judged by where
no GPU is: a block's work should be a few launches and one synchronization, its result. The timed
run on a GPU (CUDA events, ceilings, the compressed-transfer tables) is not built yet.
"""

from __future__ import annotations

import argparse
import tempfile
from pathlib import Path
from typing import Any

import pyarrow as pa

from gpu_kernels import final_aggregate, get_backend
from loadtests.bench_scan import QUERIES
from loadtests.common import console, print_table, write_json
from storage import LoadOptions, Store, TableCache, load_table, read_parquet, scan_table, tpch


def _scan(cache: TableCache, backend: Any, request: dict, keys: list[str]) -> tuple[pa.Table, int]:
    scan = scan_table(cache, {"table": "lineitem", **request}, backend)
    partials = pa.Table.from_batches([p.batch for p in scan.pieces()], schema=scan.plan.schema)
    result = final_aggregate(partials, keys, list(scan.plan.task.aggregates))
    return result.sort_by([(k, "ascending") for k in keys]) if keys else result, scan.stats.blocks


def dry_run(sf: float, block_rows: int) -> dict[str, Any]:
    """Each query's counts per block under the stand-in, by the general kernels and by the fused
    kernel, every answer checked against NumPy's."""
    figures: dict[str, Any] = {"sf": sf, "block_rows": block_rows, "queries": {}}
    with tempfile.TemporaryDirectory(prefix="cxg-gpu-") as tmp:
        files = tpch.generate(sf, Path(tmp) / "tpch", ["lineitem"])
        store = Store(Path(tmp) / "node")
        source = read_parquet([files["lineitem"]])
        schema = tpch.schema_for("lineitem", source.schema)
        record = source.nbytes // max(1, source.num_rows)
        load_table([store], schema, source, LoadOptions(block_budget=block_rows * record))
        cache = TableCache(store)
        numpy = get_backend("numpy")
        for name, (request, _, keys) in QUERIES.items():
            expected, _ = _scan(cache, numpy, request, keys)
            figures["queries"][name] = {path: _counted(cache, request, keys, expected, path) for path in PATHS}
    return figures


PATHS = ("general", "fused")  # the general kernels (one launch per step), the generated fused kernel


def _counted(cache: TableCache, request: dict, keys: list[str], expected: pa.Table, path: str) -> dict[str, float]:
    """One scan's counts per block on the stand-in, by the general kernels or the fused one."""
    from tests.cupy_standin import installed

    with installed() as standin:
        backend = get_backend("cupy")
        backend.fuses = path == "fused"
        try:
            _scan(cache, backend, request, keys)  # the kernels' one-time setup out of the counts
            before = _snapshot(standin.counts)
            got, blocks = _scan(cache, backend, request, keys)
            after = _snapshot(standin.counts)
        finally:
            del backend.fuses
    if not got.equals(expected):
        raise SystemExit(f"{path} kernels answer {got.to_pylist()}, NumPy's {expected.to_pylist()}")
    return {"blocks": blocks, **{f"{k}_per_block": (after[k] - before[k]) / max(1, blocks) for k in after}}


def _snapshot(counts: Any) -> dict[str, float]:
    return {
        "launches": counts.total_launches,
        "syncs": counts.syncs,
        "to_device_bytes": counts.to_device,
        "to_host_bytes": counts.to_host,
    }


def report(figures: dict[str, Any]) -> None:
    rows = []
    for name, q in figures["queries"].items():
        general, fused = q["general"], q["fused"]
        rows.append(
            [name, str(fused["blocks"])]
            + [f"{general[k]:.{d}f} → {fused[k]:.{d}f}" for k, d in (("launches_per_block", 0), ("syncs_per_block", 1))]
            + [
                f"{fused['to_device_bytes_per_block'] / 1e6:.2f}",
                f"{general['to_host_bytes_per_block'] / 1e3:.2f} → {fused['to_host_bytes_per_block'] / 1e3:.2f}",
            ]
        )
    print_table(
        f"Per block on the CuPy backend (stand-in), general kernels → fused kernel, lineitem SF {figures['sf']:g}, "
        f"{figures['block_rows']:,} rows a block at most",
        ["query", "blocks", "launches", "host syncs", "MB to device", "KB to host"],
        rows,
    )


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--dry-run", action="store_true", required=True, help="count on the stand-in of CuPy")
    p.add_argument("--sf", type=float, default=0.01, help="TPC-H scale factor (default 0.01)")
    p.add_argument("--block-rows", type=int, default=16_384, help="rows a block (default 16384)")
    p.add_argument("--json", type=Path, metavar="PATH", help="also write the figures as JSON")
    args = p.parse_args(argv)
    with console.status(f"running the scans of lineitem SF {args.sf:g} on the stand-in"):
        figures = dry_run(args.sf, args.block_rows)
    report(figures)
    write_json(args.json, figures)


if __name__ == "__main__":
    main()
