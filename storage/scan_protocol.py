"""The scan contract between a storage node and its clients (the coordinator, the PySpark data
source, tests): what a scan request may say, and how the answer travels.

One home for the wire format, so that what the planner builds, what the node accepts and what the
data source sends cannot drift apart. The request and its expressions are small frozen values with
`to_json` / `from_json` in today's JSON form::

    {"table": "lineitem",
     "columns": ["l_orderkey"],                                   # projected columns
     "select": [{"name": "revenue", "expr": {...}}],              # computed columns
     "filter": {...},                                             # predicate
     "group_by": ["l_returnflag", {"name": "y", "expr": {...}}],  # with aggregates: partial
     "aggregates": [{"name": "n", "func": "count"}, {"name": "s", "func": "sum", "arg": {...}}],
     "having": {...},                                             # with aggregates: final groups
     "partition": {"keys": ["l_orderkey"], "buckets": 8},         # hash-partitioned output
     "buckets": [0, 3],                                           # only these storage buckets
     "block_range": [0, 16],                                      # [start, stop) of those blocks
     "limit": 100,
     "version": 7}                                                # the table version to read

An expression is ``{"col": name}``, ``{"lit": value, "type": name}`` (dates as ISO strings,
decimals as strings, intervals as ``interval_day``/``interval_month``/``interval_year`` counts),
``{"op": name, "args": [...]}``, or the right side of IN: ``{"values": [...], "type": name}`` or
``{"int64": base64 of little-endian int64}`` (a long integer list without JSON numbers to parse).

The request's shape is described once (`REQUEST`, with `storage.json_shape`): `from_json` reads a
request by it, raising `ScanRequestError` naming the problem, and `REQUEST_SCHEMA`, the JSON Schema
clients validate against, is written from it. What its expressions mean against a table (types, the
output schema) is `storage.scan_typing`'s job. This module imports nothing of the node, the kernels
or an HTTP server: a client needs only this.

The answer is an Arrow IPC stream (`ARROW_STREAM`): one batch per block (or per hash partition of
a block, metadata `partition`), then an empty trailer batch whose metadata holds the scan's
statistics (`METADATA_STATS`) or, when the scan failed after the stream started, its error
(`METADATA_ERROR`). An aggregating scan answers partial states, one row per group and block; with
``having`` the node merges its groups (the client asserts every group lives on this node alone,
and only count, sum, min and max are merged there).
"""

from __future__ import annotations

import base64
import sys
from dataclasses import dataclass, replace
from typing import Any

import numpy as np

from storage.errors import StorageError
from storage.json_shape import (
    Either,
    Field,
    ListOf,
    Nullable,
    Object,
    Ref,
    Scalar,
    Shape,
    ShapeError,
    Text,
    Variants,
    Whole,
    json_schema,
    read,
)

# ---- the wire around a request -----------------------------------------------------------------

SCAN_PATH = "/v1/scan"
JSON = "application/json"
OCTET_STREAM = "application/octet-stream"
ARROW_STREAM = "application/vnd.apache.arrow.stream"
HEADER_BACKEND = "X-Cxg-Backend"  # the kernels' backend that ran the scan
HEADER_NODE = "X-Cxg-Node"  # the node that answered
METADATA_STATS = b"cxg.stats"  # trailer batch: the scan's statistics (JSON)
METADATA_ERROR = b"cxg.error"  # trailer batch: {"code": ..., "message": ...} of a failed scan
METADATA_BLOCK = "block"  # each batch: the block file it came from
METADATA_PARTITION = "partition"  # each batch of a partitioned scan: its hash bucket

MAX_PARTITION_BUCKETS = 65536
MAX_EXPRESSION_DEPTH = 400  # how deep an expression may nest (a chain of N ORs is N deep)
# Python frames one level of an expression may take on its way (parser, planner, JSON, pickling)
_FRAMES_PER_LEVEL = 40
MERGED_ON_NODE = ("count", "sum", "min", "max")  # the aggregates a node merges for `having`


