"""How the rows of a join query's select-project sub-queries reach Spark.

Tiny fetched sub-queries (at most `VALUES_ROWS` rows) are written into Spark's SQL as a common
table expression over ``VALUES``: creating and registering a DataFrame costs Spark more planning
than a few literals. Other small fetched ones (up to `local_rows`) become local relations
(`createDataFrame`), which Spark plans faster than a file scan. The rest go one of two ways,
chosen by `SparkSettings.exchange` (with `SparkSettings.inline` off, every sub-query goes that
way, however small: what a test of the way uses):

- ``files`` (the default with a local master): the coordinator writes each sub-query's rows as
  uncompressed Parquet in a directory of its own for the query, and Spark reads them with its
  native vectorized reader; a sub-query already fetched for semi-join reduction is written from
  memory, the others stream from every node straight into one file per node. Crossing from
  Python into the JVM this way costs a Parquet write instead of a conversion per row, and Spark
  knows each input's size (small ones are broadcast).
- ``source``: Spark's executors read the sub-queries from the nodes through the ``cxg`` Python
  data source. This is what a remote cluster uses: its executors cannot read the coordinator's
  disk, unless `exchange_dir` names storage they share (then ``files`` works there too).

Identical sub-queries (the same request and the same fetched rows, as when a correlated subquery
reads the outer query's tables with the same filters) are handed over once, under each view name.
"""

from __future__ import annotations

import datetime as dt
import json
import math
import shutil
import tempfile
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
from sqlglot import exp

import storage  # storage.spark_schema looked up when used: importing it loads Spark
from gateway.sql.catalog import RegionCatalog
from gateway.sql.local import CANCELLED, in_threads
from gateway.sql.plan import Plan, TableQuery
from gateway.sql.profile import node_scan
from gateway.sql.spark_dialect import spark_text
from storage import NodeClient, ScanCancelled, ScanRequest, output_schema

INLINE_ROWS = 100_000  # "source": up to this size a fetched sub-query is a local relation
LOCAL_ROWS = 20_000  # "files": up to this size too (Spark plans local relations faster than files)
FETCH_ROWS = {"files": 2_000_000, "source": 500_000}  # sub-queries up to this size are fetched first
HANDOVER_THREADS = 4  # sub-queries handed to Spark at a time
VALUES_ROWS = 100  # up to this size a fetched sub-query is written into the SQL as VALUES
ROW_GROUP = 131_072  # rows per Parquet row group: Spark splits a file between tasks by row groups
SHARE_ROWS = 32_768  # the fewest rows worth a file (a task) of their own
# plain pages without statistics: Spark reads them as fast, and dictionary attempts and min/max
# would cost most of the write
PARQUET = {"compression": "none", "use_dictionary": False, "write_statistics": False}


@dataclass(frozen=True)
class ExchangeOptions:
    """How a query's sub-queries reach Spark: the exchange `mode` (files or source), whether
    small fetched ones travel inside the statement or as local relations (`inline`), and up to how
    many rows in all sub-queries fetched whole need not reach it (`gather_rows`: the coordinator
    joins them)."""

    mode: str
    inline: bool = True
    gather_rows: int = 0

    def __post_init__(self) -> None:
        if self.mode not in ("files", "source"):
            raise ValueError(f"exchange must be files or source, not {self.mode!r}")

    @property
    def local_rows(self) -> int:
        """Fetched sub-queries up to this size become local relations."""
        return (LOCAL_ROWS if self.mode == "files" else INLINE_ROWS) if self.inline else 0

    @property
    def values_rows(self) -> int:
        """Fetched sub-queries up to this size are written into the statement as VALUES."""
        return VALUES_ROWS if self.inline else 0

    @property
    def fetch_rows(self) -> int:
        """Sub-queries up to this size are fetched first (semi-join reduction)."""
        return FETCH_ROWS[self.mode]


