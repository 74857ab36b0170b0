"""Six hypotheses on one 950PR node: the race beside today's design and six separate campaigns (issue 44).

Every figure is simulated through h3bench's own decision code, at
``fixtures/runspecs/950pr-x4.toml``'s costs (its hints: 600 s per server
start, 60 s per stop, the recipe's request times) and design (looks, spending,
margin, block budget), with its one candidate's arm standing for each of
``--k`` candidates:

- **today**: the spec's sequential design with ``k`` series
  (:func:`h3bench.course.designsim.simulate_campaigns`, priced by
  :func:`h3bench.course.devicetime.device_time`): an AB/BA pair per
  candidate per round, levels split over the candidates (Bonferroni);
- **separate**: ``k`` one-candidate campaigns of the same design, one after
  another (no family-wise bound);
- **race**: :func:`h3bench.course.racesim.simulate_races`, priced by
  :func:`h3bench.course.racesim.race_time`: shared anchors, max-t critical
  values, Holm step-down, the family's level split over the durations;
  rounds share their anchors (:data:`h3bench.course.race.SHARED_ANCHORS`);
- **race, own anchors**: the same race whose every round runs its own
  anchors (each round's contrasts independent of the others').

Per scenario and process noise (2 % request noise): mean / p90 wall hours of
the node, PASS per candidate (each true one; the most any null one
reaches), and the family's false "faster" (any candidate PASSes whose true
ratio is at or above ``1 - margin`` at some duration).

Run: ``.venv/bin/python benchmarks/bench_race.py [--n 4000] [--k 6] [--seed 1]``
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

import numpy as np

from h3bench.course.design import Design
from h3bench.course.designsim import LatencyModel, simulate_campaigns
from h3bench.course.devicetime import DeviceTime, costs_from_spec, device_time
from h3bench.course.racesim import race_time, simulate_races
from h3bench.runspec import load_runspec
from h3bench.stats.intervals import PASS

ROOT = Path(__file__).resolve().parents[1]
SPEC = ROOT / "fixtures" / "runspecs" / "950pr-x4.toml"
NOISE = (0.01, 0.02)


def scenarios(k: int, margin: float) -> list[tuple[str, list[list[float]], dict[str, float]]]:
    at = 1 - margin
    half = k // 2
    true = min(2, k)
    found = [(f"{true} true 10 %, {k - true} without effect", [[0.9, 0.9]] * true + [[1.0, 1.0]] * (k - true), {}),
             ("all at the margin", [[at, at]] * k, {}),
             ("all at the margin, -3 % step inside the first round / pair", [[at, at]] * k, {"step": -0.03}),
             ("all true 10 %", [[0.9, 0.9]] * k, {})]
    if k > 1:
        worst = [[at, 0.9]] * half + [[0.9, at]] * (k - half)
        found += [("intersection-union worst case: half at the margin at 5 s, the rest at 15 s", worst, {}),
                  ("the same, -3 % step inside the first round / pair", worst, {"step": -0.03})]
    return found


def figures(outcome: np.ndarray, ratios: np.ndarray, margin: float) -> tuple[str, str, float]:
    null = (ratios >= 1 - margin - 1e-12).any(-1)
    passed = (outcome == PASS).mean(0)
    true = ", ".join(f"{p:.1%}" for p in passed[~null]) or "-"
    worst_null = f"{passed[null].max():.2%}" if null.any() else "-"
    return true, worst_null, float(((outcome == PASS) & null).any(-1).mean())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=4000, help="simulated campaigns per cell")
    parser.add_argument("--k", type=int, default=6, help="candidates")
    parser.add_argument("--seed", type=int, default=1)
    args = parser.parse_args()
    spec = load_runspec(SPEC)
    design = Design.of(spec)
    costs = costs_from_spec(spec)
    margin = design.margin
    print(f"# The race on {SPEC.name}'s costs: {args.k} candidate(s), {args.n} campaigns per cell, seed {args.seed}, "
          "2 % request noise\n")
    print(f"design: {design.describe()}\n")
    print("| scenario | process noise | design | wall h mean / p90 | PASS, each true one | PASS, most of a null one "
          "| family false \"faster\" |")
    print("|---|---|---|---|---|---|---|")
    started = time.process_time()
    for label, ratios, extra in scenarios(args.k, margin):
        truth = np.array(ratios)
        for cv in NOISE:
            model = LatencyModel(process_cv=cv, **extra)
            today = simulate_campaigns(design, truth, model=model, n=args.n, seed=args.seed)
            alone = [simulate_campaigns(design, truth[c:c + 1], model=model, n=args.n, seed=args.seed + 100 + c)
                     for c in range(args.k)]
            race = simulate_races(design, truth, model=model, n=args.n, seed=args.seed)
            own = simulate_races(design, truth, model=model, n=args.n, seed=args.seed, shared=False)
            separate = sum(device_time(a, costs).wall_s for a in alone)
            rows = [("today", today.outcome, device_time(today, costs)),
                    ("separate", np.concatenate([a.outcome for a in alone], 1), DeviceTime(separate, separate, {})),
                    ("race", race.outcome, race_time(race, costs)),
                    ("race, own anchors", own.outcome, race_time(own, costs))]
            for name, outcome, priced in rows:
                true, worst_null, family = figures(outcome, truth, margin)
                mean, p90, _ = priced.summary().wall_h
                print(f"| {label} | {cv:.0%} | {name} | {mean:.1f} / {p90:.1f} | {true} | {worst_null} | "
                      f"{family:.2%} |")
    print(f"\n{time.process_time() - started:.0f} CPU s")


if __name__ == "__main__":
    main()
