"""h3bench.course.race: shared anchors where a drift cancels, rotated and mirrored rounds, step-down decisions."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy.special import stdtr, stdtrit

from h3bench.course.race import (
    ANCHOR,
    LookState,
    RaceBoundaries,
    decide_look,
    estimates,
    pooled_se,
    race_boundaries,
    race_contrasts,
    race_round,
    round_weights,
    shared_precision,
)
from h3bench.stats import intervals
from h3bench.stats.intervals import INCONCLUSIVE, PASS
from h3bench.stats.sequential import FUTILITY, PASSED, crossing_values, spent

fields = st.lists(st.integers(0, 9), min_size=1, max_size=8, unique=True)


@settings(max_examples=200, deadline=None)
@given(fields, st.integers(0, 40), st.floats(-5, 5), st.floats(-1, 1), st.lists(st.floats(-0.3, 0.3), min_size=10,
                                                                               max_size=10))
def test_a_linear_drift_cancels_for_every_candidate_wherever_it_stands(active, r, level, slope, effects):
    """Block statistics on a straight line in time plus each candidate's effect: every contrast is the effect."""
    slots = race_round(active, r)
    time = np.arange(len(slots)) + 7.0 * r  # any offset
    stats = level + slope * time + np.array([0.0 if s == ANCHOR else effects[s] for s in slots])
    got = race_contrasts(stats, slots, 10)
    assert np.allclose(got[active], np.array(effects)[active], atol=1e-9)
    assert np.isnan(np.delete(got, active)).all()


@settings(max_examples=200, deadline=None)
@given(fields, st.integers(0, 40))
def test_every_candidate_runs_once_a_round_next_to_an_anchor(active, r):
    slots = race_round(active, r)
    assert sorted(s for s in slots if s != ANCHOR) == sorted(active)
    assert slots[0] == slots[-1] == ANCHOR
    for p, s in enumerate(slots):
        if s != ANCHOR:
            assert ANCHOR in (slots[p - 1], slots[p + 1])


@settings(max_examples=100, deadline=None)
@given(fields, st.integers(0, 20))
def test_rounds_mirror_and_turn_so_no_candidate_always_goes_first(active, q):
    even, odd = race_round(active, 2 * q), race_round(active, 2 * q + 1)
    assert odd == tuple(reversed(even))
    firsts = {race_round(active, r)[1] for r in range(2 * len(active))}
    assert firsts == set(active)


def test_contrast_weights_interpolate_between_the_neighbouring_anchors():
    who, w = round_weights((ANCHOR, 4, 7, ANCHOR, 2, ANCHOR))
    assert who == (4, 7, 2)
    assert np.allclose(w, [[-2 / 3, 1, 0, -1 / 3, 0, 0], [-1 / 3, 0, 1, -2 / 3, 0, 0], [0, 0, 0, -0.5, 1, -0.5]])
    with pytest.raises(ValueError, match="begins and ends with an anchor"):
        round_weights((4, ANCHOR))


def _paths_of_each(m: int, n: int, n_paths: int, seed: int) -> np.ndarray:
    """``(n_paths, m)`` -T of each candidate after ``n`` rounds on normal blocks, through the race's own schedule,
    contrasts and estimates."""
    rng = np.random.default_rng(seed)
    x = np.empty((n_paths, m, n))
    for r in range(n):
        slots = race_round(range(m), r)
        x[:, :, r] = race_contrasts(rng.standard_normal((n_paths, len(slots))), slots, m)
    found = estimates(x)
    return -found.effect / found.se


def test_the_critical_value_of_six_lies_below_bonferronis_and_holds_the_family_level():
    """Six candidates at one look: the max-t value lies below the value each needs at 2.5 %/6, and on the race's
    own estimates the family crosses it in at most 2.5 %, not far below (held-out paths)."""
    levels = intervals.Levels(0.025, 0.0125, 1, 1)
    b = race_boundaries((4,), 6, levels, 0.02, n_paths=1 << 16)
    each = _paths_of_each(6, 4, 1 << 16, 7)
    bonferroni = float(np.quantile(each[:, 0], 1 - 0.025 / 6))
    dunnett = b.pass_crits[5][0]
    assert dunnett < bonferroni
    assert 0.018 < (each.max(-1) >= dunnett).mean() <= 0.025 + 0.002
    # fewer candidates, a higher one-sided level at the pooled degrees of freedom (m · 3): the step-down
    level = [float(stdtr(m * 3, -b.pass_crits[m - 1][0])) for m in (1, 3, 6)]
    assert level[0] > level[1] > level[2]


def _boundaries(crits: tuple[float, ...]) -> RaceBoundaries:
    """Hand-made critical values (looks after 4 and 8 rounds) for fields of 1, 2, 3, far apart."""
    return RaceBoundaries((4, 8), tuple((c, c) for c in crits), (3.0, 3.0), 0.02, 0.98, 0.025, 0.0125)


def _contrasts(means: list[float]) -> np.ndarray:
    spread = np.array([0.01, -0.01, 0.01, -0.01, 0, 0, 0, 0])  # the same spread for every candidate
    return (np.array(means)[:, None] + spread[None, :])[None]


def _edge(x: np.ndarray, n: int) -> float:
    """An effect three standard errors below the margin: PASS at a critical value of 1 or 2, not 6."""
    return float(np.log(0.98) - 3.0 * estimates(x[..., :n]).se[0, 1])


