"""The /v1/videos client: one Ref2VA generation per call, timed from upload start to the last byte.

It speaks vLLM-Omni's video API (entrypoints/openai/api_server.py,
video/generation/helpers.py, protocol/videos.py):

- ``POST /v1/videos/sync`` takes the multipart form and answers with the MP4
  bytes plus ``X-Request-Id``, ``X-Model``, ``X-Inference-Time-S``,
  ``X-Stage-Durations`` (compact JSON) and ``X-Peak-Memory-MB``;
- ``POST /v1/videos`` creates a job, ``GET /v1/videos/{id}`` reports it, and
  ``GET /v1/videos/{id}/content`` returns the MP4 once it has completed.

The form is the one of upstream's Ref2VA accuracy test
(tests/e2e/accuracy/minimax_h3/test_minimax_h3_i2va_ref2va_similarity.py):
width, height, fps, num_inference_steps, flow_shift, seed, and the H3 fields in
``extra_params``; the reference video (video/mp4) and audio (audio/mpeg) go as
two ``input_references`` files.

E2E is measured here, not taken from the server: ``time.perf_counter`` from
the start of the upload to the last byte of the MP4 written to disk. The
async path polls every 5 ms at first, growing to 100 ms, so its E2E is not
quantised to upstream's 2 s polling interval.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import mimetypes
import os
import time
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType
from typing import Any

import httpx

from h3bench.errors import RequestError, UsageError
from h3bench.h3 import mux_and_transfer_s
from h3bench.run.phases import PhaseClock, RequestPhases, job_queue_s
from h3bench.server import localhttp

__all__ = [
    "GenerationRequest",
    "GenerationResult",
    "Reference",
    "VideoClient",
    "parse_stage_durations",
]

_POLL_FIRST_S = 0.005
_POLL_MAX_S = 0.1
_CHUNK = 1 << 20


@dataclass(frozen=True)
class Reference:
    """One reference input file, uploaded as an ``input_references`` part."""

    path: Path
    mime_type: str

    @classmethod
    def from_path(cls, path: str | os.PathLike[str]) -> Reference:
        """Guess the MIME type from the suffix (``.mp4`` → video/mp4, ``.mp3`` → audio/mpeg)."""
        mime, _ = mimetypes.guess_type(str(path))
        if mime is None:
            raise UsageError(f"cannot tell the MIME type of reference {path}; give it explicitly")
        return cls(Path(path), mime)


@dataclass(frozen=True)
class GenerationRequest:
    """One Ref2VA request; ``form_fields`` renders it as upstream's form."""

    prompt: str
    duration_s: float = 5.0
    size: str = "1344x768"
    fps: int = 24
    seed: int = 0
    num_inference_steps: int = 50
    flow_shift: float = 12.0
    audio_flow_shift: float = 3.0
    references: tuple[Reference, ...] = ()
    task: str = "ref2va"
    # More form fields, and more extra_params keys, as (name, value) pairs.
    extra_fields: tuple[tuple[str, str], ...] = ()
    extra_params: tuple[tuple[str, Any], ...] = ()

    def __post_init__(self) -> None:
        self.width_height()  # validates size early

    def width_height(self) -> tuple[int, int]:
        width, sep, height = self.size.partition("x")
        if not (sep and width.isdigit() and height.isdigit() and int(width) > 0 and int(height) > 0):
            raise UsageError(f"size must look like '1344x768', got {self.size!r}")
        return int(width), int(height)

    def form_fields(self, model: str | None = None) -> dict[str, str]:
        width, height = self.width_height()
        params: dict[str, Any] = {
            "task": self.task,
            "duration": float(self.duration_s),
            "aspect_ratio": "auto",
            "audio_flow_shift": float(self.audio_flow_shift),
        }
        params.update(self.extra_params)
        fields = {
            "prompt": self.prompt,
            "width": str(width),
            "height": str(height),
            "fps": str(self.fps),
            "num_inference_steps": str(self.num_inference_steps),
            "flow_shift": str(float(self.flow_shift)),
            "seed": str(self.seed),
            "extra_params": json.dumps(params, separators=(",", ":")),
        }
        if model is not None:
            fields["model"] = model
        fields.update(self.extra_fields)
        return fields


