"""The simulator's content: H3's shapes, determinism, and perturbations that fail the gate they aim at.

Metrics are the project's own (h3bench.metrics: ffmpeg's SSIM/PSNR definitions
and upstream's audio formulas), applied to decoded MP4s as the gates apply them.
"""

from __future__ import annotations

import hashlib
import itertools
import threading
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from h3bench import media
from h3bench.h3 import audio_sample_count, frame_count, latent_frames
from h3bench.metrics.audio import rms_ratio, spectral_cosine, trim_to
from h3bench.metrics.ssim_psnr import compare_video
from h3bench.sim.content import ContentSpec, Perturbation, audio_track, content_key, render, video_frames

SSIM_MIN, PSNR_MIN, COSINE_MIN, RMS_RANGE = 0.97, 34.0, 0.80, (0.5, 2.0)


def spec(
    width: int = 256, height: int = 160, frames: int = 22, *, seed: int = 0, prompt: str = "a cat", refs=("video:ab",)
) -> ContentSpec:
    key = content_key(seed=seed, prompt=prompt, reference_digests=refs, width=width, height=height, frames=frames)
    return ContentSpec(width, height, frames, audio_sample_count(frames), key)


def decoded_hash(path: Path) -> str:
    digest = hashlib.sha256()
    for frame in media.iter_yuv_frames(path):
        digest.update(frame.y.tobytes() + frame.u.tobytes() + frame.v.tobytes())
    return digest.hexdigest()


def audio_metrics(baseline: Path, candidate: Path, samples: int) -> tuple[float, float]:
    a, _ = media.read_pcm(baseline)
    b, _ = media.read_pcm(candidate)
    a, b = trim_to(a, samples), trim_to(b, samples)
    return spectral_cosine(a, b), rms_ratio(a, b)


# -- shapes -------------------------------------------------------------------


@pytest.mark.parametrize(
    ("duration", "frames", "latents", "samples"),
    [
        (4, 107, 32, 142_400),
        (5, 124, 37, 165_600),
        (8, 192, 57, 256_000),
        (10, 243, 72, 324_000),
        (15, 362, 107, 482_400),
    ],
)
def test_h3_shapes(duration: float, frames: int, latents: int, samples: int) -> None:
    """time_request.py: 5 s → 124 frames and 165 600 samples, 15 s → 362 and 482 400; the rest by the same rules."""
    assert frame_count(duration) == frames
    assert latent_frames(frames) == latents
    assert audio_sample_count(frames) == samples


@settings(max_examples=50, deadline=None)
@given(st.floats(min_value=4.0, max_value=15.0))
def test_frame_count_snaps_up_to_17n_plus_5(duration: float) -> None:
    requested = round(duration * 24)
    frames = frame_count(duration)
    assert frames % 17 == 5
    assert requested <= frames < requested + 17
    assert audio_sample_count(frames) % 800 == 0


@pytest.mark.parametrize("duration", [4, 5, 8, 10, 15])
def test_rendered_mp4_has_h3_counts(tmp_path: Path, duration: float) -> None:
    frames = frame_count(duration)
    clip = spec(128, 96, frames)
    info = render(tmp_path / "clip.mp4", clip)
    probed = media.probe(info.path)
    assert (info.frames, probed.video.frames, probed.video.declared_frames) == (frames, frames, frames)
    assert (probed.video.width, probed.video.height, probed.video.avg_frame_rate) == (128, 96, 24)
    assert (probed.video.codec, probed.video.pix_fmt) == ("h264", "yuv420p")
    audio = probed.audio
    assert (audio.codec, audio.sample_rate, audio.channels) == ("aac", 32_000, 2)
    expected = audio_sample_count(frames)
    assert audio.duration_s == pytest.approx(expected / 32_000, abs=1e-3)
    # Decoded AAC keeps the padding of its last frame (vLLM-Omni's diffusion/utils/media_utils.py).
    assert expected <= audio.samples < expected + 1024


# -- determinism ----------------------------------------------------------------


def test_same_inputs_give_identical_bytes(tmp_path: Path) -> None:
    perturbation = Perturbation(run_to_run_noise=1.0, process_seed=5)
    first = render(tmp_path / "a.mp4", spec(), perturbation).path
    second = render(tmp_path / "b.mp4", spec(), perturbation).path
    assert first.read_bytes() == second.read_bytes()


@pytest.mark.parametrize(
    "other",
    [
        pytest.param({"seed": 1}, id="seed"),
        pytest.param({"prompt": "a dog"}, id="prompt"),
        pytest.param({"refs": ("video:ac",)}, id="reference"),
    ],
)
def test_each_input_changes_the_content(other: dict) -> None:
    base, changed = spec(), spec(**other)
    assert base.key != changed.key
    assert not np.array_equal(next(video_frames(base)), next(video_frames(changed)))
    assert not np.array_equal(audio_track(base), audio_track(changed))


def test_content_key_is_unambiguous() -> None:
    shape = {"width": 256, "height": 160, "frames": 22}
    assert content_key(seed=0, prompt="ab", reference_digests=["c"], **shape) != content_key(
        seed=0, prompt="a", reference_digests=["bc"], **shape
    )


