"""Three searches for one culprit, side by side: h3bench's, Pinpoint's rule, plain bisection.

A 32-commit range at the 950PR 5 s timings (``fixtures/runspecs/950pr-x4.toml``'s hints: 745.43 s per
request, blocks of one warmup, two measured requests and a counted audit, 600 s per server start, 60 s
per stop, 4 NPUs) with one 10 % step at a culprit drawn uniformly from the range, 2 % request noise and
1 % or 2 % process noise; pulling one commit's image costs 600 s of the node (assumed: the recipe gives
none). Device-hours are the node's wall hours times its 4 devices, as ``h3bench plan`` counts them.

- **h3bench**: :func:`h3bench.bisect.simulate.simulate_searches`, the bisection's own code: the verify
  campaign, probes chosen by information per device-hour and stopped by their SPRT, the posterior to
  0.95, the confirm campaign; correct means the confirmed claim names the culprit.
- **Pinpoint's rule**: 10 attempts (one block each) of the good and the bad engine; adjacent tested
  changes compared by a two-sided Mann–Whitney U test: DIFFERENT at p ≤ 0.01 (Pinpoint's low
  threshold), SAME above 0.10, UNKNOWN between, where both changes' attempts double (10, 20, 40, 80,
  160); a DIFFERENT pair with commits between gets its midpoint tested; the culprit is the adjacent
  DIFFERENT pair with the largest difference of medians. A rendition of the rule as the issue states
  it, not Pinpoint's code: its high threshold depends on the magnitude and the attempts, here fixed.
- **plain bisection**: h3bench's verify campaign, then the midpoint of the range left, each probe 3
  AB/BA pairs against the good engine, "changed" when their mean log ratio exceeds half the verified
  step; the culprit is where the range closes.

Run: ``.venv/bin/python benchmarks/bench_bisect.py [--n 4000] [--pinpoint-n 1000] [--rates]``;
``--rates`` adds the error rates docs/bisect.md states (each with its standard error).
"""

from __future__ import annotations

import argparse
import itertools
import math
import time
from pathlib import Path

import numpy as np
from scipy.stats import mannwhitneyu

from h3bench.bisect.probe import step_statistics
from h3bench.bisect.simulate import (
    Scenario,
    Setup,
    priced_range,
    setup_of,
    simulate_searches,
    simulated_campaign,
    simulated_log_ratios,
    step_range,
)
from h3bench.course.designsim import LatencyModel, draw_samples
from h3bench.runspec import load_runspec
from h3bench.stats.blockstat import block_log_statistics

ROOT = Path(__file__).resolve().parents[1]
COMMITS, RATIO, IMAGE_S = 32, 1.10, 600.0


def npu_setup(hosts: int = 1) -> Setup:
    return setup_of(priced_range(load_runspec(ROOT / "fixtures" / "runspecs" / "950pr-x4.toml"), COMMITS,
                                 image_s=IMAGE_S), hosts=hosts)


