"""A scan's partial aggregate as one fused CUDA C kernel over all its blocks: the predicate, the
decoding of the rows it keeps and their aggregate in one pass, with no host synchronization until
the result (seed 004 §5.1's decode → select → aggregate, without the steps in between).

`plan` generates the kernels of a scan from its predicate, group keys and aggregates over the
columns' images (`gpu_kernels.column_image`: every block's parts in a few flat buffers), or returns
None where the general kernels must run (a column with NULLs, a float, a key that is not a
dictionary or runs, too many groups). Blocks alike (the same encodings where the scan reads) share
one launch: a *device block table* holds, per block, the rows it reads, its first tile and the
fields the kernel reads (where its parts start, bit widths, references, run counts), and a grid of
CUDA blocks strides over the tiles of all the blocks (THREADS x ITEMS rows each, a thread's rows THREADS apart so
that reads coalesce). A thread reads every column at its rows from its encoding (a bit-packed value
from the aligned 64-bit words it spans, a run's value by one search of the run ends per tile and then
walking forward, a dictionary entry by its code), evaluates the predicate with C's short-circuit (a
column is read only once a row still needs it) and adds the row to its group: in registers when
there is one group, else in the CUDA block's accumulators in shared memory; at the end each CUDA
block adds its accumulators to the scan's with one atomic per accumulator. Counts, sums as two exact
64-bit halves, minima and maxima. Decimal arithmetic is exact as on the general path (scaled
integers; an expression whose bound may pass 64 bits is not fused, and so fails there). The source
depends on the blocks' encodings and the query's shape; literals are arguments, so one compiled
kernel serves a query shape whatever its constants. A comparison of a column stored as sorted
runs with a literal (Q6's date range) narrows each block to the rows whose runs hold it
(`row_ranges`): the block's tiles cover only those, a block with none is not launched, and the
comparison is not tested again on the rows read (`unsettled`), where the column has no NULLs.
"""

from __future__ import annotations

import decimal
import functools
import hashlib
import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field

import numpy as np
import pyarrow as pa

from gpu_kernels import expr as E
from gpu_kernels.aggregate import AggSpec, NamedExpr
from gpu_kernels.column_image import ColumnImage, buffer_key
from gpu_kernels.column_types import Kind, from_domain
from gpu_kernels.cuda_kernels import MAX_BLOCKS, THREADS, cuda_source
from gpu_kernels.encoded_block import EncodedBlock
from gpu_kernels.encodings import BitPacked, Dictionary, Encoding, Plain, RunLength
from gpu_kernels.expr import Call, Col, Lit, Type
from gpu_kernels.vectors import INT64_MAX, OverflowInExpression, literal_domain

ITEMS = 4  # rows per thread in a tile (of THREADS x ITEMS rows)
FIXED = 3  # a device block table's row: rows in range, first tile, first row in range; then the fields
TILE = THREADS * ITEMS
MAX_GROUPS = 1024
WARP_GROUPS = 8  # at most this many groups are aggregated warp by warp (`_warp_rows`), more by shared atomics
WARPS = THREADS // 32
SHARED_BYTES = 32 << 10  # a CUDA block's accumulators in shared memory, at most
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
_FLIPPED = {"=": "=", "<": ">", "<=": ">=", ">": "<", ">=": "<="}  # a comparison with its sides swapped
INTEGRAL = (Kind.INT, Kind.DEC, Kind.DATE)  # the kinds a kernel computes with, as 64-bit integers


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
class Launch:
    """One kernel launch: the blocks of one signature, their device block table, what to pass."""

    source: str
    name: str
    table: np.ndarray  # int64, a row per block: rows in range, first tile, first row, the fields the kernel reads
    tiles: int
    buffers: list[tuple[str, str]]  # (column, buffer key) of each pointer argument, in order
    scalars: list  # the literals (NumPy scalars), after the pointers
    blocks: np.ndarray  # the images' blocks its table rows are, in order
    max_grid: int = MAX_BLOCKS  # CUDA blocks at most: they stride over the tiles

    @property
    def grid(self) -> int:
        """CUDA blocks: one per tile, up to max_grid (they stride over the rest)."""
        return max(1, min(self.max_grid, self.tiles))


def rows_launched(launches: Sequence[Launch]) -> int:
    """The rows of the launches' block tables: those of the blocks' ranges (`row_ranges`)."""
    return sum(int(launch.table[:, 0].sum()) for launch in launches)