def test_a_pass_hands_its_level_on_holm_style():
    """Candidate 1 clears the two-candidate value but not the three: it PASSes only once candidate 0 has left."""
    b = _boundaries((1.0, 2.0, 6.0))
    edge = _edge(_contrasts([0.0, 0.0, 0.0]), 4)
    with_leader = decide_look(_contrasts([-0.5, edge, 0.0]), 0, LookState.start((1, 3)), b)
    assert list(with_leader.code[0]) == [PASS, PASS, INCONCLUSIVE]
    without = decide_look(_contrasts([0.0, edge, 0.0]), 0, LookState.start((1, 3)), b)
    assert without.code[0, 1] == INCONCLUSIVE and without.reason[0, 1] != PASSED


def test_futility_is_non_binding_a_candidate_that_left_keeps_its_share():
    """Two candidates stopped by futility still count in the field: candidate 1 is judged among three."""
    b = _boundaries((1.0, 2.0, 6.0))
    first = decide_look(_contrasts([0.0, -0.03, 0.0]), 0, LookState.start((1, 3)), b)
    assert list(first.reason[0]) == [FUTILITY, 0, FUTILITY]  # candidate 1 continues
    later = _contrasts([0.0, 0.0, 0.0])
    later[0, [0, 2], 4:] = np.nan  # the two that left ran no more rounds
    later[0, 1] += _edge(later, 8)
    found = decide_look(later, 1, first, b)
    assert found.code[0, 1] == INCONCLUSIVE
    passed_instead = LookState(np.array([[PASS, INCONCLUSIVE, PASS]], np.int8), first.reason.copy(), first.look)
    assert decide_look(later, 1, passed_instead, b).code[0, 1] == PASS  # had they PASSed, its value would be 1


def test_crossing_values_spend_the_level_over_the_looks():
    paths = np.random.default_rng(3).standard_normal((1 << 16, 3))
    cumulative = spent(np.array([1, 2, 3]) / 3, 0.05)
    crits = crossing_values(paths, cumulative)
    crossed = np.zeros(len(paths), bool)
    for j, c in enumerate(crits):
        crossed |= paths[:, j] >= c
        assert abs(crossed.mean() - cumulative[j]) < 1e-4


def test_estimates_are_the_mean_and_pooled_spread_for_a_lone_candidate():
    x = np.array([[[0.01, -0.02, 0.03, 0.0]]])
    found = estimates(x)
    assert np.allclose(found.effect, x.mean(-1)) and found.df[0] == 3
    assert np.allclose(found.se, pooled_se(x))


def test_each_t_is_exact_however_the_field_changes():
    """Three candidates on normal blocks, two of them leaving after rounds 2 and 3: the one that stays has a t
    statistic with the estimates' degrees of freedom (its upper 5 % point crossed in 5 % of races)."""
    rng = np.random.default_rng(11)
    n, rounds = 40_000, 6
    x = np.full((n, 3, rounds), np.nan)
    for r in range(rounds):
        field = [c for c, leaves in enumerate((2, 3, rounds)) if r < leaves]
        slots = race_round(field, r)
        x[:, :, r] = race_contrasts(rng.standard_normal((n, len(slots))), slots, 3)
    found = estimates(x)
    assert (found.df == (2 + 3 + 6) - 3).all()  # contrasts run, less the candidates
    t = found.effect[:, 2] / found.se[:, 2]
    assert abs((t > stdtrit(found.df[0], 0.95)).mean() - 0.05) < 0.004


def test_rounds_that_share_an_anchor_correlate_and_their_precision_says_so():
    """A lone candidate's contrasts in two rounds sharing the middle anchor (A c A c A): variance 3/2 each,
    covariance 1/4 (correlation 1/6)."""
    who, when, precision = shared_precision((1, 1), 1)
    assert list(who) == [0, 0] and list(when) == [0, 1]
    assert np.allclose(np.linalg.inv(precision), [[1.5, 0.25], [0.25, 1.5]])


def _shared_race(n: int, seed: int) -> np.ndarray:
    """Three candidates on normal blocks, two leaving after rounds 2 and 3; each round opens with the last's anchor."""
    rng = np.random.default_rng(seed)
    rounds = 6
    x = np.full((n, 3, rounds), np.nan)
    last = np.zeros(n)
    for r in range(rounds):
        slots = race_round([c for c, leaves in enumerate((2, 3, rounds)) if r < leaves], r)
        new = rng.standard_normal((n, len(slots) - (1 if r else 0)))
        blocks = np.concatenate([last[:, None], new], 1) if r else new
        last = blocks[:, -1]
        x[:, :, r] = race_contrasts(blocks, slots, 3)
    return x


def test_with_shared_anchors_each_t_is_exact_and_the_per_round_estimates_are_not():
    """The same race with shared anchors: the whole race's covariance gives the one that stays an exact t; weighing
    each round alone does not (its spread misses the correlation across rounds)."""
    x = _shared_race(40_000, 11)
    found = estimates(x, shared=True)
    assert (found.df == (2 + 3 + 6) - 3).all()
    crit = stdtrit(found.df[0], 0.95)
    assert abs((found.effect[:, 2] / found.se[:, 2] > crit).mean() - 0.05) < 0.004
    per_round = estimates(x)
    assert (per_round.effect[:, 2] / per_round.se[:, 2] > crit).mean() > 0.058
