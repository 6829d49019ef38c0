"""Loading tables into MySQL/MariaDB for the `mysql` node backend (as PerformSys ran TPC-H):
each table is created from its Arrow schema with its primary key and the indexes of TPC-H's
foreign keys (`dss.ri`), filled in batches, and swapped in by one atomic RENAME, so a load that
dies half-way leaves the previous table as it was."""

from __future__ import annotations

from collections.abc import Callable

import pyarrow as pa
import pyarrow.compute as pc
from sqlalchemy import create_engine, text
from sqlalchemy.engine import make_url

from storage.errors import StorageError
from storage.mysql_urls import mysql_url
from storage.sql_types import names_of

BATCH_ROWS = 5_000
PRIMARY_KEYS: dict[str, tuple[str, ...]] = {
    "lineitem": ("l_orderkey", "l_linenumber"),
    "orders": ("o_orderkey",),
    "customer": ("c_custkey",),
    "part": ("p_partkey",),
    "partsupp": ("ps_partkey", "ps_suppkey"),
    "supplier": ("s_suppkey",),
    "nation": ("n_nationkey",),
    "region": ("r_regionkey",),
}
INDEXES: dict[str, tuple[tuple[str, ...], ...]] = {  # TPC-H's foreign keys
    "lineitem": (("l_partkey", "l_suppkey"), ("l_suppkey",)),
    "orders": (("o_custkey",),),
    "customer": (("c_nationkey",),),
    "partsupp": (("ps_suppkey",),),
    "supplier": (("s_nationkey",),),
    "nation": (("n_regionkey",),),
}


def column_type(column: pa.ChunkedArray) -> str:
    """The column's MariaDB type; a string column as long as its longest value needs (indexable)."""
    names = names_of(column.type)
    if names is None or names.mariadb is None:
        raise StorageError(f"column type {column.type} cannot be loaded into MariaDB")
    if names.sql == "varchar":
        longest = pc.max(pc.utf8_length(column.cast(pa.string()))).as_py() or 1
        return f"VARCHAR({longest})" if longest <= 1000 else names.mariadb
    return names.mariadb


def _quote(name: str) -> str:
    return "`" + name.replace("`", "``") + "`"


def create_database(url: str) -> str:
    """Create the URL's database when missing; the PyMySQL URL of it."""
    url = mysql_url(url)
    parsed = make_url(url)
    if not parsed.database:
        raise StorageError(f"the MariaDB URL names no database: {url}")
    server = create_engine(parsed.set(database=""))
    with server.begin() as conn:
        conn.exec_driver_sql(f"CREATE DATABASE IF NOT EXISTS {_quote(parsed.database)}")
    server.dispose()
    return url


def load_mysql(url: str, name: str, table: pa.Table, progress: Callable[[int], None] | None = None) -> None:
    """Replace table `name` of the database at `url` by `table`."""
    engine = create_engine(create_database(url))
    staging, old = f"{name}__loading", f"{name}__old"
    definition = [
        f"{_quote(c)} {column_type(table[c])}{' NOT NULL' if table[c].null_count == 0 else ''}"
        for c in table.column_names
    ]
    key = PRIMARY_KEYS.get(name)
    if key and all(c in table.column_names for c in key):
        definition.append(f"PRIMARY KEY ({', '.join(map(_quote, key))})")
    try:
        with engine.begin() as conn:
            conn.exec_driver_sql(f"DROP TABLE IF EXISTS {_quote(staging)}")
            conn.exec_driver_sql(
                f"CREATE TABLE {_quote(staging)} ({', '.join(definition)}) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4"
            )
        marks = ", ".join(["%s"] * table.num_columns)
        insert = f"INSERT INTO {_quote(staging)} VALUES ({marks})"
        for batch in table.to_batches(BATCH_ROWS):
            rows = list(zip(*(column.to_pylist() for column in batch.columns), strict=True))
            with engine.begin() as conn:
                conn.connection.dbapi_connection.cursor().executemany(insert, rows)
            if progress is not None:
                progress(batch.num_rows)
        with engine.begin() as conn:
            for i, columns in enumerate(INDEXES.get(name, ())):
                if all(c in table.column_names for c in columns):
                    listed = ", ".join(map(_quote, columns))
                    conn.exec_driver_sql(f"CREATE INDEX {_quote(f'{name}_fk{i}')} ON {_quote(staging)} ({listed})")
            exists = conn.execute(
                text(
                    "SELECT COUNT(*) FROM information_schema.tables WHERE table_schema = DATABASE() AND table_name = :t"
                ),
                {"t": name},
            ).scalar()
            if exists:
                conn.exec_driver_sql(
                    f"RENAME TABLE {_quote(name)} TO {_quote(old)}, {_quote(staging)} TO {_quote(name)}"
                )
                conn.exec_driver_sql(f"DROP TABLE {_quote(old)}")
            else:
                conn.exec_driver_sql(f"RENAME TABLE {_quote(staging)} TO {_quote(name)}")
            conn.exec_driver_sql(f"ANALYZE TABLE {_quote(name)}")
    except Exception as e:
        with engine.begin() as conn:
            conn.exec_driver_sql(f"DROP TABLE IF EXISTS {_quote(staging)}")
        if isinstance(e, StorageError):
            raise
        raise StorageError(f"loading {name} into MariaDB failed: {e}") from e
    finally:
        engine.dispose()
