"""One semantics on every path (docs/sql.md): each rule runs as a one-table query, which the nodes
answer, over a join of a table hash-placed over two nodes with a replicated one, which Spark answers
(told to join) or each node over its own buckets, and over a join of tables one node holds whole,
which that node's DataFusion answers; each gives DuckDB's answer, or
each refuses with the same code. And the bounds of a query (`gateway.sql.limits`): below them deep and long expressions
are answered on both paths, past them the query is refused with 400 `too_complex`."""

from __future__ import annotations

import itertools
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pyarrow as pa
import pytest

import gateway.sql.engine  # loads every module that defines an SqlError (the whole run phase)
from benchmarks.compare import rows, rows_match
from gateway import SqlError
from gateway.sql.limits import MAX_IN_LIST, MAX_SQL_LENGTH, checked_text
from storage import MAX_EXPRESSION_DEPTH
from tests.refusals import refusal

# people hash-placed over two nodes, visits replicated: Spark answers (told to join), or each node over
# its own buckets, or the node holding both
JOINED = "people p join visits v on p.id = v.person_id"
ALONE = "people p"  # the nodes answer
# path -> (the engine's fixture, the FROM clause, the engine that answers)
PATHS = {
    "nodes": ("engine", ALONE, "nodes"),
    "spark": ("spark_engine", JOINED, "spark"),
    "colocated": ("engine", JOINED, "colocated"),
    "node": ("node_engine", JOINED, "node"),
}

# (select list, where, order by) over people p; None: the clause is left out
RULES = {
    "division by zero is NULL": ("p.id, p.age / (p.id - p.id) as d, p.score / 0 as e", None, "p.id"),
    "modulo by zero is NULL": ("p.id, p.age % (p.id - p.id) as m", None, "p.id"),
    "integer division gives a DOUBLE": ("p.id, p.age / 2 as half", None, "p.id"),
    "NULLs sort last, ascending": ("p.id, p.age", None, "p.age, p.id"),
    "NULLs sort last, descending": ("p.id, p.age", None, "p.age desc, p.id"),
    "NULLS FIRST as written": ("p.id, p.joined", None, "p.joined nulls first, p.id"),
    "strings compare by code point": ("p.id, p.name", "p.name < 'Zz'", "p.name, p.id"),
    "strings sort by code point": ("p.name", "p.name is not null", "p.name"),
    "a cast of text to a number": ("p.id, cast('12' as integer) + p.id as n", None, "p.id"),
    "a cast of a number to text": ("p.id, cast(p.age as varchar) as t", None, "p.id"),
    "a decimal keeps its scale": ("p.id, p.score * 2 as s", None, "p.id"),
    "NULL in arithmetic": ("p.id, p.age + null as n", None, "p.id"),
}
# what the nodes' expression language lacks: a one-table query using it runs on each node's DataFusion
SPARK_ONLY = {"modulo by zero is NULL", "a cast of text to a number", "a cast of a number to text"}
# the same refusal whichever path runs it
REFUSALS = {
    "a 64-bit overflow": ("p.age * 9223372036854775807 as big", "numeric_value_out_of_range"),
    "a cast of text that is no number": ("cast(p.name as integer) as n", "invalid_query"),
}


def _sql(select: str, where: str | None, order: str | None, source: str) -> str:
    return (
        f"select {select} from {source}"
        + (f" where {where}" if where else "")
        + (f" order by {order}" if order else "")
    )


@pytest.mark.parametrize("path", list(PATHS))
@pytest.mark.parametrize("rule", list(RULES))
def test_each_rule_gives_duckdbs_answer_on_every_path(request, duck, rule: str, path: str) -> None:
    fixture, source, answers = PATHS[path]
    sql = _sql(*RULES[rule], source)
    result = request.getfixturevalue(fixture).execute(sql)
    assert result.plan.engine == ("colocated" if path == "nodes" and rule in SPARK_ONLY else answers)
    expected = duck.sql(sql).fetchall()
    assert rows_match(rows(result.table), expected, ordered=True), (rows(result.table), expected)


@pytest.mark.parametrize("path", list(PATHS))
@pytest.mark.parametrize("rule", list(REFUSALS))
def test_each_refusal_is_the_same_on_every_path(request, duck, rule: str, path: str) -> None:
    fixture, source, _ = PATHS[path]
    select, code = REFUSALS[rule]
    sql = _sql(select, None, None, source)
    engine = request.getfixturevalue(fixture)
    refused = refusal(lambda: engine.execute(sql))
    assert (refused.status, refused.code) == (400, code), refused
    with pytest.raises(Exception):  # noqa: B017 - DuckDB refuses it too (its own error classes)
        duck.sql(sql).fetchall()


def test_a_construct_spark_lacks_is_422_unsupported_naming_it(engine) -> None:
    sql = "select p.name from people p order by (select max(v.amount) from visits v where v.person_id = p.id), p.id"
    refused = refusal(lambda: engine.execute(sql))
    assert (refused.status, refused.code) == (422, "unsupported"), refused
    assert "a subquery in ORDER BY" in refused.message and "v.person_id = p.id" in refused.message


