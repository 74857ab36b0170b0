"""What a bisection will cost before it runs: ``h3bench plan`` on a spec with a ``[bisect]`` table.

Searches simulated through the bisection's own code (:mod:`h3bench.bisect.simulate`)
at the spec's hints: its range, its verify's and confirm's boundaries, its
probe test and rules, a step at a culprit drawn uniformly from the range;
2 % request noise and 1 %, 2 % and 4 % process noise (1 and 2 % as every
plan of the project assumes; 4 % so that a noisier host's figures are said
before any device time is spent). The step is ``[bisect].size`` when the
spec asks for one, else the one its arms imply when its hints give both
engines' request times, else 10 %. Where fewer than :data:`REACH` of the
searches confirm the culprit, the plan says that the change is out of reach
at that noise, before any device time is spent.
"""

from __future__ import annotations

import math

import numpy as np

from h3bench.bisect.simulate import setup_of, simulate_searches, step_range
from h3bench.bisect.specs import bad_arm, duration_of, table_of
from h3bench.course.designsim import LatencyModel
from h3bench.runspec import BASELINE, RunSpec

__all__ = ["plan_lines"]

NOISE = (0.01, 0.02, 0.04)
REACH = 0.95  # the share of searches that must confirm the culprit for a change to be within reach


def _step(spec: RunSpec) -> tuple[float, str]:
    size = table_of(spec).size
    if size is not None:
        return size, "the size asked: [bisect] size"
    hints = spec.hints
    key = f"{duration_of(spec):g}"
    if hints is not None:
        good, bad = hints.e2e_s.get(BASELINE, {}).get(key), hints.e2e_s.get(bad_arm(spec), {}).get(key)
        if good and bad and bad != good:
            return bad / good, "the hints' request times of the good and the bad engine"
    return 1.10, "a 10 % step (the hints give no request time of the bad engine)"


def _time(seconds: float, unit: str) -> str:
    return f"{seconds / 3600:.1f} {unit}-h" if seconds >= 3600 else f"{seconds / 60:.1f} {unit}-min"


def plan_lines(spec: RunSpec, *, n: int = 400, seed: int = 0) -> list[str]:
    """The bisection's range and rules, and its simulated device-hours and P(correct claim)."""
    table = table_of(spec)
    setup = setup_of(spec)
    commits = len(table.range)
    ratio, why = _step(spec)
    out = [f"bisection: {commits} commits after {table.good.commit} (the last {table.bad.commit}), on {table.on}, at "
           f"{duration_of(spec):g} s; stop at posterior {table.posterior}"
           + (f" or {table.budget_device_h:g} device-h" if table.budget_device_h is not None else ""),
           f"  probes: {setup.test.describe()}; a pair costs {_time(2 * float(setup.block_s(0.0)), 'wall')}, "
           f"an image {_time(table.image_s, 'wall')} (hints: {spec.hints.source if spec.hints else 'none'})",
           f"  simulated at a step of {ratio:.3f} ({why}), the culprit drawn uniformly, 2 % request noise:"]
    culprits = np.random.default_rng(seed).integers(0, commits, n)
    short = []
    for process in NOISE:
        device, wall, good = np.zeros(n), np.zeros(n), np.zeros(n, bool)
        for k in np.unique(culprits):
            rows = culprits == k
            found = simulate_searches(setup, step_range(commits, int(k), ratio), model=LatencyModel(0.02, process),
                                      n=int(rows.sum()), seed=seed + int(k))
            device[rows], wall[rows], good[rows] = found.device_s, found.wall_s, found.correct()
        ranked = np.sort(device)
        p90 = float(ranked[math.ceil(0.9 * n) - 1])
        out.append(f"    {process:.0%} process noise: {_time(device.mean(), 'device')} mean, p90 {_time(p90, 'device')} "
                   f"({_time(wall.mean(), 'wall')}); the culprit confirmed in {good.mean():.1%} of {n} searches")
        if good.mean() < REACH:
            short.append(f"{process:.0%}")
    if short:
        out.append(f"  out of reach at {', '.join(short)} process noise: a step of {ratio:.3f} is confirmed in fewer "
                   f"than {REACH:.0%} of the searches"
                   + (f" within {table.budget_device_h:g} device-h" if table.budget_device_h is not None else ""))
    return out