@dataclass(frozen=True)
class GenerationResult:
    """One successful generation. Times in seconds; ``e2e_s`` is measured by the client."""

    mode: str  # "sync" or "async"
    status_code: int
    request_id: str
    model: str | None
    e2e_s: float
    inference_time_s: float | None  # server-reported
    stage_durations: Mapping[str, float]
    peak_memory_mb: float | None
    output_path: Path
    sha256: str
    size_bytes: int
    phases: RequestPhases | None = None  # upload, server wait, download (h3bench.run.phases)

    @property
    def mux_and_transfer_s(self) -> float | None:
        """Derived, not measured: E2E minus the top-level profiler stages (MP4 muxing has no key)."""
        return mux_and_transfer_s(self.e2e_s, self.stage_durations)

    def to_dict(self) -> dict[str, Any]:
        return {
            "mode": self.mode,
            "status_code": self.status_code,
            "request_id": self.request_id,
            "model": self.model,
            "e2e_s": self.e2e_s,
            "inference_time_s": self.inference_time_s,
            "stage_durations": dict(self.stage_durations),
            "peak_memory_mb": self.peak_memory_mb,
            "output_path": str(self.output_path),
            "sha256": self.sha256,
            "size_bytes": self.size_bytes,
            "derived": {"mux_and_transfer_s": self.mux_and_transfer_s},
            "phases": self.phases.to_dict() if self.phases is not None else None,
        }


def parse_stage_durations(value: str | Mapping[str, Any] | None) -> dict[str, float]:
    """Stage durations from the ``X-Stage-Durations`` header (JSON text) or the job JSON (a dict)."""
    if value is None or value == "":
        return {}
    try:
        data = json.loads(value) if isinstance(value, str) else value
        if data is None:
            return {}
        return {str(k): float(v) for k, v in dict(data).items()}
    except (ValueError, TypeError) as exc:
        raise RequestError(f"stage durations are not a JSON object of numbers: {str(value)[:200]!r}") from exc


def _error_detail(response: httpx.Response) -> str:
    """``detail`` (FastAPI HTTPException), ``error.message`` (vLLM ErrorResponse, job JSON), or the text."""
    try:
        body = response.json()
    except ValueError:
        return response.text.strip()[:500]
    if isinstance(body, dict):
        if "detail" in body:
            detail = body["detail"]
            return detail if isinstance(detail, str) else json.dumps(detail)
        error = body.get("error")
        if isinstance(error, dict) and error.get("message"):
            return str(error["message"])
    return json.dumps(body)[:500]


def _float_or_none(value: Any) -> float | None:
    try:
        return None if value is None else float(value)
    except (TypeError, ValueError):
        return None


