"""Generated input through the real HTTP API, never a 5xx.

* SQL drawn from a grammar of the supported subset (filters, arithmetic, CASE, IN, LIKE, BETWEEN,
  joins, grouping, arithmetic over aggregates, ordering) over the small tables of
  `tests.sql_cases` (NULLs, decimals, dates, timestamps, non-ASCII text) and mutations of the 22
  TPC-H queries (literals changed, comparisons turned, conjuncts dropped, orders reversed): each
  answer equals DuckDB's, or the query is refused with a 4xx whose code docs/http-api.md lists.
* Window functions, set operations and grouping sets drawn over the same tables: each answer
  equals DuckDB's.
* Correlated subqueries in every clause (the outer table by its own name or an alias): DuckDB's
  answer, or a documented 4xx.
* The HTTP API fuzzed against its own OpenAPI document with Schemathesis: wrong methods, content
  types, bodies, numbers; no 5xx, and every error in the JSON error format.

Afterwards no slot is left busy. The number of examples is bounded for CI; `pytest
tests/test_fuzz.py --long` runs the report's (docs/bench/README.md, "Bad input and overload").
"""

from __future__ import annotations

import re
from pathlib import Path

import duckdb
import pyarrow as pa
import pytest
import schemathesis
import sqlglot
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from schemathesis import GenerationMode
from sqlglot import exp

from benchmarks.compare import rows, rows_match
from loadtests.tpch_queries import all_queries
from tests.http import http
from tests.waiting import eventually

HTTP_API = (Path(__file__).parents[1] / "docs" / "http-api.md").read_text()
ERRORS = HTTP_API[HTTP_API.index("| status | codes |") : HTTP_API.index("## Python")]
ARROW = "application/vnd.apache.arrow.stream"
DOCUMENTED = set(re.findall(r"`([a-z_]+)`", ERRORS))

# alias -> column -> kind, for the tables of tests.sql_cases
TABLES = {
    "people": ("p", {"id": "int", "name": "text", "city": "text", "age": "int", "score": "num", "joined": "date"}),
    "visits": ("v", {"person_id": "int", "amount": "num", "note": "text"}),
    "events": ("e", {"person_id": "int", "at": "time", "weight": "float", "ok": "bool", "kind": "text"}),
}
SOURCES = [
    ["people"],
    ["visits"],
    ["events"],
    ["people", "visits"],
    ["people", "events"],
]
JOINS = {"visits": "p.id = v.person_id", "events": "p.id = e.person_id"}
TEXTS = ["Berlin", "Zoë", "zoe", "東京", "a", "Ωmega", "", "Lima"]
PATTERNS = ["B%", "%e%", "_o%", "%", "Z_ë", "%ö%"]
DATES = ["2020-01-31", "2021-01-01", "2019-12-31", "2024-02-29"]


def _examples(request: pytest.FixtureRequest, ci: int, long: int) -> int:
    return long if request.config.getoption("--long") else ci


def _columns(tables: list[str], kinds: set[str]) -> list[str]:
    return [f"{TABLES[t][0]}.{c}" for t in tables for c, k in TABLES[t][1].items() if k in kinds]


@st.composite
def numbers(draw, tables: list[str], depth: int = 2) -> str:
    """A numeric expression."""
    leaves = st.one_of(
        st.sampled_from(_columns(tables, {"int", "num", "float"})),
        st.integers(-1000, 1000).map(str),
        st.sampled_from(["0", "1", "2.5", "-0.75", "100.00"]),
    )
    if depth == 0:
        return draw(leaves)
    inner = numbers(tables, depth - 1)
    return draw(
        st.one_of(
            leaves,
            st.tuples(inner, st.sampled_from(["+", "-", "*", "/"]), inner).map(lambda t: f"({t[0]} {t[1]} {t[2]})"),
            inner.map(lambda a: f"abs({a})"),
            inner.map(lambda a: f"-({a})"),
            st.tuples(inner, st.integers(-5, 5)).map(lambda t: f"coalesce({t[0]}, {t[1]})"),
            st.tuples(predicates(tables, 0), inner, inner).map(
                lambda t: f"case when {t[0]} then {t[1]} else {t[2]} end"
            ),
        )
    )


