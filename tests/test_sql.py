"""The SQL layer: the regular plan, NULL semantics, empty inputs, non-ASCII text, refusals; its
joins on Spark (`tests.test_colocated_answers` has those every node answers over its own buckets)."""

from __future__ import annotations

import re

import pytest
import sqlglot
from sqlglot import exp

from benchmarks.compare import rows, rows_match
from gateway import SqlError
from gateway.sql.errors import (
    InvalidLiteral,
    InvalidQuery,
    ReadOnlyViolation,
    SqlSyntaxError,
    UndefinedColumn,
    UndefinedTable,
    UnsupportedSql,
)
from gateway.sql.params import InvalidParameter
from gateway.sql.tree import factor_or
from loadtests import query
from tests.refusals import refusal


@pytest.fixture(scope="module")
def engine(spark_engine):
    """The region's engine told to join on Spark: this module's joins are Spark's plans."""
    return spark_engine


# ---- the regular plan ----------------------------------------------------------------------------


def test_q3_is_split_into_select_project_subqueries_and_a_spark_join(engine) -> None:
    plan = engine.stage(query(3)).plan
    assert plan.engine == "spark"
    scans = {s.table: s for s in plan.scans}
    assert set(scans) == {"customer", "orders", "lineitem"}
    assert [c.sql() for c in scans["customer"].conjuncts] == ["customer.c_mktsegment = 'BUILDING'"]
    assert [c.sql() for c in scans["orders"].conjuncts] == ["orders.o_orderdate < CAST('1995-03-15' AS DATE)"]
    assert [c.sql() for c in scans["lineitem"].conjuncts] == ["lineitem.l_shipdate > CAST('1995-03-15' AS DATE)"]
    assert set(scans["lineitem"].columns) == {"l_orderkey"}, "only the join key travels; the revenue is computed"
    [(name, (expression, _))] = scans["lineitem"].computed.items()
    assert expression.sql() == "lineitem.l_extendedprice * (1 - lineitem.l_discount)"
    # revenue is summed per order on the nodes (eager aggregation); Spark sums the partial sums
    assert [k.name for k in scans["lineitem"].group_by] == ["l_orderkey"]
    assert scans["lineitem"].partials == [f"SUM(lineitem.{name}) AS __a0"]
    assert "c_mktsegment" not in plan.spark_sql and "SUM(lineitem.__a0) AS revenue" in plan.spark_sql
    text = "\n".join(plan.explain())
    assert "Spark: joins" in text and "filter: lineitem.l_shipdate >" in text and "hash(l_orderkey) x16" in text
    assert "pre-aggregated on the nodes: group by l_orderkey" in text


PREAGGREGATED = [
    # COUNT over the NULL-extended side of a LEFT JOIN: customers without visits count 0
    "select p.id, count(v.amount), sum(v.amount), min(v.note), max(v.amount) from people p "
    "left join visits v on p.id = v.person_id group by p.id order by p.id",
    # no GROUP BY, and a filter on the aggregated table that stays above the join
    "select count(v.person_id), sum(v.amount) from visits v join people p on p.id = v.person_id "
    "where v.amount > p.score",
    "select p.city, count(e.weight), sum(e.weight), max(e.at) from people p join events e "
    "on p.id = e.person_id group by p.city order by p.city nulls first",
]


@pytest.mark.parametrize("sql", PREAGGREGATED)
def test_aggregates_over_one_joined_table_are_taken_on_the_nodes_first(engine, duck, sql: str) -> None:
    plan = engine.stage(sql).plan
    assert any(s.aggregates for s in plan.scans), "\n".join(plan.explain())
    result = engine.execute(sql)
    expected = duck.sql(sql).fetchall()
    assert rows_match(rows(result.table), expected, ordered="order by" in sql), (rows(result.table), expected)


