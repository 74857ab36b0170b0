"""The lossless test in a sequential campaign: its level per candidate, its first PASS look and its control blocks.

The relabelling test's rates are measured through
:func:`h3bench.quality.lossless.relabelling_outcomes` on the deviation models of
tests_unit/stats/test_error_rates.py (exchangeable null; 3x on every metric), with
other seeds than the feasibility simulation that chose the designs.
"""

from __future__ import annotations

import math

import numpy as np
import pytest

from h3bench.course import designsim
from h3bench.course.design import sequential_design
from h3bench.errors import UsageError
from h3bench.quality import lossless, lossless_design
from h3bench.stats.intervals import FAIL, INCONCLUSIVE, PASS
from tests_unit.stats.test_error_rates import deviations

N = 4000


def se(rate: float, n: int) -> float:
    return math.sqrt(max(rate * (1 - rate), 1e-4) / n)


LEVELS = lossless_design.lossless_levels(2)  # (0.01, 0.04): the cheaper duration first


def test_the_level_is_split_over_the_durations_most_of_it_where_processes_are_dear():
    assert LEVELS == pytest.approx((0.01, 0.04))
    assert lossless_design.lossless_levels(1) == (0.05,)
    assert sum(lossless_design.lossless_levels(3)) == pytest.approx(0.05)
    with pytest.raises(UsageError, match="n_durations ≥ 1"):
        lossless_design.lossless_levels(0)


def test_the_false_reject_rate_per_candidate_is_exact():
    """Today: 6 + 4 at 0.05 per duration, 9.3 % per candidate, 17.8 % for one of two candidates. Split: ≤ 5 %."""
    today = lossless_design.false_reject_per_candidate([(6, 4), (6, 4)], [0.05, 0.05])
    assert today == pytest.approx(1 - (1 - 10 / 210) ** 2)
    assert 1 - (1 - today) ** 2 == pytest.approx(0.178, abs=0.001)
    split = lossless_design.false_reject_per_candidate([(7, 4), (6, 3)], LEVELS)
    assert split == pytest.approx(1 - (1 - 3 / 330) * (1 - 3 / 84)) and split <= 0.05


def test_the_baseline_processes_needed_keep_ninety_percent_power():
    assert [lossless_design.baseline_needed(c, 0.05) for c in (3, 4, 5, 6)] == [6, 6, 6, 6]
    assert [lossless_design.baseline_needed(c, 0.04) for c in (3, 4, 5, 6)] == [6, 6, 6, 6]
    assert [lossless_design.baseline_needed(c, 0.01) for c in (3, 4, 5, 6)] == [9, 7, 7, 7]
    assert lossless_design.pass_from_pairs(0.04) == 3 and lossless_design.pass_from_pairs(0.01) == 4