@st.composite
def predicates(draw, tables: list[str], depth: int = 2) -> str:
    """A boolean condition."""
    texts = _columns(tables, {"text"})
    dates = _columns(tables, {"date"})
    choices = [
        st.tuples(numbers(tables, 1), st.sampled_from(["=", "<>", "<", "<=", ">", ">="]), numbers(tables, 0)).map(
            " ".join
        ),
        st.tuples(numbers(tables, 0), numbers(tables, 0), numbers(tables, 0)).map(
            lambda t: f"{t[0]} between {t[1]} and {t[2]}"
        ),
        st.tuples(numbers(tables, 0), st.lists(st.integers(-50, 50), min_size=1, max_size=5)).map(
            lambda t: f"{t[0]} in ({', '.join(map(str, t[1]))})"
        ),
        st.tuples(st.sampled_from(_columns(tables, {"int", "num", "text", "date", "float"})), st.booleans()).map(
            lambda t: f"{t[0]} is {'not ' if t[1] else ''}null"
        ),
    ]
    if texts:
        choices += [
            st.tuples(st.sampled_from(texts), st.sampled_from(["=", "<>", "<", ">="]), st.sampled_from(TEXTS)).map(
                lambda t: f"{t[0]} {t[1]} '{t[2]}'"
            ),
            st.tuples(st.sampled_from(texts), st.booleans(), st.sampled_from(PATTERNS)).map(
                lambda t: f"{t[0]} {'not ' if t[1] else ''}like '{t[2]}'"
            ),
            st.tuples(st.sampled_from(texts), st.lists(st.sampled_from(TEXTS), min_size=1, max_size=3)).map(
                lambda t: f"{t[0]} in ({', '.join(repr(v) for v in t[1])})"
            ),
        ]
    if dates:
        choices.append(
            st.tuples(st.sampled_from(dates), st.sampled_from(["<", ">=", "="]), st.sampled_from(DATES)).map(
                lambda t: f"{t[0]} {t[1]} date '{t[2]}'"
            )
        )
    if depth > 0:
        inner = predicates(tables, depth - 1)
        choices += [
            st.tuples(inner, st.sampled_from(["and", "or"]), inner).map(lambda t: f"({t[0]} {t[1]} {t[2]})"),
            inner.map(lambda a: f"not ({a})"),
        ]
    return draw(st.one_of(choices))


@st.composite
def queries(draw) -> str:
    """A query of the supported subset: a select-project or a grouping, over one table or a join,
    ordered by every output column when it has a LIMIT."""
    tables = draw(st.sampled_from(SOURCES))
    source = f"{tables[0]} {TABLES[tables[0]][0]}"
    for other in tables[1:]:
        kind = draw(st.sampled_from(["join", "left join"]))
        source += f" {kind} {other} {TABLES[other][0]} on {JOINS[other]}"
    where = draw(st.none() | predicates(tables))
    if draw(st.booleans()):  # a grouping
        groupable = _columns(tables, {"int", "text", "date", "bool"})
        keys = draw(st.lists(st.sampled_from(groupable), max_size=2, unique=True))
        aggregate = st.one_of(
            st.just("count(*)"),
            st.tuples(st.sampled_from(["sum", "min", "max", "avg", "count"]), numbers(tables, 1)).map(
                lambda t: f"{t[0]}({t[1]})"
            ),
        )
        literal = st.sampled_from(["88", "-11", "2.5", "-0.75", "1e0"])
        operator = st.sampled_from(["+", "-", "*", "/"])
        over_aggregate = st.one_of(  # arithmetic whose type bounds prove nothing (a count is any BIGINT)
            aggregate,
            st.tuples(literal, operator, aggregate).map(" ".join),
            st.tuples(aggregate, operator, literal).map(" ".join),
        )
        items = keys + draw(st.lists(over_aggregate, min_size=1, max_size=3))
        tail = f" group by {', '.join(keys)}" if keys else ""
        if keys and draw(st.booleans()):
            tail += f" having count(*) > {draw(st.integers(0, 2))}"
    else:
        item = st.one_of(numbers(tables), st.sampled_from(_columns(tables, {"text", "date", "time", "bool"})))
        items = draw(st.lists(item, min_size=1, max_size=4))
        tail = ""
    select = ", ".join(f"{e} as c{i}" for i, e in enumerate(items))
    distinct = "distinct " if not tail and draw(st.booleans()) else ""
    sql = f"select {distinct}{select} from {source}" + (f" where {where}" if where else "") + tail
    if draw(st.booleans()):
        order = ", ".join(f"{i + 1} {draw(st.sampled_from(['asc', 'desc']))}" for i in range(len(items)))
        sql += f" order by {order}"
        if draw(st.booleans()):
            sql += f" limit {draw(st.integers(0, 5))}"
    return sql


