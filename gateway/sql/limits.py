"""The bounds of one query, checked before it is planned: the length of its text, how deep its
expressions nest and how long its IN lists are. A query past one is refused with 400 `too_complex`
naming the bound; below them every part of the service (parser, planner, nodes, Spark) runs it.

The text is measured on its tokens before it is parsed (a parser descends once per parenthesis),
the tree after: a chain of N ORs or N additions is N deep, an IN list is one level however long.
"""

from __future__ import annotations

from sqlglot import exp
from sqlglot.dialects.duckdb import DuckDB
from sqlglot.errors import TokenError
from sqlglot.tokens import Token, TokenType

from gateway.sql.errors import SqlSyntaxError, TooComplex
from storage import MAX_EXPRESSION_DEPTH

MAX_SQL_LENGTH = 256_000  # characters of one query's text
MAX_IN_LIST = 10_000  # values of one IN list
_DIALECT = DuckDB()  # `tokenize` makes a tokenizer per call: one tokenizer is not safe across threads
_OPENS = {TokenType.L_PAREN, TokenType.CASE, TokenType.L_BRACKET}
_CLOSES = {TokenType.R_PAREN, TokenType.END, TokenType.R_BRACKET}


def checked_text(sql: str) -> str:
    """`sql` within the bounds of its length and nesting, with each named parameter written `$name`
    (`:name` at the start of a select list reads as DuckDB's prefix alias `name: expression`)."""
    if len(sql) > MAX_SQL_LENGTH:
        raise TooComplex(f"the query is {len(sql):,} characters long; the most is {MAX_SQL_LENGTH:,}")
    try:
        tokens = _DIALECT.tokenize(sql)
    except TokenError as e:
        raise SqlSyntaxError(f"syntax error: {e}") from None
    depth = deepest = 0
    for token in tokens:
        depth += (token.token_type in _OPENS) - (token.token_type in _CLOSES)
        deepest = max(deepest, depth)
    if deepest > MAX_EXPRESSION_DEPTH:
        raise TooComplex(f"the query nests parentheses or CASE {deepest} deep; the most is {MAX_EXPRESSION_DEPTH}")
    return _dollar_parameters(sql, tokens)


def _dollar_parameters(sql: str, tokens: list[Token]) -> str:
    """`:name` (a colon directly before a word, not after one) as `$name`."""
    if len(tokens) < 2:
        return sql
    text = list(sql)
    for before, colon, word in zip([None, *tokens[:-2]], tokens[:-1], tokens[1:], strict=True):
        if colon.token_type != TokenType.COLON or word.start != colon.end + 1 or not word.text.isidentifier():
            continue
        if before is not None and before.end + 1 == colon.start and _ends_a_name(before):
            continue  # `a:b`, a path, not a parameter
        text[colon.start] = "$"
    return "".join(text)


def _ends_a_name(token: Token) -> bool:
    last = token.text[-1:]
    return last.isalnum() or last in '_"]' or token.token_type == TokenType.STRING


def check_tree(tree: exp.Expression) -> None:
    """The parsed query within the bounds of its depth and IN lists."""
    depth = {id(tree): 1}
    for node in tree.walk():
        level = depth.pop(id(node))
        if level > MAX_EXPRESSION_DEPTH:
            raise TooComplex(
                f"the query's expressions nest more than {MAX_EXPRESSION_DEPTH} deep (a chain of N ORs or "
                "additions is N deep); write long lists of alternatives as IN (...)"
            )
        if isinstance(node, exp.In) and len(node.expressions) > MAX_IN_LIST:
            raise TooComplex(
                f"an IN list has {len(node.expressions):,} values; the most is {MAX_IN_LIST:,} "
                "(load long lists as a table and join it)"
            )
        for child in node.iter_expressions():
            depth[id(child)] = level + 1
