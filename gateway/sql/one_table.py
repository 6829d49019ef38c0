"""The plan of a query over one table: everything on the storage nodes, the coordinator finishes.

The filter, group keys and partial aggregates go into one scan per node holding the table; the
coordinator merges the partial states (reduce/final), then applies HAVING, the select list,
ORDER BY and LIMIT over the merged result. HAVING travels with the scan when every group lives on
one node. A query with a join, a subquery or a common table expression is not one of these.
"""

from __future__ import annotations

import dataclasses

from sqlglot import exp
from sqlglot.optimizer.scope import traverse_scope

from gateway.sql.catalog import RegionCatalog, TableInfo
from gateway.sql.check import CheckedQuery
from gateway.sql.errors import InvalidQuery, SqlError
from gateway.sql.parse import SPARK_AGGREGATES
from gateway.sql.plan import LocalQuery, Plan, TableQuery
from gateway.sql.translate import NotTranslatable, plain, to_ir
from gateway.sql.tree import split_and
from storage import Aggregate, Expr, Named, ScanRequest, col, conjoin

AGGREGATES = {exp.Sum: "sum", exp.Avg: "avg", exp.Min: "min", exp.Max: "max", exp.Count: "count"}
MERGED_ON_NODES = ("count", "sum", "min", "max")  # partial states a node can finish for HAVING


class GroupingError(SqlError):
    code = "grouping_error"
    sqlstate = "42803"


def plan_one_table(query: CheckedQuery, catalog: RegionCatalog) -> Plan | None:
    """The ``nodes`` plan of `query`, or None when it is not a one-table query the nodes can run
    (a join, a subquery, an expression they cannot evaluate)."""
    tree = query.tree
    if not isinstance(tree, exp.Select) or tree.args.get("joins") or tree.args.get("with_"):
        return None
    if tree.find(exp.Window, exp.Qualify, exp.Rollup, exp.Cube, exp.GroupingSets, *SPARK_AGGREGATES):
        return None  # only Spark finishes these; the nodes still filter and project for it
    scopes = traverse_scope(tree)
    if len(scopes) != 1 or len(scopes[0].sources) != 1:
        return None
    [(alias, source)] = scopes[0].sources.items()
    if not isinstance(source, exp.Table):
        return None
    info = catalog.table(source.name)
    scan = TableQuery(0, source.name, alias, info)
    try:
        local = _local_query(tree, query.names, scan, catalog)
    except NotTranslatable:
        return None
    used = {c.name for c in tree.find_all(exp.Column)}
    scan.columns = [c.name for c in info.schema.columns if c.name in used] or [info.schema.columns[0].name]
    return Plan("nodes", query, [scan], local=local)


def _local_query(tree: exp.Select, names: list[str], scan: TableQuery, catalog: RegionCatalog) -> LocalQuery:
    conjuncts = split_and(tree.args["where"].this) if tree.args.get("where") else []
    scan.conjuncts = conjuncts
    scan.filters = [to_ir(c, plain) for c in conjuncts]
    projections = [p.this if isinstance(p, exp.Alias) else p for p in tree.expressions]
    group = list(tree.args["group"].expressions) if tree.args.get("group") else []
    having = tree.args["having"].this if tree.args.get("having") else None
    ordered = list(tree.args["order"].expressions) if tree.args.get("order") else []
    limit, offset = _limit(tree)
    distinct = bool(tree.args.get("distinct"))
    if distinct and not group:
        group = [p.copy() for p in projections]
    group = list({g.sql(): g for g in group}.values())  # `group by a, a` and `distinct a, a` group by a once
    everything = [*projections, *([having] if having is not None else []), *(o.this for o in ordered)]
    aggregates = _aggregates(everything)
    aggregating = bool(group or aggregates)
    request = ScanRequest(scan.table, filter=conjoin(scan.filters))
    select: list[Named] = []
    if aggregating:
        keys = {g.sql(): f"__g{i}" for i, g in enumerate(group)}
        group_by = tuple(Named(name, to_ir(g, plain)) for g, name in zip(group, keys.values(), strict=True))
        request = dataclasses.replace(request, group_by=group_by, aggregates=tuple(a for a, _ in aggregates.values()))

        def final(node: exp.Expression) -> Expr:
            return to_ir(_replace_groups(node, keys, aggregates), _grouped_column)

        outputs = [(name, final(p)) for name, p in zip(names, projections, strict=True)]
        local = LocalQuery(scan, request, True, list(keys.values()), outputs)
        if having is not None:
            local.having = final(having)
            merged_on_nodes = all(a.func in MERGED_ON_NODES for a in request.aggregates)
            if merged_on_nodes and groups_on_one_node(scan.info, group):
                request = dataclasses.replace(request, having=local.having)  # the nodes keep the qualifying groups
    else:
        select = [Named(f"__p{i}", to_ir(p, plain)) for i, p in enumerate(projections)]
        outputs = [(name, col(f"__p{i}")) for i, name in enumerate(names)]
        if not ordered and limit is not None:
            request = dataclasses.replace(request, limit=limit + offset)
        local = LocalQuery(scan, request, False, [], outputs)
    aliases = [p.alias_or_name for p in tree.expressions]  # ORDER BY count(*) reads `_col_1` once qualified
    for i, o in enumerate(ordered):
        key = _output_reference(o.this, aliases, local.outputs)
        if key is None:
            if aggregating:
                key = final(o.this)
            else:
                select.append(Named(f"__o{i}", to_ir(o.this, plain)))
                key = col(f"__o{i}")
        local.order.append((key, bool(o.args.get("desc")), bool(o.args.get("nulls_first"))))
    local.request = dataclasses.replace(request, select=tuple(select))
    local.limit, local.offset = limit, offset
    return local


