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

from typing import TYPE_CHECKING, Annotated, Any

from pydantic import Field, StrictInt, StrictStr, field_validator

from h3bench.runspec.arms import BASELINE
from h3bench.runspec.base import Frozen
from h3bench.runspec.tables import InputFile

if TYPE_CHECKING:
    from h3bench.runspec.spec import RunSpec

__all__ = ["FORMAL_STEPS", "Heldout", "HeldoutInput", "diagnostic_reasons", "research_problems"]

FORMAL_STEPS = 50  # the campaign's frozen inference steps; anything else is short-step bring-up

_Problem = tuple[tuple[str, ...], str, Any]


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


def diagnostic_reasons(spec: RunSpec) -> list[str]:
    """Why a run of this spec is DIAGNOSTIC (empty for a spec whose runs can be formal)."""
    reasons = ["the spec says diagnostic = true"] if spec.diagnostic else []
    if spec.workload.steps != FORMAL_STEPS:
        reasons.append(f"workload.steps = {spec.workload.steps}, not the frozen {FORMAL_STEPS} (short-step bring-up)")
    return reasons


def _arm_ref(spec: RunSpec, loc: tuple[str, ...], name: str, *, what: str) -> list[_Problem]:
    if name not in spec.arms:
        return [(loc, f"{what} {name!r} is not an arm of this spec (arms: {', '.join(spec.arms)})", name)]
    return []


def research_problems(spec: RunSpec) -> list[_Problem]:
    """Every broken research rule, at its own field path."""
    problems: list[_Problem] = []
    formal = not spec.diagnostic and spec.hardware.kind != "sim" and spec.workload.steps == FORMAL_STEPS
    baseline = spec.arms.get(BASELINE)
    if baseline is not None:
        for field in ("hypothesis", "source", "combination_of"):
            if getattr(baseline, field):
                message = "the baseline is the control: it has no hypothesis, source or combination_of"
                problems.append((("arms", BASELINE, field), message, None))
    for name, arm in spec.arms.items():
        if name == BASELINE:
            continue
        for index, part in enumerate(arm.combination_of):
            loc = ("arms", name, "combination_of", str(index))
            if part == name:
                problems.append((loc, f"arm {name!r} cannot be a combination of itself", part))
            elif part in (BASELINE, spec.original_baseline):
                problems.append((loc, "a baseline is a control, not a change to combine", part))
            else:
                problems += _arm_ref(spec, loc, part, what="combined arm")
        if formal and name != spec.original_baseline:
            for field in ("hypothesis", "source"):
                if getattr(arm, field) is None:
                    message = (f"a formal spec (hardware.kind {spec.hardware.kind!r}, not diagnostic) needs every "
                               f"candidate's {field}")
                    problems.append((("arms", name, field), message, None))
    if spec.protocol.profile:
        for name, arm in spec.arms.items():
            if any(arg == "--profiler-config" or arg.startswith("--profiler-config=") for arg in arm.argv):
                message = ("protocol.profile gives every server its own --profiler-config (h3bench.run.profiling): "
                           "leave the arm's profiler directory out")
                problems.append((("arms", name), message, None))
    if spec.final is not None:
        problems += _arm_ref(spec, ("final",), spec.final, what="final")
        if spec.final == BASELINE:
            problems.append((("final",), "the final combination must be a candidate, not the baseline", spec.final))
    if spec.original_baseline is not None:
        problems += _arm_ref(spec, ("original_baseline",), spec.original_baseline, what="original_baseline")
        if not [name for name in spec.arms if name not in (BASELINE, spec.original_baseline)]:
            message = "there must be at least one candidate besides baseline and the original baseline"
            problems.append((("original_baseline",), message, spec.original_baseline))
        if spec.final is None:
            message = "names the arm the final combination is compared with directly: give final as well"
            problems.append((("original_baseline",), message, spec.original_baseline))
        elif spec.original_baseline == spec.final:
            message = "the final combination cannot be its own original baseline"
            problems.append((("original_baseline",), message, spec.original_baseline))
    if spec.heldout is not None and spec.heldout.cases == 0:
        problems.append((("heldout",), "a [heldout] table needs seeds or inputs", None))
    if spec.heldout is not None and spec.workload.seed in spec.heldout.seeds:
        message = f"the formal seed {spec.workload.seed} is not held out; give other seeds"
        problems.append((("heldout", "seeds"), message, spec.workload.seed))
    return problems
