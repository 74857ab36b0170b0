"""The block budget, each block's statistic, and the pooled first-request (warmup leak) rule."""

from __future__ import annotations

import math

import numpy as np
import pytest

from h3bench.errors import UsageError
from h3bench.stats.blockstat import (
    FAST_SHARE,
    LEAK_LEVEL,
    BlockBudget,
    arm_mask,
    block_log_statistics,
    first_request_flags,
    first_request_sides,
    lower_median,
)

ORDER = "ABBAABBA"
COUNTED = BlockBudget(1, 2, True, True)
TODAY = BlockBudget(1, 3, True, False)


def test_a_budget_says_what_a_block_sends_and_counts():
    assert (COUNTED.requests, COUNTED.columns, COUNTED.counted) == (4, 3, 3)
    assert (TODAY.requests, TODAY.columns, TODAY.counted) == (5, 4, 3)
    assert COUNTED.describe() == "1 warmup + 2 measured + 1 audit (its latency counts)"


@pytest.mark.parametrize(("kwargs", "message"), [
    ({"warmups": 0}, "at least one warmup"),
    ({"measured": 1, "audit_counts": True}, "at least two measured"),
    ({"measured": 2, "audit": True, "audit_counts": False}, "at least three counted"),
    ({"measured": 3, "audit": False, "audit_counts": True}, "audit_counts needs audit"),
])
def test_a_budget_that_cannot_give_a_robust_median_is_refused(kwargs, message):
    with pytest.raises(UsageError, match=message):
        BlockBudget(**kwargs)


def test_the_block_statistic_is_the_median_of_the_counted_requests():
    samples = np.array([[[10.0, 12.0, 11.0], [10.0, 30.0, 11.0]]])
    assert np.exp(block_log_statistics(samples, COUNTED))[0] == pytest.approx([11.0, 11.0])
    today = np.array([[[10.0, 12.0, 11.0, 50.0]]])  # the audit (last) does not count
    assert np.exp(block_log_statistics(today, TODAY))[0] == pytest.approx([11.0])
    # Without the first request: the lower of the other two, which one slow request (30.0) does not move.
    assert np.exp(block_log_statistics(samples, COUNTED, True))[0] == pytest.approx([11.0, 11.0])
    four = np.array([[[10.0, 14.0, 12.0, 50.0, 13.0]]])
    assert np.exp(lower_median(np.log(four[..., 1:])))[0] == pytest.approx([13.0])  # of 12, 13, 14, 50: 13
    with pytest.raises(UsageError, match="samples must be"):
        block_log_statistics(today, COUNTED)


def _samples(rng, n, *, leak=0.0, arms="A", budget=COUNTED, cv=0.02):
    log = rng.normal(0, cv, (n, len(ORDER), budget.columns)) + rng.normal(0, 0.02, (n, len(ORDER), 1))
    log[:, [c in arms for c in ORDER], 0] += math.log1p(leak)
    return np.exp(log + math.log(100))


def test_without_a_leak_the_rule_flags_at_its_level():
    """iid noise: each arm's pooled t is exactly Student t, so each arm flags at LEAK_LEVEL; the rule flags when
    either does (the two share their scatter, so somewhat below 1 − (1 − level)²)."""
    n = 20_000
    flag, t, df = first_request_flags(_samples(np.random.default_rng(1), n), ORDER, COUNTED)
    from scipy.special import stdtrit

    per_arm = (t > stdtrit(df, 1 - LEAK_LEVEL)).mean(0)
    se = math.sqrt(LEAK_LEVEL * (1 - LEAK_LEVEL) / n)
    assert np.abs(per_arm - LEAK_LEVEL).max() < 3.5 * se
    assert LEAK_LEVEL < flag.mean() < 1 - (1 - LEAK_LEVEL) ** 2 + 3.5 * se
    print(f"first-request rule, no leak, 8 blocks: flagged {flag.mean():.2%}")


