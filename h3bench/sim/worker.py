"""The simulator's worker processes, and the pool that the API process keeps of them.

vLLM-Omni's API process spawns one worker per device (``multiprocessing``
with ``VLLM_WORKER_MULTIPROC_METHOD=spawn``, REFERENCE §6) and every rank
runs every request. Here too: the pool spawns ``workers`` processes with the
spawn start method and sends each request's :class:`WorkerJob` to all of them
over pipes. Every rank sleeps through the request's :class:`StagePlan`; rank 0
also renders and encodes the MP4 in a thread meanwhile (the encoder releases
the GIL), times the stages under the profiler keys, and reports. A request
completes when every rank has reported.

Failure injection happens here, where it would in a real server: a rank that
dies halfway through the DiT loop (SIGKILL, as an OOM kill would), a rank that
hangs there, an error raised after text encoding, a startup error, and a rank
that ignores both the stop request and SIGTERM.
"""

from __future__ import annotations

import concurrent.futures
import contextlib
import logging
import multiprocessing
import multiprocessing.connection
import os
import signal
import sys
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from multiprocessing.connection import Connection
from pathlib import Path

from h3bench.errors import ServerStartError
from h3bench.sim.content import ContentSpec, Perturbation, RenderInfo, render
from h3bench.sim.profile import StagePlan

__all__ = [
    "GenerationError",
    "LOG_FORMAT",
    "WorkerConfig",
    "WorkerJob",
    "WorkerPool",
    "WorkerResult",
    "describe_exit",
    "worker_main",
]

LOG_FORMAT = "%(asctime)s %(levelname)s [%(processName)s pid=%(process)d] %(message)s"
_STOP_GRACE_S = 1.0  # for the stop request, then again for SIGTERM
_PREFIX = "MiniMaxH3Pipeline."

log = logging.getLogger("h3bench.sim")


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
    startup_error: str | None = None
    ignore_sigterm: bool = False
    perturbation: Perturbation = Perturbation()


@dataclass(frozen=True)
class WorkerJob:
    """One request, sent to every rank."""

    request_id: str
    plan: StagePlan
    content: ContentSpec
    output_path: str
    fail: bool = False  # rank 0 raises after encode_prompt
    crash_rank: int | None = None  # this rank SIGKILLs itself halfway through the DiT loop
    hang: bool = False  # rank 0 stops halfway through the DiT loop and never resumes


@dataclass(frozen=True)
class WorkerResult:
    """Rank 0's report of one completed request."""

    stage_durations: dict[str, float]
    peak_memory_mb: float
    frames: int
    audio_samples: int
    size_bytes: int
    render_s: float  # wall time of content generation and muxing, overlapped with the stages


def describe_exit(code: int | None) -> str:
    """A process exit code in words: ``exit code 1``, ``killed by SIGKILL``."""
    if code is None:
        return "still running"
    if code < 0:
        try:
            return f"killed by {signal.Signals(-code).name}"
        except ValueError:
            return f"killed by signal {-code}"
    return f"exit code {code}"


# -- the worker process -------------------------------------------------------


def worker_main(config: WorkerConfig, tasks: Connection, results: Connection) -> None:
    """Entry point of a worker process: start up, then run jobs until told to stop."""
    logging.basicConfig(level=logging.INFO, format=LOG_FORMAT, stream=sys.stderr, force=True)
    # The API process owns Ctrl-C; a worker must not die of the terminal's SIGINT first.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_IGN if config.ignore_sigterm else _exit_on_sigterm)
    rank = config.rank
    time.sleep(config.load_s)
    if config.startup_error:
        log.error("rank %d: startup failed: %s", rank, config.startup_error)
        results.send(("startup_error", rank, config.startup_error))
        sys.exit(1)
    results.send(("ready", rank, os.getpid()))
    log.info("rank %d ready", rank)
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
            result = _run(job, config)
        except Exception as exc:  # reported to the API process, which answers 500
            log.error("rank %d: request %s failed: %s", rank, job.request_id, exc)
            results.send(("error", job.request_id, rank, str(exc)))
        else:
            results.send(("done", job.request_id, rank, result))