def bytes_launched(launches: Sequence[Launch], images: Mapping[str, ColumnImage]) -> int:
    """The bytes of the column buffers the launches read, each counted once: of each buffer, the
    parts of the blocks of the launches that take it (whole, though a block's row range may read
    less of them)."""
    blocks: dict[tuple[str, str], list[np.ndarray]] = {}
    for launch in launches:
        for pair in set(launch.buffers):
            blocks.setdefault(pair, []).append(launch.blocks)
    return sum(images[c].block_bytes(key, np.unique(np.concatenate(b))) for (c, key), b in blocks.items())


@dataclass
class FusedScan:
    """The generated kernels of a scan's partial aggregate and how to read their result."""

    rows: int
    groups: int
    slots: int  # accumulators per group
    launches: list[Launch]
    initial: np.ndarray  # the accumulators before any row (uint64): 0, or the extreme of a min or max
    columns_read: int  # columns the predicate, the keys and the aggregates read (for the scan's statistics)
    images: Mapping[str, ColumnImage]  # the launches' buffers are theirs
    _assemble: Callable[[np.ndarray], pa.RecordBatch] = field(repr=False)

    def assemble(self, accumulators: np.ndarray) -> pa.RecordBatch:
        """The partial aggregate from the accumulators (read back to the host)."""
        return self._assemble(accumulators)

    def pieces(self, accumulators: np.ndarray) -> list[tuple[pa.RecordBatch, None]]:
        """The partial aggregate as one piece with no bucket (as `FusedProjection.pieces`)."""
        return [(self.assemble(accumulators), None)]

    @property
    def rows_read(self) -> int:
        """Rows the kernels read: those of the blocks' ranges (`row_ranges`), not launched past them."""
        return rows_launched(self.launches)

    @property
    def bytes_read(self) -> int:
        """Bytes of the resident columns the kernels read (`bytes_launched`)."""
        return bytes_launched(self.launches, self.images)

    def selected(self, accumulators: np.ndarray) -> int:
        """Rows the predicate kept."""
        return int(accumulators.reshape(self.groups, self.slots)[:, 0].sum())


@functools.cache
def prelude() -> str:
    """The device functions every generated kernel uses (`gpu_kernels/cuda/fused_scan.cu`)."""
    return cuda_source("fused_scan.cu")


