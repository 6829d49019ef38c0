"""Step 1 of a query's run phase: check it. Parse one read-only statement (`gateway.sql.parse`),
bind its named parameters as literals, refuse what the engine does not run, qualify every column
against the catalog, and authorize the tables it reads, before anything is planned or admitted.

The queries MariaDB and simulation nodes run unchanged are checked here too, as far as the gateway
reads them: one read-only statement, its parameters bound by the driver (`check_passed_through`).
"""

from __future__ import annotations

import datetime as dt
import functools
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from typing import Any

import sqlglot
from sqlglot import exp
from sqlglot.errors import OptimizeError, ParseError
from sqlglot.optimizer.annotate_types import annotate_types
from sqlglot.optimizer.qualify import qualify

from gateway.sql import params as parameters
from gateway.sql.errors import (
    ForbiddenTable,
    InvalidLiteral,
    SqlSyntaxError,
    UndefinedColumn,
    UndefinedTable,
    UnsupportedSql,
)
from gateway.sql.metadata import as_select, inline_information_schema, is_metadata
from gateway.sql.names import duckdb_name
from gateway.sql.parse import DIALECT, SET_OPERATIONS, check_constructs, parse, refuse_writes, syntax_error


@dataclass
class CheckedQuery:
    """A checked query: its tree (columns qualified), output names, and whether it is EXPLAIN
    ("plan": the plan only; "analyze": the plan run, with what each part did)."""

    tree: exp.Query  # a SELECT, or a set operation of them
    names: list[str]
    explain: str  # "", "plan" or "analyze"
    text: str

    @functools.cached_property
    def tables(self) -> frozenset[str]:
        """The tables it reads (`read_tables`), found once: a kept check is read again and again."""
        return read_tables(self.tree)

    def copy(self) -> CheckedQuery:
        """The same query over a copy of its tree, to rewrite without touching this one."""
        return CheckedQuery(self.tree.copy(), list(self.names), self.explain, self.text)

    def capped(self, rows: int) -> CheckedQuery:
        """The query stopped after its first `rows` rows, which are what a client keeping `rows`
        gets (a copy; this query when a LIMIT as small is written or it is EXPLAIN). The nodes
        then stop scanning, Spark collects no more, and an ordered query's sort keeps the top
        `rows` only."""
        limit = self.tree.args.get("limit")
        if self.explain:
            return self
        if limit is not None:
            bound = limit.args.get("expression")
            if not (isinstance(bound, exp.Literal) and bound.is_int and int(bound.this) > rows):
                return self
        query = self.copy()
        query.tree.set("limit", exp.Limit(expression=exp.Literal.number(rows)))
        return query


def output_names(query: exp.Query) -> list[str]:
    """The result's column names: aliases, column names, or the expression's text as DuckDB writes
    it (`gateway.sql.names`; of a set operation, its first SELECT's)."""
    select = query
    while isinstance(select, SET_OPERATIONS):
        select = select.this
    if isinstance(select, exp.Subquery):
        return output_names(select.this)
    names = []
    for projection in select.expressions:
        if isinstance(projection, exp.Alias):
            names.append(projection.alias)
        elif isinstance(projection, exp.Column):
            names.append(projection.name)
        elif isinstance(projection, exp.Star):
            names.append("*")
        else:
            names.append(duckdb_name(projection))
    return names


def check(sql: str, schema: dict[str, dict[str, str]], params: dict[str, Any] | None = None) -> CheckedQuery:
    """Parse, bind the named parameters, refuse what cannot run, and qualify every column against
    `schema` (table -> column -> type)."""
    statement, explain = parse(sql)
    if is_metadata(statement):  # SHOW TABLES, DESCRIBE t ...: a SELECT of the engine's own making
        statement = as_select(statement, schema)
        names = output_names(statement)
    else:
        parameters.bind(statement, params or {})
        names = output_names(statement)  # as written, before the spellings below change
        statement = statement.transform(_known_spelling)
        check_constructs(statement)
        order_by_subqueries_as_items(statement)
        inline_information_schema(statement, schema)
    for table in _table_references(statement):
        if table.name.lower() not in schema:
            raise UndefinedTable(f"table {table.name!r} does not exist")
    expand_all(statement)
    try:
        tree = qualify(statement, schema=schema, dialect=DIALECT, quote_identifiers=False, identify=False)
    except OptimizeError as e:
        message = str(e)
        if "could not be resolved" in message or "Unknown column" in message or "Column" in message:
            raise UndefinedColumn(message.split(". Line")[0]) from None
        raise UnsupportedSql(message) from None
    if "*" in names:  # SELECT * expands to the columns' own names
        names = list(tree.named_selects)
    read_text_as_dates(tree, schema)
    return CheckedQuery(tree, names, explain, sql)


def order_by_subqueries_as_items(tree: exp.Expression) -> None:
    """ORDER BY a subquery that is also an item of the select list orders by that item (its
    ordinal: what the engines then sort by is the column computed once); a subquery in ORDER BY
    that is not one is refused, naming it."""
    for select in tree.find_all(exp.Select):
        order = select.args.get("order")
        if order is None:
            continue
        items = [p.unalias() for p in select.expressions]
        for ordered in order.expressions:
            if ordered.this.find(exp.Query) is None:
                continue
            same = next((i for i, item in enumerate(items) if item == ordered.this), None)
            if same is None:
                raise UnsupportedSql(
                    f"a subquery in ORDER BY ({ordered.this.sql(dialect=DIALECT)[:80]}) is supported only as an "
                    "item of the select list: select it, and order by it"
                )
            ordered.set("this", exp.Literal.number(same + 1))


