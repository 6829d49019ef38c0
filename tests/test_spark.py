"""The "cxg" PySpark data source (reads with pushdown, writes) and the Spark ingest pipeline."""

from __future__ import annotations

import json
import re
import threading
from collections import defaultdict
from pathlib import Path

import pyarrow as pa
import pytest

from gateway import ApiError, SparkSettings
from gateway.background import serve
from gateway.sql.errors import QueryCancelled
from gateway.sql.execute import POOLS, SchedulerPools
from gpu_kernels import get_backend, to_domain
from regions import spark_options
from regions.spark_session import local_master
from storage import LoadOptions, Node, Placement, Source, Store, TableSchema, load_table, source_frame, spark_load
from storage.partitioning import buckets_of
from storage.tpch import schema_for
from tests.kernel_cases import plain_strings
from tests.waiting import eventually


def _urls(region: dict[str, str]) -> str:
    return ",".join(region.values())


def test_filters_spark_offers_are_pushed_into_the_node_scan(spark, region, duck) -> None:
    frame = spark.read.format("cxg").option("nodes", _urls(region)).option("table", "lineitem").load()
    filtered = frame.filter("l_shipdate < date '1993-01-01' and l_returnflag = 'R' and l_quantity > 10")
    plan = filtered._jdf.queryExecution().executedPlan().toString()
    assert "BatchScan" in plan and "Filter " not in plan and "Filter(" not in plan, plan
    expected = duck.sql(
        "select count(*) from lineitem where l_shipdate < date '1993-01-01' and l_returnflag = 'R' and l_quantity > 10"
    ).fetchall()[0][0]
    assert filtered.count() == expected


def test_a_request_pushes_columns_expressions_and_predicates(spark, region, duck) -> None:
    request = {
        "columns": ["l_orderkey"],
        "select": [{"name": "rev", "expr": {"op": "*", "args": [{"col": "l_extendedprice"}, {"col": "l_discount"}]}}],
        "filter": {"op": "<", "args": [{"col": "l_shipdate"}, {"lit": "1993-01-01", "type": "date"}]},
    }
    frame = (
        spark.read.format("cxg")
        .option("nodes", _urls(region))
        .option("table", "lineitem")
        .option("request", json.dumps(request))
        .load()
    )
    assert frame.columns == ["l_orderkey", "rev"]
    total = float(frame.agg({"rev": "sum"}).first()[0])
    expected = float(
        duck.sql(
            "select sum(l_extendedprice * l_discount) from lineitem where l_shipdate < date '1993-01-01'"
        ).fetchall()[0][0]
    )
    assert total == pytest.approx(expected, rel=1e-9)


def test_one_input_partition_per_node_or_per_block_range(spark, region, region_stores) -> None:
    reader = spark.read.format("cxg").option("nodes", _urls(region)).option("table", "lineitem")
    assert reader.load().rdd.getNumPartitions() == len(region)
    blocks = min(len(s.table("lineitem").blocks) for s in region_stores)
    split = reader.option("partitions", str(2 * len(region))).load()
    assert split.rdd.getNumPartitions() == len(region) * min(2, blocks)
    assert split.count() == sum(s.table("lineitem").rows for s in region_stores)


def test_the_region_session_shares_spark_fairly_with_arrow_and_pushdown(spark) -> None:
    conf = spark.sparkContext.getConf()
    assert conf.get("spark.sql.execution.arrow.pyspark.enabled") == "true"
    assert conf.get("spark.sql.python.filterPushdown.enabled") == "true"
    assert conf.get("spark.scheduler.mode") == "FAIR"
    pool = spark.sparkContext._jsc.sc().getPoolForName("default").get()
    assert pool.schedulingMode().toString() == "FAIR"


def test_each_running_query_has_a_scheduler_pool_of_its_own(engine) -> None:
    """Pools share the cores equally (FAIR), so a query's share does not grow with its tasks."""
    pools = SchedulerPools("test")
    with pools.pool() as first, pools.pool() as second:
        assert first != second
    with pools.pool() as again:
        assert again in (first, second)  # reused: Spark keeps as many pools as ran at once
    engine.execute("select count(*) from orders join customer on o_custkey = c_custkey")
    context = engine.spark.sparkContext
    assert context._jsc.sc().getPoolForName(f"{POOLS.prefix}-0").isDefined()
    assert context.getLocalProperty("spark.scheduler.pool") is None  # the thread is left as it was


