"""Host as a blocking factor: per-host ratios, the host × arm interaction check, the pooled interval, odd baselines.

A campaign over several hosts (:mod:`h3bench.course.shards`) measures every
AB/BA pair on one host, so a host's level (one node 5 % slower than the
others) cancels in each pair's ratio: pairs are nested in hosts, and host is
a block. What does not cancel is an effect that differs by host (a host ×
arm interaction). So the pooled judgement is

1. **the pooled ratio**: the geometric mean of every pair's ratio, with the
   campaign's t bounds over all pairs (``k - 1`` degrees of freedom; in the
   sequential design the pooled look, :func:`h3bench.stats.sequential.decide`
   on every shard's pairs). With no interaction, pairs from any host are
   alike, and this is the one-host interval with the same number of pairs:
   splitting the pairs over hosts costs no power;
2. **the interaction check**: a one-way F test of the pairs' log ratios by
   host (``H - 1`` and ``k - H`` degrees of freedom) at
   :data:`INTERACTION_LEVEL`. When the hosts disagree beyond chance, the
   pooled interval is replaced by the **hosts' interval**: the mean of the
   per-host mean log ratios with t bounds on their spread (``H - 1``
   degrees of freedom), at the same levels. It is wider, and with two hosts
   it is INCONCLUSIVE but for huge effects; the verdict names the hosts and
   their ratios either way;
3. **each host's ratio** with its own bounds at the campaign's levels (what
   one host alone would have said), and
4. **a host whose baseline stands out**: each host's baseline block medians
   against the other hosts', a pooled two-sample t test at
   :data:`BASELINE_LEVEL` over the hosts (Bonferroni); a note, not an outcome. That is node noise,
   not a code effect: it cancels in the ratios, and the verdict says so.

Why the interaction check's level is 0.1 %: a disagreement found by chance
throws away the pooled interval's power (two hosts: the hosts' interval has
one degree of freedom). With a true ±1 % interaction a check at 1 % fired in
up to 4.8 % of campaigns and cost the fixed design's two hosts 4.8 points of
power at a true 10 %; at 0.1 % it fires in at most 0.6 % and two hosts of half
the pairs keep the one-host power to within 2 points, while an effect that is
present on some hosts and absent on another is still found
(tests_unit/course/test_shards.py measures both).

What "the effect" means: the average effect over the hosts that ran (their
pairs weighted equally). A ±1 % interaction moves each host's effect, not
that average, and the pooled interval's variance over all pairs includes the
between-host spread, so its false "faster" and "slower" rates stay at the
campaign's levels (simulated in the same test).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np
from scipy.special import fdtrc, stdtr

from h3bench.stats import intervals

__all__ = [
    "BASELINE_LEVEL",
    "INTERACTION_LEVEL",
    "BaselineOutlier",
    "HostEffect",
    "Interaction",
    "baseline_outliers",
    "host_effects",
    "hosts_bounds",
    "interaction",
    "interaction_p",
    "pooled_codes",
]

INTERACTION_LEVEL = 0.001
BASELINE_LEVEL = 0.05  # family-wise over the hosts: a note for the reader, it changes no outcome


@dataclass(frozen=True)
class HostEffect:
    """One host's pairs: its geometric-mean ratio and bounds at the campaign's levels (None under two pairs)."""

    host: str
    pairs: int
    ratio: float | None
    lower: float | None
    upper: float | None

    def describe(self) -> str:
        if self.ratio is None:
            return f"{self.host}: {self.pairs} pair(s), no interval"
        if self.lower is None or self.upper is None:
            return f"{self.host}: ratio {self.ratio:.4f} over {self.pairs} pair(s), no interval"
        return f"{self.host}: ratio {self.ratio:.4f} [{self.lower:.4f}, {self.upper:.4f}] over {self.pairs} pairs"


@dataclass(frozen=True)
class Interaction:
    """The host × arm interaction check: F, its degrees of freedom, p, and whether the hosts disagree."""

    f: float | None
    df_hosts: int
    df_pairs: int
    p_value: float | None  # None: too few pairs or hosts to test
    level: float
    disagree: bool

    def describe(self) -> str:
        if self.p_value is None:
            return (f"host × arm interaction: not testable ({self.df_hosts + 1} host(s), {self.df_pairs} residual "
                    "degree(s) of freedom)")
        verdict = "the hosts disagree beyond chance" if self.disagree else "no disagreement beyond chance"
        return (f"host × arm interaction: F = {self.f:.2f} on {self.df_hosts} and {self.df_pairs} df, p = "
                f"{self.p_value:.3g} {'<' if self.disagree else '≥'} {self.level:g}: {verdict}")


@dataclass(frozen=True)
class BaselineOutlier:
    """A host whose baseline level differs from the other hosts' beyond its blocks' spread."""

    host: str
    offset: float  # its baseline over the others', minus 1
    p_value: float

    def describe(self) -> str:
        return (f"host {self.host}: its baseline is {self.offset:+.1%} against the other hosts' (p = "
                f"{self.p_value:.2g}): node noise, which cancels within its pairs, not a code effect")


def _groups(labels: Sequence[int]) -> tuple[np.ndarray, np.ndarray]:
    found = np.asarray(labels)
    hosts = np.unique(found)
    return found, (found[None, :] == hosts[:, None]).astype(float)  # (H, k) one-hot


def interaction_p(log_ratios: np.ndarray, labels: Sequence[int]) -> tuple[np.ndarray, int, int, np.ndarray]:
    """One-way F test of ``(..., k)`` log ratios by host ``labels``: F, df between, df within, p (NaN: untestable)."""
    x = np.asarray(log_ratios, dtype=float)
    _, onehot = _groups(labels)
    n_h = onehot.sum(-1)
    h, k = onehot.shape[0], x.shape[-1]
    means = (x @ onehot.T) / n_h  # (..., H)
    grand = x.mean(-1, keepdims=True)
    ssb = ((means - grand) ** 2 * n_h).sum(-1)
    ssw = ((x - means @ onehot) ** 2).sum(-1)
    df1, df2 = h - 1, k - h
    if df1 < 1 or df2 < 1:
        nan = np.full(x.shape[:-1], np.nan)
        return nan, df1, df2, nan
    with np.errstate(divide="ignore", invalid="ignore"):
        f = (ssb / df1) / (ssw / df2)
    return f, df1, df2, fdtrc(df1, df2, f)


def hosts_bounds(log_ratios: np.ndarray, labels: Sequence[int], pass_level: float, fail_level: float
                 ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The hosts' interval: the mean of per-host mean log ratios, t bounds on their spread (``H - 1`` df).

    NaN bounds with one host (no spread to estimate).
    """
    x = np.asarray(log_ratios, dtype=float)
    _, onehot = _groups(labels)
    means = (x @ onehot.T) / onehot.sum(-1)
    if means.shape[-1] < 2:
        center = means[..., 0]
        nan = np.full(center.shape, np.nan)
        return np.exp(center), nan, nan
    ratio, lower, upper, _ = intervals.t_bounds(means, pass_level, fail_level)
    return ratio, lower, upper


