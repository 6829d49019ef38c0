"""A scan's projection (select-project, no aggregate) as fused CUDA C kernels over all its blocks:
the predicate, the compaction of the rows it keeps and the gather of the projected values, with one
read-back of the answer.

The kernels are those of `gpu_kernels.fused_scan` (the same device block table, tiles, column reads
and predicate, and the same narrowing of sorted runs to row ranges) with another end. Per signature
a `<name>_count` kernel counts each tile's holding rows, an inclusive scan of the counts
(`cupy.cumsum`) gives each tile's place in the answer, and a `<name>_write` kernel evaluates the
predicate again, ranks the tile's holding rows in row order with one scan for all of a thread's
rows (warp shuffles, then the warps' totals in shared memory: `gpu_kernels/cuda/tile_scan.cuh`)
and writes each projected value at its row's place. The answer keeps the row order of the blocks
within a launch; launches (signatures) follow one another. The host waits twice: for the number of
rows (to size the answer) and for the answer. A projection asked for hash-partitioned is moved
bucket by bucket on the device before it is read back (`gpu_kernels/cuda/partition.cu`, the answer
as the payload, its key rows as the hash inputs: a string key's codes through the device table of
its values' hash inputs, `ColumnImage.key_hashes`), its rows per bucket read back with it.

Projected values are 64-bit integers in the kernel (integers, decimals as scaled integers, dates as
days); a column of strings stored as a dictionary or runs is projected as its codes over all its
blocks and turned into its values on the host. A float, a NULL, or anything else the fused kernels
do not compute leaves the projection to the general kernels.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field

import numpy as np
import pyarrow as pa

from gpu_kernels import expr as E
from gpu_kernels.aggregate import NamedExpr
from gpu_kernels.column_image import ColumnImage
from gpu_kernels.column_types import from_domain
from gpu_kernels.cuda_kernels import THREADS, cuda_source
from gpu_kernels.encoded_block import EncodedColumn
from gpu_kernels.encodings import Dictionary, RunLength
from gpu_kernels.expr import Col
from gpu_kernels.fused_scan import (
    FIXED,
    INTEGRAL,
    ITEMS,
    TILE,
    Generator,
    Launch,
    NotFusable,
    block_table,
    bytes_launched,
    columns_of,
    launch_groups,
    rows_launched,
)
from gpu_kernels.partition import bucket_pieces

assert ITEMS * 16 <= 64, "a thread's rows' holding bits are packed as 16-bit counts in one word"

Values = Callable[[np.ndarray], pa.Array]  # an output's 64-bit values (or codes) as its Arrow array
Partition = tuple[tuple[int, ...], int]  # the outputs that are the keys, and the buckets


@dataclass
class Answer:
    """A projection's answer read back: one row of 64-bit values (or codes) per output, and where it
    is partitioned, the rows per bucket (the rows come bucket by bucket)."""

    values: np.ndarray
    counts: np.ndarray | None = None


@dataclass
class FusedProjection:
    """The generated kernels of a scan's projection and how to read their answer."""

    rows: int
    launches: list[Launch]  # each source holds two kernels: `<name>_count` and `<name>_write`
    schema: pa.Schema
    columns_read: int  # columns the predicate and the outputs read (for the scan's statistics)
    images: Mapping[str, ColumnImage]  # the launches' buffers are theirs
    _values: list[Values] = field(repr=False)
    partition: Partition | None = None  # the answer hash-partitioned on the device by these outputs
    hashed: tuple[tuple[str, str] | None, ...] = ()  # per partition key: its codes' hash inputs (a buffer)

    @property
    def tiles(self) -> int:
        return sum(launch.tiles for launch in self.launches)

    @property
    def outputs(self) -> int:
        return len(self._values)

    @property
    def rows_read(self) -> int:
        """Rows the kernels read: those of the blocks' ranges, not launched past them."""
        return rows_launched(self.launches)

    @property
    def bytes_read(self) -> int:
        """Bytes of the resident columns the kernels read (`fused_scan.bytes_launched`)."""
        return bytes_launched(self.launches, self.images)

    def selected(self, answer: Answer) -> int:
        """Rows the predicate kept."""
        return int(answer.values.shape[1])

    def nothing(self) -> Answer:
        """The answer where no row holds."""
        counts = None if self.partition is None else np.zeros(self.partition[1], dtype=np.int64)
        return Answer(np.empty((self.outputs, 0), dtype=np.int64), counts)

    def assemble(self, answer: Answer) -> pa.RecordBatch:
        """The projection from its answer (bucket by bucket where partitioned)."""
        arrays = [to_arrow(column) for to_arrow, column in zip(self._values, answer.values, strict=True)]
        return pa.RecordBatch.from_arrays(arrays, schema=self.schema)

    def pieces(self, answer: Answer) -> list[tuple[pa.RecordBatch, int | None]]:
        """The projection as (batch, bucket) pieces: one, with no bucket, unless partitioned."""
        batch = self.assemble(answer)
        return [(batch, None)] if answer.counts is None else bucket_pieces(batch, answer.counts)