class Generator:
    """Builds one launch's kernel for the blocks of one signature: its parameters, the fields of the
    device block table it reads, per-column reads, the predicate, keys and updates."""

    def __init__(self, images: Mapping[str, ColumnImage], blocks: np.ndarray):
        self.images, self.blocks = images, blocks
        self.block = int(blocks[0])  # every block of the launch is encoded as this one
        self.pointers: dict[tuple[str, str], str] = {}  # (column, buffer key) -> parameter name
        self.declared: list[str] = []  # the pointer parameters' declarations
        self.scalar_params: list[str] = []
        self.scalars: list = []
        self.fields: dict[tuple[str, str], int] = {}  # (column, field) -> its index in a table row
        self.setup: dict[tuple[str, str], str] = {}  # per-tile statements: (column, path) -> a run search
        self.reads: dict[str, _Value] = {}  # column -> how it is read

    def param(self, declaration: str, value) -> str:
        name = f"s{len(self.scalar_params)}"
        self.scalar_params.append(declaration.format(name=name))
        self.scalars.append(value)
        return name

    def field(self, column: str, name: str) -> str:
        """The block's value of a field of the table (a C expression)."""
        index = self.fields.setdefault((column, name), FIXED + len(self.fields))  # after rows, first tile, first row
        return f"t[{index}]"

    def part(self, column: str, path: str, values) -> str:
        """A pointer to this block's part at `path` (a C expression)."""
        if not isinstance(values, np.ndarray) or values.dtype not in _C_TYPES:
            raise NotFusable("an encoding part that is not an integer array")
        key = buffer_key(path, values)
        if (column, key) not in self.pointers:
            name = self.pointers[(column, key)] = f"p{len(self.pointers)}"
            self.declared.append(f"const {_C_TYPES[values.dtype]}* __restrict__ {name}")
        return f"({self.pointers[(column, key)]} + {self.field(column, key + '.at')})"

    def integer_read(self, column: str, encoding: Encoding, path: str) -> str:
        """C code of the integer stored at row `r` by a plain, bit-packed or run-length encoding."""
        if isinstance(encoding, Plain):
            return f"(long long){self.part(column, path, encoding.values)}[r]"
        if isinstance(encoding, BitPacked):
            packed = self.part(column, path, encoding.packed)
            width, reference = self.field(column, f"{path}.width"), self.field(column, f"{path}.reference")
            return f"(cxg_bits({packed}, r, (int){width}) + {reference})"
        if isinstance(encoding, RunLength):
            run = self.run_read(column, encoding, path)
            return f"(long long){self.part(column, path + '.values', encoding.values)}[{run}]"
        raise NotFusable(f"{encoding.kind} codes")

    def run_read(self, column: str, encoding: RunLength, path: str) -> str:
        """The run holding row `r`: searched once per tile (from the thread's first row), then walked."""
        ends = self.part(column, path + ".ends", encoding.run_ends)
        variable = f"run_{len(self.pointers)}_{path.replace('.', '_')}"
        if (column, path) not in self.setup:
            runs = self.field(column, f"{path}.runs")
            self.setup[(column, path)] = f"long long {variable} = cxg_run({ends}, {runs}, first + threadIdx.x);"
        variable = self.setup[(column, path)].split()[2]
        return f"cxg_walk({ends}, {variable}, r)"

    def image(self, name: str) -> ColumnImage:
        """The column's image, whose blocks here must hold no NULLs."""
        image = self.images.get(name)
        if image is None:
            raise NotFusable(f"no column {name}")
        if image.nulls[self.blocks].any():
            raise NotFusable(f"column {name} has NULLs")
        return image

    def column(self, name: str) -> _Value:
        if name not in self.reads:
            image = self.image(name)
            t = E.arrow_kind(image.type)
            if t.kind not in INTEGRAL:
                raise NotFusable(f"a {t.kind.value} column")
            encoding = image.encodings[self.block]
            if isinstance(encoding, Dictionary):
                code = self.integer_read(name, encoding.codes, "v.codes")
                read = f"(long long){self.part(name, 'v.dictionary', encoding.dictionary)}[{code}]"
            else:
                read = self.integer_read(name, encoding, "v")
            self.reads[name] = _Value(read, t, int(image.bounds[self.blocks].max()))
        return self.reads[name]

    def key(self, key: NamedExpr) -> tuple[str, int, Callable[[np.ndarray], pa.Array]]:
        """(C code of the key's code at row r, its cardinality, codes -> the key's Arrow values): the
        codes number the column's distinct values over every block of its image."""
        if not isinstance(key.expr, Col):
            raise NotFusable("a group key that is an expression")
        name = key.expr.name
        image = self.image(name)
        encoding = image.encodings[self.block]
        if not isinstance(encoding, Dictionary | RunLength):
            raise NotFusable("a group key stored neither as a dictionary nor as runs")
        try:
            values, codes = image.key_codes()
        except ValueError as e:
            raise NotFusable(str(e)) from None
        of = self.part(name, "key", codes)
        if isinstance(encoding, Dictionary):
            code = f"(long long){of}[{self.integer_read(name, encoding.codes, 'v.codes')}]"
        else:
            code = f"(long long){of}[{self.run_read(name, encoding, 'v')}]"

        def key_values(codes: np.ndarray) -> pa.Array:
            if isinstance(values, np.ndarray):
                return from_domain(values[codes].astype(np.int64), None, key.arrow_type)
            return values.take(pa.array(codes)).cast(key.arrow_type)

        return code, len(values), key_values

    def no_nulls(self, name: str) -> None:
        self.image(name)

    # -- expressions -----------------------------------------------------------------------------------

    def value(self, e: E.Expr) -> _Value:
        if isinstance(e, Col):
            return self.column(e.name)
        if isinstance(e, Lit):
            if e.value is None:
                raise NotFusable("a NULL literal")
            if e.type.kind is Kind.BOOL:
                return _Value("true" if e.value else "false", e.type, 1)
            if e.type.kind not in INTEGRAL:
                raise NotFusable(f"a {e.type.kind.value} literal")
            domain = literal_domain(e)
            if not -INT64_MAX - 1 <= domain <= INT64_MAX:
                raise NotFusable("a literal past 64 bits")
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
        if common.kind not in INTEGRAL:
            raise NotFusable(f"a comparison of {common.kind.value} values")
        return f"({_rescaled(a, common).code} {_C_COMPARE[op]} {_rescaled(b, common).code})"

    def arithmetic(self, op: str, a: _Value, b: _Value) -> _Value:
        if Kind.DATE in (a.type.kind, b.type.kind) and not (a.type.kind is b.type.kind is Kind.DATE and op == "-"):
            raise NotFusable("date arithmetic")
        t = E.arithmetic_type(op, a.type, b.type)
        if t.kind not in INTEGRAL:
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
    images: Mapping[str, ColumnImage],
    blocks: Sequence[int],
    predicate: E.Expr | None,
    keys: list[NamedExpr],
    aggregates: list[AggSpec],
) -> FusedScan | None:
    """The fused kernels of a partial aggregate over `blocks` (indices into the images' blocks), or
    None where the general kernels run."""
    try:
        return _plan(images, np.asarray(blocks, dtype=np.int64), predicate, keys, aggregates)
    except (NotFusable, E.ExprError):  # a mistyped task fails on the general kernels, with their message
        return None


