"""Every encoding chain round-trips every supported type, through the block's IPC form too."""

from __future__ import annotations

import datetime as dt
import decimal

import numpy as np
import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gpu_kernels import EncodedBlock, EncodedColumn, Kind, encodings, held_as_int64, kind_of, to_domain
from storage import EncodingOptions, block_to_ipc
from storage.block import block_from_ipc, encode_column
from storage.encoding_choice import choose_encoding, column_stats, encode_as

pytestmark = pytest.mark.check  # the fast lane (`make check`): no Spark, no server

INT64 = st.integers(-(2**63), 2**63 - 1)
VALUES: dict[str, tuple[pa.DataType, st.SearchStrategy]] = {
    "bool": (pa.bool_(), st.booleans()),
    "int8": (pa.int8(), st.integers(-128, 127)),
    "int16": (pa.int16(), st.integers(-(2**15), 2**15 - 1)),
    "int32": (pa.int32(), st.integers(-(2**31), 2**31 - 1)),
    "int64": (pa.int64(), INT64),
    "small_int64": (pa.int64(), st.integers(-50, 50)),
    "uint32": (pa.uint32(), st.integers(0, 2**32 - 1)),
    "date": (pa.date32(), st.dates(dt.date(1, 1, 1), dt.date(9999, 12, 31))),
    "timestamp": (pa.timestamp("us"), st.datetimes(dt.datetime(1, 1, 1), dt.datetime(9999, 12, 31))),
    "decimal(15,2)": (
        pa.decimal128(15, 2),
        st.decimals(min_value=-(10**13) + 1, max_value=10**13 - 1, places=2, allow_nan=False),
    ),
    "decimal(18,0)": (pa.decimal128(18, 0), st.integers(-(10**18) + 1, 10**18 - 1).map(decimal.Decimal)),
    "decimal(38,10)": (
        pa.decimal128(38, 10),
        st.decimals(min_value=-(10**27) + 1, max_value=10**27 - 1, places=10, allow_nan=False),
    ),
    "float64": (pa.float64(), st.floats(allow_nan=True, allow_infinity=True)),
    "float32": (pa.float32(), st.floats(width=32, allow_nan=False)),
    "string": (pa.string(), st.text(max_size=20)),
    "large_string": (pa.large_string(), st.text(alphabet="ab€ 漢", max_size=5)),
    "string_view": (pa.string_view(), st.text(max_size=30)),
}
INT64_CHAINS = ("plain", "bitpack", "rle", "delta+rle", "dict")
STRING_CHAINS = ("plain", "rle", "dict", "zstd")


def _chains(arrow_type: pa.DataType) -> tuple[str, ...]:
    """The chains a column of `arrow_type` may take: by its domain form (wide decimals: plain only)."""
    if held_as_int64(arrow_type):
        return INT64_CHAINS
    return STRING_CHAINS if kind_of(arrow_type) is Kind.STR else ("plain",)


@st.composite
def columns(draw: st.DrawFn, values: st.SearchStrategy) -> list:
    """Lists in the shapes that matter: random, all equal, all distinct, runs, sorted; with or without nulls."""
    shape = draw(st.sampled_from(["random", "equal", "distinct", "runs", "sorted", "empty", "one"]))
    if shape == "empty":
        return []
    if shape == "one":
        return [draw(st.one_of(st.none(), values))]
    if shape == "random":
        return draw(st.lists(st.one_of(st.none(), values), max_size=300))
    if shape == "equal":
        items = [draw(values)] * draw(st.integers(1, 300))
    elif shape == "distinct":
        items = draw(st.lists(values, unique=True, max_size=300))
    elif shape == "runs":
        runs = draw(st.lists(st.tuples(values, st.integers(1, 30)), max_size=30))
        items = [v for v, count in runs for _ in range(count)]
    else:
        items = draw(st.lists(values, max_size=300))
        items.sort()
    null_mask = draw(st.sampled_from(["none", "some", "all"]))
    if null_mask == "all":
        return [None] * len(items)
    if null_mask == "some":
        step = draw(st.integers(2, 7))
        return [None if i % step == 0 else v for i, v in enumerate(items)]
    return items


def _array(type_name: str, items: list) -> pa.Array:
    arrow_type = VALUES[type_name][0]
    if pa.types.is_string_view(arrow_type):
        return pa.array(items, pa.string()).cast(arrow_type)
    return pa.array(items, arrow_type)


def _through_ipc(column: EncodedColumn) -> pa.Array:
    block = EncodedBlock(column.length, {column.name: column})
    return block_from_ipc(block_to_ipc(block)).columns[column.name].decode()


