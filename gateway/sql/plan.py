"""The regular plan (seed 004 §2.2), built automatically from the qualified query.

Every base-table reference becomes a select-project sub-query that runs on the storage nodes:
its own conjuncts (from WHERE and from inner-join ON clauses; an OR of per-table conditions also
yields an implied predicate per table), the columns the rest of the query needs, and the scalar
expressions that use only that table (``l_extendedprice * (1 - l_discount)``). Then:

- a query over one table runs entirely on the nodes: the filter, group keys and partial
  aggregates go into one scan per node holding the table; the coordinator merges the partial
  states (reduce/final), then applies HAVING, the select list, ORDER BY and LIMIT;
- any other query runs on Spark: each sub-query is read through the "cxg" data source and
  Spark executes the joins, subqueries and everything above them;
- a query without FROM is evaluated by the coordinator.
"""

from __future__ import annotations

import itertools
import uuid
from collections.abc import Hashable
from dataclasses import dataclass, field
from typing import Any

from sqlglot import exp
from sqlglot.optimizer.scope import Scope, traverse_scope, walk_in_scope

from gateway.sql.catalog import RegionCatalog, TableInfo
from gateway.sql.errors import SqlError
from gateway.sql.parse import Statement
from gateway.sql.translate import NotTranslatable, to_ir

AGGREGATES = {exp.Sum: "sum", exp.Avg: "avg", exp.Min: "min", exp.Max: "max", exp.Count: "count"}


class GroupingError(SqlError):
    code = "grouping_error"
    sqlstate = "42803"


def split_and(node: exp.Expression | None) -> list[exp.Expression]:
    if node is None:
        return []
    node = node.unnest() if isinstance(node, exp.Paren) else node
    if isinstance(node, exp.And):
        return split_and(node.this) + split_and(node.expression)
    return [node]


def split_or(node: exp.Expression) -> list[exp.Expression]:
    node = node.unnest() if isinstance(node, exp.Paren) else node
    if isinstance(node, exp.Or):
        return split_or(node.this) + split_or(node.expression)
    return [node]


def factor_or(node: exp.Expression) -> list[exp.Expression]:
    """Conjuncts equivalent to `node`, with what every branch of a disjunction shares taken out:
    (a AND b) OR (a AND c) -> [a, b OR c]. TPC-H Q19 repeats its join condition and two filters in
    each branch; taken out, they become a join edge and filters the nodes evaluate first."""
    branches = [split_and(branch) for branch in split_or(node)]
    if len(branches) < 2:
        return [node]
    common = [c for c in branches[0] if all(any(c == d for d in other) for other in branches[1:])]
    if not common:
        return [node]
    rest = [[d for d in branch if not any(d == c for c in common)] for branch in branches]
    if any(not parts for parts in rest):  # (a) OR (a AND b) is a
        return common
    return [*common, exp.or_(*(and_all(parts) for parts in rest), copy=False)]


def and_all(parts: list[exp.Expression]) -> exp.Expression | None:
    """AND of the parts, keeping the nodes themselves (subqueries inside stay the same objects)."""
    return exp.and_(*parts, copy=False) if parts else None


BRIEF_VALUES = 8  # EXPLAIN shows this many values of a longer IN list


def brief(node: exp.Expression) -> str:
    """The SQL text of `node` with long IN lists cut short (for EXPLAIN)."""
    if not any(len(n.expressions) > BRIEF_VALUES for n in node.find_all(exp.In)):
        return node.sql()
    node = node.copy()
    for found in list(node.find_all(exp.In)):
        values = found.expressions
        if len(values) > BRIEF_VALUES:
            found.set("expressions", [*values[:BRIEF_VALUES], exp.var(f"... ({len(values):,} values)")])
    return node.sql()


def has_subquery(node: exp.Expression) -> bool:
    return any(isinstance(n, (exp.Select, exp.Subquery, exp.Exists)) for n in node.walk())


def _sort_in_one_partition(tree: exp.Expression) -> None:
    """Spark range-partitions the input of an ORDER BY without LIMIT, and finds the ranges with a
    sampling job of its own (0.05-0.15 s here); gathered into one partition first (a REPARTITION(1)
    hint), the rows are sorted there without one. The whole result goes to one client anyway."""
    if isinstance(tree, exp.Select) and tree.args.get("order") is not None and tree.args.get("limit") is None:
        hint = tree.args.get("hint")
        single = exp.Anonymous(this="REPARTITION", expressions=[exp.Literal.number(1)])
        tree.set("hint", exp.Hint(expressions=[*(hint.expressions if hint is not None else []), single]))