@st.composite
def analyst_queries(draw) -> str:
    """A window function, a set operation or grouping sets over one of the small tables (NULLs in
    keys and values). Windows order by a column whose ties every function here treats alike
    (ranks, sums over the default RANGE frame), or by people's unique id."""
    kind = draw(st.sampled_from(["window", "set", "grouping"]))
    if kind == "set":
        column_kind = draw(st.sampled_from(["int", "text"]))
        branches = []
        for _ in range(2):
            table = draw(st.sampled_from([t for t in TABLES if _columns([t], {column_kind})]))
            column = draw(st.sampled_from(_columns([table], {column_kind})))
            where = draw(st.none() | predicates([table], 1))
            branches.append(
                f"select {column} as c from {table} {TABLES[table][0]}" + (f" where {where}" if where else "")
            )
        operation = draw(st.sampled_from(["union", "union all", "intersect", "except"]))
        return f" {operation} ".join(branches)
    table = draw(st.sampled_from(list(TABLES)))
    keys = _columns([table], {"int", "text", "date", "bool"})
    values = _columns([table], {"int", "num"})
    if kind == "grouping":
        k1, k2 = draw(st.lists(st.sampled_from(keys), min_size=2, max_size=2, unique=True))
        grouping = draw(
            st.sampled_from([f"rollup ({k1}, {k2})", f"cube ({k1}, {k2})", f"grouping sets (({k1}), ({k2}), ())"])
        )
        value = draw(st.sampled_from(values))
        return (
            f"select {k1} as k1, {k2} as k2, count(*) as n, sum({value}) as s, grouping({k1}, {k2}) as g "
            f"from {table} {TABLES[table][0]} group by {grouping}"
        )
    partition = draw(st.lists(st.sampled_from(keys), max_size=1))
    over = f"partition by {partition[0]} " if partition else ""
    order = draw(st.sampled_from(keys + values))
    value = draw(st.sampled_from(values))
    functions = [
        f"rank() over ({over}order by {order})",
        f"dense_rank() over ({over}order by {order} desc)",
        f"count(*) over ({over.strip()})",
        f"sum({value}) over ({over}order by {order})",
        f"max({value}) over ({over.strip()})",
    ]
    if table == "people":
        functions += [f"row_number() over ({over}order by p.id)", f"lag({value}) over ({over}order by p.id)"]
    chosen = draw(st.lists(st.sampled_from(functions), min_size=1, max_size=2, unique=True))
    items = ", ".join(f"{f} as w{i}" for i, f in enumerate(chosen))
    where = draw(st.none() | predicates([table], 1))
    return f"select {order} as o, {items} from {table} {TABLES[table][0]}" + (f" where {where}" if where else "")


# the inner table of a correlated subquery: its alias, and how it is tied to an outer row of people
# (by the person, or by the city: the group key of a HAVING)
CORRELATED = {
    "visits": ("v", "v.person_id = {o}.id", "v.note = {o}.city"),
    "events": ("e", "e.person_id = {o}.id", "e.kind = {o}.city"),
    "people": ("p", "p.id <> {o}.id and p.city = {o}.city", "p.city = {o}.city"),
}


