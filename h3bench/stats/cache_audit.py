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
   compares the arms at one duration, each by its median over blocks:

       cache suspected  ⇔  median(q over B blocks) − median(q over A blocks) > log(CACHE_RATIO)

   with :data:`CACHE_RATIO` = √2, halfway (in logs) between no difference
   and the cache's 2. The baseline's audits cancel whatever the audit seed
   costs by itself.

The old rule failed a block whose audit was 25 % off the block's median:
one +50 % request per duration stopped 23.6 % of A/A candidates as FAIL, and
with 1 % of requests at +50 %, 8 % of A/A and of truly 10 % faster
candidates. A slow request is not a cache: one outlier moves a median over
an arm's blocks by at most the gap to the next block. Simulated through
:func:`cache_flags` (tests_unit/stats/test_cache_audit.py): A/A with one +50 %
request per duration, or 1 % of requests at +50 %, ends FAIL through the
audit in ≤ 1 % of campaigns; a server caching repeated seeds is caught in
≥ 99 %.

With two blocks per arm (the first look) a median is a mean: two of the
candidate's two audits at +50 % reach the threshold (about 1e-4 of looks at
1 % outliers). From three blocks on one outlier cannot.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from h3bench.errors import UsageError
from h3bench.stats.blockstat import BlockBudget, arm_mask

__all__ = ["CACHE_RATIO", "CacheAudit", "audit_log_ratios", "cache_audit", "cache_flags", "output_problem"]

CACHE_RATIO = math.sqrt(2.0)


def audit_log_ratios(samples: np.ndarray, budget: BlockBudget) -> np.ndarray:
    """``(..., blocks)``: log audit latency minus the median log of the block's measured requests."""
    if not budget.audit:
        raise UsageError("this block budget has no audit request")
    y = np.log(np.asarray(samples, dtype=float))
    if y.ndim < 2 or y.shape[-1] != budget.columns:
        raise UsageError(f"samples must be (..., blocks, {budget.columns}) for {budget.describe()}, got {y.shape}")
    return y[..., budget.measured] - np.median(y[..., : budget.measured], axis=-1)


def cache_flags(samples: np.ndarray, order: str, budget: BlockBudget, ratio: float = CACHE_RATIO
                ) -> tuple[np.ndarray, np.ndarray]:
    """``(...)`` cache suspected, and ``(...)`` the excess ``median_B(q) − median_A(q)`` (log), over ``order``'s blocks."""
    q = audit_log_ratios(samples, budget)
    is_b = arm_mask(order)
    if q.shape[-1] != len(order) or is_b.all() or not is_b.any():
        raise UsageError(f"the audit rule needs blocks of both arms in {order!r} and {q.shape[-1]} blocks given")
    excess = np.median(q[..., is_b], axis=-1) - np.median(q[..., ~is_b], axis=-1)
    return excess > math.log(ratio), excess


@dataclass(frozen=True)
class CacheAudit:
    """The latency half of the audit for one series at one duration."""

    suspected: bool
    excess: float  # median audit/measured ratio of the candidate over the baseline's
    blocks: tuple[int, int]  # baseline, candidate blocks used
    threshold: float

    def describe(self) -> str:
        verdict = "a cache is suspected" if self.suspected else "no sign of a cache"
        return (f"anti-shortcut audit: the candidate's audit requests take {self.excess:.3f}x the time of its "
                f"measured ones relative to the baseline's (median over {self.blocks[1]} candidate and "
                f"{self.blocks[0]} baseline blocks; a cache that halves repeated requests shows 2x, the threshold "
                f"is {self.threshold:.3f}x): {verdict}")


def cache_audit(blocks: Sequence[tuple[str, Sequence[float], float]], budget: BlockBudget,
                ratio: float = CACHE_RATIO) -> CacheAudit:
    """:func:`cache_flags` for live blocks: ``(role, measured seconds, audit seconds)`` in order."""
    order = "".join(role for role, _, _ in blocks)
    samples = np.array([[*measured, audit] for _, measured, audit in blocks], dtype=float)
    flag, excess = cache_flags(samples, order, budget, ratio)
    return CacheAudit(bool(flag), float(np.exp(excess)), (order.count("A"), order.count("B")), ratio)


def output_problem(measured_sha256: Sequence[str | None], audit_sha256: str | None) -> str | None:
    """The output half: the audit's output (another seed) equals a measured output; None when it does not."""
    if audit_sha256 is not None and audit_sha256 in {sha for sha in measured_sha256 if sha}:
        return "anti-shortcut audit: the output for another seed equals a measured output (cached outputs?)"
    return None
