"""The simulator's HTTP server process: vLLM-Omni's /v1/videos API on FastAPI and uvicorn.

:func:`create_app` puts the routes (:mod:`h3bench.sim.routes`) over a
:class:`~h3bench.sim.jobs.Simulator`; :func:`serve` binds, spawns the workers
(:mod:`h3bench.sim.pool`) and serves until SIGTERM or SIGINT. Errors use
vLLM's ``ErrorResponse`` body, ``{"error": {"message", "type", "param",
"code"}}``, and request validation errors are 400 in vLLM's format
(``vllm/entrypoints/serve/exception_handling/handlers/validation.py``: the
errors listed in the message, the first one's location as ``param``), as in
vLLM's ``build_app``. Like vLLM, only FastAPI's ``HTTPException`` gets that
body: a route that does not exist, or a method it does not take, keeps
FastAPI's ``{"detail": ...}``.

Differences from upstream, on purpose:

- After a worker dies the server stays up and answers 503 on ``/health`` and
  500 on generation, where vLLM shuts itself down; the cause stays readable.
- ``extra_params[...]`` form fields (a dict spread by the OpenAI SDK) get a
  400 instead of being ignored (:mod:`h3bench.sim.forms`); references are
  never decoded, ``long_video`` is refused and sides stop at 4096 pixels
  (:mod:`h3bench.sim.shape`).
- Every request is served from the Ref2VA partition; the profiler's stage
  keys are always reported, as with ``--enable-diffusion-pipeline-profiler``.
- ``GET /metrics`` carries vLLM-Omni's ``vllm_omni:`` families and the
  process collectors (:mod:`h3bench.sim.metrics`), not vLLM's own ``vllm:*``
  nor the HTTP instrumentator's; a profile can turn it off (404).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import secrets
import shutil
import signal
import socket
import sys
import tempfile
import time
from collections.abc import AsyncIterator, Callable
from http import HTTPStatus
from pathlib import Path
from typing import Any

import uvicorn
from fastapi import FastAPI, HTTPException, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse

from h3bench.errors import ServerStartError
from h3bench.sim.jobs import Simulator
from h3bench.sim.metrics import metrics_router
from h3bench.sim.pool import WorkerPool
from h3bench.sim.profile import SimProfile
from h3bench.sim.profiler import Profiler, profiler_router
from h3bench.sim.routes import SYNC_TIMEOUT_ENV, error_body, router
from h3bench.sim.worker import LOG_FORMAT, WorkerConfig

# The harness names the block a server serves here (h3bench/run/launch.py); the process seed is drawn from it.
BLOCK_ID_ENV = "H3BENCH_BLOCK_ID"
# ... and says when it staged the checkpoint (h3bench/host/staging.py): the weight load is then shorter.
STAGED_ENV = "H3BENCH_WEIGHTS_STAGED"
HOST_FACTOR_ENV = "H3BENCH_SIM_HOST_FACTOR"  # this machine as another host: its speed, per arm (host_factor)

__all__ = ["HOST_FACTOR_ENV", "STAGED_ENV", "create_app", "host_factor", "serve"]

log = logging.getLogger("h3bench.sim")

_SYNC_TIMEOUT_DEFAULT_S = 600.0
_GRACEFUL_SHUTDOWN_S = 5  # uvicorn's wait for in-flight responses after SIGTERM


_MAX_REPORTED_ERRORS = 10  # vLLM's bounds on what a validation error echoes
_MAX_INPUT_CHARS = 200
_MAX_ERROR_CHARS = 1000


async def _http_error(_: Request, exc: Exception) -> JSONResponse:
    assert isinstance(exc, HTTPException)
    body = error_body(exc.status_code, str(exc.detail), error_type=getattr(exc, "error_type", None))
    return JSONResponse(body, status_code=exc.status_code, headers=exc.headers)


def _error_input(value: object) -> object:
    """vLLM's size-bounded ``input`` of one validation error: text as is (cut at 200), containers described."""
    if isinstance(value, (bytes, bytearray)):
        return f"<{type(value).__name__} of {len(value)} bytes>"
    if isinstance(value, (list, tuple, set, frozenset, dict)):
        return f"<{type(value).__name__} of {len(value)} items>"
    text = value if isinstance(value, str) else str(value)
    return text[:_MAX_INPUT_CHARS] + "...[truncated]" if len(text) > _MAX_INPUT_CHARS else text


def _format_error(error: dict[str, object]) -> str:
    shown = dict(error)
    if "input" in shown:
        shown["input"] = _error_input(shown["input"])
    loc = shown.get("loc")
    if isinstance(loc, (tuple, list)):
        shown["loc"] = ".".join(map(str, loc))
    text = str(shown)
    return text[:_MAX_ERROR_CHARS] + "...[truncated]" if len(text) > _MAX_ERROR_CHARS else text


async def _validation_error(_: Request, exc: Exception) -> JSONResponse:
    """vLLM's answer to a request that FastAPI refused: every error in the message, the first one's location as param."""
    assert isinstance(exc, RequestValidationError)
    errors = list(exc.errors())
    if errors:
        label = "error" if len(errors) == 1 else "errors"
        shown = errors[:_MAX_REPORTED_ERRORS]
        message = f"{len(errors)} validation {label}:\n" + "".join(f"  {_format_error(e)}\n" for e in shown)
        if len(errors) > len(shown):
            message += f"  ...and {len(errors) - len(shown)} more {label}\n"
        message = message.rstrip()
    else:
        message = "Validation error"
    loc = errors[0].get("loc") if errors else None
    param = ".".join(map(str, loc)) if loc else None
    return JSONResponse(error_body(HTTPStatus.BAD_REQUEST, message, param=param), status_code=HTTPStatus.BAD_REQUEST)


