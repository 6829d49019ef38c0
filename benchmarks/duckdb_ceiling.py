"""The single-machine ceiling of a live load test: DuckDB answering the gateway's statement API
(the part `loadtests.Simulator` speaks: POST /v1/statements, GET /v1/cluster) behind a plain
aiohttp handler, at most `concurrency` queries at once (the slots of the region it is compared
with), each on a cursor of one in-memory database over the same Parquet files. No queue, no
balancer, no results kept: what one process on this machine can do with the same data and
concurrency, and nothing more."""

from __future__ import annotations

import asyncio
import time
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from aiohttp import web

from gateway.background import serve


class DuckDBCeiling:
    def __init__(self, files: dict[str, Path], concurrency: int, threads: int):
        import duckdb  # the reference, never the product

        self.database = duckdb.connect()
        self.database.execute(f"SET threads = {threads}")
        self.database.execute("SET ieee_floating_point_ops = false")  # x / 0 is NULL, as in cxg (docs/sql.md)
        self.database.execute("SET error_on_division_by_zero = false")
        for name, path in files.items():
            self.database.execute(f"CREATE TABLE {name} AS SELECT * FROM read_parquet('{path}')")
        self.concurrency = concurrency
        self.pool = ThreadPoolExecutor(concurrency, thread_name_prefix="duckdb")
        self.inside = 0  # statements received and not answered
        self.count = 0

    def _run(self, sql: str) -> tuple[int, float]:
        started = time.perf_counter()
        cursor = self.database.cursor()
        try:
            rows = len(cursor.sql(sql).fetchall())
        finally:
            cursor.close()
        return rows, (time.perf_counter() - started) * 1000

    async def statement(self, request: web.Request) -> web.Response:
        body = await request.json()
        came = time.perf_counter()
        self.inside += 1
        try:
            rows, execute_ms = await asyncio.get_running_loop().run_in_executor(self.pool, self._run, body["sql"])
        finally:
            self.inside -= 1
            self.count += 1
        queue_ms = max(0.0, (time.perf_counter() - came) * 1000 - execute_ms)
        doc: dict[str, Any] = {
            "id": str(self.count),
            "state": "succeeded",
            "row_count": rows,
            "timings_ms": {"queue": queue_ms, "execute": execute_ms},
        }
        return web.json_response(doc)

    async def cluster(self, request: web.Request) -> web.Response:
        running = min(self.inside, self.concurrency)
        return web.json_response({"queue": self.inside - running, "in_flight": running})

    def app(self) -> web.Application:
        app = web.Application()
        app.add_routes([web.post("/v1/statements", self.statement), web.get("/v1/cluster", self.cluster)])
        return app


@contextmanager
def ceiling(files: dict[str, Path], concurrency: int, threads: int):
    """A DuckDB ceiling serving on loopback; yields its URL."""
    server = DuckDBCeiling(files, concurrency, threads)
    try:
        with serve(server.app()) as url:
            yield url
    finally:
        server.pool.shutdown(wait=True)
        server.database.close()
