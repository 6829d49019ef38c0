"""Columns resident on the GPU (`gpu_kernels.resident`): a scan's partial aggregate over all its
blocks in one launch per signature and one wait, whatever the number of blocks; the columns loaded
on first use and kept across queries, the least recently used evicted within the area's budget, a
table whose columns outgrow the area streamed from host memory in chunks, and a table's new version never answered
from the old one's columns. Through the strict stand-in of CuPy, answers equal to the NumPy
backend's."""

from __future__ import annotations

from contextlib import ExitStack

import numpy as np
import pyarrow as pa
import pytest

from benchmarks.compare import rows, rows_match
from benchmarks.kernel_checks import random_block
from gateway.background import serve
from gpu_kernels import ColumnImage, ResidentArea, final_aggregate, get_backend, plan_resident, resident
from gpu_kernels.column_image import buffer_key
from gpu_kernels.column_types import to_domain
from gpu_kernels.resident import TooLarge
from loadtests import query
from loadtests.tpch_queries import SINGLE_TABLE
from storage import LoadOptions, Node, NodeClient, Store, TableCache, TableSchema, load_table, scan_table
from storage.partitioning import buckets_of

Q6_LIKE = {
    "filter": {"op": "<", "args": [{"col": "q"}, {"lit": 24}]},
    "aggregates": [
        {"name": "n", "func": "count"},
        {"name": "revenue", "func": "sum", "arg": {"op": "*", "args": [{"col": "p"}, {"col": "q"}]}},
    ],
}
GROUPED = {
    "group_by": ["flag"],
    "aggregates": [{"name": "n", "func": "count"}, {"name": "top", "func": "max", "arg": {"col": "p"}}],
}


def _table(seed: int, rows: int = 40_000) -> pa.Table:
    rng = np.random.default_rng(seed)
    return pa.table(
        {
            "q": rng.integers(1, 51, rows),
            "p": rng.integers(-(1 << 40), 1 << 40, rows),
            "flag": pa.array(rng.choice(["A", "N", "R"], rows).tolist()),
        }
    )


def _load(store: Store, data: pa.Table) -> None:
    load_table([store], TableSchema.from_arrow("t", data.schema), data, LoadOptions(block_budget=20_000))


def _answer(store: Store, backend, request: dict) -> pa.Table:
    scan = scan_table(TableCache(store), {"table": "t", **request}, backend)
    table = pa.Table.from_batches([p.batch for p in scan.pieces()], schema=scan.plan.schema)
    keys = request.get("group_by", [])
    merged = final_aggregate(table, keys, list(scan.plan.task.aggregates))
    return merged.sort_by([(k, "ascending") for k in keys]) if keys else merged


def _result(store: Store, backend, request: dict) -> list:
    """A scan's final rows, or a projection's rows in order."""
    if "columns" not in request:
        return _answer(store, backend, request).to_pylist()
    scan = scan_table(TableCache(store), {"table": "t", **request}, backend)
    return sorted(tuple(row.values()) for piece in scan.pieces() for row in piece.batch.to_pylist())


@pytest.mark.gpu
@pytest.mark.parametrize("request_", [Q6_LIKE, GROUPED], ids=["one group", "groups"])
def test_a_scan_is_one_launch_and_one_wait_over_its_resident_columns(tmp_path, cupy_standin, request_) -> None:
    """Run again, a scan copies nothing to the device: its columns, block tables and initial
    accumulators are there, kept with its plan."""
    store = Store(tmp_path / "node")
    _load(store, _table(1))
    cache = TableCache(store)
    blocks = len(cache.get("t").blocks)
    assert blocks > 40
    cupy = get_backend("cupy")
    expected = _answer(store, get_backend("numpy"), request_)
    assert _answer(store, cupy, request_).equals(expected)  # loads the columns
    [area] = cupy.resident.values()
    assert area.residency.loads == len({"q", "p"} if request_ is Q6_LIKE else {"flag", "p"})
    counts = cupy_standin.counts
    launches, waits, copied = counts.total_launches, counts.syncs, counts.to_device
    scan = scan_table(cache, {"table": "t", **request_}, cupy)
    pieces = list(scan.pieces())
    assert [p.block for p in pieces] == ["resident"] and scan.stats.blocks == blocks
    assert counts.total_launches - launches <= 3 and counts.syncs - waits == 1
    assert counts.to_device == copied
    [plan] = area.plans.values()
    assert area.used == sum(c.nbytes for c in area.columns.values()) + plan.nbytes and plan.nbytes > 0
    assert area.residency.hits >= 2 and _answer(store, cupy, request_).equals(expected)


