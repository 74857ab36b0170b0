"""Compute the shipped table of the lossless test's seeded powers: ``python -m h3bench.quality.power_table``.

:func:`h3bench.quality.lossless.lossless_power` is a deterministic
simulation (seeded), asked for the same designs by every campaign's plan,
schedule and verdict. This writes its figures ahead for the levels the
durations' splits give (:func:`~h3bench.quality.lossless_design.lossless_levels`
of 0.05 and 0.025 per candidate over one to three durations), four and five
metrics, one to eight candidate processes, and baseline processes from two up
to two past the first that reaches the required power. Anything else is still
simulated when asked for. ``tests_unit/quality/test_power_table.py``
recomputes entries through :func:`~h3bench.quality.lossless.simulated_power`.
"""

from __future__ import annotations

import json
import math
import sys
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

from h3bench.quality import lossless, lossless_design

PER_CANDIDATE = (lossless_design.PER_CANDIDATE_ALPHA, 0.025)
METRICS = (len(lossless.DEVIATIONS) - 1, len(lossless.DEVIATIONS))  # without LPIPS, with it
MAX_CANDIDATE = 8
PAST_FEASIBLE = 2


def levels() -> tuple[float, ...]:
    found = {lossless.ALPHA}
    for per_candidate in PER_CANDIDATE:
        for n in (1, 2, 3):
            found.update(lossless_design.lossless_levels(n, per_candidate))
    return tuple(sorted(found))


def _column(args: tuple[float, int, int]) -> dict[str, float]:
    """Powers at one level, metric count and candidate count, baseline processes upward until past feasible."""
    alpha, n_metrics, n_candidate = args
    out: dict[str, float] = {}
    past = None
    for n_baseline in range(2, 41):
        if alpha * math.comb(n_baseline + n_candidate, n_candidate) < 1:
            continue  # the floor decides: no simulation
        power = lossless.simulated_power(n_baseline, n_candidate, alpha, n_metrics, *lossless.REFERENCE)
        out[lossless.power_key(n_baseline, n_candidate, alpha, n_metrics)] = power
        if past is None and power >= lossless.REQUIRED_POWER:
            past = n_baseline + PAST_FEASIBLE
        if past is not None and n_baseline >= past:
            break
    return out


def compute(workers: int = 2) -> dict[str, float]:
    columns = [(a, m, c) for a in levels() for m in METRICS for c in range(1, MAX_CANDIDATE + 1)]
    table: dict[str, float] = {}
    with ProcessPoolExecutor(workers) as pool:
        for column in pool.map(_column, columns):
            table.update(column)
    return dict(sorted(table.items()))


def main(argv: list[str] | None = None) -> int:
    out = Path(argv[0]) if argv else Path(__file__).resolve().parents[1] / "data" / lossless.POWER_TABLE
    table = compute()
    document = {"about": "seeded powers of h3bench.quality.lossless.lossless_power against 3x, by "
                         "'baseline,candidate,alpha,metrics'; written by python -m h3bench.quality.power_table",
                "reference": dict(zip(("effect", "n_sims", "seed"), lossless.REFERENCE, strict=True)), "power": table}
    out.write_text(json.dumps(document, indent=0) + "\n", encoding="utf-8")
    print(f"{len(table)} powers written to {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
