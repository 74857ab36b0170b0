"""The server's own Prometheus histograms at ``GET /metrics``: names, scraping, parsing, per-request deltas.

vLLM-Omni 0.30.0 declares its families in ``vllm_omni/metrics/definitions.py``
(names, label sets, buckets) and registers them, at import, in the default
``prometheus_client`` registry: the diffusion timings in
``vllm_omni/metrics/modality.py``, the pipeline and workload families in
``vllm_omni/metrics/prometheus.py``. ``/metrics`` itself is vLLM's: its
``build_app`` (which vLLM-Omni's ``entrypoints/openai/api_server.py`` calls)
runs ``vllm/entrypoints/serve/instrumentator/metrics.py``'s
``attach_router``, which mounts ``prometheus_client.make_asgi_app`` over that
registry at ``/metrics`` (a ``Mount`` whose path regex also answers
``/metrics`` without a trailing slash). The scrape therefore also carries
vLLM's own ``vllm:*`` families, the HTTP instrumentator's and the process
collectors'; only ``vllm_omni:`` histograms and counters are kept here.

What each diffusion family holds, as ``observe_diffusion_finalize``
(``vllm_omni/metrics/utils.py``) fills it once per request from the engine's
per-request metrics (``diffusion/diffusion_engine.py``, ``step_streaming``):

==========================================  =========  ==================================================
family                                      buckets    one observation per request
==========================================  =========  ==================================================
``vllm_omni:diffusion_exec_s``              seconds    engine add-request to output: scheduler wait and
                                                       the workers' whole pipeline call (text and media
                                                       encode, the DiT loop, VAE decode)
``vllm_omni:diffusion_exec_per_step_s``     fast       ``exec_s / num_inference_steps``: the *configured*
                                                       steps (50), not H3's 49 DiT forwards, and every
                                                       stage of exec, not the DiT alone
``vllm_omni:diffusion_preprocess_s``        fast       the engine's ``pre_process_func``; H3 registers
                                                       none (``diffusion/registry.py``), so 0.0
``vllm_omni:diffusion_postprocess_s``       fast       ``postprocess_output`` with H3's post-process func
``vllm_omni:diffusion_forward_s``           seconds    the profiler's keys ending ``.diffuse`` (needs
                                                       ``--enable-diffusion-pipeline-profiler``)
``vllm_omni:vae_decode_s``                  seconds    the profiler's keys ending ``.vae.decode``: none of
                                                       H3's (``decode``, ``video_vae.decode_latent``,
                                                       ``audio_vae.decode_latent``) does, so never for H3
``vllm_omni:denoise_step_latency_s``        fast       ``forward_s / num_inference_steps``, only for image
                                                       outputs: never for H3's video
==========================================  =========  ==================================================

plus ``vllm_omni:num_inference_steps`` (the configured steps, default
buckets), ``vllm_omni:stage_gen_time_s`` (stage submit to output,
``engine/stage_pool.py``), ``vllm_omni:e2e_request_latency_s`` (pipeline
arrival to finalize, ``entrypoints/omni_base.py``: before the API layer muxes
the MP4), ``vllm_omni:request_queue_wait_s`` and the counters
``vllm_omni:requests_success_total`` and ``vllm_omni:requests_failed_total``.
Diffusion families carry the labels ``model_name``, ``stage`` and
``replica``; an H3 server has one stage and one replica.

A scrape before and one after a request give its delta: a histogram's
``_sum`` and ``_count`` difference, summed over its label sets. With one
request at a time, each family the request observes gains exactly one
observation, and its ``_sum`` delta is that request's value
(:meth:`RequestMetrics.seconds`). A server without ``/metrics`` (404, or a
refused connection) gives an unavailable :class:`Scrape` with the reason: it
is noted, never a failure.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import httpx

from h3bench.h3 import (
    DENOISE_STEP_LATENCY_S,
    DIFFUSION_EXEC_PER_STEP_S,
    DIFFUSION_EXEC_S,
    DIFFUSION_FORWARD_S,
    DIFFUSION_POSTPROCESS_S,
    DIFFUSION_PREPROCESS_S,
    E2E_REQUEST_LATENCY_S,
    METRICS_PATH,
    NUM_INFERENCE_STEPS,
    PREFIX,
    REQUEST_QUEUE_WAIT_S,
    REQUESTS_FAILED,
    REQUESTS_SUCCESS,
    SECONDS_BUCKETS,
    SECONDS_FAST_BUCKETS,
    STAGE_GEN_TIME_S,
    UPSTREAM_METRICS,
    VAE_DECODE_S,
    MetricSpec,
)
from h3bench.server import localhttp

__all__ = [
    "DENOISE_STEP_LATENCY_S",
    "DIFFUSION_EXEC_PER_STEP_S",
    "DIFFUSION_EXEC_S",
    "DIFFUSION_FORWARD_S",
    "DIFFUSION_POSTPROCESS_S",
    "DIFFUSION_PREPROCESS_S",
    "E2E_REQUEST_LATENCY_S",
    "METRICS_PATH",
    "NUM_INFERENCE_STEPS",
    "PREFIX",
    "REQUESTS_FAILED",
    "REQUESTS_SUCCESS",
    "REQUEST_QUEUE_WAIT_S",
    "SECONDS_BUCKETS",
    "SECONDS_FAST_BUCKETS",
    "STAGE_GEN_TIME_S",
    "UPSTREAM_METRICS",
    "VAE_DECODE_S",
    "HistogramDelta",
    "MetricSpec",
    "RequestMetrics",
    "Scrape",
    "metrics_delta",
    "parse_exposition",
    "scrape",
]

# -- parsing ---------------------------------------------------------------------------


@dataclass(frozen=True)
class HistogramDelta:
    """A histogram's ``_sum`` and ``_count`` (totals in a scrape, or their change over a request)."""

    sum: float
    count: float

    def to_dict(self) -> dict[str, float]:
        return {"sum": self.sum, "count": self.count}


