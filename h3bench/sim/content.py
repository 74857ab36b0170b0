"""Deterministic Ref2VA content for the simulator: textured moving video, tonal audio.

The shapes are H3's (:mod:`h3bench.h3`): the frame count for the requested
seconds and the audio latents of 800 stereo samples at 32 kHz each. The MP4 is
muxed by :func:`h3bench.media.write_mp4`, as vLLM-Omni's ``media_utils.py``
muxes.

What is generated
-----------------
Everything follows from a 256-bit key, the SHA-256 of the request's seed,
prompt, reference digests and shape (:func:`content_key`), so the same
request gives the same bytes.

- Video: a still camera on a textured background whose amplitude spectrum
  falls as 1/f^1.2, as natural images do, and three textured discs that move
  across it and occlude one another. It has edges, texture at every scale
  and real motion, so SSIM, PSNR and LPIPS respond to perturbations as they
  do on camera content, while the still background keeps libx264 fast.
- Audio: a low drone and a pentatonic melody of decaying harmonic notes,
  panned in stereo, over low-passed noise at about -30 dB.

Perturbations (:class:`Perturbation`) model a candidate's quality loss, each
aimed at one gate, and the run-to-run difference between two processes of
the same dense baseline (a tiny process-seeded noise that changes decoded
hashes, never a gate).
"""

from __future__ import annotations

import hashlib
import os
import threading
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from h3bench.h3 import AUDIO_SAMPLE_RATE as SAMPLE_RATE
from h3bench.h3 import FPS
from h3bench.media import write_mp4

__all__ = [
    "ContentSpec",
    "Perturbation",
    "RenderInfo",
    "audio_track",
    "content_key",
    "render",
    "video_frames",
]

_OBJECTS = 3
_SPECTRAL_SLOPE = 1.2  # amplitude ~ 1/f^1.2: natural images lie around 0.8-1.5
_NOISE_BANK = 5  # distinct noise frames cycled by the video_noise perturbation
_RUN_TO_RUN_VIDEO = 0.5  # std of the per-process field, in 8-bit levels
_RUN_TO_RUN_AUDIO = 1e-4  # rms of the per-process audio noise (-80 dBFS)


@dataclass(frozen=True)
class ContentSpec:
    """What to render: the shape and the key that every random choice derives from."""

    width: int
    height: int
    frames: int
    audio_samples: int
    key: bytes  # 32 bytes, from content_key()


@dataclass(frozen=True)
class Perturbation:
    """Changes applied to the base content; the defaults change nothing.

    ``video_noise``: Gaussian sigma in 8-bit levels added to every frame (fails
    PSNR, SSIM and at large sigma LPIPS). ``color_shift``: levels added to red
    and taken from blue, a chroma shift (fails PSNR, SSIM stays high).
    ``drop_frame``: index of a frame left out (fails the frame count; ignored
    when the clip is shorter). ``audio_gain``: factor on the waveform (fails
    the RMS ratio outside [0.5, 2]). ``audio_freq_shift_hz``: added to every
    partial (fails the spectral cosine). ``audio_truncate``: samples cut from
    the end (fails the sample count). ``run_to_run_noise``: scale of a tiny
    difference seeded by ``process_seed`` (0 turns it off).
    """

    video_noise: float = 0.0
    color_shift: float = 0.0
    drop_frame: int | None = None
    audio_gain: float = 1.0
    audio_freq_shift_hz: float = 0.0
    audio_truncate: int = 0
    run_to_run_noise: float = 0.0
    process_seed: int = 0


@dataclass(frozen=True)
class RenderInfo:
    """What :func:`render` wrote."""

    path: Path
    frames: int
    audio_samples: int
    size_bytes: int


def content_key(
    *, seed: int, prompt: str, reference_digests: Sequence[str], width: int, height: int, frames: int
) -> bytes:
    """SHA-256 of everything that fixes the content, in a length-prefixed, unambiguous encoding."""
    digest = hashlib.sha256(b"h3bench-sim-content-v1")
    for part in (str(seed), prompt, *reference_digests, f"{width}x{height}x{frames}"):
        data = part.encode("utf-8")
        digest.update(len(data).to_bytes(8, "little") + data)
    return digest.digest()


def _rng(key: bytes, purpose: str, process_seed: int | None = None) -> np.random.Generator:
    """An independent generator per purpose, so one perturbation never shifts another's draws."""
    material = key + purpose.encode()
    if process_seed is not None:
        material += process_seed.to_bytes(8, "little")
    return np.random.default_rng(np.frombuffer(hashlib.sha256(material).digest(), dtype=np.uint32))