def _and_ir(parts: list[dict[str, Any]]) -> dict[str, Any] | None:
    if not parts:
        return None
    return parts[0] if len(parts) == 1 else {"op": "and", "args": parts}


def _plain(column: exp.Column) -> dict[str, Any]:
    return {"col": column.name}


def request_key(value: Any) -> Hashable:
    """A hashable form of a scan request, equal for equal requests: finding identical sub-queries
    this way costs a fraction of writing their IN lists (up to `MAX_KEYS` values) as JSON text."""
    if isinstance(value, dict):
        return tuple(sorted((k, tuple(v) if k == "values" else request_key(v)) for k, v in value.items()))
    if isinstance(value, list):
        return tuple(request_key(v) for v in value)
    return type(value), value  # 1, 1.0 and True are equal in Python, not in a request


@dataclass
class Scan:
    """One select-project sub-query: what a table reference asks of the nodes."""

    index: int
    table: str
    alias: str
    info: TableInfo
    conjuncts: list[exp.Expression] = field(default_factory=list)  # moved out of the query
    implied: list[exp.Expression] = field(default_factory=list)  # derived from ORs, also kept above
    filters: list[dict[str, Any]] = field(default_factory=list)
    computed: dict[str, tuple[exp.Expression, dict[str, Any]]] = field(default_factory=dict)
    columns: list[str] = field(default_factory=list)
    reductions: list[str] = field(default_factory=list)  # semi- and anti-join filters added at run time
    rows: int | None = None  # rows the sub-query returns, when counted before Spark runs
    view: str = ""
    group_by: list[dict[str, Any]] = field(default_factory=list)  # pre-aggregated or distinct: its keys
    aggregates: list[dict[str, Any]] = field(default_factory=list)  # ... and partial aggregates
    partials: list[str] = field(default_factory=list)  # the partial aggregates, for EXPLAIN

    def request(self) -> dict[str, Any]:
        if self.group_by:
            request: dict[str, Any] = {"table": self.table, "group_by": self.group_by, "aggregates": self.aggregates}
        else:
            request = {"table": self.table, "columns": self.columns}
            if self.computed:
                request["select"] = [{"name": name, "expr": ir} for name, (_, ir) in self.computed.items()]
        if self.filters:
            request["filter"] = _and_ir(self.filters)
        return request

    def explain(self) -> list[str]:
        lines = [f"[{self.index}] {self.table} AS {self.alias} on {self.info.where()}"]
        lines.append(f"    columns: {', '.join(self.columns)}")
        for name, (expression, _) in self.computed.items():
            lines.append(f"    computed: {name} = {expression.sql()}")
        for conjunct in self.conjuncts:
            lines.append(f"    filter: {brief(conjunct)}")
        for implied in self.implied:
            lines.append(f"    implied filter: {brief(implied)}")
        keys = ", ".join(k["name"] for k in self.group_by)
        if self.aggregates:
            lines.append(f"    pre-aggregated on the nodes: group by {keys}; {', '.join(self.partials)}")
        elif self.group_by:
            lines.append(f"    distinct on the nodes: {keys} (the subquery's rows are only tested)")
        for reduction in self.reductions:
            lines.append(f"    {reduction}")
        if self.rows is not None:
            lines.append(f"    rows: {self.rows:,}")
        return lines


@dataclass
class LocalQuery:
    """A one-table query run on the nodes; the coordinator finishes it."""

    scan: Scan
    request: dict[str, Any]  # the scan sent to each node
    aggregating: bool
    keys: list[str]  # group key columns of the merged partial result
    outputs: list[tuple[str, dict[str, Any]]]  # result columns over the merged result
    having: dict[str, Any] | None = None
    order: list[tuple[dict[str, Any], bool, bool]] = field(default_factory=list)  # (key, descending, nulls first)
    limit: int | None = None
    offset: int = 0


@dataclass(frozen=True)
class Edge:
    """An equality between two sub-queries' columns that lets one's values filter the other:
    an inner equi-join (both ways), or a correlated subquery's condition (outer to inner only)."""

    left: Scan
    left_column: str
    right: Scan
    right_column: str
    both_ways: bool = True

    def directions(self) -> list[tuple[Scan, str, Scan, str]]:
        forward = [(self.left, self.left_column, self.right, self.right_column)]
        if self.both_ways:
            forward.append((self.right, self.right_column, self.left, self.left_column))
        return forward