def columns_read(predicate: E.Expr | None, keys: list[NamedExpr], aggregates: list[AggSpec]) -> list[str]:
    """The columns a partial aggregate reads, in name order."""
    return columns_of([predicate, *(k.expr for k in keys), *(a.arg for a in aggregates)])


def columns_of(expressions: Sequence[E.Expr | None]) -> list[str]:
    """The columns some expressions read (None: no expression), in name order."""
    return sorted(set().union(*(E.columns_of(e) for e in expressions if e is not None)))


def plan_block(
    block: EncodedBlock, predicate: E.Expr | None, keys: list[NamedExpr], aggregates: list[AggSpec]
) -> FusedScan | None:
    """The fused kernel of one block's partial aggregate (its images are its own arrays, no copy)."""
    names = set(columns_read(predicate, keys, aggregates)) & set(block.columns)
    images = {n: ColumnImage.of(n, [block.columns[n]]) for n in names}
    return plan(images, [0], predicate, keys, aggregates)


def _plan(images: Mapping[str, ColumnImage], blocks: np.ndarray, predicate, keys, aggregates) -> FusedScan:
    any_image = next(iter(images.values()), None)
    if any_image is None:
        raise NotFusable("a scan that reads no column")
    blocks = blocks[any_image.rows[blocks] > 0]
    rows = int(any_image.rows[blocks].sum())
    launches, shape = [], None
    for members, ranges, tested in launch_groups(images, blocks, predicate):
        launch, launch_shape = _launch(images, members, ranges, tested, keys, aggregates)
        if shape is not None and launch_shape[:3] != shape[:3]:
            raise NotFusable("blocks whose keys number their groups differently")
        launches.append(launch)
        shape = launch_shape
    if shape is None:  # no rows at all: the layout of any block will do
        if not len(any_image.rows):
            raise NotFusable("no blocks")
        whole = np.array([[0, any_image.rows[0]]], dtype=np.int64)
        _, shape = _launch(images, np.zeros(1, dtype=np.int64), whole, predicate, keys, aggregates)
    groups, width, slots, key_values, columns = shape
    initial = np.zeros(groups * width, dtype=np.uint64)
    for s in slots.values():
        if s.kind in ("min", "max"):
            initial[s.index :: width] = np.int64(INT64_MAX if s.kind == "min" else -INT64_MAX - 1).view(np.uint64)

    def assemble(accumulators: np.ndarray) -> pa.RecordBatch:
        return _assemble(accumulators.reshape(groups, width), keys, key_values, aggregates, slots)

    return FusedScan(rows, groups, width, launches, initial, columns, images, assemble)


Bound = tuple[str, str, Lit]  # a conjunct comparing a column with a literal: (column, op, literal), column on the left


def launch_groups(
    images: Mapping[str, ColumnImage], blocks: np.ndarray, predicate: E.Expr | None
) -> list[tuple[np.ndarray, np.ndarray, E.Expr | None]]:
    """The launches of a scan over `blocks`: per signature (the encodings of the columns it reads),
    its blocks, their rows [first, end) (`row_ranges`) and the predicate left to test on those rows
    (`unsettled`: without the comparisons their ranges settle in every one of the blocks); a block
    none of whose rows can hold is in none."""
    lo, hi, settled = row_ranges(images, blocks, predicate)
    narrowed = {int(b): i for i, b in enumerate(blocks) if hi[i] > lo[i]}
    signatures: dict[str, list[int]] = {}
    for b in narrowed:
        signatures.setdefault("/".join(image.signatures[b] for image in images.values()), []).append(b)
    groups = []
    for members in signatures.values():
        at = [narrowed[b] for b in members]
        ranges = np.stack([lo[at], hi[at]], axis=1).astype(np.int64)
        groups.append(
            (
                np.array(members, dtype=np.int64),
                ranges,
                unsettled(predicate, frozenset.intersection(*(settled[i] for i in at))),
            )
        )
    return groups


