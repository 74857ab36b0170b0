"""The probe's sequential test: where it stops, what it decides, and that one row and a batch give the same."""

from __future__ import annotations

import math

import numpy as np
import pytest

from h3bench.bisect import posterior
from h3bench.bisect.posterior import Evidence
from h3bench.bisect.probe import (
    CHANGED,
    UNCHANGED,
    UNDECIDED,
    ProbeTest,
    Step,
    between_flags,
    quality_log_lr,
)
from h3bench.errors import UsageError

N = 8
PRIOR = posterior.log_prior(N)
VERIFIED = Evidence.empty((N,)).add(N - 1, np.array([0.10, 0.11, 0.095, 0.105]))  # the verify: a 10 % step


def test_a_clear_pair_decides_at_once_and_the_direction_is_right():
    test = ProbeTest(level=0.05, min_pairs=1, max_pairs=6)
    changed = test.run(VERIFIED, PRIOR, 3, np.array([0.1, 0.1, 0.1]))
    unchanged = test.run(VERIFIED, PRIOR, 3, np.array([0.0, 0.0, 0.0]))
    assert (int(changed.decision), int(changed.pairs)) == (CHANGED, 1) and changed.log_lr >= test.threshold
    assert (int(unchanged.decision), int(unchanged.pairs)) == (UNCHANGED, 1) and unchanged.log_lr <= -test.threshold


def test_min_pairs_holds_a_clear_answer_back_and_max_pairs_ends_an_unclear_one():
    held = ProbeTest(level=0.05, min_pairs=2, max_pairs=6).run(VERIFIED, PRIOR, 3, np.array([0.1, 0.1]))
    assert int(held.pairs) == 2 and int(held.decision) == CHANGED
    halfway = ProbeTest(level=0.001, min_pairs=1, max_pairs=3).run(VERIFIED, PRIOR, 3, np.array([0.05, 0.052, 0.049]))
    assert (int(halfway.decision), int(halfway.pairs), bool(halfway.stopped)) == (UNDECIDED, 3, True)


def test_the_live_probe_continues_until_the_test_stops():
    test = ProbeTest(level=0.01, min_pairs=1, max_pairs=8)
    x = np.array([0.03, 0.07, 0.09, 0.11, 0.1, 0.1])
    whole = test.run(VERIFIED, PRIOR, 3, x)
    live = [test.run(VERIFIED, PRIOR, 3, x[:n]) for n in range(1, len(x) + 1)]
    stops = [n for n, found in enumerate(live, start=1) if bool(found.stopped)]
    assert stops and stops[0] == int(whole.pairs) and not bool(live[0].stopped)
    assert float(live[stops[0] - 1].log_lr) == pytest.approx(float(whole.log_lr))


def test_one_row_and_a_batch_of_searches_agree():
    rng = np.random.default_rng(7)
    x = rng.normal(0.05, 0.04, (16, 6))
    commits = rng.integers(0, N - 1, 16)
    evidence = Evidence(*(np.broadcast_to(a, (16, N)).copy() for a in (VERIFIED.count, VERIFIED.total,
                                                                        VERIFIED.squares)))
    test = ProbeTest()
    batch = test.run(evidence, PRIOR, commits, x)
    for i in range(16):
        one = test.run(VERIFIED, PRIOR, int(commits[i]), x[i])
        assert (int(one.decision), int(one.pairs)) == (int(batch.decision[i]), int(batch.pairs[i]))
        assert float(one.log_lr) == pytest.approx(float(batch.log_lr[i]))


def test_the_threshold_is_walds_and_bad_settings_are_refused():
    assert ProbeTest(level=0.05).threshold == pytest.approx(math.log(19))
    with pytest.raises(UsageError, match="level"):
        ProbeTest(level=0.5)
    with pytest.raises(UsageError, match="min_pairs"):
        ProbeTest(min_pairs=3, max_pairs=2)


def test_a_level_between_no_change_and_the_step_is_flagged():
    rng = np.random.default_rng(1)
    noise = 0.005 * rng.standard_normal(6)
    assert bool(between_flags(0.05 + noise, 6, 0.1))
    assert not bool(between_flags(0.1 + noise, 6, 0.1)) and not bool(between_flags(noise, 6, 0.1))
    assert not bool(between_flags(np.array([0.05]), 1, 0.1))  # one pair has no interval
    # A hint never points at a commit whose probe said "unchanged", whatever its interval.
    assert bool(between_flags(0.05 + noise, 6, 0.1, CHANGED)) and bool(between_flags(0.05 + noise, 6, 0.1, UNDECIDED))
    assert not bool(between_flags(0.05 + noise, 6, 0.1, UNCHANGED))
    flags = between_flags(np.stack([0.05 + noise] * 3), 6, 0.1, np.array([CHANGED, UNCHANGED, UNDECIDED]))
    assert flags.tolist() == [True, False, True]


def test_the_verified_step_with_its_interval():
    step = Step.from_log_ratios([0.1, 0.12, 0.08])
    low, high = step.interval()
    assert step.ratio == pytest.approx(math.exp(0.1)) and low < step.ratio < high
    with pytest.raises(UsageError, match="two pairs"):
        Step.from_log_ratios([0.1])


def test_quality_ratios_count_failing_and_passing_pairs():
    assert quality_log_lr(2, 2, 4, 4) > 0 > quality_log_lr(0, 2, 4, 4)
    assert quality_log_lr(0, 0, 4, 4) == 0.0
    with pytest.raises(UsageError):
        quality_log_lr(3, 2, 4, 4)
