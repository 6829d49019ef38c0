"""Aggregates computed in parts (seed 002: partial, then final): SUM and COUNT are summed, MIN and
MAX taken again, AVG is the sum of SUMs over the sum of COUNTs. Eager aggregation below a join
(`gateway.sql.passes.eager_aggregate`) and co-located queries merged at the coordinator
(`gateway.sql.decompose`) both split a SELECT's aggregates so."""

from __future__ import annotations

from collections.abc import Iterator

from sqlglot import exp

PARTS = {  # an aggregate -> what is computed of it in parts
    exp.Sum: (exp.Sum,),
    exp.Count: (exp.Count,),
    exp.Min: (exp.Min,),
    exp.Max: (exp.Max,),
    exp.Avg: (exp.Sum, exp.Count),
}
CLAUSES = ("expressions", "group", "having", "qualify", "order")  # where a SELECT reads its groups


def partials(select: exp.Select) -> list[exp.Expression] | None:
    """The SELECT's aggregates (a FILTER with its aggregate), or None if one cannot be computed in
    parts; not a window's function, nor GROUPING (of the keys)."""
    found = []
    for clause in CLAUSES:
        for node in walk(select.args.get(clause)):
            if not isinstance(node, exp.AggFunc) or isinstance(node, exp.Grouping):
                continue
            if isinstance(node.parent, exp.Window) and node.arg_key == "this":
                continue
            if type(node) not in PARTS or node.find(exp.Distinct):
                return None
            found.append(node.parent if isinstance(node.parent, exp.Filter) else node)
    return found or None


def pieces(partial: exp.Expression) -> list[exp.Expression]:
    """What is computed of one of `partials` in parts (a FILTER kept on each)."""
    function = partial.this if isinstance(partial, exp.Filter) else partial
    computed = []
    for part in PARTS[type(function)]:
        piece = part(this=function.this.copy())
        if isinstance(partial, exp.Filter):  # each part filtered as the aggregate was
            piece = exp.Filter(this=piece, expression=partial.expression.copy())
        computed.append(piece)
    return computed


def final(function: type, parts: list[exp.Column]) -> exp.Expression:
    """The aggregate over the columns of the `parts` that gives `function`'s value."""
    if function is exp.Avg:
        return exp.Div(this=exp.Sum(this=parts[0]), expression=exp.Sum(this=parts[1]))
    return (exp.Sum if function is exp.Count else function)(this=parts[0])


def walk(value: exp.Expression | list | None) -> Iterator[exp.Expression]:
    for node in value if isinstance(value, list) else [value] if value is not None else []:
        yield from node.walk()
