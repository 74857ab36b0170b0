"""The search's rules: when it stops, what it names, and how the live search keeps its state.

The search stops when one group of commits (one commit, unless a skipped
commit ties it to its neighbour: :func:`h3bench.bisect.posterior.groups`)
holds at least ``posterior`` of the mass (0.95 by default), when the device
budget is spent, or when no probe can add :data:`~h3bench.bisect.choice.MIN_GAIN_BITS`
(everything left to learn lies inside groups no probe can split). It then
reports the top three commits with their mass. A named group is not yet a
claim: a formal campaign, the group's parent against its last commit,
confirms it (:mod:`h3bench.bisect.runner`), and only that verdict enters the
ledger. A confirm that does not confirm sends the search back to its probes
until a group holds 0.99 (:func:`threshold_after`), then one more confirm
(:data:`CONFIRMS`): a confirm that missed a true step, or a named commit that
was wrong, gets a second look that costs only those searches.

:class:`SearchState` is the live search's state, rebuilt from the
bisection log on ``--resume``; the simulated searches keep the same arrays,
one row per search, and call the same functions (:mod:`h3bench.bisect.simulate`).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np

from h3bench.bisect import posterior
from h3bench.bisect.choice import ProbeCosts, choose, expected_pairs
from h3bench.bisect.probe import ProbeTest
from h3bench.errors import UsageError
from h3bench.stats.sequential import Boundaries, look_bounds

__all__ = ["BUDGET", "CONFIDENT", "CONFIRMS", "FADED", "MAX_SEGMENTS", "RESOLVED", "SETTLED_SE", "SearchRule",
           "SearchState", "differs", "eligible", "futile_at", "level_at", "named_group", "segment_probes", "settled",
           "threshold_after", "top_up"]

SETTLED_SE = 3.0  # standard errors by which a top-up's ends must exclude the size asked to stop early (settled)
MAX_SEGMENTS = 6  # segments one bisection searches in turn: the whole range, then those its claims leave
CONFIRMS = 2  # confirm campaigns a search may run: after a failed one it probes on, at a higher posterior
# Why a search stopped.
CONFIDENT, BUDGET, RESOLVED, PROBES = "posterior", "budget", "nothing left to resolve", "probe limit"
FADED = "the segment's step fell below half the size asked"  # a segment's ends no longer differ: no change there


@dataclass(frozen=True)
class SearchRule:
    """When the search stops: a group's posterior mass, the device budget (device-seconds), a cap on probes."""

    posterior: float = 0.95
    budget_device_s: float = math.inf
    max_probes: int = 64

    def __post_init__(self) -> None:
        if not 0.5 < self.posterior < 1:
            raise UsageError(f"the posterior to stop at must lie in (0.5, 1), got {self.posterior}")
        if not self.budget_device_s > 0 or self.max_probes < 1:
            raise UsageError(f"a positive budget and at least one probe are needed, got {self.budget_device_s} s "
                             f"and {self.max_probes}")


def segment_probes(lo: np.ndarray | int, hi: np.ndarray | int) -> np.ndarray:
    """The probes a segment's search may run (not the whole range's): twice a bisection's, and two more."""
    return 2 * np.ceil(np.log2(np.maximum(np.asarray(hi) - np.asarray(lo), 2))).astype(int) + 2


def threshold_after(posterior: float, failed: int) -> float:
    """The posterior to stop at after ``failed`` confirms that did not confirm: 0.95, then 0.99, ..."""
    return 1 - (1 - posterior) / 5**failed


def eligible(skipped: np.ndarray, lo: np.ndarray | int = -1, hi: np.ndarray | int | None = None) -> np.ndarray:
    """``(..., N)``: commits a probe may run: not skipped, inside the segment ``(lo, hi)`` (by default the range),
    and not its end ``hi`` (the bad endpoint, which the verify measured, or a segment's end, measured before)."""
    s = np.asarray(skipped, dtype=bool)
    k = np.arange(s.shape[-1])
    end = s.shape[-1] - 1 if hi is None else np.asarray(hi)[..., None]
    return ~s & (k < end) & (k > np.asarray(lo)[..., None])


