"""A series' looks: the decision at each planned look, taken again from the blocks that ran.

The course (:meth:`h3bench.course.course.Course.decision`) asks :func:`decision`
on the blocks a run hands it (:func:`h3bench.run.records.series_blocks`), so the
live run, a resumed run, ``h3bench validate`` and the report reach the decision
the run took: the decision is a function of the blocks' latencies
(:func:`h3bench.stats.sequential.decide`), nothing else. In the fixed design
it is the one look at the end of ``order``; in the sequential design the
first look that stops the series, or the latest look taken while it runs.
Both apply the same rules: the first-request rule (a warmup that was not
enough) and the latency half of the anti-shortcut audit. The looks' levels
are :func:`boundaries`, the ones the plan simulates.
"""

from __future__ import annotations

import functools
from collections.abc import Sequence

from h3bench.course.design import Design, run_order, series_of
from h3bench.runspec import RunSpec
from h3bench.stats.sequential import Boundaries, LookDecision, SeriesBlock, decide

__all__ = ["boundaries", "boundaries_of", "decision"]


@functools.lru_cache(maxsize=256)
def boundaries(design: Design, duration: int, n_series: int, lossless: bool) -> Boundaries:
    """The looks of the ``duration``-th duration (run order) and their levels (:meth:`Design.boundaries`), once."""
    return design.boundaries(duration, n_series, lossless=lossless)


def boundaries_of(spec: RunSpec, duration: float, lossless_on: bool) -> Boundaries:
    """The looks of a spec's ``duration`` and their levels, as its course has them."""
    order = run_order(spec)
    if duration not in order:
        raise ValueError(f"{duration:g} s is not a duration of {spec.name}")
    return boundaries(Design.of(spec), order.index(duration), len(series_of(spec)), lossless_on)


def decision(design: Design, duration: int, n_series: int, lossless: bool, blocks: Sequence[SeriesBlock]
             ) -> LookDecision | None:
    """The series' decision at the ``duration``-th duration from its blocks so far; None before a complete pair.

    None too for a diagnostic fixed design of one pair (``order = "AB"``): it
    has no look, and its speed verdict is the interval's INCONCLUSIVE.
    """
    if len(blocks) < 2 or design.looks[duration][-1] < 2:
        return None
    found = boundaries(design, duration, n_series, lossless)
    budget, leak, cache = design.budget, design.leak_level, design.cache_ratio
    for n in found.looks:
        if 2 * n > len(blocks):
            break
        stop = decide(blocks[: 2 * n], found, budget, leak_level=leak, cache_ratio=cache)
        if stop.stop:
            return stop
    return decide(blocks, found, budget, leak_level=leak, cache_ratio=cache)
