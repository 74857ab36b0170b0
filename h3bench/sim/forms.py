"""Parsing and validating the multipart form of ``POST /v1/videos[/sync]``, as vLLM-Omni does at POST time.

Form fields and their constraints follow upstream's ``_parse_video_form``
(``entrypoints/openai/video/generation/helpers.py``), with its messages: the
JSON fields, the model, how references combine, and H3's upload rules (at
most 12 uploaded references, video ≤ 50 MiB as .mp4/.mov, audio ≤ 15 MiB as
.wav/.mp3, image ≤ 30 MiB). A bad field is a 400 with vLLM's
``ErrorResponse`` body; an empty field counts as absent, as in FastAPI.
Scalar fields are checked in upstream's two layers, each answered in its
format: first the form parameters' types and ``Form(...)`` constraints,
which FastAPI checks (:class:`FormFields`; a ``RequestValidationError``,
answered by vLLM's validation handler with ``param: "body.fps"``), then the
request model's (:class:`VideoGenerationRequest`: ranges, the quality
levels; a pydantic ``ValidationError``, answered as ``BadRequestError`` with
pydantic's message). A body that is not a form (JSON) has no prompt field.
What H3 checks later, in its worker (task, reference counts, fps, duration,
canvas), is :mod:`h3bench.sim.shape`.

On purpose, ``extra_params[...]`` form fields get a 400: the OpenAI SDK
spreads a dict given in ``extra_body`` into such fields, which vLLM-Omni
silently ignores (the request then runs with default duration and task); a
client must send ``json.dumps`` of the dict. URL references
(``video_reference`` and the like) are counted and folded into the content
key as JSON, never downloaded or decoded; neither are uploads.
"""

from __future__ import annotations

import hashlib
import json
import secrets
from dataclasses import dataclass
from http import HTTPStatus
from pathlib import Path
from typing import Annotated, Any

from fastapi import HTTPException, Request
from fastapi.exceptions import RequestValidationError
from pydantic import BaseModel, ConfigDict, Field, StringConstraints, ValidationError, field_validator
from starlette.datastructures import FormData, UploadFile

__all__ = ["Form", "FormFields", "References", "RequestModelError", "SimRequest", "VideoGenerationRequest",
           "bad_request", "parse_request"]

_MIB = 1024 * 1024
_MAX_UPLOADS = 12
_UPLOAD_LIMITS = {"image": 30 * _MIB, "video": 50 * _MIB, "audio": 15 * _MIB}
_IMAGE_SUFFIXES = {".png", ".jpg", ".jpeg", ".webp", ".heic", ".heif"}
_AUDIO_KIND_SUFFIXES = {".wav", ".mp3", ".m4a", ".aac", ".flac", ".ogg"}
_VIDEO_SUFFIXES = {".mp4", ".mov"}
_AUDIO_SUFFIXES = {".wav", ".mp3"}
# URL reference fields, the kind they count as, and the keys one item may have.
_URL_REFERENCES = {
    "image_reference": ("image", {"image_url", "file_id"}),
    "video_reference": ("video", {"video_url", "file_id"}),
    "audio_reference": ("audio", {"audio_url"}),
}
_JSON_FIELDS = (*_URL_REFERENCES, "lora", "extra_params")


_INT64_MIN, _INT64_MAX = -(2**63), 2**63 - 1
_QUALITY_LEVELS = ("lossless", "high")  # vllm_omni.inputs.data.DIFFUSION_QUALITY_LEVELS
_SecondStr = Annotated[str, StringConstraints(pattern=r"^[1-9]\d*$")]
_SizeStr = Annotated[str, StringConstraints(pattern=r"^\d+x\d+$")]


class _VideoForm(BaseModel):
    """What both layers check alike: the fields that open upstream's form and request model, in their order.

    The fields after them differ in constraints and in order between the two
    layers (pydantic names a request's errors in field order), so each layer
    lists them itself.
    """

    model_config = ConfigDict(extra="ignore")

    prompt: str
    model: str | None = None
    seconds: _SecondStr | None = None
    size: _SizeStr | None = None
    user: str | None = None


