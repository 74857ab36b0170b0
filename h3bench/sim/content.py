"""Deterministic Ref2VA content for the simulator: textured moving video, tonal audio, and its MP4.

The shapes are H3's (:mod:`h3bench.h3`): the frame count of the request and
the audio latents of 800 stereo samples at 32 kHz each.

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
  Frames are composed directly as yuv420p planes: each texture is drawn in
  RGB and converted once (BT.601 limited range, as libswscale converts
  rgb24), and a frame is then three plane copies and the discs' masked
  pastes. The discs move in steps of two pixels, so that they land on whole
  chroma samples.
- Audio: a low drone and a pentatonic melody of decaying harmonic notes,
  panned in stereo, over low-passed noise at about -30 dB.

Perturbations (:class:`Perturbation`) model a candidate's quality loss, each
aimed at one gate, and the run-to-run difference between two processes of
the same dense baseline (a tiny process-seeded noise that changes decoded
hashes, never a gate).

Encoding
--------
:func:`render` writes what vLLM-Omni's ``diffusion/utils/media_utils.py``
writes, and what :func:`h3bench.media.write_mp4` documents: H.264 yuv420p at
crf 18 and 24 FPS, AAC stereo 32 kHz with the whole waveform as one frame at
``pts = 0``. Two encoder settings differ, for speed, and neither changes the
format: the simulator's latency is its modelled stage times, so rendering
must fit inside them even when other processes hold every core.

- x264 preset ``ultrafast`` instead of ``medium``: a third of the CPU time
  (0.77 against 2.6 CPU s for 107 frames at 1344x768). What the gates see
  stays as upstream's preset gives it: a rerun scores SSIM 0.988 and PSNR
  46.4 dB against medium's 0.988 and 45.8 dB at that canvas, sigma-8 noise
  SSIM 0.905 (0.906), a 20-level colour shift PSNR 31.3 dB (31.3 dB); at
  384x224 a 15 s rerun scores SSIM 0.988 (0.987). ``veryfast`` costs 50 %
  more and is worse for the gates: its rerun SSIM, 0.976 at 384x224 and
  15 s, lies close to the 0.97 gate. Without CABAC and B-frames, files are
  about 1.6 times larger, and they decode faster.
- The AAC encoder's ``fast`` coder instead of ``twoloop``: a quarter of the
  CPU time; the audio gates' values on perturbed and rerun outputs move in
  the fourth decimal.

Same key and same process seed: the same bytes (the encoder's threads are fixed), which is
what lets a worker reuse a render (:mod:`h3bench.sim.worker`).
"""

from __future__ import annotations

import hashlib
import os
import threading
from collections.abc import Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from h3bench.h3 import AUDIO_SAMPLE_RATE as SAMPLE_RATE
from h3bench.h3 import FPS

if TYPE_CHECKING:
    import av

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
_NOISE_BOX = 11  # the audio noise floor's low-pass: a moving average, -3 dB near 1.3 kHz
# libx264's bytes depend on its thread count, which by default follows the host's cores: two, as on the
# 2-core machines the defaults were tuned on, make the same content the same bytes on any host.
_X264_OPTIONS = {"crf": "18", "preset": "ultrafast", "threads": "2"}
_AAC_OPTIONS = {"aac_coder": "fast"}
# BT.601 limited range, RGB in [0, 255]: Y in [16, 235], Cb and Cr in [16, 240] around 128.
_RGB_TO_YUV = np.array(
    [[65.481, 128.553, 24.966], [-37.797, -74.203, 112.0], [112.0, -93.786, -18.214]], dtype=np.float32
).T / np.float32(255)
_YUV_OFFSETS = (16.0, 128.0, 128.0)


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


Planes = tuple[np.ndarray, np.ndarray, np.ndarray]  # Y [h, w], Cb and Cr [h/2, w/2]