def row_ranges(
    images: Mapping[str, ColumnImage], blocks: np.ndarray, predicate
) -> tuple[np.ndarray, np.ndarray, list[frozenset[Bound]]]:
    """Per block, the rows [first, end) outside which no row can satisfy `predicate`, and the
    comparisons that hold on every row inside: where one of its conjuncts compares a column stored
    as sorted runs (without NULLs) with a literal, the runs that hold turned into a range of rows
    (the CPU path's run ranges, `gpu_kernels.selection`), so that the kernel's tiles cover only
    those rows and the comparison is not tested again on them; [0, rows) where nothing narrows."""
    first = np.zeros(len(blocks), dtype=np.int64)
    end = next(iter(images.values())).rows[blocks].astype(np.int64)
    settled: list[set[Bound]] = [set() for _ in blocks]
    for name, op, literal in _bounds(predicate):
        image = images.get(name)
        if image is None:
            continue
        t = E.arrow_kind(image.type)
        try:
            common = E.common_type(t, literal.type, op)
        except E.ExprError:
            continue
        if t.kind not in INTEGRAL or common.kind is not t.kind or literal.value is None:
            continue
        bound = literal_domain(literal) * 10 ** max(0, common.scale - literal.type.scale)
        factor = 10 ** max(0, common.scale - t.scale)
        if not -INT64_MAX - 1 <= bound <= INT64_MAX:  # past the runs' int64: left to the kernel's test
            continue
        for i, b in enumerate(blocks):
            runs = image.sorted_runs(int(b))
            if runs is None or runs.largest > INT64_MAX // factor:  # runs not in order: every row is read
                continue
            held = _runs_holding(runs.values * factor if factor > 1 else runs.values, op, bound)
            ends = runs.ends
            if held[0] < held[1]:
                first[i] = max(first[i], ends[held[0] - 1] if held[0] else 0)
                end[i] = min(end[i], ends[held[1] - 1])
            else:
                end[i] = first[i]
            if not image.nulls[b]:  # a NULL's slot holds a value of its run, yet the row does not hold
                settled[i].add((name, op, literal))
    return first, np.maximum(end, first), [frozenset(s) for s in settled]


def unsettled(predicate: E.Expr | None, settled: frozenset[Bound]) -> E.Expr | None:
    """`predicate` without its conjuncts that are comparisons (a BETWEEN: both) among `settled`,
    which hold on every row read; None where nothing is left to test."""
    if not isinstance(predicate, Call):
        return predicate
    if predicate.op == "and":
        left = [a for a in (unsettled(arg, settled) for arg in predicate.args) if a is not None]
        return None if not left else left[0] if len(left) == 1 else Call("and", tuple(left))
    bounds = _bounds(predicate)
    return None if bounds and set(bounds) <= settled else predicate


def _bounds(predicate) -> list[tuple[str, str, Lit]]:
    """The conjuncts of `predicate` that compare a column with a literal: (column, op, literal),
    the column on the left (a BETWEEN gives two)."""
    if not isinstance(predicate, Call):
        return []
    if predicate.op == "and":
        return [b for a in predicate.args for b in _bounds(a)]
    args = predicate.args
    if predicate.op == "between" and isinstance(args[0], Col) and all(isinstance(a, Lit) for a in args[1:]):
        return [(args[0].name, ">=", args[1]), (args[0].name, "<=", args[2])]
    if predicate.op not in _FLIPPED or len(args) != 2:
        return []
    if isinstance(args[0], Col) and isinstance(args[1], Lit):
        return [(args[0].name, predicate.op, args[1])]
    if isinstance(args[0], Lit) and isinstance(args[1], Col):
        return [(args[1].name, _FLIPPED[predicate.op], args[0])]
    return []


def _runs_holding(values: np.ndarray, op: str, bound: int) -> tuple[int, int]:
    """The runs [first, end) of sorted run values `values` for which `value op bound` holds."""
    left, right = int(np.searchsorted(values, bound, "left")), int(np.searchsorted(values, bound, "right"))
    held = {"<": (0, left), "<=": (0, right), ">": (right, len(values)), ">=": (left, len(values))}
    return held.get(op, (left, right))  # "=": the runs of that value


