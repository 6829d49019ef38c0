"""The scan wire protocol without a node: requests round-trip through their JSON form, malformed
ones are refused with the node's messages, the JSON Schema accepts what the node accepts, and a
request's answer schema is known from the table's definition alone."""

from __future__ import annotations

import base64
import datetime as dt
import decimal
import json
from dataclasses import replace
from typing import Any

import numpy as np
import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from jsonschema import Draft202012Validator
from pyspark.sql.datasource import EqualTo, GreaterThan, In, Not, StringStartsWith

from gpu_kernels import expr as E
from storage import (
    Aggregate,
    Literal,
    Named,
    Partition,
    ScanRequest,
    ScanRequestError,
    TableSchema,
    ValueList,
    and_,
    call,
    col,
    compare,
    conjoin,
    expr_from_json,
    in_,
    int64_values,
    is_null,
    kernel_expr,
    like,
    lit,
    not_,
    or_,
    output_schema,
    type_scan,
    values,
)
from storage import Column as CatalogColumn
from storage.json_shape import ShapeError, read
from storage.scan import plan_scan
from storage.scan_protocol import MERGED_ON_NODE, REQUEST, REQUEST_SCHEMA, Call, Column
from storage.spark_source import filter_to_expr

pytestmark = pytest.mark.check  # the fast lane (`make check`): no Spark, no server

SCHEMA = Draft202012Validator(REQUEST_SCHEMA)


def _violations(data: Any) -> list[str]:
    """Where `data` breaks the published JSON Schema (empty: it conforms)."""
    return [error.message for error in SCHEMA.iter_errors(data)]


def test_the_published_schema_is_a_valid_json_schema() -> None:
    Draft202012Validator.check_schema(REQUEST_SCHEMA)


# documents built of the request's own words, so that some fit and most break it somewhere deep
FIELDS = st.sampled_from(list(REQUEST_SCHEMA["properties"]))
WORDS = FIELDS | st.sampled_from(
    ["col", "lit", "type", "values", "int64", "op", "args", "name", "expr", "func", "arg", "keys", "x"]
)
DOCUMENTS = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(-2, 70_000)
    | st.sampled_from(["k", "=", "date", "AAAAAAAAAAA="])
    | st.sampled_from([{"col": "k"}, ["k"], {"lit": 1}]),
    lambda children: st.lists(children, max_size=3) | st.dictionaries(WORDS, children, max_size=4),
    max_leaves=24,
)


@settings(max_examples=300, deadline=None)
@given(st.dictionaries(FIELDS, DOCUMENTS, max_size=4).map(lambda d: {"table": "t", **d}) | DOCUMENTS)
def test_the_schema_and_the_node_read_the_same_shapes(data: Any) -> None:
    try:
        read(REQUEST, data)
    except ShapeError:
        assert _violations(data), data
    else:
        assert _violations(data) == [], data


# ---- generated requests ------------------------------------------------------------------------

NAMES = st.text("abcdefgh_", min_size=1, max_size=6)
TYPE_NAMES = st.sampled_from(["date", "decimal(12,2)", "float64", "interval_day", "int32"])
SCALARS = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(-(2**63), 2**63 - 1),
    st.floats(allow_nan=False, allow_infinity=False),
    st.text(max_size=8),
)
LEAVES = st.one_of(
    NAMES.map(Column),
    st.builds(Literal, SCALARS, st.none() | TYPE_NAMES),
    st.builds(
        ValueList,
        st.lists(st.integers() | st.text(max_size=4), min_size=1, max_size=5).map(tuple),
        st.none() | st.just("date"),
    ),
    st.lists(st.integers(-(2**63), 2**63 - 1), min_size=1, max_size=20).map(lambda v: int64_values(np.array(v))),
)
EXPRESSIONS = st.recursive(
    LEAVES,
    lambda children: st.builds(
        Call,
        st.sampled_from(["=", "<", "and", "or", "not", "in", "+", "case"]),
        st.lists(children, max_size=3).map(tuple),
    ),
    max_leaves=12,
)