@pytest.mark.parametrize(
    "sql, distinct",
    [
        ("select p.name from people p where exists (select * from visits v where v.person_id = p.id) order by 1", True),
        (
            "select p.name from people p where not exists (select * from visits v where v.person_id = p.id "
            "and v.amount > 5) order by 1 nulls first",
            True,
        ),
        # NOT IN over a column holding NULL: no row qualifies, however many times the NULL is sent
        (
            "select p.name from people p where p.id not in (select v.person_id from visits v, people q "
            "where q.id = 1) order by 1",
            False,
        ),
        ("select p.name from people p where p.id not in (select v.person_id from visits v) order by 1", True),
        (
            "select p.name from people p where p.id in (select e.person_id from events e where e.at is not null) "
            "order by 1",
            True,
        ),
        # two columns: the pairs are sent as they are
        (
            "select p.name from people p where exists (select * from visits v where v.person_id = p.id "
            "and v.note <> p.name) order by 1",
            False,
        ),
    ],
)
def test_subqueries_only_tested_read_each_key_once(engine, duck, sql: str, distinct: bool) -> None:
    plan = engine.stage(sql).plan
    grouped = [s for s in plan.scans if s.group_by and not s.aggregates]
    assert bool(grouped) is distinct, "\n".join(plan.explain())
    assert rows_match(rows(engine.execute(sql).table), duck.sql(sql).fetchall(), ordered=True)


def test_the_same_aggregate_twice_is_one_partial_state(engine, duck) -> None:
    sql = (
        "select p.city, sum(v.amount) as s, sum(v.amount) * 2 as twice, max(v.amount) as m from people p "
        "join visits v on p.id = v.person_id group by p.city having sum(v.amount) > 1 order by p.city nulls first"
    )
    [visits] = [s for s in engine.stage(sql).plan.scans if s.table == "visits"]
    assert [a.func for a in visits.aggregates] == ["sum", "max"], visits.aggregates
    assert rows_match(rows(engine.execute(sql).table), duck.sql(sql).fetchall(), ordered=True)


@pytest.mark.parametrize(
    "sql",
    [
        "select count(*) from people p join visits v on p.id = v.person_id",  # COUNT(*) counts joined rows
        "select count(distinct v.note) from people p join visits v on p.id = v.person_id",
        "select sum(v.amount + p.score) from people p join visits v on p.id = v.person_id",  # two tables
        "select avg(v.amount) from people p join visits v on p.id = v.person_id",
    ],
)
def test_aggregates_that_cannot_be_split_stay_with_spark(engine, duck, sql: str) -> None:
    assert not any(s.aggregates for s in engine.stage(sql).plan.scans)
    assert rows_match(rows(engine.execute(sql).table), duck.sql(sql).fetchall(), ordered=False)


@pytest.mark.parametrize(
    "sql, gathered",
    [
        # ORDER BY on a column the select list does not show, and on an aggregate
        (
            "select p.name, v.amount from people p join visits v on p.id = v.person_id "
            "order by v.note desc nulls last, p.id",
            True,
        ),
        (
            "select p.city, count(*) as n from people p join visits v on p.id = v.person_id "
            "group by p.city order by n desc, p.city nulls first",
            True,
        ),
        ("select p.name from people p join visits v on p.id = v.person_id order by v.amount limit 2", False),
        ("select p.name from people p join visits v on p.id = v.person_id", False),
    ],
)
def test_spark_sorts_an_unlimited_result_in_one_partition(engine, duck, sql: str, gathered: bool) -> None:
    plan = engine.stage(sql).plan
    assert ("REPARTITION(1)" in plan.spark_sql) is gathered, plan.spark_sql
    expected = duck.sql(sql).fetchall()
    assert rows_match(rows(engine.execute(sql).table), expected, ordered="order by" in sql)


def test_single_table_queries_run_on_the_nodes_only(engine) -> None:
    plan = engine.stage(query(1)).plan
    assert plan.engine == "nodes" and plan.spark_sql is None
    request = plan.local.request
    assert [g.name for g in request.group_by] == ["__g0", "__g1"]
    assert {a.func for a in request.aggregates} == {"sum", "avg", "count"}
    explain = engine.execute("EXPLAIN " + query(6)).table.column("plan").to_pylist()
    assert explain[0].startswith("engine: storage nodes") and any("reduce/final" in line for line in explain)


