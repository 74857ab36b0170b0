"""The stand-in H3 engine's work (conformance/standin.py): shapes, failures, stage durations, abort.

It runs inside upstream's app in the conformance environment; here it runs
in h3bench's own, on the values upstream's serving layer hands the engine.
"""

from __future__ import annotations

import threading
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from conformance.standin import (
    FAIL_KEY,
    EngineInputs,
    H3Crash,
    H3Refusal,
    StandInSettings,
    file_digest,
    output_shape,
    run_engine_request,
)
from h3bench import media
from h3bench.h3 import STAGE_KEYS, audio_sample_count, frame_count

# What upstream hands the engine for h3bench's client form at 128x96 and 4 s: width and height from the form,
# fps 24 (sent), num_frames 1 (OmniDiffusionSamplingParams' default: neither seconds nor num_frames sent).
CLIENT = EngineInputs(prompt="p", seed=0, width=128, height=96, num_frames=1, fps=24.0, num_inference_steps=4,
                      extra_args={"task": "ref2va", "duration": 4.0, "aspect_ratio": "auto"}, videos=1, audios=1,
                      reference_digests=("video:1", "audio:2"))
INSTANT = StandInSettings(time_scale=0.0, run_to_run_noise=0.0)


def with_args(**extra_args: object) -> EngineInputs:
    return EngineInputs(**{**CLIENT.__dict__, "extra_args": {**CLIENT.extra_args, **extra_args}})


def test_the_client_form_renders_h3s_shape() -> None:
    shape = output_shape(CLIENT)
    assert (shape.width, shape.height, shape.frames) == (128, 96, 107)


@settings(max_examples=40, deadline=None)
@given(st.floats(min_value=4.0, max_value=15.0, allow_nan=False))
def test_every_duration_h3_takes_gives_17n_plus_5_frames(seconds: float) -> None:
    frames = output_shape(with_args(duration=seconds)).frames
    assert frames % 17 == 5 and frames >= round(seconds * 24) and frames == frame_count(seconds)


@pytest.mark.parametrize(
    ("inputs", "message"),
    [
        (with_args(task="t2va"), "checkpoint partition 'ref2va' supports ['ref2va'], got task='t2va'"),
        (with_args(duration=999), "MiniMax H3 output duration must be in [4, 15] seconds, got 999.0"),
        (with_args(duration=3.9), "MiniMax H3 output duration must be in [4, 15] seconds, got 3.9"),
        (EngineInputs(**{**CLIENT.__dict__, "videos": 0, "audios": 1}),
         "ref2va requires at least one image or video reference"),
        (EngineInputs(**{**CLIENT.__dict__, "fps": 25.0}), "MiniMax H3 output fps is fixed at 24"),
        (with_args(**{FAIL_KEY: "segfault"}), "extra_params.h3bench_fail must be 'oom', got 'segfault'"),
    ],
)
def test_h3_refuses_as_its_pipeline_does(inputs: EngineInputs, message: str) -> None:
    with pytest.raises(H3Refusal) as refused:
        output_shape(inputs)
    assert refused.value.message == message and refused.value.status_code == 400


def test_an_out_of_memory_is_not_a_client_error() -> None:
    with pytest.raises(H3Crash, match="out of memory"):
        output_shape(with_args(**{FAIL_KEY: "oom"}))


def test_a_request_renders_a_real_mp4_with_the_profilers_keys(tmp_path: Path) -> None:
    output = run_engine_request(CLIENT, INSTANT, np.random.default_rng(0))
    assert (output.width, output.height, output.frames) == (128, 96, 107)
    assert output.audio_samples == audio_sample_count(107)
    assert tuple(output.stage_durations) == STAGE_KEYS
    assert output.peak_memory_mb > 0
    path = tmp_path / "out.mp4"
    path.write_bytes(output.mp4)
    info = media.probe(path)
    assert info.video is not None and info.audio is not None
    assert (info.video.width, info.video.height, info.video.frames) == (128, 96, 107)
    assert (info.audio.sample_rate, info.audio.channels) == (32_000, 2)


def test_the_same_request_gives_the_same_bytes_and_the_seed_changes_them() -> None:
    rng = np.random.default_rng(0)
    first, again = (run_engine_request(CLIENT, INSTANT, rng).mp4 for _ in range(2))
    other = run_engine_request(EngineInputs(**{**CLIENT.__dict__, "seed": 1}), INSTANT, rng).mp4
    assert first == again and first != other


def test_the_process_seed_adds_run_to_run_noise() -> None:
    noisy = [run_engine_request(CLIENT, StandInSettings(time_scale=0.0, process_seed=seed),
                                np.random.default_rng(0)).mp4 for seed in (1, 2)]
    assert noisy[0] != noisy[1]


def test_the_stages_sleep_at_least_the_scaled_model() -> None:
    """Each stage lasts at least the simulator's modelled time x time_scale (sleeps only run late, never early)."""
    for scale in (0.0002, 0.0004):
        chosen = StandInSettings(time_scale=scale, jitter_cv=0.0, run_to_run_noise=0.0)
        plan = chosen.profile().plan(107, np.random.default_rng(0), num_inference_steps=4)
        stages = run_engine_request(CLIENT, chosen, np.random.default_rng(0)).stage_durations
        assert stages["MiniMaxH3Pipeline.diffuse"] >= sum(plan.step_s) > 0
        assert stages["MiniMaxH3Pipeline._encode_local_media"] >= plan.encode_media_s > 0
        assert stages["MiniMaxH3Pipeline.decode"] >= plan.video_decode_s + plan.audio_decode_s > 0
    faster = StandInSettings(time_scale=0.0002, jitter_cv=0.0).profile().plan(107, np.random.default_rng(0))
    slower = StandInSettings(time_scale=0.0004, jitter_cv=0.0).profile().plan(107, np.random.default_rng(0))
    assert slower.total_s == pytest.approx(2 * faster.total_s)  # an arm's speed is its time scale


def test_an_aborted_request_stops() -> None:
    cancel = threading.Event()
    cancel.set()
    with pytest.raises(InterruptedError):
        run_engine_request(CLIENT, StandInSettings(time_scale=1.0), np.random.default_rng(0), cancel=cancel)


@pytest.mark.parametrize(("field", "value"), [("time_scale", -1.0), ("jitter_cv", 1.0), ("run_to_run_noise", -0.1)])
def test_settings_refuse_bad_values(field: str, value: float) -> None:
    with pytest.raises(ValueError, match=field):
        StandInSettings(**{field: value})


def test_a_reference_digest_names_its_kind_and_bytes(tmp_path: Path) -> None:
    path = tmp_path / "ref.mp4"
    path.write_bytes(b"abc")
    assert file_digest(path, "video") == "video:ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"
