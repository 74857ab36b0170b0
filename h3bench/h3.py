"""The MiniMax-H3 facts that every stage of h3bench relies on, written once.

Read from vLLM-Omni's MiniMax-H3 model code (``models/minimax_h3/``
``encoder_processing.py``, ``time_request.py`` and ``vae.py``) and its
diffusion pipeline profiler:

- output clock: 24 FPS; the requested frame count ``round(seconds * 24)`` is
  snapped **up** to the next count with ``frames % 17 == 5`` (5 s → 124
  frames, 15 s → 362), and durations lie within [4, 15] s;
- the video latent has ``T = ((frames - 5) // 17) * 5 + 2`` frames;
- audio: 32 kHz stereo, ``round(40 * frames / 24)`` latents of 800 samples per
  channel each (5 s → 165 600 samples, 15 s → 482 400), so audio and video
  lengths differ by design;
- the profiler's stage keys are ``"MiniMaxH3Pipeline.<method>"``
  (``diffusion/profiler/diffusion_pipeline_profiler.py``); repeated calls are
  summed, and the VAE ``decode_latent`` calls nest inside ``decode``. In
  request mode, the default, six keys are reported (:data:`STAGE_KEYS`):
  ``denoise_step`` is recorded under ``diffuse``'s key, and ``prepare_encode``
  and ``post_decode`` appear only with step execution. MP4 muxing has no key.
  Upstream's API layer merges its own timings into the same dict, in
  milliseconds and without a dot (:data:`PIPELINE_TIMING_KEYS`:
  ``queue_wait_ms``, ``stage_0_gen_ms``; ``entrypoints/omni_base.py``).

The simulator, the gates, the audio metric, the client, the plugin's workload
markers and the expected-duration checks all take these from here.
"""

from __future__ import annotations

import math
from collections.abc import Collection, Mapping
from dataclasses import dataclass
from fractions import Fraction
from typing import Literal

from h3bench.errors import UsageError

__all__ = [
    "AUDIO_CHANNELS",
    "AUDIO_LATENTS_PER_SECOND",
    "AUDIO_SAMPLES_PER_LATENT",
    "AUDIO_SAMPLE_RATE",
    "DENOISE_STEP_LATENCY_S",
    "DIFFUSION_EXEC_PER_STEP_S",
    "DIFFUSION_EXEC_S",
    "DIFFUSION_FORWARD_S",
    "DIFFUSION_POSTPROCESS_S",
    "DIFFUSION_PREPROCESS_S",
    "E2E_REQUEST_LATENCY_S",
    "FPS",
    "MAX_SECONDS",
    "METRICS_PATH",
    "MIN_SECONDS",
    "NUM_INFERENCE_STEPS",
    "PIPELINE_TIMING_KEYS",
    "PREFIX",
    "REQUESTS_FAILED",
    "REQUESTS_SUCCESS",
    "REQUEST_QUEUE_WAIT_S",
    "SECONDS_BUCKETS",
    "SECONDS_FAST_BUCKETS",
    "STAGE_GEN_TIME_S",
    "STAGE_KEYS",
    "STAGE_PREFIX",
    "STEP_WRAPPERS",
    "TOP_LEVEL_STAGES",
    "UPSTREAM_METRICS",
    "VAE_DECODE_S",
    "ExpectedShape",
    "MetricSpec",
    "audio_sample_count",
    "expected_shape",
    "frame_count",
    "latent_frames",
    "mux_and_transfer_s",
    "profiler_key",
    "top_level_method",
    "top_level_stages",
    "workload_marker",
]

FPS = 24
AUDIO_SAMPLE_RATE = 32_000
AUDIO_CHANNELS = 2
AUDIO_LATENTS_PER_SECOND = 40
AUDIO_SAMPLES_PER_LATENT = AUDIO_SAMPLE_RATE // AUDIO_LATENTS_PER_SECOND  # 800
MIN_SECONDS = 4.0
MAX_SECONDS = 15.0
_FRAME_PERIOD = 17  # frames % 17 == 5: one latent frame per 17 output frames, plus the first 5
_FRAME_REMAINDER = 5

