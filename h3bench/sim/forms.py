"""Parsing and validating the multipart form of ``POST /v1/videos[/sync]``, as vLLM-Omni does.

Form fields and their constraints follow upstream's ``_parse_video_form``
(``entrypoints/openai/video/generation/helpers.py``), the upload rules follow
H3's (at most 12 references, video ≤ 50 MiB as .mp4/.mov, audio ≤ 15 MiB as
.wav/.mp3, image ≤ 30 MiB), and a bad field is a 400 with vLLM's
``ErrorResponse`` body.

On purpose, ``extra_params[...]`` form fields get a 400: the OpenAI SDK
spreads a dict given in ``extra_body`` into such fields, which vLLM-Omni
silently ignores (the request then runs with default duration and task); a
client must send ``json.dumps`` of the dict. URL references
(``video_reference`` and the like) are validated as JSON and folded into the
content key, never downloaded.
"""

from __future__ import annotations

import hashlib
import json
import math
import secrets
from dataclasses import dataclass
from http import HTTPStatus
from pathlib import Path
from typing import Annotated, Any

from fastapi import Request
from pydantic import BaseModel, ConfigDict, Field, StringConstraints, ValidationError
from starlette.datastructures import FormData, UploadFile
from starlette.exceptions import HTTPException

from h3bench.h3 import MAX_SECONDS, MIN_SECONDS, audio_sample_count, frame_count
from h3bench.sim.content import ContentSpec, content_key

__all__ = ["Form", "SimRequest", "bad_request", "parse_request"]

_MIB = 1024 * 1024
_MAX_REFERENCES = 12
_UPLOAD_LIMITS = {"image": 30 * _MIB, "video": 50 * _MIB, "audio": 15 * _MIB}
_IMAGE_SUFFIXES = {".png", ".jpg", ".jpeg", ".webp", ".heic", ".heif"}
_AUDIO_KIND_SUFFIXES = {".wav", ".mp3", ".m4a", ".aac", ".flac", ".ogg"}
_VIDEO_SUFFIXES = {".mp4", ".mov"}
_AUDIO_SUFFIXES = {".wav", ".mp3"}
_DEFAULT_SIZE = (1344, 768)
_MAX_SIDE = 4096
_DEFAULT_DURATION_S = 5.0
_JSON_FIELDS = ("image_reference", "video_reference", "audio_reference", "lora", "extra_params")


class Form(BaseModel):
    """The scalar form fields of upstream's ``_parse_video_form``, with its constraints."""

    model_config = ConfigDict(extra="ignore")

    prompt: str
    model: str | None = None
    seconds: Annotated[str, StringConstraints(pattern=r"^[1-9]\d*$")] | None = None
    size: Annotated[str, StringConstraints(pattern=r"^\d+x\d+$")] | None = None
    user: str | None = None
    width: Annotated[int, Field(ge=1)] | None = None
    height: Annotated[int, Field(ge=1)] | None = None
    num_frames: Annotated[int, Field(ge=1)] | None = None
    fps: Annotated[float, Field(ge=1, allow_inf_nan=False)] | None = None
    quality: str | None = None
    num_inference_steps: Annotated[int, Field(ge=1, le=200)] | None = None
    guidance_scale: Annotated[float, Field(ge=0, le=20)] | None = None
    flow_shift: float | None = None
    seed: int | None = None
    negative_prompt: str | None = None
    return_stage_metrics: bool | None = None


@dataclass(frozen=True)
class SimRequest:
    """A validated generation request."""

    form: Form
    width: int
    height: int
    duration_s: float
    seed: int
    reference_digests: tuple[str, ...]

    @property
    def frames(self) -> int:
        return frame_count(self.duration_s)

    def content(self) -> ContentSpec:
        frames = self.frames
        key = content_key(
            seed=self.seed,
            prompt=self.form.prompt,
            reference_digests=self.reference_digests,
            width=self.width,
            height=self.height,
            frames=frames,
        )
        return ContentSpec(self.width, self.height, frames, audio_sample_count(frames), key)

    def describe(self) -> str:
        return (
            f"{self.duration_s:g} s, {self.frames} frames, {self.width}x{self.height}, seed {self.seed}, "
            f"{len(self.reference_digests)} reference(s)"
        )


