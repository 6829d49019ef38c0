"""The gateway's catalog of a region's nodes, over real HTTP: what each node lists, and a node slow
to list its tables told apart from one that is gone."""

from __future__ import annotations

import asyncio
import threading

import pyarrow as pa
import pytest
from aiohttp import web

from gateway.background import serve
from gateway.sql import catalog
from gateway.sql.errors import TableUnavailable
from gpu_kernels import get_backend
from storage import LoadOptions, Node, NodeClient, Store, TableSchema, load_table


def _load(store: Store, rows: int, mode: str = "replace") -> None:
    table = pa.table({"k": pa.array(range(rows), pa.int64())})
    load_table([store], TableSchema.from_arrow("t", table.schema), table, LoadOptions(mode=mode))


def test_the_listing_follows_every_commit_release_and_drop(tmp_path) -> None:
    store = Store(tmp_path, node="node-0")
    _load(store, 3)
    with serve(Node(store, get_backend("numpy"), slots=1).app()) as url:
        client = NodeClient(url)

        def listed() -> dict:
            return {t["name"]: t for t in client.get("/v1/tables")["tables"]}

        assert (listed()["t"]["rows"], listed()["t"]["versions"]) == (3, [1])
        _load(store, 5, mode="append")
        assert (listed()["t"]["rows"], listed()["t"]["versions"]) == (8, [1, 2])
        assert store.release("t", 1)
        assert listed()["t"]["versions"] == [2]
        store.drop("t")
        assert listed() == {}


def test_a_node_slow_to_list_its_tables_the_first_time_is_waited_for(tmp_path, monkeypatch) -> None:
    """A node not listed yet has nothing to serve meanwhile: its first listing is given the grace,
    not the read timeout (a first query is then not told that its tables do not exist)."""
    monkeypatch.setattr(catalog, "READ_TIMEOUT_S", 0.2)
    store = Store(tmp_path, node="node-0")
    _load(store, 3)
    slow = [0.5]  # the first listing's delay, past the read timeout

    @web.middleware
    async def first_slow(request: web.Request, handler):
        if request.path == "/v1/tables" and slow:
            await asyncio.sleep(slow.pop())  # the node answers late, as one starting up on a busy machine
        return await handler(request)

    app = Node(store, get_backend("numpy"), slots=1).app()
    app.middlewares.append(first_slow)
    with serve(app) as url:
        region = catalog.RegionCatalog({"node-0": url}, max_age=3600, releases=False)
        assert region.table("t").rows == 3 and not slow


def test_a_slow_node_serves_its_last_listing_until_silent_past_the_grace(tmp_path, monkeypatch) -> None:
    monkeypatch.setattr(catalog, "READ_TIMEOUT_S", 0.2)
    store = Store(tmp_path, node="node-0")
    _load(store, 3)
    hung = threading.Event()  # set: the node's listing of its tables does not answer

    @web.middleware
    async def hang(request: web.Request, handler):
        while hung.is_set() and request.path == "/v1/tables":  # answered once the test lets it go
            await asyncio.sleep(0.05)
        return await handler(request)

    app = Node(store, get_backend("numpy"), slots=1).app()
    app.middlewares.append(hang)
    with serve(app) as url:
        region = catalog.RegionCatalog({"node-0": url}, max_age=3600, releases=False)
        assert region.table("t").rows == 3
        hung.set()
        region.refresh()
        assert region.table("t").rows == 3, "busy, not gone: what it listed last serves"
        monkeypatch.setattr(catalog, "SLOW_GRACE_S", 0.0)
        region.refresh()
        with pytest.raises(TableUnavailable, match="node-0 are not answering"):
            region.table("t")
        hung.clear()
        region.refresh()
        assert region.table("t").rows == 3


def test_a_version_released_between_its_listing_and_its_description_is_read_again(tmp_path) -> None:
    """Appends commit one version after another: a catalog may list a version that is released
    before it asks for its description. It reads the nodes again rather than call the table
    undefined (once a cause of a flaky `table does not exist` while appends went as fast as they go)."""
    store = Store(tmp_path, node="node-0")
    _load(store, 3)
    racing = [True]

    @web.middleware
    async def commit_after_listing(request: web.Request, handler):
        response = await handler(request)
        if request.path == "/v1/tables" and racing:
            racing.pop()
            _load(store, 5, mode="append")  # version 2 committed ...
            assert store.release("t", 1)  # ... and version 1 released, before the catalog describes it
        return response

    app = Node(store, get_backend("numpy"), slots=1).app()
    app.middlewares.append(commit_after_listing)
    with serve(app) as url:
        region = catalog.RegionCatalog({"node-0": url}, max_age=3600, releases=False)
        served = region.table("t")
        assert (served.version, served.rows) == (2, 8) and not racing