RUNAWAY = (  # N^3 pairs; its nested-loop stage has a task per core (the grouped side is shuffled)
    "select count(*) from (select l_orderkey k from lineitem join orders on l_orderkey = o_orderkey"
    " group by l_orderkey, l_linenumber) a"
    " join lineitem b on a.k < b.l_orderkey join lineitem c on b.l_orderkey < c.l_orderkey"
)


@pytest.mark.parametrize(
    ("master", "expected"),
    [
        ("local", ("local[4]", 1)),
        ("local[3]", ("local[12]", 3)),
        ("local[2, 5]", ("local[8, 5]", 2)),  # with task retries
        ("spark://head:7077", ("spark://head:7077", None)),  # a cluster's slots are its workers' cores
    ],
)
def test_a_local_master_gets_spare_task_slots(master: str, expected: tuple) -> None:
    """`slots_per_core` (4) slots per core; each stage of a query still a task per core."""
    settings = SparkSettings(master=master)
    assert local_master(settings) == expected
    options = spark_options(settings)
    assert options["spark.master"] == expected[0]
    assert options.get("spark.default.parallelism") == (str(expected[1]) if expected[1] else None)
    assert local_master(SparkSettings(master="local[3]", slots_per_core=1)) == ("local[3]", 3)


JOIN = "select count(*) from orders join customer on o_custkey = c_custkey where c_mktsegment = 'BUILDING'"


def test_a_runaway_join_leaves_room_for_the_queries_beside_it(engine, duck) -> None:
    """Spark never preempts a task: the runaway's tasks hold a slot on every core for as long as it
    runs, and the spare slots of a local master (`slots_per_core`) let another query's tasks start
    beside them. With one slot per core the join below would wait for the runaway to end."""
    context = engine.spark.sparkContext
    cores = context.defaultParallelism
    assert cores == 2 and context.master == "local[8]"
    runaway = threading.Thread(target=_until_cancelled, args=(engine, RUNAWAY, "runaway"), daemon=True)
    runaway.start()
    try:
        held = [0]  # looks in a row that found every core busy

        def holding() -> bool:  # the runaway's nested-loop stage holds every core (3 s on end)
            assert runaway.is_alive(), "the runaway ended"
            held.append(held[-1] + 1 if _active_tasks(context) >= cores else 0)
            return held[-1] >= 15

        eventually(holding, 120, "the runaway holding every core 3 s on end", interval=0.2)
        assert engine.stage(JOIN).plan.engine == "spark"
        answers: list = []
        beside = threading.Thread(target=lambda: answers.append(engine.execute(JOIN).table), daemon=True)
        beside.start()
        beside.join(120)
        assert answers, "the join got no Spark slot beside the runaway"
        assert answers[0].column(0).to_pylist() == [duck.sql(JOIN).fetchall()[0][0]]
        assert runaway.is_alive() and _active_tasks(context) >= cores, "the runaway still running all along"
    finally:
        engine.cancel("runaway")
        runaway.join(60)
    assert not runaway.is_alive()


def test_a_result_past_what_spark_may_collect_is_the_users_error(spark_engine) -> None:
    """Spark refuses to collect more than spark.driver.maxResultSize (set low here in the running
    context's conf, which each job reads): a 400 result_too_large, not an execution error."""
    conf = spark_engine.spark.sparkContext._jsc.sc().conf()
    before = conf.get("spark.driver.maxResultSize", "1g")
    conf.set("spark.driver.maxResultSize", "1m")
    try:
        with pytest.raises(Exception) as failed:  # Spark's own error, which the gateway translates
            spark_engine.execute("select l_comment, o_comment from lineitem join orders on l_orderkey = o_orderkey")
        refused = ApiError.of(failed.value, query=True)
        assert re.search(r"spark\.driver\.maxResultSize", refused.message)
        assert refused.status == 400 and refused.code == "result_too_large"
    finally:
        conf.set("spark.driver.maxResultSize", before)


def _until_cancelled(engine, sql: str, query_id: str) -> None:
    with pytest.raises(QueryCancelled):
        engine.answer(engine.plan(sql), query_id)


