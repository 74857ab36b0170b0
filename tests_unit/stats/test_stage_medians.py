"""The stage line of the summary: a derived remainder is a value only when the samples are consistent."""

from __future__ import annotations

from h3bench.outcome import Outcome
from h3bench.report.terminal import stage_text
from h3bench.stats.stages import stage_median_values
from h3bench.verdict.judge import Judge, PairOutcome
from h3bench.verdict.verdicts import ArmStats

STAGES = {"MiniMaxH3Pipeline.encode_prompt": 0.1, "MiniMaxH3Pipeline.diffuse": 3.0}


def line(*e2e: float) -> str:
    medians, negative = stage_median_values((value, STAGES) for value in e2e)
    return stage_text(ArmStats("baseline", len(e2e), 0.0, (), tuple(medians.items()), negative))


def test_the_remainder_of_consistent_samples_is_their_median():
    text = line(3.2, 3.3, 3.4)

    assert "encode_prompt 0.100" in text and "diffuse 3.000" in text
    assert "mux+transfer (derived) 0.200" in text and "DATA ERROR" not in text


def test_an_e2e_shorter_than_its_stages_is_a_data_error_not_a_negative_time():
    # As after a tampered samples.jsonl whose E2E was halved.
    text = line(3.2, 1.6, 3.4)

    assert "mux+transfer (derived): DATA ERROR, E2E shorter than its stages in 1 request(s)" in text
    assert "-" not in text.replace("mux+transfer", "")


def test_the_worst_gate_values_are_the_lowest_highest_or_farthest_from_one():
    def pair(ssim: float, lpips: float, rms: float) -> PairOutcome:
        checks = [{"name": "ssim", "value": ssim, "threshold": ">= 0.97"},
                  {"name": "lpips", "value": lpips, "threshold": "<= 0.2"},
                  {"name": "audio_rms_ratio", "value": rms, "threshold": "in [0.5, 2]"},
                  {"name": "frame_count", "value": 124, "threshold": "== 124 (baseline)"}]
        return PairOutcome("p", "clean", 5.0, Outcome.PASS, (), (), {"checks": checks})

    worst = Judge.worst_values([pair(0.99, 0.01, 1.1), pair(0.98, 0.03, 0.8), pair(0.995, 0.02, 1.2)])

    # 0.8 is farther from 1 than 1.2 on a log scale (1/0.8 = 1.25).
    assert [(v.name, v.value, v.threshold) for v in worst] == [
        ("ssim", 0.98, ">= 0.97"), ("lpips", 0.03, "<= 0.2"), ("audio_rms_ratio", 0.8, "in [0.5, 2]")]
    assert Judge.worst_values([]) == ()