# every operator between a literal of each type and an aggregate of each type, both ways round: the
# types alone cannot prove a BIGINT count times 88 fits 64 bits, the values do
OVER_AGGREGATES = ", ".join(
    f"{left} {op} {right} as x{i}"
    for i, (literal, op, aggregate, swap) in enumerate(
        itertools.product(
            ["88", "-11", "2.5", "1e0"],
            ["+", "-", "*", "/"],
            ["count(*)", "count(p.age)", "sum(p.age)", "max(p.age)", "sum(p.score)", "min(p.score)", "avg(p.age)"],
            [False, True],
        )
    )
    for left, right in [(aggregate, literal) if swap else (literal, aggregate)]
)


@pytest.mark.parametrize("path", list(PATHS))
def test_arithmetic_over_aggregates_gives_duckdbs_answer_on_every_path(request, duck, path: str) -> None:
    fixture, source, answers = PATHS[path]
    sql = f"select p.city, {OVER_AGGREGATES}, sum(p.age) * count(*) - max(p.score) as y from {source} group by 1"
    result = request.getfixturevalue(fixture).execute(f"{sql} order by 1")
    assert result.plan.engine == answers
    expected = duck.sql(f"{sql} order by 1").fetchall()
    assert rows_match(rows(result.table), expected, ordered=True, tolerance=1e-9), (rows(result.table), expected)


# (select list, group by) over lineitem l: the documented type of each output, whichever path answers
TYPED = (
    "l.l_returnflag, sum(l.l_extendedprice) as s, avg(l.l_extendedprice) as a, min(l.l_discount) as lo, "
    "max(l.l_extendedprice) as hi, sum(l.l_quantity * l.l_extendedprice) as p, count(*) as n",
    "l.l_returnflag",
)
EXPECTED_TYPES = {
    "l_returnflag": pa.string(),
    "s": pa.decimal128(38, 2),  # a SUM of DECIMAL(15, 2), as DuckDB gives it
    "a": pa.float64(),  # an AVG is a DOUBLE (Spark's own is DECIMAL(19, 6))
    "lo": pa.decimal128(15, 2),  # MIN / MAX keep the column's type
    "hi": pa.decimal128(15, 2),
    "p": pa.decimal128(38, 4),
    "n": pa.int64(),
}
ROW_TYPED = (
    "l.l_orderkey, l.l_extendedprice, l.l_extendedprice * 2 as twice, l.l_discount - 0.05 as d, l.l_tax + 1 as t"
)


TYPED_PATHS = {  # path -> (the engine's fixture, the FROM clause)
    "nodes": ("engine", "lineitem l"),
    "spark": ("spark_engine", "lineitem l join orders o on l.l_orderkey = o.o_orderkey"),
    "colocated": ("engine", "lineitem l join orders o on l.l_orderkey = o.o_orderkey"),
}


@pytest.mark.parametrize("path", list(TYPED_PATHS))
def test_result_types_are_the_same_on_every_path(request, duck, path: str) -> None:
    fixture, source = TYPED_PATHS[path]
    engine = request.getfixturevalue(fixture)
    grouped = engine.execute(f"select {TYPED[0]} from {source} group by {TYPED[1]} order by 1")
    assert grouped.plan.engine == path
    assert dict(zip(grouped.table.column_names, grouped.table.schema.types, strict=True)) == EXPECTED_TYPES
    expected = duck.sql(f"select {TYPED[0]} from {source} group by {TYPED[1]} order by 1").fetchall()
    assert rows_match(rows(grouped.table), expected, ordered=True)
    arithmetic = engine.execute(f"select {ROW_TYPED} from {source} order by 1, 2 limit 5")
    assert arithmetic.table.schema.types == [pa.int64(), pa.decimal128(15, 2), *[pa.decimal128(38, 2)] * 3]


def test_a_query_without_a_table_is_answered_whatever_it_calls(engine) -> None:
    assert rows(engine.execute("select 'p' || 'q' as pq, 1 / 0 as z").table) == [("pq", None)]


def test_named_parameters_stand_wherever_an_expression_may(engine) -> None:
    result = engine.answer(engine.plan(engine.check("select :x as v, :a || :b as ab", {"x": 7, "a": "p", "b": "q"})))
    assert rows(result.table) == [(7, "pq")]
    result = engine.answer(engine.plan(engine.check("select p.id from people p where p.id = :id", {"id": 3})))
    assert rows(result.table) == [(3,)]
    assert rows(engine.execute("select '::' as c, cast(p.id as varchar) from people p where p.id = 1").table) == [
        ("::", "1")
    ]


# ---- bounds --------------------------------------------------------------------------------------