def columns_read(predicate: E.Expr | None, outputs: Sequence[NamedExpr]) -> list[str]:
    """The columns a projection reads, in name order."""
    return columns_of([predicate, *(o.expr for o in outputs)])


def may_fuse(
    columns: Sequence[Mapping[str, EncodedColumn]], predicate: E.Expr | None, outputs: Sequence[NamedExpr]
) -> bool:
    """Whether the kernels can read what a projection reads in every block (`columns`, a block's
    columns each): no NULLs, integers, decimals and dates in any encoding, and other columns
    projected as they are from a dictionary or runs. Asked before the columns are made resident,
    so that a projection the general kernels run (`SELECT *` over free text) evicts nothing."""
    compared = E.columns_of(predicate) if predicate is not None else set()
    for name in columns_read(predicate, outputs):
        for block in columns:
            column = block.get(name)
            if column is None or column.null_count:
                return False
            if E.arrow_kind(column.type).kind not in INTEGRAL and (
                name in compared or not isinstance(column.encoding, Dictionary | RunLength)
            ):
                return False
    return True


def plan(
    images: Mapping[str, ColumnImage],
    blocks: Sequence[int],
    predicate: E.Expr | None,
    outputs: Sequence[NamedExpr],
    partition: Partition | None = None,
) -> FusedProjection | None:
    """The fused kernels of a projection over `blocks` (indices into the images' blocks), its answer
    hash-partitioned on the device where `partition` says; None where the general kernels run it."""
    try:
        return _plan(images, np.asarray(blocks, dtype=np.int64), predicate, list(outputs), partition)
    except (NotFusable, E.ExprError):  # a mistyped task fails on the general kernels, with their message
        return None


def _plan(images: Mapping[str, ColumnImage], blocks: np.ndarray, predicate, outputs: list[NamedExpr], partition):
    any_image = next(iter(images.values()), None)
    if any_image is None or not outputs or not len(any_image.rows):
        raise NotFusable("a projection that reads no column")
    blocks = blocks[any_image.rows[blocks] > 0]
    launches, values = [], None
    for members, ranges, tested in launch_groups(images, blocks, predicate):
        launch, launch_values = _launch(images, members, ranges, tested, outputs)
        launches.append(launch)
        values = values or launch_values
    if values is None:  # no row can hold: any block shows what the outputs are, or that they do not fuse
        whole = np.array([[0, any_image.rows[0]]], dtype=np.int64)
        _, values = _launch(images, np.zeros(1, dtype=np.int64), whole, predicate, outputs)
    schema = pa.schema([pa.field(o.name, o.arrow_type) for o in outputs])
    rows = int(any_image.rows[blocks].sum())
    read = len(columns_read(predicate, outputs))
    hashed = tuple(_hashed_through(images, outputs[k]) for k in partition[0]) if partition else ()
    return FusedProjection(rows, launches, schema, read, images, values, partition, hashed)


def _as_codes(e: E.Expr, type_of: Callable[[str], pa.DataType]) -> bool:
    """Whether an output is projected as its codes: a column the kernels do not compute with."""
    return isinstance(e, Col) and E.arrow_kind(type_of(e.name)).kind not in INTEGRAL


def _hashed_through(images: Mapping[str, ColumnImage], key: NamedExpr) -> tuple[str, str] | None:
    """The buffer (column, key) mapping a partition key's codes to their hash inputs where the key is
    projected as codes; None where its values are their own hash inputs."""
    if _as_codes(key.expr, lambda name: images[name].type):
        return key.expr.name, images[key.expr.name].key_hashes()
    return None


