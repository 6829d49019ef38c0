"""The planner without a region: each rewrite pass, SQL in -> SQL and sub-queries out, over a
catalog built here (no node, no Spark, no data)."""

from __future__ import annotations

import dataclasses

import pyarrow as pa
import pytest
from sqlglot import exp

from gateway.sql import stage
from gateway.sql.catalog import RegionCatalog, TableInfo
from gateway.sql.check import CheckedQuery, check
from gateway.sql.passes import (
    Draft,
    distinct_if_only_tested,
    preaggregate,
    prune_columns,
    push_expressions,
    push_predicates,
    read_from_views,
    select_one_in_exists,
    semi_join_edges,
    table_queries,
)
from gateway.sql.plan import TableQuery
from gateway.sql.planner import RULES, Planner
from gateway.sql.spark_dialect import spark_text
from gateway.sql.stage import CardinalityError
from gateway.sql.tree import node_at, path_to
from storage.catalog import Column, Placement, TableSchema

NODES = {"n0": "http://127.0.0.1:1", "n1": "http://127.0.0.1:2"}


def _table(name: str, columns: dict[str, str], placement: Placement, rows: int) -> TableInfo:
    schema = TableSchema(name, tuple(Column(c, t) for c, t in columns.items()), placement=placement)
    return TableInfo(schema, list(NODES) if placement.kind == "hash" else ["n0", "n1"], rows)


def _hash(*keys: str) -> Placement:
    return Placement("hash", keys, 4, ("n0", "n1", "n0", "n1"))


CATALOG = RegionCatalog.known(
    NODES,
    {
        "customer": _table(
            "customer",
            {"c_custkey": "int64", "c_name": "string", "c_mktsegment": "string", "c_acctbal": "decimal(15,2)"},
            _hash("c_custkey"),
            1_500,
        ),
        "orders": _table(
            "orders",
            {"o_orderkey": "int64", "o_custkey": "int64", "o_orderdate": "date", "o_totalprice": "decimal(15,2)"},
            _hash("o_orderkey"),
            15_000,
        ),
        "lineitem": _table(
            "lineitem",
            {
                "l_orderkey": "int64",
                "l_quantity": "decimal(15,2)",
                "l_extendedprice": "decimal(15,2)",
                "l_discount": "decimal(15,2)",
                "l_shipdate": "date",
            },
            _hash("l_orderkey"),
            60_000,
        ),
        "nation": _table("nation", {"n_nationkey": "int64", "n_name": "string"}, Placement(), 25),
    },
)


def checked(sql: str) -> CheckedQuery:
    return check(sql, CATALOG.sql_schema())


def draft_after(sql: str, rule) -> Draft:
    """The draft of `sql` once `rule` and every rule before it have run."""
    draft = Draft(checked(sql).tree, CATALOG)
    for each in RULES[: RULES.index(rule) + 1]:
        draft = each(draft)
    return draft


def queries(draft: Draft) -> dict[str, TableQuery]:
    """The draft's sub-queries by table alias."""
    return {q.alias: q for q in draft.queries.values()}


# ---- one pass at a time ----------------------------------------------------------------------


def test_select_one_in_exists_keeps_an_aggregate() -> None:
    sql = (
        "select c.c_name from customer c where exists (select * from orders o where o.o_custkey = c.c_custkey) "
        "and exists (select count(*) from lineitem l where l.l_orderkey = c.c_custkey)"
    )
    tree = draft_after(sql, select_one_in_exists).tree.sql()
    assert "EXISTS(SELECT 1 FROM orders AS o WHERE" in tree
    assert "EXISTS(SELECT COUNT(*) AS" in tree


def test_table_queries_one_per_table_reference_in_scope_order() -> None:
    sql = (
        "with big as (select o_custkey from orders where o_totalprice > 100) "
        "select c.c_name from customer c, big where c.c_custkey = big.o_custkey "
        "and exists (select 1 from orders o where o.o_custkey = c.c_custkey)"
    )
    draft = draft_after(sql, table_queries)
    found = [(q.index, q.table, q.alias) for q in draft.queries.values()]
    # the common table expression's orders, the EXISTS subquery's, then the outer query's customer
    assert found == [(0, "orders", "orders"), (1, "orders", "o"), (2, "customer", "c")]
    assert all(not q.conjuncts and not q.columns for q in draft.queries.values()), "later passes fill them"