STAGE_PREFIX = "MiniMaxH3Pipeline."
# The keys the profiler reports in request mode, in the order the pipeline runs them.
STAGE_KEYS = tuple(
    STAGE_PREFIX + method
    for method in (
        "encode_prompt",
        "_encode_local_media",
        "diffuse",
        "decode",
        "video_vae.decode_latent",
        "audio_vae.decode_latent",
    )
)
# What vLLM-Omni's API layer adds to every stage_durations (entrypoints/omni_base.py: the orchestrator's queue wait
# and each stage's generation time), in milliseconds and without a class prefix.
PIPELINE_TIMING_KEYS = ("queue_wait_ms", "stage_0_gen_ms")
# Methods that do not nest inside one another in request mode: E2E minus their sum is mux and transfer.
TOP_LEVEL_STAGES = ("encode_prompt", "_encode_local_media", "diffuse", "decode")
# Step execution's stages around them (pipeline_minimax_h3.py: prepare_encode runs the text and media encoders,
# post_decode runs decode), which then are the top level; seen by the real-engine conformance lane.
STEP_WRAPPERS = {"prepare_encode": ("encode_prompt", "_encode_local_media"), "post_decode": ("decode",)}


def frame_count(seconds: float) -> int:
    """Frames H3 generates for ``seconds``: ``round(seconds * 24)`` snapped up to ``17n + 5``.

    4 s → 107, 5 s → 124, 8 s → 192, 10 s → 243, 15 s → 362.
    """
    frames = round(seconds * FPS)
    return frames + (_FRAME_REMAINDER - frames) % _FRAME_PERIOD


