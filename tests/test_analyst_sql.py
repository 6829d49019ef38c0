"""What analysts write beyond TPC-H, through the engine and against DuckDB on the same data: window
functions, set operations, grouping sets, LATERAL, UNNEST and the aggregates and functions DuckDB
has, on each path: Spark joining what the nodes filter and project, and one node's DataFusion
answering the whole query."""

from __future__ import annotations

import pytest

from benchmarks.compare import rows, rows_match
from gateway import ApiError
from gateway.sql.errors import UndefinedTable

QUERIES = [
    # window functions
    "select name, age, rank() over (order by age desc) as r from people order by r, name",
    "select city, name, row_number() over (partition by city order by id) as n from people order by city, n",
    "select id, age, sum(age) over (order by id rows between unbounded preceding and current row) as running "
    "from people order by id",
    "select id, age, lag(age) over (order by id) as before, lead(age, 2) over (order by id) as after "
    "from people order by id",
    "select city, id, dense_rank() over (partition by city order by age) as d, "
    "first_value(name) over (partition by city order by id) as f from people order by city, id",
    "select p.name, v.amount, v.amount / sum(v.amount) over (partition by p.id) as share "
    "from people p join visits v on p.id = v.person_id order by p.name, v.amount",
    # top n per group
    "select * from (select o_orderpriority, o_orderkey, o_totalprice, row_number() over "
    "(partition by o_orderpriority order by o_totalprice desc, o_orderkey) as n from orders) where n <= 2 "
    "order by o_orderpriority, n",
    # ranks over aggregates
    "select n_name, sum(o_totalprice) as total, rank() over (order by sum(o_totalprice) desc) as r "
    "from orders join customer on o_custkey = c_custkey join nation on c_nationkey = n_nationkey "
    "group by n_name order by r limit 5",
    # set operations
    "select name from people union select note from visits order by 1",
    "select city from people union all select note from visits order by 1",
    "select person_id from visits intersect select id from people order by 1",
    "select id from people except select person_id from visits order by 1",
    "select n_name from nation where n_regionkey = 1 union all select r_name from region order by 1",
    "select count(*) as n from (select c_custkey as k from customer where c_acctbal > 9000 "
    "union select o_custkey from orders where o_totalprice > 400000) u",
    # grouping sets
    "select city, age, count(*) as n, sum(score) as s, grouping(city, age) as g from people "
    "group by rollup (city, age) order by city nulls first, age nulls first, g",
    "select city, count(*) as n, grouping(city) as g from people group by cube (city) order by g, city nulls first",
    "select n_regionkey, n_name, count(*) as n from nation group by grouping sets ((n_regionkey), (n_name), ()) "
    "order by n_regionkey nulls first, n_name nulls first",
    "select c_mktsegment, n_name, sum(o_totalprice) as total from orders join customer on o_custkey = c_custkey "
    "join nation on c_nationkey = n_nationkey where n_regionkey = 0 group by rollup (c_mktsegment, n_name) "
    "order by c_mktsegment nulls first, n_name nulls first",
    # aggregates Spark computes
    "select city, stddev_samp(age) as s, var_samp(age) as v, count_if(age > 30) as c from people group by city "
    "order by city nulls first",
    "select stddev(l_quantity) as s, variance(l_extendedprice) as v, corr(l_quantity, l_extendedprice) as c "
    "from lineitem where l_shipdate < date '1993-01-01'",
    "select bool_and(age > 20) as a, bool_or(age > 50) as o from people",
    "select city, median(age) as m, quantile_cont(age, 0.25) as q, string_agg(name, ',' order by name) as s "
    "from people group by city order by city nulls first",
    "select approx_count_distinct(city) as n from people",
    # scalar functions Spark evaluates
    "select id, date_trunc('month', joined) as m, date_diff('day', joined, date '2024-01-01') as d, "
    "strftime(joined, '%Y/%m') as f from people order by id",
    "select id, regexp_matches(name, '^Z') as z, regexp_extract(name, '[a-z]+') as e, "
    "regexp_replace(name, '[aeiou]', '_') as r, regexp_replace(name, '([a-z])([a-z])', '\\2\\1', 'g') as g, "
    "regexp_replace(city, '(L|l)', '[\\1$]') as b from people order by id",
    "select id, split_part(city, 'l', 1) as p, lpad(name, 8, '*') as l, concat_ws('-', name, city) as c, "
    "greatest(age, 40) as g, least(age, 40) as s from people order by id",
    "select id, name from people where name ilike 'z%' order by id",
    "select date_part('year', joined) as y, count(*) as n from people group by 1 order by 1 nulls first",
    "select date_trunc('year', joined) as y, date_trunc('quarter', joined) as q, date_trunc('week', joined) as w, "
    "date_trunc('day', joined) as d from people order by 1 nulls first, 2, 3, 4",
    "select date_trunc('month', \"at\") as m, date_trunc('week', \"at\") as w from events order by 1 nulls first, 2",
    "select count(*) as n from lineitem where date_trunc('year', l_shipdate) = timestamp '1995-01-01'",
    "select id, sqrt(age) as r, ln(age) as l, exp(age / 100) as e, power(age, 2) as p, log10(age) as t, "
    "log(age) as g, log2(age) as b, sign(score) as s, round(pi(), 4) as pi, cbrt(age) as c from people order by id",
    "select id, round(sin(age), 6) as s, round(cos(age), 6) as c, round(atan2(age, 2), 6) as a, "
    "round(degrees(1), 6) as d, round(radians(180), 6) as r from people order by id",
    "select id, replace(name, 'o', '0') as r, reverse(name) as v, repeat(city, 2) as t, strpos(city, 'l') as p, "
    "starts_with(city, 'Be') as s, ends_with(city, 'in') as e, left(name, 2) as lft, right(city, 3) as rgt "
    "from people order by id",
    "select id, md5(city) as m, ascii(name) as a, chr(65 + id::integer) as c, "
    "translate(city, 'ei', 'EI') as t from people order by id",
    "select id, year(joined) as y, month(joined) as m, day(joined) as d, quarter(joined) as q, "
    "last_day(joined) as l, dayname(joined) as dn, monthname(joined) as mn, make_date(2024, id, 1) as md "
    "from people order by id",
    "select city, covar_pop(age, score) as cp, covar_samp(age, score) as cs, arg_max(name, age) as oldest, "
    "arg_min(name, id) as first from people group by city order by city nulls first",
    # LATERAL and UNNEST
    "select p.name, x.total from people p, lateral (select sum(v.amount) as total from visits v "
    "where v.person_id = p.id) x order by p.name",
    "select p.name, x.total from people p left join lateral (select sum(v.amount) as total from visits v "
    "where v.person_id = p.id having count(*) > 0) x on true order by p.name",
    "select c_name, o.o_orderkey from customer c cross join lateral (select o_orderkey from orders "
    "where o_custkey = c.c_custkey order by o_totalprice desc limit 1) o where c.c_custkey < 20 order by 1",
    "select id, unnest(string_split(city, 'l')) as part from people order by id, part",
    "select p.id, t.part from people p, unnest(string_split(p.city, 'l')) as t(part) order by 1, 2",
    "select t.c, count(*) as n from people p, unnest(string_split(p.name, '')) as t(c) group by 1 "
    "order by 2 desc, 1 limit 3",
    "select x, count(*) as n from unnest([1, 2, 3]) as t(x), people p where t.x <= p.id group by x order by x",
    "select unnest([1, 2]) as x, name from people order by name, x",
    # VALUES, FETCH FIRST, QUALIFY
    "select t.x, t.y, p.name from (values (1, 'a'), (3, 'b'), (9, 'c')) t(x, y) left join people p on p.id = t.x "
    "order by t.x",
    "select name from people order by id offset 2 rows fetch first 3 rows only",
    "select city, name from people qualify row_number() over (partition by city order by id) = 1 "
    "order by city nulls first",
]


