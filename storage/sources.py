"""Reading load sources into Arrow: Parquet files and CSV files."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import pyarrow as pa
import pyarrow.csv as pacsv
import pyarrow.parquet as pq

from storage.catalog import TableSchema
from storage.errors import StorageError
from storage.types import working_type


def _existing(paths: Sequence[str | Path]) -> list[Path]:
    if not paths:
        raise StorageError("no source file given")
    files = [Path(p) for p in paths]
    missing = [str(p) for p in files if not p.exists()]
    if missing:
        raise StorageError(f"source file(s) not found: {', '.join(missing)}")
    return files


def read_parquet(paths: Sequence[str | Path]) -> pa.Table:
    """Read Parquet files (or directories of them) with the same schema into one table."""
    tables = []
    for path in _existing(paths):
        try:
            tables.append(pq.read_table(path))
        except (pa.ArrowException, OSError) as e:
            raise StorageError(f"cannot read Parquet file {path}: {e}") from e
    try:
        return pa.concat_tables(tables).replace_schema_metadata(None)
    except pa.ArrowInvalid as e:
        raise StorageError(f"Parquet files have different schemas: {e}") from e


def read_csv(
    paths: Sequence[str | Path],
    delimiter: str = ",",
    header: bool = True,
    schema: TableSchema | None = None,
) -> pa.Table:
    """Read CSV files into one table. Empty unquoted fields are NULL.

    With `schema`, columns are parsed as the schema's types (and named by it when the files
    have no header row); without, pyarrow infers them.
    """
    column_types = {c.name: working_type(c.arrow_type) for c in schema.columns} if schema else None
    read_options = pacsv.ReadOptions(
        column_names=schema.column_names if (schema and not header) else None,
        autogenerate_column_names=not header and schema is None,
    )
    convert_options = pacsv.ConvertOptions(
        column_types=column_types, strings_can_be_null=True, quoted_strings_can_be_null=False
    )
    parse_options = pacsv.ParseOptions(delimiter=delimiter)
    tables = []
    for path in _existing(paths):
        try:
            tables.append(pacsv.read_csv(path, read_options, parse_options, convert_options))
        except (pa.ArrowException, OSError) as e:
            raise StorageError(f"cannot read CSV file {path}: {e}") from e
    try:
        return pa.concat_tables(tables)
    except pa.ArrowInvalid as e:
        raise StorageError(f"CSV files have different columns: {e}") from e