class VideoClient:
    """A client for one server's /v1/videos API.

    Parameters
    ----------
    base_url
        e.g. ``http://127.0.0.1:8000``.
    model
        Sent as the ``model`` form field when given (the server answers 400 on a mismatch).
    timeout
        Longest wait in seconds for a response (sync) or for the job to finish (async).
    """

    def __init__(self, base_url: str, *, model: str | None = None, timeout: float = 3600.0) -> None:
        self.base_url = base_url.rstrip("/")
        self.model = model
        self.timeout = timeout
        self._http = localhttp.client(base_url=self.base_url, timeout=timeout)


    def control(self, path: str, *, timeout: float) -> httpx.Response:
        """POST with no body to a control route such as ``/start_profile``; transport errors raise httpx's."""
        return self._http.post(path, timeout=timeout)
    def close(self) -> None:
        self._http.close()

    def __enter__(self) -> VideoClient:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    # -- public --------------------------------------------------------------

    def generate_sync(self, request: GenerationRequest, output_path: str | os.PathLike[str]) -> GenerationResult:
        """POST /v1/videos/sync and stream the MP4 to ``output_path``."""
        output = Path(output_path)
        with self._translate("POST /v1/videos/sync"), _open_references(request) as files:
            t0 = time.perf_counter()
            clock = PhaseClock(t0)
            with self._http.stream(
                "POST", "/v1/videos/sync", data=request.form_fields(self.model), files=files,
                extensions={"trace": clock.trace("upload")},
            ) as response:
                _raise_for_status(response)
                sha, size = _save(response, output)
                end = time.perf_counter()
                e2e = end - t0
        headers = response.headers
        return GenerationResult(
            mode="sync",
            status_code=response.status_code,
            request_id=headers.get("x-request-id", ""),
            model=headers.get("x-model"),
            e2e_s=e2e,
            inference_time_s=_float_or_none(headers.get("x-inference-time-s")),
            stage_durations=parse_stage_durations(headers.get("x-stage-durations")),
            peak_memory_mb=_float_or_none(headers.get("x-peak-memory-mb")),
            output_path=output,
            sha256=sha,
            size_bytes=size,
            phases=clock.phases(end, download="upload"),
        )

    def generate_async(
        self,
        request: GenerationRequest,
        output_path: str | os.PathLike[str],
        on_poll: Callable[[dict[str, Any]], None] | None = None,
    ) -> GenerationResult:
        """POST /v1/videos, poll the job until it completes, then stream its content to ``output_path``.

        ``on_poll`` sees the job JSON of every poll (its ``progress`` percentage, for one).
        """
        output = Path(output_path)
        with self._translate("POST /v1/videos"), _open_references(request) as files:
            t0 = time.perf_counter()
            clock = PhaseClock(t0)
            response = self._http.post("/v1/videos", data=request.form_fields(self.model), files=files,
                                       extensions={"trace": clock.trace("upload")})
            _raise_for_status(response)
            job_id = str(response.json()["id"])
        with self._translate(f"GET /v1/videos/{job_id}"):
            job = self._wait_for_job(job_id, deadline=t0 + self.timeout, on_poll=on_poll)
        with self._translate(f"GET /v1/videos/{job_id}/content"):
            with self._http.stream("GET", f"/v1/videos/{job_id}/content",
                                   extensions={"trace": clock.trace("download")}) as response:
                _raise_for_status(response)
                sha, size = _save(response, output)
                end = time.perf_counter()
                e2e = end - t0
        metrics = job.get("metrics") or {}
        return GenerationResult(
            mode="async",
            status_code=response.status_code,
            request_id=job_id,
            model=job.get("model"),
            e2e_s=e2e,
            inference_time_s=_float_or_none(job.get("inference_time_s")),
            stage_durations=parse_stage_durations(job.get("stage_durations") or metrics.get("stage_durations")),
            peak_memory_mb=_float_or_none(job.get("peak_memory_mb") or metrics.get("peak_memory_mb")),
            output_path=output,
            sha256=sha,
            size_bytes=size,
            phases=clock.phases(end, queue=job_queue_s(job)),
        )

    # -- helpers -------------------------------------------------------------

    def _wait_for_job(
        self, job_id: str, *, deadline: float, on_poll: Callable[[dict[str, Any]], None] | None
    ) -> dict[str, Any]:
        delay = _POLL_FIRST_S
        while True:
            response = self._http.get(f"/v1/videos/{job_id}")
            _raise_for_status(response)  # a failed job comes back with its error's status
            job = response.json()
            if on_poll is not None:
                on_poll(job)
            status = job.get("status")
            if status == "completed":
                return job
            if status == "failed":
                error = job.get("error") or {}
                raise RequestError(
                    f"video job {job_id} failed: {error.get('message', 'no message')}",
                    status_code=response.status_code,
                    detail=str(error.get("message", "")),
                )
            if time.perf_counter() >= deadline:
                raise RequestError(f"video job {job_id} did not finish within {self.timeout:g} s (status {status})")
            time.sleep(delay)
            delay = min(delay * 1.5, _POLL_MAX_S)

    @contextlib.contextmanager
    def _translate(self, what: str) -> Iterator[None]:
        """Turn transport failures into RequestError with a message that says what happened."""
        url = self.base_url
        try:
            yield
        except httpx.TimeoutException as exc:
            raise RequestError(f"{what}: no response from {url} within {self.timeout:g} s") from exc
        except httpx.ConnectError as exc:
            raise RequestError(f"{what}: cannot connect to {url} ({exc}); is the server running?") from exc
        except (httpx.RemoteProtocolError, httpx.ReadError, httpx.WriteError) as exc:
            raise RequestError(
                f"{what}: the server at {url} closed the connection during the request; did it crash? ({exc})"
            ) from exc
        except httpx.HTTPError as exc:
            raise RequestError(f"{what} to {url} failed: {exc}") from exc
        except (ValueError, KeyError) as exc:  # JSON that is not a video job
            raise RequestError(f"{what}: unexpected answer from {url}: {exc}") from exc


def _raise_for_status(response: httpx.Response) -> None:
    if response.is_success:
        return
    response.read()
    detail = _error_detail(response)
    raise RequestError(
        f"{response.request.method} {response.request.url.path} returned HTTP {response.status_code}: {detail}",
        status_code=response.status_code,
        detail=detail,
    )


@contextlib.contextmanager
def _open_references(request: GenerationRequest) -> Iterator[list[tuple[str, tuple[str, Any, str]]]]:
    with contextlib.ExitStack() as stack:
        files = []
        for ref in request.references:
            try:
                fh = stack.enter_context(ref.path.open("rb"))
            except OSError as exc:
                raise UsageError(f"cannot read reference {ref.path}: {exc}") from exc
            files.append(("input_references", (ref.path.name, fh, ref.mime_type)))
        yield files


def _save(response: httpx.Response, output: Path) -> tuple[str, int]:
    """Stream the body to ``output`` (via a partial file) and return its SHA-256 and size."""
    partial = output.with_name(output.name + ".part")
    digest = hashlib.sha256()
    size = 0
    try:
        with partial.open("wb") as fh:
            for chunk in response.iter_bytes(_CHUNK):
                digest.update(chunk)
                fh.write(chunk)
                size += len(chunk)
        partial.replace(output)
    finally:
        partial.unlink(missing_ok=True)
    return digest.hexdigest(), size
