"""How sub-query rows reach Spark: Parquet files or the cxg data source give the same answers,
say so in EXPLAIN, and leave no files behind."""

from __future__ import annotations

import dataclasses
import datetime as dt
import decimal

import pyarrow as pa
import pytest

from benchmarks.compare import rows, rows_match
from gateway import ApiError
from gateway.sql import exchange
from gateway.sql.engine import Engine
from gateway.sql.errors import ExecutionError, InvalidQuery
from loadtests import query

JOINS = [
    "select p.name, e.at, e.weight, e.ok, e.kind, p.score, p.joined from people p join events e "
    "on p.id = e.person_id order by p.id, e.at nulls first",
    "select e.kind, count(*), sum(e.weight), min(e.at), max(p.score) from events e left join people p "
    "on p.id = e.person_id group by e.kind order by e.kind nulls last",
    "select p.name from people p where exists (select 1 from events e where e.person_id = p.id and e.ok) order by p.id",
    "select v.note, p.city from visits v join people p on p.id = v.person_id where p.city <> 'Lima' "
    "order by v.note nulls first",
    "select p.name from people p join empty_people e on p.id = e.id",
    query(3),
    query(13),
    query(18),
    query(21),
]

WAYS = {
    "files": ("files", False, {}),  # every sub-query as Parquet, however small
    "files+local": ("files", True, {}),
    "values": ("files", True, {"VALUES_ROWS": 2_000}),  # every fetched sub-query of up to 2,000 rows as VALUES
    "source": ("source", False, {}),  # every sub-query through the data source
    "source+local": ("source", True, {}),
}


@pytest.fixture(params=list(WAYS), scope="module")
def way(request, region, spark, spark_settings, tmp_path_factory):
    mode, inline, limits = WAYS[request.param]
    directory = tmp_path_factory.mktemp(f"exchange-{request.param}")
    settings = dataclasses.replace(spark_settings, exchange=mode, exchange_dir=str(directory), inline=inline)
    with pytest.MonkeyPatch.context() as patch:
        for name, value in limits.items():
            patch.setattr(exchange, name, value)
        yield Engine(region, settings, lambda: spark, joins="spark"), directory


@pytest.mark.parametrize("sql", JOINS, ids=range(len(JOINS)))
def test_every_way_to_spark_gives_duckdbs_answer(way, duck, sql: str) -> None:
    engine, directory = way
    result = engine.execute(sql)
    assert result.engine == "spark"
    expected = duck.sql(sql).fetchall()
    assert rows_match(rows(result.table), expected, ordered="order by" in sql.lower()), (
        rows(result.table)[:5],
        expected[:5],
    )
    assert not any(directory.iterdir()), "the query's exchange files are removed"
    assert not [t for t in engine.spark.catalog.listTables() if t.name.startswith("__cxg")], "and its views"


def test_a_failing_query_leaves_no_files(way) -> None:
    engine, directory = way
    with pytest.raises(Exception) as failed:  # ANSI casts fail at run time, inside Spark
        engine.execute("select cast(p.name as int) from people p join visits v on p.id = v.person_id")
    assert ApiError.of(failed.value, query=True).code == InvalidQuery.code
    assert not any(directory.iterdir())


def test_explain_says_how_each_subquery_reaches_spark(way) -> None:
    engine, _ = way
    staged = engine.stage(query(3))
    plan = staged.plan
    text = "\n".join(plan.explain())
    handover = engine.exchange_options
    for scan in plan.scans:
        fetched = staged.fetched.get(scan.index)
        if scan.index in plan.dropped:
            expected = "not handed to Spark"
        elif fetched is not None and exchange.inlinable(fetched, handover.values_rows):
            expected = "as VALUES"
        elif fetched is not None and fetched.num_rows <= handover.local_rows:
            expected = "as a local relation"
        else:
            expected = "as Parquet files" if handover.mode == "files" else "through the cxg data source"
        assert expected in plan.deliveries[scan.index] and plan.deliveries[scan.index] in text
    if not handover.inline:
        assert "local relation" not in text and "VALUES" not in text


def test_the_query_needs_its_nodes_no_more_once_spark_holds_every_row(way) -> None:
    """Every way but the data source hands the rows over before Spark runs (the gateway then frees
    the query's slots on the nodes); through the data source, Spark's executors read the nodes."""
    engine, _ = way
    heard = []
    result = engine.answer(engine.plan(query(3)), handed_over=lambda: heard.append(True))
    reads = any("through the cxg data source" in d for d in result.plan.deliveries.values())
    assert result.engine == "spark" and heard == ([] if reads else [True])


