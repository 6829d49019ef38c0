"""A JSON document's shape, written once: `read` checks a document against it and builds its values,
refusing with the message of the part that does not fit; `json_schema` writes the same shape as
JSON Schema for the clients. So what a service accepts and what it publishes cannot drift apart.

A part's `message` is a `str.format` template: ``{value!r}`` is the value that does not fit and
``{within[key]}`` a field of the object holding it. A part without one refuses with the message of
the part around it. Only `Ref` knows a limit JSON Schema cannot say: how deep it may nest.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, ClassVar

JSON_SCHEMA_DIALECT = "https://json-schema.org/draft/2020-12/schema"


class ShapeError(ValueError):
    """A document that does not fit its shape; the message names the part."""


def _refuse(message: str, value: Any, within: dict[str, Any]) -> ShapeError:
    return ShapeError(message.format(value=value, within=within))


@dataclass(frozen=True, kw_only=True)
class Shape:
    """A part of a document: its refusal (`message`) and what its value becomes (`build`)."""

    message: str | None = None
    build: Callable[[Any], Any] | None = None
    admits: ClassVar[type | tuple[type, ...]] = object  # the Python values `Either` tells it by

    def read(self, value: Any, message: str, within: dict[str, Any], depth: int) -> Any:
        """`value` checked and built; `message` refuses it unless this part has its own, `within`
        is the object holding it and `depth` how deep `Ref`s nest here."""
        checked = self._read(value, self.message or message, within, depth)
        return checked if self.build is None else self.build(checked)

    def _read(self, value: Any, message: str, within: dict[str, Any], depth: int) -> Any:
        raise NotImplementedError

    def schema(self, defs: dict[str, Any]) -> dict[str, Any]:
        """This part as JSON Schema; recursive parts go to `defs`."""
        raise NotImplementedError


@dataclass(frozen=True, kw_only=True)
class Text(Shape):
    admits: ClassVar[type] = str

    def _read(self, value: Any, message: str, within: dict[str, Any], depth: int) -> str:
        if not isinstance(value, str):
            raise _refuse(message, value, within)
        return value

    def schema(self, defs: dict[str, Any]) -> dict[str, Any]:
        return {"type": "string"}


@dataclass(frozen=True, kw_only=True)
class Whole(Shape):
    """An integer (not a boolean, as JSON Schema counts them) within the bounds given."""

    minimum: int | None = None
    maximum: int | None = None

    def _read(self, value: Any, message: str, within: dict[str, Any], depth: int) -> int:
        if not isinstance(value, int) or isinstance(value, bool):
            raise _refuse(message, value, within)
        if (self.minimum is not None and value < self.minimum) or (self.maximum is not None and value > self.maximum):
            raise _refuse(message, value, within)
        return value

    def schema(self, defs: dict[str, Any]) -> dict[str, Any]:
        bounds = {"minimum": self.minimum, "maximum": self.maximum}
        return {"type": "integer", **{k: v for k, v in bounds.items() if v is not None}}


@dataclass(frozen=True, kw_only=True)
class Scalar(Shape):
    """A JSON null, boolean, number or string."""

    def _read(self, value: Any, message: str, within: dict[str, Any], depth: int) -> Any:
        if value is not None and not isinstance(value, bool | int | float | str):
            raise _refuse(message, value, within)
        return value

    def schema(self, defs: dict[str, Any]) -> dict[str, Any]:
        return {"type": ["null", "boolean", "number", "string"]}


@dataclass(frozen=True, kw_only=True)
class Nullable(Shape):
    """`shape`, or null for "not given"."""

    shape: Shape

    def _read(self, value: Any, message: str, within: dict[str, Any], depth: int) -> Any:
        return None if value is None else self.shape.read(value, message, within, depth)

    def schema(self, defs: dict[str, Any]) -> dict[str, Any]:
        return {"anyOf": [{"type": "null"}, self.shape.schema(defs)]}


@dataclass(frozen=True, kw_only=True)
class ListOf(Shape):
    item: Shape
    min_items: int = 0
    max_items: int | None = None
    admits: ClassVar[type] = list

    def _read(self, value: Any, message: str, within: dict[str, Any], depth: int) -> list[Any]:
        if not isinstance(value, list) or len(value) < self.min_items:
            raise _refuse(message, value, within)
        if self.max_items is not None and len(value) > self.max_items:
            raise _refuse(message, value, within)
        return [self.item.read(v, message, within, depth) for v in value]

    def schema(self, defs: dict[str, Any]) -> dict[str, Any]:
        schema: dict[str, Any] = {"type": "array", "items": self.item.schema(defs)}
        if self.min_items:
            schema["minItems"] = self.min_items
        if self.max_items is not None:
            schema["maxItems"] = self.max_items
        return schema


@dataclass(frozen=True)
class Field:
    """A field of an object; a required one that is missing is refused as if it held null."""

    name: str
    shape: Shape
    required: bool = False


@dataclass(frozen=True, kw_only=True)
class Object(Shape):
    """An object of `fields` (read in their order) whose value is the dict of the fields given;
    with `unknown` (a template of ``{names}``) it holds no other field."""

    fields: tuple[Field, ...]
    unknown: str | None = None
    admits: ClassVar[type] = dict

    def _read(self, value: Any, message: str, within: dict[str, Any], depth: int) -> dict[str, Any]:
        if not isinstance(value, dict):
            raise _refuse(message, value, within)
        read = {}
        for field in self.fields:
            if field.name in value:
                read[field.name] = field.shape.read(value[field.name], message, value, depth)
            elif field.required:
                raise _refuse(field.shape.message or message, None, value)
        if self.unknown is not None and len(read) < len(value):
            others = sorted(set(value) - {f.name for f in self.fields})
            raise ShapeError(self.unknown.format(names=", ".join(others)))
        return read

    def schema(self, defs: dict[str, Any]) -> dict[str, Any]:
        schema: dict[str, Any] = {"type": "object"}
        required = [f.name for f in self.fields if f.required]
        if required:
            schema["required"] = required
        if self.unknown is not None:
            schema["additionalProperties"] = False
        schema["properties"] = {f.name: f.shape.schema(defs) for f in self.fields}
        return schema


@dataclass(frozen=True, kw_only=True)
class Either(Shape):
    """One of `alternatives`, told apart by the kind of Python value each admits."""

    alternatives: tuple[Shape, ...]

    def _read(self, value: Any, message: str, within: dict[str, Any], depth: int) -> Any:
        for alternative in self.alternatives:
            if isinstance(value, alternative.admits):
                return alternative.read(value, message, within, depth)
        raise _refuse(message, value, within)

    def schema(self, defs: dict[str, Any]) -> dict[str, Any]:
        return {"anyOf": [a.schema(defs) for a in self.alternatives]}


@dataclass(frozen=True, kw_only=True)
class Variants(Shape):
    """An object told apart by the first of the variants' keys it has (each variant's object
    requires its key); `untold` refuses one with none of them."""

    variants: tuple[tuple[str, Object], ...]
    untold: str
    admits: ClassVar[type] = dict

    def _read(self, value: Any, message: str, within: dict[str, Any], depth: int) -> Any:
        if not isinstance(value, dict):
            raise _refuse(message, value, within)
        for key, variant in self.variants:
            if key in value:
                return variant.read(value, message, within, depth)
        raise _refuse(self.untold, value, within)

    def schema(self, defs: dict[str, Any]) -> dict[str, Any]:
        alternatives = []
        for i, (_, variant) in enumerate(self.variants):
            schema = variant.schema(defs)
            earlier = [{"required": [k]} for k, _ in self.variants[:i]]
            alternatives.append({**schema, "not": {"anyOf": earlier}} if earlier else schema)
        return {"anyOf": alternatives}


@dataclass(frozen=True, kw_only=True)
class Ref(Shape):
    """The shape `target()` names, by `name`: a part that holds itself (an expression's arguments
    are expressions), at most `max_depth` deep (`too_deep` refuses deeper)."""

    name: str
    target: Callable[[], Shape]
    max_depth: int
    too_deep: str

    def _read(self, value: Any, message: str, within: dict[str, Any], depth: int) -> Any:
        if depth >= self.max_depth:
            raise ShapeError(self.too_deep)
        return self.target().read(value, message, within, depth + 1)

    def schema(self, defs: dict[str, Any]) -> dict[str, Any]:
        if self.name not in defs:
            defs[self.name] = {}  # taken while its own schema refers to it
            defs[self.name] = self.target().schema(defs)
        return {"$ref": f"#/$defs/{self.name}"}


def read(shape: Shape, value: Any) -> Any:
    """`value` checked against `shape` and built into its values; raises ShapeError."""
    return shape.read(value, "{value!r} does not fit", {}, 0)


def json_schema(shape: Shape, **annotations: str) -> dict[str, Any]:
    """`shape` as a JSON Schema document, with `annotations` (title, description) on top."""
    defs: dict[str, Any] = {}
    body = shape.schema(defs)
    return {"$schema": JSON_SCHEMA_DIALECT, **annotations, **body, **({"$defs": defs} if defs else {})}
