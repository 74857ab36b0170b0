"""The simulator's arm profile: latency model, quality perturbations, failure injection.

A :class:`SimProfile` describes how one simulated arm behaves. It is a frozen
pydantic model that forbids unknown keys, so it loads from a TOML table (the
RunSpec embeds it as ``[arms.<name>.sim]``), from ``h3bench sim --profile
FILE.toml`` and from one command-line flag per field.

Latency model
-------------
Shaped like the ref2va rows of the Ascend 950PR stage table
(the recipe MiniMax-H3-NPU-950PR.md, vLLM-Omni 0.28.0, 1344x768, 49 DiT
steps). Every ``*_s`` pair gives a stage's modelled seconds at the table's two
shapes, 5 s (124 frames, latent T = 37) and 15 s (362 frames, T = 107); the
defaults are the lossless row, and a faster arm copies the lossy one.
Stages scale linearly with the latent T between and beyond the two anchors,
except the DiT step, which goes as ``a*T + b*T**2`` (attention is quadratic in
the tokens; the table's 14.9 s → 119.33 s per step is 8x for 2.9x the frames).

Each request sleeps ``modelled * time_scale`` per stage, so a client measures
it, and every stage draws an independent log-normal factor with mean 1 and
coefficient of variation ``jitter_cv`` (all DiT steps share one draw).
``compile`` says where ``compile_s`` is paid: nowhere (the default, as
vLLM-Omni 0.30.0 on NPU, which compiles nothing in the diffusion path), in
the first request's first step (regional compilation on a GPU), or in every
worker's start-up. The table's ref-video and
ref-audio encode columns map onto ``_encode_local_media`` and its VAE decode
onto ``decode`` (vLLM-Omni's ``diffusion_pipeline_profiler.py`` keys); ref
preprocessing, ``post_decode`` and the CPU MP4 have no key in request mode
and appear only in E2E.
"""

from __future__ import annotations

import dataclasses
import hashlib
import math
import os
import tomllib
from collections.abc import Mapping
from pathlib import Path
from typing import Annotated, Any, Literal

import numpy as np
from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    StrictBool,
    StrictFloat,
    StrictInt,
    StrictStr,
    ValidationError,
    model_validator,
)

from h3bench.errors import RunSpecError
from h3bench.h3 import frame_count, latent_frames
from h3bench.sim.content import Perturbation
from h3bench.sim.stageplan import StagePlan

__all__ = [
    "SimProfile",
    "StagePlan",
    "load_profile",
    "parse_profile",
]


_T5 = latent_frames(frame_count(5))  # 37
_T15 = latent_frames(frame_count(15))  # 107
# Not in the recipe table: post_decode (the table's 0.001 s).
_POST_DECODE_S = 0.001

_NonNegative = Annotated[StrictFloat, Field(ge=0)]
_Anchors = tuple[_NonNegative, _NonNegative]
_Nth = Annotated[StrictInt, Field(ge=1)] | None