def _known_spelling(node: exp.Expression) -> exp.Expression:
    """DuckDB's spellings sqlglot leaves as unknown functions, as the construct they stand for:
    date_part('year', d) is EXTRACT(year FROM d)."""
    if (
        isinstance(node, exp.Anonymous)
        and node.name.upper() in ("DATE_PART", "DATEPART")
        and len(node.expressions) == 2
    ):
        part, value = node.expressions
        if isinstance(part, exp.Literal) and part.is_string:
            return exp.Extract(this=exp.var(part.name.upper()), expression=value)
    if type(node) in _PARTS:  # year(d) is EXTRACT(year FROM d), which the nodes evaluate
        return exp.Extract(this=exp.var(_PARTS[type(node)]), expression=node.this)
    return node


_PARTS = {exp.Year: "YEAR", exp.Quarter: "QUARTER", exp.Month: "MONTH", exp.Day: "DAY"}


def expand_all(tree: exp.Expression) -> None:
    """GROUP BY ALL groups by the select list's items without aggregates; ORDER BY ALL orders by
    every item of the select list, left to right."""
    for select in tree.find_all(exp.Select):
        group = select.args.get("group")
        if group is not None and group.args.get("all"):
            keys = [p.unalias().copy() for p in select.expressions if not p.find(exp.AggFunc)]
            select.set("group", exp.Group(expressions=keys) if keys else None)
        order = select.args.get("order")
        if order is not None and len(order.expressions) == 1:
            [by] = order.expressions
            if isinstance(by.this, exp.Var) and by.this.name.upper() == "ALL":
                positions = [exp.Literal.number(i + 1) for i in range(len(select.expressions))]
                order.set("expressions", [exp.Ordered(**{**by.args, "this": p}) for p in positions])


_COMPARED = (exp.EQ, exp.NEQ, exp.LT, exp.LTE, exp.GT, exp.GTE, exp.NullSafeEQ, exp.NullSafeNEQ, exp.Between, exp.In)


def _operands(node: exp.Expression) -> list[exp.Expression]:
    if isinstance(node, exp.Between):
        return [node.this, node.args["low"], node.args["high"]]
    if isinstance(node, exp.In):
        return [node.this, *node.expressions]
    return [node.left, node.right]


def _is_text(node: exp.Expression) -> bool:
    return isinstance(node, exp.Literal) and node.is_string


def read_text_as_dates(tree: exp.Expression, schema: dict[str, dict[str, str]]) -> None:
    """A string literal compared with a DATE or TIMESTAMP value is read as one (as DuckDB, PostgreSQL
    and Spark do: `o_orderdate >= '1995-01-01'`); a date literal that is no date is refused."""
    compared = [n for n in tree.find_all(*_COMPARED) if any(_is_text(a) for a in _operands(n))]
    if compared:
        annotate_types(tree, schema=schema, dialect=DIALECT)
    for node in compared:
        temporal = [a.type for a in _operands(node) if a.type and a.type.this in exp.DataType.TEMPORAL_TYPES]
        for operand in _operands(node) if temporal else ():
            if _is_text(operand):
                operand.replace(exp.cast(operand.copy(), to=temporal[0].copy()))
    for cast in tree.find_all(exp.Cast):
        if _is_text(cast.this) and cast.to.this == exp.DataType.Type.DATE:
            try:
                dt.date.fromisoformat(cast.this.this.strip())
            except ValueError:
                raise InvalidLiteral(f"{cast.this.this!r} is not a date (YYYY-MM-DD)") from None


def read_tables(tree: exp.Expression) -> frozenset[str]:
    """The tables a query reads."""
    return frozenset(table.name.lower() for table in _table_references(tree))


def _table_references(tree: exp.Expression) -> Iterator[exp.Table]:
    """The references to tables in `tree` (its common table expressions are not tables)."""
    ctes = {cte.alias_or_name for cte in tree.find_all(exp.CTE)}
    return (table for table in tree.find_all(exp.Table) if table.name and table.name not in ctes)


def authorize(tables: Iterable[str], token: str, may_read: Iterable[str]) -> None:
    """Refuse (403) a query of `token` that reads a table outside `may_read` (empty: every table)."""
    allowed = {name.lower() for name in may_read}
    refused = sorted(set(tables) - allowed) if allowed else []
    if refused:
        raise ForbiddenTable(f"token {token!r} may not read {', '.join(refused)}")


def check_passed_through(sql: str, params: dict[str, Any]) -> exp.Expression:
    """The one read-only statement of `sql` as MariaDB reads it, its `params` those it names, of the
    value types the native engine takes."""
    if not sql.strip():
        raise SqlSyntaxError("empty statement")
    try:
        trees = [t for t in sqlglot.parse(sql, read="mysql") if t is not None]
    except ParseError as e:
        raise syntax_error(e) from None
    if len(trees) != 1:
        raise SqlSyntaxError(f"one statement per request, got {len(trees)}")
    refuse_writes(trees[0])
    parameters.check(trees[0], params)
    for name, value in params.items():
        parameters.literal(name, value)
    return trees[0]
