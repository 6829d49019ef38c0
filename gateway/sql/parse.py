"""Parsing and checking SQL: one read-only query (or EXPLAIN of one), constructs this engine runs.

Write statements and several statements are refused as such; valid SQL using a construct the
engine does not run (LATERAL, unknown functions ...) is refused with the construct's name. Window
functions, set operations and grouping sets run on Spark, over what the nodes return. Columns are
qualified against the region's catalog, so unknown tables and columns are reported before anything
runs.
"""

from __future__ import annotations

import re

import sqlglot
from sqlglot import exp
from sqlglot.errors import ErrorLevel, ParseError

from gateway.sql.errors import (
    NumericOutOfRange,
    ReadOnlyViolation,
    SqlSyntaxError,
    UnsupportedSql,
)
from gateway.sql.limits import check_tree, checked_text
from gateway.sql.metadata import is_metadata

# DuckDB's dialect: standard SQL, and NULLs sort last unless NULLS FIRST is written.
DIALECT = "duckdb"
_EXPLAIN = re.compile(r"^\s*(?:--[^\n]*\n\s*|/\*.*?\*/\s*)*explain\b(\s+analyze\b)?", re.IGNORECASE | re.DOTALL)

WRITES: dict[type, str] = {
    exp.Insert: "INSERT",
    exp.Update: "UPDATE",
    exp.Delete: "DELETE",
    exp.Merge: "MERGE",
    exp.Create: "CREATE",
    exp.Drop: "DROP",
    exp.Alter: "ALTER",
    exp.TruncateTable: "TRUNCATE",
    exp.Into: "SELECT INTO",
    exp.Copy: "COPY",
    exp.Grant: "GRANT",
    exp.Revoke: "REVOKE",
    exp.Comment: "COMMENT",
    exp.Attach: "ATTACH",
    exp.Detach: "DETACH",
    exp.Install: "INSTALL",
}
# What the engine runs: every node of a query's tree must be one of these (or a function below).
CLAUSES = (
    exp.Select,
    exp.From,
    exp.Join,
    exp.Where,
    exp.Group,
    exp.Having,
    exp.Order,
    exp.Ordered,
    exp.Limit,
    exp.Offset,
    exp.Distinct,
    exp.With,
    exp.CTE,
    exp.Subquery,
    exp.Table,
    exp.TableAlias,
    exp.Alias,
    exp.Column,
    exp.Identifier,
    exp.Star,
    exp.Literal,
    exp.Boolean,
    exp.Null,
    exp.Var,
    exp.DataType,
    exp.DataTypeParam,
    exp.Paren,
    exp.Tuple,
    exp.Neg,
    exp.Not,
    exp.And,
    exp.Or,
    exp.EQ,
    exp.NEQ,
    exp.LT,
    exp.LTE,
    exp.GT,
    exp.GTE,
    exp.NullSafeEQ,
    exp.NullSafeNEQ,
    exp.Add,
    exp.Sub,
    exp.Mul,
    exp.Div,
    exp.Mod,
    exp.DPipe,
    exp.Between,
    exp.In,
    exp.Is,
    exp.Like,
    exp.ILike,
    exp.Exists,
    exp.Filter,
    # what only Spark runs: the nodes give it the tables' rows, filtered and projected
    exp.Union,
    exp.Intersect,
    exp.Except,
    exp.Window,
    exp.WindowSpec,
    exp.Rollup,
    exp.Cube,
    exp.GroupingSets,
    exp.Qualify,
    exp.Values,
    exp.Fetch,
    exp.LimitOptions,
    exp.Lateral,
    exp.Unnest,
    exp.Explode,
    exp.Array,
)
SET_OPERATIONS = (exp.Union, exp.Intersect, exp.Except)
WINDOW_FUNCTIONS = (
    exp.RowNumber,
    exp.Rank,
    exp.DenseRank,
    exp.Ntile,
    exp.PercentRank,
    exp.CumeDist,
    exp.Lag,
    exp.Lead,
    exp.FirstValue,
    exp.LastValue,
    exp.NthValue,
)
# aggregates the nodes do not take partially: Spark computes them over the rows the nodes return
SPARK_AGGREGATES = (
    exp.CovarPop,
    exp.CovarSamp,
    exp.ArgMax,
    exp.ArgMin,
    exp.Stddev,
    exp.StddevSamp,
    exp.StddevPop,
    exp.Variance,
    exp.VariancePop,
    exp.Corr,
    exp.CountIf,
    exp.LogicalAnd,
    exp.LogicalOr,
    exp.ApproxDistinct,
    exp.Grouping,
    exp.Median,
    exp.PercentileCont,
    exp.GroupConcat,
)
# scalar functions the nodes lack: Spark evaluates them
SPARK_FUNCTIONS = (
    exp.Split,
    exp.Sqrt,
    exp.Cbrt,
    exp.Ln,
    exp.Exp,
    exp.Pow,
    exp.Log,
    exp.Sign,
    exp.Pi,
    exp.Sin,
    exp.Cos,
    exp.Tan,
    exp.Atan2,
    exp.Degrees,
    exp.Radians,
    exp.Replace,
    exp.Reverse,
    exp.Repeat,
    exp.StrPosition,
    exp.StartsWith,
    exp.EndsWith,
    exp.Left,
    exp.Right,
    exp.MD5,
    exp.Ascii,
    exp.Chr,
    exp.Translate,
    exp.LastDay,
    exp.Dayname,
    exp.Monthname,
    exp.DateFromParts,
    exp.DateTrunc,
    exp.TimestampTrunc,
    exp.DateDiff,
    exp.TimeToStr,
    exp.RegexpLike,
    exp.RegexpExtract,
    exp.RegexpReplace,
    exp.SplitPart,
    exp.Pad,
    exp.ConcatWs,
    exp.Greatest,
    exp.Least,
)
FUNCTIONS = (
    exp.Sum,
    exp.Avg,
    exp.Count,
    exp.Min,
    exp.Max,
    exp.Extract,
    exp.Substring,
    exp.Case,
    exp.If,
    exp.Cast,
    exp.Coalesce,
    exp.Abs,
    exp.Round,
    exp.Floor,
    exp.Ceil,
    exp.Upper,
    exp.Lower,
    exp.Length,
    exp.Trim,
    exp.Concat,
    exp.Nullif,
    exp.Interval,
    *WINDOW_FUNCTIONS,
    *SPARK_AGGREGATES,
    *SPARK_FUNCTIONS,
)
# The messages for constructs refused often; any other is named by its SQL keyword.
UNSUPPORTED: dict[type, str] = {
    exp.Pivot: "PIVOT is not supported",
    exp.TableSample: "TABLESAMPLE is not supported",
    exp.Lock: "FOR UPDATE is not supported",
    exp.Collate: "COLLATE is not supported",
    exp.SimilarTo: "SIMILAR TO is not supported",
    exp.Glob: "GLOB is not supported",
    exp.Any: "ANY / SOME comparisons are not supported",
    exp.All: "ALL comparisons are not supported",
    exp.Bracket: "subscripts ([...]) are not supported",
    exp.Dot: "field access (a.b.c) is not supported",
}
_ALLOWED = (*CLAUSES, *FUNCTIONS)
_LISTS = (exp.Array, exp.Split)  # list values: the results carry no lists
_UNNESTS = (exp.Unnest, exp.Explode)
INT64_MAX = (1 << 63) - 1
_JOIN_KINDS = {"", "INNER", "OUTER", "CROSS"}
_JOIN_SIDES = {"", "LEFT", "RIGHT", "FULL"}
_JOIN_METHODS = {"", "NATURAL"}


