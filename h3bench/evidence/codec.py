"""Typed records to plain JSON and back: what a bundle stores is read as the dataclass that wrote it.

:func:`to_json` turns a frozen dataclass (and the enums, tuples and mappings
inside it) into JSON types that ``json.dumps(allow_nan=False)`` accepts:
non-finite floats become ``"inf"``, ``"-inf"`` or ``"nan"``, fractions
``"24/1"``. :func:`from_json` rebuilds a value of a given type from that,
guided by the type hints of the dataclass: a reader of ``verdict.json`` gets
the same :class:`~h3bench.verdict.verdicts.CandidateVerdict` that the run
wrote, not a dict to pick apart. A key the record lacks takes the field's
default; a missing field without a default, or a value of the wrong type, is
an :class:`~h3bench.errors.EvidenceError` that names the path inside the
record.

A field marked with :data:`FLAT` (``field(metadata=FLAT)``) holds a record
whose keys stand beside its parent's own, not under the field's name: a
``lifecycle.jsonl`` line keeps the server's fields at its top level.
"""

from __future__ import annotations

import dataclasses
import enum
import math
import types
import typing
from collections.abc import Mapping
from fractions import Fraction
from typing import Any, TypeVar

from h3bench.errors import EvidenceError

__all__ = ["FLAT", "from_json", "to_json"]

T = TypeVar("T")
_FLOATS = {"inf": math.inf, "-inf": -math.inf, "nan": math.nan}
FLAT: Mapping[str, bool] = types.MappingProxyType({"flat": True})  # a field's metadata: its keys beside its parent's


def to_json(value: Any) -> Any:
    """``value`` as plain JSON types, for ``json.dumps(allow_nan=False)``."""
    if isinstance(value, float) and not math.isfinite(value):
        return "nan" if math.isnan(value) else ("inf" if value > 0 else "-inf")
    if isinstance(value, Fraction):
        return f"{value.numerator}/{value.denominator}"
    if isinstance(value, enum.Enum):
        return value.value
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        data: dict[str, Any] = {}
        for item in dataclasses.fields(value):
            encoded = to_json(getattr(value, item.name))
            if item.metadata.get("flat"):
                data.update(encoded)
            else:
                data[item.name] = encoded
        return data
    if isinstance(value, Mapping):
        return {key: to_json(item) for key, item in value.items()}
    if isinstance(value, (list, tuple)):
        return [to_json(item) for item in value]
    return value


def _wrong(path: str, kind: object, data: object) -> EvidenceError:
    return EvidenceError(f"{path or 'the record'}: expected {getattr(kind, '__name__', kind)}, found {data!r}")


def _convert(kind: Any, data: Any, path: str) -> Any:
    origin, args = typing.get_origin(kind), typing.get_args(kind)
    if kind is Any or kind is object:
        return data
    if origin in (typing.Union, types.UnionType):
        if data is None and type(None) in args:
            return None
        errors = []
        for option in (a for a in args if a is not type(None)):
            try:
                return _convert(option, data, path)
            except EvidenceError as exc:
                errors.append(exc)
        raise errors[0] if errors else _wrong(path, kind, data)
    if origin is typing.Literal:
        if data not in args:
            raise _wrong(path, f"one of {args}", data)
        return data
    if isinstance(kind, type) and issubclass(kind, enum.Enum):
        try:
            return kind(data)
        except ValueError:
            raise _wrong(path, kind, data) from None
    if dataclasses.is_dataclass(kind) and isinstance(kind, type):
        return _dataclass(kind, data, path)
    if origin in (tuple, list) or kind in (tuple, list):
        if not isinstance(data, list):
            raise _wrong(path, kind, data)
        if origin is tuple and args and args[-1] is not Ellipsis:
            if len(args) != len(data):
                raise _wrong(path, kind, data)
            return tuple(_convert(a, item, f"{path}[{i}]") for i, (a, item) in enumerate(zip(args, data, strict=True)))
        inner = args[0] if args else Any
        items = [_convert(inner, item, f"{path}[{i}]") for i, item in enumerate(data)]
        return tuple(items) if (origin or kind) is tuple else items
    if origin in (dict, Mapping) or kind is dict:
        if not isinstance(data, dict):
            raise _wrong(path, kind, data)
        value_kind = args[1] if len(args) == 2 else Any
        return {key: _convert(value_kind, item, f"{path}.{key}") for key, item in data.items()}
    if kind is float:
        if isinstance(data, str) and data in _FLOATS:
            return _FLOATS[data]
        if isinstance(data, (int, float)) and not isinstance(data, bool):
            return float(data)
        raise _wrong(path, kind, data)
    if kind in (int, str, bool):
        if not isinstance(data, kind) or (kind is int and isinstance(data, bool)):
            raise _wrong(path, kind, data)
        return data
    return data


def _dataclass(kind: type[T], data: Any, path: str) -> T:
    if not isinstance(data, dict):
        raise _wrong(path, kind, data)
    hints = typing.get_type_hints(kind)
    values = {}
    for item in dataclasses.fields(kind):  # type: ignore[arg-type]
        where = f"{path}.{item.name}" if path else item.name
        if item.metadata.get("flat"):  # its keys are the parent's
            values[item.name] = _dataclass(hints[item.name], data, path)
        elif item.name in data:
            values[item.name] = _convert(hints[item.name], data[item.name], where)
        elif item.default is dataclasses.MISSING and item.default_factory is dataclasses.MISSING:
            raise EvidenceError(f"{where}: missing")
    return kind(**values)


def from_json(kind: type[T], data: Any, *, where: str = "") -> T:
    """A ``kind`` rebuilt from :func:`to_json`'s output; EvidenceError naming the path of what does not fit."""
    converted: T = _convert(kind, data, where)
    return converted
