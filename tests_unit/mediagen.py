"""Small, deterministic media for the harness's own tests.

The frames have texture and motion (so SSIM and LPIPS respond to changes the
way they do on real video) and the audio is tonal, so spectral metrics do too.
"""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np

SAMPLE_RATE = 32_000


def textured_frames(
    count: int, width: int = 256, height: int = 160, *, seed: int = 0, noise: float = 0.0, noise_seed: int | None = None
) -> Iterator[np.ndarray]:
    """Yield ``count`` RGB frames of a smooth textured scene that pans; ``noise`` is an added Gaussian sigma.

    ``seed`` picks the scene, ``noise_seed`` (default ``seed + 1``) the noise realization.
    """
    rng = np.random.default_rng(seed)
    yy, xx = np.mgrid[0:height, 0:width].astype(np.float32)
    phases = rng.uniform(0, 2 * np.pi, size=(3, 4))
    freqs = rng.uniform(0.02, 0.15, size=(3, 4, 2))
    noise_rng = np.random.default_rng(seed + 1 if noise_seed is None else noise_seed)
    for index in range(count):
        shift = 2.0 * index
        rgb = np.empty((height, width, 3), dtype=np.float32)
        for c in range(3):
            acc = np.zeros((height, width), dtype=np.float32)
            for k in range(4):
                fx, fy = freqs[c, k]
                acc += np.sin(fx * (xx + shift) + fy * yy + phases[c, k])
            rgb[..., c] = 128 + 28 * acc
        if noise > 0:
            rgb += noise_rng.normal(0, noise, size=rgb.shape).astype(np.float32)
        yield np.clip(rgb, 0, 255).astype(np.uint8)


def tone(samples: int, freq: float = 440.0, *, channels: int = 2, gain: float = 0.3, phase: float = 0.0) -> np.ndarray:
    """A ``[channels, samples]`` float32 sine, with the second channel a fifth above."""
    t = np.arange(samples, dtype=np.float64) / SAMPLE_RATE
    rows = [gain * np.sin(2 * np.pi * freq * (1.5**c) * t + phase) for c in range(channels)]
    return np.stack(rows).astype(np.float32)
