"""A planned move (`storage.redistribution`) run as a Spark job: the buckets that change holders are
read at the version the move was planned on, from their nodes, through the "cxg" data source; their
rows are bucketed again under the target placement and written to the nodes gaining them, as one
load that every node of the new placement commits (keeping the buckets it already holds); then the
nodes left holding none of the table retire it.
"""

from __future__ import annotations

import json
import uuid

import pyarrow as pa
from pyspark.sql import SparkSession

from storage.ingest import Commit, commit_all, load_target
from storage.loader import LoadOptions
from storage.manifest import Sizing
from storage.redistribution import TableMove
from storage.spark_ingest import write_rows
from storage.spark_source import spark_schema


def spark_move(
    spark: SparkSession,
    move: TableMove,
    sources: dict[str, str],
    targets: dict[str, str],
    sizing: Sizing,
    options: LoadOptions,
) -> None:
    """Run `move`: `sources` and `targets` map node names to URLs (or data directories) in the
    region read from and the region written to (the same one for a move within a region)."""
    urls = [targets[node] for node in move.nodes]
    keep = {node: list(buckets) for node, buckets in move.keep.items() if buckets}
    if move.copied:
        reads = {sources[node]: list(buckets) for node, buckets in move.reads.items()}
        rows = (
            spark.read.format("cxg")
            .option("nodes", ",".join(reads))
            .option("table", move.table)
            .option("schema", spark_schema(_nullable(move.schema.arrow_schema())).json())
            .option("request", json.dumps({"version": move.base}))
            .option("buckets", json.dumps(reads))
            .load()
        )
        extra = {"keep": json.dumps(keep), "data": move.data}
        if move.local:  # the nodes keeping buckets check that they hold the version read
            extra["base"] = str(move.base)
        write_rows(spark, rows, move.schema, urls, sizing, options, extra)
    else:  # no bucket travels (a node that held nothing leaves): the new placement, committed as it is
        load = Commit(
            move.schema,
            sizing,
            options.compression,
            "replace",
            uuid.uuid4().hex[:12],
            keep={node: tuple(buckets) for node, buckets in keep.items()},
            base=move.base if move.local else None,
            data=move.data,
        )
        commit_all([load_target(url) for url in urls], load, {})
    for node in move.retire:
        load_target(targets[node]).retire(move.table)


def _nullable(schema: pa.Schema) -> pa.Schema:
    """The schema the data source's batches have: every column nullable, as scans answer."""
    return pa.schema([field.with_nullable(True) for field in schema])