def _launch(images, members: np.ndarray, ranges: np.ndarray, predicate, outputs: list[NamedExpr]):
    """The launch (its two kernels) over the rows `ranges` of `members` (all encoded alike), and how
    each output's values become Arrow."""
    g = Generator(images, members)
    condition = g.condition(predicate) if predicate is not None else "true"
    codes, values = zip(*(_output(g, o) for o in outputs), strict=True)
    fields = FIXED + len(g.fields)
    head = ["long long tiles", "long long blocks", "const long long* __restrict__ table"]
    common = [*head, *g.declared, *g.scalar_params, "long long base"]
    count = ", ".join([*common, "long long* __restrict__ counts"])
    answer = ["const long long* __restrict__ counts", "const long long* __restrict__ ends", "long long n"]
    write = ", ".join([*common, *answer, "long long* __restrict__ out"])
    setup = "\n".join(g.setup.values())
    stores = "\n".join(f"out[{i} * n + to] = {code};" for i, code in enumerate(codes))
    bodies = (_count_body(condition, setup, fields), _write_body(condition, setup, stores, fields))
    digest = hashlib.sha256((count + write + "".join(bodies)).encode()).hexdigest()[:12]
    name = f"cxg_project_{digest}"
    source = cuda_source("fused_scan.cu", "tile_scan.cuh") + "".join(
        f'\nextern "C" __global__ void {name}_{kind}({declared}) {{\n{body}}}\n'
        for kind, declared, body in (("count", count, bodies[0]), ("write", write, bodies[1]))
    )
    table, tiles = block_table(images, members, ranges, g.fields)
    return Launch(source, name, table, tiles, list(g.pointers), g.scalars, members), list(values)


def _output(g: Generator, output: NamedExpr) -> tuple[str, Values]:
    """C code of an output's value at row r, and how its values become Arrow."""
    e = output.expr
    if _as_codes(e, lambda name: g.image(name).type):
        code, _, key_values = g.key(output)  # strings: their codes over every block of the column
        return code, key_values
    v = g.value(e)
    if v.type.kind not in INTEGRAL:
        raise NotFusable(f"a {v.type.kind.value} output")
    return v.code, lambda values: from_domain(values, None, output.arrow_type)


def _tile(condition: str, setup: str, fields: int) -> str:
    """The start of both kernels' loop over tiles: the tile's rows, the bits of the thread's rows
    that hold, and their ranks."""
    return f"""    __shared__ unsigned long long warps[{THREADS // 32}];
    for (long long tile = blockIdx.x; tile < tiles; tile += gridDim.x) {{
        const long long* t = table + cxg_block_of(table, blocks, {fields}, tile) * {fields};
        const long long end = t[2] + t[0], first = t[2] + (tile - t[1]) * {TILE}LL;
        unsigned long long held = 0;  // bit 16k: the thread's row k holds
        {{
            {setup}
            for (int k = 0; k < {ITEMS}; ++k) {{
                const long long r = first + k * {THREADS} + threadIdx.x;
                if (r >= end) {{
                    break;
                }}
                if ({condition}) {{
                    held |= 1ULL << (16 * k);
                }}
            }}
        }}
        unsigned long long total;
"""


def _count_body(condition: str, setup: str, fields: int) -> str:
    every = " + ".join(f"cxg_field(total, {k})" for k in range(ITEMS))
    return (
        _tile(condition, setup, fields)
        + f"""        cxg_tile_rank(held, warps, &total);
        if (threadIdx.x == 0) {{
            counts[base + tile] = {every};
        }}
    }}
"""
    )


def _write_body(condition: str, setup: str, stores: str, fields: int) -> str:
    return (
        _tile(condition, setup, fields)
        + f"""        const unsigned long long before = cxg_tile_rank(held, warps, &total);
        if (held != 0) {{
            long long at = ends[base + tile] - counts[base + tile];
            {setup}
            for (int k = 0; k < {ITEMS}; ++k) {{
                const long long to = at + cxg_field(before, k);
                if (((held >> (16 * k)) & 1ULL) && to < n) {{  // past `n`: an answer outgrowing its room
                    const long long r = first + k * {THREADS} + threadIdx.x;
                    {stores}
                }}
                at += cxg_field(total, k);
            }}
        }}
    }}
"""
    )
