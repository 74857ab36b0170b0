"""Device time per verdict: the fixed and the sequential design side by side, for the NPU specs at their hints.

For ``fixtures/runspecs/950pr-x4.toml`` (one candidate) and
``910b1-x8.toml`` (two candidates, lossless) it simulates campaigns through
h3bench's own verdict code (:func:`h3bench.plan.designsim.simulate_campaigns`)
and prices every block they ran (:func:`h3bench.plan.devicetime.device_time`):
expected wall hours and device-hours (mean, p90, max) under no effect, a
true 10 % speedup and the effect the hints expect, with the error rates and
the power of each design. ``--specs`` adds, for every shipped spec, the
figures its comments should state for the sequential design.

Costs: the specs' hints (their request times; 600 s per server start and
60 s per stop, which the hints state as assumed), no compilation on top of
the warmup request. 910b1-x8's 15 s hint is its 5 s one times the 950PR
recipe's 15 s / 5 s ratio (5887.24 / 745.43), as the spec says.

Run: ``.venv/bin/python benchmarks/bench_design.py [--n 20000] [--specs]``
"""

from __future__ import annotations

import argparse
import dataclasses
import sys
import time
from pathlib import Path

import numpy as np

from h3bench.plan import designsim
from h3bench.plan.devicetime import CampaignCosts, costs_from_spec, device_time
from h3bench.plan.estimate import design_of
from h3bench.quality import lossless_design
from h3bench.runspec import BASELINE, RunSpec, load_runspec
from h3bench.runspec.schedule import control_blocks, series_of
from h3bench.stats.intervals import FAIL, PASS

ROOT = Path(__file__).resolve().parents[1]
SPECS = ROOT / "fixtures" / "runspecs"
NOISE = (0.01, 0.02)  # process cv; request cv 2 %


def simulate(design, ratios, *, n, seed, cv_p, lossless, **model):
    return designsim.simulate_campaigns(design, ratios, model=designsim.LatencyModel(process_cv=cv_p, **model), n=n,
                                        seed=seed, lossless=lossless)


def hours(run, costs: CampaignCosts) -> tuple[str, float]:
    s = device_time(run, costs).summary()
    return (f"{s.wall_h[0]:6.1f} {s.wall_h[1]:6.1f} {s.wall_h[2]:6.1f} | {s.device_h[0]:6.0f} {s.device_h[1]:6.0f} "
            f"{s.device_h[2]:6.0f}"), s.wall_h[0]


def designs(spec: RunSpec):
    """Today's fixed design, and the spec's own (sequential) design as the campaign runs it."""
    return (designsim.fixed_design(len(spec.workload.durations), len(spec.protocol.order) // 2,
                                   controls=control_blocks(spec)), design_of(spec))


def hinted(spec: RunSpec, costs: CampaignCosts) -> list[float] | None:
    arms = [a for a in spec.candidates if a in (spec.hints.e2e_s if spec.hints else {})]
    if not arms or spec.hints is None:
        return None
    e2e = spec.hints.e2e_s
    return [e2e[arms[0]][f"{d:g}"] / e2e[BASELINE][f"{d:g}"] for d in costs.durations]


