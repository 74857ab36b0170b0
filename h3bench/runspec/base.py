"""What every RunSpec table shares: frozen models that forbid unknown keys, and errors at their own field."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, ValidationError
from pydantic_core import InitErrorDetails, PydanticCustomError

__all__ = ["Frozen", "Problem", "raise_at"]

#: A broken rule: the field path it belongs to, the message, and the offending value.
Problem = tuple[tuple[str, ...], str, Any]


def raise_at(problems: list[Problem], title: str) -> None:
    """Raise the problems found by a model validator as errors at their own field paths.

    A plain ValueError would be reported at the model's path; pydantic merges
    the line errors of a ValidationError raised here, locations included.
    """
    if problems:
        raise ValidationError.from_exception_data(
            title,
            [
                InitErrorDetails(type=PydanticCustomError("runspec", message), loc=loc, input=value)
                for loc, message, value in problems
            ],
        )


class Frozen(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid", allow_inf_nan=False)
