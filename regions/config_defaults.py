"""The default configuration as commented TOML, written from the sections' classes themselves:
every section, every option at its default with its field's `doc`, and the tables of a file of
several regions as a commented example. `cxg config defaults` prints it and docs/configuration.md
holds it (a test keeps them equal), so the reference cannot drift from the code."""

from __future__ import annotations

import json
import re
import typing
from dataclasses import MISSING, Field, fields, is_dataclass
from typing import Any

from regions.config import REGION_SECTIONS, SECTIONS
from regions.sections import RegionTable
from storage import Size

HEADER = """\
# cxg's configuration, every option at its default (`cxg config defaults` prints it).
# A file (./cxg.toml, or cxg --config FILE) sets what differs; cxg --set section.option=value overrides one option."""

# two regions, one holding tpch's big tables and the other copies of them: uncommented below the
# defaults, a file of two regions (numbered, as the defaults set gateway.region for all)
REGIONS_EXAMPLE: dict[str, dict[str, Any]] = {
    "east": {
        "default": True,
        "databases": {"tpch": ["lineitem", "orders", "customer"]},
        "gateway": {"port": 8080, "region": 1},
    },
    "west": {"copies_of": ["east"], "url": "http://10.0.0.2:8081", "gateway": {"port": 8081, "region": 2}},
}
_BARE_KEY = re.compile(r"[A-Za-z0-9_-]+")


def defaults_toml() -> str:
    """The default configuration, commented, as `cxg config defaults` prints it."""
    lines = [HEADER]
    for name, cls in SECTIONS.items():
        hints = typing.get_type_hints(cls, include_extras=True)
        tables = {option.name: _table_of(hints[option.name]) for option in fields(cls)}
        lines += ["", f"# {_summary(cls)}", f"[{name}]"]
        for option in fields(cls):
            if tables[option.name] is None:
                lines += _option(option, hints[option.name])
        for option in fields(cls):  # after the section's own options, as TOML wants tables
            if tables[option.name] is not None:
                lines += _tables_example(f"{name}.{option.name}", option, tables[option.name])
    return "\n".join([*lines, "", *_regions_example()]) + "\n"


def _summary(cls: type) -> str:
    """The first paragraph of a section's docstring: what it is for."""
    return " ".join((cls.__doc__ or "").strip().split("\n\n")[0].split())


def _doc(option: Field) -> str:
    doc = option.metadata.get("doc")
    if not doc:
        raise ValueError(f"option {option.name} has no doc in its field's metadata")
    return doc


def _default(option: Field) -> Any:
    if option.default is not MISSING:
        return option.default
    return option.default_factory()


def _option(option: Field, hint: Any) -> list[str]:
    """An option's comment and its line; one unset by default as a commented example."""
    default = _default(option)
    if default is None:
        return [f"# {_doc(option)}", f"# {option.name} = {_value(option.metadata['example'])}"]
    return [f"# {_doc(option)}", f"{option.name} = {_size(default) if hint == Size else _value(default)}"]


def _table_of(hint: Any) -> type | None:
    """The dataclass of an option that is a list of tables (`[[gateway.tokens]]`), else None."""
    args = typing.get_args(hint)
    return args[0] if typing.get_origin(hint) is list and is_dataclass(args[0]) else None


def _tables_example(key: str, option: Field, cls: type) -> list[str]:
    """A list-of-tables option as its comment and one commented example table, each key's doc beside it."""
    lines = [f"# {_doc(option)}, e.g.:", f"# [[{key}]]"]
    for nested in fields(cls):
        value = nested.metadata["example"] if "example" in nested.metadata else _default(nested)
        lines.append(f"# {nested.name} = {_value(value)}  # {_doc(nested)}")
    return lines


def _regions_example() -> list[str]:
    """The `[regions.NAME]` tables of a file of several regions, commented: each key's doc where it
    first appears."""
    lines = [
        "# Several regions in one file: a [regions.NAME] table per region sets what differs from the sections",
        f"# above (any of {', '.join(REGION_SECTIONS)}) and what the region holds. cxg up starts every",
        "# region (numbers, ports and data directories kept apart where a region does not set them); other",
        "# commands work on the default region, or on cxg --region NAME. For example:",
    ]
    docs = {f.name: _doc(f) for f in fields(RegionTable)}
    docs.update({section: "any section above, over the file's" for section in REGION_SECTIONS})
    for region, table in REGIONS_EXAMPLE.items():
        lines += ["#", f"# [regions.{region}]"]
        for key, value in table.items():
            doc = docs.pop(key, None)
            lines.append(f"# {key} = {_value(value)}" + (f"  # {doc}" if doc else ""))
    return lines


def _size(n: int) -> str:
    """A size as a file writes it: the largest binary unit that divides it."""
    for unit, power in (("GiB", 3), ("MiB", 2), ("KiB", 1)):
        if n % 1024**power == 0:
            return _value(f"{n // 1024**power}{unit}")
    return _value(n)


def _value(value: Any) -> str:
    """A value as TOML writes it (inline tables for tables)."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int | float):
        return repr(value)
    if isinstance(value, str):
        return json.dumps(value, ensure_ascii=False)
    if isinstance(value, list):
        return f"[{', '.join(_value(v) for v in value)}]"
    if isinstance(value, dict):
        if not value:
            return "{}"
        items = (f"{_key(k)} = {_value(v)}" for k, v in value.items())
        return f"{{ {', '.join(items)} }}"
    raise TypeError(f"no TOML for {value!r}")


def _key(key: str) -> str:
    return key if _BARE_KEY.fullmatch(key) else json.dumps(key)