PROJECTION_REQUEST = {"filter": {"op": "<", "args": [{"col": "q"}, {"lit": 5}]}, "columns": ["p", "flag", "q"]}


@pytest.mark.gpu
def test_a_projection_run_again_copies_nothing_to_the_device(tmp_path, cupy_standin) -> None:
    store = Store(tmp_path / "node")
    _load(store, _table(1))
    cupy = get_backend("cupy")
    expected = _result(store, get_backend("numpy"), PROJECTION_REQUEST)
    assert _result(store, cupy, PROJECTION_REQUEST) == expected  # loads the columns, keeps the plan
    copied, waits = cupy_standin.counts.to_device, cupy_standin.counts.syncs
    assert _result(store, cupy, PROJECTION_REQUEST) == expected
    assert cupy_standin.counts.to_device == copied and cupy_standin.counts.syncs - waits == 2


@pytest.mark.gpu(devices=2)
@pytest.mark.parametrize("request_", [Q6_LIKE, GROUPED, PROJECTION_REQUEST], ids=["one group", "groups", "projection"])
def test_over_two_gpus_each_keeps_and_scans_its_share_of_the_blocks(tmp_path, cupy_standin, request_) -> None:
    """Each GPU keeps the columns of the blocks at its positions (position mod GPUs) and runs its
    share's fused kernels at once with the other: both launch, each waits once for an aggregate
    (twice for a projection), and the answer is the NumPy backend's."""
    store = Store(tmp_path / "node")
    _load(store, _table(1))
    cache = TableCache(store)
    blocks = len(cache.get("t").blocks)
    cupy = get_backend("cupy")
    expected = _result(store, get_backend("numpy"), request_)
    assert _result(store, cupy, request_) == expected  # loads each GPU's share of the columns
    areas = {device: area for (device, _), area in cupy.resident.items()}
    assert set(areas) == {0, 1} and all(area.residency.loads > 0 for area in areas.values())
    counts = cupy_standin.counts
    launches, waits = dict(counts.launches), counts.syncs
    scan = scan_table(cache, {"table": "t", **request_}, cupy)
    pieces = list(scan.pieces())
    assert {p.block for p in pieces} == {"resident"} and scan.stats.blocks == blocks
    assert all(counts.launches[d] > launches.get(d, 0) for d in (0, 1))
    assert counts.syncs - waits == (4 if "columns" in request_ else 2)
    assert _result(store, cupy, request_) == expected and all(area.residency.hits > 0 for area in areas.values())


