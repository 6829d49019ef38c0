import datetime as dt

import pyarrow as pa
import pyarrow.compute as pc
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gateway.sql import keysets

pytestmark = pytest.mark.check  # the fast lane (`make check`): no Spark, no server

TYPES = [pa.int8(), pa.int32(), pa.int64(), pa.uint64(), pa.date32(), pa.string()]


def _values(draw, t: pa.DataType, spread: int) -> list:
    items = st.one_of(st.none(), st.integers(-spread, spread)) if t != pa.uint64() else st.integers(0, spread)
    raw = draw(st.lists(items, max_size=60))
    if pa.types.is_date32(t):
        return [None if v is None else dt.date(2000, 1, 1) + dt.timedelta(days=v % 2_000_000) for v in raw]
    if pa.types.is_string(t):
        return [None if v is None else f"k{v}é" for v in raw]
    if t == pa.int8():
        return [None if v is None else max(-128, min(127, v)) for v in raw]
    return raw


@st.composite
def columns(draw):
    """Two columns of one type, chunked or not, values close together or spread far apart."""
    t = draw(st.sampled_from(TYPES))
    spread = draw(st.sampled_from([5, 100, 10**9]))
    first, second = _values(draw, t, spread), _values(draw, t, spread)
    chunked = draw(st.booleans())
    column = pa.chunked_array([first[:7], first[7:]], t) if chunked else pa.array(first, t)
    return column, pa.array(second, t)


@settings(max_examples=300, deadline=None)
@given(columns())
def test_distinct_and_membership_match_arrow(pair) -> None:
    column, other = pair
    found = keysets.distinct(column)
    assert found.type == column.type
    assert found.null_count == 0
    assert sorted(found.to_pylist()) == sorted(set(v for v in column.to_pylist() if v is not None))
    members = keysets.is_in(other, found)
    assert len(members) == len(other)
    assert pa.array(members).to_pylist() == pc.is_in(other, value_set=found).to_pylist()


def test_compact_integers_come_back_in_order() -> None:
    column = pa.chunked_array([[9, 3, 3], [7, 1000, 3]], pa.int64())
    assert keysets.distinct(column).to_pylist() == [3, 7, 9, 1000]
    assert keysets.is_in(pa.array([3, 4, None, 1000, -1]), pa.array([3, 1000])).to_pylist() == [
        True,
        False,
        False,
        True,
        False,
    ]
