"""Encoded blocks: RC rows of a table, each column encoded by its own chain.

`encode_block` turns one Arrow batch into an `EncodedBlock`; a block serializes to an Arrow
IPC file holding one row whose columns are the encodings' parts (``column/part`` as a list),
with the chain descriptions in the schema metadata. `blockfile` writes and verifies the files.
"""

from __future__ import annotations

import json
from dataclasses import dataclass

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from storage import encodings
from storage.catalog import TableSchema
from storage.encodings import Encoding, Plain, plain_nbytes
from storage.errors import SchemaError
from storage.planner import ColumnStats, PlannerOptions, plan_column
from storage.types import Domain, decoded_width, domain_of, from_domain, parse_type, to_domain, type_name, working_type

FORMAT_VERSION = 1
METADATA_KEY = b"cxg.block"


@dataclass
class EncodedColumn:
    name: str
    type: pa.DataType
    encoding: Encoding
    validity: np.ndarray | None  # packed bitmap (LSB first); None when there are no nulls
    null_count: int
    stats: ColumnStats | None = None  # known when the column was just encoded

    @property
    def length(self) -> int:
        return self.encoding.length

    @property
    def nbytes(self) -> int:
        return self.encoding.nbytes + (self.validity.nbytes if self.validity is not None else 0)

    def valid_mask(self) -> np.ndarray | None:
        if self.validity is None:
            return None
        return np.unpackbits(self.validity, count=self.length, bitorder="little").astype(bool)

    def decode(self) -> pa.Array:
        return from_domain(self.encoding.decode(), self.valid_mask(), self.type)


@dataclass
class EncodedBlock:
    rows: int
    columns: dict[str, EncodedColumn]

    @property
    def nbytes(self) -> int:
        return sum(c.nbytes for c in self.columns.values())

    def decode(self, names: list[str] | None = None, schema: pa.Schema | None = None) -> pa.RecordBatch:
        """The block as an Arrow batch (all columns, or `names` in that order)."""
        names = list(self.columns) if names is None else names
        arrays = [self.columns[n].decode() for n in names]
        if schema is not None:
            return pa.RecordBatch.from_arrays(arrays, schema=pa.schema([schema.field(n) for n in names]))
        return pa.RecordBatch.from_arrays(arrays, names=names)

    def to_ipc(self) -> pa.Buffer:
        fields, arrays, described = [], [], []
        for column in self.columns.values():
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
        meta = {"format": FORMAT_VERSION, "rows": self.rows, "columns": described}
        schema = pa.schema(fields, metadata={METADATA_KEY: json.dumps(meta).encode()})
        sink = pa.BufferOutputStream()
        with pa.ipc.new_file(sink, schema) as writer:
            writer.write_batch(pa.RecordBatch.from_arrays(arrays, schema=schema))
        return sink.getvalue()

    @classmethod
    def from_ipc(cls, buffer: pa.Buffer | bytes) -> EncodedBlock:
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
        return cls(meta["rows"], columns)


def encode_column(name: str, array: pa.Array, column_type: pa.DataType, options: PlannerOptions) -> EncodedColumn:
    """Encode one column (of `column_type`, possibly in its working type) with the planner's chain."""
    domain_values = to_domain(array)
    encoding, stats = plan_column(domain_values.values, domain_of(column_type), options)
    stats.plain_bytes = plain_nbytes(array, column_type)
    valid = domain_values.valid
    validity = np.packbits(valid, bitorder="little") if valid is not None else None
    return EncodedColumn(name, column_type, encoding, validity, array.null_count, stats)


def encode_block(
    batch: pa.RecordBatch | pa.Table, schema: TableSchema, options: PlannerOptions | None = None
) -> EncodedBlock:
    """Encode one batch whose columns already have the table's types (see `conform`)."""
    options = options or PlannerOptions()
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


def record_size(table: pa.Table, schema: TableSchema) -> int:
    """RS: bytes of the longest record once decoded (strings at their longest value)."""
    total = 0
    for column in schema.columns:
        max_length = 0
        if column.domain is Domain.STRING and table.num_rows:
            lengths = pc.binary_length(table.column(column.name).cast(pa.string()))
            max_length = pc.max(lengths).as_py() or 0
        total += decoded_width(column.arrow_type, max_length)
    return max(total, 1)


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
