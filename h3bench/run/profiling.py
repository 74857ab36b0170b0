"""Profiling on a marked, unmeasured request (``protocol.profile = true``).

vLLM-Omni exposes ``POST /start_profile`` and ``POST /stop_profile`` only
when a stage has a profiler configuration (``entrypoints/openai/api_server.py``,
``entrypoints/serve/profile/utils.py``); the configuration is vLLM's
``--profiler-config`` (``vllm/config/profiler.py``: ``torch_profiler_dir`` is
required for the torch profiler; the old ``VLLM_TORCH_PROFILER_DIR`` variable
is deprecated and not read by the 0.30.0 release). So, with profiling on,
every server of every arm is started with :func:`server_args`: the same flags
for both arms, and the profiler itself runs only between the two calls.

In the first block of each arm at each duration, after the measured and
audit requests, one more request runs between the two calls. It is recorded
with ``kind`` and ``phase`` ``profile`` in ``samples.jsonl``, so it never
enters a statistic or the audit; the trace files the server wrote are copied
into the bundle (``profiles/<block>/...``) with their SHA-256 and size. A
server without the routes (404) is noted in that record; it does not fail
the block.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

import httpx

from h3bench.course.cases import Block
from h3bench.errors import H3BenchError

if TYPE_CHECKING:
    from h3bench.evidence import Bundle
    from h3bench.run.client import VideoClient

__all__ = ["PROFILE", "profiled_blocks", "profiled_request", "server_args"]

PROFILE = "profile"
_TIMEOUT_S = 120.0  # stopping writes the traces; on an NPU that can take a while


def server_args(directory: Path) -> list[str]:
    """vLLM's ``--profiler-config`` for the torch profiler writing into ``directory``."""
    return ["--profiler-config", json.dumps({"profiler": "torch", "torch_profiler_dir": str(directory)})]


def profiled_blocks(blocks: tuple[Block, ...]) -> set[str]:
    """The ids of the first block of each arm at each duration, in schedule order."""
    first: dict[tuple[float, str], str] = {}
    for block in blocks:
        first.setdefault((block.duration, block.arm), block.id)
    return set(first.values())


def _call(client: VideoClient, path: str) -> tuple[int | None, str]:
    try:
        response = client.control(path, timeout=_TIMEOUT_S)
    except httpx.HTTPError as exc:
        return None, f"{type(exc).__name__}: {exc}"
    return response.status_code, response.text[:300]


def _store_traces(bundle: Bundle, directory: Path, block: Block) -> list[dict[str, Any]]:
    stored = []
    for path in sorted(p for p in directory.rglob("*") if p.is_file()):
        rel = path.relative_to(directory).as_posix()
        relpath, digest = bundle.store_profile(path, f"{block.id}/{rel}")
        stored.append({"path": relpath, **digest})
    return stored


def profiled_request(
    client: VideoClient, send: Callable[[], None], *, bundle: Bundle, directory: Path, block: Block,
) -> dict[str, Any]:
    """Run ``send`` (one request) between start and stop; what its sample record adds.

    ``profiler`` says what the server answered, ``traces`` lists the stored
    files. A request error is raised as for any request. A server without
    profiling is a note, and the request is not sent (on an NPU it would cost
    a whole generation for nothing).
    """
    status, body = _call(client, "/start_profile")
    if status != 200:
        why = ("the server has no profiler routes (404): it was not started with --profiler-config"
               if status == 404 else f"POST /start_profile answered {status}: {body}")
        return {"profiler": {"supported": False, "started": False, "note": why}, "traces": []}
    try:
        send()
    finally:
        status, body = _call(client, "/stop_profile")
    note = "traces written" if status == 200 else f"POST /stop_profile answered {status}: {body}"
    try:
        traces = _store_traces(bundle, directory, block) if directory.is_dir() else []
    except H3BenchError as exc:
        traces, note = [], f"{note}; the traces could not be stored: {exc}"
    if not traces:
        note += f"; no trace files in {directory}"
    return {"profiler": {"supported": True, "started": True, "note": note}, "traces": traces}
