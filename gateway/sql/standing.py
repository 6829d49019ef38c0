"""A standing query: a SELECT registered once and kept up to date as rows are appended (seed 002:
partial sub-queries per partition, then a consolidating step).

Its aggregates are split as a co-located query's are (`gateway.sql.decompose`): the *partial*
statement groups rows of its table into partial aggregates by the group keys; the state is the
partial rows of every append so far, *compacted* into one row per group (SUM and COUNT pieces
summed, MIN and MAX taken again); the *result* is the merge statement over the state (the final
aggregates, HAVING, the outputs, ORDER BY and LIMIT). What cannot be kept so is refused naming it:
an aggregate other than SUM, COUNT, MIN, MAX and AVG (a median, a DISTINCT count), a window, a
join of two tables that are not replicated, a subquery, a SELECT without aggregates (it would be
every row). Joins to replicated tables (dimensions) are kept: an append's rows are joined to them
as they are; a new version of a dimension means computing the state again.
"""

from __future__ import annotations

from dataclasses import dataclass

from sqlglot import exp

from gateway.sql.check import check
from gateway.sql.decompose import PARTIALS, in_parts
from gateway.sql.errors import UnsupportedSql
from gateway.sql.node_dialect import node_text
from storage.standing import BUCKET, STATE

_COMPACTED = {exp.Sum: "sum", exp.Count: "sum", exp.Min: "min", exp.Max: "max"}  # a piece -> how pieces combine


class NotIncremental(UnsupportedSql):
    """A SELECT whose result cannot be kept up to date from each append's rows alone."""

    code = "not_incremental"


@dataclass(frozen=True)
class StandingPlan:
    """The statements a standing query runs (DataFusion's SQL), and the table it reads."""

    table: str
    partial: str  # on a node, over the table's rows with their bucket (`storage.standing`): partial rows by bucket
    node_compact: str  # on a node, over its partial rows: one per bucket and group
    compact: str  # over ``partials`` (the state): one partial row per group
    result: str  # over ``partials``: the query's rows
    columns: tuple[str, ...]  # the result's column names (the result statement's are __o0, __o1 ...)
    keys: tuple[str, ...]  # those that name a group (the changes pushed are keyed by them)
    dimensions: tuple[str, ...]  # the replicated tables it joins, read whole
    groups: tuple[str, ...]  # the partial rows' column of each key (``__g0`` ...)
    touched_only: bool  # an append changes the result's rows of the groups it touches, no other