def groups_on_one_node(info: TableInfo, group: list[exp.Expression]) -> bool:
    """Whether every group of a query grouped by `group` lives on one node: the table is read
    on one node, or its hash keys are among the group keys (TPC-H Q18's subquery: lineitem
    grouped by l_orderkey, 1.5 million groups of which 57 pass HAVING)."""
    if info.replicated or len(info.nodes) <= 1:
        return True
    placement = info.schema.placement
    columns = {g.name for g in group if isinstance(g, exp.Column)}
    return placement.kind == "hash" and set(placement.keys) <= columns


def _limit(tree: exp.Select) -> tuple[int | None, int]:
    limit = tree.args.get("limit")
    offset = tree.args.get("offset")

    def number(node: exp.Expression | None) -> int | None:
        if node is None:
            return None
        value = node.args.get("expression") or node.this
        if not isinstance(value, exp.Literal) or value.is_string:
            raise NotTranslatable("LIMIT/OFFSET must be numbers")
        return int(value.this)

    return number(limit), number(offset) or 0


def _aggregates(nodes: list[exp.Expression]) -> dict[str, tuple[Aggregate, str]]:
    """Distinct aggregate calls (SQL text -> (scan aggregate, partial column))."""
    found: dict[str, tuple[Aggregate, str]] = {}
    for node in nodes:
        for agg in node.find_all(exp.AggFunc):
            if type(agg) not in AGGREGATES:
                raise NotTranslatable(agg.sql())
            key = agg.sql()
            if key in found:
                continue
            name = f"__a{len(found)}"
            inner = agg.this
            if isinstance(agg, exp.Count) and isinstance(inner, exp.Star):
                spec = Aggregate(name, "count")
            elif isinstance(inner, exp.Distinct):
                if not isinstance(agg, exp.Count) or len(inner.expressions) != 1:
                    raise NotTranslatable(key)
                spec = Aggregate(name, "count_distinct", to_ir(inner.expressions[0], plain))
            else:
                spec = Aggregate(name, AGGREGATES[type(agg)], to_ir(inner, plain))
            found[key] = (spec, name)
    return found


def _replace_groups(
    node: exp.Expression, keys: dict[str, str], aggregates: dict[str, tuple[Aggregate, str]]
) -> exp.Expression:
    """The expression over the merged partial result: aggregates and group keys become its columns."""

    def swap(n: exp.Expression) -> exp.Expression:
        if isinstance(n, exp.AggFunc) and n.sql() in aggregates:
            return exp.column(aggregates[n.sql()][1])
        if n.sql() in keys:
            return exp.column(keys[n.sql()])
        return n

    return node.copy().transform(swap)


def _grouped_column(column: exp.Column) -> Expr:
    if column.table or not column.name.startswith("__"):
        raise GroupingError(f"column {column.sql()} must appear in GROUP BY or be used in an aggregate")
    return col(column.name)


def _output_reference(node: exp.Expression, names: list[str], outputs: list[tuple[str, Expr]]) -> Expr | None:
    """ORDER BY <output name> or ORDER BY <position>: that output's expression."""
    if isinstance(node, exp.Column) and not node.table and node.name in names:
        return outputs[names.index(node.name)][1]
    if isinstance(node, exp.Literal) and not node.is_string:
        position = int(node.this)
        if not 1 <= position <= len(outputs):
            raise InvalidQuery(f"ORDER BY position {position} is not in the select list", "42P10")
        return outputs[position - 1][1]
    return None