def _exit_on_sigterm(signum: int, _frame: object) -> None:
    log.info("SIGTERM received; exiting")
    raise SystemExit(0)


def _block_forever() -> None:
    while True:
        threading.Event().wait()


class _Stages:
    """Sleeps through planned stages and records their wall durations under profiler keys."""

    def __init__(self) -> None:
        self.durations: dict[str, float] = {}

    @contextlib.contextmanager
    def stage(self, name: str) -> Iterator[None]:
        start = time.perf_counter()
        try:
            yield
        finally:
            key = _PREFIX + name
            self.durations[key] = self.durations.get(key, 0.0) + time.perf_counter() - start

    def sleep(self, name: str | None, seconds: float) -> None:
        if name is None:
            _sleep(seconds)
            return
        with self.stage(name):
            _sleep(seconds)


def _sleep(seconds: float) -> None:
    """Sleep to a deadline, so repeated short sleeps do not accumulate oversleep."""
    deadline = time.perf_counter() + seconds
    while (left := deadline - time.perf_counter()) > 0:
        time.sleep(left)


class _Render(threading.Thread):
    """Rank 0's content generation and muxing, run while the stages sleep."""

    def __init__(self, job: WorkerJob, perturbation: Perturbation) -> None:
        super().__init__(name=f"render-{job.request_id}", daemon=True)
        self.job = job
        self.perturbation = perturbation
        self.abort = threading.Event()
        self.info: RenderInfo | None = None
        self.error: BaseException | None = None
        self.seconds = 0.0

    def run(self) -> None:
        start = time.perf_counter()
        try:
            self.info = render(self.job.output_path, self.job.content, self.perturbation, abort=self.abort)
        except BaseException as exc:  # handed to the worker's main thread
            self.error = exc
        self.seconds = time.perf_counter() - start

    def cancel(self) -> None:
        self.abort.set()
        self.join()
        Path(self.job.output_path).unlink(missing_ok=True)


def _run(job: WorkerJob, config: WorkerConfig) -> WorkerResult | None:
    """Run one request on this rank; rank 0 returns the result, the others None."""
    rank, plan = config.rank, job.plan
    renderer = _Render(job, config.perturbation) if rank == 0 else None
    if renderer is not None:
        renderer.start()
    stages = _Stages()
    try:
        stages.sleep(None, plan.preprocess_s)  # reference preprocessing has no profiler key
        stages.sleep("encode_prompt", plan.encode_prompt_s)
        if job.fail and rank == 0:
            raise RuntimeError(f"injected failure in request {job.request_id} (profile fail_request)")
        stages.sleep("_encode_local_media", plan.encode_media_s)
        with stages.stage("diffuse"):
            for index, seconds in enumerate(plan.step_s):
                if index == len(plan.step_s) // 2:
                    _maybe_fail_midway(job, rank)
                stages.sleep("denoise_step", seconds)
        with stages.stage("decode"):
            stages.sleep("video_vae.decode_latent", plan.video_decode_s)
            stages.sleep("audio_vae.decode_latent", plan.audio_decode_s)
        stages.sleep("post_decode", plan.post_decode_s)
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
    stages.sleep(None, plan.mux_s)  # the CPU MP4 has no profiler key either
    info = renderer.info
    return WorkerResult(
        stage_durations=stages.durations,
        peak_memory_mb=plan.peak_memory_mb,
        frames=info.frames,
        audio_samples=info.audio_samples,
        size_bytes=info.size_bytes,
        render_s=renderer.seconds,
    )


def _maybe_fail_midway(job: WorkerJob, rank: int) -> None:
    if job.crash_rank == rank:
        log.error("rank %d: crashing in the middle of request %s (injected)", rank, job.request_id)
        logging.shutdown()
        os.kill(os.getpid(), signal.SIGKILL)
    if job.hang and rank == 0:
        log.warning("rank %d: hanging in the middle of request %s (injected)", rank, job.request_id)
        _block_forever()


# -- the pool, in the API process ---------------------------------------------


@dataclass
class _Worker:
    rank: int
    process: multiprocessing.process.BaseProcess
    tasks: Connection
    results: Connection
    exited: bool = False  # reaped and logged


