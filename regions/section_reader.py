"""Reading one section of the configuration into its dataclass, each value checked against its
field's type.

One reader serves every floor's sections, which stay plain dataclasses: a mistake is reported by its
key and the type expected when the file and the `--set` overrides are read, instead of surfacing
later as a strange behaviour (a path given where a list is expected is a one-element list).
"""

from __future__ import annotations

import types
import typing
from dataclasses import MISSING, fields, is_dataclass
from typing import Any

from storage import ConfigError, Size, parse_size


def read_section(cls: type, values: Any, where: str) -> Any:
    """An instance of the section (or table) dataclass `cls` from its values, each checked."""
    if not isinstance(values, dict):
        raise ConfigError(f"{where} must be a table of options, not {values!r}")
    unknown = sorted(set(values) - {f.name for f in fields(cls)})
    if unknown:
        raise ConfigError(f"unknown option(s) in [{where}]: {', '.join(unknown)}")
    required = [f.name for f in fields(cls) if f.default is MISSING and f.default_factory is MISSING]
    missing = [name for name in required if name not in values]
    if missing:
        raise ConfigError(f"[{where}] needs {' and '.join(required)}: {', '.join(missing)} missing")
    hints = typing.get_type_hints(cls, include_extras=True)
    return cls(**{k: _typed(f"{where}.{k}", v, hints[k]) for k, v in values.items()})


def _typed(key: str, value: Any, hint: Any) -> Any:
    """`value` checked against the option's declared type `hint`; ConfigError naming the key and
    the type expected. A single string where a list is expected is a one-element list; a `Size`
    is read from its text (64MiB)."""
    if hint == Size:
        return _typed(key, parse_size(value), int)
    origin, args = typing.get_origin(hint), typing.get_args(hint)
    if origin is types.UnionType:  # `X | None`: TOML has no null, so the value is an X, or "" for none
        if value == "" and str in args:
            return None
        return _typed(key, value, next(a for a in args if a is not type(None)))
    if origin is list:
        if isinstance(value, str):
            value = [value]
        if not isinstance(value, list):
            raise ConfigError(f"{key} must be {_describe(hint)}, not {value!r}")
        return [_typed(f"{key}[{i}]", item, args[0]) for i, item in enumerate(value)]
    if origin is dict:
        if not isinstance(value, dict):
            raise ConfigError(f"{key} must be {_describe(hint)}, not {value!r}")
        return {k: _typed(f"{key}.{k}", v, args[1]) for k, v in value.items()}
    if is_dataclass(hint):
        return read_section(hint, value, key)
    if hint is float and isinstance(value, int) and not isinstance(value, bool):
        return float(value)
    if not isinstance(value, hint) or (hint is int and isinstance(value, bool)):
        raise ConfigError(f"{key} must be {_describe(hint)}, not {value!r}")
    return value


def _describe(hint: Any) -> str:
    """A type as the messages name it: `a list of strings`, `an integer`."""
    origin, args = typing.get_origin(hint), typing.get_args(hint)
    if origin is list:
        return f"a list of {_describe(args[0]).split(' ', 1)[1]}s (or a single one)"
    if origin is dict:
        return f"a table of {_describe(args[1]).split(' ', 1)[1]}s"
    names = {str: "a string", int: "an integer", float: "a number", bool: "a boolean (true or false)"}
    return names.get(hint, f"a table ({hint.__name__})")
