"""Shared fixtures: TPC-H SF 0.01 generated once per session, temporary stores, the gpu marker,
derandomized property tests."""

from __future__ import annotations

from contextlib import ExitStack
from dataclasses import replace
from pathlib import Path

import pytest
from hypothesis import settings

from balancer import NativeBackend, NodeServer
from benchmarks.cupy_standin import installed
from benchmarks.mariadb_server import MariaDB
from gateway import SparkSettings
from gateway.background import serve
from gpu_kernels import cuda_available, get_backend
from storage import Node, Placement, Store, load_mysql, load_table, read_parquet, tpch
from tests.colocated_cases import colocated_tables
from tests.sql_cases import edge_tables

TPCH_SF = 0.01

# property tests draw the same examples on every run: a failure in CI is a failure on every machine
settings.register_profile("deterministic", derandomize=True, database=None)
settings.load_profile("deterministic")


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption("--long", action="store_true", help="fuzz with the report's number of examples, not CI's")


REAL_GPU = cuda_available()

# with pytest-xdist (`-n 2 --dist loadfile --no-loadscope-reorder`, `make test`) a file's tests run on
# one worker, sharing its module fixtures, in this order: the longest files first, so that neither
# worker ends long after the other; the second file making network-namespace hosts (one set at a time
# on a machine: `benchmarks.netns`) last, long after the first
LONGEST_FIRST = ("test_spark_cluster", "test_faults", "test_separate_hosts", "test_tpcds")
LAST = "test_regions_hosts"


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    rank = {name: i for i, name in enumerate(LONGEST_FIRST)} | {LAST: len(LONGEST_FIRST) + 1}
    items.sort(key=lambda item: rank.get(item.path.stem, len(LONGEST_FIRST)))


@pytest.fixture(autouse=True)
def cupy_standin(request: pytest.FixtureRequest):
    """A `gpu` test runs on the real device where there is one, else against the strict stand-in of
    CuPy (`benchmarks.cupy_standin`), which it gets as this fixture's value."""
    if REAL_GPU or request.node.get_closest_marker("gpu") is None:
        yield None
        return
    marker = request.node.get_closest_marker("gpu")
    with installed(devices=marker.kwargs.get("devices", 1)) as standin:
        yield standin


