"""The shipped simulator profiles (fixtures/runspecs/profiles/) against the published stage tables they model.

Each profile is run through :meth:`SimProfile.plan` (what every simulated request sleeps) without
jitter, and its stage figures or shares are held to the published ones: 4x B300 Ref2VA 15 s
(E2E 727.9 s, DiT 719.0 s, video decode 3.09 s, audio decode 79.3 ms; vLLM-Omni #5750), the
single-card 950PR (denoise 93.2 %, handoff 5.3 %), 8x A2 (denoise 88.8 % at 5 s to 94.4 % at 15 s).
"""

from __future__ import annotations

import tomllib
from pathlib import Path

import numpy as np
import pytest

from h3bench.h3 import frame_count
from h3bench.sim import parse_args
from h3bench.sim.profile import SimProfile, load_profile

PROFILES = Path(__file__).resolve().parents[2] / "fixtures" / "runspecs" / "profiles"


def steady(name: str, duration: int, **changes: object):
    profile = load_profile(PROFILES / name, "sim").model_copy(update={"jitter_cv": 0.0, "time_scale": 1.0, **changes})
    return profile.plan(frame_count(duration), np.random.default_rng(0))


def test_every_shipped_profile_is_versioned_and_loads_as_the_simulator_reads_it() -> None:
    shipped = sorted(PROFILES.glob("*.toml"))
    assert [p.name for p in shipped] == ["950pr-x1-ref2va.toml", "a2-x8-ref2va.toml", "b300-x4-ref2va.toml"]
    for path in shipped:
        document = tomllib.loads(path.read_text())
        assert document["version"] == 1 and document["source"]
        assert isinstance(parse_args(["--profile", str(path), "--profile-table", "sim"]).profile, SimProfile)


def test_b300_holds_the_published_15_s_stage_table() -> None:
    plan = steady("b300-x4-ref2va.toml", 15)
    assert plan.total_s == pytest.approx(727.9, rel=0.001)
    assert sum(plan.step_s) == pytest.approx(719.0, rel=0.001)
    assert plan.video_decode_s == pytest.approx(3.09, rel=0.001)
    assert plan.audio_decode_s == pytest.approx(0.0793, rel=0.002)
    # Audio decode is 2.5 % of decode there, not the 950PR default's 5 %.
    assert plan.audio_decode_s / (plan.audio_decode_s + plan.video_decode_s) == pytest.approx(0.025, abs=0.001)


@pytest.mark.parametrize("duration", [5, 15])
def test_the_single_card_950pr_spends_its_published_shares_in_denoise_and_the_handoff(duration: int) -> None:
    plan = steady("950pr-x1-ref2va.toml", duration)
    assert sum(plan.step_s) / plan.total_s == pytest.approx(0.932, abs=0.001)
    assert plan.handoff_s / plan.total_s == pytest.approx(0.053, abs=0.001)
    # Without its handoff the same profile is another engine: the shares move.
    assert sum(plan.step_s) / steady("950pr-x1-ref2va.toml", duration, handoff_share=0.0).total_s > 0.98


@pytest.mark.parametrize(("duration", "share", "e2e"), [(5, 0.888, 407.27), (15, 0.944, 3216.5)])
def test_eight_a2_spend_the_published_range_in_denoise(duration: int, share: float, e2e: float) -> None:
    plan = steady("a2-x8-ref2va.toml", duration)
    assert sum(plan.step_s) / plan.total_s == pytest.approx(share, abs=0.001)
    assert plan.total_s == pytest.approx(e2e, rel=0.001)
