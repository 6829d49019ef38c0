"""The planner: a checked query in, a plan (`gateway.sql.plan`) out. It never runs anything and
never changes the query it is given (it plans a copy).

The regular plan (seed 004 §2.2) is built automatically from the qualified query:

- a query without FROM is evaluated by the coordinator (`gateway.sql.constant`), or by Spark when
  it calls a function the nodes' expression language lacks;
- a query over one table runs entirely on the nodes (`gateway.sql.one_table`), unless it has what
  only Spark runs (a window function, a set operation, grouping sets);
- any other query joins: every base-table reference becomes a select-project sub-query for the
  nodes, and the `RULES` below, in this order, rewrite the query around them; what is left of the
  tree is the statement that joins the sub-queries' views. Where it runs is `place_joins`'s
  decision: on one node, whose DataFusion runs it (``node``), when every table it reads is whole
  on that node (replicated, or the region's only node holds it); on every node holding buckets of
  its hash-placed tables, over its own, when they are joined on their common key and the answer
  is exact so (``colocated``: `gateway.sql.colocation` decides, `gateway.sql.decompose` splits the
  query into each node's part and the coordinator's merge); else on Spark (``spark``).

An uncorrelated subquery over one table can be answered on the nodes before its query is
planned; the plan lists them (`Plan.first`, found by `Planner.subqueries_first`), and the stage
(`gateway.sql.stage`) answers them, puts the answers in their place and plans the query again
(`Planner.plan_answered`).
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

from sqlglot import exp
from sqlglot.optimizer.scope import Scope, traverse_scope

from gateway.sql.catalog import RegionCatalog, TableInfo
from gateway.sql.check import CheckedQuery
from gateway.sql.colocation import co_locate
from gateway.sql.constant import plan_constant
from gateway.sql.decompose import decompose
from gateway.sql.one_table import plan_one_table
from gateway.sql.parse import SET_OPERATIONS
from gateway.sql.passes import (
    Draft,
    distinct_if_only_tested,
    eager_aggregate,
    filter_derived,
    preaggregate,
    prune_columns,
    push_expressions,
    push_predicates,
    read_from_views,
    select_one_in_exists,
    semi_join_edges,
    table_queries,
)
from gateway.sql.plan import Merge, Plan
from gateway.sql.result_types import type_rules

RULES = (
    select_one_in_exists,  # EXISTS needs no column of its subquery
    filter_derived,  # a derived table's rows filtered by what its readers keep
    table_queries,  # one sub-query per base-table reference
    push_predicates,  # conditions on one table (and those implied by ORs) into its sub-query
    push_expressions,  # scalar expressions over one table computed by its sub-query
    semi_join_edges,  # the equalities along which one sub-query's keys filter another's rows
    preaggregate,  # aggregates over one table start as partial aggregates on the nodes
    prune_columns,  # each sub-query returns only the columns still read
    eager_aggregate,  # a join that only widens the groups joins them once aggregated
    distinct_if_only_tested,  # a subquery only tested for its keys returns each key once
    read_from_views,  # the tables become the sub-queries' views: the statement for Spark
)
# what only makes Spark's input smaller: on one node, DataFusion reads the scans where they are, and
# grouping millions of rows by a key of nearly as many values costs the scan more than it saves
FOR_SPARK_ONLY = (preaggregate, distinct_if_only_tested)
FOR_NODE_ONLY = (eager_aggregate,)  # Spark's input is pre-aggregated on the nodes instead


@dataclass
class FirstSubquery:
    """An uncorrelated subquery over one table that the nodes answer before its query is planned."""

    select: exp.Select  # the subquery, in the tree of the query it was found in
    plan: Plan  # its one-table plan


class Planner:
    def __init__(self, catalog: RegionCatalog, joins: str = "node"):
        self.catalog = catalog
        self.joins = joins

    def plan(self, query: CheckedQuery, copy: bool = True) -> Plan:
        """The plan of `query`, made of a copy of it (`query` is left as it is); `copy=False` plans
        `query` itself, for a caller that made it and has no other use for it. The subqueries to
        answer first are listed, and `query` is kept whole for the stage to plan again."""
        first = [found.plan for found in self.subqueries_first(query)]
        written = (query if copy else query.copy()) if first else None  # before the passes rewrite it
        plan = self.plan_answered(query, copy=copy)
        plan.first, plan.written = first, written
        return plan

    def plan_answered(self, query: CheckedQuery, copy: bool = True) -> Plan:
        """The plan of `query` as it is, its subqueries answered or left to Spark; `copy` as in `plan`."""
        result_types = type_rules(query.tree)  # of the query as written: the passes rewrite it
        query = query.copy() if copy else query
        tree = query.tree
        if isinstance(tree, SET_OPERATIONS):
            plan = plan_joins(query, self.catalog, self.joins)
        elif tree.args.get("from_") is None and not tree.args.get("joins"):
            plan = plan_constant(query) or plan_joins(query, self.catalog, self.joins)
        else:
            plan = plan_one_table(query, self.catalog) or plan_joins(query, self.catalog, self.joins)
        plan.result_types = result_types
        return plan

    def subqueries_first(self, query: CheckedQuery) -> Iterator[FirstSubquery]:
        """The uncorrelated subqueries over one table (no subquery of their own) that the nodes can
        run, innermost first; `query` is only read. A query without FROM has none: its select
        list is evaluated as it is."""
        tree = query.tree
        if tree.args.get("from_") is None or not tree.find(exp.Subquery, exp.Exists):
            return
        for scope in traverse_scope(tree):
            if not scope.is_subquery or not _single_table(scope):
                continue
            select = scope.expression
            names = [p.alias_or_name for p in select.expressions]
            plan = plan_one_table(CheckedQuery(select.copy(), names, False, select.sql()), self.catalog)
            if plan is not None:
                yield FirstSubquery(select, plan)


def plan_joins(query: CheckedQuery, catalog: RegionCatalog, joins: str = "node") -> Plan:
    """The ``node``, ``colocated`` or ``spark`` plan of `query` (`place_joins`, once its tables'
    sub-queries are known), whose tree the `RULES` rewrite in place (a ``node`` or ``colocated``
    plan's without `FOR_SPARK_ONLY`, a ``spark`` plan's without `FOR_NODE_ONLY`); a ``colocated``
    plan's tree is each node's part of the query."""
    wrong_on_node = _correlated_not_in(query.tree)  # read before the rules rewrite the tree
    merge, apart = _co_located(query, catalog) if joins == "node" and not wrong_on_node else (None, "")
    draft = Draft(query.tree, catalog)
    engine, why = "spark", ""
    for rule in RULES:
        if rule in (FOR_SPARK_ONLY if engine != "spark" else FOR_NODE_ONLY):
            continue
        draft = rule(draft)
        if rule is table_queries:
            engine, why = place_joins([scan.info for scan in draft.queries.values()], joins)
            if engine == "node" and wrong_on_node:
                engine, why = "spark", f"{wrong_on_node}: Spark runs it"
            elif engine == "spark" and merge is not None:
                engine, why = "colocated", f"{_joined(list(merge.keys))}: each node answers over its own buckets"
            elif engine == "spark" and apart:
                why = f"{why}, not co-located: {apart}"
    gather = joins != "spark" and not wrong_on_node
    return Plan(engine, query, list(draft.queries.values()), edges=draft.edges, why=why, merge=merge, gather=gather)


def _joined(tables: list[str]) -> str:
    if len(tables) == 1:
        return f"{tables[0]} is split between nodes and joined only to replicated tables"
    return f"{', '.join(tables[:-1])} and {tables[-1]} are split alike and joined on their key"


def _co_located(query: CheckedQuery, catalog: RegionCatalog) -> tuple[Merge | None, str]:
    """How the nodes' rows merge when `query` can be answered by every node over its own buckets
    (its tree then rewritten in place into each node's part), else why not ("": no table it reads
    is split between nodes)."""
    tables = catalog.tables()
    read = [tables[t.name] for t in query.tree.find_all(exp.Table) if t.name in tables]
    if all(_whole_on_one(info) for info in read):
        return None, ""
    whole = query.copy()
    found = co_locate(query.tree, catalog)
    split = decompose(found.scope, found.grouping) if found.layout is not None else found.why
    if isinstance(split, str):  # the top SELECT cannot be split: perhaps the derived table it reads
        below = co_locate(query.tree, catalog, below=True)
        inner = decompose(below.scope, below.grouping, below.outer) if below.layout is not None else ""
        if isinstance(inner, str):
            return None, split
        found, split = below, inner
    query.tree = split.node
    return Merge(found.layout, found.keys, found.replicated, split.merge, split.how, whole), ""


def place_joins(infos: list[TableInfo], joins: str) -> tuple[str, str]:
    """Where the joins of a query reading the tables `infos` run, and why: on one node (``node``)
    when `joins` allows it and one node holds every one of them whole; else on Spark."""
    if joins == "spark":
        return "spark", "sql.joins = spark: every join runs on Spark"
    if not infos:
        return "spark", ""
    split = sorted({info.schema.name for info in infos if not _whole_on_one(info)})
    if split:
        return "spark", f"{', '.join(split)} {'is' if len(split) == 1 else 'are'} split over several nodes: Spark joins"
    holders = set.intersection(*(set(info.nodes) for info in infos))
    if not holders:
        return "spark", "no node holds every table it reads: Spark joins"
    return "node", f"every table it reads is whole on {' and on '.join(sorted(holders))}: one of them answers it"


def _correlated_not_in(tree: exp.Expression) -> str:
    """What in `tree` the node's DataFusion answers wrong, or "": NOT IN over a correlated subquery
    (DataFusion 55 decorrelates it into one null-aware anti join over every row of the subquery's
    table, so a NULL that the correlation would have left out empties the answer)."""
    for negation in tree.find_all(exp.Not):
        test = negation.this
        subquery = test.args.get("query") if isinstance(test, exp.In) else None
        if subquery is None:
            continue
        inside = {t.alias_or_name for t in subquery.find_all(exp.Table)}
        inside |= {s.alias for s in subquery.find_all(exp.Subquery) if s.alias}
        if any(c.table and c.table not in inside for c in subquery.find_all(exp.Column)):
            return "a NOT IN over a correlated subquery (the node's engine mistreats its NULLs)"
    return ""


def _whole_on_one(info: TableInfo) -> bool:
    return info.replicated or (len(info.nodes) == 1 and info.buckets is None)


def _single_table(scope: Scope) -> bool:
    select = scope.expression
    return (
        isinstance(select, exp.Select)
        and not scope.external_columns
        and not scope.subquery_scopes
        and len(scope.selected_sources) == 1  # `sources` also names the common table expressions in sight
        and isinstance(next(iter(scope.selected_sources.values()))[1], exp.Table)
    )
