"""Scan benchmark: select-project and partial aggregates on compressed lineitem, against DuckDB.

Run side by side in one process on the same TPC-H data: the select-project + aggregate parts of
TPC-H Q1 and Q6, and range filters (selective and unselective) on the sorted l_shipdate and the
unsorted l_partkey. Ours: the storage node's scan (kernels on encoded blocks, one worker thread:
a query holds one core) plus the final merge of the partial aggregates. DuckDB: the same SQL on a
table of the same Arrow data, with one thread and with all threads. Every answer is checked
against DuckDB's. The CuPy backend on a GPU is measured by `benchmarks.bench_gpu`.

    python -m benchmarks.bench_scan [--sf 1] [--json PATH] [--repeat 7]
"""

from __future__ import annotations

import os
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

import duckdb
import pyarrow as pa

from benchmarks.common import bench_main
from gpu_kernels import NumpyBackend, final_aggregate, get_backend
from gpu_kernels import expr as E
from loadtests import console, print_table
from storage import (
    LoadOptions,
    Store,
    TableCache,
    expr_from_json,
    kernel_expr,
    load_table,
    read_parquet,
    scan_table,
    tpch,
)


def _col(name: str) -> dict:
    return {"col": name}


def _date(text: str) -> dict:
    return {"lit": text, "type": "date"}


def _dec(text: str) -> dict:
    return {"lit": text, "type": "decimal(15,2)"}


def _op(op: str, *args: dict) -> dict:
    return {"op": op, "args": list(args)}


_DISC_PRICE = _op("*", _col("l_extendedprice"), _op("-", {"lit": 1}, _col("l_discount")))
_COUNT_SUM = [{"name": "n", "func": "count"}, {"name": "s", "func": "sum", "arg": _col("l_extendedprice")}]

QUERIES: dict[str, tuple[dict, str, list[str]]] = {
    "Q1": (
        {
            "filter": _op("<=", _col("l_shipdate"), _op("-", _date("1998-12-01"), {"lit": 90, "type": "interval_day"})),
            "group_by": ["l_returnflag", "l_linestatus"],
            "aggregates": [
                {"name": "sum_qty", "func": "sum", "arg": _col("l_quantity")},
                {"name": "sum_base_price", "func": "sum", "arg": _col("l_extendedprice")},
                {"name": "sum_disc_price", "func": "sum", "arg": _DISC_PRICE},
                {
                    "name": "sum_charge",
                    "func": "sum",
                    "arg": _op("*", _DISC_PRICE, _op("+", {"lit": 1}, _col("l_tax"))),
                },
                {"name": "avg_qty", "func": "avg", "arg": _col("l_quantity")},
                {"name": "avg_price", "func": "avg", "arg": _col("l_extendedprice")},
                {"name": "avg_disc", "func": "avg", "arg": _col("l_discount")},
                {"name": "count_order", "func": "count"},
            ],
        },
        """SELECT l_returnflag, l_linestatus, sum(l_quantity) AS sum_qty, sum(l_extendedprice) AS sum_base_price,
                  sum(l_extendedprice * (1 - l_discount)) AS sum_disc_price,
                  sum(l_extendedprice * (1 - l_discount) * (1 + l_tax)) AS sum_charge,
                  avg(l_quantity) AS avg_qty, avg(l_extendedprice) AS avg_price, avg(l_discount) AS avg_disc,
                  count(*) AS count_order
           FROM lineitem WHERE l_shipdate <= DATE '1998-12-01' - INTERVAL '90' DAY
           GROUP BY l_returnflag, l_linestatus""",
        ["l_returnflag", "l_linestatus"],
    ),
    "Q6": (
        {
            "filter": _op(
                "and",
                _op(">=", _col("l_shipdate"), _date("1994-01-01")),
                _op("<", _col("l_shipdate"), _date("1995-01-01")),
                _op("between", _col("l_discount"), _dec("0.05"), _dec("0.07")),
                _op("<", _col("l_quantity"), {"lit": 24}),
            ),
            "aggregates": [
                {"name": "revenue", "func": "sum", "arg": _op("*", _col("l_extendedprice"), _col("l_discount"))}
            ],
        },
        """SELECT sum(l_extendedprice * l_discount) AS revenue FROM lineitem
           WHERE l_shipdate >= DATE '1994-01-01' AND l_shipdate < DATE '1995-01-01'
             AND l_discount BETWEEN 0.05 AND 0.07 AND l_quantity < 24""",
        [],
    ),
    "sorted, selective": (
        {
            "filter": _op("between", _col("l_shipdate"), _date("1995-03-01"), _date("1995-03-07")),
            "aggregates": _COUNT_SUM,
        },
        "SELECT count(*) AS n, sum(l_extendedprice) AS s FROM lineitem "
        "WHERE l_shipdate BETWEEN DATE '1995-03-01' AND DATE '1995-03-07'",
        [],
    ),
    "sorted, unselective": (
        {"filter": _op("<=", _col("l_shipdate"), _date("1997-12-31")), "aggregates": _COUNT_SUM},
        "SELECT count(*) AS n, sum(l_extendedprice) AS s FROM lineitem WHERE l_shipdate <= DATE '1997-12-31'",
        [],
    ),
    "unsorted, selective": (
        {"filter": _op("between", _col("l_partkey"), {"lit": 1000}, {"lit": 1999}), "aggregates": _COUNT_SUM},
        "SELECT count(*) AS n, sum(l_extendedprice) AS s FROM lineitem WHERE l_partkey BETWEEN 1000 AND 1999",
        [],
    ),
    "unsorted, unselective": (
        {"filter": _op("<", _col("l_partkey"), {"lit": 150_000}), "aggregates": _COUNT_SUM},
        "SELECT count(*) AS n, sum(l_extendedprice) AS s FROM lineitem WHERE l_partkey < 150000",
        [],
    ),
}


