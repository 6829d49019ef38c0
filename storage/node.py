"""A storage node: an aiohttp service answering scans on its store's compressed tables.

    POST /v1/query           a whole query over scans of tables held here (storage.node_query): its
                             scans, then DataFusion's joins and the rest -> Arrow IPC stream
    GET  /v1/query/{id}      how far that whole query is while it runs (stages done, rows scanned)
    DELETE /v1/query/{id}    stop it
    POST /v1/scan            a scan request (storage.scan_protocol) -> Arrow IPC stream, one batch per
                             block (or per hash partition of a block) as blocks finish, then an
                             empty trailer batch whose metadata holds the scan's statistics
    GET  /v1/tables          tables with rows, blocks, sizes, the current version and the versions kept
    GET  /v1/tables/{name}   one table (?version=N: that version): columns, sort key, placement, stats
    DELETE /v1/tables/{name} retire it (moved away): no longer listed, its version kept for the
                             queries pinned to it until released or RETAIN_S
    GET  /v1/tables/{name}/versions               the versions kept (a retired table's too)
    DELETE /v1/tables/{name}/versions/{version}   stop keeping a replaced version (no query reads it)
    GET  /v1/node            node name, cores, slots and free slots, backend, scan counters
    GET  /healthz            liveness
    PUT  /v1/tables/{name}/loads/{load}/blocks/{file}   upload one encoded block file
    POST /v1/tables/{name}/appends/{load}?base=V       stage an append's rows (storage.appends)
    POST /v1/tables/{name}/loads/{load}/commit         make a load's blocks the table's new version
    PUT  /v1/tables/{name}/hold?version=V&seconds=S    hold its appends while its buckets move
    DELETE /v1/tables/{name}/hold                      end the hold (storage.holds)
    DELETE /v1/tables/{name}/loads/{load}              drop a failed load's uploads
    POST /v1/standing/gather    standing queries' states over the buckets named (storage.standing)
    POST /v1/standing/fold      an append's partial rows by bucket folded into them
    DELETE /v1/standing/{id}    forget one

Each scan holds one of the node's K slots (K = cores unless configured) while it runs; its
blocks are processed on worker threads (or, with --processes N, a long CPU scan's on worker
processes: storage.scan_workers) and written as they finish. A client that goes away
mid-stream cancels its scan: the worker stops at the next block and the slot is freed.
Errors are JSON ``{"error": {"code": ..., "message": ...}}`` with the status each storage error
carries (`storage.errors`: 400 malformed or unsupported request, 404 unknown table, 409
``version_gone`` for a version no longer kept, 500 a corrupt block or manifest, 503 out of memory,
507 disk full), answered by one middleware; an error after the stream started ends it with a
trailer batch carrying ``cxg.error``.

A scan reads the version its request names (`storage.store` keeps replaced versions until they are
released), so a query pinned to one version reads the same data on every node while loads commit.
"""

from __future__ import annotations

import asyncio
import functools
import json
import logging
import os
import threading
from collections import Counter
from collections.abc import Awaitable, Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any, TypeVar

import pyarrow as pa
from aiohttp import web
from aiohttp.typedefs import Handler

from gpu_kernels import NumpyBackend, resident_report
from storage.appends import APPENDS_PATH, stage
from storage.blockfile import BlockEntry
from storage.bucket_load import BucketWork
from storage.catalog import TableSchema
from storage.errors import OutOfMemoryError, StorageError, TableNotFoundError, UnreadableRequestError
from storage.holds import AppendHolds
from storage.ingest import Commit, DirectoryTarget
from storage.manifest import MANIFEST, Sizing
from storage.memory_budget import private_memory_limit
from storage.node_query import NodeQuery
from storage.query_protocol import QUERY_PATH, QueryRequest, UnknownQueryError
from storage.scan import BlockScan, TableCache, scan_table
from storage.scan_protocol import (
    ARROW_STREAM,
    HEADER_BACKEND,
    HEADER_NODE,
    METADATA_BLOCK,
    METADATA_ERROR,
    METADATA_PARTITION,
    METADATA_STATS,
    SCAN_PATH,
    ScanRequest,
    allow_deep_expressions,
)
from storage.scan_workers import ScanWorkers
from storage.standing import FOLD_PATH, FORGET_PATH, GATHER_PATH, StandingStates, fold_request, gather_request
from storage.stats import summarize
from storage.store import LOAD_ID, Store

