"""Write an MP4 as vLLM-Omni muxes its outputs: the simulator's outputs and the tests' clips.

The writer reproduces vLLM-Omni's ``diffusion/utils/media_utils.py``: H.264
yuv420p at crf 18 and 24 FPS, AAC stereo 32 kHz, and the whole waveform as one
AudioFrame with ``pts = 0``. :mod:`~h3bench.media.decode` reads them back.
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from pathlib import Path

import av
import numpy as np

__all__ = ["write_mp4"]


def write_mp4(
    path: str | os.PathLike[str],
    frames: Iterable[np.ndarray],
    audio: np.ndarray | None,
    *,
    fps: int = 24,
    sample_rate: int = 32_000,
    crf: int = 18,
) -> Path:
    """Mux RGB frames and a ``[channels, samples]`` float32 waveform as vLLM-Omni does.

    ``frames`` may be a generator; frames are encoded as they arrive. The
    audio, when given, is encoded as one AudioFrame with ``pts = 0``.
    """
    path = Path(path)
    with av.open(os.fspath(path), mode="w", format="mp4") as container:
        video = container.add_stream("libx264", rate=fps)
        video.pix_fmt = "yuv420p"
        video.options = {"crf": str(crf)}
        audio_stream = None
        if audio is not None:
            audio_stream = container.add_stream("aac", rate=sample_rate)
            audio_stream.layout = "stereo" if audio.shape[0] == 2 else "mono"
        for index, rgb in enumerate(frames):
            if index == 0:
                video.height, video.width = rgb.shape[:2]
            frame = av.VideoFrame.from_ndarray(np.ascontiguousarray(rgb), format="rgb24")
            frame.pts = index
            container.mux(video.encode(frame))
        container.mux(video.encode())
        if audio_stream is not None:
            pcm = np.ascontiguousarray(audio, dtype=np.float32)
            aframe = av.AudioFrame.from_ndarray(pcm, format="fltp", layout=audio_stream.layout.name)
            aframe.sample_rate = sample_rate
            aframe.pts = 0
            container.mux(audio_stream.encode(aframe))
            container.mux(audio_stream.encode())
    return path