def test_push_predicates_moves_one_table_conditions_into_sub_queries() -> None:
    sql = (
        "select c.c_name, o.o_totalprice from customer c join orders o on c.c_custkey = o.o_custkey "
        "where c.c_mktsegment = 'BUILDING' and o.o_orderdate < date '1995-03-15'"
    )
    draft = draft_after(sql, push_predicates)
    by = queries(draft)
    assert [c.sql() for c in by["c"].conjuncts] == ["c.c_mktsegment = 'BUILDING'"]
    [segment] = by["c"].filters
    assert segment.to_json() == {"op": "=", "args": [{"col": "c_mktsegment"}, {"lit": "BUILDING"}]}
    assert [c.sql() for c in by["o"].conjuncts] == ["o.o_orderdate < CAST('1995-03-15' AS DATE)"]
    assert draft.tree.args.get("where") is None
    assert "ON c.c_custkey = o.o_custkey" in draft.tree.sql(), "the join condition stays"


def test_push_predicates_leaves_the_null_extended_side_and_implies_per_table_filters() -> None:
    sql = (
        "select c.c_name from customer c left join orders o on c.c_custkey = o.o_custkey and o.o_totalprice > 5 "
        "where o.o_orderdate is null"
    )
    by = queries(draft_after(sql, push_predicates))
    assert [c.sql() for c in by["o"].conjuncts] == ["o.o_totalprice > 5"], "its own ON condition moves"
    assert not by["c"].conjuncts
    sql = (
        "select c.c_name from customer c, orders o where c.c_custkey = o.o_custkey and "
        "((c.c_mktsegment = 'A' and o.o_totalprice > 10) or (c.c_mktsegment = 'B' and o.o_totalprice > 20))"
    )
    draft = draft_after(sql, push_predicates)
    by = queries(draft)
    assert [c.sql() for c in by["c"].implied] == ["c.c_mktsegment = 'A' OR c.c_mktsegment = 'B'"]
    assert [c.sql() for c in by["o"].implied] == ["o.o_totalprice > 10 OR o.o_totalprice > 20"]
    assert "OR" in draft.tree.args["where"].sql(), "the disjunction itself stays above"


def test_push_predicates_takes_what_every_branch_shares_out_of_an_or() -> None:
    sql = (
        "select c.c_name from customer c, orders o where (c.c_custkey = o.o_custkey and c.c_mktsegment = 'A') "
        "or (c.c_custkey = o.o_custkey and o.o_totalprice > 20)"
    )
    draft = draft_after(sql, push_predicates)
    where = draft.tree.args["where"].this.sql()
    assert where.startswith("c.c_custkey = o.o_custkey AND"), where


def test_push_expressions_computes_one_table_expressions_on_the_nodes() -> None:
    sql = (
        "select o.o_orderdate, sum(l.l_extendedprice * (1 - l.l_discount)) as revenue from lineitem l "
        "join orders o on l.l_orderkey = o.o_orderkey group by o.o_orderdate "
        "having sum(l.l_extendedprice * (1 - l.l_discount)) > 10"
    )
    draft = draft_after(sql, push_expressions)
    [(name, (expression, ir))] = queries(draft)["l"].computed.items()
    assert name == "__e0" and expression.sql() == "l.l_extendedprice * (1 - l.l_discount)"
    assert ir.op == "*"
    assert draft.tree.sql().count("SUM(l.__e0)") == 2, "computed once, read twice"


def test_semi_join_edges_follow_equivalence_classes_and_correlations() -> None:
    sql = (
        "select c.c_name from customer c, orders o, lineitem l where c.c_custkey = o.o_custkey "
        "and o.o_orderkey = l.l_orderkey and o.o_orderkey = l.l_quantity"
    )
    edges = draft_after(sql, semi_join_edges).edges
    found = {(e.left.alias, e.left_column, e.right.alias, e.right_column, e.both_ways) for e in edges}
    assert found == {
        ("c", "c_custkey", "o", "o_custkey", True),
        ("l", "l_orderkey", "o", "o_orderkey", True),
        ("l", "l_quantity", "o", "o_orderkey", True),
    }
    sql = "select c.c_name from customer c where not exists (select 1 from orders o where o.o_custkey = c.c_custkey)"
    [edge] = draft_after(sql, semi_join_edges).edges
    assert (edge.left.alias, edge.right.alias, edge.both_ways) == ("c", "o", False), "outer values filter the inner"