@st.composite
def correlated_queries(draw) -> str:
    """A query over people with a subquery that refers to the outer row, in one of its clauses: the
    select list, WHERE (a comparison, EXISTS, NOT EXISTS, IN, NOT IN), HAVING or ORDER BY. The
    outer table is named by its own name or by an alias; the inner one is another table or people
    again (then the outer one goes by its own name: the inner ``p`` is the other row)."""
    inner = draw(st.sampled_from(list(CORRELATED)))
    alias, by_person, by_city = CORRELATED[inner]
    o = "people" if inner == "people" else draw(st.sampled_from(["people", "o"]))
    source = "people" if o == "people" else "people o"
    extra = draw(st.none() | predicates([inner], 1))
    numbers_inside = _columns([inner], {"int", "num"})
    aggregate = draw(
        st.sampled_from(["count(*)", *(f"{f}({c})" for f in ("sum", "min", "max", "avg") for c in numbers_inside)])
    )

    def where(tie: str) -> str:
        return tie.format(o=o) + (f" and {extra}" if extra else "")

    scalar = f"(select {aggregate} from {inner} {alias} where {where(by_person)})"
    outer_number = draw(st.sampled_from([f"{o}.age", f"{o}.score", f"{o}.id"]))
    clause = draw(st.sampled_from(["select", "where", "exists", "not exists", "in", "not in", "having", "order by"]))
    if clause == "select":
        arithmetic = draw(st.sampled_from(["", " + 1", " * 2.5", f" - {outer_number}"]))
        return f"select {o}.id as c0, {scalar}{arithmetic} as c1 from {source}"
    if clause == "where":
        op = draw(st.sampled_from(["<", ">=", "=", "<>"]))
        return f"select {o}.id as c0, {o}.name as c1 from {source} where {outer_number} {op} {scalar}"
    if clause in ("exists", "not exists"):
        inside = f"select 1 from {inner} {alias} where {where(by_person)}"
        return f"select {o}.id as c0 from {source} where {clause} ({inside})"
    if clause in ("in", "not in"):
        key, outer_key = ("p.city", f"{o}.city") if inner == "people" else (f"{alias}.person_id", f"{o}.id")
        number = draw(st.sampled_from(numbers_inside))
        inside = f"select {key} from {inner} {alias} where {number} > {outer_number}"
        inside += f" and {extra}" if extra else ""
        return f"select {o}.id as c0 from {source} where {outer_key} {clause} ({inside})"
    if clause == "having":
        counted = f"(select count(*) from {inner} {alias} where {where(by_city)})"
        return f"select {o}.city as c0, count(*) as c1 from {source} group by {o}.city having count(*) >= {counted}"
    return f"select {o}.id as c0, {scalar} as c1 from {source} order by {scalar} desc nulls first, {o}.id"


def _mutate(tree: exp.Expression, choice: int, number: int) -> exp.Expression:
    """One small change to a TPC-H query: a literal changed, a comparison turned, a conjunct of
    the WHERE dropped, or the order reversed. Without its LIMIT: a mutation can leave ties at the
    cut, where any of the tied rows is a right answer (the rows are compared in any order)."""
    tree = tree.copy()
    tree.set("limit", None)
    literals = [n for n in tree.find_all(exp.Literal) if n.is_number and not isinstance(n.parent, exp.Limit)]
    comparisons = list(tree.find_all(exp.GT, exp.GTE, exp.LT, exp.LTE))
    where = tree.args.get("where")
    conjuncts = list(where.this.flatten()) if where is not None and isinstance(where.this, exp.And) else []
    orders = list(tree.find_all(exp.Ordered))
    kind = choice % 4
    if kind == 0 and literals:
        old = literals[number % len(literals)]
        value = float(old.this) * (0.5 + (number % 7) / 4)
        old.replace(exp.Literal.number(int(value) if "." not in old.this else round(value, 2)))
    elif kind == 1 and comparisons:
        old = comparisons[number % len(comparisons)]
        turned = {exp.GT: exp.LTE, exp.GTE: exp.LT, exp.LT: exp.GTE, exp.LTE: exp.GT}[type(old)]
        old.replace(turned(this=old.this, expression=old.expression))
    elif kind == 2 and len(conjuncts) > 1:
        dropped = conjuncts[number % len(conjuncts)]
        kept = [c for c in conjuncts if c is not dropped]
        where.set("this", exp.and_(*kept))
    elif orders:
        for ordered in orders:
            ordered.set("desc", not ordered.args.get("desc"))
    return tree


def _check(gateway, duck, sql: str, ordered: bool) -> None:
    """The gateway's answer (as Arrow) equals DuckDB's, or it is a documented 4xx; never a 5xx."""
    reply = http("POST", f"{gateway.url}/v1/statements", {"sql": sql, "wait": 120}, {"Accept": ARROW}, timeout=180)
    assert reply.status < 500, (sql, reply.status, reply.body[:500])
    if reply.status != 200:
        assert 400 <= reply.status < 500, (sql, reply.status)
        error = reply.json()["error"]
        assert error["code"] in DOCUMENTED and error["message"], (sql, error)
        return
    got = rows(pa.ipc.open_stream(reply.body).read_all())
    try:
        expected = rows(duck.sql(sql).to_arrow_table())
    except duckdb.Error as e:
        raise AssertionError(f"answered where DuckDB refuses ({e}): {sql}") from None
    assert rows_match(got, expected, ordered=ordered, tolerance=1e-6), (sql, got[:10], expected[:10])


def _answered_as_duckdb(
    gateway, duck, drawn: st.SearchStrategy[str], examples: int, ordered: bool | None = None
) -> None:
    """`examples` SQL texts `drawn`, each `_check`ed (compared in order when it has an ORDER BY,
    unless `ordered` says); afterwards no slot is left busy."""

    @settings(
        max_examples=examples,
        deadline=None,
        suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
    )
    @given(drawn)
    def run(sql: str) -> None:
        _check(gateway, duck, sql, ordered=" order by " in sql if ordered is None else ordered)

    run()
    _no_slot_busy(gateway)