def _analyzed(engine, sql: str) -> list[str]:
    return engine.execute("EXPLAIN ANALYZE " + sql).table.column("plan").to_pylist()


def _scanned_rows(lines: list[str], step: str) -> dict[str, int]:
    """node -> rows of the scans that EXPLAIN ANALYZE lists under `step`."""
    at = lines.index(f"  {step}")
    found = {}
    for line in lines[at + 1 :]:
        if not line.startswith("    node-"):
            break
        node, rest = line.strip().split(": ", 1)
        found[node] = int(rest.split(" rows")[0].replace(",", ""))
    return found


def test_explain_analyze_of_a_one_table_query_shows_each_nodes_scan(engine, duck) -> None:
    lines = _analyzed(engine, query(1))
    groups = duck.sql(query(1)).fetchall()
    assert lines[0].startswith("engine: storage nodes")  # the plan first, as EXPLAIN shows it
    assert f": {len(groups)} row(s)" in next(line for line in lines if line.startswith("executed in"))
    per_node = _scanned_rows(lines, "the query: lineitem")
    assert set(per_node) == {"node-0", "node-1"}  # lineitem is hash-placed over both
    scanned = [line for line in lines if line.startswith("    node-")]
    blocks = [int(line.split("(")[1].split(" block")[0]) for line in scanned]
    # partial groups come back, at most one per group and block, not rows
    assert all(0 < per_node[f"node-{i}"] <= len(groups) * blocks[i] for i in range(2))
    lineitem = duck.sql("select count(*) from lineitem").fetchall()[0][0]
    total = sum(int(line.split("; ")[1].split(" rows scanned")[0].replace(",", "")) for line in scanned)
    assert total == lineitem  # every row of the blocks the nodes read, no block pruned by Q1's filter


def test_explain_analyze_of_a_join_shows_the_subqueries_and_sparks_operators(engine, duck) -> None:
    lines = _analyzed(engine, query(3))
    answer = duck.sql(query(3)).fetchall()
    assert f": {len(answer)} row(s)" in next(line for line in lines if line.startswith("executed in"))
    step = next(line.strip() for line in lines if "customer AS customer, fetched first" in line)
    building = duck.sql("select count(*) from customer where c_mktsegment = 'BUILDING'").fetchall()[0][0]
    assert sum(_scanned_rows(lines, step).values()) == building
    spark = next(line for line in lines if line.startswith("Spark: "))
    assert int(spark.split("Spark: ")[1].split(" job")[0]) >= 1
    cost = next(line for line in lines if line.startswith("Spark's fixed cost: "))
    phases = re.findall(r"(parsing|analysis|optimization|planning) (\d+) ms", cost)
    assert [name for name, _ in phases] == ["parsing", "analysis", "optimization", "planning"], cost
    assert re.search(r"whole-stage code generated in [\d.]+ ms, \d+ class\(es\) compiled", cost), cost
    assert re.fullmatch(
        r"  slowest rules: [\w$]+ [\d.]+ ms \(\d+ run\(s\), \d+ changing the plan\).*", lines[lines.index(cost) + 1]
    )
    operators = [line.strip() for line in lines[lines.index(spark) + 2 :]]
    assert operators[0] == "TakeOrderedAndProject"  # ORDER BY ... LIMIT 10, after adaptive execution
    # the sub-queries handed over as local relations are Spark's local scans, row for row
    plan = lines[: lines.index(next(line for line in lines if line.startswith("executed in")))]
    handed = [
        int(plan[i - 1].split("rows: ")[1].replace(",", "")) for i, line in enumerate(plan) if "local relation" in line
    ]
    local = [
        int(line.split(": ")[1].split(" rows")[0].replace(",", "")) for line in operators if "LocalTableScan" in line
    ]
    assert handed and sorted(local) == sorted(handed), (handed, operators)