@st.composite
def requests(draw: st.DrawFn) -> ScanRequest:
    names = draw(st.lists(NAMES, min_size=1, max_size=5, unique=True))
    predicate = draw(st.none() | EXPRESSIONS)
    if draw(st.booleans()):  # projects
        split = draw(st.integers(0, len(names)))
        columns = tuple(Named.column(n) if draw(st.booleans()) else Named(n, draw(EXPRESSIONS)) for n in names[:split])
        select = tuple(Named(n, draw(EXPRESSIONS)) for n in names[split:])
        request = ScanRequest("t", columns, select, predicate, limit=draw(st.none() | st.integers(0, 10**6)))
    else:  # aggregates
        keys = draw(st.integers(0, len(names) - 1))
        group_by = tuple(Named(n, draw(EXPRESSIONS)) for n in names[:keys])
        funcs = st.sampled_from(MERGED_ON_NODE) if draw(st.booleans()) else st.sampled_from(["avg", "count_distinct"])
        aggregates = tuple(Aggregate(n, draw(funcs), draw(st.none() | EXPRESSIONS)) for n in names[keys:])
        having = draw(st.none() | EXPRESSIONS) if all(a.func in MERGED_ON_NODE for a in aggregates) else None
        request = ScanRequest("t", (), (), predicate, group_by, aggregates, having)
    if request.having is None and draw(st.booleans()):
        keys = draw(st.lists(st.sampled_from(names), min_size=1, max_size=2))
        request = replace(request, partition=Partition(tuple(keys), draw(st.integers(1, 65536))))
    return replace(
        request,
        buckets=draw(st.none() | st.lists(st.integers(0, 64), max_size=4).map(tuple)),
        block_range=draw(st.none() | st.tuples(st.integers(0, 99), st.integers(0, 99))),
    )


@settings(max_examples=300, deadline=None)
@given(requests())
def test_a_request_round_trips_through_its_json_text(request: ScanRequest) -> None:
    data = request.to_json()
    assert ScanRequest.from_json(data) == request
    assert ScanRequest.from_json(json.loads(json.dumps(data))) == request
    assert ScanRequest.from_json(data).to_json() == data
    assert _violations(data) == []


# ---- today's wire form -------------------------------------------------------------------------

# what the planner and the data source send, written as they write it
PLANNER_REQUEST = {
    "table": "lineitem",
    "columns": ["l_orderkey", "l_shipdate"],
    "select": [
        {
            "name": "revenue",
            "expr": {
                "op": "*",
                "args": [{"col": "l_extendedprice"}, {"op": "-", "args": [{"lit": 1}, {"col": "l_discount"}]}],
            },
        }
    ],
    "filter": {
        "op": "and",
        "args": [
            {"op": "<=", "args": [{"col": "l_shipdate"}, {"lit": "1998-09-02", "type": "date"}]},
            {"op": "in", "args": [{"col": "l_orderkey"}, int64_values(np.array([3, 1, 2])).to_json()]},
            {"op": "in", "args": [{"col": "l_shipmode"}, {"values": ["MAIL", "SHIP"]}]},
            {"op": "like", "args": [{"col": "l_comment"}, {"lit": "%x\\_%"}]},
        ],
    },
    "block_range": [0, 4],
    "limit": 1000,
}
AGGREGATING_REQUEST = {
    "table": "lineitem",
    "group_by": [{"name": "l_returnflag", "expr": {"col": "l_returnflag"}}],
    "aggregates": [
        {"name": "n", "func": "count"},
        {"name": "q", "func": "sum", "arg": {"col": "l_quantity"}},
        {"name": "p", "func": "avg", "arg": {"col": "l_extendedprice"}},
    ],
    "partition": {"keys": ["l_returnflag"], "buckets": 8},
    "buckets": [0, 3],
}


@pytest.mark.parametrize("data", [PLANNER_REQUEST, AGGREGATING_REQUEST])
def test_todays_requests_are_read_and_written_back_unchanged(data: dict[str, Any]) -> None:
    request = ScanRequest.from_json(data)
    assert request.to_json() == data
    assert _violations(data) == []


def test_the_builders_write_what_the_planner_writes() -> None:
    built = ScanRequest(
        "lineitem",
        columns=(Named.column("l_orderkey"), Named.column("l_shipdate")),
        select=(Named("revenue", call("*", col("l_extendedprice"), call("-", lit(1), col("l_discount")))),),
        filter=and_(
            compare("<=", col("l_shipdate"), lit("1998-09-02", "date")),
            in_(col("l_orderkey"), int64_values(np.array([3, 1, 2]))),
            in_(col("l_shipmode"), values(["MAIL", "SHIP"])),
            like(col("l_comment"), "%x\\_%"),
        ),
        block_range=(0, 4),
        limit=1000,
    )
    assert built.to_json() == PLANNER_REQUEST
    assert or_(is_null(col("k")), not_(lit(True))).to_json() == {
        "op": "or",
        "args": [{"op": "is_null", "args": [{"col": "k"}]}, {"op": "not", "args": [{"lit": True}]}],
    }
    assert conjoin([]) is None and conjoin([col("b")]) == col("b")
    assert conjoin([col("a"), col("b")]) == and_(col("a"), col("b"))