@dataclass
class _Pending:
    future: concurrent.futures.Future[WorkerResult]
    waiting: set[int]  # ranks that have not reported yet
    result: WorkerResult | None = None


class WorkerPool:
    """The API process's workers: spawn, dispatch, watch for deaths, stop.

    Parameters
    ----------
    configs
        One per rank, rank 0 first.
    """

    def __init__(self, configs: list[WorkerConfig]) -> None:
        self.configs = configs
        self.dead_reason: str | None = None  # set when a worker died while serving
        self._workers: list[_Worker] = []
        self._pending: dict[str, _Pending] = {}
        self._lock = threading.Lock()
        self._watcher: threading.Thread | None = None
        self._stopping = False
        self._shutdown = threading.Event()  # from here on, worker exits are expected
        self._survivors: tuple[int, ...] = ()

    @property
    def pids(self) -> tuple[int, ...]:
        return tuple(worker.process.pid or 0 for worker in self._workers)

    def begin_shutdown(self) -> None:
        """Expect workers to exit from now on (the process group got SIGTERM); they are not deaths."""
        self._shutdown.set()

    def start(self, timeout: float) -> None:
        """Spawn every worker and wait until each reports ready.

        Raises
        ------
        ServerStartError
            A worker reported a startup error, died, or was not ready within ``timeout``.
        """
        ctx = multiprocessing.get_context("spawn")
        for config in self.configs:
            tasks_r, tasks_w = ctx.Pipe(duplex=False)
            results_r, results_w = ctx.Pipe(duplex=False)
            process = ctx.Process(
                target=worker_main,
                args=(config, tasks_r, results_w),
                name=f"worker-{config.rank}",
                daemon=True,  # never outlive an API process that crashes
            )
            process.start()
            tasks_r.close()
            results_w.close()
            self._workers.append(_Worker(config.rank, process, tasks_w, results_r))
            log.info("spawned worker rank %d (pid %d)", config.rank, process.pid)
        try:
            self._wait_ready(timeout)
        except ServerStartError:
            self.stop()
            raise
        self._watcher = threading.Thread(target=self._watch, name="worker-watch", daemon=True)
        self._watcher.start()

    def _wait_ready(self, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        waiting = {worker.rank: worker for worker in self._workers}
        while waiting:
            handles = [w.results for w in waiting.values()] + [w.process.sentinel for w in waiting.values()]
            ready = multiprocessing.connection.wait(handles, timeout=max(0.0, deadline - time.monotonic()))
            if not ready:
                ranks = ", ".join(str(rank) for rank in sorted(waiting))
                raise ServerStartError(f"workers {ranks} were not ready within {timeout:g} s", exit_code=1)
            for worker in list(waiting.values()):
                if worker.results in ready:
                    try:
                        kind, rank, detail = worker.results.recv()
                    except EOFError:
                        kind, rank, detail = "died", worker.rank, None
                    if kind == "startup_error":
                        raise ServerStartError(f"worker rank {rank} failed at startup: {detail}", exit_code=1)
                    if kind == "ready":
                        del waiting[worker.rank]
                        continue
                if worker.process.sentinel in ready or not worker.process.is_alive():
                    worker.process.join(0.1)
                    raise ServerStartError(
                        f"worker rank {worker.rank} (pid {worker.process.pid}) exited during startup "
                        f"({describe_exit(worker.process.exitcode)})",
                        exit_code=1,
                    )

    def submit(self, job: WorkerJob) -> concurrent.futures.Future[WorkerResult]:
        """Send ``job`` to every rank; the future resolves with rank 0's result once all have reported."""
        future: concurrent.futures.Future[WorkerResult] = concurrent.futures.Future()
        with self._lock:
            if self.dead_reason is not None:
                future.set_exception(GenerationError(f"engine is dead: {self.dead_reason}"))
                return future
            self._pending[job.request_id] = _Pending(future, {worker.rank for worker in self._workers})
        try:
            for worker in self._workers:
                worker.tasks.send(("job", job))
        except OSError as exc:  # a worker died just now; the watcher reports which
            with self._lock:
                self._pending.pop(job.request_id, None)
            if not future.done():
                future.set_exception(GenerationError(f"cannot reach a worker: {exc}"))
        return future

    def _watch(self) -> None:
        """Collect results and notice dead workers, until the pool stops."""
        while not self._stopping:
            live = [w for w in self._workers if not w.exited]
            handles = [w.results for w in live] + [w.process.sentinel for w in live]
            ready = multiprocessing.connection.wait(handles, timeout=0.2)
            for worker in live:
                if worker.results in ready:
                    self._receive(worker)
                if worker.process.sentinel in ready and not self._stopping:
                    self._died(worker)

    def _receive(self, worker: _Worker) -> None:
        try:
            kind, request_id, rank, payload = worker.results.recv()
        except (EOFError, OSError):
            return  # the sentinel reports the death
        with self._lock:
            pending = self._pending.get(request_id)
            if pending is None:
                return
            if kind == "error":
                del self._pending[request_id]
                if not pending.future.done():
                    pending.future.set_exception(GenerationError(f"worker rank {rank}: {payload}"))
                return
            pending.waiting.discard(rank)
            if rank == 0:
                pending.result = payload
            if not pending.waiting:
                del self._pending[request_id]
                pending.future.set_result(pending.result)

    def _died(self, worker: _Worker) -> None:
        worker.process.join(0.1)  # reap it, so it is no zombie
        worker.exited = True
        how = describe_exit(worker.process.exitcode)
        # A SIGTERM to the whole group reaches the workers and this process at once; give the
        # API's signal handler a moment to say so before calling the exit a death.
        if self._shutdown.wait(0.5):
            log.info("worker rank %d (pid %d) exited during shutdown (%s)", worker.rank, worker.process.pid, how)
            self._fail_pending(f"the server is shutting down: worker rank {worker.rank} exited")
            return
        reason = f"worker rank {worker.rank} (pid {worker.process.pid}) died ({how})"
        with self._lock:
            ids = ", ".join(self._pending) or "none"
            if self.dead_reason is None:
                self.dead_reason = reason
        log.error("%s; engine is dead; failing in-flight requests: %s", reason, ids)
        self._fail_pending(reason)

    def _fail_pending(self, message: str) -> None:
        with self._lock:
            failed = list(self._pending.values())
            self._pending.clear()
        for pending in failed:
            if not pending.future.done():
                pending.future.set_exception(GenerationError(message))

    def stop(self, grace: float = _STOP_GRACE_S) -> tuple[int, ...]:
        """Ask every worker to stop, SIGTERM those still running after ``grace``; return the PIDs that survive.

        A survivor ignored SIGTERM; it is left for the caller to SIGKILL, as
        upstream's harness does (REFERENCE §6).
        """
        if self._stopping:
            return self._survivors
        log.info("stopping %d worker(s)", len(self._workers))
        self._stopping = True
        self._shutdown.set()
        if self._watcher is not None:
            self._watcher.join()
        for worker in self._workers:
            with contextlib.suppress(OSError):
                worker.tasks.send(("stop",))
        self._join_all(grace)
        for worker in self._workers:
            if worker.process.is_alive():
                log.warning(
                    "worker rank %d (pid %d) still running after %g s; sending SIGTERM",
                    worker.rank,
                    worker.process.pid,
                    grace,
                )
                worker.process.terminate()
        self._join_all(grace)
        survivors = []
        for worker in self._workers:
            if worker.process.is_alive():
                survivors.append(worker.process.pid)
                log.error(
                    "worker rank %d (pid %d) ignored SIGTERM and is still running; the caller must kill it",
                    worker.rank,
                    worker.process.pid,
                )
            elif not worker.exited:
                worker.exited = True
                how = describe_exit(worker.process.exitcode)
                log.info("worker rank %d (pid %d) exited (%s)", worker.rank, worker.process.pid, how)
            worker.tasks.close()
            worker.results.close()
        self._fail_pending("the server is shutting down")
        self._survivors = tuple(survivors)
        return self._survivors

    def _join_all(self, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        for worker in self._workers:
            worker.process.join(max(0.0, deadline - time.monotonic()))
