"""The differential probe suite: the same requests to upstream's server and to the simulator.

Each probe is a short scenario a client author cares about (a sync
generation, an async job from creation to deletion, a validation error, a
failure inside the engine, the profiler routes ...). It runs against one
:class:`Side` at a time and records every answer under its step name; the
two sides' answers are then compared by :func:`conformance.compare.compare`.

A side has named targets: ``main`` serves every probe, and the failure
probes go to ``fail-sync`` and ``fail-async``. On upstream's side all three
are the same server (its stand-in engine fails when ``extra_params`` asks it
to, :data:`conformance.standin.FAIL_KEY`); on the simulator's side
they are two extra simulators whose failure injection (``fail_request = 1``)
fails their first request, so the suite checks that injection against the
failure upstream's serving code really reports.

Nothing here depends on timing: a probe waits for an async job to finish
before it looks at it, and no probe races a running job.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx

from conformance.answers import Answer, normalize_response
from conformance.standin import FAIL_KEY
from h3bench.errors import RequestError
from h3bench.run.client import GenerationRequest, Reference

__all__ = ["METRICS_PROBE", "PROBES", "Probe", "ProbeInputs", "Side", "probe_names", "run_probes"]

_MIB = 1024 * 1024
TARGETS = ("main", "fail-sync", "fail-async")


@dataclass(frozen=True)
class ProbeInputs:
    """What the probes upload and ask for: the reference files and a small canvas."""

    video: Path
    audio: Path
    size: str = "128x96"
    prompt: str = "A young man in a pink suit holds a black lamb in a sunlit pasture."

    def references(self) -> list[tuple[str, tuple[str, bytes, str]]]:
        """The video and the audio reference as two ``input_references`` parts, as the h3bench client sends them."""
        return [
            ("input_references", (path.name, path.read_bytes(), Reference.from_path(path).mime_type))
            for path in (self.video, self.audio)
        ]

    def client_form(self, **extra_params: Any) -> dict[str, str]:
        """The form h3bench's client sends (:meth:`GenerationRequest.form_fields`), duration 4 s."""
        request = GenerationRequest(prompt=self.prompt, duration_s=4.0, size=self.size, num_inference_steps=4,
                                    extra_params=tuple(extra_params.items()))
        return request.form_fields()


class Side:
    """One server (or set of servers) under probe: named targets and every normalised answer it gave."""

    def __init__(self, name: str, urls: Mapping[str, str], *, timeout: float = 120.0) -> None:
        missing = [target for target in TARGETS if target not in urls]
        if missing:
            raise ValueError(f"side {name}: no URL for target(s) {missing}")
        self.name = name
        self.timeout = timeout
        self._http = {target: httpx.Client(base_url=url, trust_env=False, timeout=timeout) for target, url in urls.items()}
        self.answers: dict[tuple[str, str], Answer] = {}
        self.probe = ""

    def close(self) -> None:
        for http in self._http.values():
            http.close()

    def __enter__(self) -> Side:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def call(self, step: str, method: str, path: str, *, target: str = "main",
             normalize: Callable[[httpx.Response], Answer] = normalize_response, **kwargs: Any) -> httpx.Response:
        """Send one request and record its answer, normalised by ``normalize``, as ``(probe, step)``."""
        key = (self.probe, step)
        if key in self.answers:
            raise ValueError(f"probe {self.probe}: step {step} recorded twice")
        response = self._http[target].request(method, path, **kwargs)
        self.answers[key] = normalize(response)
        return response

    def wait_job(self, step: str, video_id: str, *, target: str = "main") -> httpx.Response:
        """Poll ``GET /v1/videos/{id}`` until the job completes or fails; record only that last answer."""
        deadline = time.monotonic() + self.timeout
        http = self._http[target]
        while True:
            response = http.get(f"/v1/videos/{video_id}")
            status = response.json().get("status") if response.headers.get("content-type", "").startswith(
                "application/json") else None
            if status in ("completed", "failed") or response.status_code == 404:
                break
            if time.monotonic() > deadline:
                raise RequestError(f"{self.name}: job {video_id} did not finish within {self.timeout:g} s (last: {status})")
            time.sleep(0.02)
        self.answers[(self.probe, step)] = normalize_response(response)
        return response


@dataclass(frozen=True)
class Probe:
    """One scenario: a name, what it asks, and the function that runs it on a side."""

    name: str
    question: str
    run: Callable[[Side, ProbeInputs], None]


