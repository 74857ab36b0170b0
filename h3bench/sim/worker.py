"""The simulator's worker processes: one per simulated device, each running every request.

vLLM-Omni's API process spawns one worker per device (``multiprocessing``
with ``VLLM_WORKER_MULTIPROC_METHOD=spawn``) and every rank runs every
request. Here too: the pool (:mod:`h3bench.sim.pool`) spawns ``workers``
processes with the spawn start method and sends each request's
:class:`WorkerJob` to all of them over pipes. Every rank sleeps through the
request's :class:`StagePlan`; rank 0 also renders and encodes the MP4 in a
thread meanwhile (the encoders release the GIL), times the stages under the
profiler keys, and reports. A request completes when every rank has
reported.

The modelled stage times are the latency. The stages sleep to one running
deadline that starts when the engine took the request (:func:`now`, a clock
that every process shares), so that neither the dispatch to the ranks nor
late wake-ups on a busy machine add up over a request's fifty-odd sleeps;
the MP4 is ready when the deadline of its muxing stage passes or, if
rendering overran the plan, when it is done (the log then says by how much). Rendering is cheap enough to fit (see
:mod:`h3bench.sim.content`), and rank 0 renders each content once per
process: a request identical to an earlier one (same content key; the
process seed is the process's) gets a copy of the earlier file, which is
byte for byte what a new render would write. It still sleeps every stage;
only the ``cache_outputs`` cheat of :mod:`h3bench.sim.jobs` answers at once.

Stage keys are those vLLM-Omni's diffusion pipeline profiler reports in
request mode (``diffusion/profiler/diffusion_pipeline_profiler.py``):
``encode_prompt``, ``_encode_local_media``, ``diffuse`` (which holds the
denoise loop: ``denoise_step`` is recorded under its key), ``decode`` and the
two ``decode_latent`` keys inside it. ``post_decode`` appears only with step
execution, and reference preprocessing and the CPU MP4 have no key; they are
slept all the same.

Failure injection happens here, where it would in a real server: a rank that
dies halfway through the DiT loop (SIGKILL, as an OOM kill would), a rank that
hangs there, an error raised after text encoding, a startup error, and a rank
that ignores both the stop request and SIGTERM.
"""

from __future__ import annotations

import contextlib
import dataclasses
import logging
import math
import os
import shutil
import signal
import sys
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from multiprocessing.connection import Connection
from pathlib import Path

from h3bench.h3 import STAGE_PREFIX
from h3bench.sim.content import ContentSpec, Perturbation, RenderInfo, render
from h3bench.sim.stageplan import StagePlan

__all__ = [
    "LOG_FORMAT",
    "GenerationError",
    "WorkerConfig",
    "WorkerJob",
    "WorkerResult",
    "now",
    "worker_main",
]

_OVERRUN_NOTICE_S = 0.005  # beyond a sleep's own lateness

LOG_FORMAT = "%(asctime)s %(levelname)s [%(processName)s pid=%(process)d] %(message)s"

log = logging.getLogger("h3bench.sim")


def now() -> float:
    """Seconds on CLOCK_MONOTONIC, which the API process and its workers share."""
    return time.clock_gettime(time.CLOCK_MONOTONIC)


class GenerationError(Exception):
    """A request that failed in the engine; ``status_code`` is the HTTP status it maps to.

    Internal to the simulator: the API turns it into an HTTP error or a failed job.
    """

    def __init__(self, message: str, *, status_code: int = 500) -> None:
        super().__init__(message)
        self.status_code = status_code


@dataclass(frozen=True)
class WorkerConfig:
    """What one worker process needs at startup."""

    rank: int
    load_s: float = 0.0  # wall seconds
    compile: str = "none"  # where the engine compiles (SimProfile.compile); "startup" sleeps compile_s here
    compile_s: float = 0.0  # wall seconds
    weights_gib: float = 0.0  # what "Model loading took" reports
    startup_error: str | None = None
    ignore_sigterm: bool = False
    perturbation: Perturbation = field(default_factory=Perturbation)


@dataclass(frozen=True)
class WorkerJob:
    """One request, sent to every rank."""

    request_id: str
    plan: StagePlan
    started: float  # now() when the engine took the request: the stages' deadlines count from here
    content: ContentSpec
    output_path: str
    fail: bool = False  # rank 0 raises after encode_prompt
    crash_rank: int | None = None  # this rank SIGKILLs itself halfway through the DiT loop
    hang: bool = False  # rank 0 stops halfway through the DiT loop and never resumes
    extra_video_noise: float = 0.0  # this request's seed degrades (profile degrade_seeds)


