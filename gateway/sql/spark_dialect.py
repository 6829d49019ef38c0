"""What the SQL handed to Spark needs beyond a translation into Spark's dialect: division as
DuckDB and the nodes divide (a DOUBLE, NULL for a zero divisor), a sort without a sampling job, and
no subquery whose LIMIT Spark would apply once instead of per outer row."""

from __future__ import annotations

import re

from sqlglot import exp
from sqlglot.optimizer.scope import traverse_scope, walk_in_scope

from gateway.sql.errors import UnsupportedSql
from gateway.sql.tree import as_double, count_if_as_sum


def _spark_node(node: exp.Expression) -> exp.Expression:
    """`node` as Spark needs it where sqlglot's translation keeps DuckDB's meaning apart: division
    and modulo, GROUPING of several columns (DuckDB's bit mask is Spark's GROUPING_ID), COUNT_IF
    (`count_if_as_sum`), REGEXP_EXTRACT without a group (DuckDB's is the whole match, Spark's the
    first group), QUANTILE_CONT (Spark's PERCENTILE), LOG of one argument (DuckDB's is base 10,
    Spark's natural), DAYNAME and MONTHNAME (DuckDB's are whole names), STRING_SPLIT (at the text,
    not a regex), the ORDER BY of a SELECT DISTINCT (`_order_by_output`)."""
    if isinstance(node, exp.Grouping) and len(node.expressions) > 1:
        return exp.Anonymous(this="GROUPING_ID", expressions=node.expressions)
    if isinstance(node, exp.CountIf):
        return count_if_as_sum(node)
    if isinstance(node, exp.RegexpExtract) and node.args.get("group") is None:
        whole = node.copy()
        whole.set("group", exp.Literal.number(0))  # DuckDB's default: the whole match
        return whole
    if isinstance(node, exp.RegexpReplace):
        return _regexp_replace(node)
    if isinstance(node, (exp.DateTrunc, exp.TimestampTrunc)) and not isinstance(node.parent, exp.Cast):
        return exp.cast(node.copy(), "timestamp_ntz")  # DuckDB's is a TIMESTAMP without time zone
    if isinstance(node, exp.Split) and isinstance(node.expression, exp.Literal) and "\\E" not in node.expression.name:
        separator = node.expression.name  # DuckDB's string_split splits at the text, Spark's SPLIT at a regex
        if not separator:  # into characters
            every = [node.this, exp.Literal.string("(?s)."), exp.Literal.number(0)]
            return exp.Anonymous(this="REGEXP_EXTRACT_ALL", expressions=every)
        pattern = exp.Literal.string(f"\\Q{separator}\\E")
        return exp.Anonymous(this="SPLIT", expressions=[node.this, pattern])
    if isinstance(node, exp.Log) and node.args.get("expression") is None:  # DuckDB's LOG(x) is base 10
        return exp.Log(this=exp.Literal.number(10), expression=node.this)
    if isinstance(node, (exp.Dayname, exp.Monthname)):  # DuckDB's are whole names, Spark's abbreviated
        pattern = "EEEE" if isinstance(node, exp.Dayname) else "MMMM"
        return exp.Anonymous(this="DATE_FORMAT", expressions=[node.this, exp.Literal.string(pattern)])
    if isinstance(node, exp.PercentileCont) and node.args.get("expression") is not None:
        return exp.Anonymous(this="PERCENTILE", expressions=[node.this, node.expression])
    if isinstance(node, exp.Select) and node.args.get("distinct") and node.args.get("order"):
        return _order_by_output(node)
    return _division(node)


def _regexp_replace(node: exp.RegexpReplace) -> exp.Expression:
    """DuckDB's REGEXP_REPLACE in Spark: without the 'g' option only the first match is replaced
    (Spark's replaces every one: the pattern becomes the shortest prefix and the first match), and
    the replacement's groups \\1 are Java's $1."""
    pattern, replacement = node.expression, node.args.get("replacement")
    options = node.args.get("modifiers")
    options = options.name if isinstance(options, exp.Literal) else ""
    if not all(isinstance(a, exp.Literal) and a.is_string for a in (pattern, replacement)) or set(options) - set("gi"):
        raise UnsupportedSql("REGEXP_REPLACE needs a literal pattern and replacement, and options g or i only")
    flags = "(?s)" + ("(?i)" if "i" in options else "")
    java = re.sub(r"\\(\d)|\\\\|\$", lambda m: _java_group(m, "g" in options), replacement.name)
    if "g" in options:
        return exp.RegexpReplace(
            this=node.this, expression=exp.Literal.string(flags + pattern.name), replacement=exp.Literal.string(java)
        )
    first = f"{flags}^(.*?)(?:{pattern.name})"
    return exp.RegexpReplace(
        this=node.this, expression=exp.Literal.string(first), replacement=exp.Literal.string("$1" + java)
    )


