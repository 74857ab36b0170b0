"""Campaigns over several hosts simulated through the pooled verdict's code: its error rates and power.

Each simulated campaign is one series at one duration: its AB/BA pairs drawn
as :func:`h3bench.course.designsim.draw_samples` draws them, then split over
hosts as a sharded campaign splits them (:func:`h3bench.course.shards.unit_shard`:
whole AB/BA units round-robin). Each host gets its level (``offsets``: every
block of the host, both arms) and its own share of the effect
(``interaction``: the host's candidate blocks). The pooled decision is the
one ``h3bench pool`` takes: the series' looks over every host's pairs
(:func:`h3bench.stats.sequential.judge_series`, what
:func:`h3bench.stats.sequential.decide` runs on the pooled blocks), then at the
deciding look the host × arm interaction check
(:func:`h3bench.stats.hosts.pooled_codes`).

"The truth" is the average effect over the hosts: ``ratio`` times the
geometric mean of the interaction factors, which the default patterns (±,
alternating over the hosts) keep at ``ratio`` for an even number of hosts.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from h3bench.course.designsim import LatencyModel, draw_samples
from h3bench.course.shards import unit_shard
from h3bench.stats import hosts as host_stats
from h3bench.stats import intervals
from h3bench.stats.blockstat import BlockBudget, block_log_statistics
from h3bench.stats.intervals import FAIL, PASS
from h3bench.stats.sequential import Boundaries, judge_series, series_order

__all__ = ["PooledRates", "alternating", "simulate_pooled"]


@dataclass(frozen=True)
class PooledRates:
    """Over ``n`` simulated campaigns: how often the pooled verdict was faster, slower, and the hosts disagreed."""

    n: int
    faster: float
    slower: float
    disagreed: float
    mean_pairs: float


def alternating(hosts: int, size: float) -> tuple[float, ...]:
    """``+size, -size, +size, ...`` over the hosts (a log-scale pattern whose mean is 0 for an even count)."""
    return tuple(size if h % 2 == 0 else -size for h in range(hosts))


def simulate_pooled(b: Boundaries, budget: BlockBudget, ratio: float, *, hosts: int = 1,
                    offsets: Sequence[float] = (), interaction: Sequence[float] = (), n: int = 20_000,
                    model: LatencyModel | None = None, seed: int = 0,
                    level: float = host_stats.INTERACTION_LEVEL) -> PooledRates:
    """Simulate ``n`` campaigns of one series over ``hosts`` shards and judge each as the pool does.

    ``offsets`` and ``interaction`` are per host, as fractions (0.05: 5 %
    slower; -0.01: the candidate's effect 1 % stronger on that host).
    """
    rng = np.random.default_rng(seed)
    model = model or LatencyModel()
    order = series_order(b.max_pairs)
    x = draw_samples(rng, n, order, budget, ratio, model)
    host = np.array([unit_shard(i // 2, hosts) - 1 for i in range(len(order))])
    shift = np.zeros(len(order))
    for h, value in enumerate(offsets):
        shift[host == h] += math.log1p(value)
    for h, value in enumerate(interaction):
        shift[(host == h) & np.array([c == "B" for c in order])] += math.log1p(value)
    x = x * np.exp(shift)[None, :, None]
    found = judge_series(x, order, budget, b)
    codes = found.code.copy()
    disagreed = np.zeros(n, bool)
    if hosts > 1:
        logs = intervals.paired_log_ratios(block_log_statistics(x, budget), order)
        for j, pairs in enumerate(b.looks):
            rows = found.look == j
            if not rows.any():
                continue
            labels = [unit_shard(p, hosts) for p in range(pairs)]
            codes[rows], disagreed[rows] = host_stats.pooled_codes(
                codes[rows], logs[rows, :pairs], labels, b.pass_levels[j], b.fail_levels[j], b.margin, level)
    return PooledRates(n, float((codes == PASS).mean()), float((codes == FAIL).mean()), float(disagreed.mean()),
                       float(found.pairs.mean()))
