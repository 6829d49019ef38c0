"""Named query parameters (`:name` in the SQL, values in the request), bound in the syntax tree:
each placeholder becomes a literal node, so a value can never change the statement's shape."""

from __future__ import annotations

import datetime
from decimal import Decimal, InvalidOperation
from typing import Any

from sqlglot import exp

from gateway.sql.errors import SqlError

TYPED = {"date": "DATE", "timestamp": "TIMESTAMP", "decimal": "DECIMAL"}


class InvalidParameter(SqlError):
    code = "invalid_parameter"
    sqlstate = "22023"


def placeholders(tree: exp.Expression) -> list[exp.Placeholder]:
    found = list(tree.find_all(exp.Placeholder))
    for node in found:
        if not node.name or node.name == "?":
            raise InvalidParameter("positional parameters (?) are not supported: name them, e.g. :since")
    return found


def check(tree: exp.Expression, params: dict[str, Any]) -> None:
    """Every placeholder has a value and every value a placeholder."""
    if not isinstance(params, dict):
        raise InvalidParameter("params must be an object of name -> value")
    used = {node.name for node in placeholders(tree)}
    missing = sorted(used - set(params))
    if missing:
        raise InvalidParameter(f"no value for parameter(s) {', '.join(':' + m for m in missing)}")
    unused = sorted(set(params) - used)
    if unused:
        raise InvalidParameter(f"parameter(s) {', '.join(unused)} not used by the query")


def literal(name: str, value: Any) -> exp.Expression:
    """The SQL literal of one JSON value: null, boolean, number, string, or a typed
    `{"type": "date" | "timestamp" | "decimal", "value": "..."}`."""
    if value is None:
        return exp.Null()
    if isinstance(value, bool):
        return exp.Boolean(this=value)
    if isinstance(value, (int, float)):
        return exp.Literal.number(repr(value))
    if isinstance(value, str):
        return exp.Literal.string(value)
    if isinstance(value, dict) and set(value) == {"type", "value"} and value["type"] in TYPED:
        kind, text = value["type"], str(value["value"])
        try:
            if kind == "date":
                datetime.date.fromisoformat(text)
            elif kind == "timestamp":
                datetime.datetime.fromisoformat(text)
            else:
                Decimal(text)
        except (ValueError, InvalidOperation):
            raise InvalidParameter(f"parameter :{name} is not a valid {kind}: {text!r}") from None
        if kind == "decimal":
            return exp.Literal.number(text)
        return exp.cast(exp.Literal.string(text), TYPED[kind])
    raise InvalidParameter(
        f"parameter :{name} must be null, a boolean, a number, a string or "
        f'{{"type": "date|timestamp|decimal", "value": "..."}}, not {type(value).__name__}'
    )


def bind(tree: exp.Expression, params: dict[str, Any]) -> exp.Expression:
    """`tree` with every `:name` replaced by the literal of its value."""
    check(tree, params)
    for node in placeholders(tree):
        node.replace(literal(node.name, params[node.name]))
    return tree