def _double_division(node: exp.Expression) -> exp.Expression:
    if isinstance(node, exp.Div) and not (isinstance(node.this, exp.Cast) and node.this.to.is_type("double")):
        return exp.Div(this=exp.cast(node.this, "double"), expression=node.expression)
    return node


def spark_text(tree: exp.Expression) -> str:
    """Spark SQL for `tree` (left unchanged), dividing as DuckDB and the nodes do: `/` gives a DOUBLE.
    Spark divides decimals into a decimal of 6 places (TPC-H Q8's share 0.0344358904 became 0.034436)."""
    return tree.transform(_double_division).sql(dialect="spark", pretty=True)


@dataclass
class Plan:
    engine: str  # "nodes", "spark" or "coordinator"
    statement: Statement
    scans: list[Scan] = field(default_factory=list)
    local: LocalQuery | None = None
    edges: list[Edge] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)  # what was evaluated before planning
    inputs: dict[int, Any] = field(default_factory=dict, repr=False)  # rows fetched before Spark runs, by scan
    deliveries: dict[int, str] = field(default_factory=dict)  # how each sub-query reaches Spark, by scan
    dropped: dict[int, str] = field(default_factory=dict)  # sub-queries Spark need not join, and why

    @property
    def spark_sql(self) -> str | None:
        """The query Spark runs over the sub-queries' views."""
        return spark_text(self.statement.tree) if self.engine == "spark" else None

    def explain(self) -> list[str]:
        engines = {
            "nodes": "storage nodes: select-project and partial aggregates; coordinator: reduce/final",
            "spark": "storage nodes: select-project sub-queries; Spark: joins and everything above them",
            "coordinator": "coordinator (no table)",
        }
        lines = [f"engine: {engines[self.engine]}", *self.notes]
        if self.scans:
            lines.append("select-project sub-queries (on compressed data):")
            for scan in self.scans:
                lines += ["  " + line for line in scan.explain()]
                if scan.index in self.deliveries:
                    lines.append(f"      {self.deliveries[scan.index]}")
        if self.local is not None:
            local = self.local
            if local.aggregating:
                request = local.request
                keys = ", ".join(k["name"] for k in request.get("group_by", [])) or "(none)"
                aggs = ", ".join(f"{a['func']}() AS {a['name']}" for a in request.get("aggregates", []))
                lines.append(f"partial aggregates on each node: group by {keys}; {aggs}")
                lines.append("coordinator: reduce/final of the partial states")
            if "having" in local.request:
                lines.append("each node: its groups merged, HAVING (every group lives on one node)")
            elif local.having is not None:
                lines.append("coordinator: HAVING")
            if local.order:
                lines.append("coordinator: ORDER BY")
            if local.limit is not None:
                lines.append(f"coordinator: LIMIT {local.limit}" + (f" OFFSET {local.offset}" if local.offset else ""))
        if self.engine == "spark":
            lines.append("Spark SQL over the sub-queries:")
            lines += ["  " + line for line in self.spark_sql.splitlines()]
        return lines


