"""Short hiccups against a block's budget (issue 45): power, false verdicts and device time, through the live decision.

Each row is one design at ``fixtures/runspecs/950pr-x4.toml``'s costs: the
spec's sequential design (1 warmup + 2 measured + 1 counted audit per block),
the fixed design, and the sequential design with another block budget
(``--budgets``, ``warmups,measured,audit_counts``). Campaigns are simulated
through :func:`h3bench.course.designsim.simulate_campaigns` (the live run's
:func:`h3bench.stats.sequential.judge_series` and course), 2 % request noise
and 1 % process noise (2 % for the leak), and priced by
:func:`h3bench.course.devicetime.device_time`. The hiccups are put on the
model's draws, among the blocks of each duration's first look (the ones that
surely run), at +50 %:

- ``adjacent``: the last measured request and the audit of one block;
- ``two`` / ``three``: that many timed requests anywhere;
- ``leak``: every baseline block's first two timed requests (a warmup leak
  that reaches both measured requests of today's budget), +5/10/20 %, at
  the margin (0.5 at 5 s, 0.98 at 15 s).

Run: ``.venv/bin/python benchmarks/bench_hiccups.py [--n 4000] [--budgets 1,3,0 1,4,1]`` (seconds per
budget at 4000 campaigns on two cores).
"""

from __future__ import annotations

import argparse
import dataclasses
import math
import sys
import time
from pathlib import Path

import numpy as np

from h3bench.course.design import Design
from h3bench.course.devicetime import costs_from_spec, device_time
from h3bench.plan import designsim
from h3bench.runspec import load_runspec
from h3bench.stats.blockstat import BlockBudget
from h3bench.stats.intervals import FAIL, PASS
from h3bench.stats.sequential import AUDIT

SPEC = Path(__file__).resolve().parents[1] / "fixtures" / "runspecs" / "950pr-x4.toml"
SLOW = math.log(1.5)
LEAKS = (0.05, 0.10, 0.20)


def hiccup_draw(design: Design, rng: np.random.Generator, n: int, ratios: list[list[float]], hiccup: str | None,
                leak: float = 0.0, process_cv: float = 0.01) -> designsim.Draw:
    budget = design.budget
    model = designsim.LatencyModel(process_cv=process_cv)

    def draw(c: int, d: int, order: str, first_look: int) -> np.ndarray:
        log = np.log(designsim.draw_samples(rng, n, order, budget, ratios[c][d], model, first_look))
        blocks, cols, rows = 2 * first_look, budget.columns, np.arange(n)
        if hiccup == "adjacent":
            where = rng.integers(0, blocks, n)
            log[rows, where, budget.measured - 1] += SLOW
            log[rows, where, budget.measured] += SLOW
        elif hiccup in ("two", "three"):
            for _ in range(2 if hiccup == "two" else 3):
                where = rng.integers(0, blocks * cols, n)
                log[rows, where // cols, where % cols] += SLOW
        if leak:
            log[:, np.array([a == "A" for a in order]), :2] += math.log1p(leak)
        return np.exp(log)
    return draw


def row(name: str, design: Design, n: int) -> str:
    costs = costs_from_spec(load_runspec(SPEC))

    def run(ratios: list[list[float]], hiccup: str | None = None, **kw: float) -> designsim.CampaignRun:
        draw = hiccup_draw(design, np.random.default_rng(45), n, ratios, hiccup, **kw)
        return designsim.simulate_campaigns(design, ratios, n=n, seed=1, draw=draw)

    ten, null = (device_time(r, costs).summary() for r in (run([[0.9, 0.9]]), run([[1.0, 1.0]])))
    cells = [f"{(run([[0.9, 0.9]]).outcome == PASS).mean():.1%}", f"{ten.wall_h[0]:.1f} / {ten.device_h[0]:.0f}",
             f"{null.wall_h[0]:.1f} / {null.device_h[0]:.0f}",
             f"{(run([[0.9, 0.9]], 'adjacent').outcome == PASS).mean():.1%}"]
    two = run([[0.9, 0.9]], "two")
    cells += [f"{(two.outcome == PASS).mean():.1%}", f"{(two.reason == AUDIT).any((1, 2)).mean():.2%}",
              f"{(run([[1.0, 1.0]], 'three').outcome == FAIL).mean():.2%}"]
    cells += [f"{(run([[0.5, 0.98]], leak=lk, process_cv=0.02).outcome == PASS).mean():.1%}" for lk in LEAKS]
    return f"| {name} | {' | '.join(cells)} |"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=4000, help="simulated campaigns per cell")
    parser.add_argument("--budgets", nargs="*", default=["1,3,0", "1,4,1"],
                        help="other block budgets for the sequential design: warmups,measured,audit_counts")
    args = parser.parse_args(argv)
    t0 = time.perf_counter()
    spec = load_runspec(SPEC)
    designs = {"sequential, " + Design.of(spec).budget.describe(): Design.of(spec),
               "fixed, " + Design.fixed_of(spec).budget.describe(): Design.fixed_of(spec)}
    for text in args.budgets:
        warmups, measured, counts = (int(v) for v in text.split(","))
        budget = BlockBudget(warmups, measured, True, bool(counts))
        designs[f"sequential, {budget.describe()}"] = dataclasses.replace(Design.of(spec), budget=budget)
    print(f"## Short hiccups at 950pr-x4's costs ({args.n} campaigns per cell; slow requests +50 %)\n")
    print("| design | PASS, true 10 % | mean wall h / device-h, true 10 % | mean wall h / device-h, no effect "
          "| PASS, adjacent pair | PASS, two anywhere "
          "| audit FAIL, two anywhere | A/A FAIL, three anywhere | "
          + " | ".join(f"false faster, +{lk:.0%} leak in 2 baseline requests" for lk in LEAKS) + " |")
    print("|---" * (8 + len(LEAKS)) + "|")
    for name, design in designs.items():
        print(row(name, design, args.n), flush=True)
    print(f"\n({time.perf_counter() - t0:.0f} s)", file=sys.stderr)
    return 0


if __name__ == "__main__":
    np.seterr(all="ignore")
    raise SystemExit(main())