def test_preaggregate_groups_the_aggregated_table_on_the_nodes() -> None:
    sql = (
        "select c.c_custkey, count(o.o_orderkey) as n from customer c left join orders o "
        "on c.c_custkey = o.o_custkey group by c.c_custkey"
    )
    draft = draft_after(sql, preaggregate)
    orders = queries(draft)["o"]
    assert [k.to_json() for k in orders.group_by] == [{"name": "o_custkey", "expr": {"col": "o_custkey"}}]
    assert [a.to_json() for a in orders.aggregates] == [{"name": "__a0", "func": "count", "arg": {"col": "o_orderkey"}}]
    assert orders.partials == ["COUNT(o.o_orderkey) AS __a0"]
    assert "COALESCE(SUM(o.__a0), 0) AS n" in draft.tree.sql()
    # COUNT(*) and AVG have no partial state here: left to Spark
    for aggregate in ("count(*)", "avg(o.o_totalprice)"):
        sql = f"select c.c_custkey, {aggregate} from customer c join orders o on c.c_custkey = o.o_custkey group by 1"
        assert not queries(draft_after(sql, preaggregate))["o"].aggregates


def test_prune_columns_keeps_what_is_still_read() -> None:
    sql = (
        "select o.o_orderdate, sum(l.l_extendedprice * (1 - l.l_discount)) from lineitem l, orders o "
        "where l.l_orderkey = o.o_orderkey and l.l_shipdate > date '1995-03-15' group by o.o_orderdate"
    )
    by = queries(draft_after(sql, prune_columns))
    assert by["l"].columns == ["l_orderkey"], "the shipdate is filtered on the nodes, the revenue computed"
    assert by["o"].columns == ["o_orderkey", "o_orderdate"]


def test_distinct_if_only_tested_sends_each_key_once() -> None:
    sql = "select c.c_name from customer c where c.c_custkey in (select o.o_custkey from orders o)"
    orders = queries(draft_after(sql, distinct_if_only_tested))["o"]
    assert [k.to_json() for k in orders.group_by] == [{"name": "o_custkey", "expr": {"col": "o_custkey"}}]
    assert not orders.aggregates
    sql = "select c.c_name from customer c where exists (select 1 from orders o where o.o_custkey = c.c_custkey)"
    assert queries(draft_after(sql, distinct_if_only_tested))["o"].group_by
    sql = "select o.o_orderdate from orders o, customer c where o.o_custkey = c.c_custkey"
    assert not any(q.group_by for q in draft_after(sql, distinct_if_only_tested).queries.values()), "a joined table"


def test_read_from_views_leaves_the_statement_for_spark() -> None:
    sql = "select c.c_name, o.o_totalprice from customer c join orders o on c.c_custkey = o.o_custkey"
    draft = draft_after(sql, read_from_views)
    views = [q.view for q in draft.queries.values()]
    assert len(set(views)) == 2 and all(v.startswith("__cxg_") for v in views)
    tables = {t.alias: t.name for t in draft.tree.find_all(exp.Table)}
    assert tables == {"c": queries(draft)["c"].view, "o": queries(draft)["o"].view}


# ---- the planner as a whole ------------------------------------------------------------------


@pytest.mark.parametrize(
    "sql, engine",
    [
        ("select 1 + 2 as three", "coordinator"),
        ("select c_mktsegment, count(*) from customer where c_acctbal > 0 group by 1 order by 2 desc", "nodes"),
        (
            "select c.c_name, sum(o.o_totalprice) from customer c, orders o where c.c_custkey = o.o_custkey "
            "and o.o_orderdate > '1995-01-01' and c.c_custkey in (select l_orderkey from lineitem) "
            "group by 1 order by 2",
            "spark",
        ),
    ],
)
def test_the_planner_leaves_its_input_as_it_is(sql: str, engine: str) -> None:
    query = checked(sql)
    before = query.tree.copy()
    plan = Planner(CATALOG).plan(query)
    assert plan.engine == engine
    assert query.tree == before and query.tree.sql() == before.sql()
    assert plan.query.tree is not query.tree
    assert not hasattr(plan, "inputs"), "a plan holds no rows"
    assert Planner(CATALOG).plan(query, copy=False).query is query, "a query handed over is planned as it is"


