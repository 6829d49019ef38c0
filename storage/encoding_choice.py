"""The encoding choice: picks each column's chain from the block's statistics.

For every candidate chain it computes the encoded size exactly from the statistics
(runs, distinct count, value span, widths; zstd is tried for free text) and keeps the smallest.
The statistics and every candidate's size are kept, so the choice can be explained.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from gpu_kernels import (
    BitPacked,
    DeltaRunLength,
    Dictionary,
    Encoding,
    Kind,
    Plain,
    RunLength,
    Values,
    Zstd,
    bitpack,
    held_as_int64,
    kind_of,
    narrow_int,
    nbytes_of,
    run_starts,
)

RUN_END_BYTES = 4
# A string column is free text when most of its values are distinct: dictionaries do not pay,
# and it may be kept zstd-compressed (decoded on the CPU when projected).
FREE_TEXT_DISTINCT_RATIO = 0.5


@dataclass
class ColumnStats:
    """Statistics of one column of one block, in its domain."""

    rows: int
    runs: int
    distinct: int
    sorted: bool
    minimum: object = None
    maximum: object = None
    span_bits: int = 0  # bits of (max - min) for integers
    value_width: int = 0  # bytes of the narrowest integer type holding the values
    delta_runs: int = 0  # runs of first differences, for integers
    plain_bytes: int = 0  # the column as plain Arrow, in the table's type
    candidates: dict[str, int] = field(default_factory=dict)  # chain -> encoded bytes

    @property
    def avg_run_length(self) -> float:
        return self.rows / self.runs if self.runs else 0.0


def _int_width(lo: int, hi: int) -> int:
    return narrow_int(np.array([lo, hi], dtype=np.int64)).itemsize


def _count_distinct(values: Values, lo: int = 0, hi: int = -1) -> int:
    """Exact distinct count; a counting pass when the integers span a small range, else Arrow's
    hash table (several times faster than sorting)."""
    if isinstance(values, np.ndarray):
        if 0 <= hi - lo <= max(4 * len(values), 1 << 16):
            return int(np.count_nonzero(np.bincount(values - lo, minlength=1)))
        values = pa.array(values)
    return len(pc.unique(values))


def _value_bytes(values: Values, starts: np.ndarray) -> int:
    """Bytes of the values at `starts` (one per run)."""
    if isinstance(values, np.ndarray):
        return len(starts) * values.itemsize
    return nbytes_of(values.take(pa.array(starts)))


def column_stats(values: Values, column_type: pa.DataType) -> ColumnStats:
    n = len(values)
    starts = run_starts(values)
    runs = len(starts)
    if n == 0:
        return ColumnStats(rows=0, runs=0, distinct=0, sorted=True)
    if held_as_int64(column_type):
        lo, hi = int(values.min()), int(values.max())
        deltas = np.diff(values)
        stats = ColumnStats(
            rows=n,
            runs=runs,
            distinct=_count_distinct(values, lo, hi),
            sorted=bool((deltas >= 0).all()),
            minimum=lo,
            maximum=hi,
            span_bits=bitpack.width_for(hi - lo),
            value_width=_int_width(lo, hi),
            delta_runs=1 + len(run_starts(deltas)) if n > 1 else 1,
        )
        if kind_of(column_type) is Kind.FLOAT:  # statistics of the numbers, encodings of their bit patterns
            numbers = values.view(np.float64)
            finite = numbers[~np.isnan(numbers)]
            stats.sorted = bool((numbers[1:] >= numbers[:-1]).all())
            stats.minimum = float(finite.min()) if len(finite) else None
            stats.maximum = float(finite.max()) if len(finite) else None
        return stats
    bounds = pc.min_max(values)
    return ColumnStats(
        rows=n,
        runs=runs,
        distinct=_count_distinct(values),
        sorted=runs == 1 or bool(pc.all(pc.less_equal(values.slice(0, n - 1), values.slice(1))).as_py()),
        minimum=bounds["min"].as_py(),
        maximum=bounds["max"].as_py(),
    )


@dataclass(frozen=True)
class EncodingOptions:
    allow_zstd: bool = True  # keep free-text strings zstd-compressed in memory


def _code_width(distinct: int) -> int:
    return bitpack.width_for(max(distinct - 1, 0))


def _int_candidates(stats: ColumnStats) -> dict[str, int]:
    n, runs, value_width = stats.rows, stats.runs, stats.value_width
    sizes = {
        "plain": n * value_width,
        "rle": runs * (RUN_END_BYTES + value_width),
        "dict": stats.distinct * value_width + _codes_size(n, runs, stats.distinct),
    }
    if stats.span_bits <= bitpack.MAX_WIDTH:
        sizes["bitpack"] = bitpack.packed_size(n, stats.span_bits)
    if stats.span_bits < 62:
        sizes["delta+rle"] = stats.delta_runs * (RUN_END_BYTES + 8)
    return sizes


def _codes_size(n: int, runs: int, distinct: int) -> int:
    width = _code_width(distinct)
    narrow = n * max(1, (width + 7) // 8)
    return min(narrow, bitpack.packed_size(n, width), runs * (RUN_END_BYTES + max(1, (width + 7) // 8)))


def _encode_codes(codes: np.ndarray, runs: int, distinct: int) -> Encoding:
    """Dictionary codes: narrow integers, bit-packed, or runs, whichever is smallest."""
    n = len(codes)
    width = _code_width(distinct)
    narrow = n * max(1, (width + 7) // 8)
    packed = bitpack.packed_size(n, width)
    rle = runs * (RUN_END_BYTES + max(1, (width + 7) // 8))
    best = min(narrow, packed, rle)
    if best == narrow:
        return Plain(narrow_int(codes))
    if best == rle:
        return RunLength.encode(codes)
    return BitPacked.encode(codes)


def _string_candidates(
    values: pa.Array, stats: ColumnStats, options: EncodingOptions, prepared: dict[str, Encoding]
) -> dict[str, int]:
    n = stats.rows
    starts = run_starts(values)
    plain = nbytes_of(values)
    sizes = {"plain": plain, "rle": stats.runs * RUN_END_BYTES + _value_bytes(values, starts)}
    free_text = stats.distinct > FREE_TEXT_DISTINCT_RATIO * n
    if not free_text:
        dictionary_bytes = plain * stats.distinct // max(n, 1) + 4 * stats.distinct
        sizes["dict"] = dictionary_bytes + _codes_size(n, stats.runs, stats.distinct)
    elif options.allow_zstd and n:
        prepared["zstd"] = Zstd.encode(values)
        sizes["zstd"] = prepared["zstd"].nbytes
    return sizes


# Cheapest to decode first: among equal sizes, the earlier chain wins.
CHAIN_PREFERENCE = ("plain", "rle", "bitpack", "dict", "delta+rle", "zstd")


def choose(sizes: dict[str, int]) -> str:
    return min(sizes, key=lambda chain: (sizes[chain], CHAIN_PREFERENCE.index(chain)))


def choose_encoding(values: Values, column_type: pa.DataType, options: EncodingOptions) -> tuple[Encoding, ColumnStats]:
    """Encode the domain values of one column of a block with the smallest chain; return it with its statistics."""
    stats = column_stats(values, column_type)
    integers = held_as_int64(column_type)
    if stats.rows == 0 or not (integers or kind_of(column_type) is Kind.STR):  # wide decimals: plain
        stats.candidates = {"plain": nbytes_of(values)}
        return Plain(values), stats
    prepared: dict[str, Encoding] = {}  # candidates that had to be encoded to be measured
    if integers:
        stats.candidates = _int_candidates(stats)
    else:
        stats.candidates = _string_candidates(values, stats, options, prepared)
    chain = choose(stats.candidates)
    return prepared.get(chain) or encode_as(chain, values, stats), stats


def encode_as(chain: str, values: Values, stats: ColumnStats) -> Encoding:
    """Encode domain values with a given chain (the chosen one, or any for tests)."""
    if chain == "plain":
        return Plain(narrow_int(values) if isinstance(values, np.ndarray) else values)
    if chain == "bitpack":
        return BitPacked.encode(values)
    if chain == "rle":
        return RunLength.encode(values)
    if chain == "delta+rle":
        return DeltaRunLength.encode(values)
    if chain == "zstd":
        return Zstd.encode(values)
    if chain == "dict":
        dictionary, codes = Dictionary.split(values)
        if isinstance(dictionary, np.ndarray) and dictionary.dtype.kind == "i":
            dictionary = narrow_int(dictionary)
        return Dictionary(dictionary, _encode_codes(codes, stats.runs, stats.distinct))
    raise AssertionError(f"unknown chain {chain}")
