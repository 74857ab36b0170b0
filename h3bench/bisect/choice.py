"""Which commit to probe next: the expected information about the culprit per device-hour.

A probe of commit ``j`` answers "is the culprit at ``j`` or before?" The
chance that it is, under the posterior, is ``q_j = Σ_{k ≤ j} p_k``; a probe
whose answer is wrong with probability ``e`` (its test's level) tells, in
expectation, the mutual information between the culprit and its answer::

    I_j = h(q_j (1 - e) + (1 - q_j) e) - h(e)      (bits; h the binary entropy)

highest at the posterior's median, as plain bisection picks, and zero where
the answer is already known. Its price is what the probe will hold the host
for: ``E[pairs] · (one good block + one block of j)`` plus, the first time
``j`` runs, pulling or building its image, each from the spec's hints
(:class:`ProbeCosts`). The next probe maximises ``I_j / cost_j``; a commit
already skipped, and the bad endpoint (the verify measured it), are never
chosen. With several hosts the round's probes are chosen greedily, each
maximising the information it adds to those already chosen (the joint
mutual information of independent noisy answers, computed exactly) per its
cost; they then run at once, one per host.

The expected pairs are Wald's approximation of the test's average sample
number (``a / KL``, ``KL = μ²/2σ²`` per pair at the step and spread so far,
within ``min_pairs`` and ``max_pairs``): it only weighs pair time against image time in this choice;
no error rate rests on it.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from h3bench.bisect.probe import ProbeTest

__all__ = ["MIN_GAIN_BITS", "ProbeCosts", "binary_entropy", "choose", "expected_pairs", "information"]

MIN_GAIN_BITS = 1e-3  # below this no probe is worth running: the search cannot resolve further


def binary_entropy(p: np.ndarray | float) -> np.ndarray:
    """``h(p)`` in bits (0 at 0 and 1)."""
    q = np.clip(np.asarray(p, dtype=float), 0.0, 1.0)
    with np.errstate(divide="ignore", invalid="ignore"):
        out = -(q * np.log2(q) + (1 - q) * np.log2(1 - q))
    return np.nan_to_num(out)


def information(probs: np.ndarray, error: float) -> np.ndarray:
    """``(..., N)``: the expected information (bits) of a probe at each commit about the culprit."""
    q = np.cumsum(np.asarray(probs, dtype=float), axis=-1)
    return np.maximum(binary_entropy(q * (1 - error) + (1 - q) * error) - binary_entropy(error), 0.0)


def expected_pairs(test: ProbeTest, step: np.ndarray | float, spread: np.ndarray | float) -> np.ndarray:
    """Wald's average sample number of the probe test at the step and spread so far, within its pair limits."""
    d = np.asarray(step, dtype=float)
    s = np.maximum(np.asarray(spread, dtype=float), 1e-12)
    with np.errstate(divide="ignore"):
        kl = d * d / (2 * s * s)
        return np.clip(test.threshold / kl, test.min_pairs, test.max_pairs)


@dataclass(frozen=True)
class ProbeCosts:
    """Seconds a probe costs, from the spec's hints: a pair (both blocks), and an image the first time per host."""

    good_block_s: float
    commit_block_s: np.ndarray | float  # ``(..., N)``: a block of each commit (its requests at its own speed)
    image_s: np.ndarray | float  # ``(..., N)``: pulling or building each commit's image, 0 once it is on the host

    def probe_s(self, pairs: np.ndarray) -> np.ndarray:
        """``(..., N)`` seconds of a probe of ``pairs`` (``(...)``) pairs at each commit."""
        pair = self.good_block_s + np.asarray(self.commit_block_s, dtype=float)
        return np.asarray(pairs, dtype=float)[..., None] * pair + np.asarray(self.image_s, dtype=float)


def _entropy_bits(p: np.ndarray, axis: int) -> np.ndarray:
    with np.errstate(divide="ignore", invalid="ignore"):
        return -np.nansum(np.where(p > 0, p * np.log2(p), 0.0), axis=axis)


def choose(probs: np.ndarray, eligible: np.ndarray, cost_s: np.ndarray, error: float, hosts: int = 1
           ) -> np.ndarray:
    """``(..., hosts)`` commit indices to probe now, best first; ``-1`` where none adds :data:`MIN_GAIN_BITS`.

    Parameters
    ----------
    probs
        ``(..., N)`` the posterior over the culprit.
    eligible
        ``(..., N)`` commits that may be probed (not skipped, not the bad endpoint).
    cost_s
        ``(..., N)`` the expected seconds of a probe at each commit.
    error
        A probe's chance of a wrong answer (its test's level).
    """
    p = np.asarray(probs, dtype=float)
    ok = np.asarray(eligible, dtype=bool)
    cost = np.maximum(np.asarray(cost_s, dtype=float), 1e-9)
    shape, n = p.shape[:-1], p.shape[-1]
    # Joint outcome probabilities of the probes chosen so far, with the culprit: (..., outcomes, N).
    joint = p[..., None, :]
    chosen = np.full((*shape, hosts), -1, np.int64)
    taken = np.zeros(p.shape, bool)
    base = np.zeros(shape)  # H(D) of the chosen set
    for h in range(hosts):
        cum = np.cumsum(joint, axis=-1)  # (..., outcomes, N): mass of k ≤ j within each outcome
        total = cum[..., -1:]
        yes = error * total + (1 - 2 * error) * cum  # (..., outcomes, N): P(outcome, probe j says changed)
        no = total - yes
        entropy = _entropy_bits(yes, -2) + _entropy_bits(no, -2)  # (..., N): H(D, D_j)
        # Rounded, so that equal gains tie exactly and the older commit wins (not the last bit of a cumsum).
        gain = np.round(np.maximum(entropy - base[..., None] - binary_entropy(error), 0.0), 12)
        score = np.where(ok & ~taken & (gain >= MIN_GAIN_BITS), gain / cost, -np.inf)
        best = np.argmax(score, axis=-1)
        found = np.take_along_axis(score, best[..., None], -1)[..., 0] > -np.inf
        chosen[..., h] = np.where(found, best, -1)
        if not found.any():
            break
        taken |= found[..., None] & (np.arange(n) == best[..., None])
        base = np.where(found, np.take_along_axis(entropy, best[..., None], -1)[..., 0], base)
        says = (np.arange(n) <= best[..., None])[..., None, :]  # (..., 1, N): probe says changed when k ≤ j
        split = np.concatenate([joint * np.where(says, 1 - error, error), joint * np.where(says, error, 1 - error)],
                               axis=-2)
        joint = np.where(found[..., None, None], split, np.concatenate([joint, np.zeros_like(joint)], axis=-2))
    return chosen
