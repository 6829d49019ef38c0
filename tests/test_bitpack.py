import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gpu_kernels import bitpack

pytestmark = pytest.mark.check  # the fast lane (`make check`): no Spark, no server


@settings(max_examples=200, deadline=None)
@given(width=st.integers(0, bitpack.MAX_WIDTH), seed=st.integers(0, 2**32 - 1), length=st.integers(0, 200))
def test_pack_unpack_round_trip(width: int, seed: int, length: int) -> None:
    rng = np.random.default_rng(seed)
    values = rng.integers(0, 1 << width, size=length, dtype=np.uint64) if width else np.zeros(length, np.uint64)
    packed = bitpack.pack(values, width)
    assert len(packed) == bitpack.packed_size(length, width)
    assert np.array_equal(bitpack.unpack(packed, length, width), values)


def test_extreme_values_use_every_bit() -> None:
    width = bitpack.MAX_WIDTH
    values = np.array([0, (1 << width) - 1] * 9, dtype=np.uint64)
    assert np.array_equal(bitpack.unpack(bitpack.pack(values, width), len(values), width), values)


def test_width_outside_range_is_refused() -> None:
    with pytest.raises(ValueError, match="bit width"):
        bitpack.pack(np.zeros(3, np.uint64), bitpack.MAX_WIDTH + 1)


def test_packed_size_is_width_bits_per_value() -> None:
    assert bitpack.packed_size(8000, 3) == 3000 + 8
