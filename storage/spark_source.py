"""The PySpark Python Data Source over storage nodes (format "cxg").

Reading::

    spark.read.format("cxg")
        .option("nodes", "http://127.0.0.1:8101,http://127.0.0.1:8102")
        .option("table", "lineitem")
        .option("request", '{"columns": [...], "select": [...], "filter": {...}}')  # optional
        .load()

One input partition per node, or per block range of a node when it has enough blocks; the
columns, computed expressions and predicate of `request` run on the nodes, and the filters Spark
offers (with spark.sql.python.filterPushdown.enabled) are pushed into the same scan. Batches
arrive as Arrow record batches. A replicated table is read once, its blocks spread over the
nodes holding it.

Writing (what the ingest pipeline uses)::

    df.write.format("cxg").option("targets", "http://...,/data/node-1").option("table", "t")
        .option("definition", table_schema_json).option("sizing", sizing_json).mode("overwrite").save()

Each task cuts its rows into RC-row blocks per hash bucket, encodes them with the storage library
and uploads them to the bucket's owner (all targets for a replicated table); the driver commits
every node's new manifest when all tasks succeeded, and removes the uploads otherwise.
"""

from __future__ import annotations

import datetime as dt
import decimal
import itertools
import json
import math
import uuid
from collections import defaultdict
from collections.abc import Iterator
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from pyspark.sql.datasource import (
    DataSource,
    DataSourceArrowWriter,
    DataSourceReader,
    EqualTo,
    Filter,
    GreaterThan,
    GreaterThanOrEqual,
    In,
    InputPartition,
    IsNotNull,
    IsNull,
    LessThan,
    LessThanOrEqual,
    Not,
    StringContains,
    StringEndsWith,
    StringStartsWith,
    WriterCommitMessage,
)
from pyspark.sql.types import StructType

from gpu_kernels import to_domain
from storage.blockfile import BlockEntry
from storage.catalog import TableSchema
from storage.encoding_choice import EncodingOptions
from storage.ingest import BlockCutter, BlockStream, Commit, commit_all, load_target
from storage.manifest import Sizing
from storage.node_client import NodeClient
from storage.partitioning import buckets_of
from storage.scan_protocol import (
    Column,
    Expr,
    Literal,
    ScanRequest,
    compare,
    conjoin,
    in_,
    is_not_null,
    is_null,
    like,
    lit,
    not_,
)
from storage.scan_typing import output_schema
from storage.sql_types import names_of

BUCKET_COLUMN = "_bucket"


def spark_schema(arrow_schema: pa.Schema) -> StructType:
    """The Spark schema of Arrow columns, by the Spark names of `storage.sql_types`."""
    fields = []
    for f in arrow_schema:
        names = names_of(f.type)
        if names is None:
            raise TypeError(f"column {f.name!r}: Spark has no type for {f.type}")
        fields.append({"name": f.name, "type": names.spark, "nullable": f.nullable, "metadata": {}})
    return StructType.fromJson({"type": "struct", "fields": fields})


def scan_schema(node_url: str, table: str, request: dict[str, Any]) -> pa.Schema:
    """The Arrow schema a scan request answers with, planned against the table's definition."""
    definition = TableSchema.from_json(NodeClient(node_url).get(f"/v1/tables/{table}"))
    return output_schema(ScanRequest.from_json({"table": table, **_with_columns(request, definition)}), definition)


def _whole_rows(request: dict[str, Any]) -> bool:
    """Whether a request names no columns, computed values, groups or aggregates: it reads every column."""
    return not any(request.get(k) for k in ("columns", "select", "group_by", "aggregates"))


def _with_columns(request: dict[str, Any], definition: TableSchema) -> dict[str, Any]:
    return {**request, "columns": definition.column_names} if _whole_rows(request) else request


def _nodes(options: Any) -> list[str]:
    nodes = [n.strip() for n in str(options.get("nodes", "")).split(",") if n.strip()]
    if not nodes:
        raise ValueError("the cxg data source needs option nodes=<url>[,<url>...]")
    return nodes


class CxgDataSource(DataSource):
    @classmethod
    def name(cls) -> str:
        return "cxg"

    def schema(self) -> StructType:
        if "schema" in self.options:
            return StructType.fromJson(json.loads(self.options["schema"]))
        request = json.loads(self.options.get("request", "{}"))
        return spark_schema(scan_schema(_nodes(self.options)[0], self.options["table"], request))

    def reader(self, schema: StructType) -> CxgReader:
        return CxgReader(dict(self.options))

    def writer(self, schema: StructType, overwrite: bool) -> CxgWriter:
        return CxgWriter(dict(self.options), overwrite)


# ---- reading ----------------------------------------------------------------------------------


def _literal(value: Any) -> Literal | None:
    if isinstance(value, bool | int | str) or value is None:
        return lit(value)
    if isinstance(value, float):
        return lit(value, "float64") if math.isfinite(value) else None
    if isinstance(value, decimal.Decimal):
        return lit(str(value), f"decimal(38,{max(0, -value.as_tuple().exponent)})")
    if isinstance(value, dt.date) and not isinstance(value, dt.datetime):
        return lit(value.isoformat(), "date")
    return None


