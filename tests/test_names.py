"""Result column names as DuckDB gives them (`gateway.sql.names`): each unaliased expression is
named as DuckDB 2.0 names it, compared with DuckDB itself; through the engine, on the nodes and
on Spark alike."""

from __future__ import annotations

import duckdb
import pytest
import sqlglot

from gateway.sql.duckdb_keywords import KEYWORDS
from gateway.sql.names import duckdb_name

EXPRESSIONS = [
    "a + 1", "a*2+b", "1 + 2 * 3", "(a + 1) * 2", "b / 2", "a // 2", "a % 3", "-a", "-1", "a - -1", "abs(-a)",
    "abs(a - 1)", "a * 1.5", "d - 1", "s || 'x'", "upper('Abc')", "UPPER(s)", "lower(s)", "length(s)",
    "a > 1", "a >= 1", "a <> 1", "a != 1", "a between 1 and 2", "a not between 1 and 2", "a in (1,2)",
    "a not in (1,2)", "a in (select a from t)", "exists (select 1)", "(select max(a) from t)",
    "s like 'a%'", "s not like 'x'", "s ilike 'x'", "s not ilike 'x'", "a is null", "a is not null",
    "not a > 1", "not (a > 1)", "a > 1 and a < 3", "a = 1 or a = 2", "a > 1 and a < 3 and a <> 2", "t.a + 1",
    "1", "1.5", "'lit'", "true", "null",
    "sum(b)", "count(distinct a)", "count(*)", "count(a)", "count(*) + 1", "avg(a)", "min(s)", "max(a) - min(a)",
    "sum(a) / count(*)", "round(avg(b), 2)", "stddev(a)", "median(a)", "quantile_cont(a, 0.5)",
    "approx_count_distinct(a)", "string_agg(s, ',')", "bool_and(a > 1)", "sum(b) filter (where a > 1)",
    "count(*) filter (where a > 1)", "coalesce(a, 0)", "coalesce(a, b, 0)", "nullif(a, 0)", "greatest(a, 1)",
    "cast(a as varchar)", "cast(a as integer)", "cast(b as decimal(10,2))", "a::bigint", "cast(d as varchar)",
    "extract(year from d)", "extract(month from d)", "year(d)", "date_trunc('month', d)", "date_diff('day', d, d)",
    "strftime(d, '%Y')", "round(b, 1)", "substring(s, 1, 2)", "trim(s)", "left(s, 2)", "concat(s, 'x')",
    "split_part(s, ',', 1)", "lpad(s, 5, '0')", "regexp_matches(s, 'a')", "regexp_replace(s, 'a', 'b')",
    "power(a, 2)", "sqrt(a)", "ln(a)", "upper(name)", "upper(t.name)", 'upper("type")', "replace(s, 'a', 'b')",
    "case when a > 1 then 'x' else 'y' end", "case when a > 1 then 'x' when a < 0 then 'z' end",
    "case a when 1 then 'x' else 'y' end",
    "row_number() over (order by a)", "rank() over (partition by s order by a desc)", "sum(a) over ()",
    "lag(a, 1) over (partition by s order by d)", "ntile(4) over (order by a)", "first_value(a) over (order by a)",
    "sum(a) over (order by d rows between 1 preceding and current row)",
]  # fmt: skip
# Known differences, documented in docs/sql.md: DuckDB writes a CAST's type as the query spelled it
# (`CAST(a AS double)`) and an INTERVAL as the function it becomes (`to_days(...)`).


@pytest.fixture(scope="module")
def con():
    con = duckdb.connect()
    con.execute('create table t(a integer, b decimal(15,2), s varchar, d date, name varchar, "type" varchar)')
    return con


@pytest.mark.parametrize("expression", EXPRESSIONS)
def test_an_unaliased_expression_is_named_as_duckdb_names_it(con, expression: str) -> None:
    projection = sqlglot.parse_one(f"select {expression} from t", read="duckdb").expressions[0]
    assert duckdb_name(projection) == con.sql(f"select {expression} from t").columns[0]


@pytest.mark.parametrize(
    "source", ["people", "people join visits v on people.id = v.person_id"], ids=["nodes", "spark"]
)
def test_the_engine_names_its_results_as_duckdb_does(engine, duck, source: str) -> None:
    sql = (
        "select count(*), count(age), sum(people.age) + 1, people.age > 30, upper(name), "
        f"coalesce(people.score, 0), people.name from {source} group by all"
    )
    assert engine.execute(sql).table.schema.names == duck.sql(sql).columns


def test_the_keywords_are_duckdbs(con) -> None:
    assert {k for (k,) in con.sql("select keyword_name from duckdb_keywords()").fetchall()} == KEYWORDS
