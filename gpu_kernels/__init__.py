"""Kernels on encoded columns: the encoded column vectors (column types and their domains, the
encodings, the encoded block, the placement hash) and every kernel on them (predicates,
expressions, partial aggregates, hash partitioning), behind one interface with a NumPy and a
CuPy backend. It imports nothing of the project; storage and everything above build on it.

The public names below load their module on first use (`lazy_loader.attach`, PEP 562), so that storage's catalog,
which needs only the column types, does not load every kernel with them.
"""

from __future__ import annotations

import lazy_loader

_FACE: dict[str, tuple[str, ...]] = {
    "aggregate": ("FUNCTIONS", "AggSpec", "NamedExpr", "final_aggregate"),
    "backend": ("BackendUnavailable", "DeviceOutOfMemory", "NumpyBackend", "cuda_available", "get_backend"),
    "column_types": (
        "Domain",
        "DomainValues",
        "UnsupportedTypeError",
        "domain_of",
        "parse_type",
        "to_domain",
        "type_name",
    ),
    "decoding": ("ScanStats",),
    "fused_scan": ("FusedScan",),
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
    ),
    "constant_folding": ("fold",),
    "evaluate": ("BlockEvaluator",),
    "operators": ("BlockTask", "run_block"),
    "pipeline": ("BlockPipeline", "block_parts"),
    "placement_hash": ("bucket_ids", "string_hashes"),
    "value_predicates": ("membership_of",),
    "vectors": ("arrow_type", "exact_fraction", "scalar_literal", "to_arrow"),
}
__getattr__, __dir__, __all__ = lazy_loader.attach(__name__, submod_attrs=_FACE)
