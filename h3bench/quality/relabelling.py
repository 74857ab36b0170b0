"""The exact process-relabelling rank test of lossless mode, vectorised over leading batch axes.

Given the deviations of every pair of server processes (per metric and
compared request), the test asks whether the candidate's processes look like
baseline processes: mid-ranks of the pair values, one standardised statistic
per labeling of the processes, and max-T over the metrics. What it is for,
and its references, are in :mod:`h3bench.quality.lossless`, which decides
with it.
"""

from __future__ import annotations

import functools
import itertools
import math

import numpy as np

__all__ = ["candidate_labelings", "matrix_to_pairs", "mid_ranks", "pair_indices", "permutation_test"]

_TOL = 1e-9  # ties between standardised statistics of equal labelings


def pair_indices(n_processes: int) -> tuple[np.ndarray, np.ndarray]:
    """Row and column of every process pair ``i < j``; processes ``0..B-1`` are the baseline's."""
    rows, cols = np.triu_indices(n_processes, k=1)
    return rows, cols


def matrix_to_pairs(matrix: np.ndarray) -> np.ndarray:
    """The upper triangle of ``(..., N, N)`` symmetric matrices as ``(..., N(N-1)/2)``."""
    rows, cols = pair_indices(matrix.shape[-1])
    return matrix[..., rows, cols]


@functools.lru_cache(maxsize=64)
def candidate_labelings(
    n_baseline: int, n_candidate: int, *, max_exact: int = 200_000, n_random: int = 19_999, seed: int = 0
) -> np.ndarray:
    """Boolean ``(L, N)``: which of the ``N = B + C`` processes each labeling calls "candidate".

    Row 0 is the observed labeling (the last ``C`` processes). When
    ``C(N, C) <= max_exact`` every labeling appears once (an exact test);
    otherwise row 0 and ``n_random`` uniform random labelings, for which
    ``#{T* >= T} / (n_random + 1)`` is still a valid p-value (Phipson & Smyth 2010).
    """
    if n_baseline < 2 or n_candidate < 1:
        raise ValueError("a relabelling test needs at least 2 baseline processes and 1 candidate process")
    n = n_baseline + n_candidate
    observed = np.zeros(n, dtype=bool)
    observed[n_baseline:] = True
    if math.comb(n, n_candidate) <= max_exact:
        chosen = np.array(list(itertools.combinations(range(n), n_candidate)))
        every = np.zeros((len(chosen), n), dtype=bool)
        every[np.arange(len(chosen))[:, None], chosen] = True
        labelings = np.vstack([every[-1:], every[:-1]])  # the last combination is the observed labeling
    else:
        keys = np.random.default_rng(seed).random((n_random, n))
        labelings = np.vstack([observed, np.argsort(np.argsort(keys, axis=1), axis=1) < n_candidate])
    labelings.setflags(write=False)
    return labelings


def _labeling_weights(labelings: np.ndarray) -> np.ndarray:
    """``(P, L)`` weights: ``pair_values @ W`` is ``mean(cross pairs) - mean(baseline pairs)`` per labeling."""
    n = labelings.shape[1]
    rows, cols = pair_indices(n)
    in_i, in_j = labelings[:, rows], labelings[:, cols]
    n_candidate = int(labelings[0].sum())
    n_baseline = n - n_candidate
    weights = (in_i ^ in_j) / (n_baseline * n_candidate) - (~in_i & ~in_j) / math.comb(n_baseline, 2)
    return weights.T.astype(float)


def mid_ranks(values: np.ndarray) -> np.ndarray:
    """Mid-ranks (1-based, ties averaged) along the last axis."""
    x = np.asarray(values, dtype=float)
    below = (x[..., None, :] < x[..., :, None]).sum(axis=-1)
    ties = (x[..., None, :] == x[..., :, None]).sum(axis=-1)
    return below + (ties + 1) / 2


def _maxt_pvalues(statistics: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Single-step max-T p-values from ``(..., M, L)`` relabelled statistics (column 0 observed).

    A metric whose statistic is the same under every labeling carries no
    information and is left out (adjusted p 1).
    """
    mu = statistics.mean(axis=-1, keepdims=True)
    sd = statistics.std(axis=-1, keepdims=True)
    informative = sd > 1e-12 * (1 + np.abs(mu))
    z = np.where(informative, (statistics - mu) / np.where(informative, sd, 1.0), -np.inf)
    zmax = z.max(axis=-2)
    p_global = np.mean(zmax >= zmax[..., :1] - _TOL, axis=-1)
    p_metric = np.mean(zmax[..., None, :] >= z[..., :, :1] - _TOL, axis=-1)
    return p_global, np.where(informative[..., 0], p_metric, 1.0)


def permutation_test(
    pair_deviations: np.ndarray, n_baseline: int, n_candidate: int, *, labelings: np.ndarray | None = None
) -> tuple[np.ndarray, np.ndarray]:
    """The exact process-relabelling rank test, max-T over metrics.

    Parameters
    ----------
    pair_deviations
        ``(..., M, R, P)``: per metric, per compared request index and per
        process pair (:func:`pair_indices` order), the deviation.
    n_baseline, n_candidate
        ``B`` and ``C``; processes ``0..B-1`` are the baseline's.
    labelings
        From :func:`candidate_labelings`; computed when None.

    Returns
    -------
    p_global, p_metric
        The p-value of "the candidate processes look like baseline
        processes" (``...``) and the per-metric adjusted p-values (``..., M``).
    """
    if labelings is None:
        labelings = candidate_labelings(n_baseline, n_candidate)
    pair_values = np.median(np.asarray(pair_deviations, dtype=float), axis=-2)
    statistics = mid_ranks(pair_values) @ _labeling_weights(labelings)
    return _maxt_pvalues(statistics)
