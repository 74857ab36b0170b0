"""h3bench.stats.speed and h3bench.stats.intervals: paired AB/BA block ratios, the one-sided bounds, the margins, the
campaign's error levels, the minimum detectable effect, percentiles, candidate-only runs and the verdict.

Error rates on simulated campaigns are in tests_unit/stats/test_error_rates.py.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy import stats as scipy_stats

from h3bench.errors import UsageError
from h3bench.outcome import Outcome, combine
from h3bench.stats import intervals
from h3bench.stats import speed as stats
from h3bench.stats.speed import BlockSamples

# Student t quantiles from printed tables (e.g. NIST/SEMATECH e-Handbook, Table 1.3.6.7.2).
T_975_DF1 = 12.706
T_975_DF3 = 3.182
T_99375_DF1 = 50.92  # one-sided 0.625 %: the lower bound of 2 durations x 4 candidates

ONE = intervals.error_levels(1, 1)  # a campaign of one duration and one candidate: 2.5 % on both sides
DEFAULT = intervals.error_levels(2, 1)


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


@settings(max_examples=30, deadline=None)
@given(st.lists(st.floats(0.5, 2.0), min_size=8, max_size=8), st.sampled_from(["ABBAABBA", "BAABBAAB", "ABABABAB"]))
def test_the_simulations_pair_blocks_as_a_campaign_does(medians, order):
    """tests_unit/stats/test_error_rates.py pairs log medians with intervals.paired_log_ratios; a campaign pairs blocks."""
    campaign = [math.log(p.ratio) for p in stats.paired_block_ratios(blocks(order, [(m,) for m in medians]))]
    assert intervals.paired_log_ratios(np.log(medians), order) == pytest.approx(campaign, rel=1e-12, abs=1e-12)


def test_interval_matches_a_hand_computation():
    """log r = (-0.146603, -0.149812): mean -0.148207, s = |Δ|/√2 = 0.0022690, h = 12.706·s/√2 = 0.020386."""
    report = stats.speed_report(ABBA_EXAMPLE, margin=0.02, levels=ONE)
    est = report.estimate
    logs = [math.log(9.5 / 11), math.log(9.9 / 11.5)]
    center, s = sum(logs) / 2, abs(logs[0] - logs[1]) / math.sqrt(2)
    h = T_975_DF1 * s / math.sqrt(2)
    assert (est.k, est.df) == (2, 1)
    assert est.geomean == pytest.approx(math.sqrt(9.5 / 11 * 9.9 / 11.5), rel=1e-12)
    assert est.log_se == pytest.approx(s / math.sqrt(2), rel=1e-9)
    assert est.ci_low == pytest.approx(math.exp(center - h), rel=1e-4)
    assert est.ci_high == pytest.approx(math.exp(center + h), rel=1e-4)
    assert (round(est.ci_low, 4), round(est.ci_high, 4)) == (0.8449, 0.8800)
    assert est.min_permutation_p == 0.25  # one-sided 1/2^2
    assert report.verdict.outcome is Outcome.PASS
    assert "the upper bound lies below 1 - margin = 0.9800" in report.verdict.reasons[0]
    assert any("2/2^2 = 0.5 two-sided" in r and "rests on the t model" in r for r in report.verdict.reasons)


def test_the_lower_bound_uses_the_corrected_level():
    """Two durations and four candidates: the lower bound is one-sided at 2.5 % / 8 = 0.3125 %... with k = 2
    pairs (df 1) t_{0.996875} is 101.9; here the levels are checked against scipy's t quantile."""
    levels = intervals.error_levels(2, 4)
    assert (levels.pass_level, levels.fail_level) == (0.025 / 4, 0.025 / 8)
    est = stats.ratio_estimate([0.9, 0.95], levels, 0.02)
    logs = np.log([0.9, 0.95])
    se = logs.std(ddof=1) / math.sqrt(2)
    assert est.ci_low == pytest.approx(math.exp(logs.mean() - scipy_stats.t.ppf(1 - 0.025 / 8, 1) * se), rel=1e-9)
    assert est.ci_high == pytest.approx(math.exp(logs.mean() + scipy_stats.t.ppf(1 - 0.025 / 4, 1) * se), rel=1e-9)
    assert scipy_stats.t.ppf(1 - 0.00625, 1) == pytest.approx(T_99375_DF1, abs=0.01)


