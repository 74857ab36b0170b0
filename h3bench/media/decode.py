"""Probe and stream-decode the MP4s that the server returns (:mod:`~h3bench.media.encode` writes them).

Everything here streams: no function holds a whole video in memory. Audio is
small (15 s of stereo 32 kHz float32 is under 4 MB) and is returned whole,
decoded into one array (ten minutes are 154 MB, held once).
"""

from __future__ import annotations

import contextlib
import hashlib
import os
from collections.abc import Generator, Iterator
from dataclasses import dataclass, field
from fractions import Fraction
from typing import Any

import av
import numpy as np

from h3bench.errors import MediaDecodeError
from h3bench.media.tags import DisplayMatrix, VideoTags, display_matrix, video_tags

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
    tags: VideoTags = field(default_factory=VideoTags)  # pixel format details, display matrix, aspect and colour tags


@dataclass(frozen=True)
class AudioInfo:
    codec: str
    sample_rate: int
    channels: int
    duration_s: float | None  # declared
    samples: int  # decoded samples per channel
    start_time_s: float
    sample_format: str = ""  # the decoder's, e.g. ``fltp``
    layout: str = ""  # the channel layout's name, e.g. ``stereo``


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
    reader = MediaReader(path)
    for _ in reader:
        pass
    assert reader.info is not None
    return reader.info


def _video_info(stream: av.video.stream.VideoStream, pts: list[float], display: DisplayMatrix | None) -> VideoInfo:
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
        tags=video_tags(stream, display),
    )


def _plane(plane: Any, width: int, height: int) -> np.ndarray:
    # Planes are padded to line_size; crop the padding away without copying.
    buf = np.frombuffer(plane, dtype=np.uint8).reshape(-1, plane.line_size)
    return buf[:height, :width]


@dataclass(frozen=True)
class DecodedFrame:
    """One decoded frame: its yuv420p planes, and its RGB when the reader was asked for it."""

    yuv: YuvFrame
    rgb: np.ndarray | None  # [H, W, 3] uint8


class _VideoDecode:
    """What one decode of a video stream counts, frame by frame: timestamps, the display matrix, the planes' digest."""

    def __init__(self, stream: av.video.stream.VideoStream, *, rgb: bool, hash_planes: bool, threads: int = 0) -> None:
        stream.thread_type = "AUTO"
        stream.codec_context.thread_count = threads
        self.stream = stream
        self.rgb = rgb
        self.digest = hashlib.sha256() if hash_planes else None
        self.pts: list[float] = []
        self.display: DisplayMatrix | None = None  # the first decoded frame's display matrix, if it has one

    def frame(self, frame: Any) -> DecodedFrame:  # av.VideoFrame: the demuxer's union is not narrowed
        if not self.pts:
            self.display = display_matrix(frame)
        seconds = _seconds(frame.pts, frame.time_base)
        self.pts.append(seconds if seconds is not None else float("nan"))
        decoded = DecodedFrame(_yuv(frame), frame.to_ndarray(format="rgb24") if self.rgb else None)
        if self.digest is not None:
            for plane in (decoded.yuv.y, decoded.yuv.u, decoded.yuv.v):
                self.digest.update(np.ascontiguousarray(plane).data)
        return decoded

    def info(self) -> VideoInfo:
        return _video_info(self.stream, self.pts, self.display)

    def sha256(self) -> str | None:
        return self.digest.hexdigest() if self.digest is not None else None


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
        with _open(self.path) as container:
            if not container.streams.video:
                raise MediaDecodeError(f"{self.path}: no video stream", path=self.path)
            video = _VideoDecode(container.streams.video[0], rgb=self.rgb, hash_planes=self.hash_planes)
            try:
                for frame in container.decode(video.stream):
                    yield video.frame(frame)
            except (av.error.FFmpegError, ValueError) as exc:
                raise _decode_error(self.path, "the video stream", exc) from exc
            self.info = video.info()
        self.sha256 = video.sha256()


