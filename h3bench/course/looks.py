"""A series' looks: the decision at each planned look, taken again from the blocks that ran.

The live runner and every reader of a bundle call :func:`decision` on the
same blocks, so a resumed run, ``h3bench validate`` and the report reach the
decision the run took: the decision is a function of the blocks' latencies
(:func:`h3bench.stats.sequential.decide`), nothing else. In the fixed design
it is the one look at the end of ``order``; in the sequential design the
first look that stops the series, or the latest look taken while it runs.
Both apply the same rules: the first-request rule (a warmup that was not
enough) and the latency half of the anti-shortcut audit. The looks' levels
are the course's (:meth:`h3bench.course.course.Course.boundaries`), the
ones the plan simulates.
"""

from __future__ import annotations

from collections.abc import Sequence

from h3bench.course.course import Course
from h3bench.course.design import budget_of, looks_of, run_order
from h3bench.runspec import RunSpec
from h3bench.stats.sequential import Boundaries, LookDecision, SeriesBlock, decide

__all__ = ["boundaries_of", "decision"]


def boundaries_of(spec: RunSpec, duration: float, lossless_on: bool) -> Boundaries:
    """The looks of ``duration`` and their levels (:meth:`h3bench.course.design.Design.boundaries`)."""
    order = run_order(spec)
    if duration not in order:
        raise ValueError(f"{duration:g} s is not a duration of {spec.name}")
    return Course.of(spec, lossless=lossless_on).boundaries(order.index(duration))


def decision(spec: RunSpec, duration: float, blocks: Sequence[SeriesBlock], *, lossless_on: bool
             ) -> LookDecision | None:
    """The series' decision from its blocks so far (:func:`h3bench.run.records.series_blocks`); None before a pair.

    None too for a diagnostic fixed design of one pair (``order = "AB"``): it
    has no look, and its speed verdict is the interval's INCONCLUSIVE.
    """
    budget = budget_of(spec)
    if len(blocks) < 2 or looks_of(spec, duration)[-1] < 2:
        return None
    b = boundaries_of(spec, duration, lossless_on)
    design = Course.of(spec, lossless=lossless_on).design
    leak, cache = design.leak_level, design.cache_ratio
    for n in b.looks:
        if 2 * n > len(blocks):
            break
        found = decide(blocks[: 2 * n], b, budget, leak_level=leak, cache_ratio=cache)
        if found.stop:
            return found
    return decide(blocks, b, budget, leak_level=leak, cache_ratio=cache)