def test_the_data_source_pushes_sparks_filters_as_wire_expressions() -> None:
    pushed = [
        filter_to_expr(EqualTo(("k",), 5), {"k"}),
        filter_to_expr(Not(In(("k",), (1, decimal.Decimal("1.50"), dt.date(1995, 1, 2)))), {"k"}),
        filter_to_expr(StringStartsWith(("s",), "a_%"), {"s"}),
    ]
    assert [p.to_json() for p in pushed] == [
        {"op": "=", "args": [{"col": "k"}, {"lit": 5}]},
        {
            "op": "not",
            "args": [
                {
                    "op": "in",
                    "args": [
                        {"col": "k"},
                        {"lit": 1},
                        {"lit": "1.50", "type": "decimal(38,2)"},
                        {"lit": "1995-01-02", "type": "date"},
                    ],
                }
            ],
        },
        {"op": "like", "args": [{"col": "s"}, {"lit": "a\\_\\%%"}]},
    ]
    assert filter_to_expr(GreaterThan(("k",), float("nan")), {"k"}) is None  # no NaN on the wire
    assert filter_to_expr(EqualTo(("other",), 1), {"k"}) is None  # not a column the scan reads


def test_null_fields_and_bare_group_keys_are_accepted_as_before() -> None:
    request = ScanRequest.from_json(
        {"table": "t", "columns": None, "group_by": ["k"], "filter": None, "limit": None, "aggregates": None}
    )
    assert request.group_by == (Named.column("k"),) and request.filter is None and request.limit is None
    assert request.to_json() == {"table": "t", "group_by": [{"name": "k", "expr": {"col": "k"}}]}


def test_an_int64_list_keeps_its_wire_text_and_the_kernels_read_it() -> None:
    keys = np.array([5, -(2**63), 2**63 - 1, 0])
    listed = int64_values(keys)
    assert listed.to_json() == {"int64": base64.b64encode(keys.astype("<i8").tobytes()).decode("ascii")}
    assert expr_from_json(listed.to_json()) == listed
    kernels = kernel_expr(listed)
    assert isinstance(kernels, E.Values) and np.array_equal(kernels.integers, keys)


# ---- refusals ----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("data", "message"),
    [
        ({"columns": ["k"]}, "names its table"),
        (["t"], "names its table"),
        ({"table": "t", "colums": ["k"]}, "unknown field"),
        ({"table": "t", "columns": "k"}, "columns must be a list"),
        ({"table": "t", "select": [{"name": "x"}]}, "each entry of select"),
        ({"table": "t", "aggregates": [{"func": "count"}]}, "an aggregate is"),
        ({"table": "t", "columns": ["k"], "group_by": ["k"]}, "either projects"),
        ({"table": "t"}, "needs columns"),
        ({"table": "t", "columns": ["k", "k"]}, "used twice"),
        ({"table": "t", "columns": ["k"], "partition": {"keys": []}}, "partition is"),
        ({"table": "t", "columns": ["k"], "partition": {"keys": ["d"], "buckets": 4}}, "not output columns"),
        ({"table": "t", "columns": ["k"], "partition": {"keys": ["k"], "buckets": 0}}, "partition buckets"),
        ({"table": "t", "columns": ["k"], "having": {"lit": True}}, "having needs group_by"),
        (
            {"table": "t", "aggregates": [{"name": "a", "func": "avg", "arg": {"col": "k"}}], "having": {"lit": True}},
            "with having, the aggregates are count, sum, min, max",
        ),
        ({"table": "t", "columns": ["k"], "buckets": [0, "1"]}, "buckets must be a list"),
        ({"table": "t", "columns": ["k"], "limit": -1}, "limit is a non-negative integer"),
        ({"table": "t", "aggregates": [{"name": "n", "func": "count"}], "limit": 1}, "for projections only"),
        ({"table": "t", "columns": ["k"], "block_range": [1]}, "block_range is"),
        ({"table": "t", "columns": ["k"], "filter": "k > 1"}, "an expression must be an object"),
        ({"table": "t", "columns": ["k"], "filter": {"col": 1}}, "column name must be a string"),
        ({"table": "t", "columns": ["k"], "filter": {"int64": 5}}, "64-bit integers"),
        ({"table": "t", "columns": ["k"], "filter": {"values": []}}, "non-empty list without NULLs"),
        ({"table": "t", "columns": ["k"], "filter": {"lit": 1, "type": 5}}, "literal type must be a string"),
        ({"table": "t", "columns": ["k"], "filter": {"op": "=", "args": {}}}, "args of = must be a list"),
        ({"table": "t", "columns": ["k"], "filter": {"op": ["="]}}, "unsupported operation"),
        ({"table": "t", "columns": ["k"], "filter": {"column": "k"}}, "needs 'col', 'lit' or 'op'"),
    ],
)
def test_malformed_requests_are_refused_with_the_nodes_messages(data: Any, message: str) -> None:
    with pytest.raises(ScanRequestError, match=message) as refused:
        ScanRequest.from_json(data)
    assert refused.value.code == "invalid_scan"