@pytest.mark.gpu(devices=2)
@pytest.mark.parametrize("request_", [Q6_LIKE, PROJECTION_REQUEST], ids=["aggregate", "projection"])
def test_over_two_gpus_a_share_the_fused_kernels_cannot_run_goes_block_by_block_alone(
    tmp_path, cupy_standin, request_
) -> None:
    """Where only one GPU's share holds what the fused kernels do not read (NULLs in the blocks at
    odd positions), the other's share still runs fused, and only the first's blocks go block by
    block: the answer is the NumPy backend's."""
    store, data = Store(tmp_path / "node"), _table(1, 8000)
    q = pa.array([None if i % 2000 == 1000 else v for i, v in enumerate(data.column("q").to_pylist())], pa.int64())
    data = data.set_column(0, "q", q)
    schema = TableSchema.from_arrow("t", data.schema)
    for i in range(8):  # one block each
        mode = "append" if i else "replace"
        load_table([store], schema, data.slice(i * 1000, 1000), LoadOptions(block_budget=1 << 20, mode=mode))
    blocks = TableCache(store).get("t").blocks
    assert [i for i, (_, block) in enumerate(blocks) if block.columns["q"].null_count] == [1, 3, 5, 7]
    cupy = get_backend("cupy")
    scan = scan_table(TableCache(store), {"table": "t", **request_}, cupy)
    pieces = list(scan.pieces())
    assert {p.block for p in pieces} == {"resident", *(entry.file for entry, _ in blocks[1::2])}
    assert scan.stats.blocks == 8
    assert _result(store, cupy, request_) == _result(store, get_backend("numpy"), request_)


@pytest.mark.gpu
def test_the_least_recently_used_columns_are_evicted_within_the_budget(cupy_standin) -> None:
    import cupy

    rng = np.random.default_rng(4)
    blocks = [random_block(rng, 3000) for _ in range(3)]
    images = {n: ColumnImage.of(n, [b.columns[n] for b in blocks]) for n in ("a", "p", "s")}
    sizes = {n: image.nbytes for n, image in images.items()}
    area = ResidentArea(cupy, sum(sizes.values()) - 1)  # two columns fit, not three
    for name in ("a", "p"):
        area.image(name, lambda n=name: images[n])
    area.image("a", lambda: images["a"])  # a used last: p is the least recently used
    area.image("s", lambda: images["s"])
    assert list(area.columns) == ["a", "s"] and area.residency.evictions == 1
    assert area.used <= area.budget and area.residency.loads == 3 and area.residency.hits == 1
    assert (
        cupy.asnumpy(area.buffer("s", next(iter(images["s"].buffers)))).tobytes()
        == next(iter(images["s"].buffers.values())).tobytes()
    )


@pytest.mark.gpu
@pytest.mark.parametrize("request_", [Q6_LIKE, GROUPED], ids=["one group", "groups"])
def test_columns_larger_than_the_area_are_streamed_from_host_memory_in_chunks(tmp_path, cupy_standin, request_) -> None:
    """A table whose columns outgrow the resident area goes through the device in chunks of blocks
    (`gpu_kernels.streamed`): each chunk's fused kernels, a ring of pinned buffers reused, the
    copy of the next chunk ordered before its kernels by an event, and one wait for the device, the
    read-back of every chunk's accumulators; the answer equals the NumPy backend's."""
    store = Store(tmp_path / "node")
    _load(store, _table(2))
    cupy = get_backend("cupy")
    cupy.device_memory = 4 * 50_000  # areas of 50 kB: no column of the table is resident
    try:
        expected = _answer(store, get_backend("numpy"), request_)
        assert _answer(store, cupy, request_).equals(expected)  # compiles the kernels
        counts = cupy_standin.counts
        waits, pinned = counts.syncs, counts.pinned
        scan = scan_table(TableCache(store), {"table": "t", **request_}, cupy)
        pieces = list(scan.pieces())
        assert {p.block for p in pieces} == {"streamed"} and 2 < len(pieces) < scan.stats.blocks
        assert counts.syncs - waits == 1  # the read-back alone
        assert counts.pinned - pinned <= 2 * 6  # the ring's buffers, once: two slots of a few columns' parts
        [area] = [a for (_, memory), a in cupy.resident.items() if memory == 4 * 50_000]
        assert area.used <= area.budget  # a column that fits may have been loaded, within the area
    finally:
        del cupy.device_memory


PROJECTED = {"filter": {"op": "<", "args": [{"col": "q"}, {"lit": 2}]}, "columns": ["p", "flag", "q"]}  # 2% of the rows


