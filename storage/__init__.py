"""Compressed columnar storage: the catalog, block files, tables, loaders and the node service.

Storage builds on `gpu_kernels` (the encoded column vectors) and knows nothing above it. The
public names below load their module on first use (`lazy_loader.attach`, PEP 562), so that a client of one part (the
catalog, the MariaDB loader, the node's client) does not load the others (Parquet readers,
SQLAlchemy, the node server and its kernels, Spark).
"""

from __future__ import annotations

import lazy_loader

_FACE: dict[str, tuple[str, ...]] = {
    "block": ("block_to_ipc", "plain_block", "stream_bytes"),
    "blockfile": ("ZSTD_LEVEL",),
    "bucket_balance": ("BucketMove", "balance", "spread"),
    "bucket_load": ("BucketWork", "costs", "row_costs"),
    "catalog": ("Column", "Placement", "TableSchema"),
    "config": ("DEFAULT_DATA", "ConfigError", "Size", "StorageConfig", "format_size", "parse_size"),
    "encoding_choice": ("CHAIN_PREFERENCE", "EncodingOptions"),
    "errors": (
        "CorruptBlockError",
        "DiskFullError",
        "OutOfMemoryError",
        "RedistributionError",
        "SchemaError",
        "StorageError",
        "TableNotFoundError",
    ),
    "ingest": ("load_target",),
    "join_engine": ("Answer", "run_sql"),
    "key_filters": ("membership", "no_membership"),
    "loader": ("LoadOptions", "load_source", "load_table"),
    "manifest": ("Sizing",),
    "memory_budget": ("ALLOCATOR_ENVIRONMENT", "OUT_OF_MEMORY", "limit_private_memory", "private_memory_limit"),
    "mysql_load": ("create_database", "load_mysql"),
    "mysql_urls": ("mysql_url",),
    "node": ("Node",),
    "node_client": ("NodeClient", "NodeError", "ScanCancelled", "ScanStream"),
    "query_protocol": ("NodeEngineError", "QueryRequest"),
    "redistribution": ("TableMove", "moved", "plan_move"),
    "scan": ("TableCache", "scan_table"),
    "scan_protocol": (
        "ARROW_STREAM",
        "JSON",
        "MAX_EXPRESSION_DEPTH",
        "Aggregate",
        "Expr",
        "Int64List",
        "Literal",
        "Named",
        "Partition",
        "ScanRequest",
        "ScanRequestError",
        "ValueList",
        "allow_deep_expressions",
        "and_",
        "call",
        "col",
        "compare",
        "conjoin",
        "expr_from_json",
        "in_",
        "int64_values",
        "is_not_null",
        "is_null",
        "like",
        "lit",
        "not_",
        "or_",
        "values",
    ),
    "scan_typing": ("kernel_expr", "output_schema", "type_scan", "typed_output"),
    "sources": ("Source", "read_parquet"),
    "spark_ingest": ("source_frame", "spark_load", "tpch_frame"),
    "spark_redistribute": ("spark_move",),
    "spark_source": ("CxgDataSource", "spark_schema"),
    "sql_types": ("by_sql_name", "sql_name"),
    "stats": ("TableSummary", "summarize"),
    "store": ("Store", "Table"),
}
__getattr__, __dir__, __all__ = lazy_loader.attach(__name__, submod_attrs=_FACE)