def level_at(evidence: posterior.Evidence, commit: np.ndarray | int) -> tuple[np.ndarray, np.ndarray]:
    """``(...)``: the mean log ratio of the pairs at ``commit`` against the good endpoint, and their count
    (``commit = -1``: the good endpoint itself, level 0 known: an infinite count)."""
    c = np.asarray(commit)
    at = np.maximum(c, 0)[..., None]
    count = np.take_along_axis(evidence.count, at, -1)[..., 0]
    total = np.take_along_axis(evidence.total, at, -1)[..., 0]
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(c < 0, 0.0, total / count), np.where(c < 0, np.inf, count)


def futile_at(log_ratios: np.ndarray, b: Boundaries, size: float) -> tuple[np.ndarray, np.ndarray]:
    """``(...)``: the pairs of the verify's first look (boundaries ``b``) whose upper bound lies below the size
    asked (a log ratio), 0 where none does, and that bound: the bad engine is not that much slower than the good
    one, so no later look can show a change of the size asked (the verify's futility stop)."""
    upper = look_bounds(log_ratios, b)[1]
    with np.errstate(invalid="ignore"):
        below = upper < math.exp(size)  # NaN (a look not reached) is not below
    first = np.argmax(below, -1)
    found = below.any(-1)
    return (np.where(found, np.asarray(b.looks)[first], 0),
            np.where(found, np.take_along_axis(upper, first[..., None], -1)[..., 0], np.nan))


def top_up(evidence: posterior.Evidence, a: np.ndarray | int, b: np.ndarray | int) -> np.ndarray:
    """``(...)``: the end of the segment ``(a, b]`` with fewer pairs (never the good endpoint, ``a = -1``): where
    more pairs tell best whether its ends differ."""
    _, n_a = level_at(evidence, a)
    _, n_b = level_at(evidence, b)
    return np.where((np.asarray(a) >= 0) & (n_a < n_b), a, b)


