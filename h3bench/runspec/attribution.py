"""Why a candidate arm exists: its hypothesis, where its change comes from, and what it combines.

Every kind of arm (:mod:`h3bench.runspec.arms`, :mod:`h3bench.runspec.vllm`)
carries these fields; the spec checks them across arms
(:mod:`h3bench.runspec.search`), and a baseline has none of them.
"""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import Field, StrictStr

from h3bench.runspec.base import Frozen

__all__ = ["Attributed", "Attribution"]


class Attribution(Frozen):
    """Where a candidate's change comes from.

    ``kind`` is ``configuration`` (an existing upstream feature switched on:
    configuration reuse, not a new kernel) or ``code`` (new source); ``ref``
    is the upstream reference: a commit, a PR, or the flag and the file that
    implements it.
    """

    kind: Literal["configuration", "code"]
    ref: Annotated[StrictStr, Field(min_length=1)]


class Attributed(Frozen):
    """A candidate's record: ``hypothesis`` (one sentence), ``source`` and ``combination_of`` (arm names)."""

    hypothesis: Annotated[StrictStr, Field(min_length=1)] | None = None
    source: Attribution | None = None
    combination_of: tuple[StrictStr, ...] = ()
