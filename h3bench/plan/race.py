"""A race spec's price (issue 44): whole races simulated and priced at the plan's costs, beside the sequential design.

:func:`race_plan` walks the race through :mod:`h3bench.course.racesim` (the
race's schedule and per-look decisions, :mod:`h3bench.course.race`) in the
scenarios and at the costs :func:`h3bench.plan.estimate.make_plan` prices the
sequential design in, and measures the family's error rates the same way.
"""

from __future__ import annotations

from dataclasses import dataclass

from h3bench.course.design import Design
from h3bench.course.devicetime import CampaignCosts, DeviceTimeSummary
from h3bench.course.racesim import race_time, simulate_races
from h3bench.runspec import RunSpec
from h3bench.stats.intervals import FAIL, PASS

__all__ = ["RaceErrors", "RaceEstimate", "RacePlan", "race_plan"]


@dataclass(frozen=True)
class RaceEstimate:
    """A race's wall and device time in one scenario over simulated races, and how often each candidate PASSes."""

    scenario: str
    race: DeviceTimeSummary
    pass_rates: tuple[float, ...]  # per candidate (the spec's order): PASS at every duration


@dataclass(frozen=True)
class RaceErrors:
    """The race's family-wise error rates over ``n`` simulated races at the spec's margin."""

    faster: float  # some candidate PASSes, every one at 1 - margin at every duration
    faster_worst: float | None  # the same at the intersection-union worst case over durations; None with one duration
    slower: float  # some candidate FAILs, every one at 1 + margin at every duration
    n: int


@dataclass(frozen=True)
class RacePlan:
    """What :func:`race_plan` prices, and the race spec itself (the plan's spec is its sequential counterpart)."""

    spec: RunSpec
    device: tuple[RaceEstimate, ...]  # the scenarios of device_estimates; empty when some arm has no cost
    errors: RaceErrors


def race_plan(spec: RunSpec, costs: CampaignCosts | None, scenarios: dict[str, list[list[float]]], *, n: int = 2000,
              seed: int = 0) -> RacePlan:
    """A race's wall and device time per scenario, each candidate's PASS rate, and the family's error rates.

    Whole races simulated through :func:`h3bench.course.racesim.simulate_races`
    (the race's schedule and per-look decisions, :mod:`h3bench.course.race`)
    and priced by :func:`h3bench.course.racesim.race_time` at ``costs`` in
    ``scenarios`` (true ratios ``[candidate][duration]`` by name), those the
    plan prices the sequential design at and in (``costs`` None: the error
    rates only). The error rates: some candidate PASSes with every one at
    ``1 - margin`` at every duration, and at the intersection-union worst case over durations (candidate ``c`` at
    the margin at duration ``c`` modulo the durations, a true 10 % at the
    others: a candidate PASSes only where it passes every duration); some
    candidate FAILs with every one at ``1 + margin``.
    """
    design = Design.of(spec)
    k, n_durations, margin = len(spec.candidates), design.n_durations, spec.gates.speed_margin
    device = []
    for name, ratios in scenarios.items():
        run = simulate_races(design, ratios, n=n, seed=seed)
        if costs is not None:
            device.append(RaceEstimate(name, race_time(run, costs).summary(),
                                       tuple(float(p) for p in (run.outcome == PASS).mean(0))))

    def rate(ratios: list[list[float]], code: int) -> float:
        return float((simulate_races(design, ratios, n=n, seed=seed).outcome == code).any(-1).mean())

    worst = [[1 - margin if d == c % n_durations else 0.9 for d in range(n_durations)] for c in range(k)]
    return RacePlan(spec, tuple(device), RaceErrors(
        rate([[1 - margin] * n_durations] * k, PASS), rate(worst, PASS) if n_durations > 1 else None,
        rate([[1 + margin] * n_durations] * k, FAIL), n))