def _job_id(response: httpx.Response) -> str | None:
    if response.status_code != 200:
        return None
    return str(response.json()["id"])


def _async_lifecycle(side: Side, inputs: ProbeInputs, data: dict[str, str], files: Any, *, target: str = "main") -> None:
    """Create a job, wait for it, then read it, its content, the list, delete it and look again."""
    job = _job_id(side.call("create", "POST", "/v1/videos", target=target, data=data, files=files))
    if job is None:
        return
    side.wait_job("finished", job, target=target)
    side.call("content", "GET", f"/v1/videos/{job}/content", target=target)
    side.call("delete", "DELETE", f"/v1/videos/{job}", target=target)
    side.call("after-delete", "GET", f"/v1/videos/{job}", target=target)
    side.call("content-after-delete", "GET", f"/v1/videos/{job}/content", target=target)


def _form(inputs: ProbeInputs, **fields: str | None) -> dict[str, str]:
    """A minimal valid form with the canvas and a 4 s duration; ``fields`` override it (None removes a field)."""
    data: dict[str, str | None] = {"prompt": inputs.prompt, "size": inputs.size, "seed": "0",
                                   "extra_params": json.dumps({"task": "ref2va", "duration": 4.0})}
    data.update(fields)
    return {k: v for k, v in data.items() if v is not None}


def _health(side: Side, inputs: ProbeInputs) -> None:
    side.call("get", "GET", "/health")


def _models(side: Side, inputs: ProbeInputs) -> None:
    side.call("get", "GET", "/v1/models")


def _unknown_route(side: Side, inputs: ProbeInputs) -> None:
    side.call("get", "GET", "/v1/no-such-route")


def _wrong_method(side: Side, inputs: ProbeInputs) -> None:
    side.call("put", "PUT", "/v1/videos", data={"prompt": "x"})


def _sync_client(side: Side, inputs: ProbeInputs) -> None:
    side.call("post", "POST", "/v1/videos/sync", data=inputs.client_form(), files=inputs.references())


def _async_client(side: Side, inputs: ProbeInputs) -> None:
    job = _job_id(side.call("create", "POST", "/v1/videos", data=inputs.client_form(), files=inputs.references()))
    if job is None:
        return
    side.wait_job("finished", job)
    side.call("retrieve", "GET", f"/v1/videos/{job}")
    side.call("list-newest", "GET", "/v1/videos", params={"limit": 1})
    side.call("content", "GET", f"/v1/videos/{job}/content")
    side.call("delete", "DELETE", f"/v1/videos/{job}")
    side.call("after-delete", "GET", f"/v1/videos/{job}")
    side.call("content-after-delete", "GET", f"/v1/videos/{job}/content")
    side.call("delete-again", "DELETE", f"/v1/videos/{job}")


def _async_seconds(side: Side, inputs: ProbeInputs) -> None:
    _async_lifecycle(side, inputs, _form(inputs, seconds="5", extra_params=None), inputs.references())


def _unknown_job(side: Side, inputs: ProbeInputs) -> None:
    missing = "video_gen_" + "0" * 32
    side.call("get", "GET", f"/v1/videos/{missing}")
    side.call("content", "GET", f"/v1/videos/{missing}/content")
    side.call("delete", "DELETE", f"/v1/videos/{missing}")


def _list_queries(side: Side, inputs: ProbeInputs) -> None:
    side.call("limit-101", "GET", "/v1/videos", params={"limit": 101})
    side.call("order-sideways", "GET", "/v1/videos", params={"order": "sideways"})


def _form_probe(**fields: str | None) -> Callable[[Side, ProbeInputs], None]:
    def run(side: Side, inputs: ProbeInputs) -> None:
        side.call("post", "POST", "/v1/videos/sync", data=_form(inputs, **fields), files=inputs.references())

    return run


def _json_body(side: Side, inputs: ProbeInputs) -> None:
    side.call("post", "POST", "/v1/videos", json={"prompt": inputs.prompt, "size": inputs.size})


def _spread_extra_params(side: Side, inputs: ProbeInputs) -> None:
    # What the OpenAI SDK sends for extra_body={"extra_params": {...}}: one field per key.
    data = {"prompt": inputs.prompt, "size": inputs.size, "seed": "0", "extra_params[task]": "ref2va",
            "extra_params[duration]": "4.0"}
    side.call("post", "POST", "/v1/videos/sync", data=data, files=inputs.references())