def _assert_same(decoded: pa.Array, original: pa.Array) -> None:
    assert decoded.type == original.type
    if pa.types.is_floating(original.type):  # compare bits: NaN payloads and -0.0 must survive
        width = np.dtype(original.type.to_pandas_dtype()).itemsize
        as_bits = pa.uint32() if width == 4 else pa.uint64()
        decoded_bits = pa.Array.from_buffers(as_bits, len(decoded), decoded.buffers()[:2], decoded.null_count)
        original_bits = pa.Array.from_buffers(as_bits, len(original), original.buffers()[:2], original.null_count)
        assert decoded.is_null().equals(original.is_null())
        assert decoded_bits.filter(decoded.is_valid()).equals(original_bits.filter(original.is_valid()))
    else:
        assert decoded.equals(original), (decoded.to_pylist()[:10], original.to_pylist()[:10])


@pytest.mark.parametrize("type_name", list(VALUES))
@settings(max_examples=40, deadline=None)
@given(data=st.data())
def test_every_chain_round_trips(type_name: str, data: st.DataObject) -> None:
    arrow_type, values = VALUES[type_name]
    array = _array(type_name, data.draw(columns(values)))
    domain_values = to_domain(array)
    stats = column_stats(domain_values.values, arrow_type)
    for chain in _chains(arrow_type):
        if chain == "bitpack" and stats.span_bits > 56:
            continue
        encoding = encode_as(chain, domain_values.values, stats)
        validity = np.packbits(domain_values.valid, bitorder="little") if domain_values.valid is not None else None
        column = EncodedColumn("c", arrow_type, encoding, validity, array.null_count)
        _assert_same(column.decode(), array)
        _assert_same(_through_ipc(column), array)


@pytest.mark.parametrize("type_name", list(VALUES))
@settings(max_examples=40, deadline=None)
@given(data=st.data())
def test_chosen_encoding_round_trips(type_name: str, data: st.DataObject) -> None:
    array = _array(type_name, data.draw(columns(VALUES[type_name][1])))
    column = encode_column("c", array, array.type, EncodingOptions())
    assert column.stats.candidates, "the encoding choice records the sizes it compared"
    _assert_same(_through_ipc(column), array)


@settings(max_examples=100, deadline=None)
@given(items=columns(st.integers(-(2**40), 2**40)))
def test_encoding_choice_picks_the_smallest_integer_chain(items: list) -> None:
    values = to_domain(pa.array(items, pa.int64())).values
    chosen, stats = choose_encoding(values, pa.int64(), EncodingOptions())
    exact = {
        c: encode_as(c, values, stats).nbytes for c in ("plain", "bitpack", "rle", "dict") if c in stats.candidates
    }
    for chain, size in exact.items():
        assert stats.candidates[chain] == size, f"the encoding choice's size of {chain} is exact"
    if values.size:
        assert chosen.nbytes <= min(exact.values())


def test_sorted_column_becomes_runs() -> None:
    values = np.repeat(np.arange(100, dtype=np.int64), 1000)
    chosen, stats = choose_encoding(values, pa.int64(), EncodingOptions())
    assert isinstance(chosen, encodings.RunLength)
    assert stats.runs == 100 and stats.sorted
    ree = chosen.as_arrow()
    assert isinstance(ree, pa.RunEndEncodedArray) and len(ree) == 100_000


def test_arithmetic_sequence_becomes_delta_runs() -> None:
    values = np.arange(0, 3_000_000, 3, dtype=np.int64)
    chosen, _ = choose_encoding(values, pa.int64(), EncodingOptions())
    assert isinstance(chosen, encodings.DeltaRunLength)
    assert chosen.nbytes < 64


def test_low_cardinality_strings_become_a_sorted_dictionary() -> None:
    values = pa.array(["MAIL", "AIR", "SHIP", "RAIL"] * 5000)
    chosen, stats = choose_encoding(values, pa.string(), EncodingOptions())
    assert isinstance(chosen, encodings.Dictionary)
    assert chosen.dictionary.to_pylist() == ["AIR", "MAIL", "RAIL", "SHIP"]
    assert isinstance(chosen.as_arrow(), pa.DictionaryArray)
    assert stats.distinct == 4


def test_free_text_is_zstd_only_when_allowed() -> None:
    values = pa.array([f"comment number {i} about nothing in particular" for i in range(5000)])
    chosen, _ = choose_encoding(values, pa.string(), EncodingOptions())
    assert isinstance(chosen, encodings.Zstd)
    lightweight, _ = choose_encoding(values, pa.string(), EncodingOptions(allow_zstd=False))
    assert isinstance(lightweight, encodings.Plain)