def side_by_side(name: str, n: int, scale: dict[str, float] | None = None) -> None:
    spec = load_runspec(SPECS / name)
    costs = costs_from_spec(spec, scale=scale)
    n_cand = len(series_of(spec))
    lossless = spec.gates.lossless
    fixed, seq = designs(spec)
    print(f"\n## {name}: {n_cand} candidate(s), durations {[f'{d:g} s' for d in costs.durations]} in order of cost, "
          f"{costs.baseline[0].devices} devices per arm, lossless {'on' if lossless else 'off'}")
    per_request = ", ".join(f"{d:g} s: {c.request_s:.0f} s per request"
                            for d, c in zip(costs.durations, costs.baseline, strict=True))
    first = costs.baseline[0]
    print(f"costs: {per_request}; start {first.startup_s:.0f} s, stop {first.shutdown_s:.0f} s ({costs.source})")
    for design in (fixed, seq):
        print(f"  {design.describe()}")
    scenarios = [("no effect", [[1.0] * len(costs.durations)] * n_cand)]
    if n_cand == 1:
        scenarios.append(("true 10 %", [[0.9] * len(costs.durations)]))
        hint = hinted(spec, costs)
        if hint:
            scenarios.append((f"hinted effect ({', '.join(f'{r:.3f}' for r in hint)})", [hint]))
    else:
        scenarios.append(("one true 10 %, one without", [[0.9] * 2] + [[1.0] * 2] * (n_cand - 1)))
        scenarios.append(("both true 10 %", [[0.9] * 2] * n_cand))
    print("| scenario | process noise | design | PASS per candidate | wall h mean | p90 | max | device-h mean | p90 | max |"
          " vs fixed |")
    print("|---|---|---|---|---|---|---|---|---|---|---|")
    for label, ratios in scenarios:
        for cv_p in NOISE:
            base = None
            for design in (fixed, seq):
                run = simulate(design, ratios, n=n, seed=1, cv_p=cv_p, lossless=lossless)
                text, mean = hours(run, costs)
                base = base or mean
                passed = ", ".join(f"{v:.1%}" for v in (run.outcome == PASS).mean(0))
                cells = " | ".join(text.replace("|", "").split())
                print(f"| {label} | {cv_p:.0%} | {design.name} | {passed} | {cells} | {mean / base:.0%} |")
    print("\nerror rates (worst cases: one duration on the margin 0.98 and the others at 0.5 for false 'faster'; every "
          "duration at 1.02 for false 'slower'; every candidate alike)")
    print("| design | false faster | false slower | power 10 %, 1 % / 2 % process noise | power 5 %, 1 % / 2 % |")
    print("|---|---|---|---|---|")
    n_d = len(costs.durations)
    for design in (fixed, seq):
        ff = max(float((simulate(design, [[0.98 if i == d else 0.5 for i in range(n_d)]] * n_cand, n=n, seed=3 + d,
                                          cv_p=0.02, lossless=False).outcome == PASS).any(-1).mean())
                 for d in range(n_d))
        fs = float((simulate(dataclasses.replace(design, in_order_of_cost=False), [[1.02] * n_d] * n_cand, n=n,
                             seed=5, cv_p=0.02, lossless=False).outcome == FAIL).any(-1).mean())
        powers = [[float((simulate(design, [[r] * n_d] * n_cand, n=n, seed=7, cv_p=cv, lossless=lossless).outcome
                          == PASS).mean()) for cv in NOISE] for r in (0.9, 0.95)]
        print(f"| {design.name} | {ff:.2%} | {fs:.2%} | {powers[0][0]:.1%} / {powers[0][1]:.1%} | "
              f"{powers[1][0]:.1%} / {powers[1][1]:.1%} |")


def candidate_ratio(spec: RunSpec, arm: str) -> float | None:
    """A simulator arm's true ratio to the baseline (its time_scale); None for real arms."""
    own, base = spec.arms[arm].sim, spec.arms[BASELINE].sim
    if own is None or base is None:
        return None
    return float(own.get("time_scale", 1.0)) / float(base.get("time_scale", 1.0))


