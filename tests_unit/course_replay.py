"""A live campaign's latencies replayed through the plan's simulation: the blocks the plan says would run.

:func:`replay` feeds the latencies a live (or pooled) campaign measured to
:func:`h3bench.course.designsim.simulate_campaigns` as its draw, one campaign,
so the plan's course (:meth:`h3bench.course.course.Course.walk`) and
decisions run on the run's own data; :func:`planned_blocks` names the
blocks that course runs. A block the run did not run is NaN: a plan that
agrees with the run never reads it.
"""

from __future__ import annotations

import numpy as np

from h3bench.course.design import Design, run_order, series_of
from h3bench.course.designsim import CampaignRun, simulate_campaigns
from h3bench.course.schedule import spec_blocks
from h3bench.outcome import Outcome
from h3bench.run.records import series_blocks
from h3bench.runspec import RunSpec
from h3bench.session.results import Results
from h3bench.stats.intervals import FAIL, INCONCLUSIVE, PASS

CODES = {Outcome.PASS: PASS, Outcome.FAIL: FAIL, Outcome.INCONCLUSIVE: INCONCLUSIVE}


def replay(spec: RunSpec, results: Results, *, shards: int | None = None) -> CampaignRun:
    design = Design.of(spec)
    budget = design.budget
    names, order = [s.name for s in series_of(spec)], run_order(spec)

    def draw(c: int, d: int, letters: str, first_look: int) -> np.ndarray:
        x = np.full((1, len(letters), budget.columns), np.nan)
        for result in results.series(order[d], names[c]):
            for block in series_blocks([result], budget):
                assert block.role == letters[result.block.position - 1]
                x[0, result.block.position - 1] = [*block.measured, *([block.audit] if budget.audit else [])]
        return x

    return simulate_campaigns(design, [[1.0] * len(order)] * len(names), n=1, lossless=results.lossless_on,
                              shards=shards, draw=draw, control_arms=results.course.control_arms)


def planned_blocks(spec: RunSpec, run: CampaignRun) -> set[str]:
    """The ids of the blocks the plan's course runs in the (one) replayed campaign."""
    names, order = [s.name for s in series_of(spec)], run_order(spec)
    found = set()
    for block in spec_blocks(spec, lossless=run.lossless):
        d = order.index(block.duration)
        if block.kind == "controls":
            if block.position <= run.controls[0, d]:
                found.add(block.id)
        elif block.pair < run.pairs[0, names.index(block.candidate), d]:
            found.add(block.id)
    return found


def live_codes(spec: RunSpec, results: Results) -> np.ndarray:
    """``(series, durations)``: each series' look decision as the run took it (INCONCLUSIVE where none)."""
    names, order = [s.name for s in series_of(spec)], run_order(spec)
    codes = np.full((len(names), len(order)), INCONCLUSIVE)
    for c, name in enumerate(names):
        for d, duration in enumerate(order):
            found = results.decision(duration, name)
            if found is not None and found.stop:
                codes[c, d] = CODES[found.outcome]
    return codes