def _pink_field(rng: np.random.Generator, height: int, width: int, channels: int) -> np.ndarray:
    """``[height, width, channels]`` float32 noise with a 1/f^slope amplitude spectrum, unit std per channel."""
    fy = np.fft.fftfreq(height).astype(np.float32)[:, None]
    fx = np.fft.rfftfreq(width).astype(np.float32)[None, :]
    radius = np.hypot(fx, fy)
    radius[0, 0] = 1.0
    amplitude = radius ** np.float32(-_SPECTRAL_SLOPE)
    amplitude[0, 0] = 0.0  # zero mean
    phase = rng.random((channels, *amplitude.shape), dtype=np.float32) * np.float32(2 * np.pi)
    field = np.fft.irfft2(amplitude * np.exp(1j * phase).astype(np.complex64), s=(height, width))
    field = np.moveaxis(field.astype(np.float32), 0, -1)
    field /= field.std(axis=(0, 1), keepdims=True)
    return field


def _texture(
    rng: np.random.Generator, height: int, width: int, perturbation: Perturbation, key: bytes, name: str
) -> np.ndarray:
    """A colour texture as uint8 RGB, with the colour shift and the run-to-run field applied before rounding."""
    field = _pink_field(rng, height, width, 3)
    # Correlated channels and a random tint, as in natural colour images.
    mix = (np.eye(3) * 0.6 + 0.4 + rng.normal(0.0, 0.15, (3, 3))).astype(np.float32)
    rgb = field @ mix.T * np.float32(22.0) + rng.uniform(70, 180, 3).astype(np.float32)
    if perturbation.color_shift:
        rgb[..., 0] += perturbation.color_shift
        rgb[..., 2] -= perturbation.color_shift
    if perturbation.run_to_run_noise:
        noise_rng = _rng(key, "run-to-run/" + name, perturbation.process_seed)
        scale = np.float32(_RUN_TO_RUN_VIDEO * perturbation.run_to_run_noise)
        rgb += noise_rng.standard_normal(rgb.shape, dtype=np.float32) * scale
    return np.clip(rgb + 0.5, 0, 255).astype(np.uint8)


def _path(rng: np.random.Generator, frames: int, amplitude: float, period_range: tuple[float, float]) -> np.ndarray:
    """A smooth periodic 1-D trajectory in [-amplitude, amplitude], one value per frame."""
    period = rng.uniform(*period_range) * FPS
    phase = rng.uniform(0, 2 * np.pi)
    return amplitude * np.sin(2 * np.pi * np.arange(frames) / period + phase)


def video_frames(spec: ContentSpec, perturbation: Perturbation = Perturbation()) -> Iterator[np.ndarray]:
    """Yield the clip's ``[height, width, 3]`` uint8 RGB frames, each a new array."""
    width, height, frames = spec.width, spec.height, spec.frames
    rng = _rng(spec.key, "video")
    # A fixed camera: global motion would make libx264 search every block, and
    # moving subjects over a still textured scene exercise the metrics as well.
    background = _texture(rng, height, width, perturbation, spec.key, "background")

    objects = []
    for index in range(_OBJECTS):
        radius = max(2, int(height * rng.uniform(0.10, 0.18)))
        texture = _texture(rng, 2 * radius, 2 * radius, perturbation, spec.key, f"object{index}")
        yy, xx = np.mgrid[-radius:radius, -radius:radius]
        mask = (xx + 0.5) ** 2 + (yy + 0.5) ** 2 <= radius**2
        centre_x = np.rint(width / 2 + _path(rng, frames, width / 2.5, (5.0, 10.0))).astype(int)
        centre_y = np.rint(height / 2 + _path(rng, frames, height / 3, (6.0, 12.0))).astype(int)
        objects.append((texture, mask, centre_x - radius, centre_y - radius))

    noise_bank = None
    if perturbation.video_noise:
        noise_rng = _rng(spec.key, "video-noise")
        sigma = np.float32(perturbation.video_noise)
        noise_bank = [
            np.rint(noise_rng.standard_normal((height, width, 3), dtype=np.float32) * sigma).astype(np.int16)
            for _ in range(_NOISE_BANK)
        ]

    for index in range(frames):
        if index == perturbation.drop_frame:
            continue
        frame = background.copy()
        for texture, mask, left, top in objects:
            _paste(frame, texture, mask, left[index], top[index])
        if noise_bank is not None:
            noisy = frame.astype(np.int16)
            noisy += noise_bank[index % _NOISE_BANK]
            frame = np.clip(noisy, 0, 255).astype(np.uint8)
        yield frame


