"""One HTTP answer, normalised so that two servers' answers to the same probe can be compared field by field.

What changes from one request to the next and says nothing about the
contract is masked: job ids (``video_gen_<hex>``), sync request ids,
timestamps, measured times and the values of stage durations (their keys
stay). Everything else is kept: status, content type, the JSON body, the
headers a client reads (``X-Model``, ``X-Stage-Durations`` and the others of
the sync endpoint, ``Content-Disposition``), and for an MP4 what it holds
(codecs, size, frame and sample counts), read with :func:`h3bench.media.probe`.

:meth:`Answer.flat` gives the ``path → value`` pairs the comparison works on,
such as ``status``, ``body.error.param`` or ``headers.x-model``.
"""

from __future__ import annotations

import json
import re
import tempfile
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx

from h3bench import media
from h3bench.errors import MediaDecodeError

__all__ = ["Answer", "flatten", "normalize_json", "normalize_response"]

# Generated ids keep their prefix and the length of their hex part, so a change of format still shows.
_IDS = re.compile(r"(video_gen_|video_sync-|modelperm-)([0-9a-f]+)")
# Keys whose numbers change with every request or server start.
_VOLATILE = frozenset({"created_at", "completed_at", "expires_at", "created", "inference_time_s"})
_SECONDS_MAP = frozenset({"stage_durations"})
# The headers a client of the video API reads; the rest (date, server, content-length) say nothing of the contract.
_HEADERS = ("content-type", "content-disposition", "x-request-id", "x-model", "x-inference-time-s",
            "x-stage-durations", "x-peak-memory-mb")
MASK_NUMBER = "<number>"


def _mask_text(text: str) -> str:
    return _IDS.sub(lambda match: f"{match.group(1)}<hex{len(match.group(2))}>", text)


def normalize_json(value: Any, key: str | None = None) -> Any:
    """``value`` with ids, timestamps, measured times and stage-duration values masked; the structure unchanged."""
    if isinstance(value, dict):
        if key in _SECONDS_MAP:
            return {str(k): MASK_NUMBER if isinstance(v, (int, float)) else normalize_json(v) for k, v in value.items()}
        return {str(k): normalize_json(v, str(k)) for k, v in value.items()}
    if isinstance(value, list):
        return [normalize_json(item) for item in value]
    if isinstance(value, str):
        return _mask_text(value)
    if key in _VOLATILE and isinstance(value, (int, float)) and not isinstance(value, bool):
        return MASK_NUMBER
    return value


def _header(name: str, value: str) -> Any:
    if name == "x-inference-time-s":
        return MASK_NUMBER
    if name == "x-stage-durations":
        try:
            return normalize_json(json.loads(value), "stage_durations")
        except ValueError:
            return value
    return _mask_text(value)


def _mp4_summary(content: bytes) -> dict[str, Any]:
    """What an MP4 holds: codecs, canvas, frames and rate, audio rate, channels and samples."""
    with tempfile.TemporaryDirectory(prefix="h3bench-probe-") as scratch:
        path = Path(scratch) / "answer.mp4"
        path.write_bytes(content)
        try:
            info = media.probe(path)
        except MediaDecodeError as exc:
            return {"undecodable": str(exc).replace(str(path), "answer.mp4")}
    summary: dict[str, Any] = {}
    if info.video is not None:
        video = info.video
        summary["video"] = {"codec": video.codec, "width": video.width, "height": video.height,
                            "pix_fmt": video.pix_fmt, "frames": video.frames, "fps": str(video.avg_frame_rate)}
    if info.audio is not None:
        audio = info.audio
        summary["audio"] = {"codec": audio.codec, "sample_rate": audio.sample_rate, "channels": audio.channels,
                            "declared_duration_s": audio.duration_s}
    return summary


@dataclass(frozen=True)
class Answer:
    """One normalised HTTP answer: status, body kind (json, mp4, text, empty), body and the client-facing headers."""

    status: int
    kind: str
    body: Any
    headers: Mapping[str, Any] = field(default_factory=dict)

    def flat(self) -> dict[str, Any]:
        """``path → value`` over the whole answer: ``status``, ``kind``, ``body.…`` and ``headers.…``."""
        pairs: dict[str, Any] = {"status": self.status, "kind": self.kind}
        pairs.update(flatten(self.body, "body"))
        pairs.update({f"headers.{name}": value for name, value in self.headers.items()})
        return pairs

    def summary(self, width: int = 60) -> str:
        """A one-line description for the probe table: the status and what the body says."""
        text = f"{self.status} {self.kind}"
        body = self.body
        if self.kind == "mp4" and isinstance(body, dict):
            video, audio = body.get("video") or {}, body.get("audio") or {}
            text += f" {video.get('width')}x{video.get('height')} {video.get('frames')} frames, {audio.get('codec')} audio"
        elif isinstance(body, dict):
            error = body.get("error")
            if isinstance(error, dict) and error.get("message") is not None:
                text += f" {error.get('type') or error.get('code')}: {error['message']}"
            elif "status" in body and "object" in body:
                text += f" {body['object']} {body['status']}"
            else:
                text += " " + json.dumps(body, sort_keys=True)
        elif body not in (None, ""):
            text += f" {body!r}"
        text = " ".join(text.split())  # validation messages span lines
        return text if len(text) <= width else text[: width - 1] + "…"

    def to_dict(self) -> dict[str, Any]:
        return {"status": self.status, "kind": self.kind, "body": self.body, "headers": dict(self.headers)}


def flatten(value: Any, prefix: str) -> dict[str, Any]:
    """Nested dicts and lists as ``prefix.key.0.key → leaf``; an empty dict or list is a leaf of its own."""
    if isinstance(value, dict) and value:
        out: dict[str, Any] = {}
        for key, item in value.items():
            out.update(flatten(item, f"{prefix}.{key}"))
        return out
    if isinstance(value, list) and value:
        out = {}
        for index, item in enumerate(value):
            out.update(flatten(item, f"{prefix}.{index}"))
        return out
    return {prefix: value}


def normalize_response(response: httpx.Response) -> Answer:
    """An :class:`Answer` from a read httpx response."""
    content_type = response.headers.get("content-type", "")
    headers = {name: _header(name, response.headers[name]) for name in _HEADERS if name in response.headers}
    content = response.content
    if content_type.startswith("video/mp4"):
        return Answer(response.status_code, "mp4", _mp4_summary(content), headers)
    if not content:
        return Answer(response.status_code, "empty", None, headers)
    if content_type.startswith("application/json"):
        try:
            return Answer(response.status_code, "json", normalize_json(response.json()), headers)
        except ValueError:
            pass
    return Answer(response.status_code, "text", _mask_text(response.text[:2000]), headers)