@pytest.fixture(scope="session")
def tpch_files(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """All 8 TPC-H tables at SF 0.01 as Parquet files."""
    return tpch.generate(TPCH_SF, tmp_path_factory.mktemp("tpch"))


@pytest.fixture(scope="session")
def spark_settings():
    return SparkSettings(master="local[2]", driver_memory="2g")


@pytest.fixture(scope="session")
def spark(spark_settings):
    """The one SparkSession of the test session."""
    from regions import spark_session  # pyspark: loaded only where a test uses Spark

    return spark_session(spark_settings)


@pytest.fixture(scope="session")
def region_stores(tmp_path_factory: pytest.TempPathFactory, tpch_files: dict[str, Path]):
    """Two stores: TPC-H SF 0.01 (hash-placed and replicated tables) and the small tables of
    `tests.sql_cases`."""
    root = tmp_path_factory.mktemp("region")
    stores = [Store(root / f"n{i}", node=f"node-{i}") for i in range(2)]
    for name, path in tpch_files.items():
        source = read_parquet([path])
        load_table(stores, tpch.schema_for(name, source.schema), source)
    for schema, table in edge_tables():
        load_table(stores, schema, table)
    return stores


@pytest.fixture(scope="session")
def region(region_stores):
    """The two stores served by storage nodes on loopback; yields node name -> URL."""
    with ExitStack() as stack:
        yield {s.node: stack.enter_context(serve(Node(s, get_backend("numpy"), slots=2).app())) for s in region_stores}


@pytest.fixture(scope="session")
def colocated_region(tmp_path_factory: pytest.TempPathFactory, tpch_files: dict[str, Path]):
    """Two storage nodes on loopback serving TPC-H SF 0.01 with lineitem and orders hash-placed alike
    on the order key and every other table replicated, and the tables of `tests.colocated_cases`;
    yields node name -> URL."""
    root = tmp_path_factory.mktemp("colocated")
    stores = [Store(root / f"n{i}", node=f"node-{i}") for i in range(2)]
    for name, path in tpch_files.items():
        source = read_parquet([path])
        schema = tpch.schema_for(name, source.schema)
        load_table(stores, schema if name in ("lineitem", "orders") else replace(schema, placement=Placement()), source)
    for schema, table in colocated_tables():
        load_table(stores, schema, table)
    with ExitStack() as stack:
        yield {s.node: stack.enter_context(serve(Node(s, get_backend("numpy"), slots=2).app())) for s in stores}


@pytest.fixture(scope="session")
def colocated_engine(colocated_region, spark, spark_settings):
    """An engine over `colocated_region`: what is co-located runs on both nodes, the rest on Spark."""
    from gateway.sql.engine import Engine  # pyspark: loaded only where a test uses Spark

    return Engine(colocated_region, spark_settings, lambda: spark)


@pytest.fixture(scope="session")
def spark_engine(region, spark, spark_settings):
    """An engine over `region` whose joins all run on Spark (`sql.joins = spark`)."""
    from gateway.sql.engine import Engine  # pyspark: loaded only where a test uses Spark

    return Engine(region, spark_settings, lambda: spark, joins="spark")


@pytest.fixture(scope="session")
def whole_store(tmp_path_factory: pytest.TempPathFactory, tpch_files: dict[str, Path]) -> Store:
    """One store holding every table of `region_stores` whole (TPC-H SF 0.01 and the small tables
    of `tests.sql_cases`)."""
    store = Store(tmp_path_factory.mktemp("whole") / "n0", node="node-0")
    for name, path in tpch_files.items():
        source = read_parquet([path])
        load_table([store], tpch.schema_for(name, source.schema), source)
    for schema, table in edge_tables():
        load_table([store], schema, table)
    return store


@pytest.fixture(scope="session")
def whole_node(whole_store: Store):
    """`whole_store` served by a storage node on loopback; yields node name -> URL."""
    with serve(Node(whole_store, get_backend("numpy"), slots=2).app()) as url:
        yield {whole_store.node: url}


@pytest.fixture(scope="session")
def node_engine(whole_node, spark, spark_settings):
    """An engine over `whole_node`: every join query is answered by the node's DataFusion."""
    from gateway.sql.engine import Engine  # pyspark: loaded only where a test uses Spark

    return Engine(whole_node, spark_settings, lambda: spark)


@pytest.fixture(scope="session")
def engine(region, spark, spark_settings):
    """An engine over `region`: Spark joins what the nodes cannot, however few its rows."""
    from gateway.sql.engine import Engine  # pyspark: loaded only where a test uses Spark

    return Engine(region, replace(spark_settings, gather_rows=0), lambda: spark)


@pytest.fixture(scope="session")
def gathered_engine(region, spark, spark_settings):
    """An engine over `region` as configured by default: the coordinator joins sub-queries it
    fetched whole (all of them, at SF 0.01), Spark what DataFusion cannot."""
    from gateway.sql.engine import Engine  # pyspark: loaded only where a test uses Spark

    return Engine(region, spark_settings, lambda: spark)


@pytest.fixture(scope="session")
def duck(tpch_files: dict[str, Path]):
    """DuckDB over the same data: the reference answers."""
    import duckdb  # a database engine of its own: loaded only where a test compares with it

    con = duckdb.connect()
    con.execute("SET ieee_floating_point_ops = false")  # x / 0 is NULL, not inf (docs/sql.md)
    con.execute("SET error_on_division_by_zero = false")  # x % 0 too
    for name, path in tpch_files.items():
        con.execute(f"CREATE TABLE {name} AS SELECT * FROM read_parquet('{path}')")
    for schema, table in edge_tables():
        con.register(f"{schema.name}_arrow", table)
        con.execute(f"CREATE TABLE {schema.name} AS SELECT * FROM {schema.name}_arrow")
    return con


@pytest.fixture(scope="session")
def native_gateway(region_stores, region, spark):
    """A gateway in front of the two storage nodes, each joined as a native node with two slots;
    joins run on the test session's Spark, however few their rows."""
    from regions import EmbeddedRegion, load_config  # pyspark: loaded only where a test uses Spark

    sets = ["gateway.port=0", 'spark.master="local[2]"', 'spark.driver_memory="2g"', "spark.gather_rows=0"]
    config = load_config(None, sets)
    nodes = [NodeServer(s.node, NativeBackend(s), 2, region[s.node]) for s in region_stores]
    with EmbeddedRegion(config, nodes) as embedded:
        yield embedded


@pytest.fixture(scope="session")
def whole_gateway(whole_store, whole_node, spark):
    """A gateway in front of `whole_node`, its one native node with two slots: every join query is
    answered by that node's DataFusion (what it cannot run, by the test session's Spark)."""
    from regions import EmbeddedRegion, load_config  # pyspark: loaded only where a test uses Spark

    config = load_config(None, ["gateway.port=0", 'spark.master="local[2]"', 'spark.driver_memory="2g"'])
    node = NodeServer(whole_store.node, NativeBackend(whole_store), 2, whole_node[whole_store.node])
    with EmbeddedRegion(config, [node]) as embedded:
        yield embedded


@pytest.fixture(scope="session")
def mariadb(tmp_path_factory: pytest.TempPathFactory, tpch_files: dict[str, Path]):
    """A MariaDB server in a temporary directory with TPC-H SF 0.01 loaded; yields its URL."""
    server = MariaDB(tmp_path_factory.mktemp("mariadb"))
    server.start()
    try:
        for name, path in tpch_files.items():
            load_mysql(server.url, name, read_parquet([path]))
        yield server.url
    finally:
        server.stop()


@pytest.fixture(scope="session")
def expected(duck) -> dict[str, list[tuple]]:
    """DuckDB's answers to the queries of `benchmarks.faults` (what a region of processes must give)."""
    from benchmarks import faults  # pyspark and DuckDB: loaded only where a test runs a region of processes

    return {name: faults.rows(duck.sql(sql).fetchall()) for name, sql in faults.QUERIES.items()}


@pytest.fixture(scope="module")
def live(tmp_path_factory: pytest.TempPathFactory, tpch_files: dict[str, Path]):
    """A supervised region of processes (gateway and two nodes) over TPC-H SF 0.01, one per test
    module (`benchmarks.faults.FaultRegion`): its tests kill, hang and reload it, or move its tables.
    Its nodes keep scan worker processes, so that faults reach them too."""
    from benchmarks.faults import FaultRegion  # pyspark and DuckDB: loaded only where a test runs a region of processes

    root = tmp_path_factory.mktemp("region-of-processes")
    region = FaultRegion.start(root, tpch_files, extra=("storage.scan_processes=2",))
    try:
        yield region
    finally:
        region.stop()
