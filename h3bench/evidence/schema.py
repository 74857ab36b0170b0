"""JSON Schemas of the typed records a bundle, the ledger and an export hold, from the types that write them.

:func:`schema_of` reads the same type hints that :mod:`h3bench.evidence.codec`
writes and reads a record by (its :func:`~h3bench.evidence.codec.to_json`):
a dataclass is an object whose fields without a default are required and
whose other keys are refused, a float is a number or one of ``"inf"``,
``"-inf"``, ``"nan"``, an enum is its values, a tuple or list an array, a
mapping an object of its value type, ``X | None`` either. So a schema cannot
drift from its record: it is derived, and the files shipped in
``h3bench/data/schemas/`` are checked against the derivation by the tests
(``python -m h3bench.cli.schemas`` writes them again).

``computed`` adds the keys a writer puts beside the fields (``verdict.json``
carries each duration's combined ``outcome``, which is a property, for
readers of the JSON alone). JSON Schema draft 2020-12.
"""

from __future__ import annotations

import dataclasses
import enum
import types
import typing
from collections.abc import Mapping
from fractions import Fraction
from typing import Any

__all__ = ["DIALECT", "schema_of"]

DIALECT = "https://json-schema.org/draft/2020-12/schema"
_NON_FINITE = {"enum": ["inf", "-inf", "nan"]}


def schema_of(kind: type, *, title: str, schema_id: str,
              computed: Mapping[type, Mapping[str, Mapping[str, Any]]] | None = None,
              open_keys: Mapping[type, Mapping[str, Mapping[str, Any]]] | None = None) -> dict[str, Any]:
    """The JSON Schema of ``kind``'s records; every dataclass inside becomes a ``$defs`` entry.

    ``computed``: per dataclass, keys its writer adds (their schemas), not
    required. ``open_keys``: per dataclass, further keys that may appear,
    such as the ledger's chain fields.
    """
    builder = _Builder({**(computed or {})}, {**(open_keys or {})})
    root = builder.of(kind)
    return {"$schema": DIALECT, "$id": schema_id, "title": title, **root, "$defs": dict(sorted(builder.defs.items()))}


class _Builder:
    def __init__(self, computed: dict[type, Mapping[str, Mapping[str, Any]]],
                 open_keys: dict[type, Mapping[str, Mapping[str, Any]]]) -> None:
        self.computed = computed
        self.open_keys = open_keys
        self.defs: dict[str, dict[str, Any]] = {}

    def of(self, kind: Any) -> dict[str, Any]:
        origin, args = typing.get_origin(kind), typing.get_args(kind)
        if kind is Any or kind is object:
            return {}
        if origin in (typing.Union, types.UnionType):
            options = [self.of(a) for a in args if a is not type(None)]
            if type(None) in args:
                options.append({"type": "null"})
            return options[0] if len(options) == 1 else {"anyOf": options}
        if origin is typing.Literal:
            return {"enum": list(args)}
        if isinstance(kind, type) and issubclass(kind, enum.Enum):
            return {"enum": [member.value for member in kind]}
        if dataclasses.is_dataclass(kind) and isinstance(kind, type):
            return self._dataclass(kind)
        if origin in (tuple, list) or kind in (tuple, list):
            if origin is tuple and args and args[-1] is not Ellipsis:
                return {"type": "array", "prefixItems": [self.of(a) for a in args], "items": False,
                        "minItems": len(args)}
            return {"type": "array", "items": self.of(args[0]) if args else {}}
        if origin in (dict, Mapping) or kind is dict:
            return {"type": "object", "additionalProperties": self.of(args[1]) if len(args) == 2 else {}}
        if kind is float:
            return {"anyOf": [{"type": "number"}, _NON_FINITE]}
        if kind is Fraction:
            return {"type": "string", "pattern": r"^-?\d+/\d+$"}
        simple = {int: "integer", str: "string", bool: "boolean"}
        if kind in simple:
            return {"type": simple[kind]}
        raise TypeError(f"no JSON Schema for {kind!r}")

    def _dataclass(self, kind: type) -> dict[str, Any]:
        name = kind.__name__
        if name not in self.defs:
            self.defs[name] = {}  # a placeholder, so that a record that holds itself refers to itself
            hints = typing.get_type_hints(kind)
            fields = dataclasses.fields(kind)
            properties: dict[str, Any] = {}
            flat_required: list[str] = []
            for item in fields:
                if item.metadata.get("flat"):  # its keys stand beside the parent's (h3bench.evidence.codec.FLAT)
                    self.of(hints[item.name])
                    flat = self.defs[hints[item.name].__name__]
                    properties.update(flat["properties"])
                    flat_required += flat["required"]
                else:
                    properties[item.name] = self.of(hints[item.name])
            extra = {**self.computed.get(kind, {}), **self.open_keys.get(kind, {})}
            properties.update({key: dict(value) for key, value in extra.items()})
            required = [item.name for item in fields if not item.metadata.get("flat")
                        and item.default is dataclasses.MISSING and item.default_factory is dataclasses.MISSING]
            required += flat_required
            doc = (kind.__doc__ or "").strip().split("\n\n")[0].replace("\n", " ")
            self.defs[name] = {"type": "object", **({"description": doc} if doc else {}),
                               "properties": properties, "required": required, "additionalProperties": False}
        return {"$ref": f"#/$defs/{name}"}