log = logging.getLogger("cxg.node")
IN_FLIGHT = 4  # chunks produced ahead of the network
EXPIRE_EVERY_S = 60.0  # how often replaced versions nobody released are looked at (storage.store.RETAIN_S)
CHUNK_BYTES = 1 << 16  # encoded batches are written to the network in chunks of at least this size
KEPT_REQUEST = 16 << 10  # bytes: a scan request up to this size is read, checked and typed once, then kept
T = TypeVar("T")


@web.middleware
async def storage_errors(request: web.Request, handler: Handler) -> web.StreamResponse:
    """The node's one translation of its failures: a storage error a handler raises is answered
    with its status and code (`storage.errors`)."""
    try:
        return await handler(request)
    except StorageError as e:
        return web.json_response({"error": {"code": e.code, "message": str(e)}}, status=e.status)


class _Chunks:
    """A write-only file for the IPC writer: collects bytes until taken."""

    def __init__(self) -> None:
        self.parts: list[bytes] = []
        self.closed = False

    def write(self, data: bytes) -> int:
        self.parts.append(bytes(data))
        return len(data)

    def flush(self) -> None:
        pass

    def close(self) -> None:
        self.closed = True

    def take(self) -> bytes:
        data, self.parts = b"".join(self.parts), []
        return data


class ArrowStreamEncoder:
    """Turns batches (with metadata) into successive chunks of one Arrow IPC stream."""

    def __init__(self, schema: pa.Schema):
        self.schema = schema
        self.sink = _Chunks()
        self.writer = pa.ipc.new_stream(pa.PythonFile(self.sink, mode="w"), schema)

    def batch(self, batch: pa.RecordBatch, metadata: dict[str, str] | None = None) -> bytes:
        self.writer.write_batch(batch, custom_metadata=metadata)
        return self.sink.take()

    def trailer(self, metadata: dict[bytes, bytes]) -> bytes:
        self.writer.write_batch(pa.RecordBatch.from_pylist([], schema=self.schema), metadata)
        self.writer.close()
        return self.sink.take()


