"""The simulator's HTTP server: vLLM-Omni's /v1/videos API on FastAPI and uvicorn.

Endpoints, form fields, job JSON, headers and status codes follow REFERENCE
§4, as read from vllm-omni entrypoints/openai/api_server.py,
video/generation/helpers.py and protocol/videos.py:

- ``GET /health`` (503 once a worker has died), ``GET /v1/models``;
- ``POST /v1/videos`` creates an async job and returns its ``VideoResponse``;
  ``GET /v1/videos``, ``GET /v1/videos/{id}`` (a failed job comes back with
  its error's status), ``GET /v1/videos/{id}/content`` (404 unknown or still
  running, 422 failed), ``DELETE /v1/videos/{id}``;
- ``POST /v1/videos/sync`` returns the MP4 with ``X-Request-Id``,
  ``X-Model``, ``X-Inference-Time-S``, ``X-Stage-Durations`` (compact JSON)
  and ``X-Peak-Memory-MB``, or 504 after ``VLLM_OMNI_VIDEO_SYNC_TIMEOUT``.

Errors use vLLM's ``ErrorResponse`` body, ``{"error": {"message", "type",
"param", "code"}}``, and request validation errors are 400, as in vLLM's
``build_app``. H3 rules (helpers.py): at most 12 references, video ≤ 50 MiB
(.mp4/.mov), audio ≤ 15 MiB (.wav/.mp3), image ≤ 30 MiB; Ref2VA durations in
[4, 15] s from ``extra_params.duration`` (else ``seconds``, else 5).

Differences from upstream, on purpose:

- ``extra_params[...]`` form fields get a 400. The OpenAI SDK spreads a dict
  given in ``extra_body`` into such fields, which vLLM-Omni silently ignores
  (the request then runs with default duration and task); a client must send
  ``json.dumps`` of the dict, and this makes a wrong client fail loudly.
- URL references (``video_reference`` and the like) are validated as JSON and
  folded into the content key, never downloaded.
- A completed job's ``num_frames``, ``fps`` and ``duration_s`` describe the
  output (124 frames for 5 s), where upstream echoes the request.
- After a worker dies the server stays up and answers 503 on ``/health`` and
  500 on generation, where vLLM shuts itself down; the cause stays readable.
- The duration, task and size checks (sides multiples of 32) answer 400 with
  the sim's own messages; where upstream rejects these, and with which
  status, was not confirmed in its source.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import json
import logging
import math
import os
import secrets
import shutil
import signal
import socket
import sys
import tempfile
import time
import uuid
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from http import HTTPStatus
from pathlib import Path
from typing import Annotated, Any, Literal

import numpy as np
import uvicorn
from fastapi import FastAPI, Query, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import FileResponse, JSONResponse, Response
from pydantic import BaseModel, ConfigDict, Field, StringConstraints, ValidationError
from starlette.datastructures import FormData, UploadFile
from starlette.exceptions import HTTPException

from h3bench.errors import ServerStartError
from h3bench.sim.content import (
    MAX_DURATION_S,
    MIN_DURATION_S,
    ContentSpec,
    audio_sample_count,
    content_key,
    frame_count,
)
from h3bench.sim.profile import SimProfile
from h3bench.sim.worker import LOG_FORMAT, GenerationError, WorkerConfig, WorkerJob, WorkerPool, WorkerResult

__all__ = ["VideoJob", "create_app", "serve"]

log = logging.getLogger("h3bench.sim")

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
_SYNC_TIMEOUT_ENV = "VLLM_OMNI_VIDEO_SYNC_TIMEOUT"
_SYNC_TIMEOUT_DEFAULT_S = 600.0
_GRACEFUL_SHUTDOWN_S = 5.0  # uvicorn's wait for in-flight responses after SIGTERM
_JSON_FIELDS = ("image_reference", "video_reference", "audio_reference", "lora", "extra_params")


# -- request parsing ----------------------------------------------------------


class _Form(BaseModel):
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
class _Request:
    """A validated generation request."""

    form: _Form
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


def _bad(message: str) -> HTTPException:
    return HTTPException(status_code=HTTPStatus.BAD_REQUEST, detail=message)


def _json_field(form: FormData, name: str) -> Any:
    value = form.get(name)
    if value is None or value == "":
        return None
    if not isinstance(value, str):
        raise _bad(f"{name} must be a text form field holding JSON, not a file")
    try:
        return json.loads(value)
    except json.JSONDecodeError as exc:
        raise _bad(f"Invalid JSON in form field {name!r}: {exc}") from exc


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
        raise _bad(f"MiniMax H3 reference videos must use an MP4 or MOV file; got {name}")
    if kind == "audio" and suffix and suffix not in _AUDIO_SUFFIXES:
        raise _bad(f"MiniMax H3 reference audio must use a WAV or MP3 file; got {name}")
    size = upload.size if upload.size is not None else 0
    if size > limit:
        raise _bad(f"Uploaded reference {name} ({size / _MIB:.1f} MiB) exceeds the {limit // _MIB} MiB limit ({kind})")
    digest = hashlib.sha256()
    await upload.seek(0)
    while chunk := await upload.read(_MIB):
        digest.update(chunk)
    return f"{kind}:{digest.hexdigest()}"


async def _parse(request: Request, served_model: str) -> _Request:
    """Validate the multipart form of POST /v1/videos[/sync] the way upstream's ``_parse_video_form`` does."""
    content_type = request.headers.get("content-type", "")
    if not content_type.startswith(("multipart/form-data", "application/x-www-form-urlencoded")):
        raise _bad(f"POST {request.url.path} takes multipart/form-data; got content type {content_type or 'none'!r}")
    # Starlette answers a malformed multipart body with its own 400.
    form = await request.form(max_files=64, max_fields=256)
    try:
        return await _parse_form(form, served_model)
    finally:
        await form.close()


