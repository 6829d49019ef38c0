"""The planner without a region: each rewrite pass, SQL in -> SQL and sub-queries out, over a
catalog built here (no node, no Spark, no data)."""

from __future__ import annotations

import dataclasses
import json
import re
from dataclasses import dataclass
from pathlib import Path

import pyarrow as pa
import pytest
from sqlglot import exp

from gateway import RegionCatalog
from gateway.sql import stage
from gateway.sql.errors import NodeUnavailable, UnsupportedSql
from gateway.sql.passes import Draft, read_from_views
from gateway.sql.planner import FOR_NODE_ONLY, FOR_SPARK_ONLY, RULES, Planner
from gateway.sql.spark_dialect import spark_text
from gateway.sql.stage import CardinalityError
from gateway.sql.tree import node_at, path_to
from tests.planning import CATALOG, NODES, checked

pytestmark = pytest.mark.check  # the fast lane (`make check`): no Spark, no server


def draft_after(sql: str, rule) -> Draft:
    """The draft of `sql` once `rule` and every rule before it have run: those of a node's plan
    for a rule of the node's alone (`FOR_NODE_ONLY`), else those of Spark's."""
    skipped = FOR_SPARK_ONLY if rule in FOR_NODE_ONLY else FOR_NODE_ONLY
    draft = Draft(checked(sql).tree, CATALOG)
    for each in RULES[: RULES.index(rule) + 1]:
        draft = draft if each in skipped else each(draft)
    return draft


# ---- one pass at a time: SQL in, the plan so far out (tests/fixtures/passes/<rule>.sql) ---------

FIXTURES = Path(__file__).parent / "fixtures" / "passes"
PLAN_ID = re.compile(r"__cxg_[0-9a-f]{10}_")  # a view's name is unique to its plan: one stand-in for all


@dataclass(frozen=True)
class Case:
    """One fixture: a query, and the draft it becomes once its rule and every rule before it ran."""

    rule: str
    title: str
    sql: str
    expected: str


def fixtures() -> list[Case]:
    """Every case of every rule's file. A case: `-- title` lines, the query up to its `;`, then the
    expected description up to a blank line."""
    cases = []
    for rule in RULES:
        for block in (FIXTURES / f"{rule.__name__}.sql").read_text().strip().split("\n\n"):
            lines = block.splitlines()
            title = " ".join(line.removeprefix("--").strip() for line in lines if line.startswith("--"))
            body = [line for line in lines if not line.startswith("--")]
            end = next(i for i, line in enumerate(body) if line.endswith(";"))
            sql = " ".join(body[: end + 1]).removesuffix(";")
            cases.append(Case(rule.__name__, title, sql, "\n".join(body[end + 1 :])))
    return cases


def describe(draft: Draft) -> str:
    """The whole draft as text: the tree's SQL, every sub-query with what the passes gave it, the
    join edges."""
    lines = [draft.tree.sql(pretty=True)]
    for q in draft.queries.values():
        lines.append(f"[{q.index}] {q.table} AS {q.alias}")
        fields = [
            ("conjuncts", [c.sql() for c in q.conjuncts]),
            ("implied", [c.sql() for c in q.implied]),
            ("filters", [json.dumps(f.to_json()) for f in q.filters]),
            ("computed", [f"{name} = {e.sql()} -> {json.dumps(ir.to_json())}" for name, (e, ir) in q.computed.items()]),
            ("columns", [", ".join(q.columns)] if q.columns else []),
            ("group by", [json.dumps(k.to_json()) for k in q.group_by]),
            ("aggregates", [json.dumps(a.to_json()) for a in q.aggregates]),
            ("partials", q.partials),
            ("view", [q.view] if q.view else []),
        ]
        lines += [f"  {name}: {value}" for name, values in fields for value in values]
    for e in draft.edges:
        way = "both ways" if e.both_ways else "one way"
        lines.append(f"edge: {e.left.alias}.{e.left_column} = {e.right.alias}.{e.right_column}, {way}")
    return PLAN_ID.sub("__cxg_PLAN_", "\n".join(lines))


@pytest.mark.parametrize("case", fixtures(), ids=lambda c: f"{c.rule}: {c.title}")
def test_each_pass_rewrites_as_its_fixtures_say(case: Case) -> None:
    rule = next(r for r in RULES if r.__name__ == case.rule)
    assert describe(draft_after(case.sql, rule)) == case.expected