def shares(rows: int, parallelism: int) -> int:
    """Files to write `rows` to, so that every core gets a share: Spark gives a file smaller than
    spark.sql.files.openCostInBytes one task whatever its row groups, and the other cores would
    wait for it (TPC-H Q16's partsupp)."""
    return max(1, min(parallelism, rows // SHARE_ROWS))


class Exchange:
    """The sub-queries of one query handed to Spark; `close` removes the files it wrote."""

    def __init__(self, spark: Any, catalog: RegionCatalog, options: ExchangeOptions, directory: str | None = None):
        self.spark = spark
        self.catalog = catalog
        self.options = options
        self.parallelism = spark.sparkContext.defaultParallelism
        files = options.mode == "files"
        self.root = Path(tempfile.mkdtemp(prefix="cxg-exchange-", dir=directory or None)) if files else None
        self._frames: dict[tuple, Any] = {}
        self._views: list[str] = []
        self.reads_nodes = False  # whether Spark's executors read a sub-query from the nodes as it runs

    def spark_sql(self, plan: Plan, fetched: dict[int, pa.Table]) -> str:
        """Hand every sub-query of a staged plan over (a registered view, or VALUES in the
        statement), those the stage `fetched` (by scan) as they are; the statement Spark runs."""
        inline, handed = [], {}
        for scan in plan.scans:
            if scan.index in plan.dropped:
                continue
            rows = fetched.get(scan.index)
            if rows is not None and inlinable(rows, self.options.values_rows):
                inline.append(
                    exp.CTE(this=values_relation(rows), alias=exp.TableAlias(this=exp.to_identifier(scan.view)))
                )
            else:
                handed.setdefault(self._key(scan, rows), []).append((scan, rows))
        self._register(handed)
        tree = plan.query.tree
        if inline:  # before the query's own common table expressions, which may read them
            tree = tree.copy()
            own = tree.args.get("with_")
            tree.set("with_", exp.With(expressions=inline + (own.expressions if own is not None else [])))
        return spark_text(tree)

    def _register(self, groups: dict[tuple, list[tuple[TableQuery, pa.Table | None]]]) -> None:
        """One DataFrame per group of identical sub-queries (by key), registered under each one's
        view name; up to `HANDOVER_THREADS` groups at a time: Spark's planning of each (resolving
        the source, analysing the view) happens mostly in the JVM, so several overlap."""
        self._views += [scan.view for group in groups.values() for scan, _ in group]

        def one(key: tuple, group: list[tuple[TableQuery, pa.Table | None]]) -> None:
            frame = self._frame(key, *group[0])
            for scan, _ in group:
                frame.createOrReplaceTempView(scan.view)

        if len(groups) <= 1:
            for key, group in groups.items():
                one(key, group)
            return
        in_threads(lambda item: one(*item), list(groups.items()), min(HANDOVER_THREADS, len(groups)))

    def _key(self, scan: TableQuery, rows: pa.Table | None) -> tuple:
        return scan.request(), id(rows) if rows is not None else None

    def frame(self, scan: TableQuery, rows: pa.Table | None):
        """A DataFrame of the sub-query's rows; `rows` when the coordinator already holds them."""
        return self._frame(self._key(scan, rows), scan, rows)

    def _frame(self, key: tuple, scan: TableQuery, rows: pa.Table | None):
        if key not in self._frames:
            request = scan.request()
            schema = output_schema(request, scan.info.schema)
            if rows is not None and rows.num_rows <= self.options.local_rows:
                # one chunk: PySpark loses rows after an empty first chunk
                self._frames[key] = self.spark.createDataFrame(
                    rows.combine_chunks(), schema=storage.spark_schema(schema)
                )
            elif self.root is not None:
                self._frames[key] = self._files(scan, request, rows, schema)
            else:
                self._frames[key] = self._source(scan, request, schema)
        return self._frames[key]

    def _files(self, scan: TableQuery, request: ScanRequest, rows: pa.Table | None, schema: pa.Schema):
        # Spark reads a list of files much faster than a directory (no listing, no discovery)
        if rows is not None:
            count = shares(rows.num_rows, self.parallelism)
            step = -(-rows.num_rows // count)
            paths = [self.root / f"scan-{scan.index}-{i}.parquet" for i in range(count)]
            for i, path in enumerate(paths):
                pq.write_table(rows.slice(i * step, step), path, row_group_size=ROW_GROUP, **PARQUET)
        else:
            routes = self.catalog.routes(scan.info, request)
            paths = [self.root / f"scan-{scan.index}-{i}.parquet" for i in range(len(routes))]
            cancelled = CANCELLED.get()

            def one(i: int) -> None:
                url, routed = routes[i]
                step = f"[{scan.index}] {scan.table} AS {scan.alias}, written for Spark"
                write_scan(NodeClient(url), routed, paths[i], schema, cancelled, step)

            in_threads(one, range(len(routes)))
        return self.spark.read.schema(storage.spark_schema(schema)).parquet(*map(str, paths))

    def _source(self, scan: TableQuery, request: ScanRequest, schema: pa.Schema):
        self.reads_nodes = True
        routes = self.catalog.routes(scan.info, request)  # the version the query pinned, a node's buckets
        reader = (
            self.spark.read.format("cxg")
            .schema(storage.spark_schema(schema))
            .option("nodes", ",".join(url for url, _ in routes))
            .option("table", scan.table)
            .option("request", json.dumps(replace(routes[0][1], buckets=request.buckets).to_json()))
            .option("partitions", str(self.parallelism))
        )
        if scan.info.buckets is not None:  # buckets held by several nodes: each node reads its own
            reader = reader.option("buckets", json.dumps({url: list(r.buckets or ()) for url, r in routes}))
        return reader.load()

    def close(self) -> None:
        for view in self._views:
            self.spark.catalog.dropTempView(view)
        if self.root is not None:
            shutil.rmtree(self.root, ignore_errors=True)


def _inlinable_type(t: pa.DataType) -> bool:
    return (
        pa.types.is_integer(t)
        or pa.types.is_floating(t)
        or pa.types.is_decimal(t)
        or pa.types.is_string(t)
        or pa.types.is_large_string(t)
        or pa.types.is_boolean(t)
        or pa.types.is_date32(t)
        or (pa.types.is_timestamp(t) and t.tz is None)
    )


def inlinable(rows: pa.Table, limit: int | None = None) -> bool:
    """Whether the rows are few enough (`limit`, default `VALUES_ROWS`), and of types plain
    enough, to travel as VALUES."""
    limit = VALUES_ROWS if limit is None else limit
    return 0 < rows.num_rows <= limit and all(_inlinable_type(f.type) for f in rows.schema)


def _text(value: Any) -> exp.Expression:
    """A value as the string literal Spark casts back to its type."""
    if value is None:
        return exp.null()
    if isinstance(value, bool):
        return exp.Literal.string("true" if value else "false")
    if isinstance(value, float) and not math.isfinite(value):
        return exp.Literal.string("NaN" if math.isnan(value) else "Infinity" if value > 0 else "-Infinity")
    if isinstance(value, dt.datetime):
        return exp.Literal.string(value.isoformat(sep=" "))
    return exp.Literal.string(value if isinstance(value, str) else str(value))


def values_relation(rows: pa.Table) -> exp.Select:
    """``SELECT CAST(c0 AS type) AS name, ... FROM VALUES (...), ... AS t(c0, ...)``: the rows
    with their exact Spark types (each value travels as text and is cast back)."""
    names = [f"c{i}" for i in range(rows.num_columns)]
    tuples = [
        exp.Tuple(expressions=[_text(v) for v in row])
        for row in zip(*(c.to_pylist() for c in rows.columns), strict=True)
    ]
    values = exp.Values(
        expressions=tuples,
        alias=exp.TableAlias(this=exp.to_identifier("t"), columns=[exp.to_identifier(n) for n in names]),
    )
    spark_types = storage.spark_schema(rows.schema)
    return exp.select(
        *(
            exp.alias_(
                exp.cast(exp.column(n), exp.DataType.build(f.dataType.simpleString(), dialect="spark")),
                exp.to_identifier(f.name, quoted=True),  # any column name, reserved words too
            )
            for n, f in zip(names, spark_types.fields, strict=True)
        )
    ).from_(values)


def describe(options: ExchangeOptions, scan: TableQuery, fetched: pa.Table | None) -> str:
    """How the sub-query is handed over with `options`, for EXPLAIN ANALYZE."""
    if fetched is not None and inlinable(fetched, options.values_rows):
        return "written into Spark's SQL as VALUES"
    if fetched is not None and fetched.num_rows <= options.local_rows:
        return "handed to Spark as a local relation"
    if options.mode == "files":
        origin = "the coordinator's copy" if fetched is not None else "streamed from the nodes"
        return f"handed to Spark as Parquet files ({origin})"
    return "streamed to Spark through the cxg data source"


def write_scan(
    client: NodeClient,
    request: ScanRequest,
    path: Path,
    schema: pa.Schema,
    cancelled=None,
    step: str = "written to a file",
) -> int:
    """Stream one node's scan into a Parquet file (row groups of up to ROW_GROUP rows); the rows
    written. Setting `cancelled` stops it at the next batch with ScanCancelled; `step` names the
    scan in EXPLAIN ANALYZE."""
    pending: list[pa.RecordBatch] = []
    rows = 0
    with node_scan(client, request, step) as stream, pq.ParquetWriter(path, schema, **PARQUET) as writer:
        for batch, _ in stream:
            if cancelled is not None and cancelled.is_set():
                raise ScanCancelled("scan cancelled")
            pending.append(batch)
            rows += batch.num_rows
            if sum(b.num_rows for b in pending) >= ROW_GROUP:
                writer.write_table(pa.Table.from_batches(pending, schema=schema))
                pending.clear()
        if pending:
            writer.write_table(pa.Table.from_batches(pending, schema=schema))
    return rows