def _like_escape(text: str) -> str:
    return text.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_")


_COMPARISONS = {EqualTo: "=", GreaterThan: ">", GreaterThanOrEqual: ">=", LessThan: "<", LessThanOrEqual: "<="}


def filter_to_expr(f: Filter, columns: set[str]) -> Expr | None:
    """A Spark filter on plain columns as a node predicate, or None when it cannot be pushed."""
    if isinstance(f, Not):
        inner = filter_to_expr(f.child, columns)
        return None if inner is None else not_(inner)
    path = getattr(f, "attribute", ())
    if len(path) != 1 or path[0] not in columns:
        return None
    column = Column(path[0])
    if type(f) in _COMPARISONS:
        value = _literal(f.value)
        return None if value is None or value.value is None else compare(_COMPARISONS[type(f)], column, value)
    if isinstance(f, In):
        values = [_literal(v) for v in f.value]
        return None if any(v is None for v in values) else in_(column, *values)
    if isinstance(f, IsNull):
        return is_null(column)
    if isinstance(f, IsNotNull):
        return is_not_null(column)
    patterns = {StringStartsWith: "{}%", StringEndsWith: "%{}", StringContains: "%{}%"}
    if type(f) in patterns and isinstance(f.value, str):
        return like(column, patterns[type(f)].format(_like_escape(f.value)))
    return None