class Planner:
    def __init__(self, catalog: RegionCatalog):
        self.catalog = catalog

    def plan(self, statement: Statement) -> Plan:
        tree = statement.tree
        if tree.args.get("from_") is None and not tree.args.get("joins"):
            return self._constant(statement)
        local = self._local(statement)
        if local is not None:
            return local
        return self._spark(statement)

    # ---- no table -----------------------------------------------------------------------------

    def _constant(self, statement: Statement) -> Plan:
        outputs = []
        for name, projection in zip(statement.names, statement.tree.expressions, strict=True):
            expression = projection.this if isinstance(projection, exp.Alias) else projection
            try:
                outputs.append((name, to_ir(expression, _plain)))
            except NotTranslatable as e:
                raise SqlError(f"cannot evaluate {e} without a table") from None
        local = LocalQuery(scan=None, request={}, aggregating=False, keys=[], outputs=outputs)  # type: ignore[arg-type]
        return Plan("coordinator", statement, local=local)

    # ---- one table: everything on the nodes ----------------------------------------------------

    def _local(self, statement: Statement) -> Plan | None:
        tree = statement.tree
        scopes = traverse_scope(tree)
        if len(scopes) != 1 or tree.args.get("joins") or tree.args.get("with_"):
            return None
        if len(scopes[0].sources) != 1:
            return None
        [(alias, source)] = scopes[0].sources.items()
        if not isinstance(source, exp.Table):
            return None
        info = self.catalog.table(source.name)
        scan = Scan(0, source.name, alias, info)
        try:
            query = self._local_query(tree, statement.names, scan)
        except NotTranslatable:
            return None
        scan.columns = [c.name for c in info.schema.columns if c.name in _columns_used(tree)] or [
            info.schema.columns[0].name
        ]
        return Plan("nodes", statement, [scan], local=query)

    def _local_query(self, tree: exp.Select, names: list[str], scan: Scan) -> LocalQuery:
        conjuncts = split_and(tree.args["where"].this) if tree.args.get("where") else []
        scan.conjuncts = conjuncts
        scan.filters = [to_ir(c, _plain) for c in conjuncts]
        projections = [p.this if isinstance(p, exp.Alias) else p for p in tree.expressions]
        group = list(tree.args["group"].expressions) if tree.args.get("group") else []
        having = tree.args["having"].this if tree.args.get("having") else None
        ordered = list(tree.args["order"].expressions) if tree.args.get("order") else []
        limit, offset = _limit(tree)
        distinct = bool(tree.args.get("distinct"))
        if distinct and not group:
            group = [p.copy() for p in projections]
        everything = [*projections, *([having] if having is not None else []), *(o.this for o in ordered)]
        aggregates = _aggregates(everything)
        aggregating = bool(group or aggregates)
        request: dict[str, Any] = {"table": scan.table}
        if scan.filters:
            request["filter"] = _and_ir(scan.filters)
        if aggregating:
            keys = {g.sql(): f"__g{i}" for i, g in enumerate(group)}
            request["group_by"] = [
                {"name": name, "expr": to_ir(g, _plain)} for g, name in zip(group, keys.values(), strict=True)
            ]
            request["aggregates"] = [agg for agg, _ in aggregates.values()]

            def final(node: exp.Expression) -> dict[str, Any]:
                return to_ir(_replace_groups(node, keys, aggregates), _grouped_column)

            outputs = [(name, final(p)) for name, p in zip(names, projections, strict=True)]
            query = LocalQuery(scan, request, True, list(keys.values()), outputs)
            if having is not None:
                query.having = final(having)
                merged_on_nodes = all(a["func"] in ("count", "sum", "min", "max") for a in request["aggregates"])
                if merged_on_nodes and self._groups_on_one_node(scan.info, group):
                    request["having"] = query.having  # the nodes keep only the qualifying groups
        else:
            request["select"] = [{"name": f"__p{i}", "expr": to_ir(p, _plain)} for i, p in enumerate(projections)]
            outputs = [(name, {"col": f"__p{i}"}) for i, name in enumerate(names)]
            if not ordered and limit is not None:
                request["limit"] = limit + offset
            query = LocalQuery(scan, request, False, [], outputs)
        aliases = [p.alias_or_name for p in tree.expressions]  # ORDER BY count(*) reads `_col_1` once qualified
        for i, o in enumerate(ordered):
            key = _output_reference(o.this, aliases, query.outputs)
            if key is None:
                if aggregating:
                    key = final(o.this)
                else:
                    request["select"].append({"name": f"__o{i}", "expr": to_ir(o.this, _plain)})
                    key = {"col": f"__o{i}"}
            query.order.append((key, bool(o.args.get("desc")), bool(o.args.get("nulls_first"))))
        query.limit, query.offset = limit, offset
        return query

    def _groups_on_one_node(self, info: TableInfo, group: list[exp.Expression]) -> bool:
        """Whether every group of a query grouped by `group` lives on one node: the table is read
        on one node, or its hash keys are among the group keys (TPC-H Q18's subquery: lineitem
        grouped by l_orderkey, 1.5 million groups of which 57 pass HAVING)."""
        if info.replicated or len(self.catalog.urls(info)) <= 1:
            return True
        placement = info.schema.placement
        columns = {g.name for g in group if isinstance(g, exp.Column)}
        return placement.kind == "hash" and set(placement.keys) <= columns

    # ---- joins: Spark ----------------------------------------------------------------------------

    def _spark(self, statement: Statement) -> Plan:
        tree = statement.tree
        for exists in tree.find_all(exp.Exists):  # EXISTS needs no columns of its subquery
            inner = exists.this
            # (an aggregate is kept: without GROUP BY it makes the one row EXISTS always finds)
            if isinstance(inner, exp.Select) and not any(e.find(exp.AggFunc) for e in inner.expressions):
                inner.set("expressions", [exp.Literal.number(1)])
        scans: dict[tuple[int, str], Scan] = {}
        scopes = traverse_scope(tree)
        ctes = {c.alias_or_name for c in tree.find_all(exp.CTE)}
        for scope in scopes:
            for alias, source in scope.sources.items():
                if isinstance(source, exp.Table) and source.name not in ctes:
                    scans[(id(scope.expression), alias)] = Scan(
                        len(scans), source.name, alias, self.catalog.table(source.name)
                    )
        counter = itertools.count()
        edges: list[Edge] = []
        for scope in scopes:
            base = {
                alias: scans[(id(scope.expression), alias)]
                for alias in scope.sources
                if (id(scope.expression), alias) in scans
            }
            if base and isinstance(scope.expression, exp.Select):
                nullable = _nullable_aliases(scope.expression)
                self._push_predicates(scope, base, nullable)
                self._push_expressions(scope, base, nullable, counter)
                edges += _equi_joins(scope.expression, base, nullable)
            edges += _correlated_edges(scope, scans)
        for scope in scopes:
            if isinstance(scope.expression, exp.Select):
                _preaggregate(scope, scans, scopes)
        needed = _columns_by_source(tree)
        query_id = uuid.uuid4().hex[:10]
        for key, scan in scans.items():
            used = needed.get(key, set())
            scan.columns = [c.name for c in scan.info.schema.columns if c.name in used]
            if not scan.columns and not scan.computed:
                scan.columns = [scan.info.schema.columns[0].name]
            scan.view = f"__cxg_{query_id}_{scan.index}"
        for scope in scopes:
            _distinct_if_only_tested(scope, scans)
        for scope in traverse_scope(tree):
            for alias, source in scope.sources.items():
                scan = scans.get((id(scope.expression), alias))
                if scan is not None and isinstance(source, exp.Table):
                    source.replace(
                        exp.Table(
                            this=exp.to_identifier(scan.view), alias=exp.TableAlias(this=exp.to_identifier(alias))
                        )
                    )
        _sort_in_one_partition(tree)
        return Plan("spark", statement, list(scans.values()), edges=edges)

    def _push_predicates(self, scope: Scope, base: dict[str, Scan], nullable: set[str]) -> None:
        select = scope.expression
        where = select.args.get("where")
        if where is not None:
            remaining = []
            for conjunct in (part for c in split_and(where.this) for part in factor_or(c)):
                owner = _single_owner(conjunct, base)
                if owner is not None and owner not in nullable and _push_filter(base[owner], conjunct):
                    continue
                if isinstance(conjunct, exp.Or) and not has_subquery(conjunct):
                    for alias, scan in base.items():
                        if alias not in nullable:
                            _push_implied(scan, alias, conjunct, base)
                remaining.append(conjunct)
            select.set("where", exp.Where(this=and_all(remaining)) if remaining else None)
        for join in select.args.get("joins") or []:
            on = join.args.get("on")
            if on is None:
                continue
            side = (join.side or "").upper()
            joined = join.this.alias_or_name if isinstance(join.this, exp.Table) else None
            remaining = []
            for conjunct in split_and(on):
                owner = _single_owner(conjunct, base)
                pushable = (not side and not join.args.get("kind") and owner not in nullable) or (
                    side == "LEFT" and owner == joined
                )
                if owner is not None and pushable and _push_filter(base[owner], conjunct):
                    continue
                remaining.append(conjunct)
            join.set("on", and_all(remaining) if remaining else (exp.true() if side else None))

    def _push_expressions(self, scope: Scope, base: dict[str, Scan], nullable: set[str], counter) -> None:
        select = scope.expression
        names: dict[tuple[str, str], str] = {}

        def visit(node: exp.Expression) -> None:
            owner = _single_owner(node, base) if _worth_pushing(node) else None
            if owner is not None and owner not in nullable:
                try:
                    ir = to_ir(node, _plain)
                except NotTranslatable:
                    ir = None
                if ir is not None:
                    key = (owner, node.sql())
                    if key not in names:
                        names[key] = f"__e{next(counter)}"
                        base[owner].computed[names[key]] = (node.copy(), ir)
                    node.replace(exp.column(names[key], table=owner))
                    return
            for child in list(node.iter_expressions()):
                visit(child)

        targets = [p.this if isinstance(p, exp.Alias) else p for p in select.expressions]
        for clause in ("group", "order"):
            if select.args.get(clause) is not None:
                targets += list(select.args[clause].expressions)
        if select.args.get("having") is not None:
            targets.append(select.args["having"].this)
        for target in targets:
            visit(target)