def test_every_rule_has_fixtures_and_its_views_one_plan_id() -> None:
    assert {c.rule for c in fixtures()} == {r.__name__ for r in RULES}
    draft = draft_after("select c.c_name from customer c join orders o on c.c_custkey = o.o_custkey", read_from_views)
    assert len({PLAN_ID.match(q.view).group() for q in draft.queries.values()}) == 1


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
    assert arrow_data_in(plan) == [], "a plan is a description: it holds no rows"
    assert Planner(CATALOG).plan(query, copy=False).query is query, "a query handed over is planned as it is"

    # the walk finds rows where there are some: a staged plan's fetched sub-queries
    assert arrow_data_in(stage.Staged(plan, {0: pa.table({"x": [1]})})) == ["staged.fetched[0]"]


ARROW_DATA = (pa.Table, pa.RecordBatch, pa.Array, pa.ChunkedArray, pa.Scalar)


def arrow_data_in(value: object, where: str = "", seen: set[int] | None = None) -> list[str]:
    """Where Arrow data sits in `value`, walking its dataclasses, objects, lists and dicts."""
    where = where or type(value).__name__.lower()
    seen = set() if seen is None else seen
    if id(value) in seen or isinstance(value, (str, bytes, int, float, type, exp.Expression)):
        return []
    seen.add(id(value))
    if isinstance(value, ARROW_DATA):
        return [where]
    if isinstance(value, dict):
        items = [(f"[{k!r}]", v) for k, v in value.items()]
    elif isinstance(value, (list, tuple, set, frozenset)):
        items = [(f"[{i}]", v) for i, v in enumerate(value)]
    elif hasattr(value, "__dict__") and not callable(value):
        items = [(f".{k}", v) for k, v in vars(value).items()]
    else:
        return []
    return [found for key, v in items for found in arrow_data_in(v, where + key, seen)]


EXPLAINED = """\
engine: storage nodes: select-project sub-queries; Spark: joins and everything above them
  (sql.joins = spark: every join runs on Spark)
select-project sub-queries (on compressed data):
  [0] lineitem AS l on n0, n1 (hash(l_orderkey) x4)
      columns: l_orderkey
      pre-aggregated on the nodes: group by l_orderkey; SUM(l.l_extendedprice) AS __a0
  [1] orders AS o on n0, n1 (hash(o_orderkey) x4)
      columns: o_orderkey, o_orderdate
      filter: o.o_orderdate < CAST('1995-03-15' AS DATE)
Spark SQL over the sub-queries:
  SELECT /*+ REPARTITION(1) */
    o.o_orderdate AS o_orderdate,
    TRY_DIVIDE(CAST(SUM(l.__a0) AS DOUBLE), 2) AS _col_1
  FROM __cxg_PLAN_0 AS l, __cxg_PLAN_1 AS o
  WHERE
    l.l_orderkey = o.o_orderkey
  GROUP BY
    o.o_orderdate
  ORDER BY
    o_orderdate NULLS LAST"""


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
    plan = Planner(CATALOG, joins="spark").plan(checked(sql))
    # no rows counted, nothing handed to Spark: nothing ran; `/` divides as a DOUBLE in Spark too, NULL for
    # a zero divisor; one partition keeps the order
    assert PLAN_ID.sub("__cxg_PLAN_", "\n".join(plan.explain())) == EXPLAINED
    assert PLAN_ID.sub("__cxg_PLAN_", plan.spark_sql) in EXPLAINED.replace("\n  ", "\n")


def test_a_join_of_replicated_tables_is_one_nodes_in_datafusions_sql() -> None:
    """Every table whole on each node: one node's DataFusion runs it, dividing as a DOUBLE with NULL
    for a zero divisor, NULLs last as DuckDB sorts them; an uncorrelated subquery over one table is
    still answered first (on the nodes' kernels: DataFusion aggregates in one partition)."""
    sql = (
        "select a.n_name, count(*) / sum(b.n_nationkey) as share from nation a, nation b where a.n_nationkey = "
        "b.n_nationkey and b.n_nationkey = (select max(n_nationkey) from nation) group by 1 order by 2 desc"
    )
    plan = Planner(CATALOG).plan(checked(sql))
    assert plan.engine == "node" and len(plan.first) == 1
    assert plan.why == "every table it reads is whole on n0 and on n1: one of them answers it"
    text = PLAN_ID.sub("__cxg_PLAN_", plan.node_sql.query)
    assert not plan.node_sql.kept
    assert "CAST(COUNT(*) AS DOUBLE PRECISION) / NULLIF(SUM(b.n_nationkey), 0) AS share" in text
    assert text.endswith("ORDER BY\n  share DESC NULLS LAST") and "MAX(nation.n_nationkey) AS _col_0" in text
    assert Planner(CATALOG, joins="spark").plan(checked(sql)).engine == "spark"


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