def test_arm_summaries_report_raw_samples_and_block_medians():
    report = stats.speed_report(ABBA_EXAMPLE, margin=0.02, levels=ONE)
    base = report.baseline
    assert base.samples == (10, 11, 12, 11, 12, 11.5)
    assert (base.n, base.minimum, base.median, base.maximum) == (6, 10, 11.25, 12)
    assert base.block_medians == (11, 11.5)
    assert report.candidate.block_medians == (9.5, 9.9)
    assert all(p.value is None for p in base.percentiles)


def test_t_quantile_agrees_with_scipy_stats():
    ratios = [0.91, 0.88, 0.93, 0.90]
    est = stats.ratio_estimate(ratios, ONE, 0.02)
    logs = np.log(ratios)
    h = scipy_stats.t.ppf(0.975, 3) * logs.std(ddof=1) / 2
    assert est.ci_high == pytest.approx(math.exp(logs.mean() + h), rel=1e-12)
    assert scipy_stats.t.ppf(0.975, 3) == pytest.approx(T_975_DF3, abs=5e-4)


# ---- error levels


def test_error_levels_are_intersection_union_for_pass_and_bonferroni_for_fail():
    assert (ONE.pass_level, ONE.fail_level) == (0.025, 0.025)
    assert (DEFAULT.pass_level, DEFAULT.fail_level) == (0.025, 0.0125)
    two = intervals.error_levels(2, 2)
    assert (two.pass_level, two.fail_level) == (0.0125, 0.00625)
    assert "each at most 0.025" in two.describe()
    with pytest.raises(ValueError, match="at least one duration"):
        intervals.error_levels(0, 1)


@settings(max_examples=60, deadline=None)
@given(st.lists(st.sampled_from([Outcome.PASS, Outcome.FAIL, Outcome.INCONCLUSIVE]), min_size=1, max_size=4))
def test_combining_codes_over_durations_is_combining_outcomes(parts):
    """The vectorised rule that the simulations use is the verdict's own :func:`h3bench.outcome.combine`."""
    code = {Outcome.PASS: intervals.PASS, Outcome.FAIL: intervals.FAIL, Outcome.INCONCLUSIVE: intervals.INCONCLUSIVE}
    assert int(intervals.combine_codes(np.array([code[p] for p in parts]))) == code[combine(parts)]


# ---- outcomes: each rule with a case where it holds and one where it does not


def test_one_pair_is_n_too_small_to_conclude():
    report = stats.speed_report(blocks("AB", [(10, 10, 10), (5, 5, 5)]), margin=0.02, levels=ONE)
    assert report.estimate.geomean == 0.5
    assert report.estimate.ci_low is None and report.estimate.mde_ratio is None
    assert report.verdict.outcome is Outcome.INCONCLUSIVE
    assert "n too small to conclude" in report.verdict.reasons[0]


def test_no_complete_pair_is_inconclusive():
    verdict = stats.speed_verdict(stats.ratio_estimate([], ONE, 0.02))
    assert verdict.outcome is Outcome.INCONCLUSIVE
    assert verdict.reasons == ("no complete AB/BA pair",)


def test_slower_beyond_the_margin_fails():
    verdict = stats.speed_verdict(stats.ratio_estimate([1.10, 1.12, 1.09, 1.11], DEFAULT, 0.02))
    assert verdict.outcome is Outcome.FAIL
    assert verdict.estimate.ci_low > 1.02
    assert "candidate slower" in verdict.reasons[0] and "above 1 + margin = 1.0200" in verdict.reasons[0]


def test_slower_but_inside_the_margin_is_inconclusive_not_fail():
    """The lower bound lies above 1 but not above 1 + margin: symmetric with "faster"."""
    est = stats.ratio_estimate([1.012, 1.01, 1.013, 1.011], ONE, 0.02)
    assert 1 < est.ci_low < 1.02
    assert stats.speed_verdict(est).outcome is Outcome.INCONCLUSIVE
    assert stats.speed_verdict(stats.ratio_estimate([1.012, 1.01, 1.013, 1.011], ONE, 0.0)).outcome is Outcome.FAIL