def spec_figures(name: str, n: int, scale: dict[str, float] | None = None) -> None:
    spec = load_runspec(SPECS / name)
    durations = len(spec.workload.durations)
    series = series_of(spec)
    n_cand = len(series)
    seq = design_of(spec)
    lossless = spec.gates.lossless
    print(f"\n## {name}: {n_cand} series, {durations} duration(s), lossless {'on' if lossless else 'off'}")
    print(f"  {seq.describe()}")
    for r in (0.9, 0.95):
        runs = [simulate(seq, [[r] * durations] * n_cand, n=n, seed=11, cv_p=cv, lossless=lossless) for cv in NOISE]
        speed = [float((run.code[:, 0] == PASS).all(-1).mean()) for run in runs]
        both = [float((run.outcome[:, 0] == PASS).mean()) for run in runs]
        text = f"speed PASS {speed[0]:.1%} (1 % process noise) / {speed[1]:.1%} (2 %)"
        if lossless:
            text += f"; with a truly lossless candidate's lossless verdict, PASS {both[0]:.1%} / {both[1]:.1%}"
        print(f"  a true {1 - r:.0%} speedup, each candidate: {text}")
    ff = max(float((simulate(seq, [[0.98 if i == d else 0.5 for i in range(durations)]] * n_cand, n=n, seed=13 + d,
                             cv_p=0.02, lossless=False).outcome == PASS).any(-1).mean()) for d in range(durations))
    fs = float((simulate(dataclasses.replace(seq, in_order_of_cost=False), [[1.02] * durations] * n_cand, n=n,
                         seed=15, cv_p=0.02, lossless=False).outcome == FAIL).any(-1).mean())
    print(f"  false 'faster' at the margin {ff:.2%}, false 'slower' {fs:.2%} (bound 2.5 % each, campaign-wide)")
    null = simulate(seq, [[1.0] * durations] * n_cand, n=n, seed=17, cv_p=0.02, lossless=lossless)
    dearer = float((null.pairs[:, :, 1:] > 0).mean()) if durations > 1 else 0.0
    print(f"  no effect: pairs run per candidate at the first duration {null.pairs[:, :, 0].mean():.2f} "
          f"(of {seq.looks[0][-1]}); reaches a dearer duration {dearer:.2%}")
    if lossless:
        levels = seq.lossless_levels or ()
        smallest = [(lossless_design.baseline_needed(lossless_design.pass_from_pairs(a), a),
                     lossless_design.pass_from_pairs(a)) for a in levels]
        rate = lossless_design.false_reject_per_candidate(smallest, levels)
        print(f"  lossless: levels {', '.join(f'{a:g}' for a in levels)} per duration; smallest designs "
              f"{', '.join(f'{b} + {c}' for b, c in smallest)}; a truly lossless candidate rejected in ≤ {rate:.2%} "
              f"(per candidate); ≥ 90 % power against 3x on every metric at each duration")
    own = [(s.name, candidate_ratio(spec, s.arm)) for s in series]
    if all(r is not None for _, r in own):
        ratios = [[float(r)] * durations for _, r in own]  # type: ignore[arg-type]
        if spec.final is not None and spec.final_control != BASELINE:  # the final against the original baseline
            final, original = candidate_ratio(spec, spec.final), candidate_ratio(spec, spec.final_control)
            ratios[-1] = [float(final or 1) / float(original or 1)] * durations
        for cv in NOISE:
            run = simulate(seq, ratios, n=n, seed=19, cv_p=cv, lossless=lossless)
            parts = [f"{s.name} (true {r[0]:.3f}): speed PASS {p:.1%}, pairs {m:.2f}"
                     for s, r, p, m in zip(series, ratios, (run.code == PASS).all(-1).mean(0),
                                           run.pairs.sum(-1).mean(0), strict=True)]
            print(f"  its own candidates, {cv:.0%} process noise: " + "; ".join(parts))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=20_000, help="simulated campaigns per cell (default 20000)")
    parser.add_argument("--specs", action="store_true", help="also print every shipped spec's figures")
    args = parser.parse_args(argv)
    t0 = time.perf_counter()
    print(f"# device time per verdict, {args.n} simulated campaigns per cell, 2 % request noise")
    side_by_side("950pr-x4.toml", args.n)
    side_by_side("910b1-x8.toml", args.n)
    if args.specs:
        print("\n# the figures each shipped spec's comments should state (sequential design)")
        for name in ("sim.toml", "sim-candidates.toml", "sim-research.toml", "910b1-x8.toml", "950pr-x4.toml"):
            spec_figures(name, args.n)
    print(f"\n({time.perf_counter() - t0:.0f} s)", file=sys.stderr)
    return 0


if __name__ == "__main__":
    np.seterr(all="ignore")
    raise SystemExit(main())