# ---- helpers -----------------------------------------------------------------------------------


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


def _aggregates(nodes: list[exp.Expression]) -> dict[str, tuple[dict[str, Any], str]]:
    """Distinct aggregate calls (SQL text -> (scan aggregate, partial column))."""
    found: dict[str, tuple[dict[str, Any], str]] = {}
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
                spec = {"name": name, "func": "count"}
            elif isinstance(inner, exp.Distinct):
                if not isinstance(agg, exp.Count) or len(inner.expressions) != 1:
                    raise NotTranslatable(key)
                spec = {"name": name, "func": "count_distinct", "arg": to_ir(inner.expressions[0], _plain)}
            else:
                spec = {"name": name, "func": AGGREGATES[type(agg)], "arg": to_ir(inner, _plain)}
            found[key] = (spec, name)
    return found


def _replace_groups(
    node: exp.Expression, keys: dict[str, str], aggregates: dict[str, tuple[dict, str]]
) -> exp.Expression:
    """The expression over the merged partial result: aggregates and group keys become its columns."""

    def swap(n: exp.Expression) -> exp.Expression:
        if isinstance(n, exp.AggFunc) and n.sql() in aggregates:
            return exp.column(aggregates[n.sql()][1])
        if n.sql() in keys:
            return exp.column(keys[n.sql()])
        return n

    return node.copy().transform(swap)