def create_app(
    profile: SimProfile, pool: WorkerPool, storage: Path, *, process_seed: int, sync_timeout_s: float,
    profiler_dir: Path | None = None,
) -> FastAPI:
    """The FastAPI app over a started :class:`WorkerPool`; outputs live in ``storage``.

    With ``profiler_dir`` (``--profiler-config``) the profiler routes exist, as upstream's do only then.
    """
    simulator = Simulator(profile, pool, storage, process_seed=process_seed, sync_timeout_s=sync_timeout_s)
    if profiler_dir is not None:
        simulator.engine.profiler = Profiler(profiler_dir)

    @contextlib.asynccontextmanager
    async def lifespan(_: FastAPI) -> AsyncIterator[None]:
        yield
        if profile.shutdown_delay_s:
            log.warning("shutdown handler: sleeping %g s (injected slow shutdown)", profile.shutdown_delay_s)
            await asyncio.sleep(profile.shutdown_delay_s)
        simulator.cancel_all()

    app = FastAPI(title="h3bench vLLM-Omni simulator", lifespan=lifespan)
    app.state.simulator = simulator
    app.add_exception_handler(HTTPException, _http_error)
    app.add_exception_handler(RequestValidationError, _validation_error)
    app.include_router(router)
    if profile.metrics_endpoint:  # upstream always mounts it (vLLM's build_app); off: a server without /metrics
        app.include_router(metrics_router)
    if simulator.engine.profiler is not None:
        log.warning("Profiler endpoints are enabled (traces in %s)", profiler_dir)
        app.state.profiler = simulator.engine.profiler
        app.include_router(profiler_router)
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
    text = os.environ.get(SYNC_TIMEOUT_ENV)
    if not text:
        return _SYNC_TIMEOUT_DEFAULT_S
    try:
        return float(text)
    except ValueError:
        log.warning("ignoring %s=%r: not a number of seconds", SYNC_TIMEOUT_ENV, text)
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


def host_factor(text: str, arm: str) -> float:
    """The factor ``$H3BENCH_SIM_HOST_FACTOR`` gives ``arm``: ``1.05`` for every arm, or ``baseline=1.05,clean=0.9``.

    How a test makes one machine several hosts: each shard's simulator runs
    at its host's speed, or gives one arm an effect that differs by host. An
    arm the text does not name runs at 1.
    """
    text = text.strip()
    if not text:
        return 1.0
    try:
        if "=" not in text:
            factor = float(text)
        else:
            named = dict(part.split("=", 1) for part in text.split(","))
            factor = float(named.get(arm, 1.0))
    except ValueError:
        raise ValueError(f"${HOST_FACTOR_ENV}={text!r}: write a factor (1.05) or arm=factor pairs") from None
    if not factor > 0:
        raise ValueError(f"${HOST_FACTOR_ENV}={text!r}: a factor must be positive")
    return factor


def _on_this_host(profile: SimProfile, block_id: str) -> SimProfile:
    """The profile at this host's speed (``$H3BENCH_SIM_HOST_FACTOR``); the arm is the block id's last part."""
    factor = host_factor(os.environ.get(HOST_FACTOR_ENV, ""), block_id.rpartition("-")[2])
    if factor == 1.0:
        return profile
    log.info("host factor %g for block %s", factor, block_id or "-")
    return profile.model_copy(update={"time_scale": profile.time_scale * factor})


def serve(host: str, port: int, profile: SimProfile, *, profiler_dir: Path | None = None) -> int:
    """Run the simulator until SIGTERM or SIGINT; return the process's exit code.

    Binds first (so a taken port fails fast, as vLLM does), spawns and waits
    for the workers, then serves. Exit codes: 0 after a signal, 1 when the
    port is taken or a worker fails at startup. If a worker survives the stop
    (it ignored SIGTERM), the process leaves it running and exits at once.
    """
    logging.basicConfig(level=logging.INFO, format=LOG_FORMAT, stream=sys.stderr, force=True)
    block_id = os.environ.get(BLOCK_ID_ENV, "")
    profile = _on_this_host(profile, block_id)
    fixed = profile.seed_for_block(block_id)
    process_seed = fixed if fixed is not None else secrets.randbits(63)
    log.info(
        "starting h3bench vLLM-Omni simulator: model %s, %d worker(s), time_scale %g, process seed %d (%s), block %s",
        profile.model, profile.workers, profile.time_scale, process_seed,
        "drawn" if fixed is None else "fixed", block_id or "-",
    )
    try:
        sock = _bind(host, port)
    except OSError as exc:
        log.error("cannot listen on %s:%d: %s", host, port, exc.strerror or exc)
        return 1
    storage = Path(tempfile.mkdtemp(prefix="h3bench-sim-"))
    perturbation = profile.perturbation(process_seed)
    load_s = profile.load_s * profile.time_scale
    if staged := os.environ.get(STAGED_ENV):
        log.info("weights staged (%s): loading %.3f s instead of %.3f s", staged, load_s * profile.staged_load_share,
                 load_s)
        load_s *= profile.staged_load_share
    last = profile.workers - 1
    pool = WorkerPool(
        [
            WorkerConfig(
                rank=rank,
                load_s=load_s,
                compile=profile.compile,
                compile_s=profile.compile_s * profile.time_scale,
                weights_gib=profile.weights_gib,
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
        pool.start(timeout=(profile.load_s + profile.compile_s) * profile.time_scale + 120.0)
        app = create_app(profile, pool, storage, process_seed=process_seed, sync_timeout_s=_sync_timeout(),
                         profiler_dir=profiler_dir)
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
