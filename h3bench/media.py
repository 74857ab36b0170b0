"""Probe, stream-decode and write the MP4s that the server returns.

Everything here streams: no function holds a whole video in memory. Audio is
small (15 s of stereo 32 kHz float32 is under 4 MB) and is returned whole.

The writer reproduces vLLM-Omni's muxing (diffusion/utils/media_utils.py, see
REFERENCE §3): H.264 yuv420p at crf 18 and 24 FPS, AAC stereo 32 kHz, and the
whole waveform as one AudioFrame with ``pts = 0``.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
from collections.abc import Generator, Iterable, Iterator
from dataclasses import dataclass
from fractions import Fraction
from pathlib import Path

import av
import numpy as np

from h3bench.errors import MediaDecodeError

__all__ = [
    "AudioInfo",
    "DecodedDigest",
    "DecodedFrame",
    "MediaInfo",
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
    "streams_of",
    "write_mp4",
]

_PathLike = str | os.PathLike[str]


@dataclass(frozen=True)
class VideoInfo:
    codec: str
    width: int
    height: int
    pix_fmt: str
    avg_frame_rate: Fraction
    frames: int  # counted by decoding
    declared_frames: int  # what the container says
    duration_s: float | None  # declared
    start_time_s: float
    frame_pts_s: tuple[float, ...]  # presentation times of the decoded frames


@dataclass(frozen=True)
class AudioInfo:
    codec: str
    sample_rate: int
    channels: int
    duration_s: float | None  # declared
    samples: int  # decoded samples per channel
    start_time_s: float


@dataclass(frozen=True)
class MediaInfo:
    path: str
    size_bytes: int
    video: VideoInfo | None
    audio: AudioInfo | None


@dataclass(frozen=True)
class YuvFrame:
    """One decoded frame as its three yuv420p planes (uint8, cropped to size)."""

    y: np.ndarray
    u: np.ndarray
    v: np.ndarray


@contextlib.contextmanager
def _open(path: _PathLike) -> Iterator[av.container.InputContainer]:
    """Open a media file, turning every failure into MediaDecodeError."""
    path = os.fspath(path)
    if not os.path.exists(path):
        raise MediaDecodeError(f"{path}: no such file", path=path)
    if os.path.getsize(path) == 0:
        raise MediaDecodeError(f"{path}: the file is empty", path=path)
    try:
        container = av.open(path)
    except (av.error.FFmpegError, OSError, ValueError) as exc:
        raise MediaDecodeError(f"{path}: not a readable media file ({exc})", path=path) from exc
    try:
        yield container
    finally:
        container.close()


def _decode_error(path: _PathLike, what: str, exc: Exception) -> MediaDecodeError:
    return MediaDecodeError(f"{os.fspath(path)}: {what} does not decode ({exc})", path=os.fspath(path))


def _seconds(value: int | None, time_base: Fraction | None) -> float | None:
    if value is None or time_base is None:
        return None
    return float(value * time_base)


def probe(path: _PathLike) -> MediaInfo:
    """Describe a file's first video and audio stream; either may be absent.

    Frame and sample counts are verified by decoding, durations are what the
    container declares, and start times are the streams' declared starts.
    """
    has_video, has_audio = streams_of(path)
    video = None
    if has_video:
        reader = VideoReader(path)
        for _ in reader:
            pass
        video = reader.info
    audio = read_audio(path)[1] if has_audio else None
    return MediaInfo(path=os.fspath(path), size_bytes=os.path.getsize(path), video=video, audio=audio)


def streams_of(path: _PathLike) -> tuple[bool, bool]:
    """Whether the file has a video and an audio stream; MediaDecodeError if it has neither or does not open."""
    with _open(path) as container:
        has_video, has_audio = bool(container.streams.video), bool(container.streams.audio)
    if not has_video and not has_audio:
        raise MediaDecodeError(f"{os.fspath(path)}: no video or audio stream", path=os.fspath(path))
    return has_video, has_audio


def _video_info(stream, pts: list[float]) -> VideoInfo:
    ctx = stream.codec_context
    rate = stream.average_rate or stream.guessed_rate or Fraction(0)
    return VideoInfo(
        codec=ctx.name,
        width=ctx.width,
        height=ctx.height,
        pix_fmt=ctx.pix_fmt or "",
        avg_frame_rate=Fraction(rate),
        frames=len(pts),
        declared_frames=int(stream.frames or 0),
        duration_s=_seconds(stream.duration, stream.time_base),
        start_time_s=_seconds(stream.start_time, stream.time_base) or 0.0,
        frame_pts_s=tuple(pts),
    )


def _plane(plane, width: int, height: int) -> np.ndarray:
    # Planes are padded to line_size; crop the padding away without copying.
    buf = np.frombuffer(plane, dtype=np.uint8).reshape(-1, plane.line_size)
    return buf[:height, :width]


@dataclass(frozen=True)
class DecodedFrame:
    """One decoded frame: its yuv420p planes, and its RGB when the reader was asked for it."""

    yuv: YuvFrame
    rgb: np.ndarray | None  # [H, W, 3] uint8


class VideoReader:
    """One decode of a file's first video stream: iterate once for the frames, then read what it counted.

    After the iteration ends, ``info`` is the stream's :class:`VideoInfo`
    (frames counted by this decode, their timestamps) and, with
    ``hash_planes``, ``sha256`` is the SHA-256 of every frame's Y, U and V
    planes in order (:func:`decoded_digest`). Frames in another pixel format
    are converted to yuv420p, as ffmpeg's ``ssim`` and ``psnr`` filters would
    negotiate; ``rgb`` frames are libswscale's default yuv420p → rgb24
    (BT.601), what PyAV's ``to_ndarray(format="rgb24")`` gives. Errors are
    :class:`~h3bench.errors.MediaDecodeError`.
    """

    def __init__(self, path: _PathLike, *, rgb: bool = False, hash_planes: bool = False) -> None:
        self.path = os.fspath(path)
        self.rgb = rgb
        self.hash_planes = hash_planes
        self.info: VideoInfo | None = None
        self.sha256: str | None = None

    def __iter__(self) -> Generator[DecodedFrame, None, None]:
        digest = hashlib.sha256() if self.hash_planes else None
        pts: list[float] = []
        with _open(self.path) as container:
            if not container.streams.video:
                raise MediaDecodeError(f"{self.path}: no video stream", path=self.path)
            stream = container.streams.video[0]
            stream.thread_type = "AUTO"
            try:
                for frame in container.decode(stream):
                    seconds = _seconds(frame.pts, frame.time_base)
                    pts.append(seconds if seconds is not None else float("nan"))
                    decoded = DecodedFrame(_yuv(frame), frame.to_ndarray(format="rgb24") if self.rgb else None)
                    if digest is not None:
                        for plane in (decoded.yuv.y, decoded.yuv.u, decoded.yuv.v):
                            digest.update(np.ascontiguousarray(plane).data)
                    yield decoded
            except (av.error.FFmpegError, ValueError) as exc:
                raise _decode_error(self.path, "the video stream", exc) from exc
            self.info = _video_info(stream, pts)
        self.sha256 = digest.hexdigest() if digest is not None else None


def _yuv(frame: av.VideoFrame) -> YuvFrame:
    if frame.format.name != "yuv420p":
        frame = frame.reformat(format="yuv420p")
    w, h = frame.width, frame.height
    return YuvFrame(
        y=_plane(frame.planes[0], w, h),
        u=_plane(frame.planes[1], (w + 1) // 2, (h + 1) // 2),
        v=_plane(frame.planes[2], (w + 1) // 2, (h + 1) // 2),
    )


def iter_yuv_frames(path: _PathLike) -> Generator[YuvFrame, None, None]:
    """Yield each video frame's yuv420p planes, one frame at a time (see :class:`VideoReader`)."""
    for frame in VideoReader(path):
        yield frame.yuv


