"""The stage line of the summary: a derived remainder is a value only when the samples are consistent."""

from __future__ import annotations

from h3bench.records import Sample
from h3bench.summary import stage_medians

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