def _timed(fn, repeat: int) -> tuple[float, float, Any]:
    result = fn()  # warm
    times = []
    for _ in range(repeat):
        started = time.perf_counter()
        result = fn()
        times.append(time.perf_counter() - started)
    return min(times), statistics.median(times), result


def run_ours(cache: TableCache, backend: NumpyBackend, request: dict, keys: list[str]):
    scan = scan_table(cache, {"table": "lineitem", **request}, backend)
    partials = pa.Table.from_batches([p.batch for p in scan.pieces()], schema=scan.plan.schema)
    return final_aggregate(partials, keys, list(scan.plan.task.aggregates)), scan.stats


def _rows(table: pa.Table, keys: list[str]) -> dict:
    return {tuple(r[k] for k in keys): r for r in table.to_pylist()}


def _same(ours: pa.Table, theirs: pa.Table, keys: list[str]) -> bool:
    a, b = _rows(ours, keys), _rows(theirs, keys)
    if a.keys() != b.keys():
        return False
    for key, row in a.items():
        for name, value in row.items():
            other = b[key][name]
            if value is None or other is None or isinstance(value, str):
                if value != other:
                    return False
            elif abs(float(value) - float(other)) > 1e-9 * max(1.0, abs(float(other))):
                return False
    return True


def decoded_bytes(cache: TableCache, request: dict, stats) -> int:
    """Bytes the touched columns take decoded (plain Arrow), over the rows of the blocks scanned."""
    loaded = cache.get("lineitem")
    names = set()
    for part in (request.get("filter"), *(a.get("arg") for a in request.get("aggregates", []))):
        if part is not None:
            names |= E.columns_of(kernel_expr(expr_from_json(part)))
    names |= set(request.get("group_by", []))
    total_rows = sum(entry.rows for entry, _ in loaded.blocks)
    plain = sum(entry.columns[n].plain_bytes for entry, _ in loaded.blocks for n in names)
    return int(plain * stats.rows_scanned / total_rows)


def run(sf: float, repeat: int) -> dict[str, Any]:
    with tempfile.TemporaryDirectory(prefix="cxg-bench-scan-") as tmp:
        with console.status(f"generating TPC-H lineitem at SF {sf:g}"):
            files = tpch.generate(sf, Path(tmp) / "tpch", ["lineitem"])
        source = read_parquet([files["lineitem"]])
        store = Store(Path(tmp) / "store")
        with console.status("loading lineitem"):
            load_table([store], tpch.schema_for("lineitem", source.schema), source, LoadOptions())
        cache = TableCache(store)
        cache.get("lineitem")
        con = duckdb.connect()
        con.register("source", source)
        con.execute("CREATE TABLE lineitem AS SELECT * FROM source")
        threads = os.cpu_count() or 1
        backends = [get_backend("numpy")]
        results = []
        for name, (request, sql, keys) in QUERIES.items():
            with console.status(name):
                row: dict[str, Any] = {"query": name}
                for backend in backends:
                    best, median, (answer, stats) = _timed(
                        lambda b=backend, r=request, k=keys: run_ours(cache, b, r, k), repeat
                    )
                    row[backend.name] = {"min_s": best, "median_s": median, "stats": stats.to_json()}
                    row[backend.name]["decoded_bytes"] = decoded_bytes(cache, request, stats)
                for count in (1, threads):
                    con.execute(f"SET threads = {count}")
                    best, median, expected = _timed(lambda q=sql: con.sql(q).to_arrow_table(), repeat)
                    row[f"duckdb_{count}t"] = {"min_s": best, "median_s": median}
                answer_ok = _same(answer, expected, keys)
                if not answer_ok:
                    console.print(f"[red]{name}: the answer differs from DuckDB's[/]")
                row["answer_matches_duckdb"] = answer_ok
                results.append(row)
        con.close()
    figures: dict[str, Any] = {"benchmark": "scan", "sf": sf, "rows": source.num_rows, "threads": threads}
    figures["queries"] = results
    return figures


def report(figures: dict[str, Any]) -> None:
    threads = figures["threads"]
    rows = []
    for q in figures["queries"]:
        ours, one, many = q["numpy"], q["duckdb_1t"], q[f"duckdb_{threads}t"]
        stats = ours["stats"]
        touched = f"{stats['values_decoded']:,} values, {stats['runs_evaluated']:,} runs"
        blocks = f"{stats['blocks']}/{stats['blocks'] + stats['blocks_skipped']}"
        rows.append(
            [
                q["query"],
                f"{ours['min_s'] * 1000:.1f}",
                f"{one['min_s'] * 1000:.1f}",
                f"{many['min_s'] * 1000:.1f}",
                f"{ours['min_s'] / one['min_s']:.2f}",
                f"{ours['min_s'] / many['min_s']:.2f}",
                blocks,
                touched,
                "yes" if q["answer_matches_duckdb"] else "NO",
            ]
        )
    headers = [
        "query",
        "ours (CPU, 1 thread) ms",
        "DuckDB 1 thread ms",
        f"DuckDB {threads} threads ms",
        "ours / DuckDB 1t",
        f"ours / DuckDB {threads}t",
        "blocks read",
        "touched",
        "same answer",
    ]
    print_table(
        f"TPC-H lineitem SF {figures['sf']:g}: scans on compressed data vs DuckDB (best of runs)", headers, rows
    )


def main(argv: list[str] | None = None) -> None:
    bench_main(argv, __doc__, run, report, repeat=7)


if __name__ == "__main__":
    main()
