"""h3bench.course.racesim: the family's false "faster" of whole races, measured through the race's own decisions."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from h3bench.course.design import sequential_design
from h3bench.course.designsim import LatencyModel
from h3bench.course.devicetime import ArmCost, CampaignCosts
from h3bench.course.racesim import race_time, simulate_races
from h3bench.errors import UsageError
from h3bench.stats.intervals import PASS

N, PATHS = 6000, 1 << 16  # Monte-Carlo SE of a 2.5 % rate: 0.2 points


def _design(looks=(2, 3, 4, 5, 6), futility=True, allowance=None):
    design = sequential_design(1)
    return dataclasses.replace(design, looks=(looks,), gamma=(0.0,), futility=futility,
                               allowance=design.allowance if allowance is None else allowance)


def _family_false_faster(design, ratios, seed=5, **model):
    run = simulate_races(design, ratios, model=LatencyModel(process_cv=0.01, **model), n=N, seed=seed, n_paths=PATHS)
    null = (np.asarray(ratios) >= 0.98).any(-1)
    return ((run.outcome == PASS) & null).any(-1).mean()


def test_without_futility_the_family_spends_its_budget():
    """Three at the margin, futility off and no step allowance: the max-t values give the family its 2.5 %, not far
    below (Bonferroni's would, and the race's stepping down could not lift it)."""
    rate = _family_false_faster(_design(futility=False, allowance=0.0), [[0.98]] * 3)
    assert 0.019 <= rate <= 0.029


@pytest.mark.parametrize("ratios", [[[0.98]] * 3, [[0.9], [0.98], [0.98]], [[0.9], [0.9], [0.98]]])
def test_the_family_false_faster_stays_within_25_per_mille(ratios):
    """All at the margin, or the others truly faster (their PASS hands their level on): the family's rate ≤ 2.5 %."""
    assert _family_false_faster(_design(), ratios) <= 0.025 + 2 * 0.002


def test_a_true_10_percent_passes_and_a_null_one_leaves_early():
    design = _design()
    run = simulate_races(design, [[0.9], [1.0], [1.0]], model=LatencyModel(process_cv=0.01), n=2000, seed=1,
                         n_paths=PATHS)
    assert (run.outcome[:, 0] == PASS).mean() > 0.95
    assert run.rounds[:, 1:, 0].mean() < 3  # futility at the first looks
    base = ArmCost(100.0, 10.0, 1.0)
    priced = race_time(run, CampaignCosts((5.0,), (base,)))
    block = base.block_s(design.budget)
    expected = run.anchors[:, 0] * block + sum(run.rounds[:, c, 0] * base.scaled(r).block_s(design.budget)
                                               for c, r in enumerate((0.9, 1.0, 1.0)))
    assert np.allclose(priced.wall_s, expected)


def test_ratios_must_match_the_durations():
    with pytest.raises(UsageError, match="ratios must be"):
        simulate_races(_design(), [[0.9, 0.9]], n=10)


def test_a_step_inside_the_first_round_is_allowed_for():
    """Three at the margin, a -3 % step inside round 1, futility off: the family's rate stays ≤ 2.5 %."""
    assert _family_false_faster(_design(futility=False), [[0.98]] * 3, step=-0.03) <= 0.025 + 2 * 0.002


def test_shared_anchors_run_one_baseline_block_fewer_each_round_after_the_first():
    """A lone candidate: A c A, then c A each round (r + 1 anchors), against A c A every round (2 r)."""
    design = _design(looks=(2, 4))
    shared = simulate_races(design, [[0.9]], n=200, seed=3, n_paths=PATHS)
    own = simulate_races(design, [[0.9]], n=200, seed=3, n_paths=PATHS, shared=False)
    assert (shared.anchors[:, 0] == shared.rounds[:, 0, 0] + 1).all()
    assert (own.anchors[:, 0] == 2 * own.rounds[:, 0, 0]).all()
