"""vLLM-Omni's real ``/v1/videos`` serving code with a stand-in H3 engine, as a server process.

Run inside the conformance environment (``./dev conformance`` builds it;
:mod:`conformance.serve` launches this module with that
environment's Python)::

    python -m conformance.upstream_app --host 127.0.0.1 --port 8000 --time-scale 0.001

The app is assembled from upstream's own parts the way
``vllm_omni.entrypoints.openai.api_server.omni_run_server_worker`` and
``omni_init_app_state`` assemble it in pure-diffusion mode, minus vLLM's
``build_app`` (which needs a GPU to infer the device type):

- a ``FastAPI()`` with upstream's ``router`` and ``profiler_router``;
- vLLM's exception handlers (``vllm.entrypoints.serve.exception_handling.register.init_exception_handler``)
  and vLLM-Omni's (``_register_omni_exception_handlers``), in that order, as
  ``build_app`` and then ``omni_run_server_worker`` register them;
- ``app.state``: ``args`` (``log_error_stack``), ``api_server_count = 1``,
  ``engine_client`` and ``diffusion_engine`` (the stand-in),
  ``stage_configs``, ``openai_serving_models`` (upstream's
  ``_DiffusionServingModels``), ``openai_serving_video =
  OmniOpenAIServingVideo.for_diffusion(...)`` and ``server`` (uvicorn's,
  which ``terminate_if_errored`` reads);
- upstream's storage manager, started in the lifespan, on a fresh directory
  (``VLLM_OMNI_SERVER_STORAGE__PATH``) removed at exit.

The stand-in engine (:class:`StandInEngine`) has the seam upstream's serving
layer calls: ``stage_configs`` (one diffusion stage whose final output is
video), ``od_config.model_class_name = "MiniMaxH3Pipeline"`` (which switches
on H3's reference-upload rules), ``default_sampling_params_list``, and the
async ``generate(prompt=, request_id=, sampling_params_list=)``, which first
yields upstream's "started" output when the serving layer asks for the
request lifecycle, then one ``OmniRequestOutput`` whose
``multimodal_output["video"]`` is the finished MP4's bytes (upstream sends
them out unchanged and reads the frame count from them), with
``stage_durations`` (the profiler's keys, and the queue wait and generation
time that ``AsyncOmni`` merges in, ``entrypoints/omni_base.py``) and
``peak_memory_mb``. The work is
:func:`conformance.standin.run_engine_request`, run in a thread. A
request H3 refuses raises ``OmniClientError`` (what upstream's engine client
raises for a client error of the pipeline), an out-of-memory raises
``EngineGenerateError`` (what it raises for any other failure). ``abort``,
``check_health``, ``start_profile`` and ``stop_profile`` complete the seam;
the profiler is the simulator's (:class:`h3bench.sim.profiler.Profiler`).

Nothing of upstream is copied: every upstream name above is imported from
the installed ``vllm`` and ``vllm-omni`` wheels.
"""

# vLLM and vLLM-Omni exist only in the conformance environment, not where h3bench is type-checked.
# mypy: disable-error-code="import-not-found"

from __future__ import annotations

import argparse
import asyncio
import contextlib
import hashlib
import json
import os
import secrets
import shutil
import signal
import socket
import sys
import tempfile
import threading
import time
from collections.abc import AsyncIterator
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import numpy as np

from conformance.standin import (
    EngineInputs,
    H3Crash,
    H3Refusal,
    StandInSettings,
    file_digest,
    run_engine_request,
)
from h3bench.h3 import PIPELINE_TIMING_KEYS

__all__ = ["MODEL_CLASS", "StandInEngine", "build_app", "main"]

MODEL_CLASS = "MiniMaxH3Pipeline"
STORAGE_ENV = "VLLM_OMNI_SERVER_STORAGE__PATH"


def _references(prompt: dict[str, Any]) -> tuple[int, int, int, tuple[str, ...]]:
    """Counts of image, video and audio references in upstream's prompt, and one digest each.

    Upstream hands videos and audios as persisted files (paths) and images as
    PIL images; URL references are downloaded or decoded first.
    """
    media = prompt.get("multi_modal_data") or {}

    def items(value: Any) -> list[Any]:
        if value is None:
            return []
        return list(value) if isinstance(value, (list, tuple)) else [value]

    images, videos, audios = items(media.get("image")), items(media.get("video")), items(media.get("audio"))
    digests: list[str] = []
    for image in images:
        digests.append("image:" + hashlib.sha256(image.tobytes()).hexdigest())
    for kind, values in (("video", videos), ("audio", audios)):
        for value in values:
            if isinstance(value, (str, os.PathLike)) and os.path.exists(value):
                digests.append(file_digest(value, kind))
            else:  # decoded frames (a video URL reference): counted, not hashed
                digests.append(f"{kind}:decoded")
    # A reference video given as decoded frames is one video, not one per frame.
    video_count = 1 if videos and not isinstance(videos[0], (str, os.PathLike)) else len(videos)
    return len(images), video_count, len(audios), tuple(digests)


