"""What a video stream says about how to show its pixels: bit depth, display matrix, aspect and colour tags.

A decoder ignores all of these when it hands out planes, so two files can
decode to identical planes and still look different: a display matrix turns
the picture (vLLM-Omni's ``diffusion/utils/media_utils.py`` writes none), a
sample aspect ratio stretches it, and the colour tags change how players
convert it to RGB. The names are ffmpeg's (``ffprobe``'s ``color_range``,
``color_space``, ``color_primaries``, ``color_transfer``); a code ffmpeg has
no name for is shown as its number.
"""

from __future__ import annotations

from dataclasses import dataclass
from fractions import Fraction
from typing import cast

import av
import numpy as np
from av.sidedata.sidedata import SideDataContainer, Type

__all__ = ["DisplayMatrix", "VideoTags", "display_matrix", "tag_name", "video_tags"]

# libavutil's enum values (pixfmt.h) by ffmpeg's names for them.
_RANGES = {0: "unknown", 1: "tv", 2: "pc"}
_SPACES = {0: "gbr", 1: "bt709", 2: "unknown", 4: "fcc", 5: "bt470bg", 6: "smpte170m", 7: "smpte240m",
           8: "ycgco", 9: "bt2020nc", 10: "bt2020c", 11: "smpte2085", 12: "chroma-derived-nc",
           13: "chroma-derived-c", 14: "ictcp"}  # fmt: skip
_PRIMARIES = {1: "bt709", 2: "unknown", 4: "bt470m", 5: "bt470bg", 6: "smpte170m", 7: "smpte240m", 8: "film",
              9: "bt2020", 10: "smpte428", 11: "smpte431", 12: "smpte432", 22: "ebu3213"}  # fmt: skip
_TRANSFERS = {1: "bt709", 2: "unknown", 4: "gamma22", 5: "gamma28", 6: "smpte170m", 7: "smpte240m", 8: "linear",
              9: "log100", 10: "log316", 11: "iec61966-2-4", 12: "bt1361e", 13: "iec61966-2-1", 14: "bt2020-10",
              15: "bt2020-12", 16: "smpte2084", 17: "smpte428", 18: "arib-std-b67"}  # fmt: skip


@dataclass(frozen=True)
class DisplayMatrix:
    """A frame's display matrix: its nine 16.16/2.30 fixed-point entries, and the rotation they give."""

    entries: tuple[int, ...]
    rotation: float  # degrees counter-clockwise, as PyAV's ``VideoFrame.rotation`` reads the matrix

    def __str__(self) -> str:
        return f"rotated {self.rotation:g} degrees counter-clockwise, matrix [{' '.join(map(str, self.entries))}]"


@dataclass(frozen=True)
class VideoTags:
    """The stream's presentation properties (defaults: what an untagged 8-bit file says)."""

    bit_depth: int = 8  # bits of the deepest component
    display: DisplayMatrix | None = None  # None: no display matrix, shown as decoded
    sample_aspect_ratio: Fraction = Fraction(1)
    color_range: str = "unknown"
    color_space: str = "unknown"
    color_primaries: str = "unknown"
    color_transfer: str = "unknown"


def display_matrix(frame: av.VideoFrame) -> DisplayMatrix | None:
    """The frame's display matrix side data (ffmpeg attaches the stream's to each frame), or None."""
    # PyAV 18.1.0's stub types it as a TypedDict, 18.1.1's as the container it is: read through object, so that
    # the cast is needed (not redundant) under both.
    side_data: object = frame.side_data
    item = cast(SideDataContainer, side_data).get(Type.DISPLAYMATRIX)
    if item is None:
        return None
    entries = tuple(int(v) for v in np.frombuffer(bytes(item), dtype="<i4"))
    return DisplayMatrix(entries, float(frame.rotation))


def tag_name(names: dict[int, str], code: int | None) -> str:
    """ffmpeg's name for the enum value ``code`` in ``names``; its number when ffmpeg has no name for it."""
    return "unknown" if code is None else names.get(int(code), str(int(code)))


def video_tags(stream: av.video.stream.VideoStream, display: DisplayMatrix | None) -> VideoTags:
    """The tags of an opened video stream, with the display matrix its first frame carried."""
    ctx = stream.codec_context
    depth = max((c.bits for c in ctx.format.components), default=0) if ctx.format is not None else 0
    # An unset ratio (PyAV's None, ffmpeg's 0/1) means square pixels: PyAV's muxer writes none, ffmpeg's 1:1.
    sar = stream.sample_aspect_ratio or ctx.sample_aspect_ratio or Fraction(1)
    return VideoTags(
        bit_depth=depth,
        display=display,
        sample_aspect_ratio=Fraction(sar),
        color_range=tag_name(_RANGES, ctx.color_range),
        color_space=tag_name(_SPACES, ctx.colorspace),
        color_primaries=tag_name(_PRIMARIES, ctx.color_primaries),
        color_transfer=tag_name(_TRANSFERS, ctx.color_trc),
    )