class ScanRequestError(StorageError):
    """A malformed or unsupported scan request (HTTP 400); the message names the problem."""

    code = "invalid_scan"


# ---- expressions ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class Column:
    name: str

    def to_json(self) -> dict[str, Any]:
        return {"col": self.name}


@dataclass(frozen=True, eq=False)
class Literal:
    """A value and, where JSON cannot tell it, its catalog type name (``date``, ``decimal(12,2)``).
    Equal literals are equal on the wire: 1, 1.0 and True are equal in Python, not in a request,
    so that equal requests (and their hashes) find identical sub-queries."""

    value: Any
    type: str | None = None

    def _key(self) -> tuple[type, Any, str | None]:
        return type(self.value), self.value, self.type

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Literal) and self._key() == other._key()

    def __hash__(self) -> int:
        return hash(self._key())

    def to_json(self) -> dict[str, Any]:
        return {"lit": self.value} if self.type is None else {"lit": self.value, "type": self.type}


@dataclass(frozen=True, eq=False)
class ValueList:
    """The right side of a long IN: literals of one type, none NULL. Equal as `Literal`s are: by
    their values' types too ([1, 0], [true, false] and [1.0, 0.0] are other requests)."""

    items: tuple[Any, ...]
    type: str | None = None

    def _key(self) -> tuple[tuple[type, ...], tuple[Any, ...], str | None]:
        return tuple(type(item) for item in self.items), self.items, self.type

    def __eq__(self, other: object) -> bool:
        return isinstance(other, ValueList) and self._key() == other._key()

    def __hash__(self) -> int:
        return hash(self._key())

    def to_json(self) -> dict[str, Any]:
        items = list(self.items)
        return {"values": items} if self.type is None else {"values": items, "type": self.type}


@dataclass(frozen=True)
class Int64List:
    """The right side of a long IN over integers, kept as its wire text (base64 of little-endian
    int64): a list of 500,000 keys travels without 500,000 JSON numbers to write and parse."""

    data: str

    def to_json(self) -> dict[str, Any]:
        return {"int64": self.data}

    def integers(self) -> np.ndarray:
        """The list decoded; raises ScanRequestError when its text is not one."""
        try:
            integers = np.frombuffer(base64.b64decode(self.data, validate=True), dtype="<i8")
        except ValueError as e:  # binascii.Error is one
            raise ScanRequestError(f"int64 must be base64 of little-endian 64-bit integers: {e}") from None
        if not len(integers):
            raise ScanRequestError("int64 must hold at least one value")
        return integers


@dataclass(frozen=True)
class Call:
    op: str
    args: tuple[Expr, ...] = ()

    def to_json(self) -> dict[str, Any]:
        return {"op": self.op, "args": [a.to_json() for a in self.args]}


Expr = Column | Literal | ValueList | Int64List | Call


def allow_deep_expressions() -> None:
    """Let this process recurse as deep as expressions `MAX_EXPRESSION_DEPTH` deep need (Python's
    default of 1,000 frames is reached by about 50 nested parentheses in sqlglot's parser)."""
    sys.setrecursionlimit(max(sys.getrecursionlimit(), _FRAMES_PER_LEVEL * MAX_EXPRESSION_DEPTH + 1_000))


# ---- building expressions ------------------------------------------------------------------------


def col(name: str) -> Column:
    return Column(name)


def lit(value: Any, type_name: str | None = None) -> Literal:
    return Literal(value, type_name)


def call(op: str, *args: Expr) -> Call:
    """Any operation by name (``+``, ``case``, ``extract_year``, ``substring``...)."""
    return Call(op, args)


def compare(op: str, left: Expr, right: Expr) -> Call:
    """``left op right``, op one of ``=``, ``<>``, ``<``, ``<=``, ``>``, ``>=``."""
    return Call(op, (left, right))


def and_(*parts: Expr) -> Call:
    return Call("and", parts)


def or_(*parts: Expr) -> Call:
    return Call("or", parts)


def not_(part: Expr) -> Call:
    return Call("not", (part,))


