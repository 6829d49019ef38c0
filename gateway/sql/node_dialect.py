"""The SQL a node's engine (DataFusion) runs: the statement over the sub-queries' views in
DataFusion's dialect (PostgreSQL's, as sqlglot writes it, with QUALIFY kept: DataFusion filters
windows itself), with the rules of docs/sql.md where DataFusion's own differ: `/` gives a DOUBLE
(DataFusion divides integers into an integer and decimals into a decimal of its own scale), `/` and
`%` by zero give NULL (DataFusion fails), STRFTIME's format is strftime's (DataFusion's TO_CHAR reads
the same, not PostgreSQL's patterns), and DuckDB's functions DataFusion names or computes otherwise
(`_DUCKDB`). What has no translation here reaches DataFusion as written: it fails to plan, and the
query runs on Spark (the plan says so)."""

from __future__ import annotations

from collections.abc import Callable
from typing import ClassVar

from sqlglot import exp, transforms
from sqlglot.dialects.postgres import Postgres
from sqlglot.generators.postgres import PostgresGenerator

from gateway.sql.tree import as_double, count_if_as_sum


class _DataFusion(Postgres):
    class Generator(PostgresGenerator):
        TRANSFORMS: ClassVar[dict] = {
            **PostgresGenerator.TRANSFORMS,
            exp.Select: transforms.preprocess([transforms.eliminate_semi_and_anti_joins]),
        }


def _node(node: exp.Expression) -> exp.Expression:
    if isinstance(node, exp.Div):
        return exp.Div(this=as_double(node.this), expression=_nonzero(node.expression))
    if isinstance(node, exp.Mod):
        return exp.Mod(this=node.this, expression=_nonzero(node.expression))
    if isinstance(node, exp.TimeToStr):
        return exp.Anonymous(this="TO_CHAR", expressions=[node.this, node.args["format"]])
    rule = _DUCKDB.get(type(node))
    return (rule(node) or node) if rule else node


def _nonzero(divisor: exp.Expression) -> exp.Expression:
    return exp.Nullif(this=divisor, expression=exp.Literal.number(0))


def _name_of_day(node: exp.Dayname | exp.Monthname) -> exp.Expression:
    pattern = "%A" if isinstance(node, exp.Dayname) else "%B"  # whole names, as DuckDB's
    return exp.Anonymous(this="TO_CHAR", expressions=[node.this, exp.Literal.string(pattern)])


def _fetch(node: exp.Fetch) -> exp.Expression | None:
    """FETCH FIRST n ROWS ONLY as LIMIT n (DataFusion has no FETCH); WITH TIES and PERCENT stay."""
    options = node.args.get("limit_options")
    if options is not None and (options.args.get("percent") or options.args.get("with_ties")):
        return None
    return exp.Limit(expression=node.args.get("count") or exp.Literal.number(1))


def _regexp_extract(node: exp.RegexpExtract) -> exp.Expression | None:
    """DuckDB's REGEXP_EXTRACT(s, pattern[, group]): the group's text of the first match (group 0:
    the whole match), '' where nothing matches. DataFusion's REGEXP_MATCH gives the groups as a
    list, NULL where nothing matches: the pattern is wrapped in a group of its own, the whole match."""
    pattern, group = node.expression, node.args.get("group")
    if any(node.args.get(a) is not None for a in ("position", "occurrence", "parameters")):
        return None  # a position, an occurrence or options
    if not (isinstance(pattern, exp.Literal) and pattern.is_string):
        return None
    if group is not None and not (isinstance(group, exp.Literal) and group.is_int):
        return None
    index = int(group.name) if group is not None else 0
    whole = exp.Literal.string(f"({pattern.name})")
    match = exp.Bracket(
        this=exp.Paren(this=exp.Anonymous(this="REGEXP_MATCH", expressions=[node.this, whole])),
        expressions=[exp.Literal.number(index + 1)],
        offset=1,
    )
    nothing = exp.If(this=_known(node.this), true=exp.Literal.string(""))
    return exp.Coalesce(this=match, expressions=[exp.Case(ifs=[nothing])])


def _string_split(node: exp.Split) -> exp.Expression | None:
    """DuckDB's STRING_SPLIT(s, separator): DataFusion's STRING_TO_ARRAY (at NULL: into characters),
    but '' is [''] (DataFusion's gives [])."""
    separator = node.expression
    if not (isinstance(separator, exp.Literal) and separator.is_string):
        return None
    separator = separator if separator.name else exp.null()
    empty = exp.EQ(this=node.this.copy(), expression=exp.Literal.string(""))
    whole = exp.Anonymous(this="MAKE_ARRAY", expressions=[exp.Literal.string("")])
    split = exp.Anonymous(this="STRING_TO_ARRAY", expressions=[node.this, separator])
    return exp.Case(ifs=[exp.If(this=empty, true=whole)], default=split)


def _arg_extreme(node: exp.ArgMax | exp.ArgMin) -> exp.Expression | None:
    """DuckDB's ARG_MAX(arg, value) and ARG_MIN: `arg` of the row of the greatest (least) `value`,
    rows where either is NULL left out."""
    if node.args.get("count") is not None:
        return None
    arg, value = node.this, node.expression
    order = exp.Ordered(this=value.copy(), desc=isinstance(node, exp.ArgMax), nulls_first=False)
    first = exp.FirstValue(this=exp.Order(this=arg.copy(), expressions=[order]))
    return exp.Filter(this=first, expression=exp.Where(this=exp.and_(_known(arg), _known(value))))


def _known(node: exp.Expression) -> exp.Expression:
    return exp.Not(this=exp.Is(this=node.copy(), expression=exp.null()))


_DUCKDB: dict[type, Callable[..., exp.Expression | None]] = {
    exp.CountIf: count_if_as_sum,  # a sum of 0 or 1, NULL where never known (PostgreSQL's: a count)
    exp.Sign: lambda node: exp.Anonymous(this="SIGNUM", expressions=[node.this]),
    exp.Dayname: _name_of_day,
    exp.Monthname: _name_of_day,
    exp.DateFromParts: lambda node: exp.Anonymous(
        this="MAKE_DATE", expressions=[node.args["year"], node.args["month"], node.args["day"]]
    ),
    exp.Fetch: _fetch,
    exp.RegexpExtract: _regexp_extract,
    exp.Split: _string_split,
    exp.ArgMax: _arg_extreme,
    exp.ArgMin: _arg_extreme,
}


def node_text(tree: exp.Expression) -> str:
    """DataFusion's SQL for `tree` (left unchanged)."""
    return tree.transform(_node).sql(dialect=_DataFusion, pretty=True)
