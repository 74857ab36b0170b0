"""An arm of a RunSpec: one server configuration, its command line and environment."""

from __future__ import annotations

import re
import sys
from typing import Annotated, Any, Literal

from pydantic import Field, StrictStr, field_validator

from h3bench.runspec.base import Frozen

__all__ = ["BASELINE", "PLACEHOLDERS", "Arm", "Attribution"]

BASELINE = "baseline"
# What an arm's argv may contain; everything else in braces (JSON configs) is literal.
PLACEHOLDERS = ("host", "port", "model", "python")

_PLACEHOLDER = re.compile(r"\{([A-Za-z_][A-Za-z0-9_]*)\}")
_ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


class Attribution(Frozen):
    """Where a candidate's change comes from.

    ``kind`` is ``configuration`` (an existing upstream feature switched on:
    configuration reuse, not a new kernel) or ``code`` (new source); ``ref``
    is the upstream reference: a commit, a PR, or the flag and the file that
    implements it.
    """

    kind: Literal["configuration", "code"]
    ref: Annotated[StrictStr, Field(min_length=1)]


class Arm(Frozen):
    """One server configuration.

    ``argv`` is the server command; ``{host}``, ``{port}``, ``{model}`` and
    ``{python}`` (this interpreter) are substituted at launch and any other
    braces, such as JSON configs, are literal. ``env`` is added to the
    launcher's environment. ``sim`` is the simulator profile, kept opaque
    here and validated by the simulator.

    A candidate records why it exists: ``hypothesis`` (one sentence),
    ``source`` (:class:`Attribution`) and ``combination_of`` (the arms whose
    changes it combines). The spec checks them across arms
    (:mod:`h3bench.research`); a baseline has none of them.
    """

    description: Annotated[StrictStr, Field(min_length=1)]
    argv: tuple[StrictStr, ...] = Field(min_length=1)
    env: dict[StrictStr, StrictStr] = Field(default_factory=dict)
    sim: dict[str, Any] | None = None
    hypothesis: Annotated[StrictStr, Field(min_length=1)] | None = None
    source: Attribution | None = None
    combination_of: tuple[StrictStr, ...] = ()

    @field_validator("argv")
    @classmethod
    def _known_placeholders(cls, value: tuple[str, ...]) -> tuple[str, ...]:
        for arg in value:
            for name in _PLACEHOLDER.findall(arg):
                if name not in PLACEHOLDERS:
                    known = ", ".join("{" + item + "}" for item in PLACEHOLDERS)
                    raise ValueError(f"unknown placeholder {{{name}}} in {arg!r}; known: {known}")
        return value

    @field_validator("env")
    @classmethod
    def _env_names(cls, value: dict[str, str]) -> dict[str, str]:
        for name in value:
            if not _ENV_NAME.fullmatch(name):
                raise ValueError(f"{name!r} is not an environment variable name")
        return value

    def command(self, host: str, port: int, model: str) -> list[str]:
        """The argv with its placeholders substituted."""
        values = {"host": host, "port": str(port), "model": model, "python": sys.executable}
        return [_PLACEHOLDER.sub(lambda match: values[match.group(1)], arg) for arg in self.argv]
