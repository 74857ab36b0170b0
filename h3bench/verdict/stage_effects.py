"""Which stage moved: the paired AB/BA effect of a candidate on every part of the E2E, with bounds.

Attribution, never a verdict
----------------------------
The speed verdict rests on E2E alone (:mod:`h3bench.stats.speed`). This module
answers a different question, "where did the time go?", for each part of a
request that some clock measures:

- the client's: ``e2e``, ``client:upload``, ``client:download``,
  ``client:server_wait`` and ``client:queue`` (:mod:`h3bench.run.phases`);
- the pipeline profiler's stages, ``profiler:<method>``
  (``profiler:diffuse``, ``profiler:decode``, ...), and
  ``dit_per_forward``, the DiT time per forward: ``diffuse`` over H3's
  ``num_inference_steps - 1`` forwards (its denoise loop runs
  ``len(sigmas) - 1`` steps, vLLM-Omni's ``models/minimax_h3/denoise_loop.py``),
  which is the 950PR recipe's "DiT per-step" (730.22 s / 49 = 14.90 s);
- the server's ``/metrics`` histograms, under their upstream names
  (:mod:`h3bench.run.server_metrics`; ``vllm_omni:diffusion_exec_per_step_s``
  is upstream's per-step figure, exec over the 50 configured steps);
- ``server:generation``, the generation time upstream's benchmark divides
  by the video's duration for its RTF (below);
- ``derived:mux+transfer``: E2E minus the profiler's top-level stages
  (:func:`h3bench.h3.mux_and_transfer_s`), derived, not measured.

Each part gets the estimate E2E gets: per block the median over its measured
requests, per adjacent AB/BA pair the ratio ``median(B) / median(A)``, and
the geometric mean of the k ratios with t bounds on their logs
(:func:`h3bench.stats.intervals.t_bounds`), plus the paired difference in seconds
with t bounds, which stays defined where a part is zero (H3's
``diffusion_preprocess_s``) or can be negative (a queue read from whole-second
timestamps). The level is this module's own, :data:`ATTRIBUTION_LEVEL` per
bound (two-sided 95 %), per part and duration, *not* adjusted for the number
of parts: in an A/A comparison each part's interval excludes 1 in about 5 %
of campaigns, and with a dozen parts one of them often does
(tests_unit/verdict/test_stage_effects.py measures both). A part's interval that
excludes 1 says where a change shows; it never makes a candidate faster.

Real-time factor
----------------
Per arm, the median over measured requests of E2E over the output video's
duration (``rtf_e2e``), and, as vLLM-Omni's benchmark reports it
(``benchmarks/patch/patch.py``, ``_apply_video_metrics_from_payload``), the
server's generation time over the duration (``rtf_server``): the largest
``*_gen_ms`` stage duration, else ``inference_time_s``. Upstream falls back
to the client's latency only without either; its duration is the job's
``duration_s``, else ``num_frames / fps`` (H3: 124 / 24 s at 5 s).
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal

import numpy as np
from scipy.special import stdtrit

from h3bench.errors import UsageError
from h3bench.h3 import mux_and_transfer_s
from h3bench.run.phases import RequestPhases
from h3bench.run.server_metrics import NUM_INFERENCE_STEPS, RequestMetrics
from h3bench.stats.speed import intervals
from h3bench.verdict.reconcile import stage_seconds

__all__ = [
    "ATTRIBUTION_LEVEL",
    "DIT_PER_FORWARD",
    "E2E",
    "MUX",
    "SERVER_GENERATION",
    "BlockParts",
    "PartEffect",
    "RealTimeFactor",
    "StageEffects",
    "dit_forwards",
    "paired_bounds",
    "part_source",
    "request_parts",
    "request_parts_from_record",
    "stage_effects",
]

ATTRIBUTION_LEVEL = 0.025  # one-sided, each bound: two-sided 95 % intervals
E2E = "e2e"
DIT_PER_FORWARD = "dit_per_forward"
MUX = "derived:mux+transfer"
SERVER_GENERATION = "server:generation"
_ORDER = (E2E, "client:upload", "client:queue", "client:server_wait", "profiler:encode_prompt",
          "profiler:_encode_local_media", "profiler:diffuse", DIT_PER_FORWARD, "profiler:decode",
          "profiler:video_vae.decode_latent", "profiler:audio_vae.decode_latent", "profiler:post_decode", MUX,
          "client:download", SERVER_GENERATION)


def dit_forwards(steps: int) -> int:
    """DiT forwards of an H3 request of ``steps`` configured steps: ``steps - 1`` (50 → 49)."""
    return steps - 1


def part_source(part: str) -> str:
    """``client``, ``profiler``, ``metrics``, ``server`` or ``derived``: which clock measured a part."""
    if part in (E2E,) or part.startswith("client:"):
        return "client"
    if part.startswith("profiler:") or part == DIT_PER_FORWARD:
        return "profiler"
    if part.startswith("derived:"):
        return "derived"
    if part.startswith("server:"):
        return "server"
    return "metrics"


def _generation_s(stage_durations: Mapping[str, float], inference_time_s: float | None) -> float | None:
    """Upstream's benchmark's generation time: the largest ``*_gen_ms`` stage (milliseconds), else inference_time_s."""
    gen = [float(v) for k, v in stage_durations.items() if str(k).endswith("_gen_ms")]
    if gen and max(gen) > 0:
        return max(gen) / 1000.0
    return inference_time_s if inference_time_s is not None and inference_time_s > 0 else None


def request_parts(*, e2e_s: float, stage_durations: Mapping[str, float], metrics: RequestMetrics | None = None,
                  phases: RequestPhases | None = None, requested_steps: int | None = None,
                  inference_time_s: float | None = None) -> dict[str, float]:
    """Every part of one request that some clock measured, in seconds (see the module docstring)."""
    parts = {E2E: float(e2e_s)}
    stages = stage_seconds(stage_durations)
    parts.update({f"profiler:{method}": value for method, value in stages.items()})
    if "diffuse" in stages and requested_steps is not None and dit_forwards(requested_steps) > 0:
        parts[DIT_PER_FORWARD] = stages["diffuse"] / dit_forwards(requested_steps)
    mux = mux_and_transfer_s(e2e_s, stage_durations)
    if mux is not None:
        parts[MUX] = mux
    generation = _generation_s(stage_durations, inference_time_s)
    if generation is not None:
        parts[SERVER_GENERATION] = generation
    if metrics is not None and metrics.available:
        for name in metrics.histograms:
            value = metrics.seconds(name)
            if value is not None and name != NUM_INFERENCE_STEPS:
                parts[name] = value
    if phases is not None:
        for key in ("upload_s", "download_s", "server_wait_s", "queue_s"):
            value = getattr(phases, key)
            if value is not None:
                parts[f"client:{key.removesuffix('_s')}"] = float(value)
    return parts


def request_parts_from_record(record: Mapping[str, Any], *, requested_steps: int | None) -> dict[str, float]:
    """:func:`request_parts` of a samples.jsonl line: ``e2e_s``, ``stage_durations``, ``inference_time_s``, and
    ``server_metrics`` (:meth:`RequestMetrics.to_dict`) and ``phases`` (:meth:`RequestPhases.to_dict`) when present.
    """
    if record.get("e2e_s") is None:
        raise UsageError(f"sample {record.get('request_id')!r} has no E2E: only successful requests have parts")
    metrics, phases = record.get("server_metrics"), record.get("phases")
    return request_parts(e2e_s=float(record["e2e_s"]), stage_durations=record.get("stage_durations") or {},
                         metrics=RequestMetrics.from_dict(metrics) if metrics else None,
                         phases=RequestPhases.from_dict(phases) if phases else None,
                         requested_steps=requested_steps, inference_time_s=record.get("inference_time_s"))


@dataclass(frozen=True)
class BlockParts:
    """One block's measured requests, each as :func:`request_parts`; ``role`` A is the control, B the candidate."""

    role: Literal["A", "B"]
    requests: tuple[Mapping[str, float], ...]

    def median(self, part: str) -> float | None:
        values = [r[part] for r in self.requests if part in r and math.isfinite(r[part])]
        return statistics.median(values) if values else None


