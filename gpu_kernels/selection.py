"""Row selections within a block: run ranges or a bitmap, whichever is smaller.

A predicate on a run-length column selects whole runs, which stay a list of ``[start, stop)``
ranges (8 bytes each); row-level predicates give a bitmap. A bitmap covers only a *window* of
the block (rows ``lo .. lo + len(mask)``), so a selection confined to a few sorted runs stays
small and the kernels decode only the rows inside its span.
"""

from __future__ import annotations

from gpu_kernels.backend import Array, NumpyBackend

_SPARSE = 8  # a selection of under 1/8 of its span is narrowed by its rows' positions
_DENSE = 25  # one of at least 24/25 of its span is gathered through its bitmap


class Selection:
    """The selected rows of a block of `n` rows: ranges, or a bitmap over a window."""

    __slots__ = ("_count", "_indices", "backend", "lo", "mask", "n", "starts", "stops")

    def __init__(
        self,
        backend: NumpyBackend,
        n: int,
        starts: Array = None,
        stops: Array = None,
        mask: Array = None,
        lo: int = 0,
    ):
        self.backend = backend
        self.n = n
        self.starts, self.stops = starts, stops
        self.mask, self.lo = mask, lo
        self._count: int | None = None
        self._indices: Array | None = None  # a selection is read-only: every column it gathers shares them

    # -- construction -----------------------------------------------------------------------

    @classmethod
    def all(cls, backend: NumpyBackend, n: int) -> Selection:
        xp = backend.xp
        return cls(backend, n, xp.zeros(1 if n else 0, dtype=xp.int64), xp.full(1 if n else 0, n, dtype=xp.int64))

    @classmethod
    def none(cls, backend: NumpyBackend, n: int) -> Selection:
        xp = backend.xp
        return cls(backend, n, xp.zeros(0, dtype=xp.int64), xp.zeros(0, dtype=xp.int64))

    @classmethod
    def from_ranges(cls, backend: NumpyBackend, n: int, starts: Array, stops: Array) -> Selection:
        """Sorted, disjoint ranges (empty ones are dropped, adjacent ones merged)."""
        xp = backend.xp
        keep = stops > starts
        starts, stops = starts[keep].astype(xp.int64), stops[keep].astype(xp.int64)
        if len(starts) > 1:
            joined = starts[1:] == stops[:-1]
            if bool(joined.any()):
                starts = xp.concatenate((starts[:1], starts[1:][~joined]))
                stops = xp.concatenate((stops[:-1][~joined], stops[-1:]))
        if 8 * len(starts) > max(n // 8, 64):
            lo, hi = int(starts[0]), int(stops[-1])
            return cls(backend, n, mask=_ranges_mask(xp, starts, stops, lo, hi), lo=lo)._compact()
        return cls(backend, n, starts, stops)

    @classmethod
    def from_runs(cls, backend: NumpyBackend, n: int, run_ends: Array, flags: Array) -> Selection:
        """The rows of the runs whose flag is set (`run_ends` exclusive, as in Arrow REE)."""
        xp = backend.xp
        ends = run_ends.astype(xp.int64)
        begins = xp.concatenate((xp.zeros(1, dtype=xp.int64), ends[:-1]))
        return cls.from_ranges(backend, n, begins[flags], ends[flags])

    @classmethod
    def from_mask(cls, backend: NumpyBackend, mask: Array, lo: int = 0, n: int | None = None) -> Selection:
        """The rows lo + i where mask[i] is set."""
        return cls(backend, lo + len(mask) if n is None else n, mask=mask, lo=lo)._compact()

    def _compact(self) -> Selection:
        """Trim the bitmap's window to its first and last set bit; turn few runs into ranges."""
        xp = self.backend.xp
        mask = self.mask
        if not len(mask) or not bool(mask.any()):
            return Selection.none(self.backend, self.n)
        first = int(xp.argmax(mask))
        last = len(mask) - int(xp.argmax(mask[::-1]))
        if first or last < len(mask):
            mask = mask[first:last]
        lo = self.lo + first
        edges = xp.flatnonzero(mask[1:] != mask[:-1]) + 1
        if 8 * (len(edges) // 2 + 1) <= max(len(mask) // 8, 64):
            bounds = xp.concatenate((xp.zeros(1, dtype=xp.int64), edges, xp.full(1, len(mask), dtype=xp.int64)))
            return Selection(self.backend, self.n, bounds[0::2] + lo, bounds[1::2] + lo)
        return Selection(self.backend, self.n, mask=mask, lo=lo)

    # -- size and form ----------------------------------------------------------------------

    @property
    def is_ranges(self) -> bool:
        return self.mask is None

    @property
    def nbytes(self) -> int:
        return 8 * len(self.starts) if self.mask is None else (len(self.mask) + 7) // 8

    def count(self) -> int:
        if self._count is None:
            if self.mask is None:
                self._count = int((self.stops - self.starts).sum()) if len(self.starts) else 0
            else:
                self._count = int(self.backend.xp.count_nonzero(self.mask))
        return self._count

    @property
    def is_empty(self) -> bool:
        return self.count() == 0

    @property
    def is_all(self) -> bool:
        return self.count() == self.n

    def span(self) -> tuple[int, int]:
        """First selected row and one past the last (0, 0 when empty)."""
        if self.mask is not None:
            return self.lo, self.lo + len(self.mask)
        if not len(self.starts):
            return 0, 0
        return int(self.starts[0]), int(self.stops[-1])

    # -- conversions ------------------------------------------------------------------------

    def window(self, lo: int, hi: int) -> Array:
        """The selection as a bitmap over rows [lo, hi)."""
        xp = self.backend.xp
        if self.mask is None:
            return _ranges_mask(xp, self.starts, self.stops, lo, hi)
        out = xp.zeros(hi - lo, dtype=bool)
        a, b = max(lo, self.lo), min(hi, self.lo + len(self.mask))
        if a < b:
            out[a - lo : b - lo] = self.mask[a - self.lo : b - self.lo]
        return out

    def as_mask(self) -> Array:
        return self.window(0, self.n)

    def ranges(self) -> tuple[Array, Array]:
        if self.mask is None:
            return self.starts, self.stops
        xp = self.backend.xp
        edges = xp.diff(self.mask.astype(xp.int8), prepend=0, append=0)
        return xp.flatnonzero(edges > 0) + self.lo, xp.flatnonzero(edges < 0) + self.lo

    def indices(self) -> Array:
        if self._indices is None:
            self._indices = self._positions()
        return self._indices

    def _positions(self) -> Array:
        xp = self.backend.xp
        if self.mask is not None:
            return xp.flatnonzero(self.mask) + self.lo
        if len(self.starts) == 1:
            return xp.arange(int(self.starts[0]), int(self.stops[0]), dtype=xp.int64)
        lengths = self.stops - self.starts
        shift = self.starts - (xp.cumsum(lengths) - lengths)
        return xp.arange(self.count(), dtype=xp.int64) + self.backend.repeat(shift, lengths)

    def prefix_counts(self, positions: Array) -> Array:
        """Number of selected rows before each position."""
        xp = self.backend.xp
        if self.mask is not None:
            cumulative = xp.concatenate((xp.zeros(1, dtype=xp.int64), xp.cumsum(self.mask, dtype=xp.int64)))
            return cumulative[xp.clip(positions - self.lo, 0, len(self.mask))]
        lengths = self.stops - self.starts
        before = xp.concatenate((xp.zeros(1, dtype=xp.int64), xp.cumsum(lengths)))
        k = xp.maximum(xp.searchsorted(self.starts, positions, side="right") - 1, 0)
        inside = xp.clip(positions - self.starts[k], 0, lengths[k]) if len(lengths) else 0
        return before[k] + inside

    def take(self, values: Array) -> Array:
        """values[selected rows], for an array over all of the block's rows."""
        return self.take_span(values, 0)

    def take_span(self, values: Array, offset: int) -> Array:
        """The selected rows of `values`, an array holding rows [offset, offset + len(values)).
        Gathered by the rows' positions, found once per selection: indexing by a bitmap costs
        several times more, every column again (a branch per row of the span), unless nearly every
        row of the span is selected."""
        if self.is_all and offset == 0 and len(values) == self.n:
            return values
        if self.mask is None:
            if not len(self.starts):
                return values[:0]
            if len(self.starts) == 1:
                return values[int(self.starts[0]) - offset : int(self.stops[0]) - offset]
            if len(self.starts) <= 8:
                return self.backend.xp.concatenate(
                    [values[int(a) - offset : int(b) - offset] for a, b in zip(self.starts, self.stops, strict=True)]
                )
        lo, hi = self.span()
        if _DENSE * (hi - lo - self.count()) <= hi - lo:  # nearly all: the bitmap reads as a copy
            mask = self.mask if self.mask is not None else self.window(lo, hi)
            return values[lo - offset : hi - offset][mask]
        return values[self.indices() - offset if offset else self.indices()]

    # -- set operations ---------------------------------------------------------------------

    def _combine(self, other: Selection, union: bool) -> Selection:
        (a_lo, a_hi), (b_lo, b_hi) = self.span(), other.span()
        lo, hi = (min(a_lo, b_lo), max(a_hi, b_hi)) if union else (max(a_lo, b_lo), min(a_hi, b_hi))
        if hi <= lo:
            return self if union else Selection.none(self.backend, self.n)
        if self.mask is None and other.mask is None:
            return self._sweep(other, 1 if union else 2)
        a, b = self.window(lo, hi), other.window(lo, hi)
        return Selection.from_mask(self.backend, (a | b) if union else (a & b), lo, self.n)

    def _sweep(self, other: Selection, need: int) -> Selection:
        """Ranges covered by at least `need` of the two (1: union, 2: intersection)."""
        xp = self.backend.xp
        starts = xp.concatenate((self.starts, other.starts))
        stops = xp.concatenate((self.stops, other.stops))
        points = xp.concatenate((starts, stops))
        deltas = xp.concatenate((xp.ones(len(starts), dtype=xp.int64), -xp.ones(len(stops), dtype=xp.int64)))
        order = xp.lexsort(xp.stack((deltas, points)))  # at one position, stops before starts
        points, coverage = points[order], xp.cumsum(deltas[order])
        inside = coverage[:-1] >= need
        return Selection.from_ranges(self.backend, self.n, points[:-1][inside], points[1:][inside])

    def __and__(self, other: Selection) -> Selection:
        if other is self or other.is_all or self.is_empty:
            return self
        if self.is_all or other.is_empty:
            return other
        return self._combine(other, union=False)

    def __or__(self, other: Selection) -> Selection:
        if other is self or other.is_empty or self.is_all:
            return self
        if self.is_empty or other.is_all:
            return other
        return self._combine(other, union=True)

    def __sub__(self, other: Selection) -> Selection:
        if other.is_empty or self.is_empty:
            return self
        return self & ~other

    def __invert__(self) -> Selection:
        xp = self.backend.xp
        if self.mask is not None:
            return Selection.from_mask(self.backend, ~self.as_mask())
        begins = xp.concatenate((xp.zeros(1, dtype=xp.int64), self.stops))
        ends = xp.concatenate((self.starts, xp.full(1, self.n, dtype=xp.int64)))
        return Selection.from_ranges(self.backend, self.n, begins, ends)

    def subset(self, flags: Array) -> Selection:
        """The selected rows whose flag (one per selected row, in order) is set."""
        xp = self.backend.xp
        lo, hi = self.span()
        if _SPARSE * self.count() < hi - lo:  # few rows left: ranges of them, no bitmap of the span
            kept = self.indices()[flags]
            return Selection.from_ranges(self.backend, self.n, kept, kept + 1)
        if self.mask is not None:
            window = self.mask.copy()
            window[self.mask] = flags
            return Selection.from_mask(self.backend, window, self.lo, self.n)
        if len(self.starts) == 1:
            return Selection.from_mask(self.backend, flags, int(self.starts[0]), self.n)
        window = xp.zeros(hi - lo, dtype=bool)
        window[self.indices()[flags] - lo] = True
        return Selection.from_mask(self.backend, window, lo, self.n)

    def __repr__(self) -> str:
        form = f"{len(self.starts)} ranges" if self.mask is None else f"bitmap over rows {self.span()}"
        return f"Selection({self.count()}/{self.n} rows as {form})"


def _ranges_mask(xp, starts: Array, stops: Array, lo: int, hi: int) -> Array:
    """Bitmap over rows [lo, hi) of sorted disjoint ranges."""
    a = xp.clip(starts, lo, hi) - lo
    b = xp.clip(stops, lo, hi) - lo
    keep = b > a  # ranges outside the window vanish; the rest have distinct starts and stops
    delta = xp.zeros(hi - lo + 1, dtype=xp.int32)
    delta[a[keep]] += 1
    delta[b[keep]] -= 1
    return xp.cumsum(delta[:-1]) > 0