@pytest.mark.slow
@pytest.mark.parametrize("scenario", ["chisq2", "lognormal1", "process"])
def test_split_over_two_durations_a_lossless_candidate_is_rejected_in_at_most_five_percent(scenario):
    """The smallest designs the levels allow: 7 + 4 at 0.01 (the cheaper duration), 6 + 3 at 0.04."""
    rng = np.random.default_rng(301 + len(scenario))
    codes = np.stack([np.concatenate([lossless.relabelling_outcomes(deviations(rng, 500, nb, nc, scenario), nb, nc,
                                                                     alpha=alpha)[0] for _ in range(N // 500)])
                      for (nb, nc), alpha in zip([(7, 4), (6, 3)], LEVELS, strict=True)], axis=-1)
    rate = float((codes == FAIL).any(-1).mean())
    print(f"lossless 7+4 at 0.01 and 6+3 at 0.04, {scenario}: false reject per candidate {rate:.2%}")
    assert rate <= 0.05 + 3.5 * se(0.05, N)


@pytest.mark.slow
@pytest.mark.parametrize(("n_baseline", "n_candidate", "alpha"), [(7, 4, 0.01), (9, 3, 0.01), (6, 3, 0.04), (6, 5, 0.04)])
def test_split_the_test_still_finds_a_threefold_degradation(n_baseline, n_candidate, alpha):
    rng = np.random.default_rng(311 + n_candidate)
    codes = np.concatenate([lossless.relabelling_outcomes(deviations(rng, 250, n_baseline, n_candidate, "chisq2",
                                                                     effect=3.0), n_baseline, n_candidate,
                                                          alpha=alpha)[0] for _ in range(8)])
    rate = float((codes == FAIL).mean())
    print(f"lossless {n_baseline}+{n_candidate} at {alpha:g}, 3x every metric (chi-square): FAIL {rate:.2%}")
    assert rate >= 0.90 - 3.5 * se(0.90, 2000)


def test_a_simulated_lossless_campaign_runs_controls_only_for_candidates_that_go_on():
    """The plan's campaigns (the course's rule): a series stopped before its first PASS look runs no control, and
    every candidate that passes has the baseline processes its lossless test needs, which then reaches a verdict."""
    design = sequential_design(2, lossless_per_candidate=0.05)
    null = designsim.simulate_campaigns(design, [[1.0, 1.0]], n=2000, seed=5, lossless=True)
    futile_early = null.pairs[:, 0, 0] < 4
    assert (null.controls[futile_early, 0] == 0).all()
    fast = designsim.simulate_campaigns(design, [[0.5, 0.5]], n=2000, seed=6, lossless=True)
    for d in range(2):
        passed = fast.code[:, 0, d] == PASS
        alpha = design.lossless_alpha(d)
        needed = np.array([lossless_design.baseline_needed(int(p), alpha) for p in fast.pairs[passed, 0, d]])
        assert (fast.pairs[passed, 0, d] + fast.controls[passed, d] >= needed).all()
        assert (fast.pairs[passed, 0, d] >= lossless_design.pass_from_pairs(alpha)).all()
        assert (fast.lossless_code[passed, 0, d] != INCONCLUSIVE).all()
    print(f"lossless, true ratio 0.5: controls per duration {fast.controls.mean(0)}, pairs {fast.pairs.mean((0, 1))}")


# ---- where the control blocks and the series run: outputs that drift with time ---------------------------------------


def _drifting(rng: np.random.Generator, n: int, times: np.ndarray, growth: float) -> np.ndarray:
    """``(n, 5, 1, P)`` deviations: each process's nondeterminism grows linearly with its time in the campaign,
    by ``growth`` over the whole of it (1.0: twice as large at the end); the MSE of 8 values per metric."""
    x = (1 + growth * times)[None, None, :, None] * rng.standard_normal((n, 5, len(times), 8))
    rows, cols = lossless.pair_indices(len(times))
    return ((x[..., rows, :] - x[..., cols, :]) ** 2).mean(-1)[:, :, None, :]


def _rejects(schedule: list[str], candidate: str, seed: int, n: int = 2000) -> float:
    times = np.arange(len(schedule)) / len(schedule)
    baseline = [i for i, block in enumerate(schedule) if block in ("C", "A1", "A2")]
    own = [i for i, block in enumerate(schedule) if block == candidate]
    d = _drifting(np.random.default_rng(seed), n, times[baseline + own], 1.0)
    return float((lossless.relabelling_outcomes(d, len(baseline), len(own))[0] == FAIL).mean())


@pytest.mark.slow
def test_series_run_round_robin_keep_a_drift_from_failing_the_later_candidate():
    """Two lossless candidates, nondeterminism doubling over the campaign. Today's order (both control blocks, then
    series 1, then series 2) rejects the later candidate far beyond 5 %; the pairs of both series run round-robin
    (as the course runs them), each candidate's processes sit among baseline
    ones and the test holds its level."""
    s1 = [("A1" if c == "A" else "B1") for c in "ABBAABBA"]
    s2 = [("A2" if c == "A" else "B2") for c in "ABBAABBA"]
    today = ["C", "C", *s1, *s2]
    round_robin = [block for k in range(4) for block in (*s1[2 * k : 2 * k + 2], *s2[2 * k : 2 * k + 2])]
    later_today, later_rr = _rejects(today, "B2", 401), _rejects(round_robin, "B2", 402)
    print(f"lossless, nondeterminism doubling over the campaign, later candidate rejected: controls first then each "
          f"series {later_today:.1%}, round-robin pairs {later_rr:.1%}")
    assert later_today > 0.15
    assert later_rr <= 0.05 + 3.5 * se(0.05, 2000)