@dataclass(frozen=True)
class WorkerResult:
    """Rank 0's report of one completed request."""

    stage_durations: dict[str, float]
    peak_memory_mb: float
    frames: int
    audio_samples: int
    size_bytes: int
    render_s: float  # wall time of content generation and muxing (or of the copy), overlapped with the stages
    reused: bool  # a copy of the render of an identical earlier request
    # now() when the engine part ended (after the VAE decode) and after post-processing: the /metrics clock
    marks: dict[str, float] = field(default_factory=dict)


# -- the worker process -------------------------------------------------------


def worker_main(config: WorkerConfig, tasks: Connection, results: Connection) -> None:
    """Entry point of a worker process: start up, then run jobs until told to stop."""
    logging.basicConfig(level=logging.INFO, format=LOG_FORMAT, stream=sys.stderr, force=True)
    # The API process owns Ctrl-C; a worker must not die of the terminal's SIGINT first.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_IGN if config.ignore_sigterm else _exit_on_sigterm)
    rank = config.rank
    _start_up(config)
    if config.startup_error:
        log.error("rank %d: startup failed: %s", rank, config.startup_error)
        results.send(("startup_error", rank, config.startup_error))
        sys.exit(1)
    results.send(("ready", rank, os.getpid()))
    log.info("rank %d ready", rank)
    renders = _Renders()
    while True:
        try:
            message = tasks.recv()
        except EOFError:
            log.warning("rank %d: the API process went away; exiting", rank)
            return
        if message[0] == "stop":
            if config.ignore_sigterm:
                log.warning("rank %d: ignoring the stop request and SIGTERM (injected)", rank)
                _block_forever()
            log.info("rank %d stopping", rank)
            return
        job: WorkerJob = message[1]
        try:
            result = _run(job, config, renders)
        except Exception as exc:  # reported to the API process, which answers 500
            log.error("rank %d: request %s failed: %s", rank, job.request_id, exc)
            results.send(("error", job.request_id, rank, str(exc)))
        else:
            results.send(("done", job.request_id, rank, result))


def _start_up(config: WorkerConfig) -> None:
    """Device init, weight load and compile, logged as vLLM-Omni's worker, runner and loader log them.

    The lines are upstream's (``diffusion/worker/diffusion_worker.py``, ``diffusion_model_runner.py``,
    ``model_loader/diffusers_loader.py``): the harness reads the start-up's phases from them
    (:mod:`h3bench.server.startup`).
    """
    rank = config.rank
    log.info("Worker %d: Initialized device and distributed environment.", rank)
    time.sleep(config.load_s)
    log.info("Loading weights took %.2f seconds", config.load_s)
    log.info("Model loading took %.4f GiB and %.6f seconds", config.weights_gib, config.load_s)
    log.info("Model runner: Model loaded successfully.")
    if config.compile == "none":
        log.warning("Model runner: Platform npu:%d does not support torch inductor, skipping torch.compile.", rank)
    elif config.compile == "first_request":
        log.info("Model runner: transformer configured for lazy regional torch.compile with dynamic=False; "
                 "compilation errors may surface on the first request.")
    else:
        time.sleep(config.compile_s)
        log.info("torch.compile takes %.2f s in total", config.compile_s)
    log.info("Worker %d: Initialization complete.", rank)


def _exit_on_sigterm(signum: int, _frame: object) -> None:
    log.info("SIGTERM received; exiting")
    raise SystemExit(0)


def _block_forever() -> None:
    while True:
        threading.Event().wait()


class _Stages:
    """Sleeps through planned stages to one running deadline and records their wall durations under profiler keys."""

    def __init__(self, origin: float) -> None:
        self.durations: dict[str, float] = {}
        self.deadline = origin

    @contextlib.contextmanager
    def stage(self, name: str) -> Iterator[None]:
        start = now()
        try:
            yield
        finally:
            key = STAGE_PREFIX + name
            self.durations[key] = self.durations.get(key, 0.0) + now() - start

    def sleep(self, name: str | None, seconds: float) -> None:
        """Sleep until ``seconds`` after the previous stage's deadline, under ``name`` if it has a key."""
        self.deadline += seconds
        if name is None:
            _sleep_until(self.deadline)
            return
        with self.stage(name):
            _sleep_until(self.deadline)


def _sleep_until(deadline: float) -> None:
    while (left := deadline - now()) > 0:
        time.sleep(left)


