"""The simulator's profiler: ``POST /start_profile`` and ``POST /stop_profile``, and a Chrome trace of the stages.

Upstream registers both routes only when the server was started with a
profiler configuration (vLLM's ``--profiler-config``, whose
``torch_profiler_dir`` says where traces go; vLLM-Omni's
``entrypoints/openai/api_server.py`` and ``entrypoints/serve/profile/utils.py``);
without one they do not exist and the server answers 404. The simulator does
the same: :func:`profiler_router` is included only with a directory.

A second start, or a stop with nothing running, is answered ``SUCCESS`` and
ignored, as upstream's profiler wrapper ignores them (``vllm/profiler/wrapper.py``,
``start`` and ``stop``; seen by the real-engine conformance lane).

While profiling, every completed request adds its stages as spans; stopping
writes them as a Chrome trace (``{"traceEvents": [...]}`` with complete
``"ph": "X"`` events in microseconds, which Perfetto and chrome://tracing
open) named ``trace_rank0.json`` like the CUDA wrapper's output, in a new
directory per profiling session.
"""

from __future__ import annotations

import json
import logging
import os
import time
from http import HTTPStatus
from pathlib import Path
from typing import Any

from fastapi import APIRouter, HTTPException, Request
from fastapi.responses import JSONResponse

__all__ = ["TRACE_NAME", "Profiler", "parse_profiler_config", "profiler_router", "stage_spans"]

TRACE_NAME = "trace_rank0.json"
log = logging.getLogger("h3bench.sim")


def parse_profiler_config(text: str) -> Path:
    """The trace directory of a ``--profiler-config`` JSON, with vLLM's own rule for the torch profiler."""
    try:
        config = json.loads(text)
    except json.JSONDecodeError as exc:
        raise ValueError(f"--profiler-config is not JSON: {exc}") from None
    if not isinstance(config, dict) or config.get("profiler") != "torch":
        raise ValueError(f"--profiler-config: only {{\"profiler\": \"torch\", ...}} is simulated, got {text!r}")
    directory = config.get("torch_profiler_dir")
    if not isinstance(directory, str) or not directory:
        raise ValueError("torch_profiler_dir must be set when profiler is 'torch'")
    return Path(directory).absolute()


def stage_spans(request_id: str, start_us: float, stages: dict[str, float]) -> list[dict[str, Any]]:
    """One request's stages, in the order they ran, as complete events laid end to end from ``start_us``."""
    events, at = [], start_us
    for name, seconds in stages.items():
        events.append({"name": name.rpartition(".")[2], "cat": "stage", "ph": "X", "ts": round(at, 3),
                       "dur": round(seconds * 1e6, 3), "pid": os.getpid(), "tid": 0,
                       "args": {"request_id": request_id, "key": name}})
        at += seconds * 1e6
    return events


class Profiler:
    """One server's profiling sessions: spans gathered between start and stop, written at stop."""

    def __init__(self, directory: Path) -> None:
        self.directory = directory
        self.events: list[dict[str, Any]] | None = None  # None: not profiling
        self.epoch = 0

    def record(self, request_id: str, started: float, stages: dict[str, float]) -> None:
        """A completed request's stages (``started``: its wall-clock start, seconds since the epoch)."""
        if self.events is not None:
            self.events += stage_spans(request_id, started * 1e6, stages)

    def start(self) -> None:
        """Start a session; a start while one runs is ignored, as upstream's profiler wrapper does."""
        if self.events is None:
            self.events = []

    def stop(self) -> Path | None:
        """End the session and write its trace; a stop without one is ignored (None), as upstream's is."""
        if self.events is None:
            return None
        stamp = time.strftime("%Y%m%d-%H%M%S", time.gmtime())
        folder = self.directory / f"{stamp}_stage_0_rep_0_diffusion_{self.epoch}"
        folder.mkdir(parents=True, exist_ok=True)
        path = folder / TRACE_NAME
        document = {"traceEvents": self.events, "displayTimeUnit": "ms",
                    "otherData": {"producer": "h3bench vLLM-Omni simulator"}}
        path.write_text(json.dumps(document), encoding="utf-8")
        self.events, self.epoch = None, self.epoch + 1
        log.info("profiler stopped; trace written to %s", path)
        return path


profiler_router = APIRouter()


def _answer(request: Request, action: str) -> JSONResponse:
    profiler: Profiler = request.app.state.profiler
    try:
        profiler.start() if action == "start" else profiler.stop()
    except OSError as exc:  # the trace could not be written
        # Upstream raises HTTPException, which vLLM's handler answers with its ErrorResponse.
        raise HTTPException(HTTPStatus.INTERNAL_SERVER_ERROR, f"Failed to {action} profiler: {exc}") from exc
    return JSONResponse({"status": "SUCCESS"})


@profiler_router.post("/start_profile")
async def start_profile(request: Request) -> JSONResponse:
    return _answer(request, "start")


@profiler_router.post("/stop_profile")
async def stop_profile(request: Request) -> JSONResponse:
    return _answer(request, "stop")