def test_explain_analyze_of_a_query_of_no_table(engine) -> None:
    lines = _analyzed(engine, "select 1 + 1 as two")
    assert lines[0].startswith("engine: coordinator") and lines[-1].endswith(": 1 row(s)")


def test_or_of_per_table_conditions_pushes_an_implied_filter(engine) -> None:
    plan = engine.stage(query(19)).plan
    scans = {s.table: s for s in plan.scans}
    assert len(scans["part"].implied) == 1 and "p_brand = 'Brand#12'" in scans["part"].implied[0].sql()
    assert len(scans["lineitem"].implied) == 1 and "l_quantity >= 1" in scans["lineitem"].implied[0].sql()
    # what all three branches share is taken out of the OR: two filters and the join condition
    assert {c.sql() for c in scans["lineitem"].conjuncts} == {
        "lineitem.l_shipmode IN ('AIR', 'AIR REG')",
        "lineitem.l_shipinstruct = 'DELIVER IN PERSON'",
    }
    assert any("l_partkey IN" in r for r in scans["lineitem"].reductions), "the join edge reduces lineitem"


def test_factor_or_takes_out_what_every_branch_shares() -> None:
    def factored(where: str) -> list[str]:
        return [c.sql() for c in factor_or(sqlglot.parse_one(f"SELECT 1 FROM t WHERE {where}").args["where"].this)]

    assert factored("(a = 1 AND b = 2) OR (b = 2 AND a = 1 AND c = 3) OR (a = 1 AND b = 2 AND d = 4)") == [
        "a = 1",
        "b = 2",
    ]
    assert factored("(a = 1 AND b = 2) OR (a = 1 AND c = 3)") == ["a = 1", "b = 2 OR c = 3"]
    assert factored("a = 1 OR b = 2") == ["a = 1 OR b = 2"]
    assert factored("a = 1") == ["a = 1"]


def test_outer_join_conditions_push_only_into_the_nullable_side(engine) -> None:
    scans = {s.table: s for s in engine.stage(query(13)).plan.scans}
    assert [c.sql() for c in scans["orders"].conjuncts] == ["orders.o_comment NOT LIKE '%special%requests%'"]
    plan = engine.stage(
        "select p.name, v.amount from people p left join visits v on p.id = v.person_id where v.amount > 5"
    ).plan
    visits = next(s for s in plan.scans if s.table == "visits")
    assert not visits.conjuncts, "a WHERE condition on the NULL-extended side must stay above the join"


# ---- semantics against DuckDB --------------------------------------------------------------------