class _Renders:
    """Rank 0's finished renders by content, for requests identical to an earlier one; the last few are kept."""

    def __init__(self, keep: int = 4) -> None:
        self.keep = keep
        self._kept: dict[ContentSpec, RenderInfo] = {}  # insertion order: oldest first

    def get(self, content: ContentSpec) -> RenderInfo | None:
        return self._kept.get(content)

    def add(self, content: ContentSpec, info: RenderInfo) -> None:
        """Keep a copy of a finished render (the output itself is the API's to serve and delete)."""
        kept = info.path.with_name(f"render-{content.key.hex()}.mp4")
        shutil.copyfile(info.path, kept)
        self._kept[content] = RenderInfo(kept, info.frames, info.audio_samples, info.size_bytes)
        while len(self._kept) > self.keep:
            oldest = next(iter(self._kept))
            self._kept.pop(oldest).path.unlink(missing_ok=True)


class _Render(threading.Thread):
    """Rank 0's content generation and muxing, or the copy of an identical earlier render, run while the stages sleep."""

    def __init__(self, job: WorkerJob, perturbation: Perturbation, renders: _Renders) -> None:
        super().__init__(name=f"render-{job.request_id}", daemon=True)
        self.job = job
        self.perturbation = perturbation
        self.renders = renders
        self.abort = threading.Event()
        self.info: RenderInfo | None = None
        self.error: BaseException | None = None
        self.earlier = renders.get(job.content)
        self.seconds = 0.0

    def run(self) -> None:
        start = time.perf_counter()
        output, content = Path(self.job.output_path), self.job.content
        try:
            if self.earlier is not None:
                shutil.copyfile(self.earlier.path, output)
                self.info = RenderInfo(output, self.earlier.frames, self.earlier.audio_samples, self.earlier.size_bytes)
            else:
                self.info = render(output, content, self.perturbation, abort=self.abort)
                self.renders.add(content, self.info)
        except BaseException as exc:  # handed to the worker's main thread
            self.error = exc
        self.seconds = time.perf_counter() - start

    def cancel(self) -> None:
        self.abort.set()
        self.join()
        Path(self.job.output_path).unlink(missing_ok=True)


def _run(job: WorkerJob, config: WorkerConfig, renders: _Renders) -> WorkerResult | None:
    """Run one request on this rank; rank 0 returns the result, the others None."""
    rank, plan = config.rank, job.plan
    perturbation = config.perturbation
    if job.extra_video_noise:  # independent Gaussian noises add in quadrature
        perturbation = dataclasses.replace(
            perturbation, video_noise=math.hypot(perturbation.video_noise, job.extra_video_noise))
    renderer = _Render(job, perturbation, renders) if rank == 0 else None
    if renderer is not None:
        renderer.start()
    stages = _Stages(job.started)
    try:
        stages.sleep(None, plan.preprocess_s)
        stages.sleep("encode_prompt", plan.encode_prompt_s)
        if job.fail and rank == 0:
            raise RuntimeError(f"injected failure in request {job.request_id} (profile fail_request)")
        stages.sleep("_encode_local_media", plan.encode_media_s)
        with stages.stage("diffuse"):
            for index, seconds in enumerate(plan.step_s):
                if index == len(plan.step_s) // 2:
                    _maybe_fail_midway(job, rank)
                stages.sleep(None, seconds)
        with stages.stage("decode"):
            stages.sleep("video_vae.decode_latent", plan.video_decode_s)
            stages.sleep("audio_vae.decode_latent", plan.audio_decode_s)
        decoded = now()
        stages.sleep(None, plan.post_decode_s)
        post_decoded = now()
        stages.sleep(None, plan.handoff_s)
        stages.sleep(None, plan.mux_s)  # the MP4 is due when this deadline passes
    except BaseException:
        if renderer is not None:
            renderer.cancel()
        raise
    if renderer is None:
        return None
    renderer.join()
    if renderer.error is not None or renderer.info is None:
        Path(job.output_path).unlink(missing_ok=True)
        raise RuntimeError(f"rendering {job.output_path} failed: {renderer.error}") from renderer.error
    overrun = now() - stages.deadline
    if overrun > _OVERRUN_NOTICE_S:
        log.warning("request %s: rendering overran the modelled stages by %.3f s", job.request_id, overrun)
    info = renderer.info
    return WorkerResult(
        stage_durations=stages.durations,
        peak_memory_mb=plan.peak_memory_mb,
        frames=info.frames,
        audio_samples=info.audio_samples,
        size_bytes=info.size_bytes,
        render_s=renderer.seconds,
        reused=renderer.earlier is not None,
        marks={"decoded": decoded, "post_decoded": post_decoded},
    )


def _maybe_fail_midway(job: WorkerJob, rank: int) -> None:
    if job.crash_rank == rank:
        log.error("rank %d: crashing in the middle of request %s (injected)", rank, job.request_id)
        logging.shutdown()
        os.kill(os.getpid(), signal.SIGKILL)
    if job.hang and rank == 0:
        log.warning("rank %d: hanging in the middle of request %s (injected)", rank, job.request_id)
        _block_forever()