class FormFields(_VideoForm):
    """The scalar parameters of upstream's ``_parse_video_form`` as FastAPI checks them: types and ``Form(...)`` constraints."""

    width: int | None = None
    height: int | None = None
    num_frames: int | None = None
    fps: Annotated[float, Field(ge=1, allow_inf_nan=False)] | None = None
    aspect_ratio: str | None = None
    short_edge: Annotated[int, Field(ge=1)] | None = None
    num_outputs_per_prompt: Annotated[int, Field(ge=1, le=10)] = 1
    start_time_seconds: Annotated[float, Field(ge=0.0)] | None = None
    quality: str | None = None
    num_inference_steps: int | None = None
    guidance_scale: float | None = None
    guidance_scale_2: float | None = None
    boundary_ratio: float | None = None
    flow_shift: float | None = None
    true_cfg_scale: float | None = None
    seed: int | None = None
    generate_sound: bool | None = None
    sound_duration: Annotated[float, Field(gt=0.0)] | None = None
    negative_prompt: str | None = None
    enable_frame_interpolation: bool | None = None
    frame_interpolation_exp: Annotated[int, Field(ge=1)] | None = None
    frame_interpolation_scale: Annotated[float, Field(gt=0.0)] | None = None
    frame_interpolation_model_path: str | None = None
    return_stage_metrics: bool | None = None


class VideoGenerationRequest(_VideoForm):
    """The request model's own constraints (upstream's ``protocol/videos.py``), which it checks after FastAPI.

    Named as upstream's, so that pydantic's message names it the same way.
    """

    width: Annotated[int, Field(ge=1, le=_INT64_MAX)] | None = None
    height: Annotated[int, Field(ge=1, le=_INT64_MAX)] | None = None
    fps: Annotated[float, Field(ge=1, le=_INT64_MAX, allow_inf_nan=False)] | None = None
    num_frames: Annotated[int, Field(ge=1, le=_INT64_MAX)] | None = None
    aspect_ratio: str | None = None
    short_edge: Annotated[int, Field(ge=1, le=_INT64_MAX)] | None = None
    num_outputs_per_prompt: Annotated[int, Field(ge=1, le=10)] = 1
    start_time_seconds: Annotated[float, Field(ge=0.0)] | None = None
    quality: str | None = None
    negative_prompt: str | None = None
    num_inference_steps: Annotated[int, Field(ge=1, le=200)] | None = None
    guidance_scale: Annotated[float, Field(ge=0.0, le=20.0)] | None = None
    guidance_scale_2: Annotated[float, Field(ge=0.0, le=20.0)] | None = None
    boundary_ratio: Annotated[float, Field(ge=0.0, le=1.0)] | None = None
    flow_shift: float | None = None
    true_cfg_scale: Annotated[float, Field(ge=0.0, le=20.0)] | None = None
    seed: Annotated[int, Field(ge=_INT64_MIN, le=_INT64_MAX)] | None = None
    generate_sound: bool = False
    sound_duration: Annotated[float, Field(gt=0.0)] | None = None
    enable_frame_interpolation: bool = False
    frame_interpolation_exp: Annotated[int, Field(ge=1, le=_INT64_MAX)] = 1
    frame_interpolation_scale: Annotated[float, Field(gt=0.0)] = 1.0
    frame_interpolation_model_path: str | None = None
    return_stage_metrics: bool | None = None

    @field_validator("quality")
    @classmethod
    def _quality(cls, value: str | None) -> str | None:
        if value is not None and value not in _QUALITY_LEVELS:
            raise ValueError(f"quality must be one of {list(_QUALITY_LEVELS)}, got {value!r}")
        return value


# What the rest of the simulator reads of a request's scalar fields.
Form = VideoGenerationRequest