def parse_exposition(text: str, prefix: str = PREFIX) -> tuple[dict[str, HistogramDelta], dict[str, float]]:
    """Histogram and counter totals of the families named ``prefix...``, each summed over its label sets.

    Parsed with ``prometheus_client.parser.text_string_to_metric_families``.
    A family that is declared but has no series yet (a labelled family
    before its first observation) is present with zero totals, so "declared,
    not observed" stays apart from "not exported". Counter names are the
    family's (``vllm_omni:requests_success``), without ``_total``.

    Raises
    ------
    ValueError
        The text is not Prometheus' text exposition format.
    """
    from prometheus_client.parser import text_string_to_metric_families

    histograms: dict[str, HistogramDelta] = {}
    counters: dict[str, float] = {}
    for family in text_string_to_metric_families(text):
        if not family.name.startswith(prefix):
            continue
        if family.type == "histogram":
            total = sum(s.value for s in family.samples if s.name == family.name + "_sum")
            count = sum(s.value for s in family.samples if s.name == family.name + "_count")
            histograms[family.name] = HistogramDelta(float(total), float(count))
        elif family.type == "counter":
            counters[family.name] = float(sum(s.value for s in family.samples if s.name == family.name + "_total"))
    return histograms, counters


# -- scraping --------------------------------------------------------------------------


@dataclass(frozen=True)
class Scrape:
    """One ``GET /metrics``: the raw text and its parsed totals, or why there are none."""

    url: str
    available: bool
    reason: str  # why not available; "" when it is
    status_code: int | None = None
    text: str = ""  # the raw exposition, for the bundle
    histograms: Mapping[str, HistogramDelta] = field(default_factory=dict)
    counters: Mapping[str, float] = field(default_factory=dict)

    def record(self) -> dict[str, Any]:
        """What samples.jsonl or a scrape index keeps about it (the raw text goes to a file of its own)."""
        return {"url": self.url, "available": self.available, "reason": self.reason,
                "status_code": self.status_code, "bytes": len(self.text.encode())}