def _paste(frame: np.ndarray, texture: np.ndarray, mask: np.ndarray, left: int, top: int) -> None:
    """Copy the masked texture onto the frame at (left, top), clipped to the frame."""
    height, width = frame.shape[:2]
    size = mask.shape[0]
    x0, y0 = max(left, 0), max(top, 0)
    x1, y1 = min(left + size, width), min(top + size, height)
    if x0 >= x1 or y0 >= y1:
        return
    region = (slice(y0 - top, y1 - top), slice(x0 - left, x1 - left))
    np.copyto(frame[y0:y1, x0:x1], texture[region], where=mask[region][..., None])


def audio_track(spec: ContentSpec, perturbation: Perturbation = Perturbation()) -> np.ndarray:
    """The clip's ``[2, samples]`` float32 waveform at 32 kHz, in [-1, 1]."""
    samples = spec.audio_samples
    rng = _rng(spec.key, "audio")
    t = np.arange(samples, dtype=np.float64) / SAMPLE_RATE
    shift = perturbation.audio_freq_shift_hz
    out = np.zeros((2, samples), dtype=np.float64)

    # Drone: a low fundamental and its octave with a slow swell.
    drone = rng.uniform(98.0, 147.0)
    swell = 0.75 + 0.25 * np.sin(2 * np.pi * t / rng.uniform(3.0, 6.0))
    for ratio, amplitude in ((1.0, 0.06), (2.0, 0.03)):
        tone = amplitude * swell * np.sin(2 * np.pi * (drone * ratio + shift) * t + rng.uniform(0, 2 * np.pi))
        out += tone

    # Melody: pentatonic notes over two octaves, each a decaying harmonic tone.
    scale = 220.0 * 2.0 ** (np.array([0, 2, 4, 7, 9, 12, 14, 16, 19, 21]) / 12)
    start = 0
    while start < samples:
        length = int(rng.uniform(0.2, 0.6) * SAMPLE_RATE)
        freq = rng.choice(scale)
        decay = rng.uniform(0.15, 0.4)
        pan = rng.uniform(0.2, 0.8)
        end = min(samples, start + 3 * length)  # notes ring past the next onset
        local = t[: end - start]
        envelope = np.minimum(local / 0.01, 1.0) * np.exp(-local / decay)
        note = np.zeros(end - start)
        for harmonic, amplitude in ((1, 0.16), (2, 0.07), (3, 0.03)):
            note += amplitude * np.sin(2 * np.pi * (freq * harmonic + shift) * local + rng.uniform(0, 2 * np.pi))
        note *= envelope
        out[0, start:end] += (1 - pan) * 2 * note
        out[1, start:end] += pan * 2 * note
        start += length

    # Noise: white noise through a one-pole low-pass (about 1.5 kHz), per channel.
    noise = rng.standard_normal((2, samples))
    noise_spectrum = np.fft.rfft(noise, axis=1)
    freqs = np.fft.rfftfreq(samples, 1 / SAMPLE_RATE)
    noise = np.fft.irfft(noise_spectrum / (1 + 1j * freqs / 1500.0), n=samples, axis=1)
    out += 0.012 * noise / max(noise.std(), 1e-12)

    out *= perturbation.audio_gain
    if perturbation.run_to_run_noise:
        noise_rng = _rng(spec.key, "run-to-run/audio", perturbation.process_seed)
        out += noise_rng.standard_normal(out.shape) * (_RUN_TO_RUN_AUDIO * perturbation.run_to_run_noise)
    if perturbation.audio_truncate:
        out = out[:, : max(0, samples - perturbation.audio_truncate)]
    return np.clip(out, -1.0, 1.0).astype(np.float32)


def render(
    path: str | os.PathLike[str],
    spec: ContentSpec,
    perturbation: Perturbation = Perturbation(),
    *,
    abort: threading.Event | None = None,
) -> RenderInfo:
    """Generate the clip and write it as vLLM-Omni's MP4 (H.264 crf 18 + AAC stereo 32 kHz).

    Setting ``abort`` stops the encoding at the next frame with :class:`InterruptedError`.
    """
    audio = audio_track(spec, perturbation)
    frames = video_frames(spec, perturbation)
    if abort is not None:
        frames = _until(abort, frames)
    dropped = perturbation.drop_frame is not None and 0 <= perturbation.drop_frame < spec.frames
    path = write_mp4(path, frames, audio, fps=FPS, sample_rate=SAMPLE_RATE)
    return RenderInfo(path, spec.frames - dropped, audio.shape[1], path.stat().st_size)


def _until(abort: threading.Event, frames: Iterator[np.ndarray]) -> Iterator[np.ndarray]:
    for frame in frames:
        if abort.is_set():
            raise InterruptedError("rendering aborted")
        yield frame
