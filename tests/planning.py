"""A region's catalog for planning without a region (no node, no Spark, no data): customer,
orders and lineitem hash-placed alike over two nodes (each on its own key), nation replicated."""

from __future__ import annotations

from gateway import RegionCatalog, TableInfo
from gateway.sql.check import CheckedQuery, check
from storage import Column, Placement, TableSchema

NODES = {"n0": "http://127.0.0.1:1", "n1": "http://127.0.0.1:2"}


def _table(name: str, columns: dict[str, str], placement: Placement, rows: int) -> TableInfo:
    schema = TableSchema(name, tuple(Column(c, t) for c, t in columns.items()), placement=placement)
    return TableInfo(schema, list(NODES) if placement.kind == "hash" else ["n0", "n1"], rows)


def _hash(*keys: str) -> Placement:
    return Placement("hash", keys, 4, ("n0", "n1", "n0", "n1"))


CATALOG = RegionCatalog.known(
    NODES,
    {
        "customer": _table(
            "customer",
            {"c_custkey": "int64", "c_name": "string", "c_mktsegment": "string", "c_acctbal": "decimal(15,2)"},
            _hash("c_custkey"),
            1_500,
        ),
        "orders": _table(
            "orders",
            {"o_orderkey": "int64", "o_custkey": "int64", "o_orderdate": "date", "o_totalprice": "decimal(15,2)"},
            _hash("o_orderkey"),
            15_000,
        ),
        "lineitem": _table(
            "lineitem",
            {
                "l_orderkey": "int64",
                "l_quantity": "decimal(15,2)",
                "l_extendedprice": "decimal(15,2)",
                "l_discount": "decimal(15,2)",
                "l_shipdate": "date",
            },
            _hash("l_orderkey"),
            60_000,
        ),
        "nation": _table("nation", {"n_nationkey": "int64", "n_name": "string"}, Placement(), 25),
    },
)


def checked(sql: str) -> CheckedQuery:
    return check(sql, CATALOG.sql_schema())