def _grouped_column(column: exp.Column) -> dict[str, Any]:
    if column.table or not column.name.startswith("__"):
        raise GroupingError(f"column {column.sql()} must appear in GROUP BY or be used in an aggregate")
    return {"col": column.name}


def _output_reference(node: exp.Expression, names: list[str], outputs: list[tuple[str, dict]]) -> dict | None:
    """ORDER BY <output name> or ORDER BY <position>: that output's expression."""
    if isinstance(node, exp.Column) and not node.table and node.name in names:
        return outputs[names.index(node.name)][1]
    if isinstance(node, exp.Literal) and not node.is_string:
        position = int(node.this)
        if not 1 <= position <= len(outputs):
            raise SqlError(f"ORDER BY position {position} is not in the select list")
        return outputs[position - 1][1]
    return None


def _columns_used(tree: exp.Expression) -> set[str]:
    return {c.name for c in tree.find_all(exp.Column)}


def _single_owner(node: exp.Expression, base: dict[str, Scan]) -> str | None:
    """The one table reference of this scope that all of node's columns come from."""
    if has_subquery(node):
        return None
    owners = {c.table for c in node.find_all(exp.Column)}
    if len(owners) != 1:
        return None
    owner = owners.pop()
    return owner if owner in base else None


def _worth_pushing(node: exp.Expression) -> bool:
    if isinstance(node, (exp.Column, exp.Literal, exp.Star, exp.Interval, exp.Paren, exp.Alias)):
        return False
    return any(True for _ in node.find_all(exp.Column)) and not any(True for _ in node.find_all(exp.AggFunc))


def _push_filter(scan: Scan, conjunct: exp.Expression) -> bool:
    try:
        ir = to_ir(conjunct, _plain)
    except NotTranslatable:
        return False
    scan.conjuncts.append(conjunct.copy())
    scan.filters.append(ir)
    return True


def _push_implied(scan: Scan, alias: str, disjunction: exp.Expression, base: dict[str, Scan]) -> None:
    """From (a1 AND b1) OR (a2 AND b2), the condition (a1 OR a2) that every row of a must meet."""
    branches = []
    for branch in split_or(disjunction):
        mine = [c for c in split_and(branch) if _single_owner(c, base) == alias]
        if not mine:
            return
        branches.append(and_all(mine))
    implied = exp.or_(*branches) if len(branches) > 1 else branches[0]
    try:
        ir = to_ir(implied, _plain)
    except NotTranslatable:
        return
    scan.implied.append(implied)
    scan.filters.append(ir)


