"""The stand-in H3 engine's work, without upstream: what it renders, how long it takes, and how it fails.

Upstream's serving code (:mod:`conformance.upstream_app`) calls the
engine's ``generate`` with the values its serving layer resolved from the
form: the prompt, the references it persisted, and one
``OmniDiffusionSamplingParams`` (width, height, num_frames, fps, seed,
num_inference_steps and ``extra_args``). :func:`run_engine_request` does with
those values what the real MiniMax-H3 pipeline does, in the simulator's
terms:

- H3's worker-side checks, with upstream's messages
  (:func:`h3bench.sim.shape.resolve_engine_shape`): an unknown task, a
  duration outside [4, 15] s, no image or video reference, and so on are
  :class:`H3Refusal` (the pipeline raises ``OmniClientError``, a 400);
- ``extra_args["h3bench_fail"] == "oom"`` makes the pipeline fail as an
  out-of-memory does (:class:`H3Crash`; upstream's engine reports any
  exception that is not a client error as ``EngineGenerateError``, a 500);
- otherwise it sleeps the simulator's stage model
  (:meth:`h3bench.sim.profile.SimProfile.plan`) scaled by ``time_scale``,
  renders the MP4 with the simulator's content code (:func:`h3bench.sim.content.render`:
  H.264/AAC, 17n+5 frames at 24 FPS, 32 kHz stereo audio of 800 samples a
  latent) and reports the stage durations under the profiler's keys.

This module imports nothing of upstream, so the tests check it in h3bench's
own environment.
"""

from __future__ import annotations

import hashlib
import os
import tempfile
import threading
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from h3bench.h3 import STAGE_PREFIX, audio_sample_count
from h3bench.sim.content import ContentSpec, Perturbation, content_key, render
from h3bench.sim.profile import SimProfile, StagePlan
from h3bench.sim.shape import Shape, resolve_engine_shape
from h3bench.sim.worker import GenerationError

__all__ = [
    "FAIL_KEY",
    "EngineInputs",
    "EngineOutput",
    "H3Crash",
    "H3Refusal",
    "StandInSettings",
    "file_digest",
    "output_shape",
    "run_engine_request",
]

# The extra_params key that makes the stand-in fail inside generate (upstream passes extra_params to the engine as is).
FAIL_KEY = "h3bench_fail"
_OOM_MESSAGE = (
    "NPU out of memory. Tried to allocate 2.00 GiB (NPU 0; 60.96 GiB total capacity; 58.71 GiB already allocated) "
    "(injected by the h3bench stand-in: extra_params.h3bench_fail = 'oom')"
)


class H3Refusal(Exception):
    """H3's pipeline refuses the request (upstream raises ``OmniClientError``: a 4xx with this message)."""

    def __init__(self, message: str, *, status_code: int = 400) -> None:
        super().__init__(message)
        self.message = message
        self.status_code = status_code


class H3Crash(Exception):
    """H3's pipeline fails as an out-of-memory does (upstream's engine reports ``EngineGenerateError``, a 500)."""


@dataclass(frozen=True)
class StandInSettings:
    """How one stand-in engine behaves: its speed, its outputs' run-to-run noise, its model name.

    ``time_scale`` multiplies the simulator's modelled stage seconds (the 950PR
    lossless ref2va row), so two arms of different speeds differ only here.
    ``run_to_run_noise`` and ``process_seed`` are the simulator's
    (:class:`h3bench.sim.content.Perturbation`): a tiny per-process difference,
    as two processes of the real dense baseline show.
    """

    model: str = "MiniMaxAI/MiniMax-H3"
    time_scale: float = 0.001
    jitter_cv: float = 0.01
    run_to_run_noise: float = 1.0
    process_seed: int = 0

    def __post_init__(self) -> None:
        if not self.time_scale >= 0:
            raise ValueError(f"time_scale must be a number of seconds per modelled second >= 0, got {self.time_scale!r}")
        if not 0 <= self.jitter_cv < 1:
            raise ValueError(f"jitter_cv must lie in [0, 1), got {self.jitter_cv!r}")
        if not self.run_to_run_noise >= 0:
            raise ValueError(f"run_to_run_noise must be >= 0, got {self.run_to_run_noise!r}")

    def profile(self) -> SimProfile:
        """The simulator profile whose stage model the stand-in sleeps (no compile time: no first-request penalty)."""
        return SimProfile(model=self.model, time_scale=float(self.time_scale), jitter_cv=float(self.jitter_cv),
                          compile_s=0.0, run_to_run_noise=float(self.run_to_run_noise))


@dataclass(frozen=True)
class EngineInputs:
    """What upstream's serving layer hands the engine for one request, as plain values."""

    prompt: str
    seed: int | None = None
    width: int | None = None
    height: int | None = None
    num_frames: int | None = None
    fps: float | None = None
    num_inference_steps: int | None = None
    extra_args: Mapping[str, Any] = field(default_factory=dict)
    images: int = 0
    videos: int = 0
    audios: int = 0
    reference_digests: tuple[str, ...] = ()


@dataclass(frozen=True)
class EngineOutput:
    """One finished request: the MP4's bytes and what the engine reports with them."""

    mp4: bytes
    width: int
    height: int
    frames: int
    audio_samples: int
    stage_durations: dict[str, float]
    peak_memory_mb: float


