"""Whole races simulated round by round through the race's schedule and decisions, and priced per block.

:func:`simulate_races` draws every block of every round of ``n`` races
(:func:`h3bench.course.designsim.draw_samples`: the campaign simulation's
latency model, warmups, audits and outliers included), takes each block's
statistic (:func:`h3bench.stats.blockstat.block_log_statistics`), each
candidate's contrast (:func:`h3bench.course.race.race_contrasts`) and the
decisions at each look (:func:`h3bench.course.race.decide_look`). Races that
have the same candidates still running run the same round
(:func:`h3bench.course.race.race_round`) and are drawn together. A dearer
duration races the candidates that passed every cheaper one, as a new race
with their number's critical values.

The race spends its levels linearly over the looks of every duration
(:data:`RACE_GAMMA`), and its bounds allow the design's step inside one
round (:attr:`h3bench.course.design.Design.allowance`). The sequential
design keeps a dearer duration's level mostly for its last look
(:data:`h3bench.stats.sequential.DEARER_GAMMA`) because one series has 2
degrees of freedom at the look before it; a race's estimates pool every
candidate's spread and can stop there. Two true 10 % of six at 950pr-x4's
costs, 4000 races, seed 1, rounds sharing anchors: 88.3 h with PASS 98.4 % /
79.0 % (1 % / 2 % process noise; 103.2 h and 99.7 % / 88.0 % with each
round's own anchors, 116.5 h at γ = -10); the intersection-union worst case
0.83 % / 1.00 %, 1.30 % / 1.68 % with a -3 % step inside the first round
(docs/statistics.md).

The family's level is split over the durations (each duration's race holds
``α/2 / durations`` for its field, :func:`h3bench.stats.intervals.error_levels`
with as many "candidates" as durations). The intersection-union argument
that lets one candidate spend ``α/2`` at every duration does not bound a
family whose candidates are at the margin at different durations: with
``α/2`` per duration, three of six at the margin at 5 s and three at 15 s
gave 4.9 % false "faster" (4000 races).

:func:`race_time` prices the blocks a race ran as
:mod:`h3bench.course.devicetime` prices a campaign's: anchors at the
baseline's block, each candidate block at its own.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from h3bench.course.design import Design
from h3bench.course.designsim import LatencyModel, draw_samples
from h3bench.course.devicetime import PARTS, CampaignCosts, DeviceTime
from h3bench.course.race import (
    ANCHOR,
    RACE_PATHS,
    SHARED_ANCHORS,
    LookState,
    decide_look,
    race_boundaries,
    race_contrasts,
    race_round,
)
from h3bench.errors import UsageError
from h3bench.stats import intervals
from h3bench.stats.blockstat import block_log_statistics
from h3bench.stats.intervals import INCONCLUSIVE, PASS

__all__ = ["RACE_GAMMA", "RaceRun", "race_time", "simulate_races"]

RACE_GAMMA = 0.0  # HSD spending parameter at every duration of a race: linear


@dataclass(frozen=True)
class RaceRun:
    """Simulated races: ``(n, candidates, durations)`` codes and reasons, blocks run; durations in run order."""

    design: Design
    ratios: np.ndarray  # (candidates, durations) true ratios
    code: np.ndarray  # speed outcome per duration; INCONCLUSIVE where not run
    reason: np.ndarray  # h3bench.stats.sequential reason codes; CONTINUE where not raced
    rounds: np.ndarray  # (n, candidates, durations) candidate blocks run (one per round it ran)
    anchors: np.ndarray  # (n, durations) baseline blocks run

    @property
    def outcome(self) -> np.ndarray:
        """``(n, candidates)``: PASS where every duration passed, FAIL where any failed, else INCONCLUSIVE."""
        return intervals.combine_codes(self.code)


def simulate_races(design: Design, ratios: np.ndarray | Sequence[Sequence[float]], *, model: LatencyModel | None = None,
                   n: int = 20_000, seed: int = 0, n_paths: int = RACE_PATHS, shared: bool = SHARED_ANCHORS) -> RaceRun:
    """Simulate ``n`` races of ``design``'s looks (in rounds), budget and margin; ``ratios[c][d]`` the truth.

    ``shared``: rounds share their anchors (:data:`h3bench.course.race.SHARED_ANCHORS`); a step or cooling
    drawn in the first round moves every later block, the shared anchor's too.
    """
    truth = np.asarray(ratios, dtype=float)
    if truth.ndim != 2 or truth.shape[1] != design.n_durations:
        raise UsageError(f"ratios must be (candidates, {design.n_durations}), got {truth.shape}")
    model = model or LatencyModel()
    later = dataclasses.replace(model, step=0.0, cooling=0.0)  # a step or cooling stays: every later block moves
    stays = math.log1p(model.step) + math.log1p(-model.cooling)
    rng = np.random.default_rng(seed)
    k, n_dur = truth.shape
    levels = intervals.error_levels(n_dur, n_dur)  # α/2 / durations for each duration's field
    code = np.full((n, k, n_dur), INCONCLUSIVE, np.int8)
    reason = np.zeros((n, k, n_dur), np.int8)
    rounds = np.zeros((n, k, n_dur), np.int64)
    anchors = np.zeros((n, n_dur), np.int64)
    for d in range(n_dur):
        entered = np.ones((n, k), bool) if d == 0 else (code[..., :d] == PASS).all(-1)
        looks = design.looks[d]
        contrasts = np.full((n, k, looks[-1]), np.nan)
        state = LookState.start((n, k), entered)
        fields = {m: race_boundaries(looks, m, levels, design.margin, spending=design.spending,
                                     gamma=RACE_GAMMA, futility=design.futility,
                                     allowance=design.allowance, shared=shared, n_paths=n_paths)
                  for m in range(1, k + 1)}
        size = entered.sum(-1)  # each race's field: the critical values of its own number of candidates
        last = np.zeros(n)  # the log statistic of the anchor that closed each race's round
        for r in range(looks[-1]):
            running = state.running
            keys = running @ (1 << np.arange(k))
            for key in np.unique(keys[keys > 0]):
                rows = np.flatnonzero(keys == key)
                slots = race_round([c for c in range(k) if key >> c & 1], r)
                run = slots[1:] if shared and r else slots  # a shared first anchor ran as the last round's last
                order = "".join("A" if s == ANCHOR else "B" for s in run)
                x = draw_samples(rng, len(rows), order, design.budget, 1.0, model if r == 0 else later)
                x *= np.array([1.0 if s == ANCHOR else truth[s, d] for s in run])[None, :, None]
                stats = block_log_statistics(x, design.budget) + (stays if shared and r else 0.0)
                if shared and r:
                    stats = np.concatenate([last[rows, None], stats], axis=1)
                last[rows] = stats[:, -1]
                contrasts[rows, :, r] = race_contrasts(stats, slots, k)
                anchors[rows, d] += order.count("A")
            rounds[..., d] += running
            if r + 1 in looks:
                j = looks.index(r + 1)
                for m, b in fields.items():
                    at = np.flatnonzero(size == m)
                    if at.size:
                        found = decide_look(contrasts[at], j, LookState(*(f[at] for f in (
                            state.code, state.reason, state.look))), b)
                        state.code[at], state.reason[at], state.look[at] = found.code, found.reason, found.look
        code[..., d] = np.where(entered, state.code, INCONCLUSIVE)
        reason[..., d] = np.where(entered, state.reason, 0)
    return RaceRun(design, truth, code, reason, rounds, anchors)


def race_time(run: RaceRun, costs: CampaignCosts) -> DeviceTime:
    """Price every simulated race: anchors at the baseline's block, candidate blocks at their true ratio's."""
    budget = run.design.budget
    n = run.anchors.shape[0]
    wall, device = np.zeros(n), np.zeros(n)
    parts = {k: np.zeros(n) for k in PARTS}
    for d, base in enumerate(costs.baseline):
        arms = [(run.anchors[:, d].astype(float), base)]
        arms += [(run.rounds[:, c, d].astype(float), costs.candidate(c, d, float(run.ratios[c, d])))
                 for c in range(run.ratios.shape[0])]
        for blocks, arm in arms:
            for name, seconds in arm.parts(budget).items():
                parts[name] += blocks * seconds
            wall += blocks * arm.block_s(budget)
            device += blocks * arm.block_s(budget) * arm.devices
    return DeviceTime(wall, device, parts)