def _nullable_aliases(select: exp.Select) -> set[str]:
    """Table aliases on the NULL-extended side of an outer join (their rows may not be filtered early)."""
    nullable: set[str] = set()
    seen = [select.args["from_"].this.alias_or_name] if select.args.get("from_") else []
    for join in select.args.get("joins") or []:
        alias = join.this.alias_or_name
        side = (join.side or "").upper()
        if side in ("LEFT", "FULL"):
            nullable.add(alias)
        if side in ("RIGHT", "FULL"):
            nullable.update(seen)
        seen.append(alias)
    return nullable


def _equi_joins(select: exp.Select, base: dict[str, Scan], nullable: set[str]) -> list[Edge]:
    """The `a.x = b.y` conditions of inner joins between two tables of this SELECT."""
    conditions = split_and(select.args["where"].this) if select.args.get("where") else []
    for join in select.args.get("joins") or []:
        if not join.side and join.args.get("on") is not None:
            conditions += split_and(join.args["on"])
    pairs = []
    for condition in conditions:
        if isinstance(condition, exp.EQ) and isinstance(condition.this, exp.Column):
            left, right = condition.this, condition.expression
            if not isinstance(right, exp.Column) or left.table == right.table:
                continue
            if {left.table, right.table} <= set(base) and not {left.table, right.table} & nullable:
                pairs.append(((left.table, left.name), (right.table, right.name)))
    # a.x = b.y and b.y = c.z: every two columns of one equivalence class join (a.x = c.z too)
    classes: list[set[tuple[str, str]]] = []
    for a, b in pairs:
        touching = [c for c in classes if a in c or b in c]
        merged = {a, b}.union(*touching)
        classes = [c for c in classes if c not in touching] + [merged]
    edges = []
    for members in classes:
        ordered = sorted(members)
        for i, (left_alias, left_column) in enumerate(ordered):
            for right_alias, right_column in ordered[i + 1 :]:
                if left_alias != right_alias:
                    edges.append(Edge(base[left_alias], left_column, base[right_alias], right_column))
    return edges


def _correlated_edges(scope: Scope, scans: dict[tuple[int, str], Scan]) -> list[Edge]:
    """`inner.x = outer.y` in a correlated subquery: outer values filter the inner sub-query (inner
    rows matching no outer row cannot change any outer row's result)."""
    select = scope.expression
    if not scope.external_columns or not isinstance(select, exp.Select) or not select.args.get("where"):
        return []
    edges = []
    for condition in split_and(select.args["where"].this):
        if not (isinstance(condition, exp.EQ) and isinstance(condition.this, exp.Column)):
            continue
        if not isinstance(condition.expression, exp.Column):
            continue
        for inner, outer in ((condition.this, condition.expression), (condition.expression, condition.this)):
            inner_scan = scans.get((id(select), inner.table))
            owner = _owner(scope.parent, outer) if scope.parent is not None else None
            outer_scan = scans.get((id(owner.expression), outer.table)) if owner is not None else None
            if inner_scan is not None and outer_scan is not None and outer.table not in scope.sources:
                edges.append(Edge(outer_scan, outer.name, inner_scan, inner.name, both_ways=False))
    return edges


_PARTIAL = {exp.Count: "count", exp.Sum: "sum", exp.Min: "min", exp.Max: "max"}


