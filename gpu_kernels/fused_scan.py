"""A block's partial aggregate as one fused CUDA C kernel: the predicate, the decoding of the rows
it keeps and their aggregate in one pass over the rows, with no host synchronization until the
result (seed 004 §5.1's decode → select → aggregate, without the steps in between).

`plan` generates the kernel from a scan's predicate, group keys and aggregates for one block's
encodings, or returns None where the general kernels must run (a column with NULLs, a float, a key
that is not a dictionary or runs, too many groups). Each thread takes rows in a grid-stride loop,
reads every column at the row from its encoding (a bit-packed value from the bytes it spans, a
run's value by binary search of the run ends, a dictionary entry by its code), evaluates the
predicate with C's short-circuit (a column is read only once a row still needs it), and adds the
row to its group in the slice of accumulators of its CUDA block: counts, sums as two exact 64-bit
halves, minima and maxima. A second kernel folds the slices into one row of accumulators per
group, the block's only transfer to the host. Decimal arithmetic is exact as on the general path
(scaled integers, an expression whose bound may pass 64 bits is not fused, and so fails there).
The source depends on the block's encodings and the query's shape; widths, references, literals
and cardinalities are arguments, so one compiled kernel serves every block alike.
"""

from __future__ import annotations

import decimal
import functools
import hashlib
import math
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from gpu_kernels import expr as E
from gpu_kernels.aggregate import AggSpec, NamedExpr
from gpu_kernels.column_types import Kind, from_domain
from gpu_kernels.cuda_kernels import cuda_source
from gpu_kernels.decoding import encoding_bound
from gpu_kernels.encoded_block import EncodedBlock, EncodedColumn
from gpu_kernels.encodings import BitPacked, Dictionary, Encoding, Plain, RunLength
from gpu_kernels.expr import Call, Col, Lit, Type
from gpu_kernels.vectors import INT64_MAX, OverflowInExpression, literal_domain

MAX_GROUPS = 1024  # past this many possible groups the accumulators outgrow a CUDA block's share
ACCUMULATOR_BYTES = 16 << 20  # at most this much for every CUDA block's slice together
MAX_IN_ITEMS = 32
_C_TYPES = {
    np.dtype(np.int8): "signed char",
    np.dtype(np.int16): "short",
    np.dtype(np.int32): "int",
    np.dtype(np.int64): "long long",
    np.dtype(np.uint8): "unsigned char",
    np.dtype(np.uint16): "unsigned short",
    np.dtype(np.uint32): "unsigned int",
    np.dtype(np.uint64): "unsigned long long",
}
_C_COMPARE = {"=": "==", "<>": "!=", "<": "<", "<=": "<=", ">": ">", ">=": ">="}
_INTEGRAL = (Kind.INT, Kind.DEC, Kind.DATE)


class NotFusable(Exception):
    """The task or the block is outside what the fused kernel does: the general kernels run it."""


@dataclass(frozen=True)
class _Value:
    code: str  # a C expression of type long long (or a condition, for BOOL)
    type: Type
    bound: int  # |value| <= bound


@dataclass(frozen=True)
class Slot:
    """One accumulator per group: `kind` count, sum (two slots), min or max, of `arg`."""

    kind: str
    arg: E.Expr | None
    index: int


@dataclass
class FusedScan:
    """A generated kernel for one block and the arguments to launch it with."""

    rows: int
    source: str
    name: str  # the scan kernel; f"{name}_init" and f"{name}_reduce" prepare and fold the accumulators
    arguments: list  # host arrays (copied to the device) and NumPy scalars, in the kernel's order
    groups: int
    slots: int  # accumulators per group
    max_blocks: int  # CUDA blocks at most, so that their slices stay within ACCUMULATOR_BYTES
    columns_read: int  # columns the predicate and the aggregates read (for the scan's statistics)
    _assemble: Callable[[np.ndarray], pa.RecordBatch] = field(repr=False)

    def assemble(self, accumulators: np.ndarray) -> pa.RecordBatch:
        """The partial aggregate from the folded accumulators (read back to the host)."""
        return self._assemble(accumulators)

    def selected(self, accumulators: np.ndarray) -> int:
        """Rows the predicate kept."""
        return int(accumulators.reshape(self.groups, self.slots)[:, 0].sum())


