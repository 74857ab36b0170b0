"""What a sequential campaign's verdicts guarantee: every claimed rate, a scenario simulated through the project's code.

Each :class:`Scenario` is one claim: a design, the candidates' true ratios
per duration (run order), how latencies are drawn
(:class:`h3bench.course.designsim.LatencyModel`: 2 % request noise, a process
offset, and a leak, a slow request, a step inside a pair or a host that
cools), what is counted, and the bound. :func:`measure` simulates it through
:func:`h3bench.course.designsim.simulate_campaigns`, which judges every series
with :func:`h3bench.stats.sequential.judge_series` (the live run's decision)
and walks the course (:mod:`h3bench.course.course`, the live run's rule for
which blocks run), and gives the rate with its Monte-Carlo standard error.
tests_unit/plan/test_guarantees.py holds every bound, within 3.5 standard
errors at its own (smaller) number of campaigns; ``benchmarks/bench_design.py``
prints the table that docs/statistics.md quotes.

The worst cases: PASS needs every duration (intersection-union), so false
"faster" is largest with one duration on the margin (true ratio 0.98) and the
other clearly faster (0.5), either way round; false "slower" needs one
duration only, so it is largest with every duration on the FAIL margin (1.02)
and every duration run. Drift inside a pair is put where it hurts most: a
step between the first two blocks of every series (inside pair 1), the host
cooling over the first block.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping
from dataclasses import dataclass, field

import numpy as np

from h3bench.course.design import Design, fixed_design, sequential_design
from h3bench.course.designsim import CampaignRun, LatencyModel, simulate_campaigns
from h3bench.stats.blockstat import LEAK_LEVEL
from h3bench.stats.intervals import FAIL, PASS

__all__ = ["DESIGNS", "SCENARIOS", "Rate", "Scenario", "measure"]

#: The designs the claims are about: the shipped sequential one (one candidate, as 950pr-x4.toml and sim.toml's
#: speed), 910b1-x8.toml's (two candidates, lossless at 2.5 % per candidate), and the fixed design for reference.
DESIGNS: Mapping[str, Design] = {
    "sequential": sequential_design(2),
    "sequential, 910b1-x8": sequential_design(2, lossless_per_candidate=0.025, name="sequential, 910b1-x8"),
    "fixed": fixed_design(2),
    "fixed + first-request rule": dataclasses.replace(fixed_design(2), leak_level=LEAK_LEVEL,
                                                      name="fixed + first-request rule"),
}

#: What a scenario counts, per simulated campaign.
COUNTS = {
    "PASS": lambda run: run.outcome[:, :1] == PASS,  # the first candidate's
    "any PASS": lambda run: (run.outcome == PASS).any(-1, keepdims=True),
    "any FAIL": lambda run: (run.outcome == FAIL).any(-1, keepdims=True),
    "lossless FAIL, per candidate": lambda run: run.lossless_fail.any(-1),  # over its durations
}


@dataclass(frozen=True)
class Scenario:
    """One claim: ``count`` over simulated campaigns is at most (or at least) ``bound``."""

    name: str
    design: str  # a key of DESIGNS
    ratios: tuple[tuple[float, ...], ...]  # per candidate, per duration in run order
    count: str  # a key of COUNTS
    bound: float
    at_most: bool = True
    model: Mapping[str, object] = field(default_factory=dict)
    lossless: bool = False
    every_duration: bool = False  # the dearer duration runs whatever the cheaper gave (false "slower")
    seed: int = 0
    n: int = 20_000  # campaigns in the test (the bench runs more)

    def describe(self) -> str:
        return f"{self.name}: {self.count} {'≤' if self.at_most else '≥'} {self.bound:.1%}"


@dataclass(frozen=True)
class Rate:
    value: float
    se: float
    n: int

    def holds(self, scenario: Scenario, sigmas: float = 3.5) -> bool:
        """Whether the bound holds within ``sigmas`` Monte-Carlo standard errors of it."""
        slack = sigmas * math.sqrt(scenario.bound * (1 - scenario.bound) / self.n)
        return self.value <= scenario.bound + slack if scenario.at_most else self.value >= scenario.bound - slack


def simulate(scenario: Scenario, n: int | None = None, seed: int | None = None) -> CampaignRun:
    design = DESIGNS[scenario.design]
    if scenario.every_duration:
        design = dataclasses.replace(design, in_order_of_cost=False)
    model = LatencyModel(**{"process_cv": 0.02, **scenario.model})  # type: ignore[arg-type]
    return simulate_campaigns(design, [list(r) for r in scenario.ratios], model=model, n=n or scenario.n,
                              seed=scenario.seed if seed is None else seed, lossless=scenario.lossless)


def measure(scenario: Scenario, n: int | None = None, seed: int | None = None) -> Rate:
    """The scenario's rate over ``n`` simulated campaigns (default its own), with its standard error."""
    counted = np.asarray(COUNTS[scenario.count](simulate(scenario, n, seed)))
    value = float(counted.mean())
    return Rate(value, math.sqrt(max(value * (1 - value), 1e-6) / counted.size), counted.size)


_Cases = tuple[tuple[str, dict[str, object]], ...]  # a variant's name and what it adds to the latency model