SEMANTICS = [
    "select count(*), count(age), sum(age), avg(age), min(name), max(name), sum(score) from people",
    "select city, count(*), count(age), sum(score) from people group by city order by city",
    "select city, count(*) from people group by city order by city desc nulls last",
    "select name from people where age = null",
    "select name from people where age is null order by id",
    "select name from people where not (age > 30) order by id",
    "select name from people where age not in (31, null)",
    "select name from people where city in ('Berlin', null) order by id",
    "select name, age from people where age is not null and score is null",
    "select count(distinct city), count(distinct age) from people",
    "select age, count(*) from people group by age having count(*) > 1 order by age",
    "select name from people order by age desc, id limit 3",
    "select name from people order by age nulls first, id limit 3 offset 1",
    "select distinct city from people order by city",
    "select p.name, count(v.amount), sum(v.amount) from people p left join visits v on p.id = v.person_id "
    "group by p.name order by p.name",
    "select v.note, p.name from visits v join people p on p.id = v.person_id order by v.note",
    "select name from people where id in (select person_id from visits) order by id",
    "select name from people where id not in (select person_id from visits where person_id is not null) order by id",
    "select name from people p where not exists (select 1 from visits v where v.person_id = p.id) order by id",
    "select * from empty_people",
    "select count(*), sum(age), avg(score), max(name) from empty_people",
    "select city, count(*) from empty_people group by city",
    "select p.name from people p join empty_people e on p.id = e.id",
    "select name from people where 1 = 0",
    "select count(*) from people where age > 1000",
    "select name from people where name like 'Z%' order by name",
    "select name from people where name like '%ö%' or name like '%東%' order by id",
    "select substring(name, 1, 2) as head, name from people where name is not null order by id",
    "select id from people where substring(name, 1, 1) in ('Z', 'J', '東') order by id",
    "select id from people where substring(name, 1, 1) not in ('Z', 'J', '東') order by id",
    "select name, upper(name) from people where id < 4 order by id",
    "select city, count(*) from people where city >= 'T' group by city order by city",
    "select note from visits where note like '%é' or note = '日本語' order by note",
    "select id, case when age > 40 then 'old' when age is null then 'unknown' else 'young' end from people order by id",
    "select id, joined + interval '1' month, extract(year from joined) from people order by id",
    "select id, score * 2, score / 4, age + 1, -age from people order by id",
    "select 1 + 1, 'ünï', date '2024-01-31' + interval '1' month",
    # joins of every side, and the operators Spark runs above them
    "select p.name, v.amount from people p full join visits v on p.id = v.person_id "
    "order by 1 nulls first, 2 nulls first",
    "select p.name, v.amount from people p right join visits v on p.id = v.person_id order by 1 nulls first, 2",
    "select * from people natural join empty_people",
    "select p.name, q.city from people p join people q using (id) order by p.id",
    "select count(*) from people p cross join visits v",
    "select p.name from people p where (p.id, p.age) in (select v.person_id, 31 from visits v) order by 1",
    "select count(*) filter (where age > 30), count(*) filter (where city = 'Berlin') from people",
    "select name || '!', id % 3 from people where name ilike 'z%' order by id",
    "select id from people where age is distinct from 31 order by id",
    "select city, max(age) from people group by all order by city nulls first",
    "select city, age, count(*) from people group by all order by all desc",
    "select max(age) from people group by all",
    # `/` gives a DOUBLE in Spark too (its decimal quotient keeps 6 places: 10.00 / 7000 = 0.001429)
    "select p.id, cast(v.amount as decimal(38, 2)) / 7000 from people p join visits v on p.id = v.person_id "
    "order by 1, 2",
    # ORDER BY an unnamed aggregate, by position or by its text
    "select city, count(*) from people group by city order by 2, 1 nulls first",
    "select city, age, count(*) from people group by city, age order by count(*) desc, 1, 2",
    "select * exclude (name, joined) from people order by id",
    # a string compared with a date is read as a date, on the nodes and in Spark
    "select name from people where joined between '2020-01-01' and '2021-12-31' order by id",
    "select id from people where joined in ('2020-01-31', '2019-12-31') or '2022-01-01' < joined order by id",
    "select p.name from people p join visits v on p.id = v.person_id where p.joined >= '2020-01-01' order by 1",
    "select e.person_id from events e where e.at > '2024-01-01 08:00:00' order by 1 nulls first",
]


@pytest.mark.parametrize("sql", SEMANTICS)
def test_same_answer_as_duckdb(engine, duck, sql: str) -> None:
    result = engine.execute(sql)
    expected = duck.sql(sql).fetchall()
    assert rows_match(rows(result.table), expected, ordered="order by" in sql), (rows(result.table), expected)


def test_empty_table_keeps_its_columns(engine) -> None:
    result = engine.execute("select * from empty_people")
    assert result.table.num_rows == 0
    assert result.table.column_names == ["id", "name", "city", "age", "score", "joined"]


def test_result_names_follow_the_select_list(engine) -> None:
    result = engine.execute("select city as town, count(*) as n, sum(age) from people group by city")
    assert result.table.column_names == ["town", "n", "sum(age)"]


# ---- refusals ----------------------------------------------------------------------------------