def test_faster_by_less_than_the_margin_is_not_a_pass():
    assert stats.speed_verdict(stats.ratio_estimate([0.985, 0.99, 0.987, 0.988], ONE, 0.0)).outcome is Outcome.PASS
    verdict = stats.speed_verdict(stats.ratio_estimate([0.985, 0.99, 0.987, 0.988], ONE, 0.02))
    assert verdict.outcome is Outcome.INCONCLUSIVE
    assert "neither the upper bound below 1 - margin" in verdict.reasons[0]


def test_straddling_interval_is_inconclusive_and_gives_the_minimum_detectable_ratio():
    verdict = stats.speed_verdict(stats.ratio_estimate([0.90, 1.05, 0.95, 1.02], DEFAULT, 0.02))
    assert verdict.outcome is Outcome.INCONCLUSIVE
    assert verdict.estimate.ci_low < 1 < verdict.estimate.ci_high
    mde = verdict.estimate.mde_ratio
    assert f"minimum detectable ratio (80 % power, margin included) at the observed spread: {mde:.4f}" in \
        verdict.reasons
    assert not any("rests on the t model" in r for r in verdict.reasons)  # no t-based claim to qualify


def test_minimum_detectable_ratio_is_the_noncentral_t_solution_margin_included():
    """At the MDE, the noncentral t with δ = -log(MDE / (1 - m)) / se puts 80 % above the critical t."""
    se, df, level = 0.017, 3, 0.025
    mde = float(intervals.mde_ratio(se, df, 0.02, level))
    delta = -math.log(mde / 0.98) / se
    assert scipy_stats.nct.sf(scipy_stats.t.ppf(1 - level, df), df, delta) == pytest.approx(0.80, abs=1e-6)
    shortcut = 0.98 * math.exp(-(scipy_stats.t.ppf(1 - level, df) + scipy_stats.t.ppf(0.8, df)) * se)
    assert mde < shortcut < 0.98  # the shortcut over-promises: it needs a smaller effect than 80 % power does


@pytest.mark.parametrize(("k", "level", "shown"), [(4, 0.025, True), (5, 0.025, True), (6, 0.025, False),
                                                   (6, 0.0125, True), (7, 0.0125, False)])
def test_permutation_floor_is_shown_next_to_a_t_based_pass_when_no_sign_flip_test_could_reach_it(k, level, shown):
    levels = intervals.Levels(level, level, 1, 1)
    verdict = stats.speed_verdict(stats.ratio_estimate([0.90 + 0.001 * i for i in range(k)], levels, 0.02))
    assert verdict.outcome is Outcome.PASS
    notes = [r for r in verdict.reasons if "rests on the t model" in r]
    assert bool(notes) is shown
    if shown:
        assert f"with k = {k} pairs" in notes[0] and f"{1 / 2**k:.3g} one-sided" in notes[0]


def test_equal_ratios_say_the_zero_width_is_not_certainty():
    est = stats.ratio_estimate([0.9, 0.9, 0.9], ONE, 0.02)
    assert est.ci_low == pytest.approx(est.ci_high)
    assert any("not certainty" in note for note in est.notes)


# ---- candidate-only runs: anchored to the day


BABBAB = "BABBAB"


def anchored(candidate: float, anchor: float, stored: list[float], order: str = BABBAB) -> stats.SpeedReport:
    jitter = [1.0, 1.004, 0.997, 1.002, 0.999, 1.003, 0.998, 1.001]
    today = [BlockSamples(r, tuple((candidate if r == "B" else anchor) * jitter[i] * f for f in (1, 1.01, 0.99)))
             for i, r in enumerate(order)]
    return stats.anchored_speed_report(today, stored, margin=0.02, levels=ONE, stored="old-bundle")


def test_candidate_only_compares_with_todays_anchors_and_reports_the_shift():
    report = anchored(90.0, 100.0, [97.0, 98.0, 96.0, 97.0])
    assert report.verdict.outcome is Outcome.PASS and report.pairs == ()
    assert report.estimate.geomean == pytest.approx(0.90, abs=0.01)
    assert report.estimate.shift == pytest.approx(100 / 97, rel=0.01)
    assert "2 of today's anchors (two-sample t)" in report.estimate.design
    assert any("today's anchors are +3." in r and "4 blocks" in r for r in report.verdict.reasons)
    assert any("old-bundle" in r for r in report.verdict.reasons)
    # The stored level cancels: another stored bundle changes the shift report, not the estimate.
    other = anchored(90.0, 100.0, [80.0, 81.0])
    assert other.estimate.ci_high == pytest.approx(report.estimate.ci_high)