def scrape(base_url: str, *, http: httpx.Client | None = None, timeout: float = 10.0) -> Scrape:
    """``GET {base_url}/metrics`` and parse it; a server without it gives an unavailable scrape, never an error.

    Unavailable, with the reason: 404 (no such route), a refused
    connection, no answer within ``timeout``, another status, or a body that
    does not parse. ``http`` is an open client to reuse (its base URL is
    ignored); without one a short-lived client that ignores proxy settings
    is made.
    """
    url = base_url.rstrip("/") + METRICS_PATH
    own = http is None
    client = localhttp.client(timeout=timeout) if http is None else http
    try:
        response = client.get(url, timeout=timeout)
    except httpx.ConnectError as exc:
        return Scrape(url, False, f"connection refused on {METRICS_PATH} ({exc})")
    except httpx.TimeoutException:
        return Scrape(url, False, f"no answer on {METRICS_PATH} within {timeout:g} s")
    except httpx.HTTPError as exc:
        return Scrape(url, False, f"{METRICS_PATH} failed: {exc}")
    finally:
        if own:
            client.close()
    if response.status_code == 404:
        return Scrape(url, False, f"the server has no {METRICS_PATH} (HTTP 404)", 404)
    if response.status_code != 200:
        return Scrape(url, False, f"{METRICS_PATH} answered HTTP {response.status_code}", response.status_code,
                      response.text)
    try:
        histograms, counters = parse_exposition(response.text)
    except ValueError as exc:
        return Scrape(url, False, f"{METRICS_PATH} is not Prometheus text format: {exc}", 200, response.text)
    return Scrape(url, True, "", 200, response.text, histograms, counters)


# -- per-request deltas ----------------------------------------------------------------


@dataclass(frozen=True)
class RequestMetrics:
    """What the server's ``/metrics`` gained over one request: per family, the change of its totals."""

    available: bool
    reason: str  # why not available; "" when it is
    histograms: Mapping[str, HistogramDelta] = field(default_factory=dict)
    counters: Mapping[str, float] = field(default_factory=dict)

    def observations(self, name: str) -> float | None:
        """How many observations ``name`` gained; None when the server does not export it."""
        delta = self.histograms.get(name)
        return None if delta is None else delta.count

    def seconds(self, name: str) -> float | None:
        """The request's value of histogram ``name``: its ``_sum`` delta when it gained exactly one observation.

        None when the family is not exported, was not observed, or gained
        several observations (another request ran in the window): the
        reconciliation says which (:mod:`h3bench.verdict.reconcile`).
        """
        delta = self.histograms.get(name)
        if delta is None or delta.count != 1:
            return None
        return delta.sum

    def to_dict(self) -> dict[str, Any]:
        return {"available": self.available, "reason": self.reason,
                "histograms": {k: v.to_dict() for k, v in sorted(self.histograms.items())},
                "counters": dict(sorted(self.counters.items()))}

    @classmethod
    def from_dict(cls, record: Mapping[str, Any]) -> RequestMetrics:
        """Read back :meth:`to_dict` (a samples.jsonl entry)."""
        return cls(bool(record["available"]), str(record.get("reason", "")),
                   {k: HistogramDelta(float(v["sum"]), float(v["count"]))
                    for k, v in (record.get("histograms") or {}).items()},
                   {k: float(v) for k, v in (record.get("counters") or {}).items()})


def _unavailable(reason: str) -> RequestMetrics:
    return RequestMetrics(False, reason)


def metrics_delta(before: Scrape, after: Scrape) -> RequestMetrics:
    """The change of every ``vllm_omni:`` histogram and counter between two scrapes of one server.

    A family first seen in ``after`` counts from zero (its series appear at
    their first observation). Totals that went backwards mean the server
    restarted, or another server answered, between the scrapes: the delta
    is then unavailable, with that reason.
    """
    for name, taken in (("before", before), ("after", after)):
        if not taken.available:
            return _unavailable(f"scrape {name} the request: {taken.reason}")
    histograms: dict[str, HistogramDelta] = {}
    for name, total in after.histograms.items():
        start = before.histograms.get(name, HistogramDelta(0.0, 0.0))
        histograms[name] = HistogramDelta(total.sum - start.sum, total.count - start.count)
    counters = {name: value - before.counters.get(name, 0.0) for name, value in after.counters.items()}
    backwards = sorted([n for n, d in histograms.items() if d.count < 0 or (d.count == 0 and abs(d.sum) > 1e-9)]
                       + [n for n, d in counters.items() if d < 0])
    if backwards or any(not math.isfinite(d.sum) for d in histograms.values()):
        return _unavailable(f"totals went backwards between the scrapes ({', '.join(backwards) or 'not finite'}): "
                           f"the server restarted, or another one answered")
    return RequestMetrics(True, "", histograms, counters)
