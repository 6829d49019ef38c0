"""Reading load sources into Arrow: Parquet files and CSV files."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

import pyarrow as pa
import pyarrow.csv as pacsv
import pyarrow.dataset as ds
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
    tables = []
    for path in _existing(paths):
        try:
            tables.append(pacsv.read_csv(path, *_csv_options(delimiter, header, schema)))
        except (pa.ArrowException, OSError) as e:
            raise StorageError(f"cannot read CSV file {path}: {e}") from e
    try:
        return pa.concat_tables(tables)
    except pa.ArrowInvalid as e:
        raise StorageError(f"CSV files have different columns: {e}") from e


def _csv_options(
    delimiter: str, header: bool, schema: TableSchema | None, block_bytes: int | None = None
) -> tuple[pacsv.ReadOptions, pacsv.ParseOptions, pacsv.ConvertOptions]:
    column_types = {c.name: working_type(c.arrow_type) for c in schema.columns} if schema else None
    read_options = pacsv.ReadOptions(
        column_names=schema.column_names if (schema and not header) else None,
        autogenerate_column_names=not header and schema is None,
        **({"block_size": block_bytes} if block_bytes else {}),
    )
    convert_options = pacsv.ConvertOptions(
        column_types=column_types, strings_can_be_null=True, quoted_strings_can_be_null=False
    )
    return read_options, pacsv.ParseOptions(delimiter=delimiter), convert_options


CSV_BLOCK_BYTES = 64 << 20  # of a CSV file read at a time when streaming


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

    def rows(self) -> int | None:
        """The source's rows from the Parquet files' metadata; None for CSV (known once read)."""
        if self.kind != "parquet":
            return None
        try:
            return sum(ds.dataset(path, format="parquet").count_rows() for path in self.files())
        except (pa.ArrowException, OSError) as e:
            raise StorageError(f"cannot read Parquet files {', '.join(self.paths)}: {e}") from e

    def batches(self, rows: int) -> Iterator[pa.RecordBatch]:
        """The source's rows in file order, a batch at a time (Parquet: `rows` rows; CSV: a block of
        its bytes), without reading it whole."""
        for path in self.files():
            try:
                if self.kind == "parquet":
                    yield from ds.dataset(path, format="parquet").to_batches(batch_size=rows)
                else:
                    options = _csv_options(self.delimiter, self.header, self.schema, CSV_BLOCK_BYTES)
                    with pacsv.open_csv(path, *options) as reader:
                        yield from reader
            except (pa.ArrowException, OSError) as e:
                raise StorageError(f"cannot read {self.kind} file {path}: {e}") from e