@dataclass(frozen=True)
class PartEffect:
    """One part's paired effect; ratio fields None where a block median is not positive, all None when k < 2."""

    part: str
    source: str
    k: int  # AB/BA pairs
    baseline_median_s: float | None  # pooled over the arm's measured requests
    candidate_median_s: float | None
    ratio: float | None
    ratio_low: float | None
    ratio_high: float | None
    difference_s: float | None  # mean paired difference of block medians, candidate - baseline
    difference_low_s: float | None
    difference_high_s: float | None
    note: str = ""

    @property
    def moved(self) -> bool | None:
        """Whether the interval excludes no change (the ratio's 1, else the difference's 0); None without one."""
        if self.ratio_low is not None and self.ratio_high is not None:
            return not self.ratio_low <= 1.0 <= self.ratio_high
        if self.difference_low_s is not None and self.difference_high_s is not None:
            return not self.difference_low_s <= 0.0 <= self.difference_high_s
        return None

    def to_dict(self) -> dict[str, Any]:
        return {**self.__dict__, "moved": self.moved}


@dataclass(frozen=True)
class RealTimeFactor:
    """One arm's seconds of waiting per second of output video (medians over its measured requests)."""

    arm: Literal["A", "B"]
    n: int
    video_duration_s: float
    rtf_e2e: float
    rtf_server: float | None  # upstream's benchmark: server generation time / duration

    def to_dict(self) -> dict[str, Any]:
        return dict(self.__dict__)