def conjoin(parts: list[Expr]) -> Expr | None:
    """The AND of `parts`: None for none, the part itself for one."""
    if not parts:
        return None
    return parts[0] if len(parts) == 1 else and_(*parts)


def is_null(part: Expr) -> Call:
    return Call("is_null", (part,))


def is_not_null(part: Expr) -> Call:
    return Call("is_not_null", (part,))


def like(part: Expr, pattern: str) -> Call:
    return Call("like", (part, Literal(pattern)))


def in_(part: Expr, *items: Expr) -> Call:
    """``part IN (items)``: literals, or one `ValueList` / `Int64List`."""
    return Call("in", (part, *items))


def values(items: list[Any], type_name: str | None = None) -> ValueList:
    return ValueList(tuple(items), type_name)


def int64_values(integers: np.ndarray) -> Int64List:
    """An integer IN list in its compact form."""
    data = np.ascontiguousarray(integers, dtype="<i8").tobytes()
    return Int64List(base64.b64encode(data).decode("ascii"))


# ---- the request ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class Named:
    """A result column: its name and the expression computing it."""

    name: str
    expr: Expr

    @classmethod
    def column(cls, name: str) -> Named:
        return cls(name, Column(name))

    def to_json(self) -> dict[str, Any]:
        return {"name": self.name, "expr": self.expr.to_json()}


@dataclass(frozen=True)
class Aggregate:
    """``func(arg) AS name``; no `arg` is COUNT(*)."""

    name: str
    func: str
    arg: Expr | None = None

    def to_json(self) -> dict[str, Any]:
        item: dict[str, Any] = {"name": self.name, "func": self.func}
        return item if self.arg is None else {**item, "arg": self.arg.to_json()}


@dataclass(frozen=True)
class Partition:
    """Hash-partition the output on `keys` (output columns) into `buckets`."""

    keys: tuple[str, ...]
    buckets: int

    def to_json(self) -> dict[str, Any]:
        return {"keys": list(self.keys), "buckets": self.buckets}


@dataclass(frozen=True)
class ScanRequest:
    """A scan of one table: it projects (`columns`, `select`) or aggregates (`group_by`,
    `aggregates`). Build one with these fields, check one received with `from_json`."""

    table: str
    columns: tuple[Named, ...] = ()
    select: tuple[Named, ...] = ()
    filter: Expr | None = None
    group_by: tuple[Named, ...] = ()
    aggregates: tuple[Aggregate, ...] = ()
    having: Expr | None = None
    partition: Partition | None = None
    buckets: tuple[int, ...] | None = None  # storage buckets to read (None: all)
    block_range: tuple[int, int] | None = None  # [start, stop) among the blocks `buckets` keeps
    limit: int | None = None
    version: int | None = None  # the table version to read (None: the current one)

    @property
    def aggregating(self) -> bool:
        return bool(self.group_by or self.aggregates)

    @property
    def outputs(self) -> tuple[Named, ...]:
        """The projected columns, in answer order (empty for an aggregating scan)."""
        return self.columns + self.select

    @property
    def output_names(self) -> list[str]:
        """The answer's columns: projections, or group keys then aggregates (partial states aside)."""
        named = self.group_by + self.outputs
        return [n.name for n in named] + [a.name for a in self.aggregates]

    def to_json(self) -> dict[str, Any]:
        """The JSON form; empty lists and unset fields are left out."""
        data: dict[str, Any] = {"table": self.table}
        if self.columns:
            data["columns"] = [c.name if c.expr == Column(c.name) else c.to_json() for c in self.columns]
        if self.select:
            data["select"] = [s.to_json() for s in self.select]
        if self.filter is not None:
            data["filter"] = self.filter.to_json()
        if self.group_by:
            data["group_by"] = [k.to_json() for k in self.group_by]
        if self.aggregates:
            data["aggregates"] = [a.to_json() for a in self.aggregates]
        if self.having is not None:
            data["having"] = self.having.to_json()
        if self.partition is not None:
            data["partition"] = self.partition.to_json()
        if self.buckets is not None:
            data["buckets"] = list(self.buckets)
        if self.block_range is not None:
            data["block_range"] = list(self.block_range)
        if self.limit is not None:
            data["limit"] = self.limit
        if self.version is not None:
            data["version"] = self.version
        return data

    @classmethod
    def from_json(cls, data: Any) -> ScanRequest:
        """A request from its JSON form: its shape read by `REQUEST` (what `REQUEST_SCHEMA` says),
        then what a shape cannot say; raises ScanRequestError naming what is malformed."""
        fields = _read(REQUEST, data)
        request = cls(
            fields["table"],
            fields.get("columns") or (),
            fields.get("select") or (),
            fields.get("filter"),
            fields.get("group_by") or (),
            fields.get("aggregates") or (),
        )
        if request.aggregating and request.outputs:
            raise ScanRequestError("a scan either projects (columns/select) or aggregates (group_by/aggregates)")
        if not request.aggregating and not request.outputs:
            raise ScanRequestError("a scan needs columns, select, group_by or aggregates")
        names = request.output_names
        duplicates = sorted({n for n in names if names.count(n) > 1})
        if duplicates:
            raise ScanRequestError(f"output name(s) used twice: {', '.join(duplicates)}")
        partition = fields.get("partition")
        missing = [k for k in partition.keys if k not in names] if partition is not None else []
        if missing:
            raise ScanRequestError(f"partition key(s) {', '.join(missing)} are not output columns")
        having = fields.get("having")
        if having is not None:
            if not request.aggregating or partition is not None:
                raise ScanRequestError("having needs group_by/aggregates, and no partition")
            if any(a.func not in MERGED_ON_NODE for a in request.aggregates):
                merged = ", ".join(MERGED_ON_NODE)
                raise ScanRequestError(f"with having, the aggregates are {merged} (merged on the node)")
        limit = fields.get("limit")
        if limit is not None and request.aggregating:
            raise ScanRequestError(_LIMIT_REFUSED)
        return replace(
            request,
            having=having,
            partition=partition,
            buckets=fields.get("buckets"),
            block_range=fields.get("block_range"),
            limit=limit,
            version=fields.get("version"),
        )