REFUSED = [
    ("insert into people values (9, 'x', 'y', 1, 1.0, null)", ReadOnlyViolation, "INSERT"),
    ("update people set age = 1", ReadOnlyViolation, "UPDATE"),
    ("delete from people", ReadOnlyViolation, "DELETE"),
    ("create table t as select * from people", ReadOnlyViolation, "CREATE"),
    ("drop table people", ReadOnlyViolation, "DROP"),
    ("alter table people add column x int", ReadOnlyViolation, "ALTER"),
    ("truncate table people", ReadOnlyViolation, "TRUNCATE"),
    ("select * into copy from people", ReadOnlyViolation, "INTO"),
    ("select 1; delete from people", ReadOnlyViolation, "one statement"),
    ("select 1; select 2", UnsupportedSql, "one statement"),
    ("select [1, 2] as l", UnsupportedSql, "only as what UNNEST expands"),
    ("select unnest([1, 2]) as x, count(*) from people group by 1", UnsupportedSql, "unnest in FROM"),
    ("select string_split(name, ',') from people", UnsupportedSql, "only as what UNNEST expands"),
    ("select * from people tablesample (10 percent)", UnsupportedSql, "TABLESAMPLE"),
    ("with recursive r as (select 1 as n) select * from r", UnsupportedSql, "recursive WITH"),
    ("select foo(age) from people", UnsupportedSql, "function FOO"),
    ("select epoch(joined) from people", UnsupportedSql, "function EPOCH is"),  # as written, not TIME_TO_UNIX
    ("select levenshtein(name, 'x') from people", UnsupportedSql, "function LEVENSHTEIN is"),
    ("select distinct on (city) name from people", UnsupportedSql, "DISTINCT ON"),
    ("select name from people where name similar to 'Z.*'", UnsupportedSql, "SIMILAR TO"),
    ("select name from people where name glob 'Z*'", UnsupportedSql, "GLOB"),
    ("select name from people where id = any (select person_id from visits)", UnsupportedSql, "ANY"),
    ("select name from people where id > all (select person_id from visits)", UnsupportedSql, "ALL"),
    ("select name from people order by name collate nocase", UnsupportedSql, "COLLATE"),
    ("select name from people limit (select 2)", UnsupportedSql, "LIMIT must be a non-negative integer"),
    ("select p.name from people p semi join visits v on p.id = v.person_id", UnsupportedSql, "SEMI JOIN"),
    ("select p.name from people p asof join visits v on p.id >= v.person_id", UnsupportedSql, "ASOF JOIN"),
    ("select * from people pivot (count(*) for city in ('Berlin'))", UnsupportedSql, "PIVOT"),
    ("select * from people for update", UnsupportedSql, "FOR UPDATE"),
    ("select * from read_csv('/etc/passwd')", UnsupportedSql, "function READ_CSV"),
    ("show databases", UnsupportedSql, "SHOW DATABASES is not supported"),
    ("set threads = 1", UnsupportedSql, "not SET"),
    ("describe select 1", UnsupportedSql, "not DESCRIBE"),
    ("merge into people using people q on people.id = q.id when matched then delete", ReadOnlyViolation, "MERGE"),
    ("copy people from 'people.csv'", ReadOnlyViolation, "COPY"),
    ("grant select on people to bob", ReadOnlyViolation, "GRANT"),
    ("comment on table people is 'x'", ReadOnlyViolation, "COMMENT"),
    ("attach 'other.db'", ReadOnlyViolation, "ATTACH"),
    ("vacuum", ReadOnlyViolation, "VACUUM"),
    ("with x as (delete from people returning *) select * from x", ReadOnlyViolation, "DELETE"),
    ("select name from people where joined = '2020-13-01'", InvalidLiteral, "is not a date"),
    ("select name from people where joined < date '2021-02-29'", InvalidLiteral, "is not a date"),
    ("select * from people where age = ?", InvalidParameter, "positional parameters"),
    ("select * from people where age = :age", InvalidParameter, "no value for parameter"),
    # valid SQL that fails on its types or data: the query's fault, not the service's
    ("select name + 1 from people", InvalidQuery, "needs numbers"),
    ("select sum(p.name) from people p join visits v on p.id = v.person_id", InvalidQuery, "numeric"),
    (
        "select cast(p.name as int) from people p join visits v on p.id = v.person_id",
        InvalidQuery,
        "CAST_INVALID_INPUT",
    ),
    (
        "select id, (select v.amount from visits v where v.person_id = p.id) from people p",
        InvalidQuery,
        "TOO_MANY_ROWS",
    ),
    ("select * from nowhere", UndefinedTable, "nowhere"),
    ("select nope from people", UndefinedColumn, "nope"),
    ("selec * from people", SqlSyntaxError, "syntax error"),
    ("select * from people where", SqlSyntaxError, "syntax error"),
]


