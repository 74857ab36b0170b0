"""The posterior over which commit is the culprit, from every pair that any probe measured.

The range is the ordered first-parent commits after the good endpoint, the
last of them the bad endpoint: ``c_1 … c_N``, indices ``0 … N-1`` here. The
culprit ``k`` is the first commit that carries the step; every commit from
``k`` on carries it. Every probe of commit ``j`` (the verify is the probe of
the bad endpoint, ``j = N-1``) runs AB/BA pairs against the good endpoint,
and each pair gives a log ratio ``x`` (commit over good).

The model
---------
Pair log ratios are normal with one spread ``σ``: mean 0 at a commit
before the culprit, mean ``μ`` (the step) from the culprit on. Both ``μ``
and ``σ`` are unknown and shared by every probe: a flat prior on ``μ`` and
Jeffreys' ``1/σ²`` on ``σ²``. Integrating both out, the likelihood of all
the pairs under culprit ``k`` is, up to a constant common to every ``k``::

    log m_k = -½ log n₁(k) - (n - 1)/2 · log(Q - T₁(k)² / n₁(k))

where ``n`` and ``Q`` are the count and the sum of squares of every pair,
and ``n₁(k)``, ``T₁(k)`` the count and sum of the pairs at commits ``≥ k``
(:class:`Evidence` keeps the three sums per commit; the normal
location-scale model with the standard non-informative prior, Gelman et
al., Bayesian Data Analysis, 3rd ed., §3.2). The improper prior on ``μ``
cancels because every ``k`` has the same one parameter (the verify's pairs
are always "changed"). The posterior is ``prior_k · m_k``, normalised.

Why this and not a step plugged in from the verify: the verify stops as
soon as its bound clears, so among verifies that reproduce a small step its
estimate is high and its spread low (at a true 5 % step with 2 % process
noise, the step by +27 % and the spread by -30 %, simulated); a probe test
built on those would be overconfident. Here the step and the spread are
estimated from every pair at once, and a Bayesian posterior does not depend
on the stopping rule that gathered its data.

A probe's likelihood ratio is what its own pairs say between "changed"
(``k ≤ j``) and "no change" (``k > j``), with the step and the spread as all
other pairs give them: the posterior odds of ``k ≤ j`` with its pairs over
those without them (:func:`side_log_odds`). A soft ratio, never a hard
good/bad: a probe that was nearly undecided moves the posterior a little.

A commit whose server fails to start or serve (or whose output breaks in a
speed bisection) is **skipped**: it adds no pair, so nothing is counted
against it. Culprits ``k`` and ``k + 1`` differ only in what a probe of
``k`` would show, so a skipped ``k`` makes them one **group** that no probe
can split: the search then names the group, and says which commit in it
could not be measured (:func:`groups`).

Every function is vectorised over leading axes (one row per simulated
search); the live search calls them on one row.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from h3bench.errors import UsageError

__all__ = ["Evidence", "group_mass", "groups", "log_prior", "probabilities", "segment_prior", "side_log_odds", "top"]


def log_prior(n: int, weights: np.ndarray | list[float] | None = None) -> np.ndarray:
    """``(n,)`` log prior over the culprit: uniform, or proportional to positive ``weights``."""
    if n < 2:
        raise UsageError(f"a range to bisect needs at least two commits (the culprit and the bad one), got {n}")
    if weights is None:
        return np.full(n, -np.log(n))
    w = np.asarray(weights, dtype=float)
    if w.shape != (n,) or not (np.isfinite(w).all() and (w > 0).all()):
        raise UsageError(f"prior weights must be {n} positive numbers, got {list(w)}")
    return np.log(w / w.sum())


def segment_prior(prior: np.ndarray, lo: np.ndarray | int, hi: np.ndarray | int) -> np.ndarray:
    """``(..., N)``: ``prior`` over the culprits of the segment ``(lo, hi]`` only, normalised again."""
    k = np.arange(np.asarray(prior).shape[-1])
    inside = (k > np.asarray(lo)[..., None]) & (k <= np.asarray(hi)[..., None])
    out = np.where(inside, prior, -np.inf)
    return out - np.logaddexp.reduce(out, axis=-1, keepdims=True)


@dataclass(frozen=True)
class Evidence:
    """Per commit, ``(..., N)``: how many pairs were measured, the sum of their log ratios and of their squares."""

    count: np.ndarray
    total: np.ndarray
    squares: np.ndarray
    # ``(...)``: the first measured commit is a segment's base, at a level of its own (see :meth:`within`).
    free_base: np.ndarray | bool = False

    @classmethod
    def empty(cls, shape: tuple[int, ...]) -> Evidence:
        return cls(np.zeros(shape), np.zeros(shape), np.zeros(shape))

    def within(self, lo: np.ndarray | int, hi: np.ndarray | int) -> Evidence:
        """Only the pairs of one segment ``(lo, hi]`` of the range, its base ``lo`` included (``(...)`` each).

        ``lo = -1``: the good endpoint is the base, its level 0 known. Else the base is commit ``lo``, whose
        level every change before it set and its pairs measure: the culprit's step is then the level after
        it less the level before it, both unknown (:meth:`log_likelihood`).
        """
        lo_, hi_ = np.asarray(lo)[..., None], np.asarray(hi)[..., None]
        keep = (np.arange(self.n) >= lo_) & (np.arange(self.n) <= hi_)
        return Evidence(self.count * keep, self.total * keep, self.squares * keep, np.asarray(lo) >= 0)

    @property
    def n(self) -> int:
        return int(self.count.shape[-1])

    def add(self, commit: np.ndarray | int, log_ratios: np.ndarray, where: np.ndarray | bool = True) -> Evidence:
        """With ``(..., m)`` more pair log ratios at ``commit`` (``(...)``), only where ``where`` holds.

        NaN pairs (not run) count as none.
        """
        x = np.asarray(log_ratios, dtype=float)
        seen = np.isfinite(x)
        at = (np.arange(self.n) == np.asarray(commit)[..., None]) & np.asarray(where)[..., None]
        return Evidence(self.count + at * seen.sum(-1)[..., None],
                        self.total + at * np.where(seen, x, 0.0).sum(-1)[..., None],
                        self.squares + at * np.where(seen, x * x, 0.0).sum(-1)[..., None], self.free_base)

    def pairs_at(self, commit: int) -> int:
        return int(self.count[..., commit].max())

    def _sides(self) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        """``n₁(k)``, ``T₁(k)`` (``(..., N)``: suffix sums from each ``k``), and ``n``, ``Q`` (``(...)``)."""
        n1 = np.cumsum(self.count[..., ::-1], axis=-1)[..., ::-1]
        t1 = np.cumsum(self.total[..., ::-1], axis=-1)[..., ::-1]
        return n1, t1, self.count.sum(-1), self.squares.sum(-1)

    def log_likelihood(self) -> np.ndarray:
        """``(..., N)`` log marginal likelihood of every pair under each culprit (see the module docstring).

        With a free base the level before the culprit is a second unknown mean (flat prior): one more
        ``-½ log n₀(k)`` and one degree of freedom less, and no culprit without a pair before it.
        """
        n1, t1, n, q = self._sides()
        n0, t0 = n[..., None] - n1, self.total.sum(-1)[..., None] - t1
        free = np.asarray(self.free_base)[..., None]
        with np.errstate(divide="ignore", invalid="ignore"):
            before = np.where(free & (n0 > 0), t0 * t0 / n0, 0.0)
            residual = q[..., None] - np.where(n1 > 0, t1 * t1 / n1, 0.0) - before
            df = n[..., None] - np.where(free, 2, 1)
            out = (-0.5 * np.log(n1) - np.where(free, 0.5 * np.log(n0), 0.0)
                   - 0.5 * df * np.log(np.maximum(residual, 1e-300)))
        # Before any pair every culprit is as likely as its prior says.
        out = np.where(free & (n0 == 0), -np.inf, out)
        return np.where(n1 > 0, out, np.where(n[..., None] > 0, -np.inf, 0.0))

    def log_posterior(self, prior: np.ndarray) -> np.ndarray:
        """``(..., N)`` normalised log posterior over the culprit."""
        out = np.asarray(prior, dtype=float) + self.log_likelihood()
        return out - np.logaddexp.reduce(out, axis=-1, keepdims=True)

    def step(self, log_post: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """``(...)``: the step ``μ`` (log ratio) and the spread ``σ`` of one pair, averaged over the posterior."""
        n1, t1, n, q = self._sides()
        p = probabilities(log_post)
        n0, t0 = n[..., None] - n1, self.total.sum(-1)[..., None] - t1
        free = np.asarray(self.free_base)[..., None] & (n0 > 0)
        with np.errstate(divide="ignore", invalid="ignore"):
            base = np.where(free, t0 / n0, 0.0)
            mu = np.where(n1 > 0, t1 / n1, 0.0) - base
            residual = q[..., None] - np.where(n1 > 0, t1 * t1 / n1, 0.0) - np.where(free, t0 * t0 / n0, 0.0)
            var = residual / np.maximum(n[..., None] - np.where(free, 2, 1), 1)
        return (p * mu).sum(-1), np.sqrt(np.maximum((p * var).sum(-1), 0.0))


def side_log_odds(log_post: np.ndarray, commit: np.ndarray | int) -> np.ndarray:
    """``(...)``: the log posterior odds that the culprit is at ``commit`` or before."""
    lp = np.asarray(log_post, dtype=float)
    changed = np.arange(lp.shape[-1]) <= np.asarray(commit)[..., None]
    with np.errstate(invalid="ignore"):
        yes = np.logaddexp.reduce(np.where(changed, lp, -np.inf), axis=-1)
        no = np.logaddexp.reduce(np.where(changed, -np.inf, lp), axis=-1)
    return yes - no


def probabilities(log_post: np.ndarray) -> np.ndarray:
    """The posterior as probabilities (normalised again against rounding)."""
    lp = np.asarray(log_post, dtype=float)
    p = np.exp(lp - np.max(lp, axis=-1, keepdims=True))
    return p / p.sum(-1, keepdims=True)


def groups(skipped: np.ndarray) -> np.ndarray:
    """``(..., N)`` group label of each culprit position: a skipped commit joins the next one's group.

    ``skipped`` is ``(..., N)`` boolean. Labels count up from 0 along the range.
    """
    s = np.asarray(skipped, dtype=bool)
    starts = np.concatenate([np.ones((*s.shape[:-1], 1), bool), ~s[..., :-1]], axis=-1)
    return np.cumsum(starts, axis=-1) - 1


def group_mass(probs: np.ndarray, labels: np.ndarray) -> np.ndarray:
    """``(..., N)``: each position's group's total posterior mass."""
    p = np.asarray(probs, dtype=float)
    lab = np.asarray(labels)
    out = np.zeros(p.shape)
    for g in range(int(lab.max()) + 1):
        member = lab == g
        total = np.where(member, p, 0.0).sum(-1, keepdims=True)
        out = np.where(member, total, out)
    return out


def top(probs: np.ndarray, count: int = 3) -> list[tuple[int, float]]:
    """The ``count`` most probable culprit indices of one posterior with their mass, most probable first."""
    p = np.asarray(probs, dtype=float)
    if p.ndim != 1:
        raise UsageError("top() takes one posterior")
    order = np.argsort(-p, kind="stable")[:count]
    return [(int(i), float(p[i])) for i in order]