# a lateral reference to the outer row: DataFusion cannot decorrelate it, so Spark answers these
# on the node path too (the plan says why)
LATERAL_ON_SPARK = {q for q in QUERIES if "cross join lateral" in q or "p, unnest(" in q}


ENGINES = {"spark": "engine", "node": "node_engine", "gathered": "gathered_engine"}


@pytest.mark.parametrize("path", list(ENGINES))
@pytest.mark.parametrize("sql", QUERIES)
def test_answers_equal_duckdbs(request, duck, sql: str, path: str) -> None:
    """On two nodes with hash-placed tables (Spark joins; or, as configured by default, the
    coordinator's DataFusion over the sub-queries it fetched whole), and on one node holding
    everything (its DataFusion answers, a query over one table the nodes alone)."""
    engine = request.getfixturevalue(ENGINES[path])
    result = engine.execute(sql)
    expected = duck.sql(sql).fetchall()
    assert rows_match(rows(result.table), expected, ordered="order by" in sql), (rows(result.table)[:10], expected[:10])
    if path == "node":
        ran = ("spark",) if sql in LATERAL_ON_SPARK else ("node", "nodes")
        assert result.engine in ran, "\n".join(result.plan.explain())
    elif path == "gathered":  # where the nodes cannot answer, the coordinator's DataFusion does
        assert (result.engine == "spark") == (sql in LATERAL_ON_SPARK), "\n".join(result.plan.explain())


