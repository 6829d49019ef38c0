"""Result column names as DuckDB gives them: an alias, a column's own name, or the expression's
text as DuckDB writes it, which is what a user comparing with DuckDB (or reading a DuckDB
tutorial) expects. DuckDB writes every operator in parentheses (``(a + 1)``, ``((a > 1) AND (b <
2))``, ``(NOT (a IN (1, 2)))``), LIKE as ``~~``, ``<>`` as ``!=``, function names in lower case,
``count(*)`` as ``count_star()``, EXTRACT as ``date_part('YEAR', d)``, and a CASE with its
conditions and results in parentheses. Known differences (docs/sql.md): the spelling of a CAST's
type and of INTERVAL literals. A name or function that is one of DuckDB's keywords is in double
quotes (`upper("name")`).
"""

from __future__ import annotations

from typing import ClassVar

from sqlglot import exp
from sqlglot.dialects.duckdb import DuckDB

from gateway.sql.duckdb_keywords import KEYWORDS

_LIKES = {exp.Like: "~~", exp.ILike: "~~*"}
_TYPES = {"TEXT": "VARCHAR", "INT": "INTEGER"}  # sqlglot's spelling of a type -> DuckDB's
_OWN = (exp.GroupConcat, exp.DateDiff, exp.LogicalAnd, exp.LogicalOr)  # written below as DuckDB names them


