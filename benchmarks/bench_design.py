"""Device time per verdict and every guarantee of the sequential design, simulated through h3bench's own code.

Three tables, each from :func:`h3bench.course.designsim.simulate_campaigns` (the
live run's decision, :func:`h3bench.stats.sequential.judge_series`, and its
course, :mod:`h3bench.course.course`), priced by
:mod:`h3bench.course.devicetime`:

1. **Device time**: for ``fixtures/runspecs/950pr-x4.toml`` (one candidate)
   and ``910b1-x8.toml`` (two candidates, lossless) at their hints, the
   fixed design (:meth:`h3bench.course.design.Design.fixed_of`) beside the
   spec's own: wall hours mean / p90 / max over the simulated campaigns, the
   dearest campaign the design can run at all
   (:func:`h3bench.course.devicetime.worst_seconds`), and PASS per candidate.
2. **Guarantees**: every scenario of :data:`h3bench.plan.guarantees.SCENARIOS`,
   its rate ± Monte-Carlo SE against its bound (tests_unit/plan/test_guarantees.py
   holds them at fewer campaigns).
3. ``--specs``: what each shipped spec's comments state.
4. ``--cheap-warmup``: only the check of a cheap warmup (``protocol.warmup_steps``): how often
   the sequential design's first duration refuses it (judges also without first requests) in A/A
   campaigns, steady and with the first measured request off steady in both arms, and the
   guarantees' cheap-warmup scenarios.

Costs: the specs' hints (600 s per server start and 60 s per stop, which the
hints state as assumed), no compilation on top of the warmup request.

Run: ``.venv/bin/python benchmarks/bench_design.py [--n 20000] [--scale 5] [--specs | --cheap-warmup]``
"""

from __future__ import annotations

import argparse
import dataclasses
import sys
import time
from pathlib import Path

import numpy as np

from h3bench.course import designsim
from h3bench.course.course import Course
from h3bench.course.design import Design, series_of
from h3bench.course.devicetime import CampaignCosts, costs_from_spec, device_time, worst_seconds
from h3bench.plan import guarantees
from h3bench.runspec import BASELINE, RunSpec, load_runspec
from h3bench.stats.intervals import PASS

ROOT = Path(__file__).resolve().parents[1]
SPECS = ROOT / "fixtures" / "runspecs"
NOISE = (0.01, 0.02)  # process cv; request cv 2 %


def simulate(design, ratios, *, n, seed, cv_p, lossless, **model):
    return designsim.simulate_campaigns(design, ratios, model=designsim.LatencyModel(process_cv=cv_p, **model), n=n,
                                        seed=seed, lossless=lossless)


def hinted(spec: RunSpec, costs: CampaignCosts) -> list[float] | None:
    arms = [a for a in spec.candidates if a in (spec.hints.e2e_s if spec.hints else {})]
    if not arms or spec.hints is None:
        return None
    e2e = spec.hints.e2e_s
    return [e2e[arms[0]][f"{d:g}"] / e2e[BASELINE][f"{d:g}"] for d in costs.durations]


def scenarios_of(spec: RunSpec, costs: CampaignCosts) -> list[tuple[str, list[list[float]]]]:
    n_cand, n_dur = len(series_of(spec)), len(costs.durations)
    found = [("no effect", [[1.0] * n_dur] * n_cand)]
    if n_cand == 1:
        found += [("true 10 %", [[0.9] * n_dur]), ("true 5 %", [[0.95] * n_dur])]
        hint = hinted(spec, costs)
        if hint:
            found.append((f"hinted effect ({', '.join(f'{r:.3f}' for r in hint)})", [hint]))
    else:
        found += [("one true 10 %, one without", [[0.9] * n_dur] + [[1.0] * n_dur] * (n_cand - 1)),
                  ("both true 10 %", [[0.9] * n_dur] * n_cand), ("both true 5 %", [[0.95] * n_dur] * n_cand)]
    return found


def device_table(names: list[str], n: int) -> None:
    print("\n## Device time: the fixed design and the sequential design, wall hours of the node")
    print(f"({n} simulated campaigns per cell, 2 % request noise; the worst case is the dearest campaign the design "
          "can run at all)\n")
    print("| spec | scenario | process noise | fixed | sequential mean / p90 / max | worst case | mean / fixed "
          "| PASS per candidate, fixed → sequential |")
    print("|---|---|---|---|---|---|---|---|")
    for name in names:
        spec = load_runspec(SPECS / name)
        costs = costs_from_spec(spec)
        lossless = spec.gates.lossless
        seq, fixed = Design.of(spec), Design.fixed_of(spec)
        course = Course.of(spec)
        for label, ratios in scenarios_of(spec, costs):
            worst = worst_seconds(course, costs, ratios)[0] / 3600
            for cv_p in NOISE:
                runs = [simulate(d, ratios, n=n, seed=1, cv_p=cv_p, lossless=lossless) for d in (fixed, seq)]
                hours = [device_time(run, costs).summary().wall_h for run in runs]
                passed = [", ".join(f"{v:.1%}" for v in (run.outcome == PASS).mean(0)) for run in runs]
                print(f"| `{name}` | {label} | {cv_p:.0%} | {hours[0][0]:.1f} | {hours[1][0]:.1f} / {hours[1][1]:.1f} "
                      f"/ {hours[1][2]:.1f} | {worst:.1f} | {hours[1][0] / hours[0][0]:.0%} | {passed[0]} → "
                      f"{passed[1]} |")