def bad_request(message: str) -> HTTPException:
    return HTTPException(status_code=HTTPStatus.BAD_REQUEST, detail=message)


def _json_field(form: FormData, name: str) -> Any:
    value = form.get(name)
    if value is None or value == "":
        return None
    if not isinstance(value, str):
        raise bad_request(f"{name} must be a text form field holding JSON, not a file")
    try:
        return json.loads(value)
    except json.JSONDecodeError as exc:
        raise bad_request(f"Invalid JSON in form field {name!r}: {exc}") from exc


def _upload_kind(upload: UploadFile) -> str:
    """image, audio or video, by MIME type then suffix, as upstream's ``_uploaded_media_kind``."""
    content_type = (upload.content_type or "").lower()
    if content_type.startswith("image/"):
        return "image"
    if content_type.startswith("audio/"):
        return "audio"
    suffix = Path(upload.filename or "").suffix.lower()
    if suffix in _IMAGE_SUFFIXES:
        return "image"
    if suffix in _AUDIO_KIND_SUFFIXES:
        return "audio"
    return "video"


async def _reference_digest(upload: UploadFile) -> str:
    """Check one upload against H3's limits and return ``kind:sha256``."""
    kind = _upload_kind(upload)
    limit = _UPLOAD_LIMITS[kind]
    name = upload.filename or "(unnamed)"
    suffix = Path(upload.filename or "").suffix.lower()
    if kind == "video" and suffix and suffix not in _VIDEO_SUFFIXES:
        raise bad_request(f"MiniMax H3 reference videos must use an MP4 or MOV file; got {name}")
    if kind == "audio" and suffix and suffix not in _AUDIO_SUFFIXES:
        raise bad_request(f"MiniMax H3 reference audio must use a WAV or MP3 file; got {name}")
    size = upload.size if upload.size is not None else 0
    if size > limit:
        raise bad_request(f"Uploaded reference {name} ({size / _MIB:.1f} MiB) exceeds the {limit // _MIB} MiB limit ({kind})")
    digest = hashlib.sha256()
    await upload.seek(0)
    while chunk := await upload.read(_MIB):
        digest.update(chunk)
    return f"{kind}:{digest.hexdigest()}"


async def parse_request(request: Request, served_model: str) -> SimRequest:
    """Validate the multipart form of POST /v1/videos[/sync] the way upstream's ``_parse_video_form`` does."""
    content_type = request.headers.get("content-type", "")
    if not content_type.startswith(("multipart/form-data", "application/x-www-form-urlencoded")):
        raise bad_request(f"POST {request.url.path} takes multipart/form-data; got content type {content_type or 'none'!r}")
    # Starlette answers a malformed multipart body with its own 400.
    form = await request.form(max_files=64, max_fields=256)
    try:
        return await _parse_form(form, served_model)
    finally:
        await form.close()


async def _parse_form(form: FormData, served_model: str) -> SimRequest:
    spread = sorted({key for key in form.keys() if "[" in key and key.split("[", 1)[0] in _JSON_FIELDS})
    if spread:
        raise bad_request(
            f"form fields {', '.join(spread)} look like a dict spread by the OpenAI SDK; vLLM-Omni reads "
            "each of extra_params, lora and the *_reference fields as one JSON text field, and ignores these. "
            "Send extra_body={'extra_params': json.dumps({...})}"
        )
    fields = _scalar_fields(form)
    json_values = {name: _json_field(form, name) for name in _JSON_FIELDS}
    for name in ("lora", "extra_params"):
        value = json_values[name]
        if value is not None and not isinstance(value, dict):
            raise bad_request(f"Invalid JSON in form field {name!r}: expected an object, got {type(value).__name__}")
    if fields.model is not None and fields.model != served_model:
        raise bad_request(f"Model mismatch: request specifies '{fields.model}' but server is running '{served_model}'.")
    digests = await _reference_digests(form, json_values)
    extra = json_values["extra_params"] or {}
    task = str(extra.get("task") or "ref2va").lower()
    if task != "ref2va":
        raise bad_request(f"this server serves --task-type ref2va; task {task!r} needs a server started for its partition")
    width, height = _size(fields)
    # Like upstream, a request without a seed is not repeatable.
    seed = fields.seed if fields.seed is not None else secrets.randbits(32)
    return SimRequest(fields, width, height, _duration(extra, fields.seconds), seed, digests)