class SimProfile(BaseModel):
    """One simulated arm. Modelled seconds are multiplied by ``time_scale``; wall seconds are not."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    model: StrictStr = Field("MiniMaxAI/MiniMax-H3", description="served model name (GET /v1/models, X-Model)")
    workers: Annotated[StrictInt, Field(ge=1, le=16)] = Field(2, description="worker processes (one per device)")

    # Latency model, modelled seconds at (5 s, 15 s); defaults: 950PR ref2va lossless.
    time_scale: _NonNegative = Field(0.002, description="factor from modelled to slept seconds")
    jitter_cv: Annotated[StrictFloat, Field(ge=0, lt=1)] = Field(0.02, description="coefficient of variation per stage")
    steps: _Nth = Field(None, description="DiT forwards per request; default num_inference_steps - 1, or 49")
    step_s: _Anchors = Field((14.9, 119.33), description="seconds per DiT forward at 5 s and 15 s")
    text_encode_s: _Anchors = Field((1.16, 2.54), description="encode_prompt at 5 s and 15 s")
    media_encode_s: _Anchors = Field((8.28, 22.30), description="_encode_local_media (ref video + audio)")
    decode_s: _Anchors = Field((5.12, 13.34), description="VAE decode at 5 s and 15 s")
    # Not in the 950PR table; 2.4-2.5 % measured on 4x B300 (vLLM-Omni #5750).
    audio_decode_share: Annotated[StrictFloat, Field(ge=0, lt=1)] = Field(
        0.05, description="the audio VAE's share of decode")
    preprocess_s: _Anchors = Field((0.41, 0.81), description="reference preprocessing (no profiler key)")
    mux_s: _Anchors = Field((0.28, 0.70), description="CPU MP4 muxing (no profiler key)")
    # vLLM-Omni 0.30.0 compiles nothing in the diffusion path on NPU (platforms/npu/platform.py: no inductor).
    compile: Literal["none", "first_request", "startup"] = Field(
        "none", description="where compile_s is paid: nowhere, in the first request's first step, or at start-up")
    compile_s: _NonNegative = Field(30.0, description="seconds of compilation, where compile puts them")
    load_s: _NonNegative = Field(0.0, description="model load in each worker at startup")
    weights_gib: _NonNegative = Field(3.97, description="resident weights per device, as the load logs them")
    # Weights on local disk or in the page cache (sglang #40230: start-up 55-65 % shorter).
    staged_load_share: Annotated[StrictFloat, Field(gt=0, le=1)] = Field(
        0.4, description="share of load_s a start pays when the harness staged the checkpoint")
    # A cold card runs faster until it heats (the 950PR's first request on an idle card: denoise 9.9 % faster).
    thermal_boost: Annotated[StrictFloat, Field(ge=0, lt=1)] = Field(
        0.0, description="share by which a cold card's first request's DiT is faster than steady")
    thermal_decay: Annotated[StrictFloat, Field(gt=0)] = Field(
        1.0, description="full requests' DiT work over which the cold-card boost decays by a factor e")
    handoff_share: Annotated[StrictFloat, Field(ge=0, lt=1)] = Field(
        0.0, description="share of E2E spent handing the output from the worker to the API server "
                         "(no profiler key; 5.3 percent on the single-card 950PR)")
    peak_memory_gb: _Anchors = Field((23.82, 32.53), description="peak device memory at 5 s and 15 s")

    # Quality perturbations (see h3bench.sim.content.Perturbation).
    video_noise: _NonNegative = Field(0.0, description="Gaussian sigma in 8-bit levels on every frame")
    color_shift: StrictFloat = Field(0.0, description="levels added to red and taken from blue")
    drop_frame: Annotated[StrictInt, Field(ge=0)] | None = Field(None, description="index of a frame left out")
    audio_gain: Annotated[StrictFloat, Field(gt=0)] = Field(1.0, description="factor on the waveform")
    audio_freq_shift_hz: StrictFloat = Field(0.0, description="Hz added to every audio partial")
    audio_truncate: Annotated[StrictInt, Field(ge=0)] = Field(0, description="samples cut from the end")
    run_to_run_noise: _NonNegative = Field(1.0, description="scale of the per-process difference; 0 is bit-exact")
    process_seed: Annotated[StrictInt, Field(ge=0)] | None = Field(
        None, description="seed of jitter and run-to-run noise; default random per process, logged"
    )
    # A campaign that gives the same answers in every run: each block its own seed, none of them drawn.
    block_seed: Annotated[StrictInt, Field(ge=0)] | None = Field(
        None, description="derive each process seed from this and the campaign block's id; excludes process_seed"
    )
    cache_outputs: StrictBool = Field(False, description="cheat: answer repeated requests from a cache at once")
    # A fault that shows only at some seeds: the formal seed can pass while held-out seeds fail.
    degrade_seeds: list[Annotated[StrictInt, Field(ge=0)]] = Field(
        default_factory=list, description="request seeds whose output gets degrade_video_noise")
    degrade_video_noise: _NonNegative = Field(12.0, description="Gaussian sigma added at the degrade_seeds")

    # /metrics: vLLM-Omni's Prometheus histograms (h3bench.sim.metrics), and a server that misreports one stage.
    metrics_endpoint: StrictBool = Field(True, description="serve GET /metrics; off: 404, as a server without it")
    underreport_stage: StrictStr | None = Field(
        None, description="a profiler method (decode, diffuse, ...) or a vllm_omni: histogram the server "
                          "under-reports: its reported seconds are multiplied by underreport_factor")
    underreport_factor: Annotated[StrictFloat, Field(ge=0, lt=1)] = Field(
        0.5, description="factor on the under-reported stage's seconds; 0 leaves it out (a profiler that misses it)")

    # Failure injection.
    startup_error: StrictStr | None = Field(None, description="worker 0 fails at startup with this message")
    # n counts the requests that reach the engine, warmup included (cached answers are not counted).
    fail_request: _Nth = Field(None, description="the n-th generation request fails with HTTP 500")
    crash_request: _Nth = Field(None, description="the last worker dies (SIGKILL) in the middle of the n-th request")
    hang_request: _Nth = Field(None, description="the n-th request never completes")
    worker_ignores_sigterm: StrictBool = Field(False, description="the last worker ignores stop and SIGTERM")
    shutdown_delay_s: _NonNegative = Field(0.0, description="wall seconds slept in the shutdown handler")

    @model_validator(mode="after")
    def _one_seed_source(self) -> SimProfile:
        if self.process_seed is not None and self.block_seed is not None:
            raise ValueError("give process_seed (one seed for every process) or block_seed (one per block), not both")
        return self

    @model_validator(mode="after")
    def _known_stage(self) -> SimProfile:
        if self.underreport_stage is not None:
            from h3bench.sim.metrics import UNDERREPORTABLE

            if self.underreport_stage not in UNDERREPORTABLE:
                raise ValueError(f"underreport_stage must be one of {', '.join(UNDERREPORTABLE)}; "
                                 f"got {self.underreport_stage!r}")
        return self

    def seed_for_block(self, block_id: str) -> int | None:
        """The process seed this profile fixes for a server of ``block_id``; None: draw one at random.

        With ``block_seed``, 63 bits of SHA-256 over it and the block's id (empty
        outside a campaign): distinct blocks get unrelated seeds, and every run of
        the campaign the same ones.
        """
        if self.process_seed is not None:
            return self.process_seed
        if self.block_seed is None:
            return None
        digest = hashlib.sha256(f"{self.block_seed}/{block_id}".encode()).digest()
        return int.from_bytes(digest[:8], "little") >> 1

    def perturbation(self, process_seed: int) -> Perturbation:
        """The content perturbation of this arm, with the process's run-to-run seed."""
        return Perturbation(
            video_noise=self.video_noise,
            color_shift=self.color_shift,
            drop_frame=self.drop_frame,
            audio_gain=self.audio_gain,
            audio_freq_shift_hz=self.audio_freq_shift_hz,
            audio_truncate=self.audio_truncate,
            run_to_run_noise=self.run_to_run_noise,
            process_seed=process_seed,
        )

    def forwards(self, num_inference_steps: int | None = None) -> int:
        """DiT forwards of one request: the profile's ``steps``, else the request's steps less one, else 49."""
        return self.steps or (num_inference_steps - 1 if num_inference_steps else 49)

    def plan(
        self, frames: int, rng: np.random.Generator, *, num_inference_steps: int | None = None, nth: int | None = None,
        warmed: float | None = None,
    ) -> StagePlan:
        """Wall seconds to sleep per stage for one request of ``frames`` frames.

        ``nth``: the request's number in its server process (1: the first, which runs on a card as cold
        as it gets); None: a steady request. ``warmed``: the DiT work the process ran before it, in full
        requests' forwards (default ``nth - 1``): a card heats by the work it does, so a 2-step warmup
        leaves the next request almost as cold as the first, and a first-request compile is paid by the
        first request that runs a forward.
        """
        t = latent_frames(frames)
        forwards = self.forwards(num_inference_steps)
        scale = self.time_scale
        heat = None if nth is None else (nth - 1 if warmed is None else warmed)

        def jittered(seconds: float) -> float:
            return seconds * scale * _lognormal(rng, self.jitter_cv)

        step = _quadratic(self.step_s, t) * scale * _lognormal(rng, self.jitter_cv) * self.thermal_factor(heat)
        steps = [step] * max(forwards, 0)
        if heat == 0 and steps and self.compile == "first_request":
            steps[0] += self.compile_s * scale
        decode = jittered(_linear(self.decode_s, t))
        engine = StagePlan(
            preprocess_s=jittered(_linear(self.preprocess_s, t)),
            encode_prompt_s=jittered(_linear(self.text_encode_s, t)),
            encode_media_s=jittered(_linear(self.media_encode_s, t)),
            step_s=tuple(steps),
            video_decode_s=decode * (1 - self.audio_decode_share),
            audio_decode_s=decode * self.audio_decode_share,
            post_decode_s=_POST_DECODE_S * scale,
            mux_s=jittered(_linear(self.mux_s, t)),
            peak_memory_mb=_linear(self.peak_memory_gb, t) * 1024.0,
        )
        # The handoff is a share of the whole E2E: share / (1 - share) of the rest.
        handoff = engine.total_s * self.handoff_share / (1 - self.handoff_share)
        return dataclasses.replace(engine, handoff_s=handoff)

    def thermal_factor(self, warmed: float | None) -> float:
        """The factor on the DiT step after ``warmed`` full requests' work: 1 - boost·e^(-warmed/decay); 1 steady."""
        if warmed is None or not self.thermal_boost:
            return 1.0
        return 1.0 - self.thermal_boost * math.exp(-warmed / self.thermal_decay)


