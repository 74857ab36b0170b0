"""How a sequential campaign makes room for the lossless test: its level, its first PASS look, its control blocks.

Level per candidate
-------------------
The relabelling test (:mod:`h3bench.quality.lossless`) rejects a truly lossless
candidate in exactly ``floor(α L) / L`` of campaigns per duration
(``L = C(B + C, C)`` labelings): 4.76 % at 6 + 4 processes and α 0.05,
so 9.3 % per candidate over two durations and 17.8 % for one of
`910b1-x8.toml`'s two candidates. :func:`lossless_levels` splits a
per-candidate level of 5 % over the durations instead (Bonferroni, 0.01 at
the cheaper and 0.04 at the dearer of two durations), which holds the false
reject at ≤ 5 % per candidate (:func:`false_reject_per_candidate`).
:func:`baseline_needed` gives the baseline processes that keep ≥ 90 % power
against a 3x degradation at a level, by the seeded feasibility simulation
of :func:`h3bench.quality.lossless.lossless_feasibility`: 6 for 3 to 6 candidate
processes at 0.04 and 0.05, 7 for 4 to 6 (9 for 3) at 0.01.

First PASS look
---------------
A lossless campaign does not stop a candidate for efficacy before its
lossless test can reach a verdict: PASS is allowed from
:func:`pass_from_pairs` pairs on (4 at 0.01, 3 at 0.04), at a dearer
duration only at its last look (:meth:`h3bench.course.design.Design.pass_from`:
a PASS one look earlier would need one more control block before it), and
the sequential boundaries spend the PASS level only from there
(:func:`h3bench.stats.sequential.boundaries` ``pass_from``). Stops for futility,
FAIL or the audit need no lossless verdict and stay allowed at every look.

Control blocks
--------------
Every baseline block of the duration is a baseline process (every series'
``A`` blocks, :meth:`h3bench.course.schedule.Schedule.lossless_processes`).
A control block runs only for the shortfall of those against
:func:`baseline_needed`, before the look at which a candidate that still runs
may PASS (:mod:`h3bench.course.course`: the one rule the live run, the
pool's rounds and the plan follow). Controls all run first would put every
control process before the candidate processes, so a drift of outputs with
time reads as a candidate effect (the issue measured 33.9 % false rejects for
the later candidate of `910b1-x8.toml`).
"""

from __future__ import annotations

import functools
import math
from collections.abc import Sequence

from h3bench.errors import UsageError
from h3bench.quality import lossless

__all__ = [
    "DEAREST_SHARE",
    "PER_CANDIDATE_ALPHA",
    "SMALLEST_CANDIDATE",
    "baseline_needed",
    "false_reject_per_candidate",
    "lossless_levels",
    "pass_from_pairs",
]

PER_CANDIDATE_ALPHA = 0.05
DEAREST_SHARE = 0.8
_MAX_BASELINE = 16
CANDIDATE_CAP = 6  # see baseline_needed
SMALLEST_CANDIDATE = 3  # fewer candidate processes never reach 90 % power against 3x with up to 16 baseline ones


def lossless_levels(n_durations: int, per_candidate: float = PER_CANDIDATE_ALPHA,
                    dearest_share: float = DEAREST_SHARE) -> tuple[float, ...]:
    """The relabelling test's level per duration (run order, dearest last) that holds ``per_candidate`` over them.

    Bonferroni with unequal shares: the dearest duration gets
    ``dearest_share`` of the level, the others split the rest. A higher
    level needs fewer baseline processes, and baseline processes are
    dearest where requests are longest: with two durations, 0.01 at 5 s
    (7 baseline processes for 4 to 6 candidate ones) and 0.04 at 15 s
    (6, as at today's 0.05).
    """
    if n_durations < 1 or not 0 < per_candidate < 1 or not 0 < dearest_share <= 1:
        raise UsageError(f"need n_durations ≥ 1, a level in (0, 1) and a share in (0, 1], got {n_durations}, "
                         f"{per_candidate}, {dearest_share}")
    if n_durations == 1:
        return (per_candidate,)
    rest = per_candidate * (1 - dearest_share) / (n_durations - 1)
    return (*([rest] * (n_durations - 1)), per_candidate * dearest_share)


def false_reject_per_candidate(processes: Sequence[tuple[int, int]], levels: Sequence[float]) -> float:
    """Exact false-reject rate of a truly lossless candidate over independent durations: ``1 − Π (1 − ⌊α L⌋/L)``.

    ``processes`` are the (baseline, candidate) processes of each duration's test.
    """
    keep = 1.0
    for (n_baseline, n_candidate), alpha in zip(processes, levels, strict=True):
        labelings = math.comb(n_baseline + n_candidate, n_candidate)
        keep *= 1 - math.floor(alpha * labelings + 1e-9) / labelings
    return 1 - keep


@functools.lru_cache(maxsize=64)
def baseline_needed(n_candidate: int, alpha: float) -> int:
    """The fewest baseline processes for which the test is feasible (≥ 90 % power against 3x) with ``n_candidate``.

    Beyond :data:`CANDIDATE_CAP` candidate processes, the figure for the cap
    (conservative).
    """
    if n_candidate < 1:
        raise UsageError("need at least one candidate process")
    # Power grows with the candidate processes at a fixed baseline (simulated: 5 + 5 to 5 + 8 at 0.05 give
    # 0.87, 0.89, 0.90, 0.90), so beyond CANDIDATE_CAP the cap's figure is enough, and its simulation is cheap.
    n_candidate = min(n_candidate, CANDIDATE_CAP)
    for n_baseline in range(2, _MAX_BASELINE + 1):
        if lossless.lossless_power(n_baseline, n_candidate, alpha) >= lossless.REQUIRED_POWER:
            return n_baseline
    raise UsageError(f"no design with up to {_MAX_BASELINE} baseline processes is feasible with {n_candidate} "
                     f"candidate processes at level {alpha:g}")


@functools.lru_cache(maxsize=16)
def pass_from_pairs(alpha: float, max_baseline: int = 8, smallest: int = SMALLEST_CANDIDATE) -> int:
    """The fewest pairs (candidate processes, at least ``smallest``) whose test is feasible with ≤ ``max_baseline``."""
    for n_candidate in range(smallest, 17):
        if baseline_needed(n_candidate, alpha) <= max_baseline:
            return n_candidate
    raise UsageError(f"no lossless design with ≤ {max_baseline} baseline processes at level {alpha:g}")