class StandInEngine:
    """The engine seam of vLLM-Omni's video serving layer, answered with the simulator's content."""

    def __init__(self, settings: StandInSettings, *, profiler_dir: Path | None = None) -> None:
        from vllm_omni.inputs.data import OmniDiffusionSamplingParams

        from h3bench.sim.profiler import Profiler

        self.settings = settings
        self.stage_configs = [{"stage_type": "diffusion", "final_output": True, "final_output_type": "video",
                               "engine_args": {"model_class_name": MODEL_CLASS}}]
        self.od_config = SimpleNamespace(model_class_name=MODEL_CLASS, model=settings.model, revision=None)
        self.default_sampling_params_list = [OmniDiffusionSamplingParams()]
        self.errored = False
        self.is_running = True
        self.profiler = Profiler(profiler_dir or Path(tempfile.gettempdir()) / "h3bench-upstream-profiles")
        self._rng = np.random.default_rng(settings.process_seed)
        self._lock = asyncio.Lock()  # one request at a time, as H3 runs one per diffusion batch
        self._cancels: dict[str, threading.Event] = {}

    def _inputs(self, prompt: dict[str, Any], params: Any) -> EngineInputs:
        images, videos, audios, digests = _references(prompt)
        return EngineInputs(
            prompt=str(prompt.get("prompt", "")), seed=params.seed, width=params.width, height=params.height,
            num_frames=params.num_frames, fps=params.fps, num_inference_steps=params.num_inference_steps,
            extra_args=dict(params.extra_args or {}), images=images, videos=videos, audios=audios,
            reference_digests=digests,
        )

    async def generate(self, prompt: Any, request_id: str, sampling_params_list: list[Any]) -> AsyncIterator[Any]:
        from vllm.v1.engine.exceptions import EngineGenerateError
        from vllm_omni.diffusion.data import DIFFUSION_REQUEST_LIFECYCLE_KEY, DIFFUSION_REQUEST_STARTED
        from vllm_omni.errors import OmniClientError
        from vllm_omni.outputs import OmniRequestOutput

        params = sampling_params_list[0]
        inputs = self._inputs(prompt if isinstance(prompt, dict) else {"prompt": str(prompt)}, params)
        cancel = threading.Event()
        self._cancels[request_id] = cancel
        entered = time.perf_counter()
        try:
            async with self._lock:
                waited_ms = (time.perf_counter() - entered) * 1000.0
                if getattr(params, "emit_request_lifecycle", False):
                    yield OmniRequestOutput.from_diffusion(
                        request_id=request_id, images=[], final_output_type="video", finished=False,
                        custom_output={DIFFUSION_REQUEST_LIFECYCLE_KEY: DIFFUSION_REQUEST_STARTED})
                started, clock = time.time(), time.perf_counter()
                try:
                    output = await asyncio.to_thread(run_engine_request, inputs, self.settings, self._rng, cancel=cancel)
                except H3Refusal as exc:
                    _note(f"request {request_id}: refused by H3: {exc.message}")
                    raise OmniClientError(exc.message, status_code=exc.status_code) from None
                except H3Crash as exc:
                    _note(f"request {request_id}: failed in the pipeline: {exc}")
                    raise EngineGenerateError(str(exc)) from None
                gen_ms = (time.perf_counter() - clock) * 1000.0
            self.profiler.record(request_id, started, output.stage_durations)
            _note(f"request {request_id}: rendered {output.frames} frames at {output.width}x{output.height}, "
                  f"{output.audio_samples} audio samples")
            # What AsyncOmni merges into every output's stage durations (entrypoints/omni_base.py), which this
            # engine client stands in for: the queue wait and the stage's generation time, in milliseconds.
            timings = dict(zip(PIPELINE_TIMING_KEYS, (waited_ms, gen_ms), strict=True))
            yield OmniRequestOutput.from_diffusion(
                request_id=request_id, images=[], final_output_type="video",
                multimodal_output={"video": output.mp4, "fps": 24.0},
                stage_durations={**output.stage_durations, **timings}, peak_memory_mb=output.peak_memory_mb)
        finally:
            self._cancels.pop(request_id, None)

    async def abort(self, request_id: str | list[str], timeout: float | None = None) -> None:
        for rid in [request_id] if isinstance(request_id, str) else request_id:
            if (event := self._cancels.get(rid)) is not None:
                event.set()

    async def check_health(self) -> None:
        if self.errored:
            from vllm.v1.engine.exceptions import EngineDeadError

            raise EngineDeadError()

    async def start_profile(self, stages: Any = None) -> None:
        self.profiler.start()

    async def stop_profile(self, stages: Any = None) -> None:
        self.profiler.stop()


