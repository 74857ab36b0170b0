"""The simulator's routes: vLLM-Omni's ``/v1/videos`` API on an APIRouter.

Endpoints, headers and status codes follow upstream's
``entrypoints/openai/api_server.py`` and ``video/generation/helpers.py``:

- ``GET /health`` (503 once a worker has died), ``GET /v1/models``;
- ``POST /v1/videos`` creates an async job and returns its ``VideoResponse``;
  ``GET /v1/videos``, ``GET /v1/videos/{id}`` (a failed job comes back with
  its error's status), ``GET /v1/videos/{id}/content`` (404 unknown or still
  running, 422 failed), ``DELETE /v1/videos/{id}`` (409 while cancelling);
- ``POST /v1/videos/sync`` returns the MP4 with ``X-Request-Id``,
  ``X-Model``, ``X-Inference-Time-S``, ``X-Stage-Durations`` (compact JSON)
  and ``X-Peak-Memory-MB``, or 504 after ``VLLM_OMNI_VIDEO_SYNC_TIMEOUT``.

Every route reaches the shared :class:`~h3bench.sim.jobs.Simulator` through
the app's state.
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
import uuid
from http import HTTPStatus
from typing import Annotated, Any, Literal

from fastapi import APIRouter, Depends, HTTPException, Query, Request
from fastapi.responses import FileResponse, JSONResponse, Response

from h3bench.sim.forms import parse_request
from h3bench.sim.jobs import Simulator, VideoJob, log_completed, queued_job
from h3bench.sim.worker import GenerationError

__all__ = ["SYNC_TIMEOUT_ENV", "engine_error_body", "error_body", "random_uuid", "router"]

SYNC_TIMEOUT_ENV = "VLLM_OMNI_VIDEO_SYNC_TIMEOUT"

log = logging.getLogger("h3bench.sim")
router = APIRouter()


def _simulator(request: Request) -> Simulator:
    simulator: Simulator = request.app.state.simulator
    return simulator


Sim = Annotated[Simulator, Depends(_simulator)]


def error_body(status: int, message: str, *, error_type: str | None = None, param: str | None = None) -> dict[str, Any]:
    """vLLM's ErrorResponse; ``type`` is the status's phrase unless given."""
    return {"error": {"message": message, "type": error_type or HTTPStatus(status).phrase, "param": param,
                      "code": status}}


def engine_error_body(message: str, request_id: str) -> dict[str, Any]:
    """vLLM-Omni's answer to a request its engine failed (``EngineGenerateError``; ``serve/utils/errors.py``)."""
    body = error_body(HTTPStatus.INTERNAL_SERVER_ERROR, message, error_type="InternalServerError")
    body["error"].update(request_id=request_id, error_stage_id=None)
    return body


def random_uuid() -> str:
    """vLLM's ``random_uuid``: 16 hex digits (64 random bits), as in sync request ids and model permissions."""
    return f"{uuid.uuid4().int & (2**64 - 1):016x}"


def _lookup(sim: Simulator, video_id: str) -> VideoJob:
    job = sim.jobs.get(video_id)
    if job is None:
        raise HTTPException(HTTPStatus.NOT_FOUND, "Video not found")
    return job


@router.get("/health")
async def health(sim: Sim) -> JSONResponse:
    """Upstream's answers, ``{"status": "healthy"}`` or 503 ``{"status": "unhealthy"}``; the simulator adds why."""
    if sim.pool.dead_reason is not None:
        body = {"status": "unhealthy", "reason": f"engine is dead: {sim.pool.dead_reason}"}
        return JSONResponse(body, status_code=HTTPStatus.SERVICE_UNAVAILABLE)
    return JSONResponse({"status": "healthy"})


@router.get("/v1/models")
async def models(sim: Sim) -> dict[str, Any]:
    permission = {
        "id": f"modelperm-{random_uuid()}",
        "object": "model_permission",
        "created": sim.started,
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
        "id": sim.profile.model,
        "object": "model",
        "created": sim.started,
        "owned_by": "vllm",
        "root": sim.profile.model,
        "parent": None,
        "max_model_len": None,
        "permission": [permission],
    }
    return {"object": "list", "data": [card]}


