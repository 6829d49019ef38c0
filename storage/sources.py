"""Reading load sources into Arrow: Parquet files and CSV files."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
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


@dataclass(frozen=True)
class Source:
    """A load source: Parquet or CSV files, read with pyarrow here or as a Spark DataFrame
    (`storage.spark_ingest.source_frame`)."""

    kind: str  # "parquet" or "csv"
    paths: tuple[str, ...]
    delimiter: str = ","
    header: bool = True
    schema: TableSchema | None = None  # CSV: the columns' names and types instead of inference

    def files(self) -> list[Path]:
        """The source's files, each there (a StorageError names those that are not)."""
        return _existing(self.paths)

    def arrow_schema(self) -> pa.Schema:
        files = self.files()
        if self.kind == "parquet":
            first = files[0] if not files[0].is_dir() else next(iter(sorted(files[0].rglob("*.parquet"))), None)
            if first is None:
                raise StorageError(f"no Parquet files under {files[0]}")
            return pq.read_schema(first)
        if self.schema is not None:
            return self.schema.arrow_schema()
        options = pacsv.ReadOptions(autogenerate_column_names=not self.header)
        try:
            with pacsv.open_csv(files[0], options, pacsv.ParseOptions(delimiter=self.delimiter)) as reader:
                return reader.schema
        except (pa.ArrowException, OSError) as e:
            raise StorageError(f"cannot read CSV file {files[0]}: {e}") from e

    def read(self) -> pa.Table:
        if self.kind == "parquet":
            return read_parquet(self.paths)
        return read_csv(self.paths, self.delimiter, self.header, self.schema)