def test_the_same_subquery_is_handed_over_once(engine) -> None:
    staged = engine.stage(query(2))  # the correlated subquery reads partsupp, supplier, nation, region again
    handed = exchange.Exchange(engine.spark, engine.catalog, exchange.ExchangeOptions("files"))
    try:
        frames = [handed.frame(scan, staged.fetched.get(scan.index)) for scan in staged.plan.scans]
    finally:
        handed.close()
    assert len({id(f) for f in frames}) < len(frames)


def test_auto_exchange_follows_the_master(spark_settings) -> None:
    assert dataclasses.replace(spark_settings, master="local[2]").exchange_mode() == "files"
    assert dataclasses.replace(spark_settings, master="spark://spark:7077").exchange_mode() == "source"
    assert dataclasses.replace(spark_settings, master="yarn", exchange="files").exchange_mode() == "files"


def test_values_relation_round_trips_every_plain_type(spark) -> None:
    rows = pa.table(
        {
            "id": pa.array([1, None, -(2**62)], pa.int64()),
            "small": pa.array([7, 0, None], pa.int32()),
            "text": ["x'y \\ z", "Ünïcödé 日本", None],
            "price": pa.array([decimal.Decimal("1.50"), None, decimal.Decimal("-99999.99")], pa.decimal128(15, 2)),
            "day": [dt.date(1998, 12, 1), None, dt.date(1, 1, 1)],
            "at": pa.array([dt.datetime(2020, 1, 1, 3, 4, 5, 6), None, dt.datetime(1970, 1, 1)], pa.timestamp("us")),
            "ok": [True, None, False],
            "ratio": [float("inf"), 0.1, float("nan")],
            "order": [1, 2, 3],  # a reserved word
            "two words": ["a", "b", "c"],
        }
    )
    assert exchange.inlinable(rows)
    sql = exchange.values_relation(rows).sql(dialect="spark")
    back = spark.sql(sql).toArrow()
    assert back.schema.names == rows.schema.names
    assert back.schema.types == rows.schema.types
    got, want = back.to_pylist(), rows.to_pylist()
    assert got[:2] == want[:2]
    assert got[2]["ratio"] != got[2]["ratio"] and {**got[2], "ratio": 0} == {**want[2], "ratio": 0}  # NaN


def test_only_small_plain_inputs_travel_as_values() -> None:
    assert not exchange.inlinable(pa.table({"a": pa.array([], pa.int64())}))
    assert not exchange.inlinable(pa.table({"a": range(exchange.VALUES_ROWS + 1)}))
    assert not exchange.inlinable(pa.table({"a": pa.array([1], pa.timestamp("us", tz="UTC"))}))
    assert exchange.inlinable(pa.table({"a": range(exchange.VALUES_ROWS)}))


def test_a_fetched_sub_query_is_shared_between_the_cores(engine, monkeypatch) -> None:
    # Spark gives a file smaller than openCostInBytes one task: a fetched sub-query is written as
    # one file per core (of at least SHARE_ROWS rows each)
    assert [exchange.shares(rows, 2) for rows in (0, 32_767, 65_535, 65_536, 10**6)] == [1, 1, 1, 2, 2]
    monkeypatch.setattr(exchange, "SHARE_ROWS", 50)
    staged = engine.stage(query(3))
    scan = max(staged.plan.scans, key=lambda s: staged.fetched[s.index].num_rows)
    fetched = staged.fetched[scan.index]
    assert fetched.num_rows >= 100
    handed = exchange.Exchange(engine.spark, engine.catalog, exchange.ExchangeOptions("files", inline=False))
    try:
        frame = handed.frame(scan, fetched)
        assert frame.rdd.getNumPartitions() == engine.spark.sparkContext.defaultParallelism == 2
        assert frame.count() == fetched.num_rows
    finally:
        handed.close()


def test_the_engine_gets_spark_from_whoever_composes_the_region(region, spark, spark_settings) -> None:
    calls = []

    def factory():
        calls.append(1)
        return spark

    engine = Engine(region, spark_settings, factory)
    assert engine.execute("select count(*) from nation").engine == "nodes" and not calls, "no Spark for the nodes"
    split = "select count(*) from customer join orders on c_custkey = o_custkey"  # each on its own key
    assert engine.execute(JOINS[0]).engine == "colocated" and not calls, "no Spark where each node joins its own"
    assert engine.execute(split).engine == "gathered" and not calls, "no Spark for rows the coordinator holds"
    on_spark = dataclasses.replace(spark_settings, gather_rows=0)
    assert Engine(region, on_spark, factory).execute(split).engine == "spark" and calls
    with pytest.raises(ExecutionError, match="given no Spark session"):
        Engine(region, on_spark).execute(split)