@dataclass(frozen=True)
class StageEffects:
    """Every part's paired effect for one candidate at one duration, at :data:`ATTRIBUTION_LEVEL`."""

    level: float
    statement: str
    parts: tuple[PartEffect, ...]
    rtf: tuple[RealTimeFactor, ...]

    def part(self, name: str) -> PartEffect:
        for effect in self.parts:
            if effect.part == name:
                return effect
        raise KeyError(name)

    def to_dict(self) -> dict[str, Any]:
        return {"level": self.level, "statement": self.statement,
                "parts": {p.part: p.to_dict() for p in self.parts},
                "rtf": {"baseline" if r.arm == "A" else "candidate": r.to_dict() for r in self.rtf}}


def paired_bounds(medians: np.ndarray, order: str, level: float = ATTRIBUTION_LEVEL
                  ) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Ratio (geometric mean, lower, upper) and difference (mean, lower, upper) of ``(..., n_blocks)`` block medians.

    Vectorised over leading axes, for the simulation tests. ``order`` is made
    of AB/BA pairs; ratios need positive medians (NaN otherwise). Both
    intervals are t intervals with k - 1 degrees of freedom, each bound
    one-sided at ``level``; k ≥ 2.
    """
    x = np.asarray(medians, dtype=float)
    with np.errstate(divide="ignore", invalid="ignore"):
        logs = np.where(x > 0, np.log(np.where(x > 0, x, 1.0)), np.nan)
    ratio, low, high, _ = intervals.t_bounds(intervals.paired_log_ratios(logs, order), level, level)
    d = intervals.paired_log_ratios(x, order)  # the same pairing, on seconds: candidate - baseline
    k = d.shape[-1]
    half = float(stdtrit(k - 1, 1 - level)) * d.std(axis=-1, ddof=1) / math.sqrt(k)
    mean = d.mean(axis=-1)
    return ratio, low, high, mean, mean - half, mean + half


def _paired(blocks: Sequence[BlockParts]) -> list[BlockParts]:
    """The blocks that form pairs at positions (1, 2), (3, 4), ... as :func:`h3bench.stats.speed.paired_block_ratios`."""
    kept = list(blocks[: len(blocks) // 2 * 2])
    for i in range(0, len(kept), 2):
        if kept[i].role == kept[i + 1].role:
            raise UsageError(f"blocks {i + 1} and {i + 2} are {kept[i].role * 2}, not an AB or BA pair")
    return kept


def _none_if_nan(value: Any) -> float | None:
    value = float(value)
    return None if math.isnan(value) else value


def _effect(part: str, blocks: Sequence[BlockParts], paired: Sequence[BlockParts], level: float) -> PartEffect:
    def pooled(role: str) -> float | None:
        values = [r[part] for b in blocks if b.role == role for r in b.requests if part in r]
        return statistics.median(values) if values else None

    base, cand = pooled("A"), pooled("B")
    k = len(paired) // 2
    medians = [b.median(part) for b in paired]
    if any(m is None for m in medians):
        missing = sum(m is None for m in medians)
        return PartEffect(part, part_source(part), k, base, cand, None, None, None, None, None, None,
                          f"not measured in {missing} of the {len(paired)} paired blocks: no estimate")
    if k < 2:
        return PartEffect(part, part_source(part), k, base, cand, None, None, None, None, None, None,
                          "n too small: fewer than two AB/BA pairs give no interval")
    order = "".join(b.role for b in paired)
    ratio, low, high, diff, dlow, dhigh = paired_bounds(np.array(medians, dtype=float), order, level)
    note = "" if math.isfinite(float(ratio)) else "a block median is not positive: no ratio, the difference stands"
    return PartEffect(part, part_source(part), k, base, cand, _none_if_nan(ratio), _none_if_nan(low),
                      _none_if_nan(high), float(diff), float(dlow), float(dhigh), note)


def _rtf(blocks: Sequence[BlockParts], role: Literal["A", "B"], video_duration_s: float) -> RealTimeFactor | None:
    requests = [r for b in blocks if b.role == role for r in b.requests]
    if not requests:
        return None
    server = [r[SERVER_GENERATION] / video_duration_s for r in requests if SERVER_GENERATION in r]
    return RealTimeFactor(role, len(requests), video_duration_s,
                          statistics.median(r[E2E] / video_duration_s for r in requests),
                          statistics.median(server) if server else None)


def stage_effects(blocks: Sequence[BlockParts], *, video_duration_s: float,
                  level: float = ATTRIBUTION_LEVEL) -> StageEffects:
    """Every part's paired effect, and each arm's real-time factor, for one candidate's blocks in schedule order.

    ``blocks`` are the blocks that ran without failure, in order, as
    :meth:`h3bench.session.results.Review.speed` takes them, so the ``e2e`` part's
    ratio is the speed estimate's geometric mean. A trailing unpaired block
    is left out of the pairs (its requests still count in the arm's median).
    ``video_duration_s`` is the output's duration (frames / fps).
    """
    if video_duration_s <= 0:
        raise UsageError(f"the video's duration must be positive, got {video_duration_s}")
    if not 0 < level < 0.5:
        raise UsageError(f"the attribution level must be in (0, 0.5), got {level}")
    paired = _paired(blocks)
    seen = dict.fromkeys(part for b in blocks for r in b.requests for part in r)
    names = [p for p in _ORDER if p in seen] + sorted(p for p in seen if p not in _ORDER)
    effects = tuple(_effect(name, blocks, paired, level) for name in names)
    statement = (f"attribution, not a verdict: per part, two-sided {1 - 2 * level:.0%} t intervals over k AB/BA pairs "
                 f"of block medians, not adjusted for the {len(effects)} parts shown (an unchanged part's interval "
                 f"excludes 1 in about {2 * level:.0%} of campaigns); the speed verdict rests on E2E alone")
    rtf = tuple(r for role in ("A", "B") if (r := _rtf(blocks, role, video_duration_s)) is not None)
    return StageEffects(level, statement, effects, rtf)