def _arrow_data(value: object, seen: set[int]) -> list[str]:
    """Where Arrow data sits inside `value` (dataclasses, lists, tuples, dicts), as paths."""
    if id(value) in seen:
        return []
    seen.add(id(value))
    if isinstance(value, (pa.Table, pa.RecordBatch, pa.Array, pa.ChunkedArray, pa.Scalar)):
        return [type(value).__name__]
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        parts = {f.name: getattr(value, f.name) for f in dataclasses.fields(value)}
    elif isinstance(value, dict):
        parts = {repr(k): v for k, v in value.items()}
    elif isinstance(value, (list, tuple)):
        parts = {str(i): v for i, v in enumerate(value)}
    else:
        return []
    return [f"{name}.{path}" for name, part in parts.items() for path in _arrow_data(part, seen)]


@pytest.mark.parametrize(
    "sql, first",
    [
        ("select c_mktsegment, count(*) from customer where c_acctbal > 0 group by 1 order by 2 desc", 0),
        (
            "select c.c_name, sum(o.o_totalprice) from customer c, orders o where c.c_custkey = o.o_custkey "
            "and c.c_custkey in (select l_orderkey from lineitem where l_quantity > 40) group by 1 order by 2",
            1,
        ),
        (
            "explain select o.o_orderkey from orders o where o.o_totalprice > (select avg(o_totalprice) from orders) "
            "and exists (select 1 from lineitem l where l.l_orderkey = o.o_orderkey)",
            1,
        ),
    ],
)
def test_the_planners_output_holds_no_arrow_data(sql: str, first: int) -> None:
    plan = Planner(CATALOG).plan(checked(sql))
    assert len(plan.first) == first, "an uncorrelated one-table subquery is listed, for the stage to answer first"
    assert _arrow_data(plan, set()) == [], "a plan is a description"
    assert _arrow_data({"rows": [plan, pa.table({"a": [1]})]}, set()) == ["'rows'.1.Table"], "what it looks for"


def test_a_join_plan_is_explained_without_running_anything() -> None:
    sql = (
        "select o.o_orderdate, sum(l.l_extendedprice) / 2 from lineitem l, orders o "
        "where l.l_orderkey = o.o_orderkey and o.o_orderdate < '1995-03-15' group by 1 order by 1"
    )
    plan = Planner(CATALOG).plan(checked(sql))
    text = "\n".join(plan.explain())
    assert "Spark: joins and everything above them" in text
    assert "filter: o.o_orderdate < CAST('1995-03-15' AS DATE)" in text
    assert "pre-aggregated on the nodes: group by l_orderkey; SUM(l.l_extendedprice) AS __a0" in text
    assert "rows:" not in text and "handed to Spark" not in text, "nothing ran"
    assert "REPARTITION(1)" in plan.spark_sql
    # `/` divides as a DOUBLE in Spark too, NULL for a zero divisor
    assert "TRY_DIVIDE(CAST(SUM(l.__a0) AS DOUBLE), 2)" in text


def test_having_goes_to_the_nodes_when_groups_live_on_one() -> None:
    planner = Planner(CATALOG)
    by_key = planner.plan(checked("select c_custkey, count(*) from customer group by 1 having count(*) > 1"))
    by_segment = planner.plan(checked("select c_mktsegment, count(*) from customer group by 1 having count(*) > 1"))
    assert "having" in by_key.local.request.to_json() and "having" not in by_segment.local.request.to_json()
    replicated = planner.plan(checked("select n_name, count(*) from nation group by 1 having count(*) > 1"))
    assert "having" in replicated.local.request.to_json()


