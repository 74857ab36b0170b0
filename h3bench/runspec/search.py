"""The research rules of a RunSpec: attributed candidates, the final combination, held-out inputs, diagnostics.

A campaign is a search: each candidate tests one hypothesis, says where its
change comes from, and the spec names the ``final`` combination that has to
be measured directly against the ``original_baseline`` (which may differ from
the control engine the candidates are screened against). The ``[heldout]``
table lists extra seeds, and optionally other reference inputs pinned by
SHA-256 like ``[inputs]``, on which every candidate that passed the formal
blocks is checked again.

A run is **diagnostic** when the spec says so (``diagnostic = true``, for
bring-up and exploration) or when its steps differ from the frozen
:data:`FORMAL_STEPS`; a diagnostic run is never a campaign result. A
**formal** spec (not diagnostic, not simulated) must give every candidate its
hypothesis and source.
"""

from __future__ import annotations

from typing import Annotated

from pydantic import Field, StrictInt, StrictStr, field_validator

from h3bench.runspec.base import Frozen
from h3bench.runspec.tables import InputFile

__all__ = ["FORMAL_STEPS", "Heldout", "HeldoutInput"]

FORMAL_STEPS = 50  # the campaign's frozen inference steps; anything else is short-step bring-up

class HeldoutInput(Frozen):
    """Another pair of reference inputs, pinned like ``[inputs]``; ``name`` labels its requests."""

    name: Annotated[StrictStr, Field(pattern=r"^[a-z][a-z0-9_]*$")]
    reference_video: InputFile
    reference_audio: InputFile


class Heldout(Frozen):
    """Held-out checks: every seed (with the official inputs), then every extra input (at the workload's seed)."""

    seeds: tuple[Annotated[StrictInt, Field(ge=0)], ...] = ()
    inputs: tuple[HeldoutInput, ...] = ()

    @field_validator("seeds")
    @classmethod
    def _unique_seeds(cls, value: tuple[int, ...]) -> tuple[int, ...]:
        if len(set(value)) != len(value):
            raise ValueError(f"held-out seeds must be unique, got {list(value)}")
        return value

    @field_validator("inputs")
    @classmethod
    def _unique_names(cls, value: tuple[HeldoutInput, ...]) -> tuple[HeldoutInput, ...]:
        names = [item.name for item in value]
        if len(set(names)) != len(names):
            raise ValueError(f"held-out input names must be unique, got {names}")
        return value

    @property
    def cases(self) -> int:
        return len(self.seeds) + len(self.inputs)