async def _parse_form(form: FormData, served_model: str) -> _Request:
    spread = sorted({key for key in form.keys() if "[" in key and key.split("[", 1)[0] in _JSON_FIELDS})
    if spread:
        raise _bad(
            f"form fields {', '.join(spread)} look like a dict spread by the OpenAI SDK; vLLM-Omni reads "
            "each of extra_params, lora and the *_reference fields as one JSON text field, and ignores these. "
            "Send extra_body={'extra_params': json.dumps({...})}"
        )
    fields = _scalar_fields(form)
    json_values = {name: _json_field(form, name) for name in _JSON_FIELDS}
    for name in ("lora", "extra_params"):
        value = json_values[name]
        if value is not None and not isinstance(value, dict):
            raise _bad(f"Invalid JSON in form field {name!r}: expected an object, got {type(value).__name__}")
    if fields.model is not None and fields.model != served_model:
        raise _bad(f"Model mismatch: request specifies '{fields.model}' but server is running '{served_model}'.")
    digests = await _reference_digests(form, json_values)
    extra = json_values["extra_params"] or {}
    task = str(extra.get("task") or "ref2va").lower()
    if task != "ref2va":
        raise _bad(f"this server serves --task-type ref2va; task {task!r} needs a server started for its partition")
    width, height = _size(fields)
    # Like upstream, a request without a seed is not repeatable.
    seed = fields.seed if fields.seed is not None else secrets.randbits(32)
    return _Request(fields, width, height, _duration(extra, fields.seconds), seed, digests)


def _scalar_fields(form: FormData) -> _Form:
    values = {}
    for name in _Form.model_fields:
        value = form.get(name)
        if value is None:
            continue
        if not isinstance(value, str):
            raise _bad(f"{name} must be a text form field, not a file")
        values[name] = value
    try:
        return _Form.model_validate(values)
    except ValidationError as exc:
        problems = "; ".join(
            f"{'.'.join(map(str, e['loc']))}: {e['msg']}" + ("" if e["type"] == "missing" else f" (got {e['input']!r})")
            for e in exc.errors()
        )
        raise _bad(f"Invalid form field(s): {problems}") from exc


