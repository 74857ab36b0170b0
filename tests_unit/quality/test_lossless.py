"""Lossless mode: the process-relabelling rank test, its feasibility, its words, and real files.

Error rates on simulated campaigns are in tests_unit/stats/test_error_rates.py.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy import stats as scipy_stats

from h3bench import media, quality
from h3bench.quality import lossless
from h3bench.stats import intervals

METRICS = ("ssim", "psnr_db", "audio_spectral_cosine", "audio_rms_ratio")


def matrices(nb, nc, *, base=0.0, cross=0.0, cc=0.0, noise=0.0, seed=0, metrics=METRICS):
    """Per metric an ``(1, N, N)`` matrix: baseline pairs ``base``, cross pairs ``cross``, candidate pairs ``cc``,
    each times lognormal ``noise``."""
    rng = np.random.default_rng(seed)
    n = nb + nc
    rows, cols = lossless.pair_indices(n)
    out = {}
    for m in metrics:
        mat = np.full((1, n, n), np.nan)
        value = np.where((rows >= nb) & (cols >= nb), cc, np.where((rows < nb) ^ (cols < nb), cross, base))
        mat[0, rows, cols] = mat[0, cols, rows] = value * np.exp(noise * rng.standard_normal(len(rows)))
        out[m] = mat
    return out


def judge(mats, nb, **kwargs):
    return lossless.judge(mats, nb, exact=kwargs.pop("exact", False), metrics=kwargs.pop("metrics", METRICS), **kwargs)


def relabelled_pvalues(mats, nb, nc):
    """The test's p under each labeling in turn: the processes reordered so that its candidates come last."""
    found = []
    for chosen in lossless.candidate_labelings(nb, nc):
        order = np.r_[np.flatnonzero(~chosen), np.flatnonzero(chosen)]
        relabelled = np.stack([lossless.matrix_to_pairs(mats[m][:, order][:, :, order]) for m in METRICS])
        found.append(float(lossless.permutation_test(relabelled, nb, nc)[0]))
    return found


# ---- the test is exact


def test_no_more_than_floor_alpha_l_labelings_can_reach_alpha():
    """Whichever of the 70 labelings of 4 + 4 processes is the true one, at most floor(0.05 · 70) = 3 reach
    p ≤ 0.05: relabelling the processes of one data set runs the test on every labeling in turn."""
    found = relabelled_pvalues(matrices(4, 4, base=1, cross=1, cc=1, noise=1.0, seed=9), 4, 4)
    assert len(found) == 70
    assert sum(p <= 0.05 for p in found) <= math.floor(0.05 * 70)
    assert min(found) >= 1 / 70


def test_mid_ranks_match_scipy():
    x = np.array([[3.0, 1.0, 3.0, 2.0, 0.0], [1.0, 1.0, 1.0, 1.0, 1.0]])
    assert np.array_equal(lossless.mid_ranks(x), scipy_stats.rankdata(x, axis=-1))


def test_random_labelings_when_exhaustive_is_too_many():
    labelings = lossless.candidate_labelings(6, 4, max_exact=100, n_random=499)
    assert labelings.shape == (500, 10) and (labelings.sum(axis=1) == 4).all()
    assert labelings[0].tolist() == [False] * 6 + [True] * 4
    with pytest.raises(ValueError, match="at least 2 baseline processes"):
        lossless.candidate_labelings(1, 4)


# ---- feasibility


def test_feasibility_of_the_designs():
    four = lossless.lossless_feasibility(4, 4, 0.05, 5)
    assert (four.feasible, four.min_p, four.needed_baseline_blocks) == (False, 1 / 70, 2)
    assert four.power < 0.9
    six = lossless.lossless_feasibility(6, 4, 0.05, 5)
    assert six.feasible and six.needed_baseline_blocks == 0 and math.isclose(six.min_p, 1 / 210)
    assert lossless.lossless_feasibility(2, 2, 0.05, 5).needed_baseline_blocks == 6  # 8 baseline for 2 candidates


# ---- the words


def test_a_candidate_like_another_baseline_process_passes_and_says_what_it_counted():
    v = judge(matrices(6, 4, base=1, cross=1, cc=1, noise=0.3, seed=3), 6)
    assert v.outcome == "PASS", v.reasons
    assert v.reasons[0].startswith("no deviation beyond the control variability detected (6 baseline + 4 candidate "
                                   "server processes (the independent units; their 45 pairs are not independent)")
    assert "exact process-relabelling rank test, max-T over 4 metrics, 210 labelings, p = " in v.reasons[0]
    assert v.reasons[1] == "this is not a proof of identical output"
    assert (v.baseline_processes, v.candidate_processes, v.labelings) == (6, 4, 210)


def test_a_candidate_deviating_on_one_metric_fails_and_names_it():
    mats = matrices(6, 4, base=1, cross=1, cc=1, noise=0.3, seed=4)
    rows, cols = lossless.pair_indices(10)
    cross = (rows < 6) ^ (cols < 6)
    mats["audio_rms_ratio"][0, rows[cross], cols[cross]] *= 5
    mats["audio_rms_ratio"][0, cols[cross], rows[cross]] *= 5
    v = judge(mats, 6)
    assert v.outcome == "FAIL" and v.reasons[0].startswith("deviation beyond the control variability")
    assert any(r.startswith("audio_rms_ratio: candidate-baseline median") for r in v.reasons)
    assert not any(r.startswith("ssim:") for r in v.reasons)
    assert v.p_value == pytest.approx(1 / 210) and v.p_by_metric["ssim"] > 0.05