def syntax_error(e: ParseError) -> SqlSyntaxError:
    """The user's message for a parse error: where, near what, and what was expected."""
    if not e.errors:
        return SqlSyntaxError(f"syntax error: {e}")
    error = e.errors[0]
    description = error["description"].split(" but got <Token")[0]
    near = error.get("highlight") or ""
    return SqlSyntaxError(
        f"syntax error at line {error.get('line')}, column {error.get('col')}"
        f"{f' near {near!r}' if near else ''}: {description}"
    )


def parse(sql: str) -> tuple[exp.Expression, str]:
    """The single statement of `sql` and whether it was prefixed by EXPLAIN ("plan") or EXPLAIN
    ANALYZE ("analyze")."""
    prefix = _EXPLAIN.match(sql)
    explain = "" if prefix is None else "analyze" if prefix.group(1) else "plan"
    text = checked_text(_EXPLAIN.sub("", sql, count=1) if explain else sql)
    try:
        statements = [s for s in sqlglot.parse(text, read=DIALECT) if s is not None]
    except ParseError as e:
        raise syntax_error(e) from None
    for statement in statements:
        check_tree(statement)
    if not statements:
        raise SqlSyntaxError("empty statement")
    if len(statements) > 1:
        error = ReadOnlyViolation if _any_write(statements) else UnsupportedSql
        raise error(f"one statement per request, got {len(statements)}")
    statement = statements[0]
    if is_metadata(statement):
        return statement, explain
    if isinstance(statement, exp.Command) and statement.name.upper() in ("SHOW", "DESCRIBE"):
        what = f"{statement.name} {statement.expression}".split()
        raise UnsupportedSql(
            f"{' '.join(what[:2]).upper()} is not supported (SHOW TABLES, DESCRIBE t and SHOW COLUMNS FROM t are)"
        )
    refuse_writes(statement)
    if not isinstance(statement, (exp.Select, *SET_OPERATIONS)):
        raise UnsupportedSql(f"only SELECT queries are supported, not {statement.key.upper()}")
    return statement, explain