async def _reference_digests(form: FormData, json_values: dict[str, Any]) -> tuple[str, ...]:
    """Upstream's rules for combining references, then one digest per reference."""
    single = form.get("input_reference")
    uploads = form.getlist("input_references")
    if single is not None and not isinstance(single, UploadFile):
        raise _bad("input_reference must be a file upload")
    if any(not isinstance(item, UploadFile) for item in uploads):
        raise _bad("input_references must be file uploads")
    by_url = json_values["image_reference"] is not None or json_values["video_reference"] is not None
    if uploads and (single is not None or by_url):
        raise _bad("Provide input_references alone, without input_reference, image_reference, or video_reference.")
    if single is not None and by_url:
        raise _bad("Provide only one of input_reference, image_reference, or video_reference with input_reference.")
    if len(uploads) > _MAX_REFERENCES:
        raise _bad(f"MiniMax H3 accepts at most {_MAX_REFERENCES} total references; got {len(uploads)}.")
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
        raise _bad(f"extra_params.duration must be a number of seconds; got {raw!r}") from exc
    if not (math.isfinite(duration) and MIN_DURATION_S <= duration <= MAX_DURATION_S):
        raise _bad(f"MiniMax H3 Ref2VA supports durations from {MIN_DURATION_S:g} to {MAX_DURATION_S:g} s; got {raw!r}")
    return duration


def _size(fields: _Form) -> tuple[int, int]:
    """``size`` wins over width and height, as in upstream's ``resolve_video_params``; default 1344x768."""
    if fields.size is not None:
        width, height = (int(side) for side in fields.size.split("x"))
    else:
        width, height = fields.width or _DEFAULT_SIZE[0], fields.height or _DEFAULT_SIZE[1]
    if not (0 < width <= _MAX_SIDE and 0 < height <= _MAX_SIDE and width % 32 == 0 and height % 32 == 0):
        raise _bad(f"size {width}x{height} is not supported: sides must be multiples of 32, at most {_MAX_SIDE}")
    return width, height


# -- jobs and the engine ----------------------------------------------------------


class VideoError(BaseModel):
    code: int | str
    message: str


class VideoJob(BaseModel):
    """One async job, as upstream's ``VideoResponse`` (protocol/videos.py)."""

    model: str
    prompt: str
    id: str = Field(default_factory=lambda: f"video_gen_{uuid.uuid4().hex}")
    object: Literal["video"] = "video"
    status: Literal["queued", "in_progress", "completed", "failed"] = "queued"
    size: str | None = None
    progress: int = 0
    seconds: str = "4"
    quality: str = "default"
    completed_at: int | None = None
    created_at: int = Field(default_factory=lambda: int(time.time()))
    remixed_from_video_id: str | None = None
    error: VideoError | None = None
    media_type: Literal["video/mp4"] = "video/mp4"
    expires_at: int | None = None
    file_name: str | None = None
    inference_time_s: float | None = None
    stage_durations: dict[str, float] = Field(default_factory=dict)
    peak_memory_mb: float = 0.0
    fps: float | None = None
    num_frames: int | None = None
    duration_s: float | None = None