def build_app(engine: StandInEngine, *, log_error_stack: bool = False) -> Any:
    """Upstream's FastAPI app for ``engine`` (see the module docstring for what it is made of)."""
    from fastapi import FastAPI
    from vllm.entrypoints.openai.models.protocol import BaseModelPath
    from vllm.entrypoints.serve.exception_handling.register import init_exception_handler
    from vllm_omni.entrypoints.openai.api_server import profiler_router, router
    from vllm_omni.entrypoints.openai.models.serving import _DiffusionServingModels
    from vllm_omni.entrypoints.openai.serving_video import OmniOpenAIServingVideo
    from vllm_omni.entrypoints.openai.storage import STORAGE_MANAGER
    from vllm_omni.entrypoints.serve.utils.errors import _register_omni_exception_handlers

    model = engine.settings.model

    @contextlib.asynccontextmanager
    async def lifespan(app: Any) -> AsyncIterator[None]:
        await STORAGE_MANAGER.start()
        try:
            yield
        finally:
            await STORAGE_MANAGER.stop()
            app.state.openai_serving_video.shutdown()

    app = FastAPI(lifespan=lifespan)
    app.include_router(router)
    app.include_router(profiler_router)
    init_exception_handler(app)
    _register_omni_exception_handlers(app)
    state = app.state
    state.args = SimpleNamespace(log_error_stack=log_error_stack, model=model, served_model_name=[model])
    state.api_server_count = 1
    state.engine_client = engine
    state.diffusion_engine = engine
    state.stage_configs = engine.stage_configs
    state.vllm_config = None
    state.openai_serving_models = _DiffusionServingModels([BaseModelPath(name=model, model_path=model)])
    state.openai_serving_video = OmniOpenAIServingVideo.for_diffusion(
        diffusion_engine=engine, model_name=model, stage_configs=engine.stage_configs)
    return app


def _note(message: str) -> None:
    """One line of this module's own on stderr: vLLM's logging setup disables loggers made before it, more than once."""
    stamp = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime())
    print(f"{stamp} INFO [upstream-app pid={os.getpid()}] {message}", file=sys.stderr, flush=True)


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m conformance.upstream_app",
                                     description="vLLM-Omni's /v1/videos serving code with a stand-in H3 engine")
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=8000)
    parser.add_argument("--model", default=StandInSettings.model)
    parser.add_argument("--time-scale", type=float, default=StandInSettings.time_scale,
                        help="wall seconds per modelled second of the simulator's stage model (default: %(default)s)")
    parser.add_argument("--jitter-cv", type=float, default=StandInSettings.jitter_cv)
    parser.add_argument("--run-to-run-noise", type=float, default=StandInSettings.run_to_run_noise)
    parser.add_argument("--process-seed", type=int, default=None, help="default: drawn, and logged")
    parser.add_argument("--profiler-dir", type=Path, default=None)
    parser.add_argument("--log-error-stack", action="store_true")
    return parser


def main(argv: list[str] | None = None) -> int:
    """Serve until SIGTERM or SIGINT; exit 0 then, 1 when the port is taken, 2 for a bad command line."""
    args = _parser().parse_args(argv)
    seed = args.process_seed if args.process_seed is not None else secrets.randbits(63)
    try:
        settings = StandInSettings(model=args.model, time_scale=args.time_scale, jitter_cv=args.jitter_cv,
                                   run_to_run_noise=args.run_to_run_noise, process_seed=seed)
    except ValueError as exc:
        print(f"upstream_app: error: {exc}", file=sys.stderr)
        return 2
    storage = Path(tempfile.mkdtemp(prefix="h3bench-upstream-storage-"))
    os.environ[STORAGE_ENV] = str(storage)  # read when vllm_omni's storage module is first imported
    try:
        family = socket.AF_INET6 if ":" in args.host else socket.AF_INET
        sock = socket.socket(family, socket.SOCK_STREAM, socket.IPPROTO_TCP)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind((args.host, args.port))
        except OSError as exc:
            _note(f"cannot listen on {args.host}:{args.port}: {exc.strerror or exc}")
            sock.close()
            return 1
        return _serve(sock, settings, args)
    finally:
        shutil.rmtree(storage, ignore_errors=True)


def _serve(sock: socket.socket, settings: StandInSettings, args: argparse.Namespace) -> int:
    import uvicorn
    import vllm
    import vllm_omni

    _note(f"starting vLLM-Omni {vllm_omni.__version__} (vLLM {vllm.__version__}) /v1/videos with the h3bench stand-in "
          f"engine: model {settings.model}, time_scale {settings.time_scale:g}, process seed {settings.process_seed}")
    engine = StandInEngine(settings, profiler_dir=args.profiler_dir)
    app = build_app(engine, log_error_stack=args.log_error_stack)
    config = uvicorn.Config(app, log_config=None, access_log=False, lifespan="on", timeout_graceful_shutdown=5)
    server = uvicorn.Server(config)
    app.state.server = server

    async def run() -> None:
        serving = asyncio.create_task(server.serve(sockets=[sock]))
        while not server.started and not serving.done():
            await asyncio.sleep(0.005)
        if server.started:
            host, port = sock.getsockname()[:2]
            versions = json.dumps({"vllm": vllm.__version__, "vllm_omni": vllm_omni.__version__})
            _note(f"ready on http://{host}:{port} (pid {os.getpid()}, versions {versions})")
        await serving

    def stop(signum: int, _frame: object) -> None:
        _note(f"{signal.Signals(signum).name} received; stopping")
        server.should_exit = True

    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, stop)
    asyncio.run(run())
    sock.close()
    _note("stopped")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
