"""Which stage moved, over a campaign's blocks: every part's paired effect, and each block's reconciliation.

The estimates are :mod:`h3bench.verdict.stage_effects`'s and the checks
:mod:`h3bench.verdict.reconcile`'s; this module applies them to the blocks of
one candidate's series as :class:`~h3bench.session.results.Results` holds
them (the blocks its speed estimate uses, each request's parts read from its
samples.jsonl line), so that ``verdict.json`` carries them once and every
presentation reads them there. Nothing here judges: a part whose interval
excludes 1 says where a change shows, never that the candidate is faster.
"""

from __future__ import annotations

from collections.abc import Sequence

from h3bench.errors import UsageError
from h3bench.h3 import expected_shape
from h3bench.run.records import BlockResult
from h3bench.runspec import RunSpec
from h3bench.verdict.reconcile import Tolerance, block_findings, reconcile
from h3bench.verdict.stage_effects import BlockParts, StageEffects, request_parts_from_record, stage_effects
from h3bench.verdict.verdicts import RecipeStep

__all__ = ["SIMULATOR_TOLERANCE", "block_reconciliation", "recipe_steps", "series_effects", "tolerance_for"]

# The simulator's stage times are the modelled ones scaled down (time_scale, about 1/500); its HTTP, multipart and
# process overheads are not, and on a shared machine they reach tens of milliseconds between the server's clock and
# the client's. Real servers get the default (0.05 s or 1 %), which H3's own gaps stay far below (reconcile.py).
SIMULATOR_TOLERANCE = Tolerance(absolute_s=0.25)


def tolerance_for(spec: RunSpec) -> Tolerance:
    """The reconciliation's tolerance: :data:`SIMULATOR_TOLERANCE` on the simulator, the default elsewhere."""
    return SIMULATOR_TOLERANCE if spec.hardware.kind == "sim" else Tolerance()


def block_reconciliation(result: BlockResult, requested_steps: int, tolerance: Tolerance
                         ) -> tuple[tuple[str, ...], str | None]:
    """The block's named disagreements over its measured requests, and whether its server had ``/metrics``.

    The second item is ``"available"``, ``"not available: <why>"``, or None
    when no sample recorded a scrape (a bundle written before they were).
    """
    measured = [s for s in result.measured if s.ok and s.e2e_s is not None]
    checked = [reconcile(e2e_s=float(s.e2e_s or 0.0), stage_durations=s.stage_durations, metrics=s.metrics,
                         requested_steps=requested_steps, inference_time_s=s.inference_time_s,
                         phases=s.request_phases, tolerance=tolerance) for s in measured]
    recorded = [m for s in measured if (m := s.metrics) is not None]
    if not recorded:
        availability = None
    elif any(m.available for m in recorded):
        availability = "available"
    else:
        availability = f"not available: {recorded[0].reason}"
    return block_findings(checked), availability


def series_effects(blocks: Sequence[BlockResult], duration: float, requested_steps: int) -> StageEffects | None:
    """Every part's paired effect over a series' successful blocks in schedule order; None without both arms."""
    parts = [BlockParts("A" if r.block.letter == "A" else "B",
                        tuple(request_parts_from_record(s.to_dict(), requested_steps=requested_steps)
                              for s in r.measured if s.ok and s.e2e_s is not None)) for r in blocks]
    if {b.role for b in parts} != {"A", "B"}:
        return None
    try:
        return stage_effects(parts, video_duration_s=expected_shape(duration).video_duration_s)
    except UsageError:  # blocks that do not pair as AB/BA: the speed estimate refuses them too
        return None


def recipe_steps(spec: RunSpec, duration: float, *arms: str) -> tuple[RecipeStep, ...]:
    """The published DiT per-step times the spec's hints give for these arms at this duration."""
    hints = spec.hints
    if hints is None:
        return ()
    key = f"{duration:g}"
    return tuple(RecipeStep(arm, float(hints.dit_step_s[arm][key]), hints.source)
                 for arm in dict.fromkeys(arms) if key in hints.dit_step_s.get(arm, {}))