class _Engine:
    """Runs one request at a time on the worker pool, as H3 does (one request per diffusion batch)."""

    def __init__(self, profile: SimProfile, pool: WorkerPool, storage: Path, process_seed: int) -> None:
        self.profile = profile
        self.pool = pool
        self.storage = storage
        self._rng = np.random.default_rng(process_seed)
        self._lock = asyncio.Lock()
        self._count = 0
        self._cache: dict[bytes, tuple[Path, WorkerResult]] = {}

    async def generate(self, request: _Request, request_id: str, output: Path) -> WorkerResult:
        spec = request.content()
        cached = self._cache.get(spec.key) if self.profile.cache_outputs else None
        if cached is not None:
            shutil.copyfile(cached[0], output)
            log.warning("request %s: answered from the output cache (cache_outputs)", request_id)
            return cached[1]
        async with self._lock:
            if self.pool.dead_reason is not None:
                raise GenerationError(f"engine is dead: {self.pool.dead_reason}")
            self._count += 1
            nth = self._count
            profile = self.profile
            plan = profile.plan(
                spec.frames, self._rng, num_inference_steps=request.form.num_inference_steps, first=nth == 1
            )
            job = WorkerJob(
                request_id=request_id,
                plan=plan,
                content=spec,
                output_path=str(output),
                fail=nth == profile.fail_request,
                crash_rank=profile.workers - 1 if nth == profile.crash_request else None,
                hang=nth == profile.hang_request,
            )
            log.info("request %s: started (request %d; modelled %.3f s)", request_id, nth, plan.total_s)
            future = self.pool.submit(job)
            try:
                result = await asyncio.shield(asyncio.wrap_future(future))
            except asyncio.CancelledError:
                # The workers finish anyway; nobody will fetch the file.
                future.add_done_callback(lambda _: output.unlink(missing_ok=True))
                raise
        if profile.cache_outputs:
            kept = self.storage / f"cache-{spec.key.hex()}.mp4"
            shutil.copyfile(output, kept)
            self._cache[spec.key] = (kept, result)
        return result


# -- the app ------------------------------------------------------------------


def _error_body(status: int, message: str) -> dict[str, Any]:
    """vLLM's ErrorResponse."""
    return {"error": {"message": message, "type": HTTPStatus(status).phrase, "param": None, "code": status}}


async def _http_error(_: Request, exc: Exception) -> JSONResponse:
    assert isinstance(exc, HTTPException)
    return JSONResponse(_error_body(exc.status_code, str(exc.detail)), status_code=exc.status_code, headers=exc.headers)


async def _validation_error(_: Request, exc: Exception) -> JSONResponse:
    assert isinstance(exc, RequestValidationError)
    problems = "; ".join(f"{'.'.join(map(str, e['loc']))}: {e['msg']}" for e in exc.errors())
    return JSONResponse(_error_body(HTTPStatus.BAD_REQUEST, problems), status_code=HTTPStatus.BAD_REQUEST)


def _log_completed(request_id: str, seconds: float, result: WorkerResult) -> None:
    durations = result.stage_durations.items()
    stages = ", ".join(f"{key.removeprefix('MiniMaxH3Pipeline.')} {value:.3f}" for key, value in durations)
    log.info(
        "request %s: completed in %.3f s (%d frames, %d audio samples, %.2f MB, rendered in %.3f s); "
        "stages [s]: %s; peak memory %.1f MB",
        request_id,
        seconds,
        result.frames,
        result.audio_samples,
        result.size_bytes / 1e6,
        result.render_s,
        stages,
        result.peak_memory_mb,
    )