def _upload(name: str, size: int, mime: str, count: int = 1) -> Callable[[Side, ProbeInputs], None]:
    def run(side: Side, inputs: ProbeInputs) -> None:
        files = [("input_references", (name, b"\0" * size, mime))] * count
        side.call("post", "POST", "/v1/videos/sync", data=_form(inputs), files=files)

    return run


def _single_input_reference(side: Side, inputs: ProbeInputs) -> None:
    video = inputs.video
    side.call("post", "POST", "/v1/videos/sync", data=_form(inputs),
              files=[("input_reference", (video.name, video.read_bytes(), "video/mp4"))])


def _engine_refusal(extra: Mapping[str, Any] | None, *, references: bool = True,
                    **fields: str) -> tuple[Callable[[Side, ProbeInputs], None], Callable[[Side, ProbeInputs], None]]:
    """A request that passes the serving layer and that H3's pipeline refuses: its sync and its async probe."""

    def form(inputs: ProbeInputs) -> dict[str, str]:
        params = {"task": "ref2va", "duration": 4.0, **(extra or {})}
        return _form(inputs, extra_params=json.dumps(params), **fields)

    def sync(side: Side, inputs: ProbeInputs) -> None:
        side.call("post", "POST", "/v1/videos/sync", data=form(inputs), files=inputs.references() if references else None)

    def run_async(side: Side, inputs: ProbeInputs) -> None:
        _async_lifecycle(side, inputs, form(inputs), inputs.references() if references else None)

    return sync, run_async


def _oom_sync(side: Side, inputs: ProbeInputs) -> None:
    side.call("post", "POST", "/v1/videos/sync", target="fail-sync", data=inputs.client_form(**{FAIL_KEY: "oom"}),
              files=inputs.references())


def _oom_async(side: Side, inputs: ProbeInputs) -> None:
    _async_lifecycle(side, inputs, inputs.client_form(**{FAIL_KEY: "oom"}), inputs.references(), target="fail-async")


def _profiler(side: Side, inputs: ProbeInputs) -> None:
    side.call("start", "POST", "/start_profile")
    side.call("start-again", "POST", "/start_profile")
    side.call("stop", "POST", "/stop_profile")
    side.call("stop-again", "POST", "/stop_profile")


def _metric_families(response: httpx.Response) -> Answer:
    """The ``vllm_omni:`` families a ``/metrics`` scrape declares, with their types (values change every request)."""
    if response.status_code != 200:
        return normalize_response(response)
    families = {}
    for line in response.text.splitlines():
        parts = line.split()
        if len(parts) == 4 and parts[:2] == ["#", "TYPE"] and parts[2].startswith("vllm_omni:"):
            families[parts[2]] = parts[3]
    return Answer(response.status_code, "json", {"families": dict(sorted(families.items()))})


def _metrics(side: Side, inputs: ProbeInputs) -> None:
    side.call("get", "GET", "/metrics", normalize=_metric_families)


_task_sync, _task_async = _engine_refusal({"task": "t2va"})
_duration_sync, _duration_async = _engine_refusal({"duration": 999})
_norefs_sync, _norefs_async = _engine_refusal(None, references=False)
_fps_sync, _ = _engine_refusal(None, fps="25")