def plan_standing(sql: str, schema: dict[str, dict[str, str]], replicated: set[str] = frozenset()) -> StandingPlan:
    """`sql` checked against `schema` (table -> column -> type) and planned as a standing query over
    its one table that is not in `replicated` (the others its dimensions), or NotIncremental naming
    what keeps it from being one."""
    checked = check(sql, schema)
    tree, explain, names = checked.tree, checked.explain, checked.names
    if explain or not isinstance(tree, exp.Select):
        raise NotIncremental("a standing query is one SELECT (not EXPLAIN, not a set operation)")
    refused = _refused(tree)
    if refused:
        raise NotIncremental(f"{refused} cannot be kept up to date from each append's rows: register it without")
    tables = sorted({t.name for t in tree.find_all(exp.Table)})
    facts = [t for t in tables if t not in replicated] or tables[:1]
    if len(facts) > 1:
        joined = ", ".join(facts)
        raise NotIncremental(
            f"a join of {joined}, none replicated: only joins to replicated tables are kept up to date"
        )
    for join in tree.args.get("joins") or []:
        side, table = join.side.upper(), join.this
        if side in ("RIGHT", "FULL") or (side == "LEFT" and isinstance(table, exp.Table) and table.name == facts[0]):
            raise NotIncremental(
                f"a {side} JOIN that keeps rows of a dimension without {facts[0]}'s: an append would add them again"
            )
    read = [t.name for t in tree.find_all(exp.Table)]
    twice = next((t for t in tables if read.count(t) > 1), None)
    if twice is not None:
        raise NotIncremental(f"table {twice} read twice (a self-join): an append's rows would meet only each other")
    group = tree.args.get("group")
    if group is not None:
        group.set("expressions", [_grouped(g, tree) for g in group.expressions])
    grouped = list(group.expressions) if group is not None else []
    key_of = {}  # output name -> its group's partial column
    for name, output in zip(names, tree.expressions, strict=True):
        at = next((i for i, g in enumerate(grouped) if output.unalias() == g), None)
        if at is not None and name not in key_of:
            key_of[name] = f"__g{at}"
    limited = tree.args.get("limit") is not None or tree.args.get("offset") is not None
    touched_only = len(set(key_of.values())) == len(grouped) and not limited
    split = in_parts(tree)
    if isinstance(split, str):
        raise NotIncremental(f"{split}: it cannot be kept up to date from each append's rows")
    partial = split.node
    pieces = [e for e in partial.expressions if e.alias.startswith("__p")]
    groups = [e.alias for e in partial.expressions if e.alias.startswith("__g")]
    compacted = [exp.column(g) for g in groups] + [
        exp.alias_(exp.func(_COMPACTED[type(_piece(p))], exp.column(p.alias)), p.alias) for p in pieces
    ]
    compact = exp.select(*compacted).from_(PARTIALS)
    if groups:
        compact = compact.group_by(*(exp.column(g) for g in groups))
    node_compact = exp.select(*compacted, exp.column(BUCKET)).from_(STATE).group_by(*groups, exp.column(BUCKET))
    fact = next(t for t in partial.find_all(exp.Table) if t.name == facts[0])
    bucket = exp.column(BUCKET, table=fact.alias_or_name)
    bucketed = partial.copy().select(exp.alias_(bucket, BUCKET)).group_by(bucket.copy())
    assert split.merge is not None  # aggregates: the coordinator's merge
    texts = (node_text(s).query for s in (bucketed, node_compact, compact, split.merge))
    partial_text, node_compact_text, compact_text, result_text = texts
    return StandingPlan(
        facts[0],
        partial_text,
        node_compact_text,
        compact_text,
        result_text,
        tuple(names),
        tuple(key_of),
        tuple(t for t in tables if t != facts[0]),
        tuple(key_of.values()),
        touched_only,
    )


def _refused(select: exp.Select) -> str:
    """What of `select` a standing query cannot keep ("" when nothing)."""
    if select.args.get("with_") is not None or any(isinstance(s, exp.Subquery) for s in select.find_all(exp.Subquery)):
        return "a subquery or a WITH clause"
    window = select.find(exp.Window)
    if window is not None:
        return f"a window function ({window.sql()[:60]})"
    if select.args.get("distinct") is not None:
        return "SELECT DISTINCT"
    distinct = next((a for a in select.find_all(exp.AggFunc) if a.find(exp.Distinct)), None)
    if distinct is not None:
        return f"an aggregate of DISTINCT values ({distinct.sql()[:60]})"
    known = (exp.Sum, exp.Count, exp.Min, exp.Max, exp.Avg)
    other = next((a for a in select.find_all(exp.AggFunc) if not isinstance(a, known)), None)
    if other is not None:
        return f"the aggregate {other.sql()[:60]} (only SUM, COUNT, MIN, MAX and AVG are kept in parts)"
    if select.find(exp.AggFunc) is None:
        return "a SELECT without aggregates (its result would be every row appended)"
    return ""


def _grouped(key: exp.Expression, select: exp.Select) -> exp.Expression:
    """A GROUP BY key as the expression it names: an ordinal or an output's alias read as the output."""
    outputs = select.expressions
    if isinstance(key, exp.Literal) and key.is_int and 1 <= int(key.this) <= len(outputs):
        return outputs[int(key.this) - 1].unalias().copy()
    if isinstance(key, exp.Column) and not key.table:
        named = next((o for o in outputs if isinstance(o, exp.Alias) and o.alias == key.name), None)
        if named is not None and not isinstance(named.this, exp.Column):
            return named.this.copy()
    return key


def _piece(output: exp.Expression) -> exp.Expression:
    inner = output.unalias()
    return inner.this if isinstance(inner, exp.Filter) else inner