def _launch(images, blocks: np.ndarray, ranges: np.ndarray, predicate, keys, aggregates) -> tuple[Launch, tuple]:
    """The launch over the rows `ranges` ([first, end) per block) of `blocks` (all encoded alike)
    and the accumulators' shape it fills."""
    g = Generator(images, blocks)
    condition = g.condition(predicate) if predicate is not None else "true"
    key_reads = [g.key(k) for k in keys]
    groups = math.prod(cardinality for _, cardinality, _ in key_reads)
    if groups > MAX_GROUPS or groups == 0:
        raise NotFusable(f"{groups} possible groups")
    group = "0"
    for code, cardinality, _ in key_reads:
        group = f"({group} * {cardinality}LL + {code})"
    slots: dict[tuple[str, E.Expr | None], Slot] = {("count", None): Slot("count", None, 0)}
    width = 1
    values: list[tuple[Slot, str]] = []
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
            if v.type.kind not in INTEGRAL:
                raise NotFusable(f"{kind} of a {v.type.kind.value} value")
            slots[(kind, spec.arg)] = slot = Slot(kind, spec.arg, width)
            values.append((slot, v.code, v.bound))
            width += 2 if kind == "sum" else 1
    if groups * width * 8 > SHARED_BYTES:
        raise NotFusable(f"{groups} groups of {width} accumulators outgrow a CUDA block's shared memory")
    fields = FIXED + len(g.fields)
    body = _kernel_body(condition, group, values, groups, width, slots.values(), g.setup.values(), fields)
    head = ["long long tiles", "long long blocks", "const long long* __restrict__ table"]
    declared = ", ".join([*head, *g.declared, *g.scalar_params, "unsigned long long* __restrict__ out"])
    digest = hashlib.sha256((declared + body).encode()).hexdigest()[:12]
    name = f"cxg_fused_{digest}"
    source = prelude() + f'\nextern "C" __global__ void {name}({declared}) {{\n{body}}}\n'
    table, tiles = block_table(images, blocks, ranges, g.fields)
    columns = len(g.reads) + len(keys)
    launch = Launch(source, name, table, tiles, list(g.pointers), g.scalars, blocks)
    return launch, (groups, width, slots, [(c, k) for _, c, k in key_reads], columns)


