"""The simulator's jobs and its engine: one request at a time on the worker pool.

:class:`VideoJob` is upstream's ``VideoResponse`` (``protocol/videos.py``),
filled as ``video/generation/helpers.py`` fills it:

- when queued (:func:`queued_job`): ``size`` and ``seconds`` echo the
  request (``size`` only from the ``size`` field, ``seconds`` "4" when not
  sent), ``fps`` is the request's or 24, ``num_frames`` the request's or
  ``int(seconds * fps)``, ``duration_s`` the seconds or ``num_frames / fps``;
- when completed: ``progress`` 100 (it is 0 until then), and ``fps``,
  ``num_frames`` and ``duration_s`` describe the output; ``seconds`` and
  ``size`` still echo the request; ``inference_time_s`` runs from the start
  of the job's task, queue wait and muxing included;
- when failed: ``error`` with the status as its code and the message
  unprefixed; ``progress``, ``stage_durations`` and ``peak_memory_mb`` keep
  their zero values.

:class:`Engine` resolves what H3 renders (:mod:`h3bench.sim.shape`) when it
takes a request, so an async job with a bad shape is accepted and then
fails with code 400, as upstream's worker fails it. :class:`Simulator` is the
state the routes share: the engine, the job store and the tasks that run
async jobs.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import shutil
import time
import uuid
from pathlib import Path
from typing import Any, Literal

import numpy as np
from pydantic import BaseModel, Field

from h3bench.h3 import FPS, PIPELINE_TIMING_KEYS, STAGE_PREFIX, audio_sample_count
from h3bench.sim.content import ContentSpec, content_key
from h3bench.sim.forms import SimRequest
from h3bench.sim.metrics import RequestTiming, SimMetrics, underreport_stages
from h3bench.sim.pool import WorkerPool
from h3bench.sim.profile import SimProfile
from h3bench.sim.profiler import Profiler
from h3bench.sim.shape import resolve_shape
from h3bench.sim.worker import GenerationError, WorkerJob, WorkerResult, now

__all__ = ["Engine", "VideoError", "VideoJob", "content_of", "log_completed", "queued_job"]

log = logging.getLogger("h3bench.sim")


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
    fps: float | None = None
    num_frames: int | None = None
    duration_s: float | None = None
    metrics: dict[str, Any] | None = None  # with return_stage_metrics, upstream's profiler metrics; none here
    stage_durations: dict[str, float] = Field(default_factory=dict)
    peak_memory_mb: float = 0.0
    action: dict[str, Any] | None = None  # action-capable models only


def queued_job(model: str, request: SimRequest) -> VideoJob:
    """The job as ``POST /v1/videos`` returns it: what the request asked for (upstream's ``video_response_from_request``)."""
    form = request.form
    fps = float(form.fps or FPS)
    num_frames = form.num_frames
    if num_frames is None and form.seconds is not None:
        num_frames = int(float(form.seconds) * fps)
    duration = float(form.seconds) if form.seconds is not None else None
    if duration is None and num_frames is not None:
        duration = num_frames / fps
    return VideoJob(
        model=model,
        prompt=form.prompt,
        size=form.size,
        seconds=form.seconds or "4",
        quality=form.quality or "default",
        fps=fps,
        num_frames=num_frames,
        duration_s=duration,
    )


def content_of(request: SimRequest) -> ContentSpec:
    """What the engine renders for ``request``: H3's shape and the content key.

    Raises
    ------
    GenerationError
        Status 400: H3 refuses the request (:func:`~h3bench.sim.shape.resolve_shape`).
    """
    shape = resolve_shape(request)
    key = content_key(
        seed=request.seed,
        prompt=request.form.prompt,
        reference_digests=request.references.digests,
        width=shape.width,
        height=shape.height,
        frames=shape.frames,
    )
    return ContentSpec(shape.width, shape.height, shape.frames, audio_sample_count(shape.frames), key)


class Engine:
    """Runs one request at a time on the worker pool, as H3 does (one request per diffusion batch)."""

    def __init__(self, profile: SimProfile, pool: WorkerPool, storage: Path, process_seed: int) -> None:
        self.profile = profile
        self.pool = pool
        self.storage = storage
        self._rng = np.random.default_rng(process_seed)
        self._lock = asyncio.Lock()
        self._count = 0
        self._warmed = 0.0  # DiT work run so far, in full requests' forwards: what heats the card
        self._cache: dict[bytes, tuple[Path, WorkerResult]] = {}
        self.profiler: Profiler | None = None  # with --profiler-config (h3bench.sim.profiler)
        stage, factor = profile.underreport_stage, profile.underreport_factor
        # A profiler method is under-reported in the stage durations, a vllm_omni: family in /metrics only.
        self._misreported_method = stage if stage is not None and ":" not in stage else None
        self.metrics = SimMetrics(profile.model, (stage, factor) if stage is not None and ":" in stage else None)

    async def generate(self, request: SimRequest, request_id: str, output: Path) -> WorkerResult:
        spec = content_of(request)
        cached = self._cache.get(spec.key) if self.profile.cache_outputs else None
        if cached is not None:
            shutil.copyfile(cached[0], output)
            log.warning("request %s: answered from the output cache (cache_outputs)", request_id)
            return cached[1]
        started = time.time()
        entered = now()
        async with self._lock:
            if self.pool.dead_reason is not None:
                raise GenerationError(f"engine is dead: {self.pool.dead_reason}")
            self._count += 1
            nth = self._count
            profile = self.profile
            steps = request.form.num_inference_steps
            plan = profile.plan(spec.frames, self._rng, num_inference_steps=steps, nth=nth, warmed=self._warmed)
            self._warmed += profile.forwards(steps) / profile.forwards()
            job = WorkerJob(
                request_id=request_id,
                plan=plan,
                started=now(),
                content=spec,
                output_path=str(output),
                fail=nth == profile.fail_request,
                crash_rank=profile.workers - 1 if nth == profile.crash_request else None,
                hang=nth == profile.hang_request,
                extra_video_noise=profile.degrade_video_noise if request.seed in profile.degrade_seeds else 0.0,
            )
            log.info(
                "request %s: started (request %d: %d frames at %dx%d; modelled %.3f s)",
                request_id, nth, spec.frames, spec.width, spec.height, plan.total_s,
            )
            future = self.pool.submit(job)
            try:
                result = await asyncio.shield(asyncio.wrap_future(future))
            except asyncio.CancelledError:
                # The workers finish anyway; nobody will fetch the file.
                future.add_done_callback(lambda _: output.unlink(missing_ok=True))
                raise
            except GenerationError:
                self.metrics.failed()
                raise
        result = self._observe(result, entered, job.started, len(plan.step_s) + 1)
        if self.profiler is not None:
            self.profiler.record(request_id, started, result.stage_durations)
        result = _with_pipeline_timings(result, entered, job.started)
        if profile.cache_outputs:
            kept = self.storage / f"cache-{spec.key.hex()}.mp4"
            shutil.copyfile(output, kept)
            self._cache[spec.key] = (kept, result)
        return result

    def _observe(self, result: WorkerResult, entered: float, started: float, steps: int) -> WorkerResult:
        """The result as the server reports it (a misreported stage), observed once in /metrics."""
        if self._misreported_method is not None:
            durations = underreport_stages(result.stage_durations, self._misreported_method,
                                           self.profile.underreport_factor)
            result = dataclasses.replace(result, stage_durations=durations)
        self.metrics.observe(RequestTiming(entered, started, result.marks["decoded"], result.marks["post_decoded"],
                                           result.stage_durations, steps))
        return result


def _with_pipeline_timings(result: WorkerResult, entered: float, started: float) -> WorkerResult:
    """What upstream's API layer merges into the stage durations, in milliseconds (``entrypoints/omni_base.py``).

    The queue wait and the stage's generation time, measured as the
    ``request_queue_wait_s`` and ``stage_gen_time_s`` families observe them.
    """
    gen_s = result.marks["post_decoded"] - started
    timings = dict(zip(PIPELINE_TIMING_KEYS, ((started - entered) * 1000.0, gen_s * 1000.0), strict=True))
    return dataclasses.replace(result, stage_durations={**result.stage_durations, **timings})


def log_completed(request_id: str, seconds: float, result: WorkerResult) -> None:
    durations = [(key, value) for key, value in result.stage_durations.items() if key.startswith(STAGE_PREFIX)]
    stages = ", ".join(f"{key.removeprefix(STAGE_PREFIX)} {value:.3f}" for key, value in durations)
    how = "copied the render of an identical earlier request" if result.reused else "rendered"
    log.info(
        "request %s: completed in %.3f s (%d frames, %d audio samples, %.2f MB, %s in %.3f s); "
        "stages [s]: %s; peak memory %.1f MB",
        request_id,
        seconds,
        result.frames,
        result.audio_samples,
        result.size_bytes / 1e6,
        how,
        result.render_s,
        stages,
        result.peak_memory_mb,
    )


class Simulator:
    """What the routes share: the arm's profile, the engine, the job store and the running job tasks."""

    def __init__(
        self, profile: SimProfile, pool: WorkerPool, storage: Path, *, process_seed: int, sync_timeout_s: float
    ) -> None:
        self.profile = profile
        self.pool = pool
        self.storage = storage
        self.sync_timeout_s = sync_timeout_s
        self.engine = Engine(profile, pool, storage, process_seed)
        self.jobs: dict[str, VideoJob] = {}
        self.tasks: dict[str, asyncio.Task[None]] = {}
        self.started = int(time.time())

    def submit(self, job: VideoJob, request: SimRequest) -> None:
        """Store the job and run it in the background."""
        self.jobs[job.id] = job
        self.tasks[job.id] = asyncio.create_task(self._run(job, request))

    async def _run(self, job: VideoJob, request: SimRequest) -> None:
        job.status = "in_progress"
        start = time.perf_counter()
        output = self.storage / f"{job.id}.mp4"
        try:
            result = await self.engine.generate(request, job.id, output)
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
            self.tasks.pop(job.id, None)
        job.inference_time_s = time.perf_counter() - start
        job.status, job.progress, job.completed_at = "completed", 100, int(time.time())
        job.file_name = output.name
        job.stage_durations = result.stage_durations
        job.peak_memory_mb = result.peak_memory_mb
        job.fps, job.num_frames, job.duration_s = float(FPS), result.frames, result.frames / FPS
        log_completed(job.id, job.inference_time_s, result)

    def cancel_all(self) -> None:
        for task in self.tasks.values():
            task.cancel()
