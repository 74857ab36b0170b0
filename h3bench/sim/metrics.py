"""The simulator's ``GET /metrics``: vLLM-Omni 0.30.0's Prometheus families, filled from the modelled stages.

The families, labels and buckets are upstream's (:data:`h3bench.run.server_metrics.UPSTREAM_METRICS`,
read from ``vllm_omni/metrics/definitions.py``, ``modality.py`` and
``prometheus.py``), registered with ``prometheus_client`` in a registry of
the server's own, beside the process, platform and GC collectors that a real
server's default registry also exposes. Each completed request is observed
once, from the same clock readings and profiler stage durations the
request was served with, the way ``observe_diffusion_finalize``
(``vllm_omni/metrics/utils.py``) derives them from the engine's metrics
(``diffusion/diffusion_engine.py``):

- ``diffusion_exec_s``: from the moment the engine took the request to the
  end of the VAE decode (upstream: add-request to output);
- ``diffusion_exec_per_step_s``: exec over the configured steps, which the
  simulator takes to be its DiT forwards plus one (H3: 50 for 49), so a
  profile that runs another number of forwards than requested shows it;
- ``diffusion_preprocess_s``: 0.0, since H3 registers no pre-process
  function (reference preprocessing happens inside exec);
- ``diffusion_postprocess_s``: the post-decode stage;
- ``diffusion_forward_s`` and ``vae_decode_s``: the profiler's keys ending
  ``.diffuse`` and ``.vae.decode``. No H3 key ends ``.vae.decode``, so
  ``vae_decode_s`` is declared and never observed, as upstream's;
- ``stage_gen_time_s``: engine start to the end of post-processing;
  ``e2e_request_latency_s``: from the request's arrival at the engine (before
  the engine lock) to the same point, so neither counts the MP4 muxing, which
  upstream does in the API layer; ``request_queue_wait_s``: the wait for the
  engine lock;
- ``num_inference_steps``, ``requests_success_total`` and
  ``requests_failed_total``.

``denoise_step_latency_s`` (image outputs only) is declared and never
observed. A profile can under-report one stage
(``underreport_stage``/``underreport_factor``): a profiler method's
reported seconds (and so every family derived from them), or one family's.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from fastapi import APIRouter, Request
from fastapi.responses import Response
from prometheus_client import (
    CONTENT_TYPE_LATEST,
    CollectorRegistry,
    Counter,
    GCCollector,
    Histogram,
    PlatformCollector,
    ProcessCollector,
    generate_latest,
)

from h3bench.h3 import (
    DIFFUSION_EXEC_PER_STEP_S,
    DIFFUSION_EXEC_S,
    DIFFUSION_FORWARD_S,
    DIFFUSION_POSTPROCESS_S,
    DIFFUSION_PREPROCESS_S,
    E2E_REQUEST_LATENCY_S,
    NUM_INFERENCE_STEPS,
    REQUEST_QUEUE_WAIT_S,
    REQUESTS_FAILED,
    REQUESTS_SUCCESS,
    STAGE_GEN_TIME_S,
    STAGE_KEYS,
    STAGE_PREFIX,
    UPSTREAM_METRICS,
    VAE_DECODE_S,
)

__all__ = ["CONTENT_TYPE", "OBSERVED", "UNDERREPORTABLE", "RequestTiming", "SimMetrics", "metrics_router",
           "observations", "underreport_stages"]

CONTENT_TYPE = CONTENT_TYPE_LATEST
# The families the simulator observes a value in for every request.
OBSERVED = (DIFFUSION_EXEC_S, DIFFUSION_EXEC_PER_STEP_S, DIFFUSION_PREPROCESS_S, DIFFUSION_POSTPROCESS_S,
            DIFFUSION_FORWARD_S, STAGE_GEN_TIME_S, E2E_REQUEST_LATENCY_S, REQUEST_QUEUE_WAIT_S)
UNDERREPORTABLE = (*(key.removeprefix(STAGE_PREFIX) for key in STAGE_KEYS), *OBSERVED)
_STAGE, _REPLICA = "0", "0"  # H3 serves one diffusion stage on one replica


@dataclass(frozen=True)
class RequestTiming:
    """One completed request as the engine saw it: ``now()`` readings (CLOCK_MONOTONIC) and the profiler's stages."""

    entered: float  # the engine got the request, before waiting for the engine lock
    started: float  # the engine took it; the workers' stage deadlines count from here
    decoded: float  # the VAE decode ended
    post_decoded: float  # post-processing ended: the output is ready for the API layer
    stage_durations: Mapping[str, float]  # as reported (after any under-reporting)
    steps: int  # configured num_inference_steps