def block_table(
    images, blocks: np.ndarray, ranges: np.ndarray, fields: dict[tuple[str, str], int]
) -> tuple[np.ndarray, int]:
    """The device block table of `blocks`: the rows of its range, its first tile, its range's first
    row, then each field the kernel reads."""
    rows = ranges[:, 1] - ranges[:, 0]
    tiles = -(-rows // TILE)
    table = np.empty((len(blocks), FIXED + len(fields)), dtype=np.int64)
    table[:, 0] = rows
    table[:, 1] = np.cumsum(tiles) - tiles
    table[:, 2] = ranges[:, 0]
    for (column, name), index in fields.items():
        table[:, index] = images[column].fields[name][blocks]
    return table, int(tiles.sum())


def _kernel_body(condition: str, group: str, values, groups: int, width: int, slots, setup, fields: int) -> str:
    """The kernel: accumulators set, the tiles strided over, each CUDA block's accumulators added to
    the scan's. One group accumulates in registers (at the end reduced over each warp by shuffles:
    one shared atomic per warp), a few warp by warp into each warp's own accumulators in shared
    memory, added without atomics (`_warp_rows`; folded over the warps at the end), more in shared
    memory by a shared atomic per row and accumulator, 32-bit ones where 64 bits is a compare-and-swap
    loop: a count's on its low word (a CUDA block counts fewer than 2^32 rows), a sum's on the words
    of its halves (`cxg_add`), an extreme's of values under 2^31 on its low word (`_widened`)."""
    n = groups * width
    copies = WARPS if by_warp(groups, width) else 1  # of the accumulators, in shared memory
    extremes = {s.index: s.kind for s in slots if s.kind in ("min", "max")}
    rowwise = groups > 1 and copies == 1  # a shared atomic a row
    narrow = {s.index for s, _, bound in values if rowwise and s.kind != "sum" and bound < 1 << 31}  # in 32 bits
    initial = "".join(f"s == {i} ? {_EXTREMES[kind, i in narrow]} : " for i, kind in extremes.items())
    least = " || ".join(f"s == {i}" for i, k in extremes.items() if k == "min") or "false"
    greatest = " || ".join(f"s == {i}" for i, k in extremes.items() if k == "max") or "false"
    registers, updates, flush = [], [], []
    if groups == 1:
        registers.append("unsigned long long count = 0;")
        updates.append("++count;")
        flush.append("count = cxg_warp_sum(count);")
        flush.append("if (threadIdx.x % 32 == 0) { atomicAdd(&acc[0], count); }")
        for slot, code, _ in values:
            r = f"a{slot.index}"
            if slot.kind == "sum":
                registers.append(f"unsigned long long {r}[2] = {{0, 0}};")
                updates.append(f"cxg_add_local({r}, {code});")
                flush.append(f"{r}[0] = cxg_warp_sum({r}[0]); {r}[1] = cxg_warp_sum({r}[1]);")
                flush.append(
                    f"if (threadIdx.x % 32 == 0) {{ atomicAdd(&acc[{slot.index}], {r}[0]); "
                    f"atomicAdd(&acc[{slot.index + 1}], {r}[1]); }}"
                )
            else:
                start = "0x7FFFFFFFFFFFFFFFLL" if slot.kind == "min" else "(-0x7FFFFFFFFFFFFFFFLL - 1)"
                better = "<" if slot.kind == "min" else ">"
                registers.append(f"long long {r} = {start};")
                updates.append(f"{{ const long long v = {code}; {r} = v {better} {r} ? v : {r}; }}")
                flush.append(f"{r} = cxg_warp_{slot.kind}({r});")
                update = f"atomic{slot.kind.capitalize()}((long long*)&acc[{slot.index}], {r});"
                flush.append(f"if (threadIdx.x % 32 == 0) {{ {update} }}")
    elif rowwise:  # more groups, or accumulators too many to keep once per warp
        updates.append(f"unsigned long long* g = acc + {group} * {width};")
        updates.append("atomicAdd((unsigned int*)g, 1u);")  # the count's low word: 32 bits, no CAS loop
        for slot, code, _ in values:
            at, extreme = f"g + {slot.index}", f"atomic{slot.kind.capitalize()}"
            if slot.kind == "sum":
                updates.append(f"cxg_add({at}, {code});")
            elif slot.index in narrow:  # its low word, sign-extended before the fold
                updates.append(f"{extreme}((int*)({at}), (int)({code}));")
            else:
                updates.append(f"{extreme}((long long*)({at}), {code});")
    nl = "\n"
    rows = (
        _warp_rows(condition, group, values, width, n)
        if copies > 1
        else f"""for (int k = 0; k < {ITEMS}; ++k) {{
            const long long r = first + k * {THREADS} + threadIdx.x;
            if (r >= end) {{
                break;
            }}
            if ({condition}) {{
                {nl.join("                " + u for u in updates).strip()}
            }}
        }}"""
    )
    return f"""    __shared__ unsigned long long acc[{n * copies}];
    for (int i = threadIdx.x; i < {n * copies}; i += blockDim.x) {{
        {f"const int s = i % {width};" if extremes else ""}
        acc[i] = {initial}0ULL;
    }}
    {nl.join("    " + r for r in registers).strip()}
    __syncthreads();
    for (long long tile = blockIdx.x; tile < tiles; tile += gridDim.x) {{
        const long long* t = table + cxg_block_of(table, blocks, {fields}, tile) * {fields};
        const long long end = t[2] + t[0], first = t[2] + (tile - t[1]) * {TILE}LL;
        {nl.join("        " + x for x in setup).strip()}
        {rows}
    }}
    {nl.join("    " + f for f in flush).strip()}
    __syncthreads();
    {_widened(narrow, n, width)}
    for (int i = threadIdx.x; i < {n}; i += blockDim.x) {{
        const int s = i % {width};
        unsigned long long rows = 0, v = acc[i];
        for (int w = 0; w < {copies}; ++w) {{
            const unsigned long long x = acc[w * {n} + i];
            rows += acc[w * {n} + i - s];
            if ({least}) {{
                v = (long long)x < (long long)v ? x : v;
            }} else if ({greatest}) {{
                v = (long long)x > (long long)v ? x : v;
            }} else if (w > 0) {{
                v += x;
            }}
        }}
        if (rows == 0) {{
            continue;  // no row of this CUDA block fell in the group
        }}
        if ({least}) {{
            atomicMin((long long*)&out[i], (long long)v);
        }} else if ({greatest}) {{
            atomicMax((long long*)&out[i], (long long)v);
        }} else {{
            atomicAdd(&out[i], v);
        }}
    }}
"""


_EXTREMES = {  # a minimum's or maximum's accumulator before any row: in 64 bits, or in its low 32 (narrow)
    ("min", False): "0x7FFFFFFFFFFFFFFFULL",
    ("max", False): "0x8000000000000000ULL",
    ("min", True): "0x7FFFFFFFULL",
    ("max", True): "0x80000000ULL",
}


def _widened(narrow: set[int], n: int, width: int) -> str:
    """The code that sign-extends the accumulators kept in their low 32 bits (at slots `narrow` of
    each group's `width`) to 64, once every row is in: then they fold as the others do."""
    if not narrow:
        return ""
    slots = " || ".join(f"s == {i}" for i in sorted(narrow))
    return f"""for (int i = threadIdx.x; i < {n}; i += blockDim.x) {{
        const int s = i % {width};
        if ({slots}) {{
            acc[i] = (unsigned long long)(long long)(int)(unsigned int)acc[i];
        }}
    }}
    __syncthreads();"""


def by_warp(groups: int, width: int) -> bool:
    """Whether a scan's groups are aggregated warp by warp (`_warp_rows`): a few, whose accumulators
    fit a CUDA block's shared memory once per warp."""
    return 1 < groups <= WARP_GROUPS and groups * width * 8 * WARPS <= SHARED_BYTES


def _warp_rows(condition: str, group: str, values, width: int, n: int) -> str:
    """A tile's rows aggregated warp by warp (a few groups): for each group held in the warp at row
    k, its lanes' count and values reduced and added by one lane into the warp's own accumulators
    (`n` a warp, in shared memory), with no atomics, rather than an atomic per row (a `__syncwarp`
    orders one lead's stores before the next one's loads). A sum of values under 2^26 (2^51) in
    magnitude is reduced in one (two) 32-bit reductions, a single instruction from sm_80 on (Q1's
    five sums: seven); else by shuffles of 64 bits, or of its two halves where 32 values may pass
    64 bits."""
    reads, adds = [], []
    for slot, code, bound in values:
        v = f"v{slot.index}"
        at = f"at + {slot.index}"
        if slot.kind == "sum":
            reads.append(f"const long long {v} = held ? (long long)({code}) : 0LL;")
            if bound * 32 <= INT64_MAX:
                narrow = next((b for b in (26, 51) if bound < 1 << b), None)  # in one or two 32-bit parts
                lanes = f"(mine ? {v} : 0LL)"
                total = (
                    f"cxg_warp_sum{narrow}{lanes}"
                    if narrow
                    else f"(long long)cxg_warp_sum((unsigned long long){lanes})"
                )
                adds.append(f"{{ const long long s = {total};")
                adds.append(f"  if (lead) {{ cxg_add_local({at}, s); }} }}")
            else:
                low, high = f"(unsigned long long)({v} & 0xFFFFFFFFLL)", f"(unsigned long long)({v} >> 32)"
                adds.append(f"{{ const unsigned long long lo = cxg_warp_sum(mine ? {low} : 0ULL);")
                adds.append(f"  const unsigned long long hi = cxg_warp_sum(mine ? {high} : 0ULL);")
                adds.append(f"  if (lead) {{ ({at})[0] += lo; ({at})[1] += hi; }} }}")
        else:
            neutral = "0x7FFFFFFFFFFFFFFFLL" if slot.kind == "min" else "(-0x7FFFFFFFFFFFFFFFLL - 1)"
            better = "<" if slot.kind == "min" else ">"
            reads.append(f"const long long {v} = held ? (long long)({code}) : {neutral};")
            adds.append(f"{{ const long long m = cxg_warp_{slot.kind}(mine ? {v} : {neutral});")
            adds.append(f"  long long* kept = (long long*)({at});")
            adds.append(f"  if (lead && m {better} *kept) {{ *kept = m; }} }}")
    pad = "\n                "
    return f"""for (int k = 0; k < {ITEMS}; ++k) {{
            const long long r = first + k * {THREADS} + threadIdx.x;
            const bool held = r < end && ({condition});
            unsigned int active = __ballot_sync(0xFFFFFFFFu, held);
            if (active == 0u) {{
                continue;
            }}
            const long long g = held ? (long long)({group}) : -1LL;
            {(pad[:-4]).join(reads)}
            while (active != 0u) {{  // the same on every lane of the warp: one group a turn
                const int leader = __ffs(active) - 1;
                const long long lg = __shfl_sync(0xFFFFFFFFu, g, leader);
                const bool mine = g == lg, lead = (int)(threadIdx.x % 32) == leader;
                const unsigned int peers = __ballot_sync(0xFFFFFFFFu, mine);
                unsigned long long* at = acc + (threadIdx.x / 32) * {n} + lg * {width};  // this warp's own
                if (lead) {{
                    *at += (unsigned long long)__popc(peers);
                }}
                {pad.join(adds)}
                __syncwarp();  // the lead's stores seen by the lane that leads this group next
                active &= ~peers;
            }}
        }}"""


def _assemble(accumulators: np.ndarray, keys, key_values, aggregates, slots) -> pa.RecordBatch:
    """The partial aggregate's batch (what `gpu_kernels.aggregate.partial_aggregate` makes) from the
    accumulators, one row per group with rows."""
    fields = [pa.field(k.name, k.arrow_type) for k in keys] + [f for a in aggregates for f in a.fields()]
    counts = accumulators[:, 0].astype(np.int64)
    present = np.flatnonzero(counts)
    if len(present) == 0:
        return pa.RecordBatch.from_pylist([], schema=pa.schema(fields))
    columns = []
    remaining = present.copy()
    codes = []
    for cardinality, _ in reversed(key_values):
        codes.append(remaining % cardinality)
        remaining //= cardinality
    for (_, values_of), key_codes in zip(key_values, reversed(codes), strict=True):
        columns.append(values_of(key_codes))
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
