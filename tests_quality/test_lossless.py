"""Lossless mode: the candidate's server processes against the baseline's own variability (campaign #293's protocol).

Every baseline process of the duration (the lossless control blocks, the A
blocks of every series) and every candidate process are compared pairwise,
and an exact process-relabelling rank test asks whether the candidate's
processes stand out. Bitwise-equal decoded media is EXACT; PASS means "no
deviation beyond the control variability detected", never "identical"; too
few processes or a missing measurement is INCONCLUSIVE, because a perceptual
threshold alone is never called lossless.
"""

from __future__ import annotations

import pytest

pytestmark = pytest.mark.quality


def test_candidate_within_control_variability(campaign, candidate_workload):
    if not campaign.judge.lossless_enabled:
        pytest.skip("lossless mode is off: set gates.lossless in the RunSpec or pass --lossless")
    verdict = campaign.judge.lossless(candidate_workload)
    assert verdict.outcome == "PASS", f"lossless {verdict.label}:\n" + "\n".join(verdict.reasons)