def _lognormal(rng: np.random.Generator, cv: float) -> float:
    """A log-normal factor with mean 1 and coefficient of variation ``cv``."""
    if cv == 0:
        return 1.0
    sigma2 = math.log1p(cv * cv)
    return float(rng.lognormal(-sigma2 / 2, math.sqrt(sigma2)))


def _linear(anchors: tuple[float, float], t: int) -> float:
    """Through (T=37, anchors[0]) and (T=107, anchors[1]), floored at 0."""
    at5, at15 = anchors
    return max(0.0, at5 + (at15 - at5) * (t - _T5) / (_T15 - _T5))


def _quadratic(anchors: tuple[float, float], t: int) -> float:
    """``a*T + b*T**2`` through both anchors (no constant: no tokens, no work), floored at 0."""
    at5, at15 = anchors
    det = _T5 * _T15**2 - _T15 * _T5**2
    a = (at5 * _T15**2 - at15 * _T5**2) / det
    b = (_T5 * at15 - _T15 * at5) / det
    return max(0.0, a * t + b * t * t)


def _field_path(loc: tuple[int | str, ...]) -> str:
    return ".".join(str(part) for part in loc)


def parse_profile(data: Mapping[str, Any], *, source: str) -> SimProfile:
    """Validate a mapping (a TOML table, or flags) into a :class:`SimProfile`.

    Raises
    ------
    RunSpecError
        With the offending field in ``field_path`` and ``source`` naming the origin.
    """
    try:
        return SimProfile.model_validate(dict(data))
    except ValidationError as exc:
        errors = exc.errors()
        lines = [f"{_field_path(e['loc']) or '(profile)'}: {e['msg']} (got {e.get('input')!r})" for e in errors]
        raise RunSpecError(
            f"{source}: invalid simulator profile: " + "; ".join(lines),
            field_path=_field_path(errors[0]["loc"]),
            source=source,
        ) from exc


def load_profile(path: str | os.PathLike[str], table: str | None = None) -> SimProfile:
    """Read a profile from a TOML file: its top level, or the dotted ``table`` (``arms.baseline.sim``)."""
    path = Path(path)
    try:
        data: Any = tomllib.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError) as exc:
        raise RunSpecError(f"cannot read simulator profile {path}: {exc}", source=str(path)) from exc
    except tomllib.TOMLDecodeError as exc:
        raise RunSpecError(f"{path}: TOML syntax error: {exc}", source=str(path)) from exc
    for part in table.split(".") if table else ():
        if not isinstance(data, dict) or part not in data:
            raise RunSpecError(f"{path}: no table [{table}]", field_path=table or "", source=str(path))
        data = data[part]
    if not isinstance(data, dict):
        raise RunSpecError(f"{path}: [{table}] is not a table", field_path=table or "", source=str(path))
    return parse_profile(data, source=f"{path}" + (f" [{table}]" if table else ""))