@router.post("/v1/videos")
async def create_video(raw: Request, sim: Sim) -> VideoJob:
    request = await parse_request(raw, sim.profile.model)
    job = queued_job(sim.profile.model, request)
    log.info("request %s: accepted (%s)", job.id, request.describe())
    sim.submit(job, request)
    return job


@router.post("/v1/videos/sync")
async def create_video_sync(raw: Request, sim: Sim) -> Response:
    request = await parse_request(raw, sim.profile.model)
    request_id = f"video_sync-{random_uuid()}"
    log.info("request %s: accepted (%s)", request_id, request.describe())
    output = sim.storage / f"{request_id}.mp4"
    start = time.perf_counter()
    timeout = sim.sync_timeout_s
    try:
        result = await asyncio.wait_for(sim.engine.generate(request, request_id, output), timeout=timeout)
    except TimeoutError:
        log.error("request %s: timed out after %g s (%s)", request_id, timeout, SYNC_TIMEOUT_ENV)
        raise HTTPException(HTTPStatus.GATEWAY_TIMEOUT, f"Video generation timed out after {timeout}s.") from None
    except GenerationError as exc:
        log.error("request %s: failed (%d): %s", request_id, exc.status_code, exc)
        if exc.status_code >= 500:
            # A failure in the engine: upstream's engine client raises EngineGenerateError, answered with the
            # request id (vLLM-Omni's _create_engine_error_json_response).
            return JSONResponse(engine_error_body(str(exc), request_id), status_code=exc.status_code)
        raise HTTPException(exc.status_code, str(exc)) from exc  # a client error of H3's (OmniClientError)
    inference_s = time.perf_counter() - start
    body = output.read_bytes()
    output.unlink()
    log_completed(request_id, inference_s, result)
    return Response(
        content=body,
        media_type="video/mp4",
        headers={
            "X-Request-Id": request_id,
            "X-Model": sim.profile.model,
            "X-Inference-Time-S": f"{inference_s:.3f}",
            "X-Stage-Durations": json.dumps(result.stage_durations, separators=(",", ":")),
            "X-Peak-Memory-MB": f"{result.peak_memory_mb:.3f}",
        },
    )


@router.get("/v1/videos")
async def list_videos(
    sim: Sim,
    after: str | None = None,
    limit: Annotated[int | None, Query(ge=0, le=100)] = None,
    order: Literal["asc", "desc"] = "desc",
) -> dict[str, Any]:
    listed = sorted(sim.jobs.values(), key=lambda job: job.created_at, reverse=order == "desc")
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


@router.get("/v1/videos/{video_id}", response_model=None)
async def retrieve_video(video_id: str, sim: Sim) -> VideoJob | JSONResponse:
    job = _lookup(sim, video_id)
    if job.status == "failed" and job.error is not None:
        code = job.error.code if isinstance(job.error.code, int) and 400 <= job.error.code < 600 else 500
        return JSONResponse(job.model_dump(mode="json"), status_code=code)
    return job


@router.delete("/v1/videos/{video_id}")
async def delete_video(video_id: str, sim: Sim) -> dict[str, Any]:
    job = _lookup(sim, video_id)
    task = sim.tasks.get(video_id)
    if task is not None:
        task.cancel()
        try:
            await asyncio.wait_for(task, timeout=2.0)
        except TimeoutError:
            raise HTTPException(HTTPStatus.CONFLICT, "Cancellation in progress. Please try again later.") from None
        except asyncio.CancelledError:
            pass
    if job.file_name is not None:
        (sim.storage / job.file_name).unlink(missing_ok=True)
    del sim.jobs[video_id]
    log.info("request %s: deleted", video_id)
    return {"id": video_id, "deleted": True, "object": "video.deleted"}


@router.get("/v1/videos/{video_id}/content")
async def download_video(video_id: str, sim: Sim) -> FileResponse:
    job = _lookup(sim, video_id)
    if job.status == "failed":
        raise HTTPException(422, "Video generation failed. Check job status for error details.")
    if not job.file_name:
        raise HTTPException(HTTPStatus.NOT_FOUND, "Generation is still in-progress")
    path = sim.storage / job.file_name
    if not path.exists():
        raise HTTPException(HTTPStatus.NOT_FOUND, "Generated video file not found on disk")
    return FileResponse(path, media_type=job.media_type, filename=job.file_name)