def _scalar_fields(form: FormData) -> Form:
    values = {}
    for name in Form.model_fields:
        value = form.get(name)
        if value is None:
            continue
        if not isinstance(value, str):
            raise bad_request(f"{name} must be a text form field, not a file")
        values[name] = value
    try:
        return Form.model_validate(values)
    except ValidationError as exc:
        problems = "; ".join(
            f"{'.'.join(map(str, e['loc']))}: {e['msg']}" + ("" if e["type"] == "missing" else f" (got {e['input']!r})")
            for e in exc.errors()
        )
        raise bad_request(f"Invalid form field(s): {problems}") from exc


async def _reference_digests(form: FormData, json_values: dict[str, Any]) -> tuple[str, ...]:
    """Upstream's rules for combining references, then one digest per reference."""
    single = form.get("input_reference")
    uploads = form.getlist("input_references")
    if single is not None and not isinstance(single, UploadFile):
        raise bad_request("input_reference must be a file upload")
    if any(not isinstance(item, UploadFile) for item in uploads):
        raise bad_request("input_references must be file uploads")
    by_url = json_values["image_reference"] is not None or json_values["video_reference"] is not None
    if uploads and (single is not None or by_url):
        raise bad_request("Provide input_references alone, without input_reference, image_reference, or video_reference.")
    if single is not None and by_url:
        raise bad_request("Provide only one of input_reference, image_reference, or video_reference with input_reference.")
    if len(uploads) > _MAX_REFERENCES:
        raise bad_request(f"MiniMax H3 accepts at most {_MAX_REFERENCES} total references; got {len(uploads)}.")
    files = [item for item in (single, *uploads) if isinstance(item, UploadFile)]
    digests = [await _reference_digest(upload) for upload in files]
    for name in ("image_reference", "video_reference", "audio_reference"):
        if json_values[name] is not None:
            digests.append(f"{name}:{json.dumps(json_values[name], sort_keys=True)}")
    return tuple(digests)


def _duration(extra: dict[str, Any], seconds: str | None) -> float:
    """H3's duration: ``extra_params.duration``, else ``seconds``, else 5; within [4, 15] s."""
    raw = extra.get("duration", seconds if seconds is not None else _DEFAULT_DURATION_S)
    try:
        duration = float(raw)
    except (TypeError, ValueError) as exc:
        raise bad_request(f"extra_params.duration must be a number of seconds; got {raw!r}") from exc
    if not (math.isfinite(duration) and MIN_SECONDS <= duration <= MAX_SECONDS):
        raise bad_request(f"MiniMax H3 Ref2VA supports durations from {MIN_SECONDS:g} to {MAX_SECONDS:g} s; got {raw!r}")
    return duration


def _size(fields: Form) -> tuple[int, int]:
    """``size`` wins over width and height, as in upstream's ``resolve_video_params``; default 1344x768."""
    if fields.size is not None:
        width, height = (int(side) for side in fields.size.split("x"))
    else:
        width, height = fields.width or _DEFAULT_SIZE[0], fields.height or _DEFAULT_SIZE[1]
    if not (0 < width <= _MAX_SIDE and 0 < height <= _MAX_SIDE and width % 32 == 0 and height % 32 == 0):
        raise bad_request(f"size {width}x{height} is not supported: sides must be multiples of 32, at most {_MAX_SIDE}")
    return width, height