def pooled_codes(codes: np.ndarray, log_ratios: np.ndarray, labels: Sequence[int], pass_level: float,
                 fail_level: float, margin: float, level: float = INTERACTION_LEVEL) -> tuple[np.ndarray, np.ndarray]:
    """The pooled outcome codes after the interaction check: where the hosts disagree, the hosts' interval decides.

    ``codes`` are the pooled decision's (over all pairs); returns the codes
    and where the hosts disagreed. Vectorised over leading axes, so the
    error-rate simulation and the pool call the same function.
    """
    _, _, _, p = interaction_p(log_ratios, labels)
    with np.errstate(invalid="ignore"):
        disagree = np.asarray(p < level)
    if not disagree.any():
        return np.asarray(codes), disagree
    _, lower, upper = hosts_bounds(log_ratios, labels, pass_level, fail_level)
    with np.errstate(invalid="ignore"):
        wider = intervals.outcome_codes(np.nan_to_num(lower, nan=0.0), np.nan_to_num(upper, nan=np.inf), margin)
    return np.where(disagree, wider, codes).astype(np.int8), disagree


def interaction(ratios: Mapping[str, Sequence[float]], level: float = INTERACTION_LEVEL) -> Interaction:
    """The interaction check on each host's paired ratios."""
    labels = [i for i, found in enumerate(ratios.values()) for _ in found]
    logs = np.log([r for found in ratios.values() for r in found])
    used = [found for found in ratios.values() if found]
    f, df1, df2, p = interaction_p(logs, labels) if labels else (np.nan, len(used) - 1, 0, np.nan)
    p_value = float(p) if np.isfinite(p) else None
    return Interaction(float(f) if p_value is not None else None, df1, df2, p_value, level,
                       p_value is not None and p_value < level)


def host_effects(ratios: Mapping[str, Sequence[float]], pass_level: float, fail_level: float
                 ) -> tuple[HostEffect, ...]:
    """Each host's ratio with its own bounds at the campaign's levels."""
    found = []
    for host, values in ratios.items():
        logs = np.log(np.asarray(values, dtype=float))
        if len(logs) >= 2:
            ratio, lower, upper, _ = intervals.t_bounds(logs, pass_level, fail_level)
            found.append(HostEffect(host, len(logs), float(ratio), float(lower), float(upper)))
        else:
            found.append(HostEffect(host, len(logs), intervals.geometric_mean_of_logs(logs) if len(logs) else None, None, None))
    return tuple(found)


def baseline_outliers(levels: Mapping[str, Sequence[float]], level: float = BASELINE_LEVEL
                      ) -> tuple[BaselineOutlier, ...]:
    """Hosts whose baseline block medians stand out against the other hosts' (three hosts or more).

    Each host's log medians against all the others', a pooled-variance t test,
    two-sided at ``level`` over the hosts (Bonferroni); with two hosts neither
    is "the other" and nothing is named.
    """
    hosts = {h: np.log(np.asarray(v, dtype=float)) for h, v in levels.items() if len(v) >= 1}
    if len(hosts) < 3:
        return ()
    found = []
    for host, own in hosts.items():
        rest = np.concatenate([v for h, v in hosts.items() if h != host])
        df = len(own) + len(rest) - 2
        if df < 1 or len(own) < 1:
            continue
        ss = ((own - own.mean()) ** 2).sum() + ((rest - rest.mean()) ** 2).sum()
        se = math.sqrt(ss / df * (1 / len(own) + 1 / len(rest))) if ss > 0 else 0.0
        diff = float(own.mean() - rest.mean())
        if se == 0.0:
            continue
        p = float(2 * stdtr(df, -abs(diff) / se))
        if p < level / len(hosts):
            found.append(BaselineOutlier(host, math.expm1(diff), p))
    return tuple(found)
