"""The posterior over the culprit: the closed-form likelihood against a numerical integral, and its invariants."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy import integrate

from h3bench.bisect import posterior
from h3bench.bisect.posterior import Evidence
from h3bench.errors import UsageError


def numerical_log_likelihood(x_by_commit: dict[int, list[float]], n: int, k: int) -> float:
    """log ∫∫ Π N(x; μ·[j ≥ k], σ²) dμ (1/σ²) dσ², by quadrature: the model the closed form claims to integrate."""
    changed = np.array([v for j, xs in x_by_commit.items() if j >= k for v in xs])
    unchanged = np.array([v for j, xs in x_by_commit.items() if j < k for v in xs])

    def inner(mu: float, log_var: float) -> float:  # over log σ²: Jeffreys' 1/σ² dσ² is d(log σ²)
        r = np.concatenate([changed - mu, unchanged])
        return math.exp(-0.5 * len(r) * (math.log(2 * math.pi) + log_var) - (r @ r) / (2 * math.exp(log_var)))

    value, _ = integrate.dblquad(inner, math.log(1e-9), math.log(10.0), lambda _: -1.0, lambda _: 1.0, epsabs=0,
                                 epsrel=1e-8)
    return math.log(value)


def test_the_closed_form_is_the_integral_over_step_and_spread():
    rng = np.random.default_rng(3)
    n = 4
    data = {3: list(0.1 + 0.03 * rng.standard_normal(3)), 1: list(0.03 * rng.standard_normal(2)),
            2: list(0.1 + 0.03 * rng.standard_normal(2))}
    evidence = Evidence.empty((n,))
    for j, xs in data.items():
        evidence = evidence.add(j, np.array(xs))
    closed = evidence.log_likelihood()
    numeric = np.array([numerical_log_likelihood(data, n, k) for k in range(n)])
    # The same up to one constant (the improper prior on the step), so every difference agrees.
    assert np.allclose(closed - closed[0], numeric - numeric[0], atol=1e-4)
    assert not np.allclose(closed - closed[0], 0.0, atol=0.5)  # the culprits are told apart


def test_the_posterior_finds_the_culprit_and_a_wrong_probe_only_moves_it():
    evidence = Evidence.empty((8,)).add(7, np.array([0.10, 0.11, 0.09]))
    for j, level in ((3, 0.0), (5, 0.1), (4, 0.1)):
        evidence = evidence.add(j, np.array([level + 0.004, level - 0.003]))
    probs = posterior.probabilities(evidence.log_posterior(posterior.log_prior(8)))
    assert int(np.argmax(probs)) == 4 and probs[4] > 0.9
    # A pair at 2 that looks changed (against the probe of 3) moves mass to the culprits before 3, softly.
    noisy = evidence.add(2, np.array([0.1]))
    moved = posterior.probabilities(noisy.log_posterior(posterior.log_prior(8)))
    assert moved[:3].sum() > 10 * probs[:3].sum() and moved[4] < probs[4]


@settings(max_examples=40, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 5), st.floats(-0.2, 0.2)), min_size=3, max_size=12), st.randoms())
def test_the_posterior_depends_on_the_pairs_not_their_order(pairs, rnd):
    """A Bayesian posterior ignores the order (and so the stopping rule) in which pairs came."""
    shuffled = list(pairs)
    rnd.shuffle(shuffled)
    prior = posterior.log_prior(6)

    def of(items):
        ev = Evidence.empty((6,)).add(5, np.array([0.1, 0.12]))
        for j, x in items:
            ev = ev.add(j, np.array([x]))
        return ev.log_posterior(prior)

    assert np.allclose(of(pairs), of(shuffled), atol=1e-9)


def test_before_any_pair_the_posterior_is_the_prior_and_weights_set_it():
    prior = posterior.log_prior(4, [1.0, 1.0, 2.0, 4.0])
    assert np.allclose(posterior.probabilities(Evidence.empty((4,)).log_posterior(prior)), [0.125, 0.125, 0.25, 0.5])
    with pytest.raises(UsageError, match="positive"):
        posterior.log_prior(3, [1.0, 0.0, 1.0])
    with pytest.raises(UsageError, match="at least two"):
        posterior.log_prior(1)


def test_a_skipped_commit_joins_the_next_in_a_group_no_probe_can_split():
    skipped = np.array([False, False, True, False, False])
    assert posterior.groups(skipped).tolist() == [0, 1, 2, 2, 3]
    probs = np.array([0.1, 0.1, 0.3, 0.4, 0.1])
    assert posterior.group_mass(probs, posterior.groups(skipped)).tolist() == pytest.approx([0.1, 0.1, 0.7, 0.7, 0.1])
    # Nothing measured at the skipped commit: culprits 2 and 3 keep the prior's ratio whatever else is measured.
    ev = Evidence.empty((5,)).add(4, np.array([0.1, 0.1, 0.11])).add(1, np.array([0.0, 0.01])).add(3, np.array([0.1]))
    p = posterior.probabilities(ev.log_posterior(posterior.log_prior(5)))
    assert p[2] == pytest.approx(p[3])


def test_side_odds_and_top_read_the_posterior():
    lp = np.log(np.array([0.1, 0.2, 0.3, 0.4]))
    assert posterior.side_log_odds(lp, 1) == pytest.approx(math.log(0.3 / 0.7))
    assert posterior.top(np.exp(lp), 2) == [(3, pytest.approx(0.4)), (2, pytest.approx(0.3))]


def test_a_segment_weighs_its_own_pairs_from_a_base_whose_level_is_its_own():
    rng = np.random.default_rng(5)
    n = 10
    levels = [0.0] * 3 + [0.05] * 4 + [0.10] * 3  # a change at 3, another at 7
    evidence = Evidence.empty((n,))
    for j in (1, 3, 5, 6, 7, 9):
        evidence = evidence.add(j, levels[j] + 0.005 * rng.standard_normal(3))
    segment = evidence.within(3, 9)  # after the change at 3: its base is commit 3, at +5 %
    probs = posterior.probabilities(segment.log_posterior(posterior.segment_prior(posterior.log_prior(n), 3, 9)))
    assert probs[:4].sum() == 0 and probs[7] > 0.9  # the culprits of (3, 9] only; the second change found
    step, _ = segment.step(np.log(np.maximum(probs, 1e-300)))
    assert step == pytest.approx(0.05, abs=0.01)  # the change itself, not its level against the good engine
    # The base's level is unknown: shifting every pair of the segment moves nothing; the good engine's is known.
    shift = 0.03 * (np.arange(n) >= 3)
    moved = Evidence(segment.count, segment.total + shift * segment.count,
                     segment.squares + 2 * shift * segment.total + shift ** 2 * segment.count, True)
    assert np.allclose(segment.log_likelihood()[4:], moved.log_likelihood()[4:])
    known = Evidence(moved.count, moved.total, moved.squares, False)
    assert not np.allclose(evidence.within(-1, 9).within(3, 9).log_likelihood()[4:], known.log_likelihood()[4:])
    whole = evidence.within(-1, 9)
    assert np.array_equal(whole.log_likelihood(), evidence.log_likelihood())  # the whole range: as before