def _active_tasks(context) -> int:
    tracker = context.statusTracker()
    return sum(info.numActiveTasks for s in tracker.getActiveStageIds() if (info := tracker.getStageInfo(s)))


def test_a_replicated_table_is_read_once_across_nodes(spark, region) -> None:
    frame = spark.read.format("cxg").option("nodes", _urls(region)).option("table", "nation").option("partitions", "4")
    assert frame.load().count() == 25


def _decoded(stores: list[Store], name: str, key: list[str]) -> pa.Table:
    return plain_strings(pa.concat_tables([s.table(name).to_arrow() for s in stores])).sort_by(
        [(k, "ascending") for k in key]
    )


def test_spark_ingest_lays_out_blocks_like_the_local_loader(spark, tmp_path: Path, tpch_files) -> None:
    source = Source("parquet", (str(tpch_files["orders"]),))
    schema = schema_for("orders", source.arrow_schema())
    spark_stores = [Store(tmp_path / "spark" / f"n{i}", node=f"node-{i}") for i in range(2)]
    local_stores = [Store(tmp_path / "local" / f"n{i}", node=f"node-{i}") for i in range(2)]
    sizing = spark_load(spark, source_frame(spark, source), schema, [str(s.root) for s in spark_stores], LoadOptions())
    load_table(local_stores, schema, source.read())
    assert _decoded(spark_stores, "orders", ["o_orderkey"]).equals(_decoded(local_stores, "orders", ["o_orderkey"]))
    for spark_store, local_store in zip(spark_stores, local_stores, strict=True):
        spark_table, local_table = spark_store.table("orders"), local_store.table("orders")
        assert spark_table.schema == local_table.schema, "same definition, bucket owners included"
        assert sorted(b.bucket for b in spark_table.blocks) == sorted(b.bucket for b in local_table.blocks)
        for _, block in spark_table.iter_blocks():
            dates = block.decode(["o_orderdate"]).column(0).to_pylist()
            assert dates == sorted(dates), "rows of a bucket are sorted by the sort key"
    assert sizing.block_rows == local_stores[0].table("orders").manifest.sizing.block_rows


def test_spark_ingest_streams_each_bucket_in_whole_blocks(spark, tmp_path: Path, tpch_files) -> None:
    """Small blocks, so that every bucket streams through several: all but a bucket's last two
    blocks are whole (RC rows), the bucket stays in sort-key order across them, no row is lost."""
    source = Source("parquet", (str(tpch_files["orders"]),))
    schema = schema_for("orders", source.arrow_schema())
    stores = [Store(tmp_path / f"n{i}", node=f"node-{i}") for i in range(2)]
    options = LoadOptions(block_budget=16 * 1024)
    rc = spark_load(spark, source_frame(spark, source), schema, [str(s.root) for s in stores], options).block_rows
    buckets: dict[int, list[tuple[str, int, list]]] = defaultdict(list)
    for store in stores:
        for entry, block in store.table("orders").iter_blocks():
            keys = block.decode(["o_orderdate"]).column(0).to_pylist()
            buckets[entry.bucket].append((entry.file, entry.rows, keys))
    assert len(buckets) == schema.placement.buckets
    assert min(sum(rows for _, rows, _ in blocks) for blocks in buckets.values()) > 4 * rc
    for blocks in buckets.values():
        blocks.sort()
        assert all(rows == rc for _, rows, _ in blocks[:-2]), "whole blocks while the bucket streams"
        assert all(0 < rows <= rc for _, rows, _ in blocks[-2:])
        dates = [d for _, _, keys in blocks for d in keys]
        assert dates == sorted(dates), "a bucket's rows in sort-key order across its blocks"
    assert sum(s.table("orders").rows for s in stores) == source.read().num_rows