def test_content_has_texture_motion_and_tones() -> None:
    clip = spec()
    frames = list(video_frames(clip))
    assert all(frame.shape == (clip.height * 3 // 2, clip.width) and frame.dtype == np.uint8 for frame in frames)
    luma = [frame[: clip.height] for frame in frames]  # yuv420p: the Y plane first
    assert all(y.std() > 10 for y in luma)  # not flat
    # Texture at fine scale: neighbouring pixels differ, but far less than the frame varies.
    gradient = np.abs(np.diff(luma[0].astype(int), axis=1)).mean()
    assert 0.5 < gradient < luma[0].std()
    assert all(np.abs(a.astype(int) - b).mean() > 0.1 for a, b in itertools.pairwise(luma))  # moves
    chroma = frames[0][clip.height :]
    assert chroma.std() > 2  # coloured, not grey
    audio = audio_track(clip)
    spectrum = np.abs(np.fft.rfft(audio[0]))
    assert spectrum.max() > 20 * np.median(spectrum)  # tonal peaks
    assert np.median(spectrum) > 0  # over a noise floor


def test_abort_stops_rendering(tmp_path: Path) -> None:
    abort = threading.Event()
    abort.set()
    with pytest.raises(InterruptedError):
        render(tmp_path / "x.mp4", spec(), abort=abort)


# -- run-to-run nondeterminism and perturbations ----------------------------------


@pytest.fixture(scope="module")
def baseline(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("sim") / "baseline.mp4"
    return render(path, spec(), Perturbation(run_to_run_noise=1.0, process_seed=1)).path


def test_run_to_run_difference_changes_hashes_but_passes_every_gate(baseline: Path, tmp_path: Path) -> None:
    """Two processes of a dense baseline: decoded frame and PCM hashes differ, the gates pass widely."""
    rerun = render(tmp_path / "rerun.mp4", spec(), Perturbation(run_to_run_noise=1.0, process_seed=2)).path
    assert decoded_hash(rerun) != decoded_hash(baseline)
    assert not np.array_equal(media.read_pcm(rerun)[0], media.read_pcm(baseline)[0])
    video = compare_video(baseline, rerun)
    cosine, rms = audio_metrics(baseline, rerun, spec().audio_samples)
    assert video.ssim > SSIM_MIN + 0.01 and video.psnr_db > PSNR_MIN + 6
    assert cosine > 0.99 and rms == pytest.approx(1.0, abs=0.01)


def test_same_process_seed_is_bit_exact(baseline: Path, tmp_path: Path) -> None:
    again = render(tmp_path / "again.mp4", spec(), Perturbation(run_to_run_noise=1.0, process_seed=1)).path
    assert again.read_bytes() == baseline.read_bytes()


@pytest.mark.parametrize(
    ("perturbation", "fails"),
    [
        pytest.param({"video_noise": 8.0}, "ssim", id="video_noise"),
        pytest.param({"color_shift": 20.0}, "psnr", id="color_shift"),
        pytest.param({"audio_gain": 0.3}, "rms", id="audio_gain"),
        pytest.param({"audio_freq_shift_hz": 2000.0}, "cosine", id="audio_freq_shift"),
    ],
)
def test_perturbation_fails_its_gate_only(baseline: Path, tmp_path: Path, perturbation: dict, fails: str) -> None:
    candidate = render(tmp_path / "candidate.mp4", spec(), Perturbation(**perturbation)).path
    video = compare_video(baseline, candidate)
    cosine, rms = audio_metrics(baseline, candidate, spec().audio_samples)
    passed = {
        "ssim": video.ssim >= SSIM_MIN,
        "psnr": video.psnr_db >= PSNR_MIN,
        "cosine": cosine >= COSINE_MIN,
        "rms": RMS_RANGE[0] <= rms <= RMS_RANGE[1],
    }
    assert not passed.pop(fails), f"{perturbation} should fail {fails}"
    # Noise also costs PSNR a little, but within the gate.
    assert all(passed.values()), f"{perturbation} should fail {fails} only: {passed}"


def test_drop_frame_and_truncate_fail_the_counts(baseline: Path, tmp_path: Path) -> None:
    clip = spec()
    candidate = render(tmp_path / "candidate.mp4", clip, Perturbation(drop_frame=3, audio_truncate=1600))
    probed = media.probe(candidate.path)
    assert candidate.frames == probed.video.frames == clip.frames - 1
    assert candidate.audio_samples == clip.audio_samples - 1600
    assert probed.audio.samples < clip.audio_samples  # short of the expected count
    # An index past the clip drops nothing.
    assert sum(1 for _ in video_frames(clip, Perturbation(drop_frame=clip.frames))) == clip.frames


@pytest.mark.slow
def test_full_size_rerun_passes_and_noise_fails(tmp_path: Path) -> None:
    """At 1344x768 (22 frames keep it short): a rerun passes SSIM/PSNR, the noise perturbation does not."""
    clip = spec(1344, 768, 22)
    base = render(tmp_path / "base.mp4", clip, Perturbation(run_to_run_noise=1.0, process_seed=1)).path
    rerun = render(tmp_path / "rerun.mp4", clip, Perturbation(run_to_run_noise=1.0, process_seed=2)).path
    noisy = render(tmp_path / "noisy.mp4", clip, Perturbation(video_noise=8.0)).path
    again = compare_video(base, rerun)
    assert again.ssim >= SSIM_MIN and again.psnr_db >= PSNR_MIN
    degraded = compare_video(base, noisy)
    assert degraded.ssim < SSIM_MIN