@pytest.mark.parametrize("leak", [0.05, 0.10])
@pytest.mark.parametrize("arms", ["A", "B", "AB"])
def test_a_leak_in_either_arm_is_flagged(leak, arms):
    flag, _, _ = first_request_flags(_samples(np.random.default_rng(2), 4000, leak=leak, arms=arms), ORDER, COUNTED)
    print(f"first-request rule, +{leak:.0%} leak in {arms}, 8 blocks: flagged {flag.mean():.2%}")
    assert flag.mean() > 0.95


def test_without_a_leak_the_two_sided_check_flags_each_side_at_its_level():
    """A/A: each arm's t is exactly Student t, so a faster first request is flagged at FAST_SHARE · LEAK_LEVEL per
    arm, and each bound is judged also without first requests in at most the slow rule's rate plus that."""
    n = 20_000
    samples = _samples(np.random.default_rng(4), n)
    upper, lower = first_request_sides(samples, ORDER, COUNTED)
    slow, t, df = first_request_flags(samples, ORDER, COUNTED)
    from scipy.special import stdtrit

    fast = (t < -stdtrit(df, 1 - FAST_SHARE * LEAK_LEVEL)).mean(0)
    se = math.sqrt(FAST_SHARE * LEAK_LEVEL * (1 - FAST_SHARE * LEAK_LEVEL) / n)
    assert np.abs(fast - FAST_SHARE * LEAK_LEVEL).max() < 3.5 * se
    for side in (upper, lower):
        assert slow.mean() < side.mean() <= slow.mean() + FAST_SHARE * LEAK_LEVEL + 3.5 * se
    print(f"two-sided check, no leak, 8 blocks: upper bound also without first requests {upper.mean():.2%}, "
          f"lower {lower.mean():.2%}, either {(upper | lower).mean():.2%}")


@pytest.mark.parametrize("cold", [-0.05, -0.10])
@pytest.mark.parametrize("arm", ["A", "B"])
def test_a_faster_first_request_is_flagged_on_the_side_it_biases(cold, arm):
    """A cold card runs the first request ~10 % faster (issue 45): in the candidate it biases towards "faster"
    (the upper bound), in the baseline towards "slower" (the lower bound); the other bound is left alone."""
    upper, lower = first_request_sides(_samples(np.random.default_rng(5), 4000, leak=cold, arms=arm), ORDER, COUNTED)
    biased, other = (upper, lower) if arm == "B" else (lower, upper)
    print(f"two-sided check, {cold:+.0%} first request in {arm}: flagged {biased.mean():.2%}, other side {other.mean():.2%}")
    assert biased.mean() > 0.9 and other.mean() < 2 * LEAK_LEVEL


def test_the_rule_reads_the_measured_requests_only():
    """An audit seed that costs 30 % more by itself does not look like a leak; a budget of 1 + 3 + 1 works too."""
    samples = _samples(np.random.default_rng(3), 4000, budget=TODAY)
    samples[..., 3] *= 1.3
    flag, _, _ = first_request_flags(samples, ORDER, TODAY)
    assert flag.mean() < 2 * LEAK_LEVEL


def test_no_scatter_at_all_flags_any_excess():
    samples = np.full((1, 4, 3), 100.0)
    assert not first_request_flags(samples, "ABBA", COUNTED)[0][0]
    samples[0, [0, 3], 0] = 101.0  # both baseline blocks alike: the first requests' excess has no scatter
    assert first_request_flags(samples, "ABBA", COUNTED)[0][0]
    samples[0, [0, 3], 0] = 99.0  # ... and a shortfall, faster first requests in the baseline: its lower bound
    upper, lower = first_request_sides(samples, "ABBA", COUNTED)
    assert lower[0] and not upper[0] and not first_request_flags(samples, "ABBA", COUNTED)[0][0]


def test_the_rule_needs_both_arms():
    with pytest.raises(UsageError, match="both arms"):
        first_request_flags(np.full((1, 2, 3), 100.0), "AA", COUNTED)
    with pytest.raises(UsageError, match="made of A and B"):
        arm_mask("AC")