class Node:
    def __init__(
        self,
        store: Store,
        backend: NumpyBackend,
        slots: int | None = None,
        threads: int | None = None,
        processes: int = 0,
        worker_memory: int | None = None,
    ):
        allow_deep_expressions()
        self.store = store
        self.cache = TableCache(store)
        self.backend = backend
        self.cores = os.cpu_count() or 1
        self.slots = slots or self.cores
        self.threads = threads  # per scan; None: the cores shared by the scans running when it starts
        # CPU kernels: long scans spread over worker processes when asked (`storage.scan_processes`)
        self.workers = ScanWorkers(processes, worker_memory) if processes and backend.name == "numpy" else None
        self.running = 0
        self.counters: Counter = Counter()
        self.work = BucketWork()  # scan time per bucket: what `cxg redistribute --rebalance` balances
        self._slots = asyncio.Semaphore(self.slots)
        self._executor = ThreadPoolExecutor(self.slots, thread_name_prefix=f"{store.node}-scan")
        self._target = DirectoryTarget(store)
        self.holds = AppendHolds()  # the tables whose buckets a move reads: their appends wait
        self.standing = StandingStates(store)  # standing queries' partial states, per bucket
        self.on_commit: list[Callable[[], Awaitable[None]]] = []  # told when a table changed
        self._queries: dict[str, NodeQuery] = {}  # whole queries running, by the id a DELETE names
        self._listing: dict[str, tuple[tuple[int, ...], dict]] = {}  # each table's listed row, by its stamp

    # ---- HTTP handlers --------------------------------------------------------------------------

    async def healthz(self, request: web.Request) -> web.Response:
        return web.json_response({"status": "ok", "node": self.store.node})

    async def info(self, request: web.Request) -> web.Response:
        return web.json_response(
            {
                "node": self.store.node,
                "cores": self.cores,
                "slots": self.slots,
                "free_slots": self.slots - self.running,
                "running": self.running,
                "backend": self.backend.name,
                "devices": resident_report(self.backend) if self.backend.keeps_columns else [],
                "scan_processes": self.workers.processes if self.workers is not None else 0,
                "chunks_on_processes": self.workers.chunks if self.workers is not None else 0,
                "memory_budget": private_memory_limit(),  # bytes this process may hold; null: no limit
                "worker_memory_budget": self.workers.memory if self.workers is not None else None,
                "tables": self.cache.names(),
                "scans": dict(self.counters),
                "work": self.work.to_json(),
                "standing": self.standing.report(),  # standing queries' states kept here
            }
        )

    async def tables(self, request: web.Request) -> web.Response:
        rows = await asyncio.get_running_loop().run_in_executor(None, self._tables)  # manifests: off the loop
        return web.json_response({"tables": rows})

    def _tables(self) -> list[dict]:
        rows = []
        for name in self.cache.names():
            try:
                rows.append(self._listed(name))
            except (TableNotFoundError, FileNotFoundError):  # dropped meanwhile
                self._listing.pop(name, None)
        return rows

    def _listed(self, name: str) -> dict:
        """A table's row in the listing, read again only when its directory changed (a commit or a
        kept version released renames a file in it): listing stays cheap however busy the node is."""
        directory = self.store.table_dir(name)
        manifest = os.stat(directory / MANIFEST)
        stamp = (os.stat(directory).st_mtime_ns, manifest.st_ino, manifest.st_mtime_ns, manifest.st_size)
        known = self._listing.get(name)
        if known is not None and known[0] == stamp:
            return known[1]
        table = self.store.table(name)
        s = summarize(table)
        row = {
            "name": name,
            "rows": s.rows,
            "blocks": s.blocks,
            "placement": s.placement,
            "encoded_bytes": s.encoded_bytes,
            "disk_bytes": s.disk_bytes,
            "version": s.version,
            "versions": self.store.versions(name),
            "load": table.manifest.load,  # the load that committed the current version
            "data": table.manifest.data,  # the rows' identity (kept by copies and moves)
        }
        self._listing[name] = (stamp, row)
        return row

    async def table(self, request: web.Request) -> web.Response:
        name = request.match_info["name"]
        table = await _on_thread(self.store.table, name, _version(request.query.get("version")))
        s = summarize(table)
        return web.json_response(
            {
                **table.schema.to_json(),
                "rows": s.rows,
                "blocks": s.blocks,
                "version": s.version,
                "block_rows": s.block_rows,
                "sizing": vars(table.manifest.sizing),
                "data": table.manifest.data,
                "buckets": _bucket_rows(table.blocks),
                "stats": [
                    {
                        "column": c.name,
                        "chain": c.chain,
                        "runs": c.runs,
                        "max_distinct": c.max_distinct,
                        "nulls": c.null_count,
                        "encoded_bytes": c.encoded_bytes,
                        "plain_bytes": c.plain_bytes,
                    }
                    for c in s.columns
                ],
            }
        )

    async def release(self, request: web.Request) -> web.Response:
        name, version = request.match_info["name"], request.match_info["version"]
        released = await _on_thread(self._release, name, _version(version))
        return web.json_response({"table": name, "version": int(version), "released": released})

    def _release(self, name: str, version: int) -> bool:
        """Worker thread (the cache's lock may be held while a new version is mapped)."""
        released = self.store.release(name, version)
        self.cache.forget(name)
        return released

    def _expire(self, name: str) -> None:
        self.store.expire(name)
        self.cache.forget(name)

    async def scan(self, request: web.Request) -> web.StreamResponse:
        scan = await _on_thread(self._plan, await request.read())
        async with self._slots:
            self.running += 1
            self.counters["started"] += 1
            scan.threads = self.threads or max(1, self.cores // self.running)
            scan.workers = self.workers
            try:
                return await self._stream(request, scan)
            finally:
                self.running -= 1
                self.work.record(scan.plan.table, scan.rows_read, scan.seconds_read)

    async def query(self, request: web.Request) -> web.Response:
        """A whole query (`storage.node_query`) in one slot: its scans, then DataFusion."""
        asked = await _on_thread(QueryRequest.from_json, await _json_body(request, "query"))
        async with self._slots:
            self.running += 1
            self.counters["queries"] += 1
            query = NodeQuery(asked, self.cache, self.backend, self._query_memory(), workers=self.workers)
            query.threads = self.threads or max(1, self.cores // self.running)
            if asked.id:
                self._queries[asked.id] = query
            try:
                body = await asyncio.get_running_loop().run_in_executor(self._executor, self._answer, query)
            except asyncio.CancelledError:  # the client went away: the query stops at its next batch
                query.cancel.set()
                raise
            finally:
                self.running -= 1
                if self._queries.get(asked.id) is query:  # a retry of the same id may have taken its place
                    del self._queries[asked.id]
        headers = {HEADER_BACKEND: self.backend.name, HEADER_NODE: self.store.node}
        return web.Response(body=body, content_type=ARROW_STREAM, headers=headers)

    async def query_progress(self, request: web.Request) -> web.Response:
        """How far a whole query running here is (`NodeQuery.progress`); 404 once it is not running."""
        query = self._queries.get(request.match_info["id"])
        if query is None:
            raise UnknownQueryError(f"no query {request.match_info['id']!r} runs on node {self.store.node}")
        return web.json_response(query.progress())

    async def cancel_query(self, request: web.Request) -> web.Response:
        query = self._queries.get(request.match_info["id"])
        if query is not None:
            query.cancel.set()
        return web.json_response({"cancelled": query is not None})

    def _query_memory(self) -> int | None:
        """What DataFusion's operators may hold for one query: half of a slot's share of the node's
        budget (the other half holds the scans' results it reads)."""
        budget = private_memory_limit()
        return None if budget is None else budget // (2 * self.slots)

    def _answer(self, query: NodeQuery) -> bytes:
        """Worker thread: the query's answer as one Arrow IPC stream, its trailer the query's account."""
        try:
            table = query.run()
        except MemoryError:
            raise OutOfMemoryError(f"a query needed more memory than node {self.store.node} may hold") from None
        encoder = ArrowStreamEncoder(table.schema)
        parts = [encoder.batch(batch) for batch in table.to_batches()]
        stats = {**query.stats, "backend": self.backend.name}
        parts.append(encoder.trailer({METADATA_STATS: json.dumps(stats).encode()}))
        return b"".join(parts)

    def _plan(self, body: bytes) -> BlockScan:
        """Worker thread: the request checked by the protocol, then planned on its table (a long IN
        list takes a while to read: not on the event loop); a small one read and typed once, and
        kept for when the same is asked again."""
        try:
            if len(body) > KEPT_REQUEST:
                return scan_table(self.cache, ScanRequest.from_json(_json(body, "scan")), self.backend)
            return scan_table(self.cache, _kept_request(body), self.backend, kept=True)
        except MemoryError:
            raise OutOfMemoryError(
                f"planning the scan needed more memory than node {self.store.node}'s process may hold"
            ) from None

    async def _stream(self, request: web.Request, scan: BlockScan) -> web.StreamResponse:
        response = web.StreamResponse(
            headers={"Content-Type": ARROW_STREAM, HEADER_BACKEND: self.backend.name, HEADER_NODE: self.store.node}
        )
        await response.prepare(request)
        loop = asyncio.get_running_loop()
        chunks: asyncio.Queue[bytes | None] = asyncio.Queue()
        credits = threading.Semaphore(IN_FLIGHT)
        done = loop.run_in_executor(self._executor, self._produce, scan, chunks, credits, loop)
        outcome = "failed"
        try:
            while (chunk := await chunks.get()) is not None:
                await response.write(chunk)
                credits.release()
            outcome = await done
            await response.write_eof()
        except (ConnectionError, asyncio.CancelledError) as e:  # reset, broken pipe, aborted: gone
            outcome = "cancelled"
            if isinstance(e, asyncio.CancelledError):
                raise
        finally:
            if not done.done():  # the handler stopped first, whatever stopped it: so does the scan
                scan.cancel.set()
                credits.release()
            self.counters[outcome] += 1
            if outcome == "cancelled":
                log.info("scan of %s cancelled: the client went away", scan.plan.table)
        return response

    def _produce(self, scan: BlockScan, chunks: asyncio.Queue, credits: threading.Semaphore, loop) -> str:
        """Worker thread: run the scan and encode one batch per piece, then the trailer; encoded
        batches are handed to the network together once they reach `CHUNK_BYTES` (a scan of many
        one-row partial aggregates costs one write, not one per block)."""
        encoder = ArrowStreamEncoder(scan.plan.schema)
        pending = bytearray()

        def hand_over(data: bytes, last: bool = False) -> bool:
            if pending or (not last and len(data) < CHUNK_BYTES):
                pending.extend(data)
                if not last and len(pending) < CHUNK_BYTES:
                    return True
                data = bytes(pending)
                pending.clear()
            while not credits.acquire(timeout=0.2):
                if scan.cancel.is_set():
                    return False
            if scan.cancel.is_set():
                return False
            loop.call_soon_threadsafe(chunks.put_nowait, data)
            return True

        outcome = "completed"
        try:
            for piece in scan.pieces():
                metadata = {METADATA_BLOCK: piece.block}
                if piece.partition is not None:
                    metadata[METADATA_PARTITION] = str(piece.partition)
                if not hand_over(encoder.batch(piece.batch, metadata)):
                    return "cancelled"
            trailer = {METADATA_STATS: json.dumps({**scan.stats.to_json(), "backend": self.backend.name}).encode()}
        except Exception as e:  # the stream has started: report in the trailer
            log.exception("scan of %s failed", scan.plan.table)
            failure = e
            if isinstance(e, MemoryError):
                failure = OutOfMemoryError(
                    f"the scan of {scan.plan.table} needed more memory than node {self.store.node} may hold"
                )
            error = {"code": getattr(failure, "code", "internal_error"), "message": str(failure)}
            trailer = {METADATA_ERROR: json.dumps(error).encode()}
            outcome = "failed"
        finally:
            if scan.cancel.is_set():
                loop.call_soon_threadsafe(chunks.put_nowait, None)
        hand_over(encoder.trailer(trailer), last=True)
        loop.call_soon_threadsafe(chunks.put_nowait, None)
        return outcome

    # ---- ingest: block uploads and atomic commits --------------------------------------------------

    async def put_block(self, request: web.Request) -> web.Response:
        info = request.match_info
        payload = await request.read()
        await _on_thread(self._target.put, info["name"], info["load"], info["file"], payload)
        return web.json_response({"stored": info["file"], "bytes": len(payload)}, status=201)

    async def stage_append(self, request: web.Request) -> web.Response:
        """An append's rows for the buckets held here (an Arrow IPC stream) staged on version
        `?base=` of the table (`storage.appends.stage`): its entries, the blocks they replace."""
        info = request.match_info
        if not LOAD_ID.fullmatch(info["load"]):
            raise StorageError(f"invalid load id {info['load']!r}")
        base = _version(request.query.get("base"))
        if base is None:
            raise StorageError("an append is staged on a version: ?base= is missing")
        payload = await request.read()
        try:
            rows = pa.ipc.open_stream(payload).read_all()
        except (pa.ArrowInvalid, OSError) as e:
            raise UnreadableRequestError("invalid_append", f"the rows are not an Arrow IPC stream: {e}") from None
        self.holds.check(info["name"])
        table = await _on_thread(self.store.table, info["name"])
        return web.json_response(await _on_thread(stage, table, info["load"], rows, base), status=201)

    async def commit_load(self, request: web.Request) -> web.Response:
        info = request.match_info
        try:
            body = await request.json()
            schema = TableSchema.from_json(body["definition"])
            if schema.name != info["name"]:
                raise StorageError(f"the definition is of table {schema.name}, not {info['name']}")
            sizing = Sizing(**body["sizing"])
            entries = [BlockEntry.from_json(e) for e in body["entries"]]
            version, base = _positive(body.get("version"), "version"), _positive(body.get("base"), "base")
            keep = body.get("keep") or []
            if not isinstance(keep, list) or not all(isinstance(b, int) and not isinstance(b, bool) for b in keep):
                raise ValueError(f"keep must be a list of bucket numbers, not {keep!r}")
            data = body.get("data") or ""
            if not isinstance(data, str):
                raise ValueError(f"data must be a load id, not {data!r}")
            drop = body.get("drop") or []
            if not isinstance(drop, list) or not all(isinstance(f, str) for f in drop):
                raise ValueError(f"drop must be a list of block files, not {drop!r}")
            load = Commit(
                schema,
                sizing,
                body["compression"],
                body["mode"],
                info["load"],
                version,
                {self.store.node: tuple(keep)},
                base,
                data,
                tuple(drop),
            )
            version = await _on_thread(self._commit, load, entries)
        except (json.JSONDecodeError, KeyError, TypeError, ValueError) as e:
            raise UnreadableRequestError("invalid_commit", f"malformed commit request: {e}") from None
        for listener in self.on_commit:
            await listener()
        return web.json_response({"table": schema.name, "version": version, "blocks": len(entries)})

    def _commit(self, load: Commit, entries: list[BlockEntry]) -> int:
        """Commit a load; an append's only while its table is not held (`storage.holds`)."""
        if load.mode != "append":
            return self._target.commit(load, entries)
        with self.holds.committing(load.schema.name):
            return self._target.commit(load, entries)

    async def hold(self, request: web.Request) -> web.Response:
        """Hold a table's appends at `?version=` (its current one) for `?seconds=` (a move reads it)."""
        name = request.match_info["name"]
        version = _version(request.query.get("version"))
        if version is None:
            raise StorageError("a hold names the version held: ?version= is missing")
        try:
            seconds = float(request.query.get("seconds", "60"))
        except ValueError:
            raise StorageError(f"seconds is a number, not {request.query['seconds']!r}") from None

        def current() -> int:
            return self.store.table(name).version

        held = await _on_thread(self.holds.hold, name, version, seconds, current)
        return web.json_response({"table": name, "held": version, "seconds": held})

    async def release_hold(self, request: web.Request) -> web.Response:
        name = request.match_info["name"]
        return web.json_response({"table": name, "released": self.holds.release(name)})

    async def versions(self, request: web.Request) -> web.Response:
        """The versions of a table kept here (a retired table's too) and the current one (null when
        retired): what a load numbers its new version above."""
        name = request.match_info["name"]
        kept = await _on_thread(self.store.versions, name)
        current = kept[-1] if self.store.exists(name) else None
        return web.json_response({"table": name, "versions": kept, "current": current})

    async def retire(self, request: web.Request) -> web.Response:
        """Stop serving a table here (it moved away); scans pinned to its version still read it."""
        name = request.match_info["name"]
        version = await _on_thread(self.store.retire, name)
        for listener in self.on_commit:
            await listener()
        return web.json_response({"table": name, "retired": version})

    async def abort_load(self, request: web.Request) -> web.Response:
        info = request.match_info
        self._target.abort(info["name"], info["load"])
        return web.json_response({"aborted": info["load"]})

    # ---- standing queries' states -----------------------------------------------------------------

    async def gather_standing(self, request: web.Request) -> web.Response:
        registrations, buckets = gather_request(await _json_body(request, "standing gather"))

        def gathered() -> dict[str, Any]:
            return {key: self.standing.gather(key, r, buckets) for key, r in registrations.items()}

        return web.json_response({"subscriptions": await _on_thread(gathered)})

    async def fold_standing(self, request: web.Request) -> web.Response:
        table, version, base, partials, buckets = fold_request(await _json_body(request, "standing fold"))
        folded = await _on_thread(self.standing.fold, table, version, base, partials, buckets)
        return web.json_response({"subscriptions": folded})

    async def forget_standing(self, request: web.Request) -> web.Response:
        key = request.match_info["id"]
        return web.json_response({"id": key, "forgotten": self.standing.forget(key)})

    # ---- application ----------------------------------------------------------------------------

    def app(self) -> web.Application:
        app = web.Application(middlewares=[storage_errors], client_max_size=1024 * 1024 * 1024)  # block uploads
        app.add_routes(
            [
                web.get("/healthz", self.healthz),
                web.get("/v1/node", self.info),
                web.get("/v1/tables", self.tables),
                web.get("/v1/tables/{name}", self.table),
                web.delete("/v1/tables/{name}", self.retire),
                web.get("/v1/tables/{name}/versions", self.versions),
                web.post(SCAN_PATH, self.scan),
                web.post(QUERY_PATH, self.query),
                web.get(QUERY_PATH + "/{id}", self.query_progress),
                web.delete(QUERY_PATH + "/{id}", self.cancel_query),
                web.put("/v1/tables/{name}/loads/{load}/blocks/{file}", self.put_block),
                web.post(APPENDS_PATH, self.stage_append),
                web.post("/v1/tables/{name}/loads/{load}/commit", self.commit_load),
                web.put("/v1/tables/{name}/hold", self.hold),
                web.delete("/v1/tables/{name}/hold", self.release_hold),
                web.delete("/v1/tables/{name}/loads/{load}", self.abort_load),
                web.delete("/v1/tables/{name}/versions/{version}", self.release),
                web.post(GATHER_PATH, self.gather_standing),
                web.post(FOLD_PATH, self.fold_standing),
                web.delete(FORGET_PATH, self.forget_standing),
            ]
        )
        app.cleanup_ctx.append(self._expiry)
        app.on_cleanup.append(self._shutdown)
        return app

    async def _expiry(self, app: web.Application):
        """Start the scan workers; then forget, now and then, the replaced versions nobody released
        within `RETAIN_S`, and the standing queries' states unused for a day."""
        if self.workers is not None:
            pids = await asyncio.get_running_loop().run_in_executor(None, self.workers.start)
            log.info("node %s: %d scan worker processes (%s)", self.store.node, len(pids), ", ".join(map(str, pids)))

        async def sweep() -> None:
            loop = asyncio.get_running_loop()
            while True:
                await asyncio.sleep(EXPIRE_EVERY_S)
                for name in [*self.store.tables(), *self.store.retired()]:
                    try:
                        await loop.run_in_executor(None, self._expire, name)
                    except StorageError:
                        log.exception("expiring old versions of %s failed", name)
                for key in self.standing.expire():
                    log.info("standing query %s: its state, unused for a day, forgotten", key)

        task = asyncio.create_task(sweep())
        yield
        task.cancel()

    async def _shutdown(self, app: web.Application) -> None:
        self._executor.shutdown(wait=False, cancel_futures=True)
        if self.workers is not None:
            self.workers.close()


async def _json_body(request: web.Request, what: str) -> object:
    return _json(await request.read(), what)


def _json(body: bytes, what: str) -> object:
    try:
        return json.loads(body)
    except (json.JSONDecodeError, UnicodeDecodeError, RecursionError) as e:
        raise UnreadableRequestError("invalid_json", f"the {what} request is not valid JSON: {e}") from None


@functools.lru_cache(maxsize=256)
def _kept_request(body: bytes) -> ScanRequest:
    """A small scan request's body read and checked, kept for when the same bytes come again."""
    return ScanRequest.from_json(_json(body, "scan"))


async def _on_thread(work: Callable[..., T], *args: Any) -> T:
    """`work` run off the event loop (it reads or writes files)."""
    return await asyncio.get_running_loop().run_in_executor(None, work, *args)


def _bucket_rows(blocks: list[BlockEntry]) -> dict[str, int]:
    """Rows per bucket held here (bucket -> rows)."""
    rows: Counter[int] = Counter()
    for entry in blocks:
        rows[entry.bucket] += entry.rows
    return {str(bucket): count for bucket, count in sorted(rows.items())}


def _positive(value: object, name: str) -> int | None:
    if value is not None and (not isinstance(value, int) or isinstance(value, bool) or value < 1):
        raise ValueError(f"{name} must be a number from 1, not {value!r}")
    return value


def _version(text: str | None) -> int | None:
    if text is None:
        return None
    if not text.isdigit() or int(text) < 1:
        raise StorageError(f"a table version is a number from 1, not {text!r}")
    return int(text)