class CxgReader(DataSourceReader):
    def __init__(self, options: dict[str, str]):
        self.nodes = _nodes(options)
        self.table = options["table"]
        self.request: dict[str, Any] = json.loads(options.get("request", "{}"))
        self.partitions_wanted = int(options.get("partitions", "2"))
        # node -> the buckets it reads, when buckets are held by several nodes (replicas)
        self.buckets: dict[str, list[int]] | None = json.loads(options["buckets"]) if "buckets" in options else None
        self.pushed: list[Expr] = []

    @property
    def _path(self) -> str:
        """The table's description, at the version the request reads."""
        version = self.request.get("version")
        return f"/v1/tables/{self.table}" + (f"?version={version}" if version is not None else "")

    def pushFilters(self, filters: list[Filter]) -> Iterator[Filter]:
        columns = set(self.request.get("columns") or [])
        if self.request.get("group_by") or self.request.get("aggregates"):
            # a filter on a plain group key holds before grouping too
            keys = ScanRequest.from_json({"table": self.table, **self.request}).group_by
            columns = {k.name for k in keys if k.expr == Column(k.name)}
        elif _whole_rows(self.request):
            columns = set(TableSchema.from_json(NodeClient(self.nodes[0]).get(self._path)).column_names)
        for f in filters:
            expression = filter_to_expr(f, columns)
            if expression is None:
                yield f
            else:
                self.pushed.append(expression)

    def partitions(self) -> list[InputPartition]:
        if self.buckets is not None:  # one partition per node, over the buckets it reads
            return [InputPartition((url, None, None)) for url in self.nodes]
        infos = {url: NodeClient(url).get(self._path) for url in self.nodes}
        first = next(iter(infos.values()))
        if first["placement"]["kind"] == "replicated":
            ranges = _split(first["blocks"], self.partitions_wanted)
            return [InputPartition((self.nodes[i % len(self.nodes)], a, b)) for i, (a, b) in enumerate(ranges)]
        per_node = max(1, -(-self.partitions_wanted // len(self.nodes)))
        return [InputPartition((url, a, b)) for url, info in infos.items() for a, b in _split(info["blocks"], per_node)]

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        url, start, stop = partition.value
        data = {"table": self.table, **self.request}
        if start is not None:
            data["block_range"] = [start, stop]
        if self.buckets is not None:
            data["buckets"] = self.buckets[url]
        if _whole_rows(data):
            definition = TableSchema.from_json(NodeClient(url).get(self._path))
            data["columns"] = definition.column_names
        request = ScanRequest.from_json(data)
        own = [request.filter] if request.filter is not None else []
        request = replace(request, filter=conjoin(own + self.pushed))
        with NodeClient(url).scan(request) as stream:
            for batch, _ in stream:
                yield batch


def _split(blocks: int, parts: int) -> list[tuple[int, int]]:
    """Up to `parts` contiguous block ranges covering [0, blocks) (one empty range for no blocks)."""
    parts = max(1, min(parts, blocks))
    return [(blocks * i // parts, blocks * (i + 1) // parts) for i in range(parts)]


# ---- writing ----------------------------------------------------------------------------------


def with_buckets(batch: pa.RecordBatch, keys: tuple[str, ...], buckets: int) -> pa.RecordBatch:
    """`batch` with each row's hash bucket (the placement hash) as column BUCKET_COLUMN."""
    bucket = buckets_of([to_domain(batch.column(k)) for k in keys], buckets)
    return batch.append_column(BUCKET_COLUMN, pa.array(bucket, pa.int32()))


def _runs(buckets: pa.Array) -> Iterator[tuple[int, int]]:
    """The [start, stop) ranges of equal consecutive values."""
    changes = (pc.indices_nonzero(pc.not_equal(buckets[1:], buckets[:-1])).to_numpy() + 1).tolist()
    return itertools.pairwise([0, *changes, len(buckets)])


@dataclass
class CxgCommit(WriterCommitMessage):
    entries: dict[str, list[dict[str, Any]]] = field(default_factory=dict)  # node -> block entries


class CxgWriter(DataSourceArrowWriter):
    def __init__(self, options: dict[str, str], overwrite: bool):
        self.targets = [t.strip() for t in options["targets"].split(",") if t.strip()]
        self.schema = TableSchema.from_json(json.loads(options["definition"]))
        self.sizing = Sizing(**json.loads(options["sizing"]))
        self.compression = options.get("compression", "zstd")
        self.mode = options.get("mode") or ("replace" if overwrite else "append")
        self.load_id = options.get("load_id") or uuid.uuid4().hex[:12]
        self.encoding = EncodingOptions(allow_zstd=options.get("zstd_strings", "true") == "true")
        # a bucket move (storage.redistribution): the buckets each node keeps of version `base`, and
        # the identity of the rows it copies
        keep = json.loads(options.get("keep", "{}"))
        self.commit_plan = Commit(
            self.schema,
            self.sizing,
            self.compression,
            self.mode,
            self.load_id,
            keep={node: tuple(buckets) for node, buckets in keep.items()},
            base=int(options["base"]) if options.get("base") else None,
            data=options.get("data", ""),
        )

    def _targets(self):
        return [load_target(spec, i) for i, spec in enumerate(self.targets)]

    def write(self, iterator: Iterator[pa.RecordBatch]) -> CxgCommit:
        """Rows that carry their bucket (the ingest pipeline: sorted by bucket and sort key), and rows
        of a replicated table, are cut into blocks as they stream, holding at most two blocks' rows
        (`BlockStream`); rows of a hash-placed table without their bucket (a plain ``df.write``) are
        bucketed here, kept per bucket, sorted by the sort key and written when the task's input ends."""
        targets = {t.node: t for t in self._targets()}
        cutter = BlockCutter(self.schema, self.sizing, self.compression, self.load_id, self.encoding)
        part = uuid.uuid4().hex[:8]
        placement = self.schema.placement
        entries: dict[str, list[dict[str, Any]]] = defaultdict(list)
        stream = BlockStream(self.sizing.block_rows)
        current: int | None = None
        unbucketed: dict[int, list[pa.RecordBatch]] = defaultdict(list)

        def flush(bucket: int | None, rows: pa.Table | None, sort: bool = False) -> None:
            if rows is None or bucket is None:
                return
            holders = placement.holders(bucket) if placement.kind == "hash" else list(targets)
            owners = [targets[n] for n in holders if bucket not in self.commit_plan.keep.get(n, ())]
            if sort and self.schema.sort_key:
                rows = rows.sort_by([(k, "ascending") for k in self.schema.sort_key])
            for node, written in cutter.write(rows, bucket, owners, part).items():
                entries[node] += [e.to_json() for e in written]

        for batch in iterator:
            if not batch.num_rows:
                continue
            if BUCKET_COLUMN not in batch.schema.names and placement.kind != "hash":  # one bucket: streams
                batch = batch.append_column(BUCKET_COLUMN, pa.array(np.zeros(batch.num_rows, np.int32)))
            elif BUCKET_COLUMN not in batch.schema.names:
                batch = with_buckets(batch, placement.keys, placement.buckets)
                batch = batch.take(pc.sort_indices(batch.column(BUCKET_COLUMN)))
                buckets = batch.column(BUCKET_COLUMN)
                for start, stop in _runs(buckets):
                    unbucketed[buckets[start].as_py()].append(batch.slice(start, stop - start))
                continue
            buckets = batch.column(BUCKET_COLUMN)
            for start, stop in _runs(buckets):
                bucket = buckets[start].as_py()
                if bucket != current:
                    flush(current, stream.end())
                    current = bucket
                flush(bucket, stream.add(batch.slice(start, stop - start)))
        flush(current, stream.end())
        for bucket, batches in sorted(unbucketed.items()):
            flush(bucket, pa.Table.from_batches(batches), sort=True)
        return CxgCommit(dict(entries))

    def commit(self, messages: list[CxgCommit]) -> None:
        merged: dict[str, list[BlockEntry]] = defaultdict(list)
        for message in messages:
            if message is None:
                continue
            for node, entries in message.entries.items():
                merged[node] += [BlockEntry.from_json(e) for e in entries]
        commit_all(self._targets(), self.commit_plan, merged)

    def abort(self, messages: list[CxgCommit]) -> None:
        for t in self._targets():
            t.abort(self.schema.name, self.load_id)