def test_a_one_table_window_query_still_filters_and_projects_on_the_nodes(engine) -> None:
    plan = engine.stage(
        "select o_orderkey, rank() over (partition by o_orderpriority order by o_totalprice) as r "
        "from orders where o_orderdate < date '1993-01-01'"
    ).plan
    assert plan.engine == "spark"
    [scan] = plan.scans
    assert [c.sql() for c in scan.conjuncts] == ["orders.o_orderdate < CAST('1993-01-01' AS DATE)"]
    assert set(scan.columns) == {"o_orderkey", "o_orderpriority", "o_totalprice"}


def test_grouping_sets_over_a_join_fold_into_partial_aggregates_on_the_nodes(engine) -> None:
    plan = engine.stage(
        "select c_mktsegment, n_name, sum(o_totalprice) as total from orders join customer on o_custkey = c_custkey "
        "join nation on c_nationkey = n_nationkey group by rollup (c_mktsegment, n_name)"
    ).plan
    assert any(s.aggregates for s in plan.scans), "\n".join(plan.explain())


def test_each_branch_of_a_set_operation_reads_its_own_sub_queries(engine) -> None:
    plan = engine.stage("select n_name from nation where n_regionkey = 1 union all select r_name from region").plan
    scans = {s.table: s for s in plan.scans}
    assert set(scans) == {"nation", "region"}
    assert [c.sql() for c in scans["nation"].conjuncts] == ["nation.n_regionkey = 1"]


# ---- metadata, as ordinary results --------------------------------------------------------------


@pytest.fixture(params=["spark", "node"])
def either(request):
    """The engine of each path: the two-node region's, and the one whole node's."""
    return request.getfixturevalue("engine" if request.param == "spark" else "node_engine")


def test_show_tables_lists_the_regions_tables(either) -> None:
    engine = either
    result = engine.execute("show tables")
    assert result.table.schema.names == ["name"]
    assert result.table.column("name").to_pylist() == sorted(engine.catalog.tables())


@pytest.mark.parametrize("sql", ["describe orders", "show columns from orders", "DESCRIBE people"])
def test_describe_gives_duckdbs_columns_and_types(either, duck, sql: str) -> None:
    engine = either
    result = engine.execute(sql)
    expected = duck.sql(sql.replace("show columns from", "describe"))
    assert result.table.schema.names == expected.columns
    got = [(name, kind) for name, kind, *_ in rows(result.table)]
    assert got == [(name, kind) for name, kind, *_ in expected.fetchall()]