class RequestModelError(HTTPException):
    """The request model refused the form (a pydantic ``ValidationError``): vLLM answers it as ``BadRequestError``."""

    error_type = "BadRequestError"

    def __init__(self, message: str) -> None:
        super().__init__(status_code=HTTPStatus.BAD_REQUEST, detail=message)


@dataclass(frozen=True)
class References:
    """How many references of each kind the request carries, and one digest per reference."""

    images: int
    videos: int
    audios: int
    digests: tuple[str, ...]


@dataclass(frozen=True)
class SimRequest:
    """A request accepted at POST time; H3's own checks (:mod:`h3bench.sim.shape`) come when the engine takes it."""

    form: Form
    extra_params: dict[str, Any]
    references: References
    seed: int

    def engine_args(self) -> dict[str, Any]:
        """The ``extra_args`` upstream's serving layer hands the pipeline (``serving_video.py``).

        ``seconds`` becomes ``duration``, ``aspect_ratio`` and ``short_edge``
        are copied, and ``extra_params`` is merged over them, so its
        ``duration`` wins over ``seconds``.
        """
        args: dict[str, Any] = {}
        if self.form.seconds is not None:
            args["duration"] = float(self.form.seconds)
        for name in ("aspect_ratio", "short_edge"):
            if (value := getattr(self.form, name)) is not None:
                args[name] = value
        return {**args, **self.extra_params}

    def describe(self) -> str:
        refs = self.references
        return (
            f"{refs.videos} video, {refs.images} image, {refs.audios} audio reference(s), seed {self.seed}, "
            f"seconds {self.form.seconds}, num_frames {self.form.num_frames}, extra_params {self.extra_params}"
        )


def bad_request(message: str) -> HTTPException:
    return HTTPException(status_code=HTTPStatus.BAD_REQUEST, detail=message)


def _json_field(form: FormData, name: str) -> Any:
    """Upstream's ``_parse_form_json``, with its messages."""
    value = form.get(name)
    if value is None or value == "":
        return None
    if not isinstance(value, str):
        raise bad_request(f"{name} must be a text form field holding JSON, not a file")
    try:
        return json.loads(value)
    except json.JSONDecodeError as exc:
        raise bad_request("Invalid JSON in form field.") from exc


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


async def _reference_digest(upload: UploadFile, kind: str, *, check_suffix: bool) -> str:
    """Check one upload against H3's limits and return ``kind:sha256``."""
    limit = _UPLOAD_LIMITS[kind]
    suffix = Path(upload.filename or "").suffix.lower()
    if check_suffix and kind == "video" and suffix and suffix not in _VIDEO_SUFFIXES:
        raise bad_request("MiniMax H3 reference videos must use an MP4 or MOV file.")
    if check_suffix and kind == "audio" and suffix and suffix not in _AUDIO_SUFFIXES:
        raise bad_request("MiniMax H3 reference audio must use a WAV or MP3 file.")
    if (upload.size or 0) > limit:
        raise bad_request(f"Uploaded reference exceeds the {limit // _MIB} MiB size limit.")
    digest = hashlib.sha256()
    await upload.seek(0)
    while chunk := await upload.read(_MIB):
        digest.update(chunk)
    return f"{kind}:{digest.hexdigest()}"


async def parse_request(request: Request, served_model: str) -> SimRequest:
    """Validate the multipart form of POST /v1/videos[/sync] the way upstream's ``_parse_video_form`` does.

    A body that is not a form (JSON, say) reads as an empty form, as in
    FastAPI: it is answered "prompt: Field required".
    """
    # Starlette answers a malformed multipart body with its own 400.
    form = await request.form(max_files=64, max_fields=256)
    try:
        return await _parse_form(form, served_model)
    finally:
        await form.close()