def test_subqueries_to_answer_first_are_found_innermost_first_without_changing_the_query() -> None:
    sql = (
        "select c.c_name from customer c, orders o where c.c_custkey = o.o_custkey and o.o_totalprice > "
        "(select avg(o_totalprice) from orders where o_custkey in (select c_custkey from customer "
        "where c_mktsegment = 'A')) and exists (select 1 from lineitem l where l.l_orderkey = o.o_orderkey)"
    )
    query = checked(sql)
    before = query.tree.sql()
    found = list(Planner(CATALOG).subqueries_first(query))
    assert [f.plan.engine for f in found] == ["nodes"]
    assert found[0].select.sql() == (
        "SELECT customer.c_custkey AS c_custkey FROM customer AS customer WHERE customer.c_mktsegment = 'A'"
    ), "the innermost; the average waits for its answer, the correlated EXISTS is Spark's"
    assert query.tree.sql() == before
    assert not list(Planner(CATALOG).subqueries_first(checked("select (select max(n_name) from nation) as m")))


def test_a_path_finds_the_same_node_in_a_copy() -> None:
    tree = checked("select c_name from customer where c_custkey in (1, 2, 3) and c_acctbal > 0").tree
    node = list(tree.find_all(exp.Literal))[1]
    assert node_at(tree.copy(), path_to(node)) == node


def test_spark_text_divides_as_a_double_and_sorts_in_one_partition() -> None:
    tree = exp.maybe_parse("select a / b, a % b from t order by 1")
    text = spark_text(tree)
    assert "TRY_DIVIDE(CAST(a AS DOUBLE), b)" in text and "TRY_MOD(a, b)" in text and "REPARTITION(1)" in text
    assert tree.sql() == "SELECT a / b, a % b FROM t ORDER BY 1", "the tree is left as it is"
    assert "REPARTITION" not in spark_text(exp.maybe_parse("select a from t order by 1 limit 5"))


# ---- the run's first step, with the nodes' answers made up -------------------------------------


@pytest.fixture
def answers(monkeypatch):
    """The one-table subqueries' answers by table, instead of the nodes; counts the runs."""
    made_up: dict[str, pa.Table] = {}
    runs: list[str] = []

    def answer_one_table(plan, catalog, step="the query"):
        table = plan.scans[0].table
        runs.append(table)
        return made_up[table]

    monkeypatch.setattr(stage, "answer_one_table", answer_one_table)
    return made_up, runs


def test_answered_subqueries_are_replaced_in_a_copy_and_the_query_planned_again(answers) -> None:
    made_up, runs = answers
    made_up["orders"] = pa.table({"o_custkey": [1, None]})  # NOT IN (..., NULL): Spark keeps SQL's rule
    made_up["nation"] = pa.table({"m": [7]})
    sql = (
        "select c.c_name from customer c where c.c_custkey not in (select o_custkey from orders) "
        "and c.c_custkey > (select max(n_nationkey) from nation)"
    )
    query = checked(sql)
    before = query.tree.sql()
    answered, notes = stage.answer_subqueries_first(query, Planner(CATALOG), CATALOG)
    assert query.tree.sql() == before, "the caller's query is left as it is"
    assert "c.c_custkey > 7" in answered.tree.sql() and "NOT c.c_custkey IN (SELECT" in answered.tree.sql()
    assert notes == [
        "evaluated first on the nodes: (SELECT MAX(nation.n_nationkey) AS _col_0 FROM nation AS nation) -> 7"
    ]
    assert runs == ["orders", "nation"], "an answer left to Spark is not asked for again"
    assert Planner(CATALOG).plan(answered).engine == "spark"


def test_an_answer_can_make_the_subquery_around_it_answerable(answers) -> None:
    made_up, runs = answers
    made_up["nation"] = pa.table({"n_nationkey": [3, 4]})
    made_up["customer"] = pa.table({"c_custkey": [10]})
    sql = (
        "select o.o_orderkey from orders o where o.o_custkey in "
        "(select c_custkey from customer where c_custkey in (select n_nationkey from nation))"
    )
    answered, notes = stage.answer_subqueries_first(checked(sql), Planner(CATALOG), CATALOG)
    assert runs == ["nation", "customer"] and len(notes) == 2
    assert "o.o_custkey IN (10)" in answered.tree.sql()
    assert Planner(CATALOG).plan(answered).engine == "nodes", "one table left: it runs on the nodes"
    with pytest.raises(CardinalityError):  # nation answers two rows
        stage.answer_subqueries_first(
            checked("select c_name from customer where c_custkey = (select n_nationkey from nation)"),
            Planner(CATALOG),
            CATALOG,
        )
