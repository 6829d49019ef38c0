"""What a scan request means against its table: its expressions typed, its answer's schema.

The node checks a request this way before it reads a block; the coordinator and the PySpark data
source learn the schema of the answer the same way, without a node or a scan. The protocol's
expressions become the kernels' own (`gpu_kernels.expr`: literal semantics and the type rules the
kernels evaluate by) in `kernel_expr`, with no JSON between them, and are gathered into the
per-block task whose partial-state layout is the answer's schema; nothing is evaluated here.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, replace

import pyarrow as pa

from gpu_kernels import FUNCTIONS, AggSpec, BlockTask, Kind, NamedExpr, arrow_type
from gpu_kernels import expr as E
from storage.catalog import TableSchema
from storage.scan_protocol import Aggregate, Column, Expr, Int64List, Literal, ScanRequest, ScanRequestError, ValueList
from storage.types import working_type

_BOOLEAN = (Kind.BOOL, Kind.NULL)


@dataclass(frozen=True)
class TypedScan:
    """A request checked against its table; its expressions as the kernels read them (constant
    sub-expressions not yet evaluated: the node's `storage.scan` does that)."""

    request: ScanRequest
    task: BlockTask
    having: E.Expr | None = None  # over the output columns

    @property
    def schema(self) -> pa.Schema:
        """The answer's columns: the projections, or group keys and partial aggregate states."""
        return self.task.schema()


def kernel_expr(expr: Expr) -> E.Expr:
    """The kernels' form of a wire expression: what its literals, lists and operations mean, read
    once. Raises gpu_kernels.expr.ExprError (ScanRequestError for an int64 list that is not one)."""
    if isinstance(expr, Column):
        return E.Col(expr.name)
    if isinstance(expr, Literal):
        return E.literal(expr.value, expr.type)
    if isinstance(expr, ValueList):
        return E.value_list(expr.items, expr.type)
    if isinstance(expr, Int64List):
        return E.integer_list(expr.integers())
    if expr.op not in E.OPS:
        raise E.ExprError(f"unsupported operation {expr.op!r}")
    return E.Call(expr.op, tuple(kernel_expr(a) for a in expr.args))


def typed_output(name: str, expr: Expr, arrow_types: Mapping[str, pa.DataType]) -> NamedExpr:
    """A result column over columns of `arrow_types`: a column keeps its type (string_view is sent
    as string, which every consumer reads), a computed value has its expression's type. Raises
    gpu_kernels.expr.ExprError."""
    return kernel_output(name, kernel_expr(expr), arrow_types)


def kernel_output(name: str, e: E.Expr, arrow_types: Mapping[str, pa.DataType]) -> NamedExpr:
    """`typed_output` of a kernel expression."""
    t = E.check(e, {n: E.arrow_kind(a) for n, a in arrow_types.items()})
    return NamedExpr(name, e, _result_type(e, t, arrow_types))


def _result_type(e: E.Expr, t: E.Type, arrow_types: Mapping[str, pa.DataType]) -> pa.DataType:
    return working_type(arrow_types[e.name]) if isinstance(e, E.Col) else arrow_type(t)


def type_scan(request: ScanRequest, schema: TableSchema) -> TypedScan:
    """Check `request` against the table `schema`; raises ScanRequestError naming the problem."""
    arrow_types = {c.name: c.arrow_type for c in schema.columns}
    kinds = {c.name: E.arrow_kind(c.arrow_type) for c in schema.columns}
    try:
        return _typed(request, arrow_types, kinds)
    except E.ExprError as e:
        raise ScanRequestError(str(e)) from e


def output_schema(request: ScanRequest, schema: TableSchema) -> pa.Schema:
    """The Arrow schema a node answers `request` with."""
    return type_scan(request, schema).schema


def _typed(request: ScanRequest, arrow_types: dict[str, pa.DataType], kinds: dict[str, E.Type]) -> TypedScan:
    predicate = None
    if request.filter is not None:
        predicate = kernel_expr(request.filter)
        if E.check(predicate, kinds).kind not in _BOOLEAN:
            raise ScanRequestError("filter must be a boolean expression")
    task = BlockTask(predicate)
    if request.aggregating:
        keys = tuple(typed_output(k.name, k.expr, arrow_types) for k in request.group_by)
        aggregates = tuple(_aggregate(a, arrow_types, kinds) for a in request.aggregates)
        task = replace(task, keys=keys, aggregates=aggregates)
    else:
        task = replace(task, outputs=tuple(typed_output(o.name, o.expr, arrow_types) for o in request.outputs))
    if request.partition is not None:
        task = replace(task, partition_keys=request.partition.keys, partition_buckets=request.partition.buckets)
    having = None
    if request.having is not None:
        having = kernel_expr(request.having)
        output_kinds = {f.name: E.arrow_kind(f.type) for f in task.schema()}
        if E.check(having, output_kinds).kind not in _BOOLEAN:
            raise ScanRequestError("having must be a boolean expression over the output columns")
    return TypedScan(request, task, having)


def _aggregate(item: Aggregate, arrow_types: dict[str, pa.DataType], kinds: dict[str, E.Type]) -> AggSpec:
    func = item.func
    if func not in FUNCTIONS:
        raise ScanRequestError(f"unsupported aggregate function {func!r}; use one of {', '.join(FUNCTIONS)}")
    if item.arg is None:
        if func != "count":
            raise ScanRequestError(f"{func} needs an argument")
        return AggSpec(item.name, func, None, pa.int64())
    arg = kernel_expr(item.arg)
    t = E.check(arg, kinds)
    if func in ("sum", "avg"):
        if t.kind not in (Kind.INT, Kind.DEC, Kind.FLOAT):
            raise ScanRequestError(f"{func} needs a numeric argument, not {t.kind.value}")
        return AggSpec(item.name, func, arg, arrow_type(t) if t.kind is not Kind.DEC else pa.decimal128(38, t.scale))
    if t.kind in (Kind.INTERVAL, Kind.NULL):
        raise ScanRequestError(f"{func} of {t.kind.value} is not supported")
    return AggSpec(item.name, func, arg, _result_type(arg, t, arrow_types))