@pytest.mark.parametrize(
    "data",
    [
        {"columns": ["k"]},
        {"table": "t", "colums": ["k"]},
        {"table": "t", "columns": "k"},
        {"table": "t", "columns": ["k"], "limit": -1},
        {"table": "t", "columns": ["k"], "block_range": [1]},
        {"table": "t", "columns": ["k"], "filter": {"col": 1}},
        {"table": "t", "columns": ["k"], "partition": {"keys": ["k"], "buckets": 0}},
    ],
)
def test_the_json_schema_refuses_malformed_shapes(data: dict[str, Any]) -> None:
    assert _violations(data)


# ---- typed against a table: the answer's schema ------------------------------------------------

TABLE = TableSchema(
    "t",
    (
        CatalogColumn("k", "int32"),
        CatalogColumn("name", "string_view"),
        CatalogColumn("amount", "decimal(12,2)"),
        CatalogColumn("d", "date"),
    ),
)


def test_the_answer_schema_is_known_from_the_definition_alone() -> None:
    projection = ScanRequest(
        "t",
        columns=(Named.column("k"), Named.column("name")),
        select=(
            Named("twice", call("*", col("amount"), lit(2))),
            Named("due", call("+", col("d"), lit(30, "interval_day"))),
        ),
    )
    assert output_schema(projection, TABLE) == pa.schema(
        [("k", pa.int32()), ("name", pa.string()), ("twice", pa.decimal128(38, 2)), ("due", pa.date32())]
    )
    grouped = ScanRequest(
        "t",
        group_by=(Named.column("name"),),
        aggregates=(
            Aggregate("n", "count"),
            Aggregate("total", "sum", col("amount")),
            Aggregate("mean", "avg", col("k")),
            Aggregate("days", "count_distinct", col("d")),
        ),
    )
    assert output_schema(grouped, TABLE) == pa.schema(
        [
            ("name", pa.string()),
            ("n", pa.int64()),
            ("total", pa.decimal128(38, 2)),
            ("mean$sum", pa.int64()),
            ("mean$count", pa.int64()),
            ("days$distinct", pa.list_(pa.date32())),
        ]
    )
    for request in (projection, grouped):  # what the node plans to answer, constants folded
        assert plan_scan(request, TABLE).schema == output_schema(request, TABLE)


@pytest.mark.parametrize(
    ("data", "message"),
    [
        ({"columns": ["nope"]}, "unknown column 'nope'"),
        ({"columns": ["k"], "filter": {"op": "+", "args": [{"col": "k"}, {"lit": 1}]}}, "filter must be a boolean"),
        ({"columns": ["k"], "filter": {"op": "regexp", "args": []}}, "unsupported operation 'regexp'"),
        ({"aggregates": [{"name": "x", "func": "median", "arg": {"col": "k"}}]}, "unsupported aggregate function"),
        ({"aggregates": [{"name": "x", "func": "sum", "arg": {"col": "name"}}]}, "sum needs a numeric"),
        ({"aggregates": [{"name": "x", "func": "min"}]}, "min needs an argument"),
        ({"columns": ["k"], "filter": {"op": "=", "args": [{"col": "d"}, {"lit": "x", "type": "date"}]}}, "valid date"),
        ({"aggregates": [{"name": "n", "func": "count"}], "having": {"col": "n"}}, "having must be a boolean"),
        ({"columns": ["k"], "filter": {"op": "in", "args": [{"col": "k"}, {"int64": "AAAA"}]}}, "64-bit integers"),
        ({"columns": ["k"], "filter": {"op": "in", "args": [{"col": "k"}, {"int64": ""}]}}, "at least one value"),
        ({"columns": ["k"], "filter": {"op": "in", "args": [{"col": "k"}, {"values": [1, None]}]}}, "without NULLs"),
    ],
)
def test_requests_that_do_not_fit_the_table_are_refused(data: dict[str, Any], message: str) -> None:
    request = ScanRequest.from_json({"table": "t", **data})
    with pytest.raises(ScanRequestError, match=message):
        type_scan(request, TABLE)
