"""The spectral cosine in chunks: the same values as upstream's whole-array formula, and no files left behind.

The chunk sizes are shrunk so that every split shows on short audio: STFT
frames split across FFT calls, the norm's eight lanes carried across reads,
a read ending mid-tail. ``upstream_formula`` is the torch transcription of
``test_audio_metrics.py``.
"""

from __future__ import annotations

import gc
import os
import tempfile

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from h3bench import media, quality
from h3bench.media import decode
from h3bench.metrics import audio, spectra_files
from tests_unit import mediagen
from tests_unit.metrics.test_audio_metrics import upstream_formula


@settings(max_examples=15, deadline=None)
@given(frames=st.integers(1, 40), values=st.integers(1, 64), samples=st.integers(1025, 9000),
       channels=st.integers(1, 2), seed=st.integers(0, 2**16))  # fmt: skip
def test_any_chunking_gives_upstreams_values(frames, values, samples, channels, seed):
    rng = np.random.default_rng(seed)
    base = rng.standard_normal((channels, samples)).astype(np.float32)
    cand = (base + 0.3 * rng.standard_normal((channels, samples))).astype(np.float32)
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(spectra_files, "_FRAMES_PER_CHUNK", frames)
        patch.setattr(spectra_files, "_VALUES_PER_READ", 8 * values)
        cosine = audio.spectral_cosine(base, cand)
    assert cosine == pytest.approx(upstream_formula(base, cand)[0], abs=1e-6)


def test_the_norm_carried_across_reads_is_the_whole_arrays_to_the_bit(monkeypatch, tmp_path):
    values = np.random.default_rng(1).random(10_003, dtype=np.float32)
    path = tmp_path / "m.f32"
    values.tofile(path)
    whole = spectra_files._torch_norm(spectra_files._read(str(path)), len(values))
    monkeypatch.setattr(spectra_files, "_VALUES_PER_READ", 8 * 5)
    assert spectra_files._torch_norm(spectra_files._read(str(path)), len(values)) == whole
    assert spectra_files._torch_norm(spectra_files._slices(values), len(values)) == whole  # the in-memory store
    assert whole != np.float32(np.sqrt(np.sum(np.square(values.astype(np.float64)))))  # the float32 order shows
    monkeypatch.setattr(spectra_files, "_SQUARES_PER_STEP", 8 * 7)  # the lanes carried from step to step
    assert spectra_files._torch_norm(spectra_files._slices(values), len(values)) == whole


def test_the_norm_is_torchs_to_the_bit():
    torch = pytest.importorskip("torch")
    for length in (7, 10_003, (1 << 15) + 9, 1_000_000):  # a tail only; one step; two; thirty-one
        values = np.random.default_rng(length).random(length, dtype=np.float32)
        expected = np.float32(torch.linalg.vector_norm(torch.from_numpy(values)).item())
        assert spectra_files._torch_norm(spectra_files._slices(values), length) == expected


def test_identical_15_s_keeps_upstreams_float32_value_above_one():
    pcm = mediagen.tone(15 * audio.SAMPLE_RATE, 440.0)
    cosine = audio.spectral_cosine(pcm, pcm.copy())
    assert cosine == pytest.approx(upstream_formula(pcm, pcm.copy())[0], abs=1e-6)
    assert cosine > 1.0


@pytest.fixture
def spectrum_directories(monkeypatch, tmp_path) -> list[str]:
    """The temporary directories that spectra are written to, made under ``tmp_path``."""
    made: list[str] = []
    real_mkdtemp = tempfile.mkdtemp

    def recorded(**kwargs):
        made.append(real_mkdtemp(dir=tmp_path, **kwargs))
        return made[-1]

    monkeypatch.setattr(spectra_files.tempfile, "mkdtemp", recorded)
    return made


def test_long_audio_goes_to_files_that_a_comparison_leaves_behind(make_mp4, monkeypatch, spectrum_directories):
    monkeypatch.setattr(spectra_files, "_IN_MEMORY_BYTES", 0)  # any audio is long
    clip = make_mp4(frames=4, width=96, height=64, audio_samples=16_000)
    other = make_mp4("other.mp4", frames=4, width=96, height=64, audio_samples=16_000, freq=445.0)
    report = quality.compare(clip, other, measure_lpips=False)
    assert report.audio_spectral_cosine is not None
    gc.collect()
    assert len(spectrum_directories) == 2 and not any(os.path.exists(path) for path in spectrum_directories)


def test_short_audio_stays_in_memory_with_the_same_bits(spectrum_directories, monkeypatch):
    rng = np.random.default_rng(3)
    base = rng.standard_normal((2, 5 * audio.SAMPLE_RATE)).astype(np.float32)
    cand = (base + 0.3 * rng.standard_normal(base.shape)).astype(np.float32)
    in_memory = audio.spectral_cosine(base, cand)
    assert spectrum_directories == []  # 5 s of stereo: 8 MB of magnitudes, no file
    monkeypatch.setattr(spectra_files, "_IN_MEMORY_BYTES", 0)
    assert audio.spectral_cosine(base, cand) == in_memory
    assert len(spectrum_directories) == 2


def test_decoded_pcm_is_one_contiguous_array_equal_to_its_frames(make_mp4):
    clip = make_mp4(frames=4, width=96, height=64, audio_samples=40_000)
    pcm, info = media.read_audio(clip)
    import av

    with av.open(str(clip)) as container:
        frames = [decode._frame_pcm(frame) for frame in container.decode(container.streams.audio[0])]
    assert pcm.flags["C_CONTIGUOUS"] and info.samples == pcm.shape[1]
    assert np.array_equal(pcm, np.concatenate(frames, axis=1))
