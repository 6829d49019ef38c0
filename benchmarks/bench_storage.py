"""Storage benchmark: TPC-H lineitem, bytes per column in memory and on disk, against peers.

Peers, all measured in the same run from the same in-memory Arrow table (generation order):
plain Arrow (decimal128, string_view), Parquet with zstd (pyarrow), and a DuckDB database
file. Ours: encoded blocks in memory (the Arrow parts) and block files on disk (zstd-wrapped).
Per-column on-disk bytes of ours are each column's parts compressed alone; DuckDB's per-column
bytes are estimated from segment offsets (`pragma_storage_info`), its total is the file size.

    python -m benchmarks.bench_storage [--sf 1] [--json PATH]
"""

from __future__ import annotations

import tempfile
from collections import Counter, defaultdict
from pathlib import Path
from typing import Any

import duckdb
import pyarrow as pa
import pyarrow.parquet as pq
import zstandard

from benchmarks.common import mb, parser, timed
from gpu_kernels import EncodedBlock, plain_nbytes
from loadtests import console, print_table, write_json
from storage import ZSTD_LEVEL, LoadOptions, Store, block_to_ipc, load_table, read_parquet, tpch

DUCKDB_BLOCK = 256 * 1024
TABLE = "lineitem"


def measure_ours(source: pa.Table, directory: Path) -> dict[str, Any]:
    store = Store(directory)
    schema = tpch.schema_for(TABLE, source.schema)
    with timed() as load:
        load_table([store], schema, source, LoadOptions())
    table = store.table(TABLE)
    memory: Counter = Counter()
    disk: Counter = Counter()
    chains: dict[str, Counter] = defaultdict(Counter)
    compressor = zstandard.ZstdCompressor(level=ZSTD_LEVEL)
    for _, block in table.iter_blocks():
        for name, column in block.columns.items():
            memory[name] += column.nbytes
            chains[name][column.encoding.chain.split("(")[0]] += 1
            alone = block_to_ipc(EncodedBlock(block.rows, {name: column}))
            disk[name] += len(compressor.compress(alone))
    with timed() as decode:
        decoded = table.to_arrow()
    assert decoded.num_rows == source.num_rows
    return {
        "load_s": load["s"],
        "decode_s": decode["s"],
        "blocks": len(table.blocks),
        "block_rows": table.manifest.sizing.block_rows,
        "memory_bytes": dict(memory),
        "disk_bytes": dict(disk),
        "memory_total": sum(memory.values()),
        "disk_total": sum(b.bytes for b in table.blocks),
        "chains": {name: "/".join(c for c, _ in counts.most_common()) for name, counts in chains.items()},
    }


def measure_parquet(source: pa.Table, path: Path) -> dict[str, Any]:
    with timed() as write:
        pq.write_table(source, path, compression="zstd")
    metadata = pq.ParquetFile(path).metadata
    per_column: Counter = Counter()
    for g in range(metadata.num_row_groups):
        group = metadata.row_group(g)
        for c in range(group.num_columns):
            chunk = group.column(c)
            per_column[chunk.path_in_schema] += chunk.total_compressed_size
    with timed() as read:
        pq.read_table(path)
    return {"load_s": write["s"], "decode_s": read["s"], "bytes": dict(per_column), "total": path.stat().st_size}


def measure_duckdb(source: pa.Table, path: Path) -> dict[str, Any]:
    with timed() as load:
        con = duckdb.connect(str(path))
        con.register("source", source)
        con.execute(f"CREATE TABLE {TABLE} AS SELECT * FROM source")
        con.execute("CHECKPOINT")
    segments = con.execute(
        f"SELECT column_name, block_id, block_offset, len(additional_block_ids) "
        f"FROM pragma_storage_info('{TABLE}') WHERE persistent AND block_id >= 0"
    ).fetchall()
    with timed() as read:
        con.sql(f"SELECT * FROM {TABLE}").to_arrow_table()
    con.close()
    by_block: dict[int, list[tuple[int, str, int]]] = defaultdict(list)
    for column, block, offset, extra in segments:
        by_block[block].append((offset, column, extra))
    per_column: Counter = Counter()
    for entries in by_block.values():
        entries.sort()
        for i, (offset, column, extra) in enumerate(entries):
            end = entries[i + 1][0] if i + 1 < len(entries) else DUCKDB_BLOCK
            per_column[column] += end - offset + extra * DUCKDB_BLOCK
    return {"load_s": load["s"], "decode_s": read["s"], "bytes": dict(per_column), "total": path.stat().st_size}


