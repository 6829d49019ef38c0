"""Constant sub-expressions evaluated once, before any block is read.

A request may compute with literals only (``date '1998-12-01' - interval '90' day``); the node
and the coordinator fold such parts into one literal with the same scalar arithmetic the
kernels use, so that predicates compare a column with a plain literal and can be decided per
run, per dictionary entry or by a block's min/max.
"""

from __future__ import annotations

from gpu_kernels import expr as E
from gpu_kernels.backend import NumpyBackend
from gpu_kernels.encoded_block import EncodedBlock
from gpu_kernels.evaluate import BlockEvaluator
from gpu_kernels.expr import Call, Lit
from gpu_kernels.vectors import scalar_literal

_FOLDABLE = (*E.ARITHMETIC, "neg", "extract_year", "extract_month", "extract_day", *E.TRUNCATIONS)
_SCALARS = BlockEvaluator(EncodedBlock(0, {}), NumpyBackend())


def fold(e: E.Expr) -> E.Expr:
    """`e` with its constant sub-expressions evaluated (e.g. date '1998-12-01' - interval '90' day)."""
    if not isinstance(e, Call):
        return e
    args = tuple(fold(a) for a in e.args)
    e = Call(e.op, args)
    if e.op in _FOLDABLE and all(isinstance(a, Lit) for a in args):
        E.check(e, {})
        vec = _SCALARS.vec(e, _SCALARS.everything())
        if vec.is_scalar:
            return scalar_literal(vec)
    return e