@functools.cache
def prelude() -> str:
    """The device functions every generated kernel uses (`gpu_kernels/cuda/fused_scan.cu`)."""
    return cuda_source("fused_scan.cu")


class _Generator:
    """Builds one kernel's source: parameters, per-column reads and the predicate, keys and sums."""

    def __init__(self, block: EncodedBlock):
        self.block = block
        self.params: list[str] = []
        self.arguments: list = []
        self.reads: dict[str, _Value] = {}  # column -> how it is read

    def param(self, declaration: str, value) -> str:
        name = f"a{len(self.params)}"
        self.params.append(declaration.format(name=name))
        self.arguments.append(value)
        return name

    def array(self, values) -> str:
        if not isinstance(values, np.ndarray) or values.dtype not in _C_TYPES:
            raise NotFusable("an encoding part that is not an integer array")
        if not values.flags.c_contiguous:
            raise NotFusable("a strided encoding part")
        return self.param(f"const {_C_TYPES[values.dtype]}* __restrict__ {{name}}", values)

    def integer_read(self, encoding: Encoding) -> str:
        """C code of the integer stored at row `r` by a plain, bit-packed or run-length encoding."""
        if isinstance(encoding, Plain):
            return f"(long long){self.array(encoding.values)}[r]"
        if isinstance(encoding, BitPacked):
            packed = self.array(encoding.packed)
            width = self.param("int {name}", np.int32(encoding.width))
            reference = self.param("long long {name}", np.int64(encoding.reference))
            return f"(cxg_bits({packed}, r, {width}) + {reference})"
        if isinstance(encoding, RunLength):
            return f"(long long){self.array(encoding.values)}[{self.run_read(encoding)}]"
        raise NotFusable(f"{encoding.kind} codes")

    def run_read(self, encoding: RunLength) -> str:
        ends = self.array(encoding.run_ends)
        runs = self.param("long long {name}", np.int64(len(encoding.run_ends)))
        return f"cxg_run({ends}, {runs}, r)"

    def column(self, name: str) -> _Value:
        if name not in self.reads:
            column = self.no_nulls(name)
            t = E.arrow_kind(column.type)
            if t.kind not in _INTEGRAL:
                raise NotFusable(f"a {t.kind.value} column")
            encoding = column.encoding
            if isinstance(encoding, Dictionary):
                code = self.integer_read(encoding.codes)
                read = f"(long long){self.array(encoding.dictionary)}[{code}]"
            else:
                read = self.integer_read(encoding)
            self.reads[name] = _Value(read, t, encoding_bound(encoding))
        return self.reads[name]

    def key(self, key: NamedExpr) -> tuple[str, int, object]:
        """(C code of the key's code at row r, its cardinality, codes -> the key's Arrow values)."""
        if not isinstance(key.expr, Col):
            raise NotFusable("a group key that is an expression")
        encoding = self.no_nulls(key.expr.name).encoding
        if isinstance(encoding, Dictionary):
            code, values = self.integer_read(encoding.codes), encoding.dictionary
        elif isinstance(encoding, RunLength):  # the runs' distinct values, and each run's among them
            encoded = pc.dictionary_encode(encoding.as_arrow().values)
            values = encoded.dictionary.to_numpy() if isinstance(encoding.values, np.ndarray) else encoded.dictionary
            of_run = self.array(encoded.indices.to_numpy().astype(np.int32))
            code = f"(long long){of_run}[{self.run_read(encoding)}]"
        else:
            raise NotFusable("a group key stored neither as a dictionary nor as runs")

        def key_values(codes: np.ndarray) -> pa.Array:
            if isinstance(values, np.ndarray):
                return from_domain(values[codes].astype(np.int64), None, key.arrow_type)
            return values.take(pa.array(codes)).cast(key.arrow_type)

        return code, len(values), key_values

    def no_nulls(self, name: str) -> EncodedColumn:
        """The column, which must hold no NULLs."""
        column = self.block.columns[name]
        if column.validity is not None:
            raise NotFusable(f"column {name} has NULLs")
        return column

    # -- expressions -----------------------------------------------------------------------------------

    def value(self, e: E.Expr) -> _Value:
        if isinstance(e, Col):
            return self.column(e.name)
        if isinstance(e, Lit):
            if e.value is None:
                raise NotFusable("a NULL literal")
            if e.type.kind is Kind.BOOL:
                return _Value("true" if e.value else "false", e.type, 1)
            if e.type.kind not in _INTEGRAL:
                raise NotFusable(f"a {e.type.kind.value} literal")
            domain = literal_domain(e)
            return _Value(self.param("long long {name}", np.int64(domain)), e.type, abs(domain))
        if not isinstance(e, Call):
            raise NotFusable("a list of values")
        args = e.args
        if e.op in ("and", "or"):
            joiner = " && " if e.op == "and" else " || "
            return _boolean("(" + joiner.join(self.condition(a) for a in args) + ")")
        if e.op == "not":
            return _boolean(f"(!{self.condition(args[0])})")
        if e.op in _C_COMPARE:
            return _boolean(self.compare(e.op, self.value(args[0]), self.value(args[1])))
        if e.op == "between":
            x, lo, hi = (self.value(a) for a in args)
            return _boolean(f"({self.compare('>=', x, lo)} && {self.compare('<=', x, hi)})")
        if e.op == "in":
            if not 1 < len(args) <= MAX_IN_ITEMS + 1 or not all(isinstance(a, Lit) for a in args[1:]):
                raise NotFusable("an IN list that is not a few literals")
            x = self.value(args[0])
            return _boolean("(" + " || ".join(self.compare("=", x, self.value(a)) for a in args[1:]) + ")")
        if e.op in ("+", "-", "*"):
            return self.arithmetic(e.op, self.value(args[0]), self.value(args[1]))
        if e.op == "neg":
            x = self.value(args[0])
            return _Value(f"(-{x.code})", x.type, x.bound)
        raise NotFusable(f"operation {e.op}")

    def condition(self, e: E.Expr) -> str:
        v = self.value(e)
        if v.type.kind is not Kind.BOOL:
            raise NotFusable("a condition that is not a comparison")
        return v.code

    def compare(self, op: str, a: _Value, b: _Value) -> str:
        common = E.common_type(a.type, b.type, op)
        if common.kind not in _INTEGRAL:
            raise NotFusable(f"a comparison of {common.kind.value} values")
        return f"({_rescaled(a, common).code} {_C_COMPARE[op]} {_rescaled(b, common).code})"

    def arithmetic(self, op: str, a: _Value, b: _Value) -> _Value:
        if Kind.DATE in (a.type.kind, b.type.kind) and not (a.type.kind is b.type.kind is Kind.DATE and op == "-"):
            raise NotFusable("date arithmetic")
        t = E.arithmetic_type(op, a.type, b.type)
        if t.kind not in _INTEGRAL:
            raise NotFusable(f"{t.kind.value} arithmetic")
        if op == "*":
            bound = a.bound * b.bound
        else:
            if t.kind is Kind.DEC:
                a, b = _rescaled(a, t), _rescaled(b, t)
            bound = a.bound + b.bound
        if bound > INT64_MAX:
            raise NotFusable("an expression that may not fit 64 bits")
        return _Value(f"({a.code} {op} {b.code})", t, bound)