async def _parse_form(form: FormData, served_model: str) -> SimRequest:
    raw = _form_fields(form)  # FastAPI's layer comes first, before any of the route's own code
    spread = sorted({key for key in form.keys() if "[" in key and key.split("[", 1)[0] in _JSON_FIELDS})
    if spread:
        raise bad_request(
            f"form fields {', '.join(spread)} look like a dict spread by the OpenAI SDK; vLLM-Omni reads "
            "each of extra_params, lora and the *_reference fields as one JSON text field, and ignores these. "
            "Send extra_body={'extra_params': json.dumps({...})}"
        )
    json_values = {name: _json_field(form, name) for name in _JSON_FIELDS}
    for name in ("lora", "extra_params"):
        value = json_values[name]
        if value is not None and not isinstance(value, dict):
            raise bad_request(f"Invalid JSON in form field: expected dict, got {type(value).__name__}.")
    fields = _request_model(raw)
    if fields.model is not None and fields.model != served_model:
        raise bad_request(f"Model mismatch: request specifies '{fields.model}' but server is running '{served_model}'.")
    references = await _references(form, json_values)
    # Like upstream, a request without a seed is not repeatable.
    seed = fields.seed if fields.seed is not None else secrets.randbits(32)
    return SimRequest(fields, json_values["extra_params"] or {}, references, seed)


def _form_fields(form: FormData) -> FormFields:
    """FastAPI's check of the form parameters: every failing field as one ``RequestValidationError``."""
    values = {}
    for name in FormFields.model_fields:
        value = form.get(name)
        if value is None or value == "":
            continue
        if not isinstance(value, str):
            raise bad_request(f"{name} must be a text form field, not a file")
        values[name] = value
    try:
        return FormFields.model_validate(values)
    except ValidationError as exc:
        # FastAPI's shape: the location under "body", and no input for a missing field.
        errors = [{**error, "loc": ("body", *error["loc"]), **({"input": None} if error["type"] == "missing" else {})}
                  for error in exc.errors(include_url=False)]
        raise RequestValidationError(errors) from None


def _request_model(fields: FormFields) -> VideoGenerationRequest:
    """The request model over the fields that were sent, as upstream builds it: pydantic's message on a refusal."""
    try:
        return VideoGenerationRequest.model_validate(fields.model_dump(exclude_unset=True))
    except ValidationError as exc:
        raise RequestModelError(str(exc)) from None


def _url_items(name: str, value: Any) -> list[Any]:
    """The items of one URL reference field (an object or a list of them); each must have one of its keys."""
    items = value if isinstance(value, list) else [value]
    _, keys = _URL_REFERENCES[name]
    for item in items:
        if not (isinstance(item, dict) and keys & item.keys()):
            raise bad_request(f"Invalid form field(s): {name}: each reference needs one of {', '.join(sorted(keys))}")
    return items


async def _references(form: FormData, json_values: dict[str, Any]) -> References:
    """Upstream's rules for combining references, then the count of each kind and one digest per reference."""
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
        raise bad_request(
            "Provide only one of input_reference, image_reference, or video_reference when using input_reference; "
            "image_reference and video_reference may be combined."
        )
    if len(uploads) > _MAX_UPLOADS:
        raise bad_request(f"MiniMax H3 accepts at most {_MAX_UPLOADS} total references.")
    counts = {"image": 0, "video": 0, "audio": 0}
    digests = []
    files = [(item, True) for item in uploads if isinstance(item, UploadFile)]
    if isinstance(single, UploadFile):
        files.append((single, False))  # upstream checks suffixes only in the input_references list
    for upload, check_suffix in files:
        kind = _upload_kind(upload)
        counts[kind] += 1
        digests.append(await _reference_digest(upload, kind, check_suffix=check_suffix))
    for name, (kind, _) in _URL_REFERENCES.items():
        if json_values[name] is not None:
            counts[kind] += len(_url_items(name, json_values[name]))
            digests.append(f"{name}:{json.dumps(json_values[name], sort_keys=True)}")
    return References(counts["image"], counts["video"], counts["audio"], tuple(digests))
