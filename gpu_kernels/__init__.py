"""Kernels on encoded columns: the encoded column vectors (column types and their domains, the
encodings, the encoded block, the placement hash) and every kernel on them (predicates,
expressions, partial aggregates, hash partitioning), behind one interface with a NumPy and a
CuPy backend. It imports nothing of the project; storage and everything above build on it.

The public names below load their module on first use (`lazy_loader.attach`, PEP 562), so that storage's catalog,
which needs only the column types, does not load every kernel with them. Four modules are public whole, as
namespaces: `expr` (the scan expression language), `encodings`, `bitpack` and `fused_scan`.
"""

from __future__ import annotations

import lazy_loader

_FACE: dict[str, tuple[str, ...]] = {
    "aggregate": ("FUNCTIONS", "AggSpec", "NamedExpr", "final_aggregate"),
    "backend": ("BackendUnavailable", "DeviceOutOfMemory", "NumpyBackend", "Partitioned"),
    "backend_choice": ("cuda_available", "get_backend"),
    "column_types": (
        "DomainValues",
        "Kind",
        "UnsupportedTypeError",
        "held_as_int64",
        "kind_of",
        "parse_type",
        "to_domain",
        "type_name",
    ),
    "decoding": ("ScanStats",),
    "device_pipeline": ("block_budget",),
    "fused_scan": ("FusedScan",),
    "fused_project": ("FusedProjection",),
    "encoded_block": ("EncodedBlock", "EncodedColumn"),
    "encodings": (
        "BitPacked",
        "DeltaRunLength",
        "Dictionary",
        "Encoding",
        "Plain",
        "RunLength",
        "Values",
        "Zstd",
        "narrow_int",
        "nbytes_of",
        "plain_nbytes",
        "run_starts",
        "sort_keys",
    ),
    "column_image": ("ColumnImage",),
    "constant_folding": ("fold",),
    "evaluate": ("BlockEvaluator",),
    "expr": ("Call", "Col", "Expr", "ExprError", "Lit", "Type", "arrow_kind"),
    "operators": ("BlockTask", "run_block"),
    "partition": ("partition",),
    "pipeline": ("BlockPipeline", "block_parts"),
    "placement_hash": ("bucket_ids", "hash_inputs"),
    "resident": (
        "ResidentArea",
        "ResidentScan",
        "TooLarge",
        "area_of",
        "plan_resident",
        "plan_resident_projection",
        "resident_report",
    ),
    "streamed": ("StreamedScan", "plan_streamed", "plan_streamed_projection", "streamed_chunk_bytes"),
    "value_predicates": ("membership_of",),
    "vectors": ("OverflowInExpression", "Vec", "arrow_type", "exact_fraction", "scalar_literal", "to_arrow"),
}
_MODULES = ("bitpack", "encodings", "expr", "fused_scan")
__getattr__, __dir__, __all__ = lazy_loader.attach(__name__, submodules=_MODULES, submod_attrs=_FACE)
