"""Step 3 of a query's run phase: stage a plan, once the query holds its slots. What must run
before the final plan exists runs here, on the nodes:

1. Uncorrelated subqueries over one table (``o_orderkey IN (SELECT l_orderkey FROM lineitem
   GROUP BY l_orderkey HAVING sum(l_quantity) > 300)``, a scalar ``(SELECT avg(c_acctbal) FROM
   customer WHERE ...)``, an uncorrelated EXISTS), which the plan lists as `Plan.first`, are
   answered as one-table queries, and their answers replace them as literals, in a copy of the
   query; the query is then planned again (`Planner.plan_answered`), so that the conditions around
   them are pushed down like any other.
2. A ``spark`` plan's sub-queries are made small: semi-join reduction on the nodes
   (`gateway.sql.reduce`, over join-key sets), then the joins and EXISTS tests the coordinator has
   thereby done leave Spark's statement (`gateway.sql.eliminate`), and how each sub-query reaches
   Spark is decided; when every one was fetched whole and they are few rows in all, none does:
   the plan becomes ``gathered``, and the coordinator joins them.

The final plan stays a description; the rows fetched meanwhile travel beside it, in `Staged`.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import pyarrow as pa
import pyarrow.compute as pc
from sqlglot import exp

from gateway.sql.catalog import RegionCatalog
from gateway.sql.check import CheckedQuery
from gateway.sql.eliminate import answer_exists, drop_finished_joins
from gateway.sql.errors import SqlError
from gateway.sql.exchange import ExchangeOptions, describe
from gateway.sql.local import answer_one_table
from gateway.sql.plan import Plan
from gateway.sql.planner import Planner
from gateway.sql.reduce import reduce_and_fetch
from gateway.sql.tree import literal, node_at, path_to

MAX_SUBSTITUTED = 10_000  # values an IN subquery may become
NODE_SUBSTITUTED = 64  # ... for one node: DataFusion semi-joins a longer one for less than planning it costs


class CardinalityError(SqlError):
    code = "cardinality_violation"
    sqlstate = "21000"


@dataclass
class Staged:
    """A plan ready to execute: the final plan, and the rows of the sub-queries the stage fetched
    (scan index -> rows), which the execution hands to Spark instead of scanning them again."""

    plan: Plan
    fetched: dict[int, pa.Table] = field(default_factory=dict)


def stage(plan: Plan, catalog: RegionCatalog, options: ExchangeOptions, joins: str = "node") -> Staged:
    """`plan` made ready to execute over `catalog` (the snapshot its query holds), its sub-queries
    handed over to Spark as `options` say; planned again (after subqueries answered first) with
    `joins` as `Planner`'s. The plan is consumed: the final plan is made of its parts."""
    if plan.first:
        plan = answer_first(plan, catalog, joins)
    if plan.engine != "spark":
        return Staged(plan)
    fetched = reduce_and_fetch(plan, catalog, options.fetch_rows)
    answer_exists(plan, fetched)
    drop_finished_joins(plan, fetched)
    handed = [s for s in plan.scans if s.index not in plan.dropped]
    rows = sum(fetched[s.index].num_rows for s in handed if s.index in fetched)
    whole = all(s.index in fetched for s in handed)
    if plan.gather and whole and options.gather_rows > 0 and rows <= options.gather_rows:
        plan.engine = "gathered"
        plan.why = f"{plan.why}; its sub-queries, fetched whole, are {rows:,} row(s): the coordinator joins them"
        plan.deliveries = {s.index: plan.dropped.get(s.index) or "joined at the coordinator" for s in plan.scans}
    else:
        plan.deliveries = {
            s.index: plan.dropped.get(s.index) or describe(options, s, fetched.get(s.index)) for s in plan.scans
        }
    return Staged(plan, fetched)


def answer_first(plan: Plan, catalog: RegionCatalog, joins: str = "node") -> Plan:
    """The plan of `plan.written` with the answers of its one-table subqueries in their place, and
    a note per answer for EXPLAIN ANALYZE; `plan` itself when no answer could take a subquery's place."""
    planner = Planner(catalog, joins)
    most = NODE_SUBSTITUTED if plan.engine == "node" else MAX_SUBSTITUTED
    answered, notes = answer_subqueries_first(plan.written, planner, catalog, most)
    if answered is plan.written:
        plan.first, plan.written = [], None
        return plan
    final = planner.plan_answered(answered, copy=False)  # the copy made by answering is ours
    final.notes = notes
    return final


def answer_subqueries_first(
    query: CheckedQuery, planner: Planner, catalog: RegionCatalog, most: int = MAX_SUBSTITUTED
) -> tuple[CheckedQuery, list[str]]:
    """`query` with the answers of its one-table subqueries in their place (in a copy, made at the
    first answer), and a note per answer. One at a time, innermost first: an answer can leave the
    subquery around it over one table, to be answered next; the same subquery written in several
    places (TPC-DS Q58's week, in each of three common table expressions) runs once. An answer
    that cannot replace its subquery (an IN list of more than `most` values or with a NULL) is
    left to the engine that joins."""
    notes: list[str] = []
    kept: list[exp.Select] = []
    answers: dict[str, pa.Table] = {}  # by the subquery's text
    copy = True
    while True:
        found = (f for f in planner.subqueries_first(query) if not any(f.select is k for k in kept))
        first = next(found, None)
        if first is None:
            return query, notes
        text = first.select.sql()
        if text not in answers:
            answers[text] = answer_one_table(first.plan, catalog, "a subquery answered first")
        answer = answers[text]
        holder = first.select.parent  # exp.Subquery, or the IN / EXISTS node itself
        user = holder.parent if isinstance(holder, exp.Subquery) else holder
        replacement = _replacement(holder, user, answer, most)
        if replacement is None:
            kept.append(first.select)
            continue
        target, new = replacement
        notes.append(f"evaluated first on the nodes: ({first.select.sql()}) -> {_describe(answer)}")
        if copy:  # the first answer: rewrite a copy, never the caller's query
            paths = [path_to(node) for node in (target, *kept)]
            query = query.copy()
            target, *kept = [node_at(query.tree, path) for path in paths]
            copy = False
        target.replace(new)


def _describe(answer: pa.Table) -> str:
    if answer.num_rows == 1 and answer.num_columns == 1:
        return f"{answer.column(0)[0].as_py()!r}"
    return f"{answer.num_rows} value(s)"


def _replacement(holder: exp.Expression, user: exp.Expression, answer: pa.Table, most: int):
    """(node to replace, its replacement) for a subquery's answer, or None to leave it to the
    engine that joins (an IN list of more than `most` values or with a NULL)."""
    if isinstance(user, exp.Exists):
        return user, exp.Boolean(this=answer.num_rows > 0)
    if isinstance(user, exp.In) and user.args.get("query") is holder:
        if answer.num_columns != 1 or answer.num_rows > most:
            return None
        values = pc.unique(answer.column(0)).to_pylist()
        if None in values:  # x NOT IN (..., NULL) is never true: keep SQL's exact rule in Spark
            return None
        if not values:
            return user, exp.false()
        return user, exp.In(this=user.this.copy(), expressions=[literal(v) for v in values])
    if isinstance(holder, exp.Subquery) and answer.num_columns == 1:
        if answer.num_rows > 1:
            raise CardinalityError("a scalar subquery returned more than one row")
        return holder, literal(answer.column(0)[0].as_py() if answer.num_rows else None)
    return None
