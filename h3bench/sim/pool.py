"""The pool of simulator workers that the API process keeps: spawn, dispatch, watch for deaths, stop.

A request completes when every rank has reported; a rank that dies makes the
engine dead, as in vLLM, and the API answers 503 on ``/health`` from then on.
"""

from __future__ import annotations

import concurrent.futures
import contextlib
import logging
import multiprocessing
import multiprocessing.connection
import signal
import threading
import time
from dataclasses import dataclass
from multiprocessing.connection import Connection

from h3bench.errors import ServerStartError
from h3bench.sim.worker import GenerationError, WorkerConfig, WorkerJob, WorkerResult, worker_main

__all__ = ["WorkerPool"]

_STOP_GRACE_S = 1.0  # for the stop request, then again for SIGTERM

log = logging.getLogger("h3bench.sim")


def describe_exit(code: int | None) -> str:
    """How a worker process ended, from its exit code (negative: the signal that killed it)."""
    if code is not None and code < 0:
        names = {s.value: s.name for s in signal.Signals}
        return f"killed by {names.get(-code, f'signal {-code}')}"
    return "still running" if code is None else f"exit code {code}"


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
                assert pending.result is not None, "rank 0 reports the result"
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
        upstream's harness (``tests/helpers/runtime.py``) does.
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
        survivors: list[int] = []
        for worker in self._workers:
            if worker.process.is_alive():
                survivors.append(worker.process.pid or 0)
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