def run(sf: float) -> dict[str, Any]:
    with tempfile.TemporaryDirectory(prefix="cxg-bench-storage-") as tmp:
        work = Path(tmp)
        with console.status(f"generating TPC-H {TABLE} at SF {sf:g}"), timed() as generate:
            files = tpch.generate(sf, work / "tpch", [TABLE])
        source = read_parquet([files[TABLE]])
        plain = {name: plain_nbytes(source.column(name).combine_chunks()) for name in source.column_names}
        with console.status("ours: load, encode, write"):
            ours = measure_ours(source, work / "store")
        with console.status("Parquet + zstd"):
            parquet = measure_parquet(source, work / "lineitem.parquet")
        with console.status("DuckDB file"):
            duck = measure_duckdb(source, work / "lineitem.duckdb")
    return {
        "benchmark": "storage",
        "sf": sf,
        "rows": source.num_rows,
        "generate_s": generate["s"],
        "plain_arrow": {"bytes": plain, "total": sum(plain.values())},
        "ours": ours,
        "parquet_zstd": parquet,
        "duckdb": duck,
    }


def report(figures: dict[str, Any]) -> None:
    ours, parquet, duck, plain = figures["ours"], figures["parquet_zstd"], figures["duckdb"], figures["plain_arrow"]
    rows = []
    for name, plain_bytes in plain["bytes"].items():
        rows.append(
            [
                name,
                ours["chains"][name],
                mb(plain_bytes),
                mb(ours["memory_bytes"][name]),
                mb(ours["disk_bytes"][name]),
                mb(parquet["bytes"].get(name, 0)),
                "≈" + mb(duck["bytes"].get(name, 0)),
            ]
        )
    rows.append(None)
    rows.append(
        [
            "total",
            f"{ours['blocks']} blocks",
            mb(plain["total"]),
            mb(ours["memory_total"]),
            mb(ours["disk_total"]),
            mb(parquet["total"]),
            mb(duck["total"]),
        ]
    )
    rows.append(["load s", "", "", f"{ours['load_s']:.2f}", "", f"{parquet['load_s']:.2f}", f"{duck['load_s']:.2f}"])
    rows.append(
        ["read back s", "", "", f"{ours['decode_s']:.2f}", "", f"{parquet['decode_s']:.2f}", f"{duck['decode_s']:.2f}"]
    )
    headers = ["column", "our chain", "plain Arrow MB", "ours in memory MB", "ours on disk MB", "Parquet+zstd MB"]
    print_table(f"TPC-H {TABLE}, SF {figures['sf']:g}: {figures['rows']:,} rows", [*headers, "DuckDB file MB"], rows)
    memory_vs_duck = ours["memory_total"] / duck["total"]
    disk_vs_parquet = ours["disk_total"] / parquet["total"]
    console.print(f"in memory: ours / DuckDB file = {memory_vs_duck:.2f} (goal <= 1: {_verdict(memory_vs_duck)})")
    console.print(f"on disk: ours / Parquet+zstd = {disk_vs_parquet:.2f} (goal <= 1: {_verdict(disk_vs_parquet)})")
    console.print(f"plain Arrow / ours in memory = {plain['total'] / ours['memory_total']:.1f}")
    figures["ratios"] = {
        "memory_vs_duckdb_file": memory_vs_duck,
        "disk_vs_parquet_zstd": disk_vs_parquet,
        "plain_arrow_vs_memory": plain["total"] / ours["memory_total"],
    }


def _verdict(ratio: float) -> str:
    return "met" if ratio <= 1 else "MISSED"


def main(argv: list[str] | None = None) -> None:
    args = parser(__doc__.splitlines()[0]).parse_args(argv)
    figures = run(args.sf)
    report(figures)
    write_json(args.json, figures)


if __name__ == "__main__":
    main()