@pytest.mark.parametrize(("sql", "error", "fragment"), REFUSED)
def test_refused_with_a_reason(engine, sql: str, error: type, fragment: str) -> None:
    refused = refusal(lambda: engine.execute(sql))
    assert refused.code == error.code and re.search(fragment, refused.message), refused
    assert refused.status in (400, 422) and refused.code and refused.sqlstate


# ---- shrinking the sub-queries before Spark ------------------------------------------------------


def test_semi_join_reduction_follows_the_chain_of_joins(engine) -> None:
    plan = engine.stage(query(5)).plan
    scans = {s.table: s for s in plan.scans}
    assert any("values of region.r_regionkey" in r for r in scans["nation"].reductions)
    assert any("values of orders.o_orderkey" in r for r in scans["lineitem"].reductions)
    assert scans["lineitem"].rows < scans["lineitem"].info.rows / 10
    text = "\n".join(plan.explain())
    assert "semi-join filter: l_orderkey IN" in text and "handed to Spark as" in text


@pytest.mark.parametrize("number", [3, 5, 7, 8, 10, 21])
def test_fetched_sub_queries_keep_only_rows_with_a_partner(engine, number: int) -> None:
    # a sub-query reduced after it sent its keys (orders by lineitem in Q3) sends the smaller set
    # again: at the end every fetched sub-query's keys are among those of each one that filters it
    staged = engine.stage(query(number))
    pairs = 0
    for edge in staged.plan.edges:
        for source, column, target, target_column in edge.directions():
            sent, received = staged.fetched.get(source.index), staged.fetched.get(target.index)
            if sent is None or received is None:
                continue
            assert set(received.column(target_column).to_pylist()) <= set(sent.column(column).to_pylist())
            pairs += 1
    assert pairs


def test_joins_the_reduction_already_did_are_left_out_of_spark(engine, duck) -> None:
    # Q21: orders (o_orderstatus = 'F', filtered on the nodes) only joins l1 on its unique key,
    # and every l1 row kept has its order: the join changes nothing and Spark never sees orders
    plan = engine.stage(query(21)).plan
    dropped = {s.alias for s in plan.scans if s.index in plan.dropped}
    assert "orders" in dropped and "l1" not in dropped
    orders = next(s for s in plan.scans if s.alias == "orders")
    assert orders.view not in plan.spark_sql and "not handed to Spark" in "\n".join(plan.explain())
    # a key that is not unique joins a row more than once: that join stays
    sql = (
        "select e.kind, count(*) from events e, visits v where e.person_id = v.person_id and v.amount > 3 "
        "group by e.kind order by e.kind nulls first"
    )
    plan = engine.stage(sql).plan
    assert not plan.dropped
    assert rows_match(rows(engine.execute(sql).table), duck.sql(sql).fetchall(), ordered=True)