# ---- the request's shape: what `from_json` reads and what the JSON Schema says -------------------


def _read(shape: Shape, data: Any) -> Any:
    try:
        return read(shape, data)
    except ShapeError as e:
        raise ScanRequestError(str(e)) from None


_EXPRESSION_REF = Ref(
    name="expression",
    target=lambda: EXPRESSION,  # below: an expression's arguments are expressions
    max_depth=MAX_EXPRESSION_DEPTH,
    too_deep=f"an expression nests more than {MAX_EXPRESSION_DEPTH} deep",
)
_TYPE_NAME = Field("type", Nullable(shape=Text(message="literal type must be a string, not {value!r}")))
EXPRESSION = Variants(
    message="an expression must be an object, not {value!r}",
    untold="an expression needs 'col', 'lit' or 'op': {value!r}",
    variants=(
        (
            "col",
            Object(
                fields=(Field("col", Text(message="column name must be a string, not {value!r}"), required=True),),
                build=lambda f: Column(f["col"]),
            ),
        ),
        (
            "int64",  # decoded where it is typed, once
            Object(
                fields=(
                    Field(
                        "int64",
                        Text(message="int64 must be base64 of little-endian 64-bit integers, not {value!r}"),
                        required=True,
                    ),
                ),
                build=lambda f: Int64List(f["int64"]),
            ),
        ),
        (
            "values",  # what its items mean is read where it is typed
            Object(
                fields=(
                    Field(
                        "values",
                        ListOf(
                            item=Scalar(message="values are booleans, numbers or strings, not {value!r}"),
                            min_items=1,
                            message="values must be a non-empty list without NULLs",
                        ),
                        required=True,
                    ),
                    _TYPE_NAME,
                ),
                build=lambda f: ValueList(tuple(f["values"]), f.get("type")),
            ),
        ),
        (
            "lit",
            Object(
                fields=(
                    Field(
                        "lit",
                        Scalar(message="a literal is null, a boolean, a number or a string, not {value!r}"),
                        required=True,
                    ),
                    _TYPE_NAME,
                ),
                build=lambda f: Literal(f["lit"], f.get("type")),
            ),
        ),
        (
            "op",
            Object(
                fields=(
                    Field("op", Text(message="unsupported operation {value!r}"), required=True),
                    Field("args", ListOf(item=_EXPRESSION_REF, message="args of {within[op]} must be a list")),
                ),
                build=lambda f: Call(f["op"], tuple(f.get("args", ()))),
            ),
        ),
    ),
)