def test_a_candidate_that_only_adds_nondeterminism_fails():
    """Candidate processes twice as noisy: cross pairs 1.5x, candidate pairs 2x (ANOSIM's blind spot)."""
    v = judge(matrices(6, 4, base=1, cross=1.5, cc=2, noise=0.1, seed=5), 6)
    assert v.outcome == "FAIL"


def test_a_deterministic_baseline_and_a_tiny_reproducible_change_fails_and_says_why():
    v = judge(matrices(6, 4, cross=1e-9), 6)
    assert v.outcome == "FAIL" and v.deterministic_baseline
    assert v.reasons[0].startswith("deterministic baseline: all 15 pairs of the 6 baseline processes have deviation "
                                   "exactly 0 on every metric")
    assert "ssim 1e-09, 1e-09" in v.reasons[0]
    assert v.p_value == pytest.approx(1 / 210)


def test_too_few_processes_is_inconclusive_and_names_the_blocks_needed():
    v = judge(matrices(4, 4, cross=1e-9), 4)
    assert v.outcome == "INCONCLUSIVE" and v.deterministic_baseline
    assert "4 baseline + 4 candidate server processes" in v.reasons[0]
    assert "70 labelings, smallest p 0.0143" in v.reasons[0]
    assert "2 more baseline block(s) per duration would be needed" in v.reasons[0]
    assert v.reasons[1].startswith("deterministic baseline")


def test_bitwise_equal_outputs_are_exact_and_an_unmeasured_metric_is_inconclusive():
    assert judge(matrices(6, 4), 6, exact=True).label == "EXACT"
    mats = matrices(6, 4, base=1, cross=1, cc=1, noise=0.3)
    mats["ssim"][0, 0, 7] = mats["ssim"][0, 7, 0] = np.nan
    v = judge(mats, 6)
    assert v.outcome == "INCONCLUSIVE" and "not measured for every process pair: ssim" in v.reasons[0]
    v = judge(matrices(6, 4, base=1, cross=1, cc=1), 6, metrics=(*METRICS, "lpips"))
    assert v.outcome == "INCONCLUSIVE" and "lpips" in v.reasons[0] and "never called lossless" in v.reasons[0]
    assert judge({}, 6).reasons == ("no candidate output was compared",)


def test_caveats_travel_with_the_verdict_and_it_is_json():
    v = judge(matrices(6, 4, base=1, cross=1, cc=1, noise=0.3, seed=3), 6, caveats=("cross-day",))
    assert v.reasons[-1] == "cross-day"
    data = v.to_dict()
    assert data["outcome"] == "PASS" and data["feasibility"]["feasible"] and data["p_by_metric"]


def test_the_verdict_decides_as_the_vectorised_rule_does():
    rng = np.random.default_rng(6)
    for seed in range(20):
        mats = matrices(6, 4, base=1, cross=float(rng.choice([1.0, 3.0])), cc=1, noise=1.0, seed=seed)
        pairs = np.stack([lossless.matrix_to_pairs(mats[m]) for m in METRICS])
        code = int(lossless.relabelling_outcomes(pairs, 6, 4)[0])
        assert judge(mats, 6).outcome == {intervals.PASS: "PASS", intervals.FAIL: "FAIL"}[code]


# ---- on real files


def test_deviations_are_zero_for_identical_media(make_mp4):
    path = make_mp4("base.mp4", noise=2.0, noise_seed=100)
    report = quality.compare(path, path, measure_lpips=False)
    assert {k: v for k, v in lossless.deviations(report).items() if k != "lpips"} == dict.fromkeys(METRICS, 0.0)


@pytest.mark.slow
def test_on_real_files_the_test_is_exact_and_a_noisier_candidate_fails(make_mp4):
    """Six baseline "processes" and four candidates: MP4s with independent noise of sigma 2, or 4 for the
    candidates. (libx264 does not encode these tiny clips bit-identically from run to run, so whether one draw
    of sigma-2 candidates passes is itself random; exactness is checked over every labeling instead.)"""

    def output(name, sigma, seed):
        return make_mp4(name, frames=6, width=64, height=64, noise=sigma, noise_seed=seed, audio_samples=4000)

    files = [output(f"b{i}.mp4", 2.0, 100 + i) for i in range(6)] + [output(f"n{i}.mp4", 4.0, 300 + i) for i in range(4)]
    mats = {m: np.full((1, 10, 10), np.nan) for m in METRICS}
    for i, j in zip(*lossless.pair_indices(10), strict=True):
        for m, value in lossless.deviations(quality.compare(files[i], files[j], measure_lpips=False)).items():
            if m in mats:
                mats[m][0, i, j] = mats[m][0, j, i] = value
    equal = all(media.decoded_digest(files[0]) == media.decoded_digest(f) for f in files[6:])
    noisier = lossless.judge(mats, 6, exact=equal, metrics=METRICS)
    assert noisier.outcome == "FAIL" and noisier.p_value == pytest.approx(1 / 210)
    assert any(r.startswith("ssim:") for r in noisier.reasons) and any(r.startswith("psnr_db:") for r in noisier.reasons)
    # Whatever the data, at most floor(0.05 · 210) = 10 of the 210 labelings reach p ≤ 0.05.
    assert sum(p <= 0.05 for p in relabelled_pvalues(mats, 6, 4)) <= 10
