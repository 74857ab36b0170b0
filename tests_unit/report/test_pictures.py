"""The worst pair's spectrogram: librosa.stft's framing through :class:`scipy.signal.ShortTimeFFT`.

The frames are checked against a frame cut and transformed by hand (centred on
``p * hop``, zeros beyond the signal, a periodic Hann window, numpy's real FFT),
so that the picture stays the one the report drew with its own STFT before.
"""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from h3bench.report.pictures import _HOP, _N_FFT, _stft_db

RATE = 48_000


def by_hand(signal: np.ndarray, frame: int) -> np.ndarray:
    """|rfft| of frame ``frame``: the signal's samples around ``frame * _HOP``, zeros outside, Hann-windowed."""
    start = frame * _HOP - _N_FFT // 2
    cut = np.zeros(_N_FFT)
    lo, hi = max(start, 0), min(start + _N_FFT, signal.size)
    cut[lo - start:hi - start] = signal[lo:hi]
    window = 0.5 - 0.5 * np.cos(2 * np.pi * np.arange(_N_FFT) / _N_FFT)
    return np.abs(np.fft.rfft(cut * window))


@settings(max_examples=25, deadline=None)
@given(length=st.integers(1, 6 * _N_FFT), frame=st.integers(0, 10_000), seed=st.integers(0, 2**32 - 1))
def test_each_frame_is_the_centred_hann_windowed_fft_of_the_signal(length, frame, seed):
    signal = np.random.default_rng(seed).standard_normal(length)
    db, reference = _stft_db(signal)
    frame %= db.shape[1]

    assert db.shape == (_N_FFT // 2 + 1, 1 + length // _HOP)  # librosa's frame count
    expected = 20 * np.log10(np.maximum(by_hand(signal, frame), 1e-5) / reference)
    np.testing.assert_allclose(db[:, frame], np.maximum(expected, db.max() - 80), atol=1e-9)


def test_a_tone_peaks_in_its_bin_and_the_rest_is_floored_80_db_below_the_peak():
    bin_ = 100
    t = np.arange(2 * RATE) / RATE
    tone = np.sin(2 * np.pi * bin_ * RATE / _N_FFT * t)

    db, reference = _stft_db(tone)

    middle = db[:, db.shape[1] // 2]
    assert int(np.argmax(middle)) == bin_ and db.max() == pytest.approx(0.0)
    assert db.min() == pytest.approx(-80.0)
    # The candidate's dB are against the baseline's peak: half the amplitude is 6 dB down.
    half, _ = _stft_db(tone / 2, reference)
    assert half.max() == pytest.approx(20 * np.log10(0.5))


def test_silence_is_all_at_the_floor():
    db, reference = _stft_db(np.zeros(RATE))

    assert reference == 1.0 and np.all(db == db.max())