def observations(timing: RequestTiming) -> dict[str, float]:
    """The value each family observes for one request; a family missing here is not observed."""
    exec_s = timing.decoded - timing.started
    values = {
        DIFFUSION_EXEC_S: exec_s,
        DIFFUSION_PREPROCESS_S: 0.0,
        DIFFUSION_POSTPROCESS_S: timing.post_decoded - timing.decoded,
        STAGE_GEN_TIME_S: timing.post_decoded - timing.started,
        E2E_REQUEST_LATENCY_S: timing.post_decoded - timing.entered,
        REQUEST_QUEUE_WAIT_S: timing.started - timing.entered,
    }
    if timing.steps > 0:
        values[DIFFUSION_EXEC_PER_STEP_S] = exec_s / timing.steps
    # Upstream's suffix rules (diffusion_engine.py via metrics/utils.py): H3 has a .diffuse key and no .vae.decode one.
    for name, suffix in ((DIFFUSION_FORWARD_S, ".diffuse"), (VAE_DECODE_S, ".vae.decode")):
        found = [value for key, value in timing.stage_durations.items() if key.endswith(suffix)]
        if found:
            values[name] = sum(found)
    return values


def underreport_stages(durations: Mapping[str, float], method: str, factor: float) -> dict[str, float]:
    """The profiler's stage durations with ``method``'s multiplied by ``factor`` (left out at 0)."""
    key = STAGE_PREFIX + method
    if factor == 0:
        return {k: v for k, v in durations.items() if k != key}
    return {k: v * factor if k == key else v for k, v in durations.items()}


class SimMetrics:
    """One server's registry: upstream's families, observed once per completed request.

    Parameters
    ----------
    model
        The ``model_name`` label.
    underreport
        ``(family, factor)``: that family's observations are multiplied by
        ``factor``; None: every value as measured.
    """

    def __init__(self, model: str, underreport: tuple[str, float] | None = None) -> None:
        self.model = model
        self.underreport = underreport
        self.registry = CollectorRegistry()
        for collector in (ProcessCollector, PlatformCollector, GCCollector):
            collector(registry=self.registry)
        self._histograms: dict[str, Histogram] = {}
        self._counters: dict[str, Counter] = {}
        for spec in UPSTREAM_METRICS:
            if spec.kind == "histogram":
                buckets = spec.buckets if spec.buckets is not None else Histogram.DEFAULT_BUCKETS
                self._histograms[spec.name] = Histogram(spec.name, spec.help, labelnames=spec.labels,
                                                        registry=self.registry, buckets=buckets)
            else:
                self._counters[spec.name] = Counter(spec.name, spec.help, labelnames=spec.labels,
                                                    registry=self.registry)

    def _labels(self, name: str) -> dict[str, str]:
        values = {"model_name": self.model, "stage": _STAGE, "replica": _REPLICA, "stage_type": "diffusion"}
        spec = next(spec for spec in UPSTREAM_METRICS if spec.name == name)
        return {label: values[label] for label in spec.labels}

    def observe(self, timing: RequestTiming) -> dict[str, float]:
        """Observe one completed request; return the values observed."""
        values = observations(timing)
        if self.underreport is not None and self.underreport[0] in values:
            values[self.underreport[0]] *= self.underreport[1]
        for name, value in values.items():
            self._histograms[name].labels(**self._labels(name)).observe(value)
        self._histograms[NUM_INFERENCE_STEPS].labels(model_name=self.model).observe(timing.steps)
        self._counters[REQUESTS_SUCCESS].labels(model_name=self.model, finished_reason="stop").inc()
        return values

    def failed(self, reason: str = "stage_error") -> None:
        self._counters[REQUESTS_FAILED].labels(model_name=self.model, reason=reason).inc()

    def exposition(self) -> bytes:
        """The registry in Prometheus' text format, as ``GET /metrics`` returns it."""
        return generate_latest(self.registry)


metrics_router = APIRouter()


@metrics_router.get("/metrics", include_in_schema=False)
async def metrics(request: Request) -> Response:
    registry: SimMetrics = request.app.state.simulator.engine.metrics
    return Response(registry.exposition(), media_type=CONTENT_TYPE)
