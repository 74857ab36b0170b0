"""Media: probe, stream-decode and write the MP4s that a server returns.

:mod:`~h3bench.media.decode` reads MP4s (one pass over both streams),
:mod:`~h3bench.media.encode` writes them as vLLM-Omni muxes,
:mod:`~h3bench.media.tags` reads what a video stream says about how to show
its pixels, :mod:`~h3bench.media.prefetch` runs a decoder a few frames ahead
of its consumer, and :mod:`~h3bench.media.pairs` walks two videos' frames in
lockstep for the metrics. Their API is re-exported here.
"""

from __future__ import annotations

from h3bench.media.decode import (
    AudioInfo,
    DecodedDigest,
    DecodedFrame,
    MediaInfo,
    MediaReader,
    VideoInfo,
    VideoReader,
    YuvFrame,
    decoded_digest,
    iter_rgb_frames,
    iter_yuv_frames,
    pcm_sha256,
    probe,
    read_audio,
    read_pcm,
)
from h3bench.media.encode import write_mp4

__all__ = [
    "AudioInfo",
    "DecodedDigest",
    "DecodedFrame",
    "MediaInfo",
    "MediaReader",
    "VideoInfo",
    "VideoReader",
    "YuvFrame",
    "decoded_digest",
    "iter_rgb_frames",
    "iter_yuv_frames",
    "pcm_sha256",
    "probe",
    "read_audio",
    "read_pcm",
    "write_mp4",
]