def test_spark_ingest_into_running_nodes_over_http(spark, tmp_path: Path, tpch_files) -> None:
    stores = [Store(tmp_path / f"n{i}", node=f"node-{i}") for i in range(2)]
    source = Source("parquet", (str(tpch_files["customer"]),))
    schema = schema_for("customer", source.arrow_schema())
    nodes = [Node(s, get_backend("numpy"), slots=1) for s in stores]
    with serve(nodes[0].app()) as first, serve(nodes[1].app()) as second:
        spark_load(spark, source_frame(spark, source), schema, [first, second], LoadOptions())
        assert sum(s.table("customer").rows for s in stores) == 1500
        spark_load(spark, source_frame(spark, source), schema, [first, second], LoadOptions(mode="append"))
        assert sum(s.table("customer").rows for s in stores) == 3000
        assert {s.table("customer").manifest.version for s in stores} == {2}
        frame = spark.read.format("cxg").option("nodes", f"{first},{second}").option("table", "customer").load()
        assert frame.count() == 3000


def test_a_failed_spark_load_changes_nothing_and_leaves_no_files(spark, tmp_path: Path) -> None:
    stores = [Store(tmp_path / f"n{i}", node=f"node-{i}") for i in range(2)]
    good = pa.table({"k": pa.array(range(1000), pa.int64()), "v": pa.array([f"v{i}" for i in range(1000)])})
    schema = TableSchema.from_arrow("t", good.schema, ("k",), Placement.parse("hash(k)", 4))
    load_table(stores, schema, good)
    before = _decoded(stores, "t", ["k"])
    strict = TableSchema.from_arrow(
        "t", pa.schema([pa.field("k", pa.int64(), False), pa.field("v", pa.string(), False)]), ("k",), schema.placement
    )
    bad = spark.createDataFrame([(1, "a"), (2, None)], "k long, v string")  # NULL into a NOT NULL column
    with pytest.raises(Exception, match="NOT NULL"):
        spark_load(spark, bad, strict, [str(s.root) for s in stores], LoadOptions())
    assert _decoded(stores, "t", ["k"]).equals(before)
    for store in stores:
        referenced = {b.file for b in store.table("t").blocks}
        present = {p.name for p in (store.root / "t").iterdir() if p.suffix in (".zst", ".arrow", ".tmp")}
        assert present == referenced, "the aborted load's uploads are removed"


def test_a_plain_dataframe_write_puts_every_row_in_its_bucket(spark, tmp_path: Path) -> None:
    rows = pa.table({"k": pa.array(range(0, 6000, 3), pa.int64()), "v": pa.array([f"v{i % 17}" for i in range(2000)])})
    nodes = ["node-0", "node-1"]
    schema = TableSchema.from_arrow("t", rows.schema, ("v",), Placement.parse("hash(k)", 8).with_owners(nodes))
    stores = [Store(tmp_path / "spark" / f"n{i}", node=node) for i, node in enumerate(nodes)]
    local_stores = [Store(tmp_path / "local" / f"n{i}", node=node) for i, node in enumerate(nodes)]
    load_table(local_stores, schema, rows)
    frame = spark.createDataFrame(rows.to_pandas()).repartition(3)  # rows of every bucket in every task
    (
        frame.write.format("cxg")
        .mode("overwrite")
        .option("targets", ",".join(str(s.root) for s in stores))
        .option("table", "t")
        .option("definition", json.dumps(schema.to_json()))
        .option("sizing", json.dumps(vars(local_stores[0].table("t").manifest.sizing)))
        .save()
    )
    for store, local_store in zip(stores, local_stores, strict=True):
        assert _decoded([store], "t", ["k"]).equals(_decoded([local_store], "t", ["k"])), "the same rows per node"
        for entry, block in store.table("t").iter_blocks():
            keys = block.decode(["k", "v"])
            assert set(buckets_of([to_domain(keys.column("k"))], 8).tolist()) == {entry.bucket}
            assert keys.column("v").to_pylist() == sorted(keys.column("v").to_pylist()), "sorted by the sort key"


def test_csv_through_spark_keeps_types_and_nulls(spark, tmp_path: Path) -> None:
    path = tmp_path / "c.csv"
    path.write_text("id,city,amount,day\n1,Zürich,10.50,2024-01-02\n2,,7.25,2024-01-02\n3,東京,,2024-01-03\n")
    source = Source("csv", (str(path),))
    stores = [Store(tmp_path / "n0", node="node-0")]
    schema = TableSchema.from_arrow("c", source.arrow_schema(), ("day",))
    spark_load(spark, source_frame(spark, source), schema, [str(stores[0].root)], LoadOptions())
    assert _decoded(stores, "c", ["id"]).equals(source.read().sort_by("id"))