def test_information_schema_is_queried_like_any_table(either) -> None:
    engine = either
    result = engine.execute(
        "select t.table_name, count(*) as n from information_schema.tables t join information_schema.columns c "
        "on t.table_name = c.table_name where t.table_name like 'n%' group by 1 order by 1"
    )
    assert rows(result.table) == [("nation", 4)]
    columns = engine.execute(
        "select column_name, data_type from information_schema.columns where table_name = 'region' "
        "order by ordinal_position"
    )
    assert rows(columns.table) == [("r_regionkey", "BIGINT"), ("r_name", "VARCHAR"), ("r_comment", "VARCHAR")]


@pytest.mark.parametrize(
    "sql, error",
    [("describe nosuch", "table 'nosuch' does not exist"), ("select * from information_schema.views", "views")],
)
def test_metadata_of_what_does_not_exist_is_an_error_naming_it(engine, sql: str, error: str) -> None:
    with pytest.raises(UndefinedTable, match=error):
        engine.execute(sql)


def test_count_star_is_named_as_duckdb_names_it(engine, duck) -> None:
    sql = "select count(*), count(age) from people"
    assert engine.execute(sql).table.schema.names == duck.sql(sql).columns == ["count_star()", "count(age)"]


@pytest.mark.parametrize(
    "spark_sql, code",
    [
        ("select nope from range(1)", "planner_error"),  # a checked query's columns all resolve
        ("select __e0, count(*) from (select id as __e0, id % 2 as g from range(3)) group by g", "planner_error"),
        ("select id, count(*) from range(3) group by id % 2", "invalid_query"),  # the user's own mistake
    ],
)
def test_a_failure_of_the_sql_written_for_spark_is_the_services_error(spark, spark_sql: str, code: str) -> None:
    with pytest.raises(Exception) as failed:  # Spark's own AnalysisException
        spark.sql(spark_sql).collect()
    error = ApiError.of(failed.value, query=True)
    assert error.code == code and error.status == (500 if code == "planner_error" else 400), error


def test_ilike_on_one_table_is_evaluated_on_the_nodes_once_per_distinct_string(engine, duck) -> None:
    sql = "select id, name from people where name ilike 'z%' or city not ilike '%LIN' order by id"
    plan = engine.stage(sql).plan
    assert plan.engine == "nodes", "\n".join(plan.explain())
    assert rows_match(rows(engine.execute(sql).table), duck.sql(sql).fetchall(), ordered=True)


def test_date_trunc_and_year_over_one_table_stay_on_the_nodes(engine, duck) -> None:
    sql = (
        "select date_trunc('month', l_shipdate) as m, year(l_shipdate) as y, count(*) as n, sum(l_quantity) as q "
        "from lineitem group by 1, 2 order by 1"
    )
    result = engine.execute(sql)
    assert result.plan.engine == "nodes", "\n".join(result.plan.explain())
    assert rows_match(rows(result.table), duck.sql(sql).fetchall(), ordered=True)


def test_a_cte_referenced_twice_is_read_once_from_the_nodes(engine, duck) -> None:
    sql = (
        "with spend as (select o_custkey, sum(o_totalprice) as total from orders group by o_custkey) "
        "select a.o_custkey, a.total, b.total as next from spend a join spend b on b.o_custkey = a.o_custkey + 1 "
        "order by a.total desc, a.o_custkey limit 5"
    )
    assert rows_match(rows(engine.execute(sql).table), duck.sql(sql).fetchall(), ordered=True)
    lines = engine.execute("explain analyze " + sql).table.column("plan").to_pylist()
    executed = lines[lines.index("scans on the nodes (as the coordinator received them):") :]
    steps = [line.strip() for line in executed if line.startswith("  [")]
    scans = [line.strip().split(":")[0] for line in executed if line.startswith("    node-")]
    assert len(steps) == 1 and sorted(scans) == ["node-0", "node-1"], lines  # one scan of orders per node
