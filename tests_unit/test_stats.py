"""h3bench.stats: paired AB/BA block ratios, the t interval, percentiles and the speed verdict."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy import stats as scipy_stats

from h3bench import stats
from h3bench.errors import UsageError
from h3bench.outcome import Outcome
from h3bench.runspec import Gates, Protocol
from h3bench.stats import BlockSamples

# Student t quantiles from printed tables (e.g. NIST/SEMATECH e-Handbook, Table 1.3.6.7.2).
T_975_DF1 = 12.706
T_975_DF3 = 3.182


def blocks(order: str, samples: list[tuple[float, ...]]) -> list[BlockSamples]:
    return [BlockSamples(role, values) for role, values in zip(order, samples, strict=True)]


# ---- worked example by hand

# ABBA: A1 median 11, B1 median 9.5, B2 median 9.9, A2 median 11.5.
ABBA_EXAMPLE = blocks("ABBA", [(10, 11, 12), (9, 10, 9.5), (9, 9.9, 10), (11, 12, 11.5)])


def test_paired_ratios_pair_adjacent_blocks_by_role():
    pairs = stats.paired_block_ratios(ABBA_EXAMPLE)
    assert [(p.index, p.order) for p in pairs] == [(0, "AB"), (1, "BA")]
    assert [(p.baseline_median, p.candidate_median) for p in pairs] == [(11, 9.5), (11.5, 9.9)]
    assert [p.ratio for p in pairs] == pytest.approx([9.5 / 11, 9.9 / 11.5])


def test_interval_matches_a_hand_computation():
    """log r = (-0.146603, -0.149812): mean -0.148207, s = |Δ|/√2 = 0.0022690, h = 12.706·s/√2 = 0.020386."""
    report = stats.speed_report(ABBA_EXAMPLE, margin=0.02)
    est = report.estimate
    logs = [math.log(9.5 / 11), math.log(9.9 / 11.5)]
    center, s = sum(logs) / 2, abs(logs[0] - logs[1]) / math.sqrt(2)
    h = T_975_DF1 * s / math.sqrt(2)
    assert (est.k, est.df) == (2, 1)
    assert est.geomean == pytest.approx(math.sqrt(9.5 / 11 * 9.9 / 11.5), rel=1e-12)
    assert est.log_sd == pytest.approx(s, rel=1e-9)
    assert est.ci_low == pytest.approx(math.exp(center - h), rel=1e-4)
    assert est.ci_high == pytest.approx(math.exp(center + h), rel=1e-4)
    assert (round(est.ci_low, 4), round(est.ci_high, 4)) == (0.8449, 0.8800)
    assert est.mde_ratio == pytest.approx(math.exp(-h), rel=1e-4)
    assert est.min_permutation_p == 0.5
    assert report.verdict.outcome is Outcome.PASS
    assert "lies below 1 - margin = 0.9800" in report.verdict.reasons[0]
    assert any("2/2^2 = 0.5" in reason for reason in report.verdict.reasons)


def test_arm_summaries_report_raw_samples_and_block_medians():
    report = stats.speed_report(ABBA_EXAMPLE, margin=0.02)
    base = report.baseline
    assert base.samples == (10, 11, 12, 11, 12, 11.5)
    assert (base.n, base.minimum, base.median, base.maximum) == (6, 10, 11.25, 12)
    assert base.block_medians == (11, 11.5)
    assert report.candidate.block_medians == (9.5, 9.9)
    assert all(p.value is None for p in base.percentiles)


def test_t_quantile_agrees_with_scipy_stats():
    ratios = [0.91, 0.88, 0.93, 0.90]
    est = stats.ratio_estimate(ratios)
    logs = np.log(ratios)
    h = scipy_stats.t.ppf(0.975, 3) * logs.std(ddof=1) / 2
    assert est.ci_high == pytest.approx(math.exp(logs.mean() + h), rel=1e-12)
    assert est.mde_ratio == pytest.approx(math.exp(-h), rel=1e-12)
    assert scipy_stats.t.ppf(0.975, 3) == pytest.approx(T_975_DF3, abs=5e-4)


# ---- outcomes


def test_one_pair_is_n_too_small_to_conclude():
    report = stats.speed_report(blocks("AB", [(10, 10, 10), (5, 5, 5)]), margin=0.02)
    assert report.estimate.geomean == 0.5
    assert report.estimate.ci_low is None and report.estimate.mde_ratio is None
    assert report.verdict.outcome is Outcome.INCONCLUSIVE
    assert "n too small to conclude" in report.verdict.reasons[0]


def test_no_complete_pair_is_inconclusive():
    est = stats.ratio_estimate([])
    verdict = stats.speed_verdict(est, 0.02)
    assert verdict.outcome is Outcome.INCONCLUSIVE
    assert verdict.reasons == ("no complete AB/BA pair",)


def test_slower_candidate_fails():
    verdict = stats.speed_verdict(stats.ratio_estimate([1.10, 1.12, 1.09, 1.11]), 0.02)
    assert verdict.outcome is Outcome.FAIL
    assert verdict.estimate.ci_low > 1
    assert "candidate slower" in verdict.reasons[0]


def test_straddling_interval_is_inconclusive_and_says_what_would_be_detectable():
    verdict = stats.speed_verdict(stats.ratio_estimate([0.90, 1.05, 0.95, 1.02]), 0.02)
    assert verdict.outcome is Outcome.INCONCLUSIVE
    assert verdict.estimate.ci_low < 1 < verdict.estimate.ci_high
    expected = f"{0.98 * verdict.estimate.mde_ratio:.4f}"
    assert f"only an estimate below {expected} would be called faster" in verdict.reasons[0]


def test_faster_by_less_than_the_margin_is_not_a_pass():
    est = stats.ratio_estimate([0.985, 0.99, 0.987, 0.988])
    assert est.ci_high < 1
    assert stats.speed_verdict(est, 0.0).outcome is Outcome.PASS
    assert stats.speed_verdict(est, 0.02).outcome is Outcome.INCONCLUSIVE


def test_minimum_permutation_p_halves_with_each_pair():
    assert [stats.ratio_estimate([0.9] * k).min_permutation_p for k in (1, 2, 4, 6)] == [1.0, 0.5, 0.125, 2 / 64]


def test_equal_ratios_say_the_zero_width_is_not_certainty():
    est = stats.ratio_estimate([0.9, 0.9, 0.9])
    assert est.ci_low == pytest.approx(est.ci_high)
    assert any("not certainty" in note for note in est.notes)


# ---- percentiles


def test_p95_needs_twenty_samples_and_is_an_observed_sample():
    samples = [float(v) for v in range(1, 20)]
    p95 = stats.percentile(samples, 0.95)
    assert p95.value is None and p95.min_n == 20
    assert "p95 needs n ≥ 20" in p95.note and "n = 19" in p95.note
    samples.append(100.0)
    p95 = stats.percentile(samples, 0.95)
    assert p95.value == 19.0  # nearest rank 19 of 20: exactly one sample lies above
    assert p95.value != pytest.approx(np.mean(samples) + 1.645 * np.std(samples, ddof=1))


def test_default_design_supports_p90_but_not_p95():
    samples = [1.0 + i / 100 for i in range(12)]  # 4 blocks x 3 requests
    p90, p95, p99 = (p.value for p in stats.arm_summary([BlockSamples("A", tuple(samples))]).percentiles)
    assert p90 == samples[10] and p95 is None and p99 is None


# ---- bad input


@pytest.mark.parametrize(
    ("make", "message"),
    [
        (lambda: BlockSamples("C", (1.0,)), "role must be"),
        (lambda: BlockSamples("A", ()), "no measured samples"),
        (lambda: BlockSamples("A", (1.0, -2.0)), "not positive and finite"),
        (lambda: BlockSamples("B", (float("nan"),)), "not positive and finite"),
        (lambda: stats.paired_block_ratios(blocks("AABB", [(1,), (1,), (1,), (1,)])), "AA, not an AB or BA pair"),
        (lambda: stats.speed_report(blocks("A", [(1,)]), margin=0.02), "no candidate block"),
        (lambda: stats.ratio_estimate([0.9, 0.0]), "positive and finite"),
        (lambda: stats.speed_verdict(stats.ratio_estimate([0.9, 0.9]), 1.5), "margin must be in"),
        (lambda: stats.percentile([1.0], 1.0), "q must be in"),
    ],
)
def test_bad_input_is_a_usage_error(make, message):
    with pytest.raises(UsageError, match=message):
        make()


def test_trailing_unpaired_block_counts_in_the_summary_but_not_in_the_ratios():
    report = stats.speed_report(blocks("ABB", [(10,), (9,), (8,)]), margin=0.02)
    assert len(report.pairs) == 1
    assert report.candidate.n == 2


# ---- invariants

ratio_lists = st.lists(st.floats(0.5, 2.0), min_size=2, max_size=8)


@settings(max_examples=50, deadline=None)
@given(ratio_lists)
def test_interval_contains_the_estimate_and_widens_with_confidence(ratios):
    narrow, wide = stats.ratio_estimate(ratios, 0.90), stats.ratio_estimate(ratios, 0.95)
    assert wide.ci_low <= narrow.ci_low <= narrow.geomean <= narrow.ci_high <= wide.ci_high
    assert narrow.geomean == pytest.approx(wide.geomean)


@settings(max_examples=50, deadline=None)
@given(ratio_lists)
def test_swapping_the_arms_inverts_the_ratio_and_its_interval(ratios):
    forward, backward = stats.ratio_estimate(ratios), stats.ratio_estimate([1 / r for r in ratios])
    assert backward.geomean == pytest.approx(1 / forward.geomean)
    assert backward.ci_low == pytest.approx(1 / forward.ci_high)
    assert backward.ci_high == pytest.approx(1 / forward.ci_low)


@settings(max_examples=30, deadline=None)
@given(
    st.lists(st.tuples(st.floats(1.0, 100.0), st.floats(1.0, 100.0)), min_size=4, max_size=4),
    st.floats(0.01, 1000.0),
)
def test_rescaling_every_sample_changes_nothing(medians, scale):
    """Seconds or milliseconds, the ratios, interval and verdict are the same."""
    samples = [(a, b) for a, b in medians]
    raw = blocks("ABBAABBA", [(v,) for pair in samples for v in pair])
    scaled = [BlockSamples(b.role, tuple(v * scale for v in b.samples)) for b in raw]
    one, two = stats.speed_report(raw, margin=0.02), stats.speed_report(scaled, margin=0.02)
    assert two.estimate.ci_low == pytest.approx(one.estimate.ci_low, rel=1e-9)
    assert two.estimate.ci_high == pytest.approx(one.estimate.ci_high, rel=1e-9)
    assert two.verdict.outcome is one.verdict.outcome


# ---- simulated campaigns at the default design (seeded; vectorised draws, the real code per campaign)

CAMPAIGNS = 2000
NOMINAL = 0.025  # one-sided: the upper bound of a 95 % two-sided interval
SLACK = 3.5 * math.sqrt(NOMINAL * (1 - NOMINAL) / CAMPAIGNS)  # Monte-Carlo standard errors


def simulate(
    order: str, *, effect: float, request_cv: float, block_cv: float = 0.0, drift: float = 0.0, seed: int
) -> list[stats.RatioEstimate]:
    """Estimates of ``CAMPAIGNS`` synthetic campaigns: log-normal request noise, a per-process
    (block) offset, a linear drift per block position and a true candidate/baseline ratio ``effect``."""
    rng = np.random.default_rng(seed)
    k_req = Protocol.model_fields["requests_per_block"].default
    is_b = np.array([letter == "B" for letter in order])
    log_latency = (
        math.log(100.0)
        + rng.normal(0, request_cv, (CAMPAIGNS, len(order), k_req))
        + rng.normal(0, block_cv, (CAMPAIGNS, len(order), 1))
        + (drift * np.arange(len(order)))[None, :, None]
        + (math.log(effect) * is_b)[None, :, None]
    )
    latency = np.exp(log_latency)
    return [stats.speed_report(blocks(order, list(map(tuple, campaign))), margin=0.0).estimate for campaign in latency]


def faster_rate(estimates: list[stats.RatioEstimate], margin: float) -> float:
    return float(np.mean([stats.speed_verdict(est, margin).outcome is Outcome.PASS for est in estimates]))


DEFAULT_ORDER = Protocol.model_fields["order"].default
DEFAULT_MARGIN = Gates().speed_margin


def test_aa_campaigns_claim_faster_at_most_at_the_nominal_rate():
    """A/A: 2 % request noise and 2 % process-to-process noise. With margin 0 the
    rate is the interval's one-sided error, 2.5 %, and must be neither above it
    (an invalid interval) nor far below it (a needlessly wide one), within
    Monte-Carlo slack (measured: 3.0 %; 0.3 % with the default 2 % margin)."""
    estimates = simulate(DEFAULT_ORDER, effect=1.0, request_cv=0.02, block_cv=0.02, seed=1)
    rate = faster_rate(estimates, 0.0)
    assert NOMINAL - SLACK <= rate <= NOMINAL + SLACK, rate
    assert faster_rate(estimates, DEFAULT_MARGIN) <= rate


def test_aa_campaigns_with_drift_stay_at_or_below_nominal():
    """A 1 %-per-block drift (a warming device): AB/BA alternation keeps the estimate unbiased."""
    estimates = simulate(DEFAULT_ORDER, effect=1.0, request_cv=0.02, drift=0.01, seed=2)
    assert faster_rate(estimates, 0.0) <= NOMINAL + SLACK


@pytest.mark.parametrize(
    ("block_cv", "power"),
    [(0.0, 0.95), (0.02, 0.80)],
    ids=["request-noise", "request-and-process-noise"],
)
def test_a_real_ten_percent_speedup_is_found_at_the_default_design(block_cv, power):
    """10 % faster with 2 % request noise: PASS (margin 2 %) in at least 95 % of campaigns
    (measured: 100 %); with another 2 % process-to-process noise, at least 80 % (measured: 90 %)."""
    estimates = simulate(DEFAULT_ORDER, effect=0.90, request_cv=0.02, block_cv=block_cv, seed=3)
    assert faster_rate(estimates, DEFAULT_MARGIN) >= power


def test_abba_alone_would_miss_it_which_is_why_the_default_is_abbaabba():
    """Two pairs leave one degree of freedom (t = 12.71): the same speedup passes only ~38 % of the time."""
    estimates = simulate("ABBA", effect=0.90, request_cv=0.02, seed=4)
    assert faster_rate(estimates, DEFAULT_MARGIN) < 0.8


# -- candidate-only runs: unpaired, not interleaved ---------------------------


def test_unpaired_estimate_finds_a_clear_speedup_and_says_it_is_not_interleaved():
    estimate = stats.unpaired_ratio_estimate([1.00, 1.02, 0.99, 1.01], [0.90, 0.91, 0.92, 0.90])

    assert estimate.ci_high < 0.95 < 1 and estimate.ci_low > 0.85
    assert "NOT AB/BA-interleaved" in estimate.design and "NOT AB/BA-interleaved" in estimate.notes[0]
    assert estimate.min_permutation_p is None and estimate.ratios == ()


def test_unpaired_estimate_with_one_block_per_arm_is_too_small_to_conclude():
    estimate = stats.unpaired_ratio_estimate([1.0], [0.9])

    assert estimate.ci_low is None and estimate.notes[0].startswith("n too small to conclude")
    assert stats.speed_verdict(estimate, 0.02).outcome is Outcome.INCONCLUSIVE


def test_unpaired_speed_report_names_the_stored_baseline():
    blocks = [stats.BlockSamples("A", (1.0, 1.01, 0.99)), stats.BlockSamples("A", (1.02, 1.0, 1.01)),
              stats.BlockSamples("B", (0.8, 0.81, 0.8)), stats.BlockSamples("B", (0.82, 0.8, 0.81))]

    report = stats.unpaired_speed_report(blocks, margin=0.02, baseline_source="old-bundle")

    assert report.verdict.outcome is Outcome.PASS and report.pairs == ()
    assert "old-bundle" in report.verdict.reasons[-1] and "NOT AB/BA-interleaved" in report.verdict.reasons[-1]