def _java_group(match: re.Match, every: bool) -> str:
    if match[1] is not None:  # a group: one more where the prefix is group 1
        return f"${int(match[1]) + (0 if every else 1)}"
    return "\\\\" if match[0].startswith("\\") else "\\$"


def _order_by_output(select: exp.Select) -> exp.Select:
    """A SELECT DISTINCT's ORDER BY items that are items of its select list, as the names of those
    items: Spark orders a DISTINCT by its output only (`SELECT DISTINCT t.a AS a ... ORDER BY t.a`
    cannot resolve t.a; ORDER BY a can)."""
    named = {}
    for projection in select.expressions:
        inner = projection.unalias()
        named.setdefault((inner.this if isinstance(inner, exp.Paren) else inner).sql(), projection.alias_or_name)
    for ordered in select.args["order"].expressions:
        name = named.get(ordered.this.sql())
        if name:
            ordered.set("this", exp.column(name))
    return select


def _division(node: exp.Expression) -> exp.Expression:
    if isinstance(node, exp.Div):
        return exp.Anonymous(this="TRY_DIVIDE", expressions=[as_double(node.this), node.expression])
    if isinstance(node, exp.Mod):
        return exp.Anonymous(this="TRY_MOD", expressions=[node.this, node.expression])
    return node


def spark_text(tree: exp.Expression) -> str:
    """Spark SQL for `tree` (left unchanged), dividing as DuckDB and the nodes do (`/` gives a
    DOUBLE: Spark divides decimals into a decimal of 6 places, and TPC-H Q8's share 0.0344358904
    became 0.034436; `/` and `%` by zero give NULL, not Spark's DIVIDE_BY_ZERO), and sorting in one
    partition (`sort_in_one_partition`); GROUPING(a, b) is Spark's GROUPING_ID(a, b). A subquery
    Spark answers wrong is refused (`refuse_limit_per_expression`)."""
    refuse_limit_per_expression(tree)
    return sort_in_one_partition(tree.transform(_spark_node)).sql(dialect="spark", pretty=True, copy=False)


def sort_in_one_partition(tree: exp.Expression) -> exp.Expression:
    """Spark range-partitions the input of an ORDER BY without LIMIT, and finds the ranges with a
    sampling job of its own; gathered into one partition first (a REPARTITION(1) hint), the rows
    are sorted there without one. The whole result goes to one client anyway.

    Example: ``SELECT a FROM t ORDER BY a`` -> ``SELECT /*+ REPARTITION(1) */ a FROM t ORDER BY a``;
    ``... ORDER BY a LIMIT 10`` is left as it is (Spark takes the top rows of each partition).
    """
    if isinstance(tree, exp.Select) and tree.args.get("order") is not None and tree.args.get("limit") is None:
        hint = tree.args.get("hint")
        single = exp.Anonymous(this="REPARTITION", expressions=[exp.Literal.number(1)])
        tree.set("hint", exp.Hint(expressions=[*(hint.expressions if hint is not None else []), single]))
    return tree


def refuse_limit_per_expression(tree: exp.Expression) -> None:
    """Refuse a subquery with LIMIT or OFFSET correlated by an equality of one of its columns with
    an expression of the outer query that is not a bare column (`v.k = o.id % 5`): Spark (4.3)
    decorrelates it with the limit applied once over the subquery, not once per outer row, and
    answers wrong (NULL for every outer row but the first group's). Correlated on a column of the
    outer query, or with an expression on both sides, Spark answers right."""
    for scope in traverse_scope(tree):
        query = scope.expression
        if not isinstance(query, exp.Select) or not (query.args.get("limit") or query.args.get("offset")):
            continue
        for node in walk_in_scope(query):
            if isinstance(node, exp.EQ) and _inner_column_to_outer_expression(node, scope.sources):
                raise UnsupportedSql(
                    f"a subquery with LIMIT correlated by {node.sql(dialect='spark')[:80]} (an expression of the "
                    "outer query) runs on Spark, which applies its LIMIT once, not per outer row: compute the "
                    "expression as a column of the outer query's table (a derived table) and correlate on it"
                )


def _inner_column_to_outer_expression(equality: exp.EQ, inner: dict) -> bool:
    """Whether `equality` sets a column of the sources `inner` equal to an expression over columns
    of outer queries only that is not a bare column."""

    def outer_only(side: exp.Expression) -> bool:
        columns = list(side.find_all(exp.Column))
        return bool(columns) and all(c.table and c.table not in inner for c in columns)

    for this, other in ((equality.this, equality.expression), (equality.expression, equality.this)):
        column = this.this if isinstance(this, exp.Cast) else this
        is_inner = isinstance(column, exp.Column) and column.table in inner
        if is_inner and outer_only(other) and not isinstance(other.unnest(), exp.Column):
            return True
    return False
