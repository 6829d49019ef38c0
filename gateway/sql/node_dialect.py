"""The SQL a node's engine (DataFusion) runs: the statement over the sub-queries' views in
DataFusion's dialect (PostgreSQL's, as sqlglot writes it), with the rules of docs/sql.md where
DataFusion's own differ: `/` gives a DOUBLE (DataFusion divides integers into an integer and
decimals into a decimal of its own scale), `/` and `%` by zero give NULL (DataFusion fails), and
STRFTIME's format is strftime's (DataFusion's TO_CHAR reads the same, not PostgreSQL's patterns)."""

from __future__ import annotations

from sqlglot import exp

from gateway.sql.tree import as_double


def _node(node: exp.Expression) -> exp.Expression:
    if isinstance(node, exp.Div):
        return exp.Div(this=as_double(node.this), expression=_nonzero(node.expression))
    if isinstance(node, exp.Mod):
        return exp.Mod(this=node.this, expression=_nonzero(node.expression))
    if isinstance(node, exp.TimeToStr):
        return exp.Anonymous(this="TO_CHAR", expressions=[node.this, node.args["format"]])
    return node


def _nonzero(divisor: exp.Expression) -> exp.Expression:
    return exp.Nullif(this=divisor, expression=exp.Literal.number(0))


def node_text(tree: exp.Expression) -> str:
    """DataFusion's SQL for `tree` (left unchanged)."""
    return tree.transform(_node).sql(dialect="postgres", pretty=True)