def file_digest(path: str | os.PathLike[str], kind: str) -> str:
    """``kind:sha256`` of one persisted reference, as the simulator names an uploaded reference."""
    digest = hashlib.sha256()
    with open(path, "rb") as fh:
        while chunk := fh.read(1 << 20):
            digest.update(chunk)
    return f"{kind}:{digest.hexdigest()}"


def output_shape(inputs: EngineInputs) -> Shape:
    """What H3 renders for these inputs, or :class:`H3Refusal` / :class:`H3Crash` as the pipeline fails.

    Raises
    ------
    H3Refusal
        H3's own checks refuse the request (a 400 with upstream's message).
    H3Crash
        ``extra_args["h3bench_fail"] == "oom"``.
    """
    failure = inputs.extra_args.get(FAIL_KEY)
    if failure is not None:
        if failure != "oom":
            raise H3Refusal(f"extra_params.{FAIL_KEY} must be 'oom', got {failure!r}")
        raise H3Crash(_OOM_MESSAGE)
    try:
        return resolve_engine_shape(
            inputs.extra_args, fps=inputs.fps, num_frames=inputs.num_frames, width=inputs.width, height=inputs.height,
            images=inputs.images, videos=inputs.videos, audios=inputs.audios,
        )
    except GenerationError as exc:
        raise H3Refusal(str(exc), status_code=exc.status_code) from None


def _content(inputs: EngineInputs, shape: Shape, seed: int) -> ContentSpec:
    key = content_key(seed=seed, prompt=inputs.prompt, reference_digests=inputs.reference_digests,
                      width=shape.width, height=shape.height, frames=shape.frames)
    return ContentSpec(shape.width, shape.height, shape.frames, audio_sample_count(shape.frames), key)


def _stage_durations(plan: StagePlan, slept: Sequence[float]) -> dict[str, float]:
    """The profiler's keys over the seconds actually slept (encode_prompt, media, diffuse, video VAE, audio VAE)."""
    prompt_s, media_s, diffuse_s, video_s, audio_s = slept
    return {
        STAGE_PREFIX + "encode_prompt": prompt_s,
        STAGE_PREFIX + "_encode_local_media": media_s,
        STAGE_PREFIX + "diffuse": diffuse_s,
        STAGE_PREFIX + "decode": video_s + audio_s,
        STAGE_PREFIX + "video_vae.decode_latent": video_s,
        STAGE_PREFIX + "audio_vae.decode_latent": audio_s,
    }


def _sleep(seconds: float, cancel: threading.Event | None) -> float:
    start = time.perf_counter()
    if cancel is not None:
        if cancel.wait(seconds):
            raise InterruptedError("request aborted")
    elif seconds > 0:
        time.sleep(seconds)
    return time.perf_counter() - start


def run_engine_request(
    inputs: EngineInputs, settings: StandInSettings, rng: np.random.Generator, *,
    cancel: threading.Event | None = None,
) -> EngineOutput:
    """Check, sleep the stages, and render one request; blocking (upstream's app runs it in a thread).

    The MP4 is rendered while the stages sleep, as the simulator's rank 0
    does, so the request takes the modelled time whenever rendering fits in
    it. Without a seed one is drawn, as upstream's pipeline does.

    Raises
    ------
    H3Refusal, H3Crash
        As :func:`output_shape`.
    InterruptedError
        ``cancel`` was set (the request was aborted).
    """
    shape = output_shape(inputs)
    seed = inputs.seed if inputs.seed is not None else int(rng.integers(2**32))
    spec = _content(inputs, shape, seed)
    profile = settings.profile()
    plan = profile.plan(shape.frames, rng, num_inference_steps=inputs.num_inference_steps)
    perturbation = Perturbation(run_to_run_noise=settings.run_to_run_noise, process_seed=settings.process_seed)
    with tempfile.TemporaryDirectory(prefix="h3bench-standin-") as scratch:
        path = Path(scratch) / "out.mp4"
        rendered: dict[str, Any] = {}

        def work() -> None:
            try:
                rendered["info"] = render(path, spec, perturbation, abort=cancel)
            except BaseException as exc:  # handed to the caller's thread
                rendered["error"] = exc

        renderer = threading.Thread(target=work, name="standin-render", daemon=True)
        renderer.start()
        try:
            _sleep(plan.preprocess_s, cancel)
            slept = [
                _sleep(plan.encode_prompt_s, cancel),
                _sleep(plan.encode_media_s, cancel),
                _sleep(sum(plan.step_s), cancel),
                _sleep(plan.video_decode_s, cancel),
                _sleep(plan.audio_decode_s, cancel),
            ]
            _sleep(plan.post_decode_s + plan.mux_s, cancel)
        finally:
            renderer.join()  # an aborted request's render stops at its next frame (cancel is set)
        if "error" in rendered:
            raise RuntimeError(f"rendering the stand-in's MP4 failed: {rendered['error']}") from rendered["error"]
        info = rendered["info"]
        mp4 = path.read_bytes()
    return EngineOutput(
        mp4=mp4, width=shape.width, height=shape.height, frames=info.frames, audio_samples=info.audio_samples,
        stage_durations=_stage_durations(plan, slept), peak_memory_mb=plan.peak_memory_mb,
    )
