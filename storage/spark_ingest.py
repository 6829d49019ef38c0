"""The ingest pipeline as a Spark job: the default path of `cxg load`.

Read the source (TPC-H generator output, Parquet or CSV) as a DataFrame; find the longest record
(RS) for the block size RC = floor(BS / RS); give every row its hash bucket (the placement hash,
computed on the executors in Arrow); repartition by bucket and sort within partitions by
(bucket, sort key) so each bucket's rows are contiguous and ordered; then the executors cut and
encode blocks with the storage library and upload them to the owning nodes through the "cxg"
data source, whose driver-side commit swaps each node's manifest.
"""

from __future__ import annotations

import functools
import json
import re
import uuid
from collections.abc import Iterator
from dataclasses import replace

import pyarrow as pa
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.types import IntegerType, StructField, StructType

from gpu_kernels import Domain
from storage import errors
from storage.block import block_rows
from storage.catalog import TableSchema
from storage.errors import StorageError
from storage.ingest import target
from storage.loader import LoadOptions
from storage.manifest import Sizing
from storage.spark_source import BUCKET_COLUMN, with_buckets
from storage.types import decoded_width

_TASK_ERROR = re.compile(r"storage\.errors\.(\w+): (.*)")


def _add_buckets(keys: tuple[str, ...], buckets: int, batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
    for batch in batches:
        yield with_buckets(batch, keys, buckets)


def record_size(source: DataFrame, schema: TableSchema) -> int:
    """RS over the whole source: the longest string of each column is found by one Spark job."""
    strings = [c for c in schema.columns if c.domain is Domain.STRING]
    longest = {}
    if strings:
        row = source.agg(*[F.max(F.octet_length(F.col(c.name))).alias(c.name) for c in strings]).first()
        longest = {c.name: row[c.name] or 0 for c in strings}
    return max(1, sum(decoded_width(c.arrow_type, longest.get(c.name, 0)) for c in schema.columns))


def spark_load(
    spark: SparkSession, source: DataFrame, schema: TableSchema, targets: list[str], options: LoadOptions
) -> Sizing:
    """Load `source` as table `schema.name` into the nodes `targets` (URLs or data directories)."""
    nodes = [target(spec, i).node for i, spec in enumerate(targets)]
    if schema.placement.kind == "hash":
        schema = replace(schema, placement=schema.placement.with_owners(nodes))
    source = source.select(*schema.column_names)
    record_bytes = record_size(source, schema)
    sizing = Sizing(options.block_budget, record_bytes, block_rows(options.block_budget, record_bytes))
    write_rows(spark, source, schema, targets, sizing, options)
    return sizing


def write_rows(
    spark: SparkSession,
    rows: DataFrame,
    schema: TableSchema,
    targets: list[str],
    sizing: Sizing,
    options: LoadOptions,
    move: dict[str, str] | None = None,
) -> None:
    """Give each row its bucket, repartition by bucket, sort each bucket by the sort key and write
    its blocks to the bucket's holders, as one load committed on every target (what a load and a
    bucket move share; `move`: the writer's options of a move, see `storage.spark_redistribute`)."""
    parallelism = spark.sparkContext.defaultParallelism
    sort_key = list(schema.sort_key)
    if schema.placement.kind == "hash":
        with_bucket = StructType([*rows.schema.fields, StructField(BUCKET_COLUMN, IntegerType(), False)])
        add = functools.partial(_add_buckets, schema.placement.keys, schema.placement.buckets)
        frame = rows.mapInArrow(add, with_bucket)
        frame = frame.repartition(min(schema.placement.buckets, parallelism), BUCKET_COLUMN)
        frame = frame.sortWithinPartitions(BUCKET_COLUMN, *sort_key)
    else:
        frame = rows.repartition(1).sortWithinPartitions(*sort_key) if sort_key else rows.repartition(1)
    writer = (
        frame.write.format("cxg")
        .mode("overwrite" if options.mode == "replace" else "append")
        .option("targets", ",".join(targets))
        .option("table", schema.name)
        .option("definition", json.dumps(schema.to_json()))
        .option("sizing", json.dumps(vars(sizing)))
        .option("compression", options.compression)
        .option("mode", options.mode)
        .option("load_id", uuid.uuid4().hex[:12])
        .option("zstd_strings", "true" if options.encoding.allow_zstd else "false")
    )
    for key, value in (move or {}).items():
        writer = writer.option(key, value)
    try:
        writer.save()
    except Exception as e:  # a task's storage error reaches here inside Spark's own
        error = _storage_error(e)
        if error is None:
            raise
        raise error from e


def _storage_error(error: Exception) -> StorageError | None:
    """The storage error a load's task failed with (a full disk, a version conflict), found in the
    message of the error Spark raises for it; None if it failed for another reason."""
    match = _TASK_ERROR.search(str(error))
    kind = getattr(errors, match[1], None) if match else None
    if isinstance(kind, type) and issubclass(kind, StorageError):
        return kind(match[2].strip())
    return None