def _boolean(code: str) -> _Value:
    return _Value(code, Type(Kind.BOOL), 1)


def _rescaled(v: _Value, t: Type) -> _Value:
    """`v` at decimal scale `t.scale` (INT and DEC values; dates as they are)."""
    if t.kind is not Kind.DEC or v.type.scale == t.scale:
        return v
    factor = 10 ** (t.scale - v.type.scale)
    if v.bound * factor > INT64_MAX:
        raise NotFusable("a decimal that may not fit 64 bits at the common scale")
    return _Value(f"({v.code} * {factor}LL)", t, v.bound * factor)


def plan(
    block: EncodedBlock, predicate: E.Expr | None, keys: list[NamedExpr], aggregates: list[AggSpec]
) -> FusedScan | None:
    """The fused kernel of this block's partial aggregate, or None where the general kernels run."""
    try:
        return _plan(block, predicate, keys, aggregates)
    except (NotFusable, E.ExprError):  # a mistyped task fails on the general kernels, with their message
        return None


def _plan(block: EncodedBlock, predicate, keys, aggregates) -> FusedScan:
    g = _Generator(block)
    condition = g.condition(predicate) if predicate is not None else "true"
    key_reads = [g.key(k) for k in keys]
    groups = math.prod(cardinality for _, cardinality, _ in key_reads)
    if groups > MAX_GROUPS or groups == 0:
        raise NotFusable(f"{groups} possible groups")
    cardinalities = [g.param("long long {name}", np.int64(c)) for _, c, _ in key_reads]
    group = "0"
    for (code, _, _), cardinality in zip(key_reads, cardinalities, strict=True):
        group = f"({group} * {cardinality} + {code})"
    slots: dict[tuple[str, E.Expr | None], Slot] = {("count", None): Slot("count", None, 0)}
    width = 1
    updates = []
    for spec in aggregates:
        wanted = {"count": [], "sum": ["sum"], "avg": ["sum"], "min": ["min"], "max": ["max"]}.get(spec.func)
        if wanted is None:
            raise NotFusable(f"aggregate {spec.func}")
        integral = pa.types.is_decimal(spec.arrow_type) or pa.types.is_integer(spec.arrow_type)
        if spec.func in ("sum", "avg") and not integral:
            raise NotFusable(f"a sum of type {spec.arrow_type}")
        if spec.func == "count" and isinstance(spec.arg, Col):  # it counts rows: so where no value is NULL
            g.no_nulls(spec.arg.name)
        elif spec.func == "count" and spec.arg is not None:
            g.value(spec.arg)  # what it fuses is never NULL (no division, no CASE)
        for kind in wanted:
            if (kind, spec.arg) in slots:
                continue
            v = g.value(spec.arg)
            if v.type.kind not in _INTEGRAL:
                raise NotFusable(f"{kind} of a {v.type.kind.value} value")
            slots[(kind, spec.arg)] = Slot(kind, spec.arg, width)
            at = f"acc + {width}"
            extreme = f"atomic{kind.capitalize()}((long long*)({at}), {v.code});"
            updates.append(f"cxg_add({at}, {v.code});" if kind == "sum" else extreme)
            width += 2 if kind == "sum" else 1
    grid_cap = max(1, ACCUMULATOR_BYTES // (8 * groups * width))
    digest = hashlib.sha256(("|".join(g.params) + condition + group + "".join(updates)).encode()).hexdigest()[:12]
    name = f"cxg_fused_{digest}"
    source = prelude() + _kernels(name, g.params, condition, group, updates, width, slots.values())
    columns = len(g.reads) + len(keys)

    def assemble(accumulators: np.ndarray) -> pa.RecordBatch:
        return _assemble(accumulators.reshape(groups, width), keys, key_reads, aggregates, slots)

    return FusedScan(block.rows, source, name, g.arguments, groups, width, grid_cap, columns, assemble)


_GRID_STRIDE = (
    "for (long long {i} = (long long)blockIdx.x * blockDim.x + threadIdx.x; {i} < {n}; "
    "{i} += (long long)gridDim.x * blockDim.x)"
)


def _kernels(name: str, params: list[str], condition: str, group: str, updates: list[str], width: int, slots) -> str:
    """The scan kernel and its two helpers: `_init` sets every slice's accumulators (0; the extreme
    values for minima and maxima), `_reduce` folds the CUDA blocks' slices into one."""
    extremes = [(s.index, s.kind) for s in slots if s.kind in ("min", "max")]
    slot = f"const long long s = i % {width};" if extremes else ""
    initial = "".join(
        f"s == {index} ? {'0x7FFFFFFFFFFFFFFFULL' if kind == 'min' else '0x8000000000000000ULL'} : "
        for index, kind in extremes
    )
    minimum = " || ".join(f"s == {i}" for i, k in extremes if k == "min") or "false"
    maximum = " || ".join(f"s == {i}" for i, k in extremes if k == "max") or "false"
    declared = ",\n    ".join(
        ["long long rows", "long long groups", *params, "unsigned long long* __restrict__ accumulators"]
    )
    body = "\n            ".join(updates)
    return f"""
extern "C" __global__ void {name}_init(long long n, unsigned long long* __restrict__ accumulators) {{
    {_GRID_STRIDE.format(i="i", n="n")} {{
        {slot}
        accumulators[i] = {initial}0ULL;
    }}
}}

extern "C" __global__ void {name}({declared}) {{
    unsigned long long* slice = accumulators + (long long)blockIdx.x * groups * {width};
    {_GRID_STRIDE.format(i="r", n="rows")} {{
        if ({condition}) {{
            unsigned long long* acc = slice + {group} * {width};
            atomicAdd(acc, 1ULL);
            {body}
        }}
    }}
}}

extern "C" __global__ void {name}_reduce(long long blocks, long long n,
    const unsigned long long* __restrict__ accumulators, unsigned long long* __restrict__ out) {{
    {_GRID_STRIDE.format(i="i", n="n")} {{
        {slot}
        const bool least = {minimum}, greatest = {maximum};
        unsigned long long folded = accumulators[i];
        for (long long b = 1; b < blocks; ++b) {{
            const unsigned long long v = accumulators[b * n + i];
            if (least) {{
                folded = (long long)v < (long long)folded ? v : folded;
            }} else if (greatest) {{
                folded = (long long)v > (long long)folded ? v : folded;
            }} else {{
                folded += v;
            }}
        }}
        out[i] = folded;
    }}
}}
"""


def _assemble(accumulators: np.ndarray, keys, key_reads, aggregates, slots) -> pa.RecordBatch:
    """The partial aggregate's batch (what `gpu_kernels.aggregate.partial_aggregate` makes) from the
    folded accumulators, one row per group with rows."""
    fields = [pa.field(k.name, k.arrow_type) for k in keys] + [f for a in aggregates for f in a.fields()]
    counts = accumulators[:, 0].astype(np.int64)
    present = np.flatnonzero(counts)
    if len(present) == 0:
        return pa.RecordBatch.from_pylist([], schema=pa.schema(fields))
    columns = []
    remaining = present.copy()
    codes = []
    for _, cardinality, _ in reversed(key_reads):
        codes.append(remaining % cardinality)
        remaining //= cardinality
    for (_, _, key_values), key_codes in zip(key_reads, reversed(codes), strict=True):
        columns.append(key_values(key_codes))
    rows = accumulators[present]
    count_array = pa.array(counts[present], pa.int64())
    for spec in aggregates:
        if spec.func == "count":
            columns.append(count_array)
            continue
        if spec.func in ("sum", "avg"):
            columns.append(_sums(rows, slots[("sum", spec.arg)].index, spec.arrow_type))
            if spec.func == "avg":
                columns.append(count_array)
            continue
        extreme = rows[:, slots[(spec.func, spec.arg)].index].view(np.int64)
        columns.append(from_domain(extreme, None, spec.arrow_type))
    return pa.RecordBatch.from_arrays(columns, schema=pa.schema(fields))


def _sums(rows: np.ndarray, index: int, target: pa.DataType) -> pa.Array:
    """Exact sums from their halves (low 32 bits unsigned, high 32 bits signed)."""
    halves = zip(rows[:, index], rows[:, index + 1].view(np.int64), strict=True)
    totals = [(int(high) << 32) + int(low) for low, high in halves]
    if all(-INT64_MAX - 1 <= t <= INT64_MAX for t in totals):
        return from_domain(np.array(totals, dtype=np.int64), None, target)
    if pa.types.is_decimal(target):
        return pa.array([decimal.Decimal(t).scaleb(-target.scale) for t in totals], target)
    raise OverflowInExpression("an integer sum does not fit 64 bits")