@pytest.mark.parametrize(
    "sql, answered",
    [
        ("select p.name from people p where exists (select * from visits v where v.person_id = p.id) order by 1", True),
        # NOT EXISTS keeps the visits whose person_id is NULL (9 and NULL match no person)
        (
            "select v.note from visits v where not exists (select 1 from people p where p.id = v.person_id) "
            "order by 1 nulls first",
            True,
        ),
        (
            "select v.note, p.name from visits v, people p where p.id = v.person_id and p.city = 'Berlin' "
            "and not exists (select 1 from events e where e.person_id = p.id and e.ok) order by 1 nulls first",
            True,
        ),
        # two conditions, an OR around it, an aggregate inside (always one row), an outer join around it
        (
            "select p.name from people p where exists (select * from visits v where v.person_id = p.id "
            "and v.note <> p.name) order by 1",
            False,
        ),
        (
            "select p.name from people p where p.age > 40 or exists (select * from visits v "
            "where v.person_id = p.id) order by 1 nulls first",
            False,
        ),
        (
            "select p.name from people p where exists (select count(*) from visits v where v.person_id = p.id) "
            "order by 1 nulls first",
            False,
        ),
        (
            "select v.note from visits v left join people p on p.id = v.person_id "
            "where not exists (select 1 from events e where e.person_id = p.id) order by 1 nulls first",
            False,
        ),
    ],
)
def test_exists_on_one_key_is_answered_at_the_coordinator(engine, duck, sql: str, answered: bool) -> None:
    plan = engine.stage(sql).plan
    text = "\n".join(plan.explain())
    assert ("EXISTS answered here" in text) is answered, text
    assert ("EXISTS" in plan.spark_sql) is not answered, plan.spark_sql
    assert rows_match(rows(engine.execute(sql).table), duck.sql(sql).fetchall(), ordered=True)


@pytest.mark.parametrize(
    "sql, on_nodes",
    [
        # grouped by the hash key (lineitem: l_orderkey; people: id): every group lives on one node
        (
            "select l_orderkey, sum(l_quantity) from lineitem group by l_orderkey having sum(l_quantity) > 250 "
            "order by 1",
            True,
        ),
        ("select id, count(*), min(name) from people group by id, city having count(*) = 1 order by id", True),
        # a group spread over both nodes, and an average (its partial state is not the answer)
        ("select city, count(*) from people group by city having count(*) > 1 order by city nulls first", False),
        ("select id, avg(score) from people group by id having avg(score) > 1 order by id", False),
    ],
)
def test_having_runs_on_the_nodes_when_every_group_lives_on_one(engine, duck, sql: str, on_nodes: bool) -> None:
    plan = engine.stage(sql).plan
    assert plan.engine == "nodes" and ("having" in plan.local.request.to_json()) is on_nodes, plan.local.request
    assert ("HAVING (every group lives on one node)" in "\n".join(plan.explain())) is on_nodes
    assert rows_match(rows(engine.execute(sql).table), duck.sql(sql).fetchall(), ordered=True)


def test_uncorrelated_one_table_subqueries_run_first_on_the_nodes(engine) -> None:
    plan = engine.stage(query(18)).plan
    assert plan.notes and plan.notes[0].startswith("evaluated first on the nodes")
    # Q20's part keys become a long IN list on partsupp; EXPLAIN shows a few and the count
    [partsupp] = [s for s in engine.stage(query(20)).plan.scans if s.table == "partsupp"]
    [line] = [line for line in partsupp.explain() if "ps_partkey IN" in line]
    values = partsupp.conjuncts[0].find(exp.In).expressions
    assert len(values) > 8 and line.endswith(f"... ({len(values):,} values))") and line.count(",") < 12
    orders = next(s for s in plan.scans if s.table == "orders")
    assert any("o_orderkey IN" in c.sql() for c in orders.conjuncts)
    plan = engine.stage(query(22)).plan
    customer = next(s for s in plan.scans if s.table == "customer")
    assert any("c_acctbal >" in c.sql() and "SELECT" not in c.sql() for c in customer.conjuncts)


def test_correlated_subqueries_are_reduced_by_the_outer_rows(engine) -> None:
    plan = engine.stage(query(17)).plan
    inner = [s for s in plan.scans if s.table == "lineitem"]
    assert all(any("values of part.p_partkey" in r for r in s.reductions) for s in inner)


def test_a_scalar_subquery_with_several_rows_is_an_error(engine) -> None:
    with pytest.raises(SqlError, match="more than one row"):
        engine.execute("select name from people where age = (select age from people where age is not null)")
