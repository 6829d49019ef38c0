"""Blocks of a table: cut, encoded and serialized (the block itself is `gpu_kernels.encoded_block`).

`encode_block` turns one Arrow batch into an `EncodedBlock`, each column with the chain
`encoding_choice` picks; `block_to_ipc` serializes it to an Arrow IPC file holding one row whose
columns are the encodings' parts (``column/part`` as a list), with the chain descriptions in the
schema metadata. `blockfile` writes and verifies the files.
"""

from __future__ import annotations

import json
from dataclasses import dataclass

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from gpu_kernels import (
    EncodedBlock,
    EncodedColumn,
    Kind,
    Plain,
    encodings,
    parse_type,
    plain_nbytes,
    to_domain,
    type_name,
)
from storage.catalog import TableSchema
from storage.encoding_choice import ColumnStats, EncodingOptions, choose_encoding
from storage.errors import SchemaError
from storage.types import decoded_width, working_type

FORMAT_VERSION = 1
METADATA_KEY = b"cxg.block"


@dataclass
class ChosenColumn(EncodedColumn):
    """A column just encoded, with the statistics its chain was chosen from (the manifest keeps them)."""

    stats: ColumnStats


def stream_bytes(table: pa.Table) -> bytes:
    """`table` as one Arrow IPC stream (what travels between the parts: answers, an append's rows)."""
    sink = pa.BufferOutputStream()
    with pa.ipc.new_stream(sink, table.schema) as writer:
        writer.write_table(table)
    return sink.getvalue().to_pybytes()


def block_to_ipc(block: EncodedBlock) -> pa.Buffer:
    """The block file's bytes (before any compression)."""
    fields, arrays, described = [], [], []
    for column in block.columns.values():
        parts = column.encoding.parts()
        if column.validity is not None:
            parts["validity"] = pa.array(column.validity)
        for part_name, part in parts.items():
            fields.append(pa.field(f"{column.name}/{part_name}", pa.list_(part.type), nullable=False))
            arrays.append(pa.ListArray.from_arrays(pa.array([0, len(part)], pa.int32()), part))
        described.append(
            {
                "name": column.name,
                "type": type_name(column.type),
                "null_count": column.null_count,
                "encoding": encodings.describe(column.encoding),
            }
        )
    meta = {"format": FORMAT_VERSION, "rows": block.rows, "columns": described}
    schema = pa.schema(fields, metadata={METADATA_KEY: json.dumps(meta).encode()})
    sink = pa.BufferOutputStream()
    with pa.ipc.new_file(sink, schema) as writer:
        writer.write_batch(pa.RecordBatch.from_arrays(arrays, schema=schema))
    return sink.getvalue()


def block_from_ipc(buffer: pa.Buffer | bytes) -> EncodedBlock:
    """Parse a block file's IPC bytes; parts stay zero-copy views of `buffer`."""
    reader = pa.ipc.open_file(pa.py_buffer(buffer) if isinstance(buffer, bytes) else buffer)
    meta = json.loads(reader.schema.metadata[METADATA_KEY])
    if meta.get("format") != FORMAT_VERSION:
        raise ValueError(f"unknown block format {meta.get('format')}")
    batch = reader.get_batch(0)
    parts_by_column: dict[str, dict[str, pa.Array]] = {}
    for i, field in enumerate(reader.schema):
        column_name, part_name = field.name.rsplit("/", 1) if "/" in field.name else (field.name, "")
        parts_by_column.setdefault(column_name, {})[part_name] = batch.column(i).values
    columns = {}
    for c in meta["columns"]:
        parts = parts_by_column.get(c["name"], {})
        validity = parts.pop("validity", None)
        columns[c["name"]] = EncodedColumn(
            name=c["name"],
            type=parse_type(c["type"]),
            encoding=encodings.restore(c["encoding"], parts),
            validity=validity.to_numpy(zero_copy_only=True) if validity is not None else None,
            null_count=c["null_count"],
        )
    return EncodedBlock(meta["rows"], columns)


