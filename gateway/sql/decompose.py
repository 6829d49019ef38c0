"""A co-located query (`gateway.sql.colocation`) split into what every node runs over its own
buckets and what the coordinator runs over their rows (the table ``partials``), by its top SELECT:

- each output row, or each group, whole on one node (no aggregate, or grouped by the key; a window
  only partitioned by it): the nodes' rows as they come, ordered again and limited again (each
  node returns its own top LIMIT + OFFSET rows);
- a DISTINCT over rows split between nodes: distinct on each node, then at the coordinator;
- aggregates over groups split between nodes: each node's partial aggregates by the group keys
  (`gateway.sql.aggregate_parts`), then the coordinator's final aggregates, HAVING, ORDER BY
  and LIMIT over them.

When the SELECT split is the derived table of a top SELECT (`CoLocation.outer`), the coordinator
runs that top SELECT over the merge, as its derived table.

The outputs are named ``__o0``, ``__o1`` ... (their names are the query's), the hidden sort keys
``__s0`` ..., the group keys ``__g0`` ..., the partial aggregates ``__p0`` ....
"""

from __future__ import annotations

from dataclasses import dataclass

from sqlglot import exp
from sqlglot.optimizer.scope import Scope

from gateway.sql.aggregate_parts import final, partials, pieces, walk
from gateway.sql.colocation import ColumnRef, grouping_sets, is_key, split_groups, unkeyed_window

PARTIALS = "partials"  # the nodes' rows, as the coordinator's statement reads them


@dataclass
class Split:
    """What each node runs (`node`, a SELECT over the query's tables) and what the coordinator
    runs over the nodes' rows (`merge`; None: the rows as they come), and how, for EXPLAIN."""

    node: exp.Select
    merge: exp.Select | None
    how: str


def decompose(scope: Scope, key: set[ColumnRef], outer: Scope | None = None) -> Split | str:
    """`scope`'s SELECT (the top one, or the derived table `outer` reads) split, or why it cannot
    be; it is rewritten into the node's (in place) only when it can be."""
    if outer is None:
        return _split(scope, key)
    names = [p.alias_or_name for p in scope.expression.expressions]
    split = _split(scope, key)
    if isinstance(split, str):
        return split
    merge = split.merge or exp.select(*(exp.column(f"__o{i}") for i in range(len(names)))).from_(PARTIALS)
    named = exp.select(*(exp.alias_(exp.column(f"__o{i}"), name) for i, name in enumerate(names)))
    scope.expression.parent.set("this", named.from_(merge.subquery("__merged")))
    return Split(split.node, outer.expression, f"{split.how}; the outer SELECT over the merged rows")


def _split(scope: Scope, key: set[ColumnRef]) -> Split | str:
    select = scope.expression
    if not isinstance(select, exp.Select):
        return "a set operation over hash-placed tables"
    if grouping_sets(select):
        return "grouping sets over rows split between nodes"
    if unkeyed_window(scope, key):
        return "a window not partitioned by the key"
    limits = _limits(select)
    if isinstance(limits, str):
        return limits
    if split_groups(scope, key):
        return _in_parts(select, limits)
    distinct = select.args.get("distinct")
    if distinct is not None and distinct.args.get("on"):
        return "DISTINCT ON over rows split between nodes"
    again = distinct is not None and not any(is_key(p.unalias(), key) for p in select.expressions)
    return _rows(select, limits, again)


def in_parts(select: exp.Select) -> Split | str:
    """`select`'s aggregates split into partial ones and the merge that finishes them, as over groups
    split between nodes (a standing query's: `gateway.sql.standing`), or why they cannot be; it is
    rewritten in place."""
    limits = _limits(select)
    return limits if isinstance(limits, str) else _in_parts(select, limits)


def _limits(select: exp.Select) -> tuple[int | None, int] | str:
    """The LIMIT and OFFSET (None, 0: none), or why they are not numbers."""
    limit, offset = select.args.get("limit"), select.args.get("offset")
    values = []
    for clause in (limit, offset):
        bound = clause.args.get("expression") if isinstance(clause, exp.Limit | exp.Offset) else clause
        if clause is not None and not (isinstance(bound, exp.Literal) and bound.is_int):
            return "a LIMIT or OFFSET that is not a number"
        values.append(int(bound.this) if clause is not None else None)
    return values[0], values[1] or 0


def _rows(select: exp.Select, limits: tuple[int | None, int], distinct: bool) -> Split | str:
    """Each row whole on one node: each node's rows (its top LIMIT + OFFSET), ordered and limited again."""
    limit, offset = limits
    plain = [p.unalias() for p in select.expressions]
    order = select.args.get("order")
    ordered = list(order.expressions) if order is not None else []
    names, hidden = _order_names(select, plain, ordered)
    if distinct and hidden:
        return "an ORDER BY of what a DISTINCT over rows split between nodes does not return"
    keys = []
    for key, name in zip(ordered, names, strict=True):
        key.set("this", exp.column(name))
        keys.append(key.copy())
    select.set("expressions", [exp.alias_(p, f"__o{i}") for i, p in enumerate(plain)] + hidden)
    select.set("offset", None)
    if limit is None:
        select.set("order", None)  # each node's order is lost in the merge: ordered once, there
    else:
        select.set("limit", exp.Limit(expression=exp.Literal.number(limit + offset)))
    if not (keys or limit is not None or offset or distinct):
        return Split(select, None, "the nodes' rows as they come (each row whole on one node)")
    merge = exp.select(*(exp.column(f"__o{i}") for i in range(len(plain)))).from_(PARTIALS)
    how = "distinct on each node, then of the nodes' rows" if distinct else "each row whole on one node"
    how += ", ordered again" if keys else ""
    how += f", each node's top {limit + offset} rows" if limit is not None else ""
    return Split(select, _finished(merge, keys, limits, distinct), how)