def guarantee_table(scale: int, prefix: str = "") -> None:
    print(f"\n## Guarantees (tests_unit/plan/test_guarantees.py; here {scale}x its campaigns, 2 % request noise, "
          "2 % process noise unless stated)\n")
    print("| design | scenario | counted | rate ± SE | bound | campaigns |")
    print("|---|---|---|---|---|---|")
    for s in (s for s in guarantees.SCENARIOS if s.name.startswith(prefix)):
        rate = guarantees.measure(s, n=s.n * scale, seed=s.seed + 1000)
        mark = "" if rate.holds(s) else " **not held**"
        print(f"| {s.design} | {s.name} | {s.count} | {rate.value:.2%} ± {rate.se:.2%} | "
              f"{'≤' if s.at_most else '≥'} {s.bound:.1%}{mark} | {rate.n} |")


CHEAP_WARMUP_OFFSETS = (0.0, -0.03, 0.03, -0.10, 0.10)  # the first measured request against steady, both arms


def refused_share(offset: float, *, n: int, seed: int) -> float:
    """A/A campaigns of the shipped sequential design whose first duration's cheap warmup the check refuses."""
    run = simulate(guarantees.DESIGNS["sequential"], [[1.0, 1.0]], n=n, seed=seed, cv_p=0.02, lossless=False,
                   leak=offset, leak_arms="AB")
    return float(run.first_requests_out[:, 0, 0].mean())


def cheap_warmup_table(n: int, scale: int) -> None:
    print(f"\n## A cheap warmup: the first duration refused in A/A ({n} campaigns each, seed 3, 2 % request and "
          "process noise)\n")
    print("| first measured request against steady, both arms | refused |")
    print("|---|---|")
    for offset in CHEAP_WARMUP_OFFSETS:
        print(f"| {offset:+.0%} | {refused_share(offset, n=n, seed=3):.2%} |")
    guarantee_table(scale, "a cheap warmup")


def spec_figures(name: str, n: int) -> None:
    spec = load_runspec(SPECS / name)
    durations = len(spec.workload.durations)
    n_cand = len(series_of(spec))
    seq = Design.of(spec)
    lossless = spec.gates.lossless
    print(f"\n## {name}: {n_cand} series, {durations} duration(s), lossless {'on' if lossless else 'off'}")
    print(f"  {seq.describe()}")
    for r in (0.9, 0.95):
        runs = [simulate(seq, [[r] * durations] * n_cand, n=n, seed=11, cv_p=cv, lossless=lossless) for cv in NOISE]
        speed = [float((run.code[:, 0] == PASS).all(-1).mean()) for run in runs]
        both = [float((run.outcome[:, 0] == PASS).mean()) for run in runs]
        text = f"speed PASS {speed[0]:.1%} (1 % process noise) / {speed[1]:.1%} (2 %)"
        if lossless:
            fails = [float(run.lossless_fail.any(-1).mean()) for run in runs]
            text += (f"; with a truly lossless candidate's lossless verdict, PASS {both[0]:.1%} / {both[1]:.1%} "
                     f"(lossless FAIL {fails[0]:.2%} / {fails[1]:.2%})")
        print(f"  a true {1 - r:.0%} speedup, each candidate: {text}")
    null = simulate(seq, [[1.0] * durations] * n_cand, n=n, seed=17, cv_p=0.02, lossless=lossless)
    dearer = float((null.pairs[:, :, 1:] > 0).mean()) if durations > 1 else 0.0
    print(f"  no effect: pairs run per candidate at the first duration {null.pairs[:, :, 0].mean():.2f} "
          f"(of {seq.looks[0][-1]}); reaches a dearer duration {dearer:.2%}")
    if lossless:
        levels = [seq.lossless_alpha(d) for d in range(durations)]
        print(f"  lossless: levels {', '.join(f'{a:g}' for a in levels)} per duration, a truly lossless candidate "
              f"rejected in at most {1 - np.prod([1 - a for a in levels]):.2%}")
    if spec.hints is None:  # a sim spec: the plan prices it from its arms' profiles
        return
    costs = costs_from_spec(spec)
    course = Course.of(spec)
    ones = [[1.0] * durations] * n_cand
    fixed = worst_seconds(dataclasses.replace(course, design=Design.fixed_of(spec)), costs, ones)[0]  # every block
    print(f"  worst case {worst_seconds(course, costs, ones)[0] / 3600:.1f} h against the fixed design's "
          f"{fixed / 3600:.1f} h (no effect)")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=20_000, help="simulated campaigns per device-time cell")
    parser.add_argument("--scale", type=int, default=5, help="the guarantees' campaigns, times the test's")
    parser.add_argument("--specs", action="store_true", help="also print every shipped spec's figures")
    parser.add_argument("--cheap-warmup", action="store_true", help="only the check of a cheap warmup")
    args = parser.parse_args(argv)
    t0 = time.perf_counter()
    if args.cheap_warmup:
        cheap_warmup_table(args.n, args.scale)
        print(f"\n({time.perf_counter() - t0:.0f} s)", file=sys.stderr)
        return 0
    device_table(["950pr-x4.toml", "910b1-x8.toml"], args.n)
    guarantee_table(args.scale)
    if args.specs:
        print("\n# the figures each shipped spec's comments state (its own design)")
        for name in ("sim.toml", "sim-candidates.toml", "sim-research.toml", "910b1-x8.toml", "950pr-x4.toml"):
            spec_figures(name, args.n)
    print(f"\n({time.perf_counter() - t0:.0f} s)", file=sys.stderr)
    return 0


if __name__ == "__main__":
    np.seterr(all="ignore")
    raise SystemExit(main())