class _DuckDBNames(DuckDB.Generator):
    TRANSFORMS: ClassVar = {k: v for k, v in DuckDB.Generator.TRANSFORMS.items() if k not in _OWN}

    def binary(self, expression: exp.Binary, op: str) -> str:
        return f"({self.sql(expression, 'this')} {op} {self.sql(expression, 'expression')})"

    def mod_sql(self, expression: exp.Mod) -> str:
        return self.binary(expression, "%")

    def connector_sql(self, expression: exp.Connector, op: str, stack: list | None = None) -> str:
        """AND and OR chains flat, as DuckDB's conjunctions: ((a) AND (b) AND (c))."""
        operands, pending = [], [expression]
        while pending:
            node = pending.pop()
            if type(node) is type(expression):
                pending += [node.expression, node.this]
            else:
                operands.append(self.sql(node))
        return "(" + f" {op} ".join(operands) + ")"

    def boolean_sql(self, expression: exp.Boolean) -> str:
        return "true" if expression.this else "false"

    def ordered_sql(self, expression: exp.Ordered) -> str:
        descending = " DESC" if expression.args.get("desc") else ""
        nulls = " NULLS FIRST" if expression.args.get("nulls_first") else ""  # NULLS LAST is the default
        return f"{self.sql(expression, 'this')}{descending}{nulls}"

    def cast_sql(self, expression: exp.Cast, safe_prefix: str | None = None) -> str:
        written = self.sql(expression, "to")
        return f"CAST({self.sql(expression, 'this')} AS {_TYPES.get(written, written)})"

    def datetrunc_sql(self, expression: exp.DateTrunc) -> str:
        return f"date_trunc('{expression.unit.name.lower()}', {self.sql(expression, 'this')})"

    timestamptrunc_sql = datetrunc_sql

    def datediff_sql(self, expression: exp.DateDiff) -> str:
        unit = exp.Literal.string(expression.unit.name.lower() if expression.unit else "day")
        return self.func("date_diff", unit, expression.expression, expression.this)

    def windowspec_sql(self, expression: exp.WindowSpec) -> str:
        spec = expression.copy()
        for key in ("kind", "start_side", "end_side", "start", "end"):
            if isinstance(spec.args.get(key), str):
                spec.set(key, spec.args[key].upper())
        return super().windowspec_sql(spec)

    def logicaland_sql(self, expression: exp.LogicalAnd) -> str:
        return self.func("bool_and", expression.this)

    def logicalor_sql(self, expression: exp.LogicalOr) -> str:
        return self.func("bool_or", expression.this)

    def concat_sql(self, expression: exp.Concat) -> str:
        return self.func("concat", *expression.expressions)

    def groupconcat_sql(self, expression: exp.GroupConcat) -> str:
        return self.func("string_agg", expression.this, expression.args.get("separator"))

    def neq_sql(self, expression: exp.NEQ) -> str:
        return self.binary(expression, "!=")

    def like_sql(self, expression: exp.Like) -> str:
        return self._like(expression)

    def ilike_sql(self, expression: exp.ILike) -> str:
        return self._like(expression)

    def _like(self, expression: exp.Like | exp.ILike) -> str:
        negated = expression.args.get("negate") or isinstance(expression.parent, exp.Not)
        return self.binary(expression, ("!" if negated else "") + _LIKES[type(expression)])

    def not_sql(self, expression: exp.Not) -> str:
        inner = expression.this
        if isinstance(inner, (exp.Like, exp.ILike)):  # NOT LIKE is an operator of its own
            return self.sql(inner)
        if isinstance(inner, exp.Is):  # IS NOT NULL
            return f"({self.sql(inner, 'this')} IS NOT {self.sql(inner, 'expression')})"
        return f"(NOT {self._parenthesized(inner)})"

    def _parenthesized(self, inner: exp.Expression) -> str:
        text = self.sql(inner)
        return text if text.startswith("(") and text.endswith(")") else f"({text})"

    def paren_sql(self, expression: exp.Paren) -> str:
        return self._parenthesized(expression.this)

    def neg_sql(self, expression: exp.Neg) -> str:
        inner = expression.this
        if isinstance(inner, exp.Literal) and inner.is_number:
            return f"-{self.sql(inner)}"
        return f"(-{self._parenthesized(inner)})"

    def between_sql(self, expression: exp.Between) -> str:
        return f"({super().between_sql(expression)})"

    def in_sql(self, expression: exp.In) -> str:
        query = expression.args.get("query")
        if query is not None:  # DuckDB's own spelling of IN (subquery)
            return f"({self.sql(expression, 'this')} = ANY({self.sql(query).removeprefix('(').removesuffix(')')}))"
        return f"({super().in_sql(expression)})"

    def is_sql(self, expression: exp.Is) -> str:
        return self.binary(expression, "IS")

    def count_sql(self, expression: exp.Count) -> str:
        if isinstance(expression.this, exp.Star):
            return "count_star()"
        return self.function_fallback_sql(expression)

    def coalesce_sql(self, expression: exp.Coalesce) -> str:
        return f"COALESCE({self.format_args(expression.this, *expression.expressions)})"

    def extract_sql(self, expression: exp.Extract) -> str:
        return f"date_part('{expression.name.upper()}', {self.sql(expression, 'expression')})"

    def filter_sql(self, expression: exp.Filter) -> str:
        condition = self.sql(expression.expression.this)
        return f"{self.sql(expression, 'this')} FILTER (WHERE {condition})"

    def case_sql(self, expression: exp.Case) -> str:
        parts = ["CASE "]
        operand = expression.this  # CASE a WHEN 1 ... is CASE WHEN a = 1 ...
        for when in expression.args.get("ifs") or []:
            condition = self.sql(when, "this")
            if operand is not None:
                condition = f"({self.sql(operand)} = {condition})"
            parts.append(f" WHEN ({condition}) THEN ({self.sql(when, 'true')})")
        default = expression.args.get("default")
        parts.append(f" ELSE {self.sql(default) if default is not None else 'NULL'} END")
        return "".join(parts)

    def func(self, name: str, *args, prefix: str = "(", suffix: str = ")", normalize: bool = True) -> str:
        text = super().func(name, *args, prefix=prefix, suffix=suffix, normalize=normalize)
        lower = name.lower()
        return f'"{lower}"{text[len(name) :]}' if lower in KEYWORDS else text

    def identifier_sql(self, expression: exp.Identifier) -> str:
        name = expression.this
        return f'"{name}"' if expression.quoted or name.lower() in KEYWORDS else name


def duckdb_name(expression: exp.Expression) -> str:
    """The name DuckDB gives an unaliased select-list item."""
    if isinstance(expression, exp.Column):
        return expression.name
    return _DuckDBNames(normalize_functions="lower").generate(expression.copy())
