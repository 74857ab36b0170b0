"""What H3 renders for a request: task, reference counts, fps, frame count and canvas, checked as its worker does.

vLLM-Omni checks these on rank 0 of the diffusion pipeline, after the API
accepted the request: the partition's task check
(``diffusion/models/minimax_h3/pipeline_minimax_h3.py``), then
``prepare_encoder_inputs`` and ``resolve_minimax_h3_shape``
(``model_executor/models/minimax_h3/encoder_processing.py`` and
``preprocessing.py``). A failed check is an ``OmniClientError``: an async job
is accepted (200, queued) and then fails with code 400, and the sync endpoint
answers 400. The simulator runs :func:`resolve_shape` when its engine takes
the request, with upstream's messages, and serves the Ref2VA partition
(``--task-type ref2va``):

- the task defaults to ``ref2va``; any other gives "checkpoint partition
  'ref2va' supports ['ref2va'], got task='t2va'";
- at least one image or video reference; at most 9 images, 3 videos, 3
  standalone audios and 12 in all;
- fps, when sent, must be 24 after ``int()``;
- the frame count: a duration (``extra_params.target.duration_seconds``,
  ``extra_params.duration_seconds``, ``extra_params.duration``, else
  ``seconds``) of 4 to 15 s gives ``round(duration * 24)`` frames, else a
  ``num_frames`` above 1, else Ref2VA's 124; the count must lie within
  [4, 15] s at 24 FPS *before* it is snapped up to ``17n + 5``, so
  ``num_frames=121`` renders 124 frames and ``num_frames=362`` is refused;
- the canvas: width and height (``size`` wins over them) floored to
  multiples of 32; without both, the aspect ratio (16:9 by default and for
  ``auto``) at a short edge of 768 within 768x1344 pixels; the ratio must lie
  within [1:4, 4:1].

Two limits are the simulator's own: ``long_video`` is not simulated, and no
side may exceed 4096 pixels (the CPU renders every frame).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from h3bench.h3 import FPS, MAX_SECONDS, MIN_SECONDS, frame_count
from h3bench.sim.forms import SimRequest
from h3bench.sim.worker import GenerationError

__all__ = ["Shape", "resolve_engine_shape", "resolve_shape"]

_PARTITION = "ref2va"
_DEFAULT_FRAMES = 124  # Ref2VA's length when no duration and no num_frames > 1 is given
_SHORT_EDGE = 768
_MAX_PIXELS = 768 * 1344
_RATIOS = {"21:9": 21 / 9, "16:9": 16 / 9, "4:3": 4 / 3, "1:1": 1.0, "3:4": 3 / 4, "9:16": 9 / 16}
_DEFAULT_RATIO = _RATIOS["16:9"]
_MAX_SIDE = 4096


@dataclass(frozen=True)
class Shape:
    """The output H3 renders for a request."""

    width: int
    height: int
    frames: int


def _rejected(message: str) -> GenerationError:
    return GenerationError(message, status_code=400)


def resolve_shape(request: SimRequest) -> Shape:
    """Upstream's worker-side checks and shape, in its order.

    Raises
    ------
    GenerationError
        With ``status_code`` 400 and upstream's message.
    """
    form, refs = request.form, request.references
    width, height = form.width, form.height
    if form.size is not None:
        width, height = (int(side) for side in form.size.split("x"))
    return resolve_engine_shape(
        request.engine_args(), fps=form.fps, num_frames=form.num_frames, width=width, height=height,
        images=refs.images, videos=refs.videos, audios=refs.audios,
    )


def resolve_engine_shape(
    args: Mapping[str, Any], *, fps: float | None, num_frames: int | None, width: int | None, height: int | None,
    images: int, videos: int, audios: int,
) -> Shape:
    """The same checks on what the pipeline receives: its ``extra_args``, fps, frame count, canvas and references.

    ``width`` and ``height`` are the request's, ``size`` already applied. The
    conformance suite's stand-in engine (:mod:`conformance.standin`)
    calls this with the values upstream's serving layer hands the engine.

    Raises
    ------
    GenerationError
        With ``status_code`` 400 and upstream's message.
    """
    task = str(args.get("task") or _PARTITION).lower()
    if task != _PARTITION:
        raise _rejected(f"checkpoint partition {_PARTITION!r} supports [{_PARTITION!r}], got task={task!r}")
    _check_reference_counts(images, videos, audios)
    target = args.get("target")
    if target is not None and not isinstance(target, Mapping):
        raise _rejected("MiniMax H3 extra_args['target'] must be an object")
    target = target or {}
    frames = _frames(args, target, fps, num_frames)
    width, height = _canvas(args, target, width, height)
    return Shape(width, height, frames)


def _check_reference_counts(images: int, videos: int, audios: int) -> None:
    if images + videos == 0:
        raise _rejected("ref2va requires at least one image or video reference")
    for count, limit, what in ((images, 9, "image"), (videos, 3, "video"), (audios, 3, "standalone audio")):
        if count > limit:
            raise _rejected(f"ref2va accepts at most {limit} {what} references")
    if images + videos + audios > 12:
        raise _rejected("ref2va accepts at most 12 total references")


def _frames(args: Mapping[str, Any], target: Mapping[str, Any], fps_sent: float | None, num_frames: int | None) -> int:
    fps = int(fps_sent or FPS)
    if fps != FPS:
        raise _rejected(f"MiniMax H3 output fps is fixed at {FPS}")
    long_video = args.get("long_video", False)
    if not isinstance(long_video, bool):
        raise _rejected("MiniMax H3 long_video must be a boolean")
    if long_video:
        raise _rejected("the h3bench simulator does not simulate long_video; H3's request limit is 15 s")
    limits = f"in [{MIN_SECONDS:g}, {MAX_SECONDS:g}] seconds"
    duration = target.get("duration_seconds", args.get("duration_seconds", args.get("duration")))
    if duration is not None:
        if isinstance(duration, bool):
            raise _rejected(f"MiniMax H3 output duration must be {limits}, got {duration!r}")
        try:
            seconds = float(duration)
        except (TypeError, ValueError):
            raise _rejected(f"MiniMax H3 output duration must be {limits}, got {duration!r}") from None
        if not (math.isfinite(seconds) and MIN_SECONDS <= seconds <= MAX_SECONDS):
            raise _rejected(f"MiniMax H3 output duration must be {limits}, got {seconds}")
        requested = round(seconds * fps)
    elif (num_frames or 1) > 1:
        requested = num_frames or 1
    else:
        requested = _DEFAULT_FRAMES
    if not MIN_SECONDS <= requested / fps <= MAX_SECONDS:
        raise _rejected(f"MiniMax H3 output duration must be {limits}, got {requested / fps:.3f}")
    return frame_count(requested / fps)  # round(requested / 24 * 24) is requested, snapped up to 17n + 5


def _canvas(args: Mapping[str, Any], target: Mapping[str, Any], width: int | None, height: int | None) -> tuple[int, int]:
    ratio = _aspect_ratio(target.get("aspect_ratio", args.get("aspect_ratio")))
    short_edge = target.get("short_edge", args.get("short_edge", _SHORT_EDGE))
    if isinstance(short_edge, bool) or not isinstance(short_edge, int):
        raise _rejected(f"MiniMax H3 target.short_edge must be {_SHORT_EDGE}, got {short_edge!r}")
    if width is None or height is None:
        if short_edge != _SHORT_EDGE:
            raise _rejected(f"MiniMax H3 target.short_edge must be {_SHORT_EDGE}, got {short_edge}")
        width, height = _ratio_canvas(ratio)
    width, height = width // 32 * 32, height // 32 * 32
    if min(width, height) <= 0:
        raise _rejected(f"invalid MiniMax H3 canvas {width}x{height}")
    if width > 4 * height or height > 4 * width:
        raise _rejected("MiniMax H3 canvas aspect ratio must be in [1:4, 4:1]")
    if max(width, height) > _MAX_SIDE:
        raise _rejected(f"the h3bench simulator renders at most {_MAX_SIDE} pixels a side; got {width}x{height}")
    return width, height


def _aspect_ratio(value: Any) -> float:
    """Ref2VA's aspect ratio: 16:9 when absent or ``auto``/``adaptive``, else one of H3's six, by name or value."""
    supported = ", ".join(_RATIOS)
    if value is None:
        return _DEFAULT_RATIO
    if isinstance(value, str):
        name = value.strip().lower()
        if name in ("auto", "adaptive"):
            return _DEFAULT_RATIO
        if name in _RATIOS:
            return _RATIOS[name]
        try:
            number = float(name)
        except ValueError:
            raise _rejected(f"MiniMax H3 aspect_ratio must be one of {supported}, got {value!r}") from None
    elif isinstance(value, (int, float)) and not isinstance(value, bool):
        number = float(value)
    else:
        raise _rejected(f"MiniMax H3 aspect_ratio must be a string ratio, got {value!r}")
    if not any(math.isclose(number, ratio, rel_tol=0.0, abs_tol=1e-6) for ratio in _RATIOS.values()):
        raise _rejected(f"MiniMax H3 aspect_ratio must be one of {supported}, got {value!r}")
    return number


def _ratio_canvas(ratio: float) -> tuple[int, int]:
    """Width and height for ``ratio`` at a short edge of 768, scaled into 768x1344 pixels, in steps of 32."""
    width, height = (_SHORT_EDGE * ratio, float(_SHORT_EDGE)) if ratio >= 1 else (float(_SHORT_EDGE), _SHORT_EDGE / ratio)
    if width * height > _MAX_PIXELS:
        scale = math.sqrt(_MAX_PIXELS / (width * height))
        width, height = width * scale, height * scale
    return max(32, round(width / 32) * 32), max(32, round(height / 32) * 32)