@pytest.mark.gpu
def test_a_projection_of_columns_larger_than_the_area_is_streamed_in_chunks_with_two_waits(
    tmp_path, cupy_standin
) -> None:
    """A projection over a table whose columns outgrow the resident area goes through the ring of
    chunks too: every chunk's kernels write into one answer on the device, placed by a scan of the
    tile counts of all chunks so far, so the host waits twice (where each chunk's rows end, then
    the answer) whatever the chunks; rows as the NumPy backend's, in each chunk's order. An answer
    outgrowing its room in the result area (a partitioned one needs it twice), or finding no room
    there beside other scans', goes block by block, as do those the fused kernels do not take."""
    store = Store(tmp_path / "node")
    _load(store, _table(2))
    cupy, numpy = get_backend("cupy"), get_backend("numpy")
    cupy.device_memory = 4 * 50_000  # areas of 50 kB: no column of the table is resident
    try:
        expected = _result(store, numpy, PROJECTED)
        assert _result(store, cupy, PROJECTED) == expected  # compiles the kernels
        counts = cupy_standin.counts
        waits = counts.syncs
        scan = scan_table(TableCache(store), {"table": "t", **PROJECTED}, cupy)
        pieces = list(scan.pieces())
        assert {p.block for p in pieces} == {"streamed"} and 2 < len(pieces) < scan.stats.blocks
        assert counts.syncs - waits == 2
        assert sorted(tuple(r.values()) for p in pieces for r in p.batch.to_pylist()) == expected
        block_by_block = scan_table(TableCache(store), {"table": "t", **PROJECTED}, numpy).pieces()
        in_order = [r["p"] for p in block_by_block for r in p.batch.to_pylist()]
        assert [r["p"] for p in pieces for r in p.batch.to_pylist()] == in_order  # in the blocks' order
        everything = {**PROJECTED, "filter": {"op": ">", "args": [{"col": "q"}, {"lit": 0}]}}  # 40,000 rows
        scan = scan_table(TableCache(store), {"table": "t", **everything}, cupy)
        assert "streamed" not in {p.block for p in scan.pieces()}  # 3 x 8 bytes each: past 25 kB
        assert scan.stats.rows_selected == 40_000
        [areas] = [a for (_, memory), a in cupy.areas.items() if memory == 4 * 50_000]
        with cupy.xp.cuda.using_allocator(areas.result.malloc):
            held = cupy.xp.empty(30_000 // 8, dtype=cupy.xp.int64)  # another scan's results: no room for the answer
        scan = scan_table(TableCache(store), {"table": "t", **PROJECTED}, cupy)
        assert "streamed" not in {p.block for p in scan.pieces()} and _result(store, cupy, PROJECTED) == expected
        del held
        by_string = {"filter": {"op": "=", "args": [{"col": "flag"}, {"lit": "A"}]}, "columns": ["q"]}  # not fused
        scan = scan_table(TableCache(store), {"table": "t", **by_string}, cupy)
        assert scan.streamed(scan.jobs()) is None and "streamed" not in {p.block for p in scan.pieces()}
        assert _result(store, cupy, by_string) == _result(store, numpy, by_string)
        partitioned = {**PROJECTED, "partition": {"keys": ["q"], "buckets": 4}}
        got, blocks = (
            _result(store, cupy, partitioned),
            [p.block for p in scan_table(TableCache(store), {"table": "t", **partitioned}, cupy).pieces()],
        )
        assert got == expected and "streamed" not in blocks  # 11 words a row: past 50 kB
    finally:
        del cupy.device_memory


@pytest.mark.gpu
def test_a_partitioned_projection_streamed_in_chunks_moves_each_chunks_rows_into_buckets(
    tmp_path, cupy_standin
) -> None:
    """Streamed and partitioned, a projection has each chunk's rows moved bucket by bucket on the
    device before its one read-back (still two waits): every row is in its keys' bucket with its
    values, as on the CPU, by an integer key, by a string key whose values differ from chunk to
    chunk (each chunk's codes hashed through its own values' hash inputs), and by both."""
    rng = np.random.default_rng(4)
    data = _table(3).set_column(
        2, "flag", pa.array([f"f{i // 4000 + d}" for i, d in enumerate(rng.integers(0, 3, 40_000))])
    )
    store = Store(tmp_path / "node")
    _load(store, data)
    cupy, numpy = get_backend("cupy"), get_backend("numpy")
    cupy.device_memory = 4 * 100_000  # areas of 100 kB: "p" is streamed, and the answer has room twice
    try:
        expected = _result(store, numpy, PROJECTED)
        for keys, buckets in ((["q"], 8), (["flag"], 4), (["flag", "p"], 64)):
            partitioned = {**PROJECTED, "partition": {"keys": keys, "buckets": buckets}}
            assert _result(store, cupy, partitioned) == expected  # compiles the kernels
            waits = cupy_standin.counts.syncs
            scan = scan_table(TableCache(store), {"table": "t", **partitioned}, cupy)
            pieces = list(scan.pieces())
            assert cupy_standin.counts.syncs - waits == 2 and {p.block for p in pieces} == {"streamed"}
            assert len(scan.streamed(scan.jobs()).chunks) > 2
            for piece in pieces:
                hashed = [to_domain(piece.batch.column(k)) for k in keys]
                assert set(buckets_of(hashed, buckets).tolist()) == {piece.partition}
            assert sorted(tuple(r.values()) for p in pieces for r in p.batch.to_pylist()) == expected
            on_the_cpu = scan_table(TableCache(store), {"table": "t", **partitioned}, numpy).pieces()
            assert {p.partition for p in pieces} == {p.partition for p in on_the_cpu}
    finally:
        del cupy.device_memory


@pytest.mark.gpu(devices=2)
def test_over_two_gpus_each_streams_its_share_of_a_table_larger_than_the_area(tmp_path, cupy_standin) -> None:
    store = Store(tmp_path / "node")
    _load(store, _table(2))
    cupy = get_backend("cupy")
    cupy.device_memory = 4 * 50_000  # areas of 50 kB on each GPU: no column of the table is resident
    try:
        expected = _answer(store, get_backend("numpy"), GROUPED)
        assert _answer(store, cupy, GROUPED).equals(expected)
        counts = cupy_standin.counts
        launches, waits = dict(counts.launches), counts.syncs
        assert _answer(store, cupy, GROUPED).equals(expected)
        assert all(counts.launches[d] > launches.get(d, 0) for d in (0, 1))
        assert counts.syncs - waits == 2  # each GPU's read-back
        assert len(cupy.rings) == 2  # a ring of pinned buffers each
    finally:
        del cupy.device_memory


@pytest.mark.gpu
def test_a_new_version_of_a_table_is_not_answered_from_the_old_ones_columns(tmp_path, cupy_standin) -> None:
    store = Store(tmp_path / "node")
    cupy, numpy = get_backend("cupy"), get_backend("numpy")
    for seed in (3, 5):
        _load(store, _table(seed, 30_000))  # replaces the table: a new version
        assert _answer(store, cupy, GROUPED).equals(_answer(store, numpy, GROUPED))


@pytest.mark.gpu
def test_what_does_not_fit_is_refused_and_leaves_the_area_as_it_was(cupy_standin) -> None:
    import cupy

    rng = np.random.default_rng(6)
    blocks = [random_block(rng, 2000) for _ in range(2)]
    images = {n: ColumnImage.of(n, [b.columns[n] for b in blocks]) for n in ("k1", "a", "p")}
    keyed = ResidentArea(cupy, images["k1"].nbytes)  # the key column fits, its codes then do not
    keyed.image("k1", lambda: images["k1"])
    _, codes = images["k1"].key_codes()
    with pytest.raises(TooLarge):
        keyed.buffer("k1", buffer_key("key", codes))
    assert not keyed.columns and keyed.used == 0
    area = ResidentArea(cupy, images["a"].nbytes + images["p"].nbytes - 1)
    area.image("a", lambda: images["a"])
    held = [area.buffer("a", key) for key in images["a"].buffers]  # a running scan still reads a
    with pytest.raises(TooLarge):  # a is evicted, but its memory is not free yet
        area.image("p", lambda: images["p"])
    assert not area.columns and held


@pytest.mark.gpu
def test_a_plan_whose_tables_find_no_room_beside_the_columns_copies_them_at_each_run(tmp_path, cupy_standin) -> None:
    """Its block tables and accumulators copied at each run, until there is room for them: the plan
    found kept then gets them, and copies nothing at the next run."""
    store = Store(tmp_path / "node")
    _load(store, _table(7, 5000))
    cupy, numpy = get_backend("cupy"), get_backend("numpy")
    assert _result(store, cupy, Q6_LIKE) == _result(store, numpy, Q6_LIKE)  # loads q and p
    [area] = cupy.resident.values()
    area.plans.clear()
    area.budget = area.used  # the columns fill the area
    request = {**Q6_LIKE, "filter": {"op": "<", "args": [{"col": "q"}, {"lit": 10}]}}
    expected = _result(store, numpy, request)
    for _ in range(2):
        copied = cupy_standin.counts.to_device
        assert _result(store, cupy, request) == expected
        assert cupy_standin.counts.to_device > copied
    [plan] = area.plans.values()
    assert plan.kept is None and area.used == area.budget
    area.budget += plan.scan.launches[0].table.nbytes + plan.scan.initial.nbytes  # room for them now
    assert _result(store, cupy, request) == expected  # found kept: its tables copied in now
    copied = cupy_standin.counts.to_device
    assert _result(store, cupy, request) == expected and cupy_standin.counts.to_device == copied
    assert plan.kept is not None and area.used == area.budget


@pytest.mark.gpu
def test_a_scan_whose_columns_were_evicted_meanwhile_is_not_run(tmp_path, cupy_standin) -> None:
    store = Store(tmp_path / "node")
    _load(store, _table(7, 5000))
    cupy = get_backend("cupy")
    scan = scan_table(TableCache(store), {"table": "t", **Q6_LIKE}, cupy)
    blocks = [block for _, block in scan.loaded.blocks]
    task = scan.plan.task
    prepared = plan_resident(cupy, "t", blocks, range(len(blocks)), task.predicate, [], list(task.aggregates))
    assert prepared is not None and prepared.run(cupy) is not None
    prepared.area.columns.clear()  # another scan's load evicted them (as its plan was being kept)
    assert prepared.run(cupy) is None
    again = plan_resident(cupy, "t", blocks, range(len(blocks)), task.predicate, [], list(task.aggregates))
    assert again is not prepared and again.run(cupy) is not None  # its plan not found: made again
    count_only = [a for a in task.aggregates if a.arg is None]
    assert plan_resident(cupy, "t", blocks, range(len(blocks)), None, [], count_only) is None  # no column to keep


@pytest.mark.gpu
def test_a_scan_is_planned_once_and_found_again_until_a_column_it_reads_is_evicted(
    tmp_path, cupy_standin, monkeypatch
) -> None:
    """The area keeps a scan's plan (its kernels and block tables): the same scan again finds it,
    its columns counted as found, and answers as before; a column it reads evicted, its plan is
    dropped with it and the next such scan planned again; the area keeps at most PLANS plans."""
    store = Store(tmp_path / "node")
    _load(store, _table(1))
    other = _table(2).rename_columns(["q", "p2", "flag"])
    load_table([store], TableSchema.from_arrow("u", other.schema), other, LoadOptions(block_budget=20_000))
    cupy, numpy = get_backend("cupy"), get_backend("numpy")
    cupy.device_memory = 4 * 300_000  # room for "t"'s q and p, not for "u"'s p2 beside them
    try:

        def prepared(request: dict, table: str = "t"):
            scan = scan_table(TableCache(store), {"table": table, **request}, cupy)
            return scan.resident(scan.jobs())

        first = prepared(Q6_LIKE)
        area, hits = first.area, first.area.residency.hits
        assert prepared(Q6_LIKE) is first and area.residency.hits == hits + len(first.columns) == hits + 2
        assert prepared(PROJECTION_REQUEST) is prepared(PROJECTION_REQUEST) is not first  # a projection too
        assert _result(store, cupy, Q6_LIKE) == _result(store, numpy, Q6_LIKE)
        prepared({"filter": {"op": ">", "args": [{"col": "p2"}, {"lit": 0}]}, "columns": ["p2"]}, "u")  # evicts
        evicted = [key for key in first.columns if key not in area.columns]
        assert evicted and not any(key in plan.columns for plan in area.plans.values() for key in evicted)
        again = prepared(Q6_LIKE)
        assert again is not first and again.run(cupy) is not None
        assert _result(store, cupy, Q6_LIKE) == _result(store, numpy, Q6_LIKE)
        monkeypatch.setattr(resident, "PLANS", 2)
        for top in (10, 20, 30):
            prepared({**Q6_LIKE, "filter": {"op": "<", "args": [{"col": "q"}, {"lit": top}]}})
        assert len(area.plans) == 2
        cupy.device_memory = 4 * 220_000  # room for p or for q, not both: loading q evicts p
        squeezed = prepared(Q6_LIKE)
        assert squeezed.area is not area and not squeezed.area.plans  # not kept: it reads an evicted column
    finally:
        del cupy.device_memory


PROJECTION = """SELECT l_orderkey, l_linenumber, l_extendedprice * (1 - l_discount) AS price, l_returnflag, l_shipdate
FROM lineitem WHERE l_shipdate BETWEEN DATE '1995-03-01' AND DATE '1995-03-20' AND l_quantity < 10
ORDER BY l_orderkey, l_linenumber"""


@pytest.mark.gpu
def test_tpch_single_table_queries_through_sql_on_gpu_nodes_equal_duckdbs(region_stores, spark_settings, duck) -> None:
    """The nodes of a region on the CuPy backend answer TPC-H Q1 and Q6, and a projection of
    lineitem, from their resident columns, through the gateway's SQL over HTTP, with DuckDB's
    answers and no Spark."""
    from gateway.sql.engine import Engine  # pyspark: its module, never a session here

    cupy = get_backend("cupy")
    with ExitStack() as stack:
        nodes = {s.node: stack.enter_context(serve(Node(s, cupy, slots=2).app())) for s in region_stores}
        engine = Engine(nodes, spark_settings, lambda: pytest.fail("a single-table query started Spark"))
        for sql in [*(query(n) for n in SINGLE_TABLE), PROJECTION]:
            result = engine.execute(sql)
            assert result.engine == "nodes"
            assert rows_match(rows(result.table), duck.sql(sql).fetchall(), ordered=True), sql
        for url in nodes.values():  # a node's status shows what its GPU keeps and how often it was found there
            devices = NodeClient(url).get("/v1/node")["devices"]
            assert all(0 <= d["bytes"] <= d["budget"] and d["device"] >= 0 for d in devices)
            assert any(d["columns"] >= 4 and d["loads"] >= 2 * 4 and d["hits"] > 0 and d["plans"] >= 3 for d in devices)
        numpy_node = stack.enter_context(serve(Node(region_stores[0], get_backend("numpy")).app()))
        assert NodeClient(numpy_node).get("/v1/node")["devices"] == []
    areas = list(cupy.resident.values())
    assert sum(a.residency.loads for a in areas) >= 2 * 4  # each node kept lineitem's columns it read
