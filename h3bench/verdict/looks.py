"""A series' looks: the decision at each planned look, taken again from the blocks that ran.

The live runner and every reader of a bundle call :func:`decision` on the
same blocks, so a resumed run, ``h3bench validate`` and the report reach the
decision the run took: the decision is a function of the blocks' latencies
(:func:`h3bench.stats.sequential.decide`), nothing else. In the fixed design
it is the one look at the end of ``order``; in the sequential design the
first look that stops the series, or the latest look taken while it runs.
Both apply the same rules: the first-request rule (a warmup that was not
enough) and the latency half of the anti-shortcut audit.
"""

from __future__ import annotations

from collections.abc import Sequence

from h3bench.run.records import BlockResult
from h3bench.runspec import RunSpec
from h3bench.runspec.schedule import budget_of, looks_of, pass_from, run_order, series_of
from h3bench.stats import intervals
from h3bench.stats.blockstat import BlockBudget
from h3bench.stats.sequential import Boundaries, LookDecision, SeriesBlock, boundaries, decide

__all__ = ["boundaries_of", "decision", "series_blocks"]


_CALIBRATED: dict[tuple[str, float, bool], Boundaries] = {}  # the looks' levels cost a simulation: once per spec


def _boundaries(spec: RunSpec, duration: float, lossless_on: bool) -> Boundaries:
    key = (spec.spec_id, duration, lossless_on)
    if key not in _CALIBRATED:
        _CALIBRATED[key] = _calibrate(spec, duration, lossless_on)
    return _CALIBRATED[key]


def _calibrate(spec: RunSpec, duration: float, lossless_on: bool) -> Boundaries:
    p = spec.protocol
    levels = intervals.error_levels(len(spec.workload.durations), len(series_of(spec)))
    sequential = p.design == "sequential"
    return boundaries(looks_of(spec, duration), levels, spec.gates.speed_margin,
                      spending=p.spending, gamma=p.spending_gamma,
                      futility_ratio="margin" if sequential and p.futility else None,
                      pass_from=pass_from(spec, duration, lossless_on))


def boundaries_of(spec: RunSpec, duration: float, lossless_on: bool) -> Boundaries:
    """The looks of ``duration`` and their levels (:func:`h3bench.stats.sequential.boundaries`)."""
    if duration not in run_order(spec):
        raise ValueError(f"{duration:g} s is not a duration of {spec.name}")
    return _boundaries(spec, duration, lossless_on)


def series_blocks(results: Sequence[BlockResult], budget: BlockBudget) -> list[SeriesBlock]:
    """The series' blocks in order, up to the first one that did not finish with every timed request.

    A failed block stops its candidate (a stop rule), so what follows it never runs.
    """
    blocks = []
    for result in results:
        measured = [s.e2e_s for s in result.measured if s.ok and s.e2e_s is not None]
        audit = [s.e2e_s for s in result.samples if s.kind == "audit" and s.phase == "formal" and s.ok]
        if not result.ok or len(measured) != budget.measured or (budget.audit and not audit):
            break
        blocks.append(SeriesBlock(result.block.letter, tuple(measured), audit[0] if audit else None))
    return blocks


def decision(spec: RunSpec, duration: float, results: Sequence[BlockResult], *, lossless_on: bool
             ) -> LookDecision | None:
    """The series' decision from its blocks so far; None before it has a complete pair.

    None too for a diagnostic fixed design of one pair (``order = "AB"``): it
    has no look, and its speed verdict is the interval's INCONCLUSIVE.
    """
    budget = budget_of(spec)
    blocks = series_blocks(results, budget)
    if len(blocks) < 2 or looks_of(spec, duration)[-1] < 2:
        return None
    b = boundaries_of(spec, duration, lossless_on)
    p = spec.protocol
    leak, cache = p.first_request_level, p.audit_cache_ratio if p.audit else None
    for n in b.looks:
        if 2 * n > len(blocks):
            break
        found = decide(blocks[: 2 * n], b, budget, leak_level=leak, cache_ratio=cache)
        if found.stop:
            return found
    return decide(blocks, b, budget, leak_level=leak, cache_ratio=cache)
