"""``h3bench sim fit``: a profile fitted from sealed bundles recovers the profile that produced them.

The bundles are real sealed ones (:mod:`tests_unit.bundlesim`) whose requests are drawn from a known
profile through :meth:`SimProfile.plan`, the plan every simulated request sleeps (warmup: the
process's first request; measured: its later ones), with the start-up phases a simulated server logs.
"""

from __future__ import annotations

import tomllib
from pathlib import Path

import numpy as np
import pytest

from h3bench.cli import main
from h3bench.course.cases import Block
from h3bench.errors import UsageError
from h3bench.evidence.codec import to_json
from h3bench.h3 import STAGE_PREFIX, frame_count
from h3bench.plan.profilefit import fit_profile
from h3bench.runspec import load_runspec, parse_runspec
from h3bench.server.startup import CompileWhere, StartupPhases
from h3bench.sim.profile import SimProfile, load_profile
from h3bench.sim.stageplan import StagePlan
from tests_unit.bundlesim import FIXTURES, write_bundle

SPEC = load_runspec(FIXTURES / "sim.toml")
SCALE = 0.001
KNOWN = SimProfile(time_scale=SCALE, jitter_cv=0.03, thermal_boost=0.08, thermal_decay=0.3, load_s=1800.0,
                   audio_decode_share=0.025, step_s=(10.0, 80.0), text_encode_s=(1.0, 2.0))


def _stages(plan: StagePlan) -> dict[str, float]:
    decode = plan.video_decode_s + plan.audio_decode_s
    return {STAGE_PREFIX + k: v for k, v in {
        "encode_prompt": plan.encode_prompt_s, "_encode_local_media": plan.encode_media_s,
        "diffuse": sum(plan.step_s), "decode": decode, "video_vae.decode_latent": plan.video_decode_s,
        "audio_vae.decode_latent": plan.audio_decode_s}.items()}


def simulated_bundle(root: Path, profile: SimProfile, seed: int = 7) -> Path:
    rng = np.random.default_rng(seed)
    plans: dict[tuple[str, int], StagePlan] = {}

    def plan(block: Block, index: int) -> StagePlan:  # the warmup (index -1) is the process's first request
        key = (block.id, index)
        if key not in plans:
            plans[key] = profile.plan(frame_count(int(block.duration)), rng, num_inference_steps=SPEC.workload.steps,
                                      nth=index + 2)
        return plans[key]

    def phases(block: Block) -> dict[str, object]:
        load = profile.load_s * SCALE
        return {"startup_phases": to_json(StartupPhases(ready_s=load + 0.5, weight_load_s=load,
                                                        compile=CompileWhere.NONE))}

    return write_bundle(root, SPEC, lambda block, index: plan(block, index).total_s, started_at="2026-12-01T00:00:00Z",
                        lifecycle=phases, sample=lambda block, index: {"stage_durations": _stages(plan(block, index))})


def test_a_fit_recovers_the_profile_that_made_the_bundle(tmp_path: Path) -> None:
    """Within the stated tolerance: 2 % on each keyed anchor, 0.02 on the cold-card boost and the DiT's spread."""
    bundle = simulated_bundle(tmp_path / "b", KNOWN)
    out = tmp_path / "fitted.toml"
    assert main(["sim", "fit", str(bundle), "--out", str(out), "--time-scale", str(SCALE)]) == 0
    document = tomllib.loads(out.read_text())
    assert document["version"] == 1 and str(bundle) in document["source"]
    fitted = load_profile(out, "sim")
    for name in ("step_s", "text_encode_s", "media_encode_s", "decode_s"):
        assert getattr(fitted, name) == pytest.approx(getattr(KNOWN, name), rel=0.02), name
    # Preprocessing and muxing have no profiler key: only their sum is recovered.
    for i in range(2):
        assert fitted.preprocess_s[i] + fitted.mux_s[i] == pytest.approx(KNOWN.preprocess_s[i] + KNOWN.mux_s[i],
                                                                          rel=0.05)
    assert fitted.audio_decode_share == pytest.approx(0.025, abs=0.001)
    assert fitted.thermal_boost == pytest.approx(0.08, abs=0.02) and fitted.compile == "none"
    assert fitted.jitter_cv == pytest.approx(0.03, abs=0.02)
    assert fitted.load_s == pytest.approx(1800.0) and fitted.time_scale == SCALE


def test_a_first_request_slower_than_steady_is_fitted_as_a_first_request_compile(tmp_path: Path) -> None:
    compiled = KNOWN.model_copy(update={"thermal_boost": 0.0, "compile": "first_request", "compile_s": 300.0})
    fitted = fit_profile([simulated_bundle(tmp_path / "b", compiled)], time_scale=SCALE).table
    assert fitted["compile"] == "first_request" and fitted["compile_s"] == pytest.approx(300.0, rel=0.1)
    assert "thermal_boost" not in fitted


def test_a_bundle_without_both_anchors_or_the_arm_is_refused(tmp_path: Path) -> None:
    data = SPEC.model_dump(mode="json")
    data["workload"]["durations"] = [5]
    short = parse_runspec({**data, "hints": None}, source="t")
    five = write_bundle(tmp_path / "five", short, lambda block, index: 1.0, started_at="2026-12-01T00:00:00Z")
    with pytest.raises(UsageError, match="no measured request of arm 'baseline' at 15 s"):
        fit_profile([five])
    bundle = simulated_bundle(tmp_path / "b", KNOWN)
    with pytest.raises(UsageError, match="its spec has no arm 'nosuch'"):
        fit_profile([bundle], arm="nosuch")
    with pytest.raises(UsageError, match="must be positive"):
        fit_profile([bundle], time_scale=0)