SHAPES = {
    "or": lambda n: ("p.id in (1, 3) and (" + " or ".join(f"p.age = {i}" for i in range(n)) + ")", "p.id"),
    "plus": lambda n: ("p.id = 1", " + ".join(["p.id"] * n)),
    "parentheses": lambda n: ("(" * n + "p.id = 1" + ")" * n, "p.id"),
    "case": lambda n: ("p.id = 1", "case when p.id > 0 then " * n + "p.id" + " end" * n),
    "abs": lambda n: ("p.id = 1", "abs(" * n + "p.id" + ")" * n),
}
# levels of the tree a level of each shape takes (a CASE two: the CASE and its WHEN)
LEVELS = {"case": 2}


@pytest.mark.parametrize("source", [ALONE, JOINED], ids=["nodes", "spark"])
@pytest.mark.parametrize("shape", sorted(SHAPES))
def test_deep_expressions_below_the_bound_are_answered_on_both_paths(engine, duck, shape, source) -> None:
    where, select = SHAPES[shape]((MAX_EXPRESSION_DEPTH - 12) // LEVELS.get(shape, 1))
    sql = f"select {select} as v from {source} where {where} order by 1"
    result = engine.execute(sql)
    assert rows_match(rows(result.table), duck.sql(sql).fetchall(), ordered=True)


@pytest.mark.parametrize("shape", sorted(SHAPES))
def test_expressions_past_the_bound_are_too_complex(engine, shape: str) -> None:
    where, select = SHAPES[shape](MAX_EXPRESSION_DEPTH + 1)
    with pytest.raises(SqlError) as refused:
        engine.execute(f"select {select} from people p where {where}")
    assert (refused.value.status, refused.value.code) == (400, "too_complex")
    assert str(MAX_EXPRESSION_DEPTH) in str(refused.value)


def test_in_lists_and_text_past_their_bounds_are_too_complex(engine, duck) -> None:
    values = ", ".join(map(str, range(MAX_IN_LIST)))
    sql = f"select count(*) from people p where p.id in ({values})"
    assert rows(engine.execute(sql).table) == duck.sql(sql).fetchall()
    for refused_sql in (
        f"select count(*) from people p where p.id in ({values}, -1)",
        "select 1" + " " * MAX_SQL_LENGTH,
    ):
        with pytest.raises(SqlError) as refused:
            engine.execute(refused_sql)
        assert refused.value.code == "too_complex", refused.value


def _subclasses(kind: type) -> set[type]:
    found = set(kind.__subclasses__())
    return found.union(*(_subclasses(k) for k in found))


def test_every_sql_error_code_is_in_the_http_apis_error_table_and_none_is_the_bare_base() -> None:
    """A client can look up every code it may get; the base class's own code is never raised."""
    page = (Path(__file__).parents[1] / "docs" / "http-api.md").read_text()
    table = page[page.index("| status | codes |") : page.index("## Python clients")]
    leaves = [kind for kind in _subclasses(SqlError) if not kind.__subclasses__()]  # the bases are not raised
    codes = {kind.code for kind in leaves}
    assert SqlError.code not in codes
    assert not [code for code in sorted(codes) if f"`{code}`" not in table]
    package = Path(gateway.sql.engine.__file__).parent
    raised_bare = [p.name for p in package.rglob("*.py") if "raise SqlError(" in p.read_text()]
    assert not raised_bare


def test_queries_prepared_at_once_on_many_threads_are_checked_each_as_written() -> None:
    """The gateway prepares queries on a thread pool: the bounds check shares no tokenizer state."""
    queries = [f"select :p{i} as v, '{'x' * (i % 50)}' as s from t{i} where a = {i}" for i in range(3000)]
    alone = [checked_text(q) for q in queries]
    with ThreadPoolExecutor(8) as pool:
        assert list(pool.map(checked_text, queries)) == alone


# Spark applies this LIMIT once over the subquery, not per outer row (its decorrelation of a LIMIT
# correlated through an expression of the outer query), and DataFusion does not run it: refused
LIMIT_PER_EXPRESSION = (
    "select p.id, (select v.amount from visits v where v.person_id = p.id % 4 order by v.amount limit 1) as a "
    "from people p order by p.id"
)
LIMIT_PER_COLUMN = (  # what the refusal says to write instead
    "select p.id, (select v.amount from visits v where v.person_id = p.k order by v.amount limit 1) as a "
    "from (select id, id % 4 as k from people) p order by p.id"
)


@pytest.mark.parametrize("fixture", ["spark_engine", "engine"])
def test_a_subquery_limited_per_outer_expression_is_refused_and_per_outer_column_answered(
    request, duck, fixture: str
) -> None:
    engine = request.getfixturevalue(fixture)
    refused = refusal(lambda: engine.execute(LIMIT_PER_EXPRESSION))
    assert (refused.status, refused.code) == (422, "unsupported"), refused
    assert "v.person_id = p.id % 4" in refused.message and "derived table" in refused.message
    result = engine.execute(LIMIT_PER_COLUMN)
    expected = duck.sql(LIMIT_PER_COLUMN).fetchall()
    assert rows_match(rows(result.table), expected, ordered=True), (rows(result.table), expected)