def expr_from_json(data: Any) -> Expr:
    """An expression from its JSON form; raises ScanRequestError naming what is malformed. What
    its literals and lists hold, whether its operations exist and whether it is well typed are
    checked against a table (`storage.scan_typing`): a list of 500,000 keys is read once."""
    return _read(_EXPRESSION_REF, data)


def _named_list(field: str) -> Nullable:
    """Result columns: each a column name, or a name and the expression computing it."""
    named = Either(
        alternatives=(
            Text(build=Named.column),
            Object(
                fields=(Field("name", Text(), required=True), Field("expr", _EXPRESSION_REF, required=True)),
                build=lambda f: Named(f["name"], f["expr"]),
            ),
        ),
        message=f"each entry of {field} is a column name or " + "{{'name': ..., 'expr': ...}}, not {value!r}",
    )
    return Nullable(shape=ListOf(item=named, message=f"{field} must be a list", build=tuple))


_LIMIT_REFUSED = "limit is a non-negative integer, for projections only"
REQUEST = Object(
    message="a scan request names its table: {{'table': ...}}",
    unknown="unknown field(s) in scan request: {names}",
    fields=(
        Field("table", Text(), required=True),
        Field("columns", _named_list("columns")),
        Field("select", _named_list("select")),
        Field("filter", Nullable(shape=_EXPRESSION_REF)),
        Field("group_by", _named_list("group_by")),
        Field(
            "aggregates",
            Nullable(
                shape=ListOf(
                    item=Object(
                        fields=(
                            Field("name", Text(), required=True),
                            Field("func", Text(), required=True),
                            Field("arg", Nullable(shape=_EXPRESSION_REF)),
                        ),
                        message="an aggregate is {{'name': ..., 'func': ..., 'arg': ...}}, not {value!r}",
                        build=lambda f: Aggregate(f["name"], f["func"], f.get("arg")),
                    ),
                    message="aggregates must be a list",
                    build=tuple,
                )
            ),
        ),
        Field("having", Nullable(shape=_EXPRESSION_REF)),
        Field(
            "partition",
            Nullable(
                shape=Object(
                    fields=(
                        Field("keys", ListOf(item=Text(), min_items=1), required=True),
                        Field(
                            "buckets",
                            Whole(
                                minimum=1,
                                maximum=MAX_PARTITION_BUCKETS,
                                message=f"partition buckets must be an integer in 1..{MAX_PARTITION_BUCKETS}, "
                                + "not {value!r}",
                            ),
                            required=True,
                        ),
                    ),
                    message="partition is {{'keys': [output column, ...], 'buckets': N}}",
                    build=lambda f: Partition(tuple(f["keys"]), f["buckets"]),
                )
            ),
        ),
        Field(
            "buckets",
            Nullable(shape=ListOf(item=Whole(), message="buckets must be a list of bucket numbers", build=tuple)),
        ),
        Field(
            "block_range",
            Nullable(
                shape=ListOf(
                    item=Whole(),
                    min_items=2,
                    max_items=2,
                    message="block_range is [start, stop], two block numbers",
                    build=tuple,
                )
            ),
        ),
        Field("limit", Nullable(shape=Whole(minimum=0, message=_LIMIT_REFUSED))),
        Field("version", Nullable(shape=Whole(minimum=1, message="version is a table version number (1 or more)"))),
    ),
)
REQUEST_SCHEMA: dict[str, Any] = json_schema(
    REQUEST,
    title="scan request",
    description="POST /v1/scan: a scan of one table on a storage node; the answer is an Arrow IPC stream.",
)