def create_app(
    profile: SimProfile, pool: WorkerPool, storage: Path, *, process_seed: int, sync_timeout_s: float
) -> FastAPI:
    """The FastAPI app over a started :class:`WorkerPool`; outputs live in ``storage``."""
    engine = _Engine(profile, pool, storage, process_seed)
    jobs: dict[str, VideoJob] = {}
    tasks: dict[str, asyncio.Task[None]] = {}
    started = int(time.time())

    @contextlib.asynccontextmanager
    async def lifespan(_: FastAPI) -> AsyncIterator[None]:
        yield
        if profile.shutdown_delay_s:
            log.warning("shutdown handler: sleeping %g s (injected slow shutdown)", profile.shutdown_delay_s)
            await asyncio.sleep(profile.shutdown_delay_s)
        for task in tasks.values():
            task.cancel()

    app = FastAPI(title="h3bench vLLM-Omni simulator", lifespan=lifespan)
    app.add_exception_handler(HTTPException, _http_error)
    app.add_exception_handler(RequestValidationError, _validation_error)

    @app.get("/health")
    async def health() -> Response:
        if pool.dead_reason is not None:
            return JSONResponse(_error_body(503, f"engine is dead: {pool.dead_reason}"), status_code=503)
        return Response(status_code=200)

    @app.get("/v1/models")
    async def models() -> dict[str, Any]:
        permission = {
            "id": f"modelperm-{uuid.uuid4().hex}",
            "object": "model_permission",
            "created": started,
            "allow_create_engine": False,
            "allow_sampling": True,
            "allow_logprobs": True,
            "allow_search_indices": False,
            "allow_view": True,
            "allow_fine_tuning": False,
            "organization": "*",
            "group": None,
            "is_blocking": False,
        }
        card = {
            "id": profile.model,
            "object": "model",
            "created": started,
            "owned_by": "vllm",
            "root": profile.model,
            "parent": None,
            "max_model_len": None,
            "permission": [permission],
        }
        return {"object": "list", "data": [card]}

    async def run_job(job: VideoJob, request: _Request) -> None:
        job.status = "in_progress"
        start = time.perf_counter()
        output = storage / f"{job.id}.mp4"
        try:
            result = await engine.generate(request, job.id, output)
        except GenerationError as exc:
            job.status, job.completed_at = "failed", int(time.time())
            job.error = VideoError(code=exc.status_code, message=str(exc))
            job.inference_time_s = time.perf_counter() - start
            log.error("request %s: failed (%d) after %.3f s: %s", job.id, exc.status_code, job.inference_time_s, exc)
            return
        except asyncio.CancelledError:
            output.unlink(missing_ok=True)
            raise
        finally:
            tasks.pop(job.id, None)
        job.inference_time_s = time.perf_counter() - start
        job.status, job.progress, job.completed_at = "completed", 100, int(time.time())
        job.file_name = output.name
        job.stage_durations = result.stage_durations
        job.peak_memory_mb = result.peak_memory_mb
        job.fps, job.num_frames, job.duration_s = 24.0, result.frames, result.frames / 24
        _log_completed(job.id, job.inference_time_s, result)

    @app.post("/v1/videos")
    async def create_video(raw: Request) -> VideoJob:
        request = await _parse(raw, profile.model)
        form = request.form
        fps = form.fps or 24.0
        num_frames = form.num_frames or (int(form.seconds) * int(fps) if form.seconds else None)
        job = VideoJob(
            model=profile.model,
            prompt=form.prompt,
            size=form.size,
            seconds=form.seconds or "4",
            quality=form.quality or "default",
            fps=fps,
            num_frames=num_frames,
            duration_s=float(form.seconds) if form.seconds else (num_frames / fps if num_frames else None),
        )
        jobs[job.id] = job
        log.info("request %s: accepted (%s)", job.id, request.describe())
        tasks[job.id] = asyncio.create_task(run_job(job, request))
        return job

    @app.post("/v1/videos/sync")
    async def create_video_sync(raw: Request) -> Response:
        request = await _parse(raw, profile.model)
        request_id = f"video_sync-{uuid.uuid4().hex}"
        log.info("request %s: accepted (%s)", request_id, request.describe())
        output = storage / f"{request_id}.mp4"
        start = time.perf_counter()
        try:
            result = await asyncio.wait_for(engine.generate(request, request_id, output), timeout=sync_timeout_s)
        except asyncio.TimeoutError:
            log.error("request %s: timed out after %g s (%s)", request_id, sync_timeout_s, _SYNC_TIMEOUT_ENV)
            raise HTTPException(HTTPStatus.GATEWAY_TIMEOUT, f"Video generation timed out after {sync_timeout_s}s.")
        except GenerationError as exc:
            log.error("request %s: failed (%d): %s", request_id, exc.status_code, exc)
            raise HTTPException(exc.status_code, f"Video generation failed: {exc}") from exc
        inference_s = time.perf_counter() - start
        body = output.read_bytes()
        output.unlink()
        _log_completed(request_id, inference_s, result)
        return Response(
            content=body,
            media_type="video/mp4",
            headers={
                "X-Request-Id": request_id,
                "X-Model": profile.model,
                "X-Inference-Time-S": f"{inference_s:.3f}",
                "X-Stage-Durations": json.dumps(result.stage_durations, separators=(",", ":")),
                "X-Peak-Memory-MB": f"{result.peak_memory_mb:.3f}",
            },
        )

    @app.get("/v1/videos")
    async def list_videos(
        after: str | None = None,
        limit: Annotated[int | None, Query(ge=0, le=100)] = None,
        order: Literal["asc", "desc"] = "desc",
    ) -> dict[str, Any]:
        listed = sorted(jobs.values(), key=lambda job: job.created_at, reverse=order == "desc")
        if after is not None:
            index = next((i for i, job in enumerate(listed) if job.id == after), None)
            listed = [] if index is None else listed[index + 1 :]
        has_more = limit is not None and len(listed) > limit
        if limit is not None:
            listed = listed[:limit]
        return {
            "object": "list",
            "data": [job.model_dump(mode="json") for job in listed],
            "first_id": listed[0].id if listed else None,
            "last_id": listed[-1].id if listed else None,
            "has_more": has_more,
        }

    def lookup(video_id: str) -> VideoJob:
        job = jobs.get(video_id)
        if job is None:
            raise HTTPException(HTTPStatus.NOT_FOUND, "Video not found")
        return job

    @app.get("/v1/videos/{video_id}", response_model=None)
    async def retrieve_video(video_id: str) -> VideoJob | JSONResponse:
        job = lookup(video_id)
        if job.status == "failed" and job.error is not None:
            code = job.error.code if isinstance(job.error.code, int) and 400 <= job.error.code < 600 else 500
            return JSONResponse(job.model_dump(mode="json"), status_code=code)
        return job

    @app.delete("/v1/videos/{video_id}")
    async def delete_video(video_id: str) -> dict[str, Any]:
        job = lookup(video_id)
        task = tasks.get(video_id)
        if task is not None:
            task.cancel()
            try:
                await asyncio.wait_for(task, timeout=2.0)
            except asyncio.TimeoutError:
                raise HTTPException(HTTPStatus.CONFLICT, "Cancellation in progress. Please try again later.") from None
            except asyncio.CancelledError:
                pass
        if job.file_name is not None:
            (storage / job.file_name).unlink(missing_ok=True)
        del jobs[video_id]
        log.info("request %s: deleted", video_id)
        return {"id": video_id, "deleted": True, "object": "video.deleted"}

    @app.get("/v1/videos/{video_id}/content")
    async def download_video(video_id: str) -> FileResponse:
        job = lookup(video_id)
        if job.status == "failed":
            raise HTTPException(422, "Video generation failed. Check job status for error details.")
        if not job.file_name:
            raise HTTPException(HTTPStatus.NOT_FOUND, "Generation is still in-progress")
        path = storage / job.file_name
        if not path.exists():
            raise HTTPException(HTTPStatus.NOT_FOUND, "Generated video file not found on disk")
        return FileResponse(path, media_type=job.media_type, filename=job.file_name)

    return app