def _preaggregate(scope: Scope, scans: dict[tuple[int, str], Scan], scopes: list[Scope]) -> None:
    """Eager aggregation: when every aggregate of this scope reads one table T (COUNT/SUM/MIN/MAX
    of T's columns), T's sub-query is grouped on the nodes by every T column the rest of the scope
    uses (join keys, group keys, other conditions) and the aggregates become aggregates of the
    partial results: COUNT(x) -> COALESCE(SUM(count), 0), SUM -> SUM, MIN -> MIN, MAX -> MAX. Rows
    of T with the same values in those columns are indistinguishable above the aggregates, so the
    answer is unchanged, and Spark joins one row per group instead of every row (TPC-H Q13: orders
    per customer)."""
    select = scope.expression
    aggregates = [n for n in walk_in_scope(select) if isinstance(n, exp.AggFunc)]
    if not aggregates or any(
        type(a) not in _PARTIAL or isinstance(a.this, (exp.Distinct, exp.Star)) for a in aggregates
    ):
        return
    for join in select.args.get("joins") or []:
        if (join.side or "").upper() not in ("", "LEFT") or (join.kind or "").upper() not in ("", "INNER", "OUTER"):
            return
    owners = {c.table for a in aggregates for c in a.this.find_all(exp.Column)}
    if len(owners) != 1 or any(not any(True for _ in a.this.find_all(exp.Column)) for a in aggregates):
        return
    alias = owners.pop()
    scan = scans.get((id(select), alias))
    if scan is None or scan.aggregates:
        return
    inside = {id(c) for a in aggregates for c in a.this.find_all(exp.Column)}
    columns = [c for c in walk_in_scope(select) if isinstance(c, exp.Column)]  # the tree as it is now
    keys = sorted({c.name for c in columns if c.table == alias and id(c) not in inside})
    if not keys or _used_by_inner_scopes(scope, alias, scopes):
        return

    def ir(column: exp.Column) -> dict[str, Any]:
        return scan.computed[column.name][1] if column.name in scan.computed else {"col": column.name}

    states: dict[Hashable, dict[str, Any]] = {}  # the same aggregate twice (Q11) is taken once
    try:
        partial = [
            states.setdefault(request_key(state), {"name": f"__a{len(states)}", **state})
            for state in ({"func": _PARTIAL[type(a)], "arg": to_ir(a.this, ir)} for a in aggregates)
        ]
    except NotTranslatable:
        return
    described: dict[str, str] = {}
    for aggregate, state in zip(aggregates, partial, strict=True):
        described.setdefault(state["name"], f"{aggregate.sql()} AS {state['name']}")
    scan.group_by = [{"name": key, "expr": ir(exp.column(key, table=alias))} for key in keys]
    scan.aggregates = list(states.values())
    scan.partials = list(described.values())
    for aggregate, state in zip(aggregates, partial, strict=True):
        column = exp.column(state["name"], table=alias)
        merged = exp.Sum(this=column) if state["func"] in ("count", "sum") else type(aggregate)(this=column)
        aggregate.replace(
            exp.Coalesce(this=merged, expressions=[exp.Literal.number(0)]) if state["func"] == "count" else merged
        )


def _distinct_if_only_tested(scope: Scope, scans: dict[tuple[int, str], Scan]) -> None:
    """A subquery over one table whose rows are only tested (``EXISTS (...)``, ``x [NOT] IN
    (SELECT ...)``) and that reads one column of it, its join key: duplicates change no answer,
    so the nodes send each value once per block (TPC-H Q22: 190,000 orders rows become 13,000
    customer keys). With more columns the combinations are mostly distinct already (Q21's
    order and supplier pairs) and grouping would cost the nodes more than it saves Spark."""
    select = scope.expression
    holder = select.parent if isinstance(select, exp.Select) else None
    tested = isinstance(holder, exp.Exists) or (
        isinstance(holder, exp.Subquery) and isinstance(holder.parent, exp.In) and holder.arg_key == "query"
    )
    if not tested or len(scope.sources) != 1 or scope.subquery_scopes:
        return
    if any(select.args.get(k) for k in ("joins", "group", "having", "order", "limit", "offset", "with_")):
        return
    if any(isinstance(node, (exp.AggFunc, exp.Window)) for node in walk_in_scope(select)):
        return
    [alias] = scope.sources
    scan = scans.get((id(select), alias))
    if scan is not None and not scan.group_by and not scan.computed and len(scan.columns) == 1:
        scan.group_by = [{"name": scan.columns[0], "expr": {"col": scan.columns[0]}}]


def _used_by_inner_scopes(scope: Scope, alias: str, scopes: list[Scope]) -> bool:
    """Whether a subquery of `scope` refers to its table `alias` (a correlated reference)."""
    for inner in scopes:
        if inner is scope:
            continue
        if any(column.table == alias and _owner(inner, column) is scope for column in inner.columns):
            return True
    return False


def _owner(scope: Scope, column: exp.Column) -> Scope | None:
    """The scope (this one or an enclosing one) whose FROM names the column's table."""
    while scope is not None and column.table not in scope.sources:
        scope = scope.parent
    return scope


def _columns_by_source(tree: exp.Expression) -> dict[tuple[int, str], set[str]]:
    """For every (scope, table alias), the names of its columns the query still uses."""
    used: dict[tuple[int, str], set[str]] = {}
    for scope in traverse_scope(tree):
        for column in scope.columns:
            owner = _owner(scope, column)
            if owner is not None:
                used.setdefault((id(owner.expression), column.table), set()).add(column.name)
    return used