def _order_names(
    select: exp.Select, plain: list[exp.Expression], ordered: list[exp.Ordered]
) -> tuple[list[str], list[exp.Expression]]:
    """The column each ORDER BY key becomes (an output's, or a hidden one's), and the hidden ones."""
    names: list[str] = []
    hidden: list[exp.Expression] = []
    for key in ordered:
        value = key.this
        i = _output_read(value, select)
        i = next((i for i, p in enumerate(plain) if p == value), None) if i is None else i
        if i is not None:
            names.append(f"__o{i}")
        else:
            names.append(f"__s{len(hidden)}")
            hidden.append(exp.alias_(value.copy(), names[-1]))
    return names, hidden


def _output_read(value: exp.Expression, select: exp.Select) -> int | None:
    """The output an ORDER BY key names by its alias (an unqualified column) or its position, or None."""
    outputs = select.expressions
    if isinstance(value, exp.Column) and not value.table:
        return next((i for i, p in enumerate(outputs) if isinstance(p, exp.Alias) and p.alias == value.name), None)
    if isinstance(value, exp.Literal) and value.is_int and 0 < int(value.this) <= len(outputs):
        return int(value.this) - 1
    return None


def _in_parts(select: exp.Select, limits: tuple[int | None, int]) -> Split | str:
    """Aggregates over groups split between nodes: partial aggregates on each node, final ones at
    the coordinator (which then evaluates HAVING, the outputs, ORDER BY and LIMIT)."""
    found = partials(select)
    if found is None:
        return "an aggregate other than SUM, COUNT, MIN, MAX and AVG over groups split between nodes"
    if select.args.get("qualify") is not None:
        return "QUALIFY over groups split between nodes"
    group = select.args.get("group")
    groups = list(group.expressions) if group is not None else []
    order = select.args.get("order")
    ordered = list(order.expressions) if order is not None else []
    read_by_alias = {id(o.this) for o in ordered if _output_read(o.this, select) is not None}
    covered = {id(n) for p in found for n in p.walk()} | read_by_alias
    clauses = [*select.expressions, select.args.get("having"), *ordered]
    for node in walk([c for c in clauses if c is not None]):
        if any(node == g for g in groups):
            covered |= {id(n) for n in node.walk()}
        elif isinstance(node, exp.Column) and id(node) not in covered:
            return f"{node.sql()} is read outside its aggregate and the GROUP BY"
    outputs = [exp.alias_(g.copy(), f"__g{i}") for i, g in enumerate(groups)]
    computed: dict[exp.Expression, str] = {}  # each piece computed once (COUNT(*) in the outputs and HAVING)
    finals = []
    for partial in found:
        function = partial.this if isinstance(partial, exp.Filter) else partial
        names = []
        for piece in pieces(partial):
            if piece not in computed:
                computed[piece] = f"__p{len(computed)}"
                outputs.append(exp.alias_(piece, computed[piece]))
            names.append(computed[piece])
        finals.append(final(type(function), [exp.column(name) for name in names]))
    node = exp.Select(expressions=outputs)
    for arg in ("with_", "from_", "joins", "where"):
        node.set(arg, select.args.get(arg))
    if groups:
        node.set("group", exp.Group(expressions=[g.copy() for g in groups]))
    for partial, whole in zip(found, finals, strict=True):
        partial.replace(whole)
    for key in ordered:
        if (i := _output_read(key.this, select)) is not None:
            key.set("this", exp.column(f"__o{i}"))
    for clause in [*select.expressions, select.args.get("having"), *ordered]:
        for inner in list(walk(clause)):
            match = next((i for i, g in enumerate(groups) if inner == g), None)
            if match is not None and inner.parent is not None:
                inner.replace(exp.column(f"__g{match}"))
    merge = exp.Select(expressions=[exp.alias_(p.unalias(), f"__o{i}") for i, p in enumerate(select.expressions)])
    merge.set("from_", exp.From(this=exp.to_table(PARTIALS)))
    if groups:
        merge.set("group", exp.Group(expressions=[exp.column(f"__g{i}") for i in range(len(groups))]))
    merge.set("having", select.args.get("having"))
    by = " by the group keys" if groups else ""
    how = f"partial aggregates on each node{by}, reduced and finished at the coordinator"
    return Split(node, _finished(merge, ordered, limits, select.args.get("distinct") is not None), how)


def _finished(merge: exp.Select, keys: list[exp.Ordered], limits: tuple[int | None, int], distinct: bool) -> exp.Select:
    limit, offset = limits
    if distinct:
        merge.set("distinct", exp.Distinct())
    if keys:
        merge.set("order", exp.Order(expressions=keys))
    if limit is not None:
        merge.set("limit", exp.Limit(expression=exp.Literal.number(limit)))
    if offset:
        merge.set("offset", exp.Offset(expression=exp.Literal.number(offset)))
    return merge