def differs(evidence: posterior.Evidence, a: np.ndarray | int, b: np.ndarray | int, size: np.ndarray | float
            ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Whether the segment ``(a, b]`` may hold a change of ``size`` (a log ratio) or more, from its measured ends.

    ``(...)`` each: searched (the ends differ by at least half the size and by two standard errors, the spread
    pooled within every commit's pairs), the difference of the ends' levels, and the largest change two standard
    errors leave open (NaN where an end has no pair or the segment is empty).
    """
    level_a, n_a = level_at(evidence, a)
    level_b, n_b = level_at(evidence, b)
    with np.errstate(invalid="ignore", divide="ignore"):
        within = evidence.squares.sum(-1) - np.where(evidence.count > 0, evidence.total ** 2 / evidence.count,
                                                     0.0).sum(-1)
        dof = evidence.count.sum(-1) - (evidence.count > 0).sum(-1)
        se = np.sqrt(within / np.maximum(dof, 1) * (1 / n_a + 1 / n_b))
        diff = level_b - level_a
        ok = (np.asarray(b) > np.asarray(a)) & (n_a > 0) & (n_b > 0)
        searched = ok & (np.abs(diff) >= size / 2) & (np.abs(diff) >= 2 * se)
        return searched, np.where(ok, diff, np.nan), np.where(ok, np.abs(diff) + 2 * se, np.nan)


def named_group(log_post: np.ndarray, skipped: np.ndarray, threshold: float
                ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``(...)`` first and last commit index of the most probable group and its mass; first = -1 below ``threshold``."""
    probs = posterior.probabilities(log_post)
    labels = posterior.groups(skipped)
    mass = posterior.group_mass(probs, labels)
    best = np.argmax(mass, axis=-1)
    top_mass = np.take_along_axis(mass, best[..., None], -1)[..., 0]
    label = np.take_along_axis(labels, best[..., None], -1)
    member = labels == label
    n = labels.shape[-1]
    first = np.argmax(member, axis=-1)
    last = n - 1 - np.argmax(member[..., ::-1], axis=-1)
    reached = top_mass >= threshold
    return np.where(reached, first, -1), np.where(reached, last, -1), top_mass


@dataclass
class SearchState:
    """One live search: every pair per commit, the commits skipped (with why), images on this host, time spent."""

    prior: np.ndarray
    evidence: posterior.Evidence
    skipped: dict[int, str] = field(default_factory=dict)
    pulled: set[int] = field(default_factory=set)
    spent_device_s: float = 0.0
    probes: int = 0
    lo: int = -1  # the segment searched: culprits lo+1 … hi (the whole range by default)
    hi: int | None = None
    segment_probed: int = 0  # probes the segment's search ran so far

    @classmethod
    def start(cls, n: int, weights: list[float] | None = None) -> SearchState:
        return cls(posterior.log_prior(n, weights), posterior.Evidence.empty((n,)))

    @property
    def n(self) -> int:
        return int(self.prior.shape[-1])

    @property
    def skipped_mask(self) -> np.ndarray:
        return np.isin(np.arange(self.n), list(self.skipped))

    @property
    def end(self) -> int:
        return self.n - 1 if self.hi is None else self.hi

    @property
    def segment_evidence(self) -> posterior.Evidence:
        """The pairs the segment's search weighs: those of its base, its commits and its end."""
        return self.evidence.within(self.lo, self.end)

    @property
    def segment_prior(self) -> np.ndarray:
        return posterior.segment_prior(self.prior, self.lo, self.end)

    @property
    def log_post(self) -> np.ndarray:
        return self.segment_evidence.log_posterior(self.segment_prior)

    @property
    def probs(self) -> np.ndarray:
        return posterior.probabilities(self.log_post)

    def take(self, commit: int, log_ratios: list[float], device_s: float) -> None:
        """A probe's (or the verify's) pair log ratios at ``commit``, and the device time it held."""
        self.evidence = self.evidence.add(commit, np.asarray(log_ratios, dtype=float))
        self.spent_device_s += device_s
        self.pulled.add(commit)
        self.probes += 1

    def skip(self, commit: int, reason: str, device_s: float) -> None:
        """A commit that could not be measured: no pair, the device time it held, and why."""
        self.skipped[commit] = reason
        self.spent_device_s += device_s
        self.pulled.add(commit)
        self.probes += 1

    def stop_reason(self, rule: SearchRule, next_probe: int, floor: float = 0.0) -> str | None:
        """Why the search stops now (None: it goes on to ``next_probe``, -1 when no probe is worth running).

        ``floor``: a segment's search (not the whole range's) stops once its step, from every pair it weighs,
        is smaller than this (half the size asked): the change its ends seemed to show is not there.
        """
        first, _, _ = named_group(self.log_post, self.skipped_mask, rule.posterior)
        if first >= 0:
            return CONFIDENT
        if self.lo >= 0 and abs(float(self.segment_evidence.step(self.log_post)[0])) < floor:
            return FADED
        if self.lo >= 0 and self.segment_probed >= int(segment_probes(self.lo, self.end)):
            return PROBES
        if self.spent_device_s >= rule.budget_device_s:
            return BUDGET
        if self.probes >= rule.max_probes:
            return PROBES
        if next_probe < 0:
            return RESOLVED
        return None

    def next_probes(self, test: ProbeTest, costs: ProbeCosts, hosts: int = 1) -> list[int]:
        """The commits to probe now, one per host, by expected information per device-second."""
        step, spread = self.segment_evidence.step(self.log_post)
        cost = costs.probe_s(expected_pairs(test, step, spread))
        chosen = choose(self.probs, eligible(self.skipped_mask, self.lo, self.end), cost, test.level, hosts)
        return [int(j) for j in chosen if j >= 0]

    def named(self, threshold: float) -> tuple[int, int, float]:
        """First and last commit index of the most probable group, and its mass (first -1 below ``threshold``)."""
        first, last, mass = named_group(self.log_post, self.skipped_mask, threshold)
        return int(first), int(last), float(mass)

    def top(self, count: int = 3) -> list[tuple[int, float]]:
        return posterior.top(self.probs, count)


def settled(evidence: posterior.Evidence, a: np.ndarray | int, b: np.ndarray | int, size: np.ndarray | float
            ) -> np.ndarray:
    """``(...)``: whether the segment ``(a, b]``'s measured ends exclude a change of ``size`` there by
    :data:`SETTLED_SE` standard errors: a top-up of its ends adds pairs one at a time and stops at it, else runs
    its ``max_pairs``. It looks after every pair, so it asks three standard errors where :func:`differs` asks two
    (measured: two named the second of two +5 % steps a point less often, 91.2 against 92.3 %; three, 92.4 %)."""
    _, diff, bound = differs(evidence, a, b, size)
    with np.errstate(invalid="ignore"):
        return np.asarray(np.abs(diff) + SETTLED_SE * (bound - np.abs(diff)) / 2 < size)  # NaN: not settled
