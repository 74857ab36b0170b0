from __future__ import annotations

import subprocess
from pathlib import Path

import imageio_ffmpeg
import pytest

from h3bench import media
from tests_unit import mediagen


@pytest.fixture(scope="session")
def ffmpeg_exe() -> str:
    """The static ffmpeg from the imageio-ffmpeg wheel: the oracle for SSIM and PSNR."""
    return imageio_ffmpeg.get_ffmpeg_exe()


@pytest.fixture
def make_mp4(tmp_path: Path):
    """Write a small real H.264/AAC MP4; keyword arguments choose its content."""

    def make(
        name: str = "clip.mp4",
        *,
        frames: int = 24,
        width: int = 256,
        height: int = 160,
        seed: int = 0,
        noise: float = 0.0,
        audio_samples: int | None = 33_600,
        freq: float = 440.0,
        gain: float = 0.3,
        channels: int = 2,
    ) -> Path:
        audio = None
        if audio_samples is not None:
            audio = mediagen.tone(audio_samples, freq, channels=channels, gain=gain)
        return media.write_mp4(
            tmp_path / name,
            mediagen.textured_frames(frames, width, height, seed=seed, noise=noise),
            audio,
        )

    return make


def run_ffmpeg(ffmpeg: str, *args: str) -> str:
    """Run ffmpeg and return its stderr, where the filters print their summaries."""
    proc = subprocess.run([ffmpeg, "-hide_banner", "-nostats", *args], capture_output=True, text=True, check=True)
    return proc.stderr
