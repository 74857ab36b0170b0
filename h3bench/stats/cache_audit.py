"""The anti-shortcut audit, robust: a cache shows in every block of an arm, a slow request in one.

Every measured request repeats one seed and one set of inputs, so a server
that served repeated requests from a cache would look fast and perfect. Each
block therefore sends one audit request at another seed (the same audit
seed in both arms). Two signs of a cache remain:

1. **Outputs.** The audit's output equals a measured output: impossible for a
   model that draws from the seed, conclusive in one block
   (:func:`output_problem`, the first half of the old
   :func:`h3bench.run.failures.audit_problem`).
2. **Latency.** A cache makes the *measured* requests fast against a fresh
   seed: the spec's threat model is measured requests at most half the time
   of a fresh seed. Per block, ``q = log audit − median(log measured)``; a
   cache puts ``q ≥ log 2`` in *every* block of the candidate arm. The rule
   compares the arms at one duration, the candidate by the *lower* median of
   its blocks' ``q`` and the baseline by the *upper* median of its own:

       cache suspected  ⇔  lower_median(q over B blocks) − upper_median(q over A blocks) > log(CACHE_RATIO)

   with :data:`CACHE_RATIO` = √2, halfway (in logs) between no difference
   and the cache's 2. The baseline's audits cancel whatever the audit seed
   costs by itself.

Why these order statistics. A slow request is not a cache, and it moves one
block's ``q`` one way only: a slow audit raises it, a slow measured request
lowers it. Only a raised candidate ``q`` or a lowered baseline ``q`` pushes
towards the threshold, and the candidate's lower median (the smaller of two
blocks, the middle of three, the second of four) and the baseline's upper
median move then at most to the next block's value, which is noise. So one
slow request of any size never suspects a cache at any look, the first
included, where each arm has two blocks and the rule compares the
candidate's smaller ``q`` with the baseline's larger. Nor does a burst of
consecutive slow requests of one size: the next block's requests it reaches
are its measured ones (lowering a candidate ``q``) and a block it covers
whole keeps ``q`` (tests_unit/stats/test_cache_audit.py checks any burst at any
look as an invariant). A false suspicion needs at least half of one arm's
blocks disturbed alike, at least two separate slow requests of the same
kind, and is rarer as blocks accrue. A cache still shows in every candidate
block: the smaller of its ``q`` stays near ``log 2``, far above ``log √2``
(request noise puts a few hundredths on ``q``), so it is caught at the
first look.

At two blocks per arm one disturbance can also *hide* a cache: a baseline
audit at +41 % (the larger of two baseline ``q``), or a candidate measured
request at +100 % (half its log, with two measured), and a look cannot tell
"a cache with one slow request" from "one slow audit without a cache" (the
same four ``q``). So PASS waits for a look where a cache is ruled out, with
the arms read the other way round, the candidate's upper median against the
baseline's lower one (:func:`cache_held`; for an odd number of blocks per
arm both readings are the medians): one slow request costs a look, and a
hidden cache is caught later, never PASS.

Two slow requests can imitate a cache: two audits at +50 % in the
candidate's two blocks, or in two of its three, put its lower median at
``log 1.5 > log √2``; with two slow requests anywhere in a duration that
ended 2.6 % of truly 10 % faster campaigns FAIL through the audit (the
issue's 4.7 % before the order statistics). So the audit FAILs a series only
from :data:`FAIL_FROM_BLOCKS` blocks per arm, where a suspicion needs three
candidate blocks alike; before, a suspicion holds PASS back
(:func:`audit_looks`). A cache costs the look of four pairs, the one the
fixed design decides at, and a dearer duration's last look is at four
pairs (a design that stops before four pairs ends such a series
INCONCLUSIVE, never PASS).

The rule it replaces compared the arms' medians over blocks, which at the
first look (two blocks per arm) is a mean: one candidate audit at +100 %
sat on the √2 threshold. Simulated through the live decision
(:func:`h3bench.stats.sequential.judge_series`, 950pr-x4's sequential design,
1 % process noise, a true 10 % speedup, 4000 campaigns), one audit at +100 %
(+200 %) among the first look's blocks ended FAIL through the audit in 25.0 %
(49.6 %) of campaigns, one request at +100 % (+200 %) anywhere in 8.2 %
(16.9 %), a burst of two to four in 16–34 %; with this rule in 0 % of each,
and a server caching repeated seeds is caught in ≥ 99 %
(tests_unit/stats/test_cache_audit.py). Before that, a per-block rule (an
audit 25 % off its block's median) failed 23.6 % of A/A candidates with one
+50 % request per duration.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from h3bench.errors import UsageError
from h3bench.stats.blockstat import BlockBudget, arm_mask, lower_median

__all__ = ["CACHE_RATIO", "FAIL_FROM_BLOCKS", "CacheAudit", "audit_log_ratios", "audit_looks", "cache_audit",
           "cache_flags", "cache_held", "output_problem"]

CACHE_RATIO = math.sqrt(2.0)
FAIL_FROM_BLOCKS = 4  # per arm: the fewest at which two slow audits cannot imitate a cache (module docstring)


def audit_log_ratios(samples: np.ndarray, budget: BlockBudget) -> np.ndarray:
    """``(..., blocks)``: log audit latency minus the median log of the block's measured requests."""
    if not budget.audit:
        raise UsageError("this block budget has no audit request")
    y = np.log(np.asarray(samples, dtype=float))
    if y.ndim < 2 or y.shape[-1] != budget.columns:
        raise UsageError(f"samples must be (..., blocks, {budget.columns}) for {budget.describe()}, got {y.shape}")
    return y[..., budget.measured] - np.median(y[..., : budget.measured], axis=-1)