GATEWAYS = pytest.mark.parametrize("gateway", ["native_gateway", "whole_gateway"], ids=["spark", "node"])


@GATEWAYS
def test_generated_sql_is_answered_as_duckdb_answers_or_refused_with_a_4xx(gateway, duck, request) -> None:
    """On two nodes (tables hash-placed over both: Spark joins) and on one node holding every table
    (its DataFusion answers the joins)."""
    _answered_as_duckdb(request.getfixturevalue(gateway), duck, queries(), _examples(request, 60, 1000))


@GATEWAYS
def test_generated_windows_set_operations_and_grouping_sets_answer_as_duckdb(gateway, duck, request) -> None:
    gateway = request.getfixturevalue(gateway)
    _answered_as_duckdb(gateway, duck, analyst_queries(), _examples(request, 40, 600), ordered=False)


@GATEWAYS
def test_generated_correlated_subqueries_answer_as_duckdb_or_are_refused_with_a_4xx(gateway, duck, request) -> None:
    """A subquery referring to the outer query, in every clause, the outer table by its own name or
    an alias: DuckDB's answer or a documented 4xx (`unsupported` naming the construct), never a 5xx."""
    gateway = request.getfixturevalue(gateway)
    _answered_as_duckdb(gateway, duck, correlated_queries(), _examples(request, 24, 500))


@GATEWAYS
def test_mutated_tpch_queries_are_answered_as_duckdb_answers_or_refused_with_a_4xx(gateway, duck, request) -> None:
    native_gateway = request.getfixturevalue(gateway)
    texts = all_queries()

    @settings(max_examples=_examples(request, 12, 300), deadline=None, suppress_health_check=[HealthCheck.too_slow])
    @given(st.integers(1, 22), st.integers(0, 3), st.integers(0, 1000))
    def run(number: int, choice: int, which: int) -> None:
        tree = sqlglot.parse_one(texts[number], dialect="duckdb")
        _check(native_gateway, duck, _mutate(tree, choice, which).sql(dialect="duckdb"), ordered=False)

    run()
    _no_slot_busy(native_gateway)


def _no_slot_busy(gateway) -> None:
    def idle() -> bool:
        cluster = http("GET", f"{gateway.url}/v1/cluster").json()
        return not cluster["queue"] and not cluster["in_flight"]

    eventually(idle, 30, "an empty queue and no query in flight")


def test_the_http_api_fuzzed_against_its_openapi_document(native_gateway, request) -> None:
    """Schemathesis draws requests from /openapi.json, valid ones and ones that break it (wrong
    types, missing fields, odd strings and numbers): no 5xx, every answer as the document says,
    errors in the JSON error format."""
    document = http("GET", f"{native_gateway.url}/openapi.json").json()
    # appends change the tables the other tests read: tests/test_appends.py sends them bad and good rows
    schema = schemathesis.openapi.from_dict(document).exclude(path="/v1/tables/{name}/rows")
    cases = st.one_of(schema.as_strategy(GenerationMode.POSITIVE), schema.as_strategy(GenerationMode.NEGATIVE))
    checks = [
        schemathesis.checks.not_a_server_error,
        schemathesis.checks.status_code_conformance,
        schemathesis.checks.content_type_conformance,
        schemathesis.checks.response_schema_conformance,
    ]

    @settings(max_examples=_examples(request, 150, 3000), deadline=None, suppress_health_check=list(HealthCheck))
    @given(cases)
    def run(case) -> None:
        response = case.call(base_url=native_gateway.url, timeout=60)
        case.validate_response(response, checks=checks)

    run()
    _no_slot_busy(native_gateway)


@pytest.mark.parametrize("method", ["PUT", "PATCH", "POST", "DELETE"])
def test_methods_the_document_does_not_name_are_405_in_the_error_format(native_gateway, method) -> None:
    document = http("GET", f"{native_gateway.url}/openapi.json").json()
    for path, operations in document["paths"].items():
        if method.lower() in operations:
            continue
        reply = http(method, native_gateway.url + re.sub(r"\{\w+\}", "0", path), "")
        assert reply.status == 405, (method, path, reply.status)
        assert reply.json()["error"]["code"] == "method_not_allowed", (method, path, reply.body)