class MediaReader:
    """One decode of a whole file in one pass over its packets: iterate once for the video's frames, then read
    what the decode found.

    The audio packets decode as the demuxer reaches them, between the video
    frames, so a file is opened and read once (not once per stream). After
    the iteration ends, ``info`` is the file's :class:`MediaInfo`, with the
    counts of :class:`VideoReader` and :func:`read_audio`; ``pcm`` is the
    decoded audio as :func:`read_audio` returns it (None without an audio
    stream), and ``sha256`` the video planes' digest when ``hash_planes``.
    Frames are :class:`VideoReader`'s, decoded on ``threads`` threads (0:
    libavcodec's choice, about one per core). Errors are
    :class:`~h3bench.errors.MediaDecodeError`: a file without a video or an
    audio stream, a stream that does not decode, a container that does not
    demux.
    """

    def __init__(self, path: _PathLike, *, rgb: bool = False, hash_planes: bool = False, threads: int = 0) -> None:
        self.path = os.fspath(path)
        self.rgb = rgb
        self.hash_planes = hash_planes
        self.threads = threads
        self.info: MediaInfo | None = None
        self.pcm: np.ndarray | None = None
        self.sha256: str | None = None

    def __iter__(self) -> Generator[DecodedFrame, None, None]:
        with _open(self.path) as container:
            video_stream = container.streams.video[0] if container.streams.video else None
            audio_stream = container.streams.audio[0] if container.streams.audio else None
            if video_stream is None and audio_stream is None:
                raise MediaDecodeError(f"{self.path}: no video or audio stream", path=self.path)
            video = (_VideoDecode(video_stream, rgb=self.rgb, hash_planes=self.hash_planes, threads=self.threads)
                     if video_stream else None)
            audio = _AudioDecode(audio_stream) if audio_stream else None
            packets = container.demux([s for s in (video_stream, audio_stream) if s is not None])
            while True:
                try:
                    packet = next(packets)
                except StopIteration:
                    break
                except (av.error.FFmpegError, ValueError) as exc:
                    raise _decode_error(self.path, "the container", exc) from exc
                pcm_sink = audio if audio is not None and packet.stream_index == audio.stream.index else None
                decoded: list[DecodedFrame] = []
                try:
                    if pcm_sink is not None:
                        for frame in packet.decode():
                            pcm_sink.frame(frame)
                    elif video is not None:
                        decoded = [video.frame(frame) for frame in packet.decode()]
                except (av.error.FFmpegError, ValueError) as exc:
                    what = "the audio stream" if pcm_sink is not None else "the video stream"
                    raise _decode_error(self.path, what, exc) from exc
                yield from decoded  # outside the try: what the consumer throws in is not a decode error
            pcm, audio_info = audio.result() if audio is not None else (None, None)
            video_info = video.info() if video is not None else None
        self.pcm, self.sha256 = pcm, video.sha256() if video is not None else None
        self.info = MediaInfo(self.path, os.path.getsize(self.path), video_info, audio_info)


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
        audio = _AudioDecode(container.streams.audio[0])
        try:
            for frame in container.decode(audio.stream):
                audio.frame(frame)
        except (av.error.FFmpegError, ValueError) as exc:
            raise _decode_error(path, "the audio stream", exc) from exc
        return audio.result()


class _AudioDecode:
    """One decode of an audio stream into one PCM array, frame by frame."""

    def __init__(self, stream: av.audio.stream.AudioStream) -> None:
        self.stream = stream
        ctx = stream.codec_context
        self.channels = int(ctx.channels)
        self.buffer = _PcmBuffer(self.channels, _seconds(stream.duration, stream.time_base), int(ctx.sample_rate))

    def frame(self, frame: Any) -> None:  # av.AudioFrame: the demuxer's union is not narrowed
        self.buffer.append(_frame_pcm(frame))

    def result(self) -> tuple[np.ndarray, AudioInfo]:
        stream, ctx = self.stream, self.stream.codec_context
        pcm = self.buffer.result()
        return pcm, AudioInfo(
            codec=ctx.name,
            sample_rate=int(ctx.sample_rate),
            channels=self.channels,
            duration_s=_seconds(stream.duration, stream.time_base),
            samples=int(pcm.shape[1]),
            start_time_s=_seconds(stream.start_time, stream.time_base) or 0.0,
            sample_format=ctx.format.name if ctx.format is not None else "",
            layout=ctx.layout.name if ctx.layout is not None else "",
        )


class _PcmBuffer:
    """Decoded PCM filled in place: one array sized from the declared duration, grown only if it is exceeded.

    Concatenating the decoded frames at the end would hold the PCM twice
    (300 MB for ten minutes of stereo).
    """

    def __init__(self, channels: int, seconds: float | None, rate: int) -> None:
        capacity = int((seconds or 0.0) * rate) + 8192  # AAC padding, and a frame or two of rounding
        self._data = np.empty((channels, capacity), dtype=np.float32)
        self._used = 0

    def append(self, chunk: np.ndarray) -> None:
        end = self._used + chunk.shape[1]
        if end > self._data.shape[1]:
            grown = np.empty((self._data.shape[0], max(end, 2 * self._data.shape[1])), dtype=np.float32)
            grown[:, :self._used] = self._data[:, :self._used]
            self._data = grown
        self._data[:, self._used:end] = chunk
        self._used = end

    def result(self) -> np.ndarray:
        """The PCM, ``[channels, samples]``, contiguous (trimmed in place: no second copy)."""
        channels = self._data.shape[0]
        flat = self._data.reshape(-1)
        for row in range(1, channels):  # move each row next to the one before it
            flat[row * self._used:(row + 1) * self._used] = self._data[row, :self._used]
        return flat[:channels * self._used].reshape(channels, self._used)


def read_pcm(path: _PathLike) -> tuple[np.ndarray, int]:
    """Decode the first audio stream to float32 ``[channels, samples]``; returns the PCM and its sample rate."""
    pcm, info = read_audio(path)
    return pcm, info.sample_rate


def _frame_pcm(frame: Any) -> np.ndarray:  # av.AudioFrame, whose stubs leave its dtype open
    data = frame.to_ndarray()
    channels = frame.layout.nb_channels
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
    reader = MediaReader(path, hash_planes=True)
    for _ in reader:
        pass
    return DecodedDigest(reader.sha256, pcm_sha256(reader.pcm) if reader.pcm is not None else None)


def pcm_sha256(pcm: np.ndarray) -> str:
    """The digest of decoded PCM that :class:`DecodedDigest` records."""
    return hashlib.sha256(np.ascontiguousarray(pcm).data).hexdigest()