def _any_write(statements: list[exp.Expression]) -> bool:
    kinds = (*WRITES, exp.Command)
    return any(isinstance(node, kinds) for statement in statements for node in statement.walk())


def refuse_writes(statement: exp.Expression) -> None:
    if isinstance(statement, exp.Command):
        raise ReadOnlyViolation(f"{statement.name.upper()} statements are refused: the query endpoint is read-only")
    for node in statement.walk():
        for kind, name in WRITES.items():
            if isinstance(node, kind):
                raise ReadOnlyViolation(f"{name} statements are refused: the query endpoint is read-only")


def check_constructs(tree: exp.Expression) -> None:
    """Refuse, naming it, the first construct of `tree` the engine does not run."""
    for node in tree.walk():
        if isinstance(node, exp.Anonymous):
            raise UnsupportedSql(f"function {node.name.upper()} is not supported")
        if type(node) in UNSUPPORTED:
            raise UnsupportedSql(UNSUPPORTED[type(node)])
        if not isinstance(node, _ALLOWED):
            what = f"function {_spelled(node)}" if isinstance(node, exp.Func) else node.key.upper()
            raise UnsupportedSql(f"{what} is not supported")
        _check_clause(node)


def _groups(select: exp.Select | None) -> bool:
    """Whether a SELECT groups or aggregates (an UNNEST in its select list would expand after)."""
    if select is None:
        return False
    aggregates = (a for p in select.expressions for a in p.find_all(exp.AggFunc) if not a.find_ancestor(exp.Window))
    return select.args.get("group") is not None or next(aggregates, None) is not None


def _spelled(function: exp.Func) -> str:
    """A function's name as the query's dialect writes it: sqlglot's own name may be another's
    (DuckDB's epoch(d) parses as TIME_TO_UNIX)."""
    text = function.sql(dialect=DIALECT, unsupported_level=ErrorLevel.IGNORE)
    head, parenthesis, _ = text.partition("(")
    return head.upper() if parenthesis and head.replace("_", "").isalnum() else function.sql_name()


def _check_clause(node: exp.Expression) -> None:
    """The arguments of an allowed clause that the engine does not run."""
    if isinstance(node, _LISTS) and not isinstance(node.find_ancestor(*_UNNESTS, exp.Query), _UNNESTS):
        raise UnsupportedSql(f"a list ({node.sql(dialect=DIALECT)}) is supported only as what UNNEST expands")
    if isinstance(node, exp.Explode) and _groups(node.find_ancestor(exp.Select)):
        raise UnsupportedSql(
            "UNNEST in the select list of a query that groups or aggregates is not supported: unnest in FROM "
            "(FROM t, unnest(...) AS u(x)) and group by u.x"
        )
    if isinstance(node, exp.With) and node.args.get("recursive"):
        raise UnsupportedSql("recursive WITH is not supported")
    if isinstance(node, exp.Distinct) and node.args.get("on") is not None:
        raise UnsupportedSql("DISTINCT ON is not supported")
    if isinstance(node, (exp.Limit, exp.Offset)):
        count = node.expression
        if not (isinstance(count, exp.Literal) and count.is_int and int(count.this) >= 0):
            raise UnsupportedSql(f"{node.key.upper()} must be a non-negative integer, not {count.sql()}")
        if int(count.this) > INT64_MAX:
            raise NumericOutOfRange(f"{node.key.upper()} {count.this} is past the largest 64-bit integer ({INT64_MAX})")
    if isinstance(node, exp.Join):
        kind, side, method = node.kind.upper(), node.side.upper(), node.method.upper()
        if kind not in _JOIN_KINDS or side not in _JOIN_SIDES or method not in _JOIN_METHODS:
            words = " ".join(w for w in (method, side, kind) if w)
            raise UnsupportedSql(f"{words} JOIN is not supported")