# -- the process ---------------------------------------------------------------


class _Interrupted(Exception):
    """SIGTERM or SIGINT before uvicorn took over the signals."""


def _bind(host: str, port: int) -> socket.socket:
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    # proto=IPPROTO_TCP, as getaddrinfo would give: asyncio sets TCP_NODELAY only on such
    # sockets, and without it Nagle holds each keep-alive response back for ~40 ms.
    sock = socket.socket(family, socket.SOCK_STREAM, socket.IPPROTO_TCP)
    # Rebind over TIME_WAIT, but never share a live port: no SO_REUSEPORT.
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((host, port))
    except OSError:
        sock.close()
        raise
    return sock


def _sync_timeout() -> float:
    """``VLLM_OMNI_VIDEO_SYNC_TIMEOUT`` in seconds, upstream's default 600 when unset."""
    text = os.environ.get(_SYNC_TIMEOUT_ENV)
    if not text:
        return _SYNC_TIMEOUT_DEFAULT_S
    try:
        return float(text)
    except ValueError:
        log.warning("ignoring %s=%r: not a number of seconds", _SYNC_TIMEOUT_ENV, text)
        return _SYNC_TIMEOUT_DEFAULT_S


def _chain_signal(sig: signal.Signals, first: Callable[[], None]) -> None:
    then = signal.getsignal(sig)

    def handler(signum: int, frame: Any) -> None:
        first()
        if callable(then):
            then(signum, frame)

    signal.signal(sig, handler)


