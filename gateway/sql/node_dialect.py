"""The SQL a node's engine (DataFusion) runs: the statement over the sub-queries' views in
DataFusion's dialect (PostgreSQL's, as sqlglot writes it, with QUALIFY kept: DataFusion filters
windows itself), with the rules of docs/sql.md where DataFusion's own differ: `/` gives a DOUBLE
(DataFusion divides integers into an integer and decimals into a decimal of its own scale), `/` and
`%` by zero give NULL (DataFusion fails), STRFTIME's format is strftime's (DataFusion's TO_CHAR reads
the same, not PostgreSQL's patterns), and DuckDB's functions DataFusion names or computes otherwise
(`_DUCKDB`). What has no translation here reaches DataFusion as written: it fails to plan, and the
query runs on Spark (the plan says so)."""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
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


def node_text(tree: exp.Expression) -> NodeSql:
    """DataFusion's SQL for `tree` (left unchanged). DataFusion computes a common table expression
    wherever it is read; one of the query's top WITH read more than once is computed once, first,
    and kept (a window over the sales that TPC-DS Q47 reads three times)."""
    tree = tree.transform(_node)  # a copy
    kept = _read_again(tree)
    statements = []
    if kept:
        ctes = tree.args["with_"].expressions
        for i, cte in enumerate(ctes):
            if cte.alias in kept:
                before = [c.copy() for c in ctes[:i] if c.alias not in kept]
                body, inner = cte.this.copy(), cte.this.args.get("with_")
                if before:
                    body.set("with_", exp.With(expressions=before + (inner.expressions if inner else [])))
                statements.append((cte.alias, _written(body)))
        for cte in [c for c in ctes if c.alias in kept]:
            cte.pop()
        _drop_unread(tree)
    return NodeSql(tuple(statements), _written(tree))


@dataclass(frozen=True)
class NodeSql:
    """What a node's DataFusion runs: each kept (name, statement) in order, then the query."""

    kept: tuple[tuple[str, str], ...]
    query: str

    def lines(self) -> list[str]:
        kept = [line for name, sql in self.kept for line in [f"{name}, computed once:", *_indent(sql)]]
        return kept + (["the query:", *_indent(self.query)] if kept else self.query.splitlines())


def _indent(sql: str) -> list[str]:
    return ["  " + line for line in sql.splitlines()]


def _written(tree: exp.Expression) -> str:
    return tree.sql(dialect=_DataFusion, pretty=True, copy=False)


def _drop_unread(tree: exp.Expression) -> None:
    """Drops the top WITH's common table expressions nothing reads any more (those only the kept
    ones read), and the WITH once empty."""
    with_ = tree.args["with_"]
    while unread := [cte for cte in with_.expressions if not _reads(tree, cte.alias, cte)]:
        for cte in unread:
            cte.pop()
    if not with_.expressions:
        tree.set("with_", None)


def _reads(tree: exp.Expression, name: str, skip: exp.Expression) -> bool:
    """Whether `tree` reads `name` outside `skip`."""
    return any(t.name == name and not t.db and not _within(t, skip) for t in tree.find_all(exp.Table))


def _within(node: exp.Expression | None, ancestor: exp.Expression) -> bool:
    while node is not None and node is not ancestor:
        node = node.parent
    return node is ancestor


def _read_again(tree: exp.Expression) -> set[str]:
    """The names of the top WITH's plain common table expressions that the query reads twice or
    more."""
    with_ = tree.args.get("with_")
    if with_ is None or with_.args.get("recursive"):
        return set()
    names = {cte.alias for cte in with_.expressions if not cte.args["alias"].columns}
    reads = Counter(t.name for t in tree.find_all(exp.Table) if t.name in names and not t.db)
    return {name for name, count in reads.items() if count > 1}