def _scenarios() -> tuple[Scenario, ...]:
    found: list[Scenario] = []
    margin_cases = (((0.98, 0.5),), "0.98 at 5 s, 0.5 at 15 s"), (((0.5, 0.98),), "0.5 at 5 s, 0.98 at 15 s")
    for ratios, where in margin_cases:
        found.append(Scenario(f"false faster, {where}", "sequential", ratios, "any PASS", 0.025, seed=11))
    found.append(Scenario("false faster, two candidates at 0.5 at 5 s, 0.98 at 15 s", "sequential",
                          ((0.5, 0.98), (0.5, 0.98)), "any PASS", 0.025, seed=12, n=10_000))
    for cands in (1, 2):
        found.append(Scenario(f"false slower, {cands} candidate{'s' if cands > 1 else ''} at 1.02, every duration run",
                              "sequential",
                              ((1.02, 1.02),) * cands, "any FAIL", 0.025, every_duration=True, seed=20 + cands,
                              n=20_000 // cands))
    for cv, quoted in ((0.01, 0.95), (0.02, 0.80)):
        found.append(Scenario(f"a true 10 % speedup, {cv:.0%} process noise", "sequential", ((0.9, 0.9),), "PASS",
                              quoted, at_most=False, model={"process_cv": cv}, seed=31, n=4000))
    for leak in (0.03, 0.05, 0.10, 0.20):
        found.append(Scenario(f"+{leak:.0%} warmup leak into the baseline's first measured request, 0.98 at 15 s",
                              "sequential", ((0.5, 0.98),), "any PASS", 0.025, model={"leak": leak},
                              seed=50 + int(leak * 100)))
        found.append(Scenario(f"+{leak:.0%} warmup leak into the candidate's first measured request, 1.02",
                              "sequential", ((1.02, 1.02),), "any FAIL", 0.025,
                              model={"leak": leak, "leak_arms": "B"}, every_duration=True,
                              seed=56 + int(leak * 100), n=10_000))
    # A cheap warmup (protocol.warmup_steps) that leaves the first measured request 3 % off steady: in both arms
    # (the same warmup), or in one arm only (its card or its compile warms differently), each way the bias can go.
    cheap: tuple[tuple[str, float, str], ...] = (("faster in both arms", -0.03, "AB"),
                                                 ("slower in both arms", 0.03, "AB"),
                                                 ("faster in the candidate", -0.03, "B"),
                                                 ("faster in the baseline", -0.03, "A"))
    for i, (where, off, arms) in enumerate(cheap):
        model = {"leak": off, "leak_arms": arms}
        if arms != "A":
            found.append(Scenario(f"a cheap warmup leaves the first measured request 3 % {where}, 0.98 at 15 s",
                                  "sequential", ((0.5, 0.98),), "any PASS", 0.025, model=model, seed=110 + i))
        if arms != "B":
            found.append(Scenario(f"a cheap warmup leaves the first measured request 3 % {where}, 1.02",
                                  "sequential", ((1.02, 1.02),), "any FAIL", 0.025, model=model, every_duration=True,
                                  seed=120 + i, n=10_000))
    slow: _Cases = (("any timed request", {"outliers_per_duration": 1}),
                    ("the audit request", {"outliers_per_duration": 1, "outliers_in": "audit"}),
                    ("a measured request", {"outliers_per_duration": 1, "outliers_in": "measured"}))
    for where, model in slow:
        found.append(Scenario(f"a true 10 % speedup, one +50 % request per duration ({where}), 1% process noise",
                              "sequential",
                              ((0.9, 0.9),), "PASS", 0.95, at_most=False, model={"process_cv": 0.01, **model},
                              seed=71, n=4000))
    found.append(Scenario("a true 10 % speedup, 1 % of requests +50 %, 1% process noise", "sequential", ((0.9, 0.9),),
                          "PASS", 0.97, at_most=False, model={"process_cv": 0.01, "outlier_rate": 0.01}, seed=72,
                          n=4000))
    aa: _Cases = (("one +50 % request per duration", {"outliers_per_duration": 1}),
                  ("1 % of requests +50 %", {"outlier_rate": 0.01}))
    for where, model in aa:
        found.append(Scenario(f"A/A, {where}, 1% process noise", "sequential", ((1.0, 1.0),), "any FAIL", 0.001,
                              model={"process_cv": 0.01, **model}, seed=73, n=40_000))
    drifts: _Cases = (("a −3 % step inside pair 1", {"step": -0.03}),
                      ("the host cooling 5 % over its first block", {"cooling": 0.05}))
    for drift, model in drifts:
        for ratios, where in margin_cases:
            for cv in (0.01, 0.02):
                found.append(Scenario(f"false faster, {drift}, {where}, {cv:.0%} process noise", "sequential",
                                      ratios, "any PASS", 0.025, model={"process_cv": cv, **model},
                                      seed=80 + int(cv * 100) + int(ratios[0][0] * 10)))
    found.append(Scenario("candidate 1 lossless and 10 % faster, candidate 2 lossless and no faster, 1% process noise",
                          "sequential, 910b1-x8", ((0.9, 0.9), (1.0, 1.0)), "PASS", 0.88, at_most=False,
                          model={"process_cv": 0.01}, lossless=True, seed=91, n=10_000))
    found.append(Scenario("a truly lossless candidate's lossless FAIL (both 10 % faster), 1% process noise",
                          "sequential, 910b1-x8", ((0.9, 0.9), (0.9, 0.9)), "lossless FAIL, per candidate", 0.05,
                          model={"process_cv": 0.01}, lossless=True, seed=92, n=10_000))
    return tuple(found)


SCENARIOS = _scenarios()