def h3bench_search(setup: Setup, model: LatencyModel, n: int, seed: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Device-seconds, wall seconds and correct, over culprits drawn uniformly."""
    culprits = np.random.default_rng(seed).integers(0, COMMITS, n)
    device, wall, correct = np.zeros(n), np.zeros(n), np.zeros(n, bool)
    for k in range(COMMITS):
        rows = culprits == k
        if rows.any():
            found = simulate_searches(setup, step_range(COMMITS, k, RATIO), model=model, n=int(rows.sum()),
                                      seed=seed * 100 + k)
            device[rows], wall[rows], correct[rows] = found.device_s, found.wall_s, found.correct()
    return device, wall, correct


def _attempts(rng: np.random.Generator, count: int, setup: Setup, level: float, model: LatencyModel) -> np.ndarray:
    samples = draw_samples(rng, count, "A", setup.budget, 1.0, model)
    return block_log_statistics(samples, setup.budget)[:, 0] + level


def pinpoint_search(setup: Setup, model: LatencyModel, rng: np.random.Generator, culprit: int,
                    start: int = 10, most: int = 160, low: float = 0.01, high: float = 0.10) -> tuple[float, bool]:
    """One search by Pinpoint's rule: its seconds and whether it named the culprit."""
    levels = np.concatenate([[0.0], np.where(np.arange(COMMITS) >= culprit, math.log(RATIO), 0.0)])
    values = {0: _attempts(rng, start, setup, 0.0, model), COMMITS: _attempts(rng, start, setup, levels[-1], model)}
    seconds = start * float(setup.block_s(0.0) + setup.block_s(levels[-1])) + 2 * setup.image_s
    while True:
        points = sorted(values)
        acted = False
        for a, b in itertools.pairwise(points):
            p = mannwhitneyu(values[a], values[b], alternative="two-sided").pvalue
            if p <= low and b - a > 1:
                m = (a + b) // 2
                values[m] = _attempts(rng, start, setup, levels[m], model)
                seconds += start * float(setup.block_s(levels[m])) + setup.image_s
                acted = True
                break
            if low < p <= high and min(len(values[a]), len(values[b])) < most:
                for c in (a, b):
                    more = min(len(values[c]), most - len(values[c]))
                    if more > 0:
                        values[c] = np.concatenate([values[c], _attempts(rng, more, setup, levels[c], model)])
                        seconds += more * float(setup.block_s(levels[c]))
                acted = True
                break
        if not acted:
            break
    points = sorted(values)
    found = [(abs(float(np.median(values[b]) - np.median(values[a]))), b - 1)
             for a, b in itertools.pairwise(points)
             if b - a == 1 and mannwhitneyu(values[a], values[b], alternative="two-sided").pvalue <= low]
    return seconds, bool(found) and max(found)[1] == culprit


def plain_search(setup: Setup, model: LatencyModel, rng: np.random.Generator, culprit: int, pairs: int = 3
                 ) -> tuple[float, bool]:
    """Plain bisection after h3bench's verify: 3 pairs per probe, threshold half the verified step."""
    levels = np.where(np.arange(COMMITS) >= culprit, math.log(RATIO), 0.0)
    reproduced, v_pairs, v_x = simulated_campaign(rng, setup, setup.verify, np.array([levels[-1]]), np.zeros(1), model)
    seconds = float(v_pairs[0] * (setup.block_s(0.0) + setup.block_s(levels[-1]))) + 2 * setup.image_s
    if not reproduced[0]:
        return seconds, False
    step = float(step_statistics(v_x, v_pairs)[0][0])
    lo, hi = 0, COMMITS  # positions: 0 the good engine (unchanged), COMMITS the bad one (changed)
    while hi - lo > 1:
        m = (lo + hi) // 2
        x = simulated_log_ratios(rng, 1, pairs, setup.budget, np.array([levels[m - 1]]), model)[0]
        seconds += pairs * float(setup.block_s(0.0) + setup.block_s(levels[m - 1])) + setup.image_s
        lo, hi = (lo, m) if x.mean() > step / 2 else (m, hi)
    return seconds, hi - 1 == culprit


def rival(search, setup: Setup, model: LatencyModel, n: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    culprits = rng.integers(0, COMMITS, n)
    found = [search(setup, model, rng, int(k)) for k in culprits]
    return np.array([f[0] for f in found]), np.array([f[1] for f in found])


def p90(x: np.ndarray) -> float:
    ranked = np.sort(x)
    return float(ranked[math.ceil(round(0.9 * len(x), 9)) - 1])  # nearest rank, as the plan's


def se(p: float, n: int) -> float:
    return math.sqrt(max(p * (1 - p), 1e-12) / n)


def side_by_side(n: int, pinpoint_n: int) -> None:
    setup = npu_setup()
    devices = setup.good.devices
    print(f"## 32 commits, one 10 % step at a uniform culprit; 950PR 5 s hints, {devices} NPUs, {IMAGE_S:.0f} s "
          "per image")
    print("| search | process noise | device-h mean | device-h p90 | node wall-h mean | P(correct) | "
          "mean device-h vs Pinpoint's |")
    print("|---|---|---|---|---|---|---|")
    for process in (0.01, 0.02):
        model = LatencyModel(0.02, process)
        t0 = time.perf_counter()
        ours, wall, ok = h3bench_search(setup, model, n, seed=int(process * 1000))
        pin, pin_ok = rival(pinpoint_search, setup, model, pinpoint_n, seed=1 + int(process * 1000))
        plain, plain_ok = rival(plain_search, setup, model, pinpoint_n, seed=2 + int(process * 1000))
        pin_devh = pin * devices / 3600
        rows = (("h3bench", ours / 3600, wall / 3600, ok), ("Pinpoint's rule", pin_devh, pin / 3600, pin_ok),
                ("plain bisection, 3 pairs", plain * devices / 3600, plain / 3600, plain_ok))
        for name, devh, wallh, good in rows:
            p = float(good.mean())
            print(f"| {name} | {process:.0%} | {devh.mean():.0f} | {p90(devh):.0f} | {wallh.mean():.1f} | "
                  f"{p:.1%} ± {se(p, len(good)):.1%} | {devh.mean() / pin_devh.mean():.0%} |")
        print(f"<!-- {time.perf_counter() - t0:.0f} s; {n} h3bench searches, {pinpoint_n} of each rival -->")


def rates(n: int) -> None:
    """The error rates docs/bisect.md states: a culprit at 13 of 32, 950PR hints."""
    setup = npu_setup()
    d = math.log(RATIO)
    print("\n## error rates (culprit 13 of 32; claim = the confirm campaign said slower)")
    print("| range | process noise | reproduced | claim | correct claim | wrong claim | named wrong (before confirm) | "
          "level between flagged | device-h mean |")
    print("|---|---|---|---|---|---|---|---|---|")
    cases: list[tuple[str, Scenario, int]] = []
    for ratio in (1.05, 1.10, 1.25):
        cases.append((f"one {ratio - 1:.0%} step", step_range(COMMITS, 13, ratio), 13))
    cases += [
        ("10 % step, later half undone (at 22)",
         Scenario("half", tuple(d if 13 <= i < 22 else d / 2 if i >= 22 else 0.0 for i in range(COMMITS))), 13),
        ("two 10 % steps (13 and 24)",
         Scenario("two", tuple((d if i >= 13 else 0.0) + (d if i >= 24 else 0.0) for i in range(COMMITS))), 13),
        ("10 % step, commit 20 does not start", step_range(COMMITS, 13, RATIO, skipped=(20,)), 13),
        ("10 % step, its parent (12) does not start", step_range(COMMITS, 13, RATIO, skipped=(12,)), 13),
        ("10 % step, the culprit (13) does not start", step_range(COMMITS, 13, RATIO, skipped=(13,)), 13),
    ]
    for name, scenario, k in cases:
        for process in (0.01, 0.02):
            found = simulate_searches(setup, scenario, model=LatencyModel(0.02, process), n=n,
                                      seed=int(process * 1e4) + k + len(name))
            named = found.first >= 0
            wrong_named = named & ((found.first > k) | (found.last < k))
            cells = [found.reproduced.mean(), found.confirmed.mean(), found.correct(k).mean(), found.wrong.mean()]
            nn = max(int(named.sum()), 1)
            text = " | ".join(f"{c:.1%} ± {se(float(c), n):.1%}" for c in cells)
            print(f"| {name} | {process:.0%} | {text} | {wrong_named.sum() / nn:.1%} ± "
                  f"{se(wrong_named.sum() / nn, nn):.1%} | {found.between.mean():.1%} | "
                  f"{found.device_s.mean() / 3600:.0f} |")
    print("\n## several hosts (10 % step, culprit 13, 1 % process noise)")
    print("| hosts | node wall-h mean | device-h mean | correct claim |")
    print("|---|---|---|---|")
    for hosts in (1, 2, 4):
        found = simulate_searches(npu_setup(hosts), step_range(COMMITS, 13, RATIO), model=LatencyModel(0.02, 0.01),
                                  n=n, seed=31 + hosts)
        p = float(found.correct().mean())
        print(f"| {hosts} | {found.wall_s.mean() / 3600:.1f} | {found.device_s.mean() / 3600:.0f} | "
              f"{p:.1%} ± {se(p, n):.1%} |")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--n", type=int, default=4000, help="h3bench searches per noise level (default 4000)")
    parser.add_argument("--pinpoint-n", type=int, default=1000, help="searches of each rival (default 1000)")
    parser.add_argument("--rates", action="store_true", help="also the error rates docs/bisect.md states")
    args = parser.parse_args()
    side_by_side(args.n, args.pinpoint_n)
    if args.rates:
        rates(args.n)


if __name__ == "__main__":
    main()
