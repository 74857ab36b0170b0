"""What every kind of arm shares: the placeholders of its command, its environment, its devices, the substitution."""

from __future__ import annotations

import re
import sys
from collections.abc import Iterable
from typing import Annotated

from pydantic import AfterValidator, Field, StrictInt, StrictStr

__all__ = ["PLACEHOLDERS", "Args", "DeviceIds", "Environment", "command_from", "known_placeholders",
           "unique_devices", "valid_env_names"]

# What an arm's command may contain; everything else in braces (JSON configs) is literal.
PLACEHOLDERS = ("host", "port", "model", "python")

_PLACEHOLDER = re.compile(r"\{([A-Za-z_][A-Za-z0-9_]*)\}")
_ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


def known_placeholders(args: tuple[str, ...]) -> tuple[str, ...]:
    """``args`` unchanged, or a ValueError naming a placeholder that is not one of :data:`PLACEHOLDERS`."""
    for arg in args:
        for name in _PLACEHOLDER.findall(arg):
            if name not in PLACEHOLDERS:
                known = ", ".join("{" + item + "}" for item in PLACEHOLDERS)
                raise ValueError(f"unknown placeholder {{{name}}} in {arg!r}; known: {known}")
    return args


def valid_env_names(env: dict[str, str]) -> dict[str, str]:
    """``env`` unchanged, or a ValueError naming a key that is not an environment variable name."""
    for name in env:
        if not _ENV_NAME.fullmatch(name):
            raise ValueError(f"{name!r} is not an environment variable name")
    return env


def command_from(args: Iterable[str], host: str, port: int, model: str) -> list[str]:
    """``args`` with ``{host}``, ``{port}``, ``{model}`` and ``{python}`` (this interpreter) substituted."""
    values = {"host": host, "port": str(port), "model": model, "python": sys.executable}
    return [_PLACEHOLDER.sub(lambda match: values[match.group(1)], arg) for arg in args]


def unique_devices(ids: tuple[int, ...]) -> tuple[int, ...]:
    """``ids`` unchanged, or a ValueError when a device is named twice."""
    if len(set(ids)) != len(ids):
        raise ValueError(f"device ids must be unique, got {list(ids)}")
    return ids


Args = Annotated[tuple[StrictStr, ...], AfterValidator(known_placeholders)]
Environment = Annotated[dict[StrictStr, StrictStr], AfterValidator(valid_env_names)]
DeviceIds = Annotated[tuple[Annotated[StrictInt, Field(ge=0)], ...], AfterValidator(unique_devices)]