async def _run(server: uvicorn.Server, sock: socket.socket, pool: WorkerPool) -> None:
    serving = asyncio.create_task(server.serve(sockets=[sock]))
    while not server.started and not serving.done():
        await asyncio.sleep(0.005)
    if server.started:
        # Chain onto uvicorn's handlers: the workers get the group's SIGTERM too, and their
        # exits must read as shutdown, not as deaths. uvicorn restores the originals on exit.
        for sig in (signal.SIGTERM, signal.SIGINT):
            _chain_signal(sig, pool.begin_shutdown)
        host, port = sock.getsockname()[:2]
        pids = ", ".join(map(str, pool.pids))
        log.info("ready on http://%s:%d (api pid %d, worker pids %s)", host, port, os.getpid(), pids)
    await serving


def serve(host: str, port: int, profile: SimProfile) -> int:
    """Run the simulator until SIGTERM or SIGINT; return the process's exit code.

    Binds first (so a taken port fails fast, as vLLM does), spawns and waits
    for the workers, then serves. Exit codes: 0 after a signal, 1 when the
    port is taken or a worker fails at startup. If a worker survives the stop
    (it ignored SIGTERM), the process leaves it running and exits at once.
    """
    logging.basicConfig(level=logging.INFO, format=LOG_FORMAT, stream=sys.stderr, force=True)
    process_seed = profile.process_seed if profile.process_seed is not None else secrets.randbits(63)
    log.info(
        "starting h3bench vLLM-Omni simulator: model %s, %d worker(s), time_scale %g, process seed %d",
        profile.model, profile.workers, profile.time_scale, process_seed,
    )
    try:
        sock = _bind(host, port)
    except OSError as exc:
        log.error("cannot listen on %s:%d: %s", host, port, exc.strerror or exc)
        return 1
    storage = Path(tempfile.mkdtemp(prefix="h3bench-sim-"))
    perturbation = profile.perturbation(process_seed)
    last = profile.workers - 1
    pool = WorkerPool(
        [
            WorkerConfig(
                rank=rank,
                load_s=profile.load_s * profile.time_scale,
                startup_error=profile.startup_error if rank == 0 else None,
                ignore_sigterm=profile.worker_ignores_sigterm and rank == last,
                perturbation=perturbation,
            )
            for rank in range(profile.workers)
        ]
    )
    server: uvicorn.Server | None = None

    def on_signal(signum: int, _frame: object) -> None:
        if server is None:
            raise _Interrupted(signal.Signals(signum).name)
        server.should_exit = True  # also absorbs the signal uvicorn re-raises after its own shutdown

    previous = {sig: signal.signal(sig, on_signal) for sig in (signal.SIGTERM, signal.SIGINT)}
    exit_code = 0
    try:
        pool.start(timeout=profile.load_s * profile.time_scale + 120.0)
        app = create_app(profile, pool, storage, process_seed=process_seed, sync_timeout_s=_sync_timeout())
        config = uvicorn.Config(
            app, log_config=None, access_log=False, lifespan="on", timeout_graceful_shutdown=_GRACEFUL_SHUTDOWN_S
        )
        server = uvicorn.Server(config)
        asyncio.run(_run(server, sock, pool))
    except ServerStartError as exc:
        log.error("startup failed: %s", exc)
        exit_code = exc.exit_code or 1
    except _Interrupted as exc:
        log.warning("interrupted by %s during startup", exc)
        exit_code = 1
    finally:
        stop_start = time.perf_counter()
        survivors = pool.stop()
        sock.close()
        shutil.rmtree(storage, ignore_errors=True)
        for sig, handler in previous.items():
            signal.signal(sig, handler)
        log.info("shutdown complete in %.3f s (exit code %d)", time.perf_counter() - stop_start, exit_code)
    if survivors:
        # multiprocessing's exit hook would join the surviving worker forever.
        logging.shutdown()
        os._exit(exit_code)
    return exit_code