def latent_frames(frames: int) -> int:
    """The video latent's T for ``frames`` output frames: ``((frames - 5) // 17) * 5 + 2``."""
    return ((frames - _FRAME_REMAINDER) // _FRAME_PERIOD) * 5 + 2


def audio_sample_count(frames: int) -> int:
    """Audio samples per channel for ``frames`` frames: ``round(40 * frames / 24)`` latents of 800."""
    return round(Fraction(AUDIO_LATENTS_PER_SECOND * frames, FPS)) * AUDIO_SAMPLES_PER_LATENT


@dataclass(frozen=True)
class ExpectedShape:
    """What H3 produces for a requested duration."""

    seconds: float
    frames: int
    audio_latents: int
    audio_samples: int
    audio_duration_s: float
    video_duration_s: float


def expected_shape(seconds: float) -> ExpectedShape:
    """The frame and audio counts H3 produces for ``seconds`` of output.

    Examples: 5 s → 124 frames, 165 600 samples; 15 s → 362 frames, 482 400 samples.

    Raises
    ------
    UsageError
        ``seconds`` is not a number, or lies outside [4, 15] s.
    """
    if isinstance(seconds, bool) or not isinstance(seconds, (int, float)) or not math.isfinite(seconds):
        raise UsageError(f"the expected duration must be a number of seconds, got {seconds!r}")
    if not MIN_SECONDS <= seconds <= MAX_SECONDS:
        raise UsageError(
            f"the expected duration must be within [{MIN_SECONDS:g}, {MAX_SECONDS:g}] s (H3's range), got {seconds:g}"
        )
    frames = frame_count(seconds)
    samples = audio_sample_count(frames)
    return ExpectedShape(
        seconds=float(seconds),
        frames=frames,
        audio_latents=samples // AUDIO_SAMPLES_PER_LATENT,
        audio_samples=samples,
        audio_duration_s=samples / AUDIO_SAMPLE_RATE,
        video_duration_s=frames / FPS,
    )


def top_level_stages(methods: Collection[str]) -> tuple[str, ...]:
    """The stages that nest in no other, among those a server reported (``methods``, without the class).

    Request mode's :data:`TOP_LEVEL_STAGES`, with the stages a step-execution
    wrapper of :data:`STEP_WRAPPERS` runs replaced by the wrapper when it is reported.
    """
    stages = list(TOP_LEVEL_STAGES)
    for wrapper, inner in STEP_WRAPPERS.items():
        if wrapper in methods:
            stages = [stage for stage in stages if stage not in inner] + [wrapper]
    return tuple(stages)


def profiler_key(key: str) -> bool:
    """Whether a stage-durations key is the profiler's (``<Class>.<method>``, a nested stage with more dots).

    Upstream's API layer merges its own timings into the same dict in
    milliseconds and without a dot (:data:`PIPELINE_TIMING_KEYS`): never a
    profiler stage, whatever its name. The one rule every reader of stage
    durations uses.
    """
    return "." in key


def top_level_method(key: str) -> str | None:
    """The method of a profiler key that names no nested stage (``<Class>.<method>``); None for any other key."""
    return key.rpartition(".")[2] if profiler_key(key) and key.count(".") == 1 else None


def mux_and_transfer_s(e2e_s: float, stage_durations: Mapping[str, float]) -> float | None:
    """E2E minus the sum of the top-level stages; None when the server reported no stages.

    Keys are ``"<Class>.<method>"``; nested ones (``.video_vae.decode_latent``,
    ``.denoise_step`` should a profiler report it, and under step execution
    the stages ``prepare_encode`` and ``post_decode`` run) are already inside
    a top-level stage (:func:`top_level_stages`).
    """
    profiled = [(method, v) for k, v in stage_durations.items() if (method := top_level_method(k)) is not None]
    tops = top_level_stages({method for method, _ in profiled})
    top = [v for method, v in profiled if method in tops]
    return e2e_s - sum(top) if top else None


def workload_marker(seconds: float) -> str:
    """The pytest marker of a workload: ``ref2va_5s``, ``ref2va_15s``."""
    return f"ref2va_{seconds:g}s"


# -- what vLLM-Omni 0.30.0 exports at GET /metrics for a diffusion model -------------------------------
# vllm_omni/metrics/definitions.py declares the names, labels and buckets, modality.py and prometheus.py
# register them, metrics/utils.py observe_diffusion_finalize fills them per request. The harness scrapes
# them (h3bench.run.server_metrics) and the simulator exports them (h3bench.sim.metrics): both read them here.

METRICS_PATH = "/metrics"
PREFIX = "vllm_omni:"

DIFFUSION_EXEC_S = PREFIX + "diffusion_exec_s"
DIFFUSION_EXEC_PER_STEP_S = PREFIX + "diffusion_exec_per_step_s"
DIFFUSION_PREPROCESS_S = PREFIX + "diffusion_preprocess_s"
DIFFUSION_POSTPROCESS_S = PREFIX + "diffusion_postprocess_s"
DIFFUSION_FORWARD_S = PREFIX + "diffusion_forward_s"
VAE_DECODE_S = PREFIX + "vae_decode_s"
DENOISE_STEP_LATENCY_S = PREFIX + "denoise_step_latency_s"
NUM_INFERENCE_STEPS = PREFIX + "num_inference_steps"
STAGE_GEN_TIME_S = PREFIX + "stage_gen_time_s"
E2E_REQUEST_LATENCY_S = PREFIX + "e2e_request_latency_s"
REQUEST_QUEUE_WAIT_S = PREFIX + "request_queue_wait_s"
REQUESTS_SUCCESS = PREFIX + "requests_success"  # a counter: exposed as ..._total
REQUESTS_FAILED = PREFIX + "requests_failed"

# SECONDS_BUCKETS and SECONDS_FAST_BUCKETS of definitions.py
SECONDS_BUCKETS = (0.05, 0.1, 0.25, 0.5, 1.0, 2.0, 5.0, 10.0, 20.0, 30.0, 60.0, 120.0, 300.0)
SECONDS_FAST_BUCKETS = (0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 60.0)
_STAGE = ("model_name", "stage", "replica")


@dataclass(frozen=True)
class MetricSpec:
    """One upstream family as vLLM-Omni 0.30.0 declares it; ``buckets`` None: prometheus_client's defaults."""

    name: str
    kind: Literal["histogram", "counter"]
    unit: str
    labels: tuple[str, ...]
    buckets: tuple[float, ...] | None
    help: str  # upstream's help text
    h3: str  # what an H3 server observes in it, per request


UPSTREAM_METRICS: tuple[MetricSpec, ...] = (
    MetricSpec(DIFFUSION_EXEC_S, "histogram", "s", _STAGE, SECONDS_BUCKETS,
               "DiT forward pass execution time per request in seconds.",
               "engine add-request to output: the pipeline call (encode, DiT loop, VAE decode) and scheduler wait"),
    MetricSpec(DIFFUSION_EXEC_PER_STEP_S, "histogram", "s", _STAGE, SECONDS_FAST_BUCKETS,
               "DiT forward pass execution time per denoising step in seconds.",
               "diffusion_exec_s / num_inference_steps (the configured 50, not the 49 DiT forwards)"),
    MetricSpec(DIFFUSION_PREPROCESS_S, "histogram", "s", _STAGE, SECONDS_FAST_BUCKETS,
               "Diffusion input preprocessing time per request in seconds.",
               "0.0: H3 registers no pre_process_func"),
    MetricSpec(DIFFUSION_POSTPROCESS_S, "histogram", "s", _STAGE, SECONDS_FAST_BUCKETS,
               "Diffusion output postprocessing (VAE decode) time per request in seconds.",
               "the engine's postprocess_output with H3's post-process func (layout to uint8), not the VAE"),
    MetricSpec(DIFFUSION_FORWARD_S, "histogram", "s", _STAGE, SECONDS_BUCKETS,
               "Diffusion forward-only latency in seconds (denoise loop; excludes preprocess / postprocess / VAE "
               "decode / KV load). Absent when the pipeline profiler is off.",
               "the profiler's MiniMaxH3Pipeline.diffuse"),
    MetricSpec(VAE_DECODE_S, "histogram", "s", _STAGE, SECONDS_BUCKETS,
               "VAE decode latency in seconds (latents -> pixels/audio/video).",
               "never: no H3 profiler key ends with .vae.decode"),
    MetricSpec(DENOISE_STEP_LATENCY_S, "histogram", "s", _STAGE, SECONDS_FAST_BUCKETS,
               "Mean per-step denoise forward latency in seconds (forward_time / num_inference_steps).",
               "never: observed for image outputs only"),
    MetricSpec(NUM_INFERENCE_STEPS, "histogram", "steps", ("model_name",), None,
               "Diffusion step count distribution per request.",
               "the configured num_inference_steps (50; H3 runs 49 DiT forwards)"),
    MetricSpec(STAGE_GEN_TIME_S, "histogram", "s", ("model_name", "stage", "stage_type"), SECONDS_BUCKETS,
               "Per-stage generation time in seconds for diffusion / image stages.",
               "stage submit to its output: preprocess, exec, postprocess and the engine's IPC"),
    MetricSpec(E2E_REQUEST_LATENCY_S, "histogram", "s", ("model_name",), SECONDS_BUCKETS,
               "Pipeline-global end-to-end request latency in seconds (user arrival to complete response).",
               "pipeline arrival to finalize, before the API muxes the MP4 and sends it"),
    MetricSpec(REQUEST_QUEUE_WAIT_S, "histogram", "s", ("model_name",), SECONDS_BUCKETS,
               "Per-request queue wait between submit arrival and stage submit, in seconds.",
               "the orchestrator's queue wait"),
    MetricSpec(REQUESTS_SUCCESS, "counter", "requests", ("model_name", "finished_reason"), None,
               "Total requests by completion reason (stop / length / abort / ...).",
               "+1 per completed request"),
    MetricSpec(REQUESTS_FAILED, "counter", "requests", ("model_name", "reason"), None,
               "Total requests by failure reason.",
               "+1 per failed request"),
)


