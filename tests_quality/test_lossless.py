"""Lossless mode: candidate deviations against the baseline's own variability (REFERENCE §7).

Control pairs are baseline outputs of the same inputs from different server
processes. Their worst deviation, with the RunSpec's tolerance, is the
envelope. Bitwise-equal decoded media is EXACT; inside the envelope is PASS;
too few controls or a missing measurement is INCONCLUSIVE, because a
perceptual threshold alone is never called lossless.
"""

from __future__ import annotations

import pytest

pytestmark = pytest.mark.quality


def test_candidate_within_control_envelope(campaign, candidate_workload):
    if not campaign.lossless_enabled:
        pytest.skip("lossless mode is off: set gates.lossless in the RunSpec or pass --lossless")
    verdict = campaign.lossless(candidate_workload)
    assert verdict.outcome in ("EXACT", "PASS"), f"lossless {verdict.outcome}:\n" + "\n".join(verdict.reasons)
