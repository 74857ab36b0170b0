"""Was the warmup enough? A check of each block's first measured request against the rest.

The rule, on log latencies of all blocks of one duration (both arms):
the request scatter ``s`` is pooled over every block from the *non-first*
requests only (``n_blocks · (k - 2)`` degrees of freedom, untouched by a
warmup that leaks into the first measured request), and each block gets

    t = (y₁ − mean(y_rest)) / (s · √(1 + 1/(k−1)))

A block is flagged when ``t > t_{0.999, df}`` and its first request is more
than 1 % slower than the median of the others.

Why pooled: with k = 3 a block's own spread has one degree of freedom, so a
rule built on it (or on a MAD of three values) is either blind or flags
constantly (a naive "first > 1.05 × median of the rest" flags 31 % of
default campaigns at 2 % noise). Within-block scatter does not depend on the
arm or on per-process offsets, so pooling is legitimate, and under iid
lognormal noise ``t`` is exactly Student t (its numerator is independent of
``s``): the false-flag rate is 0.1 % per block at any noise level. Heavy
tails among the later requests inflate ``s`` and make it more conservative.

It is a disclosure, not a verdict change: a block's median moves only to the
larger of its other two requests. The flag is kept in each block's record of
``verdict.json`` and printed in the summary (the lifecycle record is written
when the block ends, before the other blocks' scatter exists, and evidence is
never rewritten).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
from scipy.special import stdtrit

__all__ = ["WarmupCheck", "warmup_checks", "warmup_flags"]

PER_BLOCK_LEVEL = 0.001
MIN_EXCESS = 0.01


def warmup_flags(
    samples: np.ndarray, *, per_block_level: float = PER_BLOCK_LEVEL, min_excess: float = MIN_EXCESS
) -> tuple[np.ndarray, np.ndarray, np.ndarray, float]:
    """Flag blocks whose first measured request is slower than the rest of the block.

    Parameters
    ----------
    samples
        ``(..., n_blocks, k)`` measured E2E seconds of the blocks of one
        duration, ``k >= 3``.
    per_block_level
        The false-flag probability per block under iid lognormal noise.
    min_excess
        Relative excess of the first request over the median of the others
        below which nothing is flagged.

    Returns
    -------
    flags, excess, t, threshold
        ``(..., n_blocks)`` booleans, ``first / median(rest) - 1``, the
        pooled t of each block, and ``t_{1 - per_block_level, df}``.
    """
    y = np.log(np.asarray(samples, dtype=float))
    n_blocks, k = y.shape[-2:]
    if k < 3:
        raise ValueError("the warmup check needs at least 3 measured requests per block")
    first, rest = y[..., 0], y[..., 1:]
    rest_mean = rest.mean(axis=-1)
    df = n_blocks * (k - 2)
    s = np.sqrt(((rest - rest_mean[..., None]) ** 2).sum(axis=(-1, -2)) / df)[..., None]
    with np.errstate(divide="ignore", invalid="ignore"):
        t = (first - rest_mean) / (s * math.sqrt(1 + 1 / (k - 1)))
    t = np.where(s > 0, t, np.where(first > rest_mean, np.inf, 0.0))  # no scatter at all: any excess stands out
    excess = np.exp(first - np.median(rest, axis=-1)) - 1
    threshold = float(stdtrit(df, 1 - per_block_level))
    return (t > threshold) & (excess > min_excess), excess, t, threshold


@dataclass(frozen=True)
class WarmupCheck:
    """One block's first measured request against the rest of its block."""

    block_id: str
    flagged: bool
    excess: float  # first / median(rest) - 1
    t: float
    threshold: float
    df: int

    def describe(self) -> str:
        return (f"{self.block_id}: the first measured request is {self.excess:+.1%} against the median of the others "
                f"(pooled t = {self.t:.2f} > {self.threshold:.2f}, {self.df} df): a warmup that was not enough, or a "
                "disturbance at the block's start")


def warmup_checks(blocks: Sequence[tuple[str, Sequence[float]]]) -> tuple[WarmupCheck, ...]:
    """The check for every ``(block id, measured E2E in order)`` of one duration with the full k requests."""
    k = max((len(latencies) for _, latencies in blocks), default=0)
    complete = [(block_id, latencies) for block_id, latencies in blocks if len(latencies) == k]
    if k < 3 or not complete:
        return ()
    flags, excess, t, threshold = warmup_flags(np.array([latencies for _, latencies in complete]))
    df = len(complete) * (k - 2)
    return tuple(WarmupCheck(block_id, bool(f), float(e), float(v), threshold, df)
                 for (block_id, _), f, e, v in zip(complete, flags, excess, t, strict=True))