def _yuv420(rgb: np.ndarray) -> Planes:
    """Float32 Y at full resolution and Cb, Cr of each 2x2 block's mean colour, without the range offsets."""
    height, width = rgb.shape[:2]
    luma = rgb @ _RGB_TO_YUV[:, 0]
    chroma = rgb.reshape(height // 2, 2, width // 2, 2, 3).mean(axis=(1, 3)) @ _RGB_TO_YUV[:, 1:]
    return luma, chroma[..., 0], chroma[..., 1]


def _texture(
    rng: np.random.Generator, height: int, width: int, perturbation: Perturbation, key: bytes, name: str
) -> Planes:
    """A colour texture as uint8 yuv420p planes, with the colour shift and the run-to-run field applied in RGB."""
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
    luma, cb, cr = _yuv420(np.clip(rgb, 0, 255, out=rgb))
    y_off, cb_off, cr_off = _YUV_OFFSETS
    return _round(luma + y_off), _round(cb + cb_off), _round(cr + cr_off)


def _round(plane: np.ndarray) -> np.ndarray:
    return np.clip(plane + 0.5, 0, 255).astype(np.uint8)


def _noise(rng: np.random.Generator, height: int, width: int, sigma: float) -> Planes:
    """Gaussian RGB noise of ``sigma`` levels, as the int16 yuv420p planes it adds."""
    luma, cb, cr = _yuv420(rng.standard_normal((height, width, 3), dtype=np.float32) * np.float32(sigma))
    return np.rint(luma).astype(np.int16), np.rint(cb).astype(np.int16), np.rint(cr).astype(np.int16)


def _disc(radius: int, step: int) -> np.ndarray:
    """A disc of ``radius`` pixels sampled every ``step`` pixels at the samples' centres: 1 for luma, 2 for chroma."""
    centres = (np.arange(2 * radius // step) + 0.5) * step - radius
    return centres[:, None] ** 2 + centres[None, :] ** 2 <= radius**2


def _path(rng: np.random.Generator, frames: int, amplitude: float, period_range: tuple[float, float]) -> np.ndarray:
    """A smooth periodic 1-D trajectory in [-amplitude, amplitude], one value per frame."""
    period = rng.uniform(*period_range) * FPS
    phase = rng.uniform(0, 2 * np.pi)
    return amplitude * np.sin(2 * np.pi * np.arange(frames) / period + phase)


def _even(values: np.ndarray) -> np.ndarray:
    return 2 * np.rint(values / 2).astype(int)


def video_frames(spec: ContentSpec, perturbation: Perturbation = Perturbation()) -> Iterator[np.ndarray]:
    """Yield the clip's frames in PyAV's yuv420p layout: ``[height * 3 // 2, width]`` uint8, Y then Cb then Cr.

    Each frame is a new array. Width and height must be even, as yuv420p needs.
    """
    width, height, frames = spec.width, spec.height, spec.frames
    if width % 2 or height % 2:
        raise ValueError(f"yuv420p needs an even width and height, got {width}x{height}")
    rng = _rng(spec.key, "video")
    # A fixed camera: global motion would make libx264 search every block, and
    # moving subjects over a still textured scene exercise the metrics as well.
    background = _texture(rng, height, width, perturbation, spec.key, "background")

    objects = []
    for index in range(_OBJECTS):
        radius = max(2, int(height * rng.uniform(0.10, 0.18)))
        texture = _texture(rng, 2 * radius, 2 * radius, perturbation, spec.key, f"object{index}")
        masks = (_disc(radius, 1), _disc(radius, 2), _disc(radius, 2))
        left = _even(width / 2 + _path(rng, frames, width / 2.5, (5.0, 10.0)) - radius)
        top = _even(height / 2 + _path(rng, frames, height / 3, (6.0, 12.0)) - radius)
        objects.append((texture, masks, left, top))

    noise_bank = None
    if perturbation.video_noise:
        noise_rng = _rng(spec.key, "video-noise")
        noise_bank = [_noise(noise_rng, height, width, perturbation.video_noise) for _ in range(_NOISE_BANK)]

    luma, chroma = width * height, width * height // 4
    for index in range(frames):
        if index == perturbation.drop_frame:
            continue
        frame = np.empty(luma + 2 * chroma, dtype=np.uint8)
        planes = (
            frame[:luma].reshape(height, width),
            frame[luma : luma + chroma].reshape(height // 2, width // 2),
            frame[luma + chroma :].reshape(height // 2, width // 2),
        )
        for plane, still in zip(planes, background, strict=True):
            np.copyto(plane, still)
        for texture, masks, left, top in objects:
            for step, plane, part, mask in zip((1, 2, 2), planes, texture, masks, strict=True):
                _paste(plane, part, mask, left[index] // step, top[index] // step)
        if noise_bank is not None:
            for plane, noise in zip(planes, noise_bank[index % _NOISE_BANK], strict=True):
                np.copyto(plane, np.clip(plane + noise, 0, 255), casting="unsafe")
        yield frame.reshape(height * 3 // 2, width)


def _paste(plane: np.ndarray, texture: np.ndarray, mask: np.ndarray, left: int, top: int) -> None:
    """Copy the masked texture onto the plane at (left, top), clipped to the plane."""
    height, width = plane.shape
    size = mask.shape[0]
    x0, y0 = max(left, 0), max(top, 0)
    x1, y1 = min(left + size, width), min(top + size, height)
    if x0 >= x1 or y0 >= y1:
        return
    region = (slice(y0 - top, y1 - top), slice(x0 - left, x1 - left))
    np.copyto(plane[y0:y1, x0:x1], texture[region], where=mask[region])


def audio_track(spec: ContentSpec, perturbation: Perturbation = Perturbation()) -> np.ndarray:
    """The clip's ``[2, samples]`` float32 waveform at 32 kHz, in [-1, 1]."""
    samples = spec.audio_samples
    rng = _rng(spec.key, "audio")
    t = np.arange(samples, dtype=np.float64) / SAMPLE_RATE
    shift = perturbation.audio_freq_shift_hz
    out = np.zeros((2, samples), dtype=np.float32)

    # Drone: a low fundamental and its octave with a slow swell.
    drone = rng.uniform(98.0, 147.0)
    swell = 0.75 + 0.25 * np.sin(2 * np.pi * t / rng.uniform(3.0, 6.0))
    for ratio, amplitude in ((1.0, 0.06), (2.0, 0.03)):
        # float64 phases: in float32 a 15 s phase would lose a hundredth of a radian.
        out += amplitude * swell * np.sin(2 * np.pi * (drone * ratio + shift) * t + rng.uniform(0, 2 * np.pi))

    # Melody: pentatonic notes over two octaves, each a decaying harmonic tone.
    pentatonic = 220.0 * 2.0 ** (np.array([0, 2, 4, 7, 9, 12, 14, 16, 19, 21]) / 12)
    local = t[: min(samples, int(1.8 * SAMPLE_RATE))].astype(np.float32)  # notes start at 0 and ring for < 1.8 s
    start = 0
    while start < samples:
        length = int(rng.uniform(0.2, 0.6) * SAMPLE_RATE)
        freq = rng.choice(pentatonic)
        decay = rng.uniform(0.15, 0.4)
        pan = rng.uniform(0.2, 0.8)
        end = min(samples, start + 3 * length)  # notes ring past the next onset
        at = local[: end - start]
        note = np.zeros(end - start, dtype=np.float32)
        for harmonic, amplitude in ((1, 0.16), (2, 0.07), (3, 0.03)):
            omega = np.float32(2 * np.pi * (freq * harmonic + shift))
            note += np.float32(amplitude) * np.sin(omega * at + np.float32(rng.uniform(0, 2 * np.pi)))
        note *= np.minimum(at / np.float32(0.01), 1) * np.exp(-at / np.float32(decay))
        out[0, start:end] += np.float32((1 - pan) * 2) * note
        out[1, start:end] += np.float32(pan * 2) * note
        start += length

    # Noise: white noise through a moving average, per channel.
    box = np.full(_NOISE_BOX, 1 / _NOISE_BOX, dtype=np.float32)
    white = rng.standard_normal((2, samples), dtype=np.float32)
    noise = np.stack([np.convolve(channel, box, mode="same") for channel in white])
    out += np.float32(0.012 / max(float(noise.std()), 1e-12)) * noise

    out *= np.float32(perturbation.audio_gain)
    if perturbation.run_to_run_noise:
        noise_rng = _rng(spec.key, "run-to-run/audio", perturbation.process_seed)
        scale = np.float32(_RUN_TO_RUN_AUDIO * perturbation.run_to_run_noise)
        out += noise_rng.standard_normal(out.shape, dtype=np.float32) * scale
    if perturbation.audio_truncate:
        out = out[:, : max(0, samples - perturbation.audio_truncate)]
    return np.clip(out, -1.0, 1.0)


def render(
    path: str | os.PathLike[str],
    spec: ContentSpec,
    perturbation: Perturbation = Perturbation(),
    *,
    abort: threading.Event | None = None,
) -> RenderInfo:
    """Generate the clip and write its MP4 (see Encoding above).

    Frames are encoded as they are composed, while a second thread makes and
    encodes the audio (PyAV's encoders release the GIL), so a busy machine
    gives the render two shares of CPU. Setting ``abort`` stops the encoding
    at the next frame with :class:`InterruptedError`.
    """
    import av  # here: the API process imports this module for its specs, and only workers encode

    path = Path(path)
    frames = 0
    with av.open(os.fspath(path), mode="w", format="mp4") as container, ThreadPoolExecutor(1, "audio") as thread:
        video = container.add_stream("libx264", rate=FPS, options=_X264_OPTIONS)
        video.width, video.height, video.pix_fmt = spec.width, spec.height, "yuv420p"
        sound = container.add_stream("aac", rate=SAMPLE_RATE, options=_AAC_OPTIONS)
        sound.layout = "stereo"
        audio = thread.submit(_encoded_audio, sound, spec, perturbation)
        for planes in video_frames(spec, perturbation):
            if abort is not None and abort.is_set():
                raise InterruptedError("rendering aborted")
            picture = av.VideoFrame.from_ndarray(planes, format="yuv420p")
            picture.pts = frames
            container.mux(video.encode(picture))
            frames += 1
        container.mux(video.encode())
        packets, samples = audio.result()
        container.mux(packets)
    return RenderInfo(path, frames, samples, path.stat().st_size)


def _encoded_audio(sound: av.audio.stream.AudioStream, spec: ContentSpec, perturbation: Perturbation) -> tuple[list, int]:
    """The clip's AAC packets, the whole waveform encoded as one frame at ``pts = 0``, and its samples per channel."""
    import av
    waveform = audio_track(spec, perturbation)
    frame = av.AudioFrame.from_ndarray(waveform, format="fltp", layout="stereo")
    frame.sample_rate, frame.pts = SAMPLE_RATE, 0
    return [*sound.encode(frame), *sound.encode()], waveform.shape[1]
