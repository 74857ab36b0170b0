"""Audio metrics against vLLM-Omni's definition (tests/e2e/accuracy/helpers.py), two ways.

``upstream_formula`` transcribes upstream's tests/e2e/accuracy/helpers.py literally (torch, float32, as
upstream's ``_audio_quality_metrics`` runs it); ours, written with numpy's FFT
and without torch, must equal it to 1e-6, on 15 s of H3-shaped audio too,
where upstream's float32 norm puts the cosine of identical audio near 1.0007.
``numpy_definition`` derives the same quantity independently in float64 numpy:
reflect-padded frames of ``n_fft`` every ``n_fft // 4`` samples, a periodic
Hann window, ``|rfft|``, then per channel the cosine of the flattened
magnitudes with each norm clamped at 1e-12 (as
``torch.nn.functional.cosine_similarity`` does). It checks the STFT
parameters; it differs from upstream's float32 result by float32 rounding
only (about 1e-6 on pure tones), hence its 1e-5 tolerance.
"""

from __future__ import annotations

import subprocess
import sys

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from h3bench import media
from h3bench.errors import MediaShapeError
from h3bench.metrics import audio
from tests_unit import mediagen

RATE = 32_000


def upstream_formula(baseline: np.ndarray, candidate: np.ndarray) -> tuple[float, float]:
    b, c = torch.from_numpy(baseline), torch.from_numpy(candidate)
    similarities = []
    for n_fft in (512, 1024, 2048):
        window = torch.hann_window(n_fft)
        mb, mc = (
            torch.stft(x, n_fft, hop_length=n_fft // 4, window=window, center=True, pad_mode="reflect", return_complex=True)
            .abs()
            .flatten(1)
            for x in (b, c)
        )
        cosine = torch.nn.functional.cosine_similarity(mb, mc, dim=1, eps=1e-12)
        similarities.extend(float(value) for value in cosine)
    rms_b = float(torch.sqrt(torch.mean(b.square())))
    rms_c = float(torch.sqrt(torch.mean(c.square())))
    return float(np.mean(similarities)), rms_c / max(rms_b, 1e-12)


def numpy_definition(baseline: np.ndarray, candidate: np.ndarray) -> tuple[float, float]:
    similarities = []
    for n_fft in (512, 1024, 2048):
        hop = n_fft // 4
        window = 0.5 - 0.5 * np.cos(2 * np.pi * np.arange(n_fft) / n_fft)

        def magnitude(x: np.ndarray, n_fft: int = n_fft, hop: int = hop, window: np.ndarray = window) -> np.ndarray:
            padded = np.pad(x.astype(np.float64), ((0, 0), (n_fft // 2, n_fft // 2)), mode="reflect")
            starts = hop * np.arange(1 + x.shape[1] // hop)
            frames = padded[:, starts[:, None] + np.arange(n_fft)]
            return np.abs(np.fft.rfft(frames * window, axis=-1))

        for b, c in zip(magnitude(baseline), magnitude(candidate), strict=True):
            b, c = b.ravel(), c.ravel()
            similarities.append(b @ c / (max(np.linalg.norm(b), 1e-12) * max(np.linalg.norm(c), 1e-12)))
    rms = [np.sqrt(np.mean(np.square(x.astype(np.float64)))) for x in (baseline, candidate)]
    return float(np.mean(similarities)), float(rms[1] / max(rms[0], 1e-12))


def _noise(seed: int, shape=(2, 20_000), scale=0.1) -> np.ndarray:
    return (np.random.default_rng(seed).normal(0, scale, size=shape)).astype(np.float32)


def _chirp(samples: int) -> np.ndarray:
    t = np.arange(samples) / RATE
    return np.stack([0.3 * np.sin(2 * np.pi * (200 + 2000 * t) * t)] * 2).astype(np.float32)


H3_15S = 482_400  # 15 s at 32 kHz: 800·round(40·362/24) samples
_MUSIC = (0.3 * np.sin(2 * np.pi * 440 * np.arange(H3_15S) / RATE)[None].repeat(2, 0)
          + _noise(9, shape=(2, H3_15S), scale=0.01)).astype(np.float32)

CASES = {
    "15s-identical": (_MUSIC, _MUSIC.copy()),
    "15s-run-to-run": (_MUSIC, _MUSIC + _noise(10, shape=(2, H3_15S), scale=1e-4)),
    "15s-other": (_MUSIC, _noise(11, shape=(2, H3_15S), scale=0.2)),
    "noise-vs-noisier": (_noise(0), _noise(0) + _noise(1, scale=0.05)),
    "noise-vs-other-noise": (_noise(2), _noise(3)),
    "tone-vs-phase": (mediagen.tone(24_000), mediagen.tone(24_000, phase=1.0)),
    "tone-vs-chirp": (mediagen.tone(24_000), _chirp(24_000)),
    "mono-tone-vs-quieter": (mediagen.tone(5_000, channels=1), mediagen.tone(5_000, channels=1, gain=0.1)),
    "shortest": (_noise(4, shape=(2, 1025)), _noise(5, shape=(2, 1025))),
}


@pytest.mark.parametrize(("baseline", "candidate"), CASES.values(), ids=CASES.keys())
def test_equals_upstreams_formula(baseline, candidate):
    expected_cosine, expected_ratio = upstream_formula(baseline, candidate)
    assert audio.spectral_cosine(baseline, candidate) == pytest.approx(expected_cosine, abs=1e-6)
    assert audio.rms_ratio(baseline, candidate) == pytest.approx(expected_ratio, abs=1e-6)


def test_upstreams_float32_rounding_is_kept():
    """Upstream's cosine of identical 15 s audio is above 1 (its float32 norm runs low); ours is too."""
    expected, _ = upstream_formula(*CASES["15s-identical"])
    assert expected > 1.0005
    assert audio.spectral_cosine(*CASES["15s-identical"]) == pytest.approx(expected, abs=1e-6)


def test_the_audio_metrics_do_not_import_torch():
    code = ("import sys, numpy as np; from h3bench.metrics import audio; x = np.ones((2, 4000), np.float32); "
            "audio.spectral_cosine(x, x); audio.rms_ratio(x, x); print('torch' in sys.modules)")
    out = subprocess.run([sys.executable, "-W", "error", "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"


@pytest.mark.parametrize(("baseline", "candidate"), [v for k, v in CASES.items() if not k.startswith("15s")],
                         ids=[k for k in CASES if not k.startswith("15s")])
def test_agrees_with_an_independent_float64_derivation(baseline, candidate):
    expected_cosine, expected_ratio = numpy_definition(baseline, candidate)
    assert audio.spectral_cosine(baseline, candidate) == pytest.approx(expected_cosine, abs=1e-5)
    assert audio.rms_ratio(baseline, candidate) == pytest.approx(expected_ratio, rel=1e-5)


def test_phase_shift_passes_and_frequency_shift_fails():
    """Upstream's own unit test: a quarter-period phase shift passes, 440 Hz → 3000 Hz fails."""
    baseline = mediagen.tone(RATE, 440.0)
    assert audio.spectral_cosine(baseline, mediagen.tone(RATE, 440.0, phase=np.pi / 2)) >= 0.80
    assert audio.rms_ratio(baseline, mediagen.tone(RATE, 440.0, phase=np.pi / 2)) == pytest.approx(1.0, abs=1e-5)
    assert audio.spectral_cosine(baseline, mediagen.tone(RATE, 3000.0)) < 0.80


@pytest.mark.parametrize(("gain", "inside"), [(0.4, False), (1.5, True), (2.5, False)])
def test_gain_sets_the_rms_ratio(gain, inside):
    baseline = mediagen.tone(RATE)
    ratio = audio.rms_ratio(baseline, baseline * np.float32(gain))
    assert ratio == pytest.approx(gain, rel=1e-6)
    assert (0.5 <= ratio <= 2.0) is inside


def test_decoded_aac_trimmed_to_the_expected_count(make_mp4):
    """Real AAC round trips: same tone passes the cosine gate, a 0.4 gain fails the RMS gate."""
    expected = 33_600
    loud = make_mp4("loud.mp4", frames=2, audio_samples=expected, gain=0.5)
    quiet = make_mp4("quiet.mp4", frames=2, audio_samples=expected, gain=0.2)
    (a, rate_a), (b, rate_b) = media.read_pcm(loud), media.read_pcm(quiet)
    assert a.shape[1] > expected  # AAC padding
    a, b = audio.trim_to(a, expected), audio.trim_to(b, expected)
    assert audio.spectral_cosine(a, b, baseline_rate=rate_a, candidate_rate=rate_b) >= 0.80
    assert audio.rms_ratio(a, b) == pytest.approx(0.4, abs=0.02)


def test_trim_to_keeps_the_first_samples():
    pcm = _noise(6, shape=(2, 100))
    np.testing.assert_array_equal(audio.trim_to(pcm, 60), pcm[:, :60])
    assert audio.trim_to(pcm, 100).shape == (2, 100)


def test_trim_to_refuses_short_pcm():
    with pytest.raises(MediaShapeError, match="has 100 samples per channel, fewer than the expected 101"):
        audio.trim_to(_noise(7, shape=(2, 100)), 101)


def _with(pcm: np.ndarray, index: tuple[int, int], value: float) -> np.ndarray:
    pcm = pcm.copy()
    pcm[index] = value
    return pcm


STEREO = _noise(8, shape=(2, 4000))
BAD_INPUTS = {
    "sample-count": (STEREO, STEREO[:, :3000], {}, r"sample counts differ: baseline 4000, candidate 3000; trim"),
    "mono-vs-stereo": (STEREO, STEREO[:1], {}, r"channel counts differ: baseline 2, candidate 1 \(e.g. mono"),
    "baseline-rate": (STEREO, STEREO, {"baseline_rate": 44_100}, r"must both be 32000 Hz: baseline 44100 Hz, candidate 32"),
    "candidate-rate": (STEREO, STEREO, {"candidate_rate": 16_000}, r"candidate 16000 Hz"),
    "nan": (STEREO, _with(STEREO, (1, 5), np.nan), {}, r"candidate PCM contains NaN/inf \(1 non-finite of 8000"),
    "inf": (_with(STEREO, (0, 0), np.inf), STEREO, {}, r"baseline PCM contains NaN/inf"),
    "one-dimensional": (STEREO[0], STEREO[0], {}, r"baseline PCM must be \[channels, samples\], got shape \(4000,\)"),
    "integer": (STEREO, (STEREO * 32767).astype(np.int16), {}, r"candidate PCM must be floating point .* int16"),
    "empty": (STEREO[:, :0], STEREO[:, :0], {}, r"baseline PCM is empty"),
    "too-short": (STEREO[:, :1024], STEREO[:, :1024], {}, r"too short .* 1024 samples per channel, at least 1025"),
}


@pytest.mark.parametrize(("baseline", "candidate", "rates", "match"), BAD_INPUTS.values(), ids=BAD_INPUTS.keys())
def test_incomparable_inputs_raise_clearly(baseline, candidate, rates, match):
    with pytest.raises(MediaShapeError, match=match):
        audio.spectral_cosine(baseline, candidate, **rates)


@pytest.mark.parametrize("name", ["sample-count", "mono-vs-stereo", "nan", "inf", "integer", "empty"])
def test_rms_ratio_validates_like_the_cosine(name):
    baseline, candidate, _, match = BAD_INPUTS[name]
    with pytest.raises(MediaShapeError, match=match):
        audio.rms_ratio(baseline, candidate)


@settings(max_examples=15, deadline=None)
@given(
    seed=st.integers(0, 2**32 - 1),
    channels=st.integers(1, 2),
    samples=st.integers(1025, 6000),
    gain=st.floats(1e-3, 4.0),
)
def test_identical_inputs_score_one(seed, channels, samples, gain):
    pcm = (np.random.default_rng(seed).uniform(-1, 1, size=(channels, samples)) * gain).astype(np.float32)
    assert audio.spectral_cosine(pcm, pcm.copy()) == pytest.approx(1.0, abs=1e-6)
    assert audio.rms_ratio(pcm, pcm.copy()) == 1.0
