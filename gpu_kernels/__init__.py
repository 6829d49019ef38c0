"""Kernels on encoded columns: the encoded column vectors (column types and their domains, the
encodings, the encoded block, the placement hash) and every kernel on them (predicates,
expressions, partial aggregates, hash partitioning), behind one interface with a NumPy and a
CuPy backend. It imports nothing of the project; storage and everything above build on it.

The public names below load their module on first use (PEP 562), so that storage's catalog,
which needs only the column types, does not load every kernel with them.
"""

from __future__ import annotations

import importlib
from typing import Any

_FACE: dict[str, tuple[str, ...]] = {
    "aggregate": ("FUNCTIONS", "AggSpec", "NamedExpr", "final_aggregate"),
    "backend": ("BackendUnavailable", "NumpyBackend", "cuda_available", "get_backend"),
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
    "evaluate": ("BlockEvaluator",),
    "operators": ("BlockTask", "run_block"),
    "pipeline": ("BlockPipeline", "block_parts"),
    "placement_hash": ("bucket_ids", "string_hashes"),
    "value_predicates": ("membership_of",),
    "vectors": ("arrow_type", "exact_fraction", "scalar_literal", "to_arrow"),
}
_HOME = {name: module for module, names in _FACE.items() for name in names}
__all__ = sorted(_HOME)


def __getattr__(name: str) -> Any:
    if name not in _HOME:
        raise AttributeError(f"module 'gpu_kernels' has no attribute {name!r}")
    return getattr(importlib.import_module(f"gpu_kernels.{_HOME[name]}"), name)


def __dir__() -> list[str]:
    return __all__