def test_candidate_only_without_anchors_is_inconclusive_and_says_why():
    report = anchored(50.0, 100.0, [97.0, 98.0], order="BBBB")
    assert report.verdict.outcome is Outcome.INCONCLUSIVE
    assert report.verdict.reasons[0].startswith("no fresh baseline anchors")


def test_candidate_only_with_a_shift_larger_than_the_effect_is_at_most_inconclusive():
    # Anchors 10 % above the stored baseline, a 5 % effect: today's anchors alone would say PASS.
    report = anchored(95.0, 100.0, [90.0, 91.0, 90.0, 89.0])
    assert report.verdict.outcome is Outcome.INCONCLUSIVE
    assert "moved by +11." in report.verdict.reasons[0] and "more than the effect -5." in report.verdict.reasons[0]
    assert "would say PASS" in report.verdict.reasons[0]
    assert anchored(95.0, 100.0, [99.0, 100.0]).verdict.outcome is Outcome.PASS


def test_candidate_only_with_a_paired_anchored_order_pairs_the_blocks():
    report = anchored(90.0, 100.0, [100.0], order="ABBAABBA")
    assert report.verdict.outcome is Outcome.PASS
    assert report.estimate.k == 4 and report.estimate.design.startswith("AB/BA pairs")


def test_candidate_only_without_a_stored_block_here_reports_no_shift():
    report = anchored(90.0, 100.0, [])
    assert report.verdict.outcome is Outcome.PASS and report.estimate.shift is None
    assert any("no shift is reported" in r for r in report.verdict.reasons)


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
        (lambda: stats.speed_report(blocks("A", [(1,)]), margin=0.02, levels=ONE), "no candidate block"),
        (lambda: stats.ratio_estimate([0.9, 0.0], ONE, 0.02), "positive and finite"),
        (lambda: stats.ratio_estimate([0.9, 0.9], ONE, 1.5), "margin must be in"),
        (lambda: stats.anchored_speed_report(blocks("AA", [(1,), (1,)]), [], margin=0.02, levels=ONE, stored="x"),
         "no candidate block"),
        (lambda: stats.percentile([1.0], 1.0), "q must be in"),
    ],
)
def test_bad_input_is_a_usage_error(make, message):
    with pytest.raises(UsageError, match=message):
        make()


def test_trailing_unpaired_block_counts_in_the_summary_but_not_in_the_ratios():
    report = stats.speed_report(blocks("ABB", [(10,), (9,), (8,)]), margin=0.02, levels=ONE)
    assert len(report.pairs) == 1
    assert report.candidate.n == 2


# ---- invariants

ratio_lists = st.lists(st.floats(0.5, 2.0), min_size=2, max_size=8)


@settings(max_examples=50, deadline=None)
@given(ratio_lists)
def test_bounds_contain_the_estimate_and_widen_with_stricter_levels(ratios):
    loose, strict = stats.ratio_estimate(ratios, ONE, 0.02), stats.ratio_estimate(ratios, intervals.error_levels(2, 2), 0.02)
    assert strict.ci_low <= loose.ci_low <= loose.geomean <= loose.ci_high <= strict.ci_high
    assert loose.geomean == pytest.approx(strict.geomean)


@settings(max_examples=50, deadline=None)
@given(ratio_lists)
def test_swapping_the_arms_inverts_the_ratio_and_its_interval(ratios):
    forward, backward = stats.ratio_estimate(ratios, ONE, 0.02), stats.ratio_estimate([1 / r for r in ratios], ONE, 0.02)
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
    one, two = stats.speed_report(raw, margin=0.02, levels=DEFAULT), stats.speed_report(scaled, margin=0.02, levels=DEFAULT)
    assert two.estimate.ci_low == pytest.approx(one.estimate.ci_low, rel=1e-9)
    assert two.estimate.ci_high == pytest.approx(one.estimate.ci_high, rel=1e-9)
    assert two.verdict.outcome is one.verdict.outcome
