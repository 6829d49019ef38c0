"""The rewrite passes of a join query's plan, one module each; `gateway.sql.planner.RULES` runs
them in order over a `Draft`. Each takes the draft and returns it rewritten: the tree (the
planner's own copy) and the sub-queries of its table references."""

from gateway.sql.passes.distinct_if_only_tested import distinct_if_only_tested
from gateway.sql.passes.draft import Draft
from gateway.sql.passes.eager_aggregate import eager_aggregate
from gateway.sql.passes.filter_derived import filter_derived
from gateway.sql.passes.preaggregate import preaggregate
from gateway.sql.passes.prune_columns import prune_columns
from gateway.sql.passes.push_expressions import push_expressions
from gateway.sql.passes.push_predicates import push_predicates
from gateway.sql.passes.read_from_views import read_from_views
from gateway.sql.passes.select_one_in_exists import select_one_in_exists
from gateway.sql.passes.semi_join_edges import semi_join_edges
from gateway.sql.passes.table_queries import table_queries

__all__ = [
    "Draft",
    "distinct_if_only_tested",
    "eager_aggregate",
    "filter_derived",
    "preaggregate",
    "prune_columns",
    "push_expressions",
    "push_predicates",
    "read_from_views",
    "select_one_in_exists",
    "semi_join_edges",
    "table_queries",
]