def _arms(samples: np.ndarray, order: str, budget: BlockBudget) -> tuple[np.ndarray, np.ndarray]:
    q = audit_log_ratios(samples, budget)
    is_b = arm_mask(order)
    if q.shape[-1] != len(order) or is_b.all() or not is_b.any():
        raise UsageError(f"the audit rule needs blocks of both arms in {order!r} and {q.shape[-1]} blocks given")
    return q[..., ~is_b], q[..., is_b]


def cache_flags(samples: np.ndarray, order: str, budget: BlockBudget, ratio: float = CACHE_RATIO
                ) -> tuple[np.ndarray, np.ndarray]:
    """``(...)`` cache suspected, and ``(...)`` the excess ``lower_median_B(q) − upper_median_A(q)`` (log).

    Over ``order``'s blocks; a cache is suspected where the excess exceeds ``log(ratio)``.
    """
    q_a, q_b = _arms(samples, order, budget)
    # The candidate's lower median and the baseline's upper median: a slow audit raises one block's q, a slow
    # measured request lowers it, and neither moves these past the next block's (module docstring).
    excess = lower_median(q_b) + lower_median(-q_a)
    return excess > math.log(ratio), excess


def cache_held(samples: np.ndarray, order: str, budget: BlockBudget, ratio: float = CACHE_RATIO) -> np.ndarray:
    """``(...)`` a cache cannot be ruled out yet: ``upper_median_B(q) − lower_median_A(q)`` exceeds the threshold.

    It differs from :func:`cache_flags` only for an even number of blocks
    per arm, and matters at two (module docstring): there PASS waits.
    """
    q_a, q_b = _arms(samples, order, budget)
    return np.asarray(lower_median(-q_b) + lower_median(q_a) < -math.log(ratio))


@dataclass(frozen=True)
class CacheAudit:
    """The latency half of the audit for one series at one duration."""

    suspected: bool
    excess: float  # audit/measured ratio, the candidate's lower median over the baseline's upper median
    blocks: tuple[int, int]  # baseline, candidate blocks used
    threshold: float
    held: bool = False  # not suspected, not ruled out either (cache_held): PASS waits

    def describe(self) -> str:
        verdict = ("a cache is suspected" if self.suspected else
                   "a cache is not ruled out yet, so PASS waits" if self.held else "no sign of a cache")
        return (f"anti-shortcut audit: the candidate's audit requests take {self.excess:.3f}x the time of its "
                f"measured ones relative to the baseline's (the candidate's lower median over {self.blocks[1]} blocks "
                f"against the baseline's upper median over {self.blocks[0]}; a cache that halves repeated requests "
                f"shows 2x, the threshold is {self.threshold:.3f}x): {verdict}")


def audit_looks(samples: np.ndarray, order: str, budget: BlockBudget, ratio: float = CACHE_RATIO
                ) -> tuple[np.ndarray, np.ndarray]:
    """``(...)`` FAIL through the audit, and ``(...)`` PASS waits, for the blocks of one look.

    FAIL needs a suspicion (:func:`cache_flags`) over at least
    :data:`FAIL_FROM_BLOCKS` blocks per arm; before that a suspicion, like a
    cache not ruled out (:func:`cache_held`), only holds PASS back.
    """
    suspected = cache_flags(samples, order, budget, ratio)[0]
    is_b = arm_mask(order)
    enough = min(int(is_b.sum()), int((~is_b).sum())) >= FAIL_FROM_BLOCKS
    return suspected & enough, suspected | cache_held(samples, order, budget, ratio)


def cache_audit(blocks: Sequence[tuple[str, Sequence[float], float]], budget: BlockBudget,
                ratio: float = CACHE_RATIO) -> CacheAudit:
    """:func:`cache_flags` for live blocks: ``(role, measured seconds, audit seconds)`` in order."""
    order = "".join(role for role, _, _ in blocks)
    samples = np.array([[*measured, audit] for _, measured, audit in blocks], dtype=float)
    flag, excess = cache_flags(samples, order, budget, ratio)
    held = bool(cache_held(samples, order, budget, ratio)) and not bool(flag)
    return CacheAudit(bool(flag), float(np.exp(excess)), (order.count("A"), order.count("B")), ratio, held)


def output_problem(measured_sha256: Sequence[str | None], audit_sha256: str | None) -> str | None:
    """The output half: the audit's output (another seed) equals a measured output; None when it does not."""
    if audit_sha256 is not None and audit_sha256 in {sha for sha in measured_sha256 if sha}:
        return "anti-shortcut audit: the output for another seed equals a measured output (cached outputs?)"
    return None