@pytest.mark.parametrize(
    "correlation, refused",
    [
        ("n.n_nationkey = o.o_custkey % 25", True),  # Spark applies the LIMIT once: wrong
        ("o.o_custkey % 25 = n.n_nationkey", True),
        ("n.n_nationkey = cast(o.o_custkey as int)", True),
        ("n.n_nationkey = o.o_custkey and n.n_name = cast(o.o_orderkey % 5 as varchar)", True),
        ("n.n_nationkey = o.o_custkey", False),  # a bare column of the outer query: right
        ("n.n_nationkey + 0 = o.o_custkey % 25", False),  # an expression on both sides: right
        ("n.n_nationkey > o.o_custkey % 25", False),  # no equality: right
        ("n.n_nationkey = 3 % 25", False),  # not correlated
    ],
)
def test_spark_text_refuses_a_limit_correlated_through_an_outer_expression(correlation: str, refused: bool) -> None:
    subquery = f"select n_name from nation n where {correlation} order by n_name limit 1"
    for sql in (f"select ({subquery}) as x from orders o", f"select x.n_name from orders o, lateral ({subquery}) x"):
        tree = checked(sql).tree
        if refused:
            with pytest.raises(UnsupportedSql, match="applies its LIMIT once, not per outer row"):
                spark_text(tree)
        else:
            assert "LIMIT 1" in spark_text(tree)
    unlimited = f"select (select max(n_name) from nation n where {correlation}) as x from orders o"
    assert "MAX(n.n_name)" in spark_text(checked(unlimited).tree), "without a LIMIT Spark decorrelates it right"


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


def test_the_same_subquery_in_each_common_table_expression_is_answered_once_and_put_in_each(answers) -> None:
    """A later common table expression sees the earlier ones' names, which are not its tables: its
    one-table subquery is answered first too; written the same in three places, it runs once."""
    made_up, runs = answers
    made_up["nation"] = pa.table({"n_nationkey": [3, 4]})
    france = "(select n_nationkey from nation where n_name = 'FRANCE')"
    sql = (
        f"with a as (select c_custkey from customer where c_custkey in {france}), "
        f"b as (select o_custkey from orders where o_custkey in {france}), "
        f"c as (select l_orderkey from lineitem where l_orderkey in {france}) "
        "select count(*) from a, b, c where a.c_custkey = b.o_custkey and b.o_custkey = c.l_orderkey"
    )
    answered, notes = stage.answer_subqueries_first(checked(sql), Planner(CATALOG), CATALOG)
    assert runs == ["nation"] and len(notes) == 3
    assert answered.tree.sql().count("IN (3, 4)") == 3 and "IN (SELECT" not in answered.tree.sql()
    made_up["nation"] = pa.table({"n_nationkey": list(range(stage.NODE_SUBSTITUTED + 1))})
    kept, notes = stage.answer_subqueries_first(checked(sql), Planner(CATALOG), CATALOG, stage.NODE_SUBSTITUTED)
    assert kept.tree.sql().count("IN (SELECT") == 3 and not notes, "a longer list is left to the engine that joins"


def test_a_node_that_left_after_the_tables_were_read_is_retried_not_a_defect() -> None:
    """A snapshot whose tables name a node the region no longer has (it was dropped between reading
    the nodes and taking the snapshot) plans as usual; routing a scan to it is a retryable error."""
    left = RegionCatalog.known({"n0": NODES["n0"]}, CATALOG.tables())
    plan = Planner(left).plan(checked("select c_custkey, count(*) from customer group by 1 having count(*) > 1"))
    assert plan.engine == "nodes"
    with pytest.raises(NodeUnavailable, match="node n1 left the region"):
        left.routes(plan.local.scan.info, plan.local.request)