def encode_column(name: str, array: pa.Array, column_type: pa.DataType, options: EncodingOptions) -> ChosenColumn:
    """Encode one column (of `column_type`, possibly in its working type) with the chosen chain."""
    domain_values = to_domain(array)
    encoding, stats = choose_encoding(domain_values.values, column_type, options)
    stats.plain_bytes = plain_nbytes(array, column_type)
    valid = domain_values.valid
    validity = np.packbits(valid, bitorder="little") if valid is not None else None
    return ChosenColumn(name, column_type, encoding, validity, array.null_count, stats)


def encode_block(
    batch: pa.RecordBatch | pa.Table, schema: TableSchema, options: EncodingOptions | None = None
) -> EncodedBlock:
    """Encode one batch whose columns already have the table's types (see `conform`)."""
    options = options or EncodingOptions()
    columns = {}
    for column in schema.columns:
        array = batch.column(column.name)
        if isinstance(array, pa.ChunkedArray):
            array = array.combine_chunks()
        columns[column.name] = encode_column(column.name, array, column.arrow_type, options)
    return EncodedBlock(batch.num_rows, columns)


def conform(table: pa.Table, schema: TableSchema) -> pa.Table:
    """Select and cast a source's columns to the table's (working) types, checking NOT NULL."""
    missing = [c.name for c in schema.columns if c.name not in table.column_names]
    if missing:
        raise SchemaError(f"table {schema.name}: source has no column(s) {', '.join(missing)}")
    arrays = []
    fields = []
    for column in schema.columns:
        array = table.column(column.name)
        target = working_type(column.arrow_type)
        fields.append(pa.field(column.name, target, column.nullable))
        if array.type != target:
            try:
                array = array.cast(target)
            except (pa.ArrowInvalid, pa.ArrowNotImplementedError) as e:
                raise SchemaError(
                    f"table {schema.name}: column {column.name} ({array.type}) does not convert to {column.type}: {e}"
                ) from e
        if not column.nullable and array.null_count:
            raise SchemaError(
                f"table {schema.name}: column {column.name} is NOT NULL but the source has {array.null_count} null(s)"
            )
        arrays.append(array)
    return pa.Table.from_arrays(arrays, schema=pa.schema(fields))


def longest_strings(table: pa.Table, schema: TableSchema) -> dict[str, int]:
    """The bytes of the longest value of each string column of `table`."""
    longest = {}
    for column in schema.columns:
        if column.kind is Kind.STR and table.num_rows:
            lengths = pc.binary_length(table.column(column.name).cast(pa.string()))
            longest[column.name] = pc.max(lengths).as_py() or 0
    return longest


def record_bytes(schema: TableSchema, longest: dict[str, int]) -> int:
    """RS: bytes of the longest record once decoded, given each string column's longest value."""
    return max(1, sum(decoded_width(c.arrow_type, longest.get(c.name, 0)) for c in schema.columns))


def record_size(table: pa.Table, schema: TableSchema) -> int:
    """RS of `table`: bytes of its longest record once decoded (strings at their longest value)."""
    return record_bytes(schema, longest_strings(table, schema))


def block_rows(budget_bytes: int, record_bytes: int) -> int:
    """RC = floor(BS / RS), at least one row."""
    return max(1, budget_bytes // record_bytes)


def plain_block(table: pa.Table) -> EncodedBlock:
    """A (small) table as a block of plain columns, so the scan kernels can evaluate expressions
    on it (the coordinator's HAVING, select list and ORDER BY over merged results). Wide decimals
    become 64-bit scaled integers when they fit, doubles otherwise."""
    columns = {}
    for field, column in zip(table.schema, table.columns, strict=True):
        array = column.combine_chunks() if isinstance(column, pa.ChunkedArray) else column
        if pa.types.is_decimal(array.type) and array.type.precision > 18:
            try:
                array = array.cast(pa.decimal128(18, array.type.scale))
            except pa.ArrowInvalid:
                array = array.cast(pa.float64())
        elif pa.types.is_null(array.type):
            array = array.cast(pa.int64())
        array = array.cast(working_type(array.type))
        domain_values = to_domain(array)
        valid = domain_values.valid
        validity = np.packbits(valid, bitorder="little") if valid is not None else None
        columns[field.name] = EncodedColumn(
            field.name, array.type, Plain(domain_values.values), validity, array.null_count
        )
    return EncodedBlock(table.num_rows, columns)