def iter_rgb_frames(path: _PathLike) -> Generator[np.ndarray, None, None]:
    """Yield each video frame as an ``[H, W, 3]`` uint8 RGB array (see :class:`VideoReader`)."""
    for frame in VideoReader(path, rgb=True):
        assert frame.rgb is not None
        yield frame.rgb


def read_audio(path: _PathLike) -> tuple[np.ndarray, AudioInfo]:
    """Decode the first audio stream to float32 ``[channels, samples]``, and describe it.

    The :class:`AudioInfo`'s sample count is this decode's. AAC padding at the
    end is kept: trimming to an expected count is the caller's decision.
    """
    with _open(path) as container:
        if not container.streams.audio:
            raise MediaDecodeError(f"{os.fspath(path)}: no audio stream", path=os.fspath(path))
        stream = container.streams.audio[0]
        chunks: list[np.ndarray] = []
        try:
            for frame in container.decode(stream):
                chunks.append(_frame_pcm(frame))
        except (av.error.FFmpegError, ValueError) as exc:
            raise _decode_error(path, "the audio stream", exc) from exc
        ctx = stream.codec_context
        channels = int(ctx.channels)
        pcm = np.concatenate(chunks, axis=1) if chunks else np.zeros((channels, 0), dtype=np.float32)
        info = AudioInfo(
            codec=ctx.name,
            sample_rate=int(ctx.sample_rate),
            channels=channels,
            duration_s=_seconds(stream.duration, stream.time_base),
            samples=int(pcm.shape[1]),
            start_time_s=_seconds(stream.start_time, stream.time_base) or 0.0,
        )
    return pcm, info


def read_pcm(path: _PathLike) -> tuple[np.ndarray, int]:
    """Decode the first audio stream to float32 ``[channels, samples]``; returns the PCM and its sample rate."""
    pcm, info = read_audio(path)
    return pcm, info.sample_rate


def _frame_pcm(frame) -> np.ndarray:
    data = frame.to_ndarray()
    channels = len(frame.layout.channels)
    if not frame.format.is_planar:
        data = data.reshape(-1, channels).T
    if data.dtype.kind == "i":
        data = data.astype(np.float32) / float(np.iinfo(data.dtype).max + 1)
    return data.astype(np.float32, copy=False)


@dataclass(frozen=True)
class DecodedDigest:
    """SHA-256 of the decoded media, for exact-equality diagnostics (container bytes may differ)."""

    video_sha256: str | None
    pcm_sha256: str | None


def decoded_digest(path: _PathLike) -> DecodedDigest:
    """Hash the decoded yuv420p planes frame by frame, and the decoded float32 PCM."""
    has_video, has_audio = streams_of(path)
    video = pcm = None
    if has_video:
        reader = VideoReader(path, hash_planes=True)
        for _ in reader:
            pass
        video = reader.sha256
    if has_audio:
        pcm = pcm_sha256(read_audio(path)[0])
    return DecodedDigest(video, pcm)


def pcm_sha256(pcm: np.ndarray) -> str:
    """The digest of decoded PCM that :class:`DecodedDigest` records."""
    return hashlib.sha256(np.ascontiguousarray(pcm).data).hexdigest()


def write_mp4(
    path: _PathLike,
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
