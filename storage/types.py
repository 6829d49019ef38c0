"""What storage needs to know of a column type beyond its name and kind (`gpu_kernels.column_types`):
the type a column has while it is loaded, and the bytes a value takes once decoded, from which a
block's row count is sized."""

from __future__ import annotations

import pyarrow as pa

from gpu_kernels import Kind, kind_of


def working_type(t: pa.DataType) -> pa.DataType:
    """The type a column has while it is loaded: pyarrow cannot sort or take string_view."""
    return pa.string() if pa.types.is_string_view(t) else t


def decoded_width(t: pa.DataType, max_length: int = 0) -> int:
    """Bytes one value takes once decoded into Arrow (strings: longest value + offset)."""
    if pa.types.is_boolean(t):
        return 1
    if kind_of(t) is Kind.STR:
        return max_length + 4
    return t.byte_width
