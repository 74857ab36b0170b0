"""The stage line of the summary: a derived remainder is a value only when the samples are consistent."""

from __future__ import annotations

from h3bench.report.terminal import stage_medians
from h3bench.run.records import Sample

STAGES = {"MiniMaxH3Pipeline.encode_prompt": 0.1, "MiniMaxH3Pipeline.diffuse": 3.0}


def sample(e2e_s: float) -> Sample:
    return Sample("5s-clean-1A-baseline", "measured", 0, 0, True, e2e_s=e2e_s, stage_durations=dict(STAGES))


def test_the_remainder_of_consistent_samples_is_their_median():
    line = stage_medians([sample(3.2), sample(3.3), sample(3.4)])

    assert "encode_prompt 0.100" in line and "diffuse 3.000" in line
    assert "mux+transfer (derived) 0.200" in line and "DATA ERROR" not in line


def test_an_e2e_shorter_than_its_stages_is_a_data_error_not_a_negative_time():
    # As after a tampered samples.jsonl whose E2E was halved.
    line = stage_medians([sample(3.2), sample(1.6), sample(3.4)])

    assert "mux+transfer (derived): DATA ERROR, E2E shorter than its stages in 1 request(s)" in line
    assert "-" not in line.replace("mux+transfer", "")


def test_the_worst_gate_values_are_the_lowest_highest_or_farthest_from_one():
    from h3bench.outcome import Outcome
    from h3bench.report.terminal import worst_gate_values
    from h3bench.verdict.judge import PairOutcome

    def pair(ssim: float, lpips: float, rms: float) -> PairOutcome:
        checks = [{"name": "ssim", "value": ssim, "threshold": ">= 0.97"},
                  {"name": "lpips", "value": lpips, "threshold": "<= 0.2"},
                  {"name": "audio_rms_ratio", "value": rms, "threshold": "in [0.5, 2]"},
                  {"name": "frame_count", "value": 124, "threshold": "== 124 (baseline)"}]
        return PairOutcome("p", "clean", 5.0, Outcome.PASS, (), (), {"checks": checks})

    line = worst_gate_values([pair(0.99, 0.01, 1.1), pair(0.98, 0.03, 0.8), pair(0.995, 0.02, 1.2)])

    # 0.8 is farther from 1 than 1.2 on a log scale (1/0.8 = 1.25).
    assert line == "ssim 0.98 (>= 0.97), lpips 0.03 (<= 0.2), audio_rms_ratio 0.8 (in [0.5, 2])"
    assert worst_gate_values([]) == ""