PROBES: tuple[Probe, ...] = (
    Probe("health", "is the server ready, and what does /health answer?", _health),
    Probe("models", "which model does /v1/models list?", _models),
    Probe("unknown-route", "what does a route that does not exist answer?", _unknown_route),
    Probe("wrong-method", "what does PUT /v1/videos answer?", _wrong_method),
    Probe("sync-client-form", "h3bench's client form, sync: the MP4 and its headers", _sync_client),
    Probe("async-client-form", "h3bench's client form, async: the job from creation to deletion", _async_client),
    Probe("async-seconds", "the OpenAI `seconds` field without extra_params: queued and completed job fields",
          _async_seconds),
    Probe("unknown-job", "GET, content and DELETE of a job that never existed", _unknown_job),
    Probe("list-queries", "GET /v1/videos with a limit over 100 and an unknown order", _list_queries),
    Probe("form-fps-below-1", "a form field below its minimum (fps 0.5)", _form_probe(fps="0.5")),
    Probe("form-width-not-int", "a form field of the wrong type (width 'wide')", _form_probe(width="wide")),
    Probe("form-seconds-pattern", "seconds that do not match ^[1-9][0-9]*$ ('5.0')", _form_probe(seconds="5.0")),
    Probe("form-size-pattern", "a size that does not match WxH ('250 x 160')", _form_probe(size="250 x 160")),
    Probe("form-no-prompt", "no prompt field", _form_probe(prompt=None)),
    Probe("form-empty-prompt", "an empty prompt field", _form_probe(prompt="")),
    Probe("form-steps-out-of-range", "num_inference_steps 0 (the request model allows 1 to 200)",
          _form_probe(num_inference_steps="0")),
    Probe("form-guidance-out-of-range", "guidance_scale 25 (the request model allows 0 to 20)",
          _form_probe(guidance_scale="25")),
    Probe("form-quality-unknown", "a quality the request model does not know ('ultra')", _form_probe(quality="ultra")),
    Probe("extra-params-bad-json", "extra_params that is not JSON", _form_probe(extra_params="{not json")),
    Probe("extra-params-list", "extra_params that is JSON but not an object", _form_probe(extra_params="[1, 2]")),
    Probe("image-reference-bad-json", "image_reference that is not JSON", _form_probe(image_reference="{")),
    Probe("model-mismatch", "a model field naming another model", _form_probe(model="other/model")),
    Probe("json-body", "a JSON body instead of a form", _json_body),
    Probe("spread-extra-params", "extra_params spread into extra_params[...] fields, as the OpenAI SDK does",
          _spread_extra_params),
    Probe("upload-video-suffix", "a reference video with an .avi name", _upload("ref.avi", 10, "video/x-msvideo")),
    Probe("upload-audio-suffix", "a reference audio with an .ogg name", _upload("ref.ogg", 10, "audio/ogg")),
    Probe("upload-video-too-big", "a reference video of 50 MiB + 1 byte", _upload("ref.mp4", 50 * _MIB + 1, "video/mp4")),
    Probe("upload-audio-too-big", "a reference audio of 15 MiB + 1 byte", _upload("ref.wav", 15 * _MIB + 1, "audio/wav")),
    Probe("upload-too-many", "13 reference uploads (H3 takes at most 12)", _upload("ref.mp4", 10, "video/mp4", 13)),
    Probe("single-input-reference", "the reference video as the single input_reference field", _single_input_reference),
    Probe("engine-unknown-task-sync", "task t2va on the ref2va partition, sync", _task_sync),
    Probe("engine-unknown-task-async", "task t2va on the ref2va partition, async job", _task_async),
    Probe("engine-bad-duration-sync", "duration 999 s, sync", _duration_sync),
    Probe("engine-bad-duration-async", "duration 999 s, async job", _duration_async),
    Probe("engine-no-references-sync", "no reference at all, sync", _norefs_sync),
    Probe("engine-no-references-async", "no reference at all, async job", _norefs_async),
    Probe("engine-fps-25-sync", "fps 25 (H3's output is fixed at 24), sync", _fps_sync),
    Probe("engine-oom-sync", "the engine fails inside generate (an out-of-memory), sync", _oom_sync),
    Probe("engine-oom-async", "the engine fails inside generate (an out-of-memory), async job", _oom_async),
    Probe("profiler", "start, start again, stop, stop again", _profiler),
)


# Probes of the real-engine lane only: the stand-in's app is assembled without vLLM's build_app, which mounts /metrics.
METRICS_PROBE = Probe("metrics-families", "which vllm_omni: families does /metrics declare after the generations?",
                      _metrics)


def probe_names() -> tuple[str, ...]:
    return tuple(probe.name for probe in (*PROBES, METRICS_PROBE))


def _each(sides: tuple[Side, ...], inputs: ProbeInputs, probes: tuple[Probe, ...]) -> Iterator[tuple[Probe, Side]]:
    for probe in probes:
        for side in sides:
            side.probe = probe.name
            yield probe, side


def run_probes(upstream: Side, sim: Side, inputs: ProbeInputs, probes: tuple[Probe, ...] = PROBES) -> list[tuple[str, str]]:
    """Run every probe on both sides, one probe at a time; return the ``(probe, step)`` keys in the order they ran."""
    order: list[tuple[str, str]] = []
    for probe, side in _each((upstream, sim), inputs, probes):
        before = set(side.answers)
        probe.run(side, inputs)
        order += [key for key in side.answers if key not in before and key not in order]
    return order
