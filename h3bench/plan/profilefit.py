"""A simulator profile fitted from sealed bundles: ``h3bench sim fit BUNDLE... --out PROFILE.toml``.

What a bundle measured of one arm, per duration, becomes the simulator's
anchors (:class:`~h3bench.sim.profile.SimProfile`): the median of each stage
the profiler keys (``encode_prompt``, ``_encode_local_media``, ``diffuse``
over its forwards, ``decode`` and the audio VAE's share of it), the spread of
the DiT (``jitter_cv``), the first request against the steady ones (a faster
one is a cold card, ``thermal_boost``; a slower one a first-request compile),
and the start-up's weight load and start-up compile from the lifecycle lines'
``startup_phases``. Seconds are divided by ``time_scale`` (1: the profile's
seconds are the bundle's). Stages without a profiler key (reference
preprocessing, the worker-to-server handoff, muxing) cannot be told apart: their
sum, E2E less the keyed stages, is split between ``preprocess_s`` and ``mux_s`` in
the default profile's ratio, and ``handoff_share`` stays 0. The profile is written
as a versioned TOML document whose ``[sim]`` table ``h3bench sim --profile FILE
--profile-table sim`` reads.
"""

from __future__ import annotations

import statistics
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from h3bench.course.schedule import Schedule
from h3bench.errors import UsageError
from h3bench.evidence import BundleReader
from h3bench.h3 import STAGE_PREFIX
from h3bench.run.records import BlockResult, load_results
from h3bench.runspec import BASELINE, parse_runspec

__all__ = ["PROFILE_VERSION", "FitResult", "fit_profile", "profile_toml"]

PROFILE_VERSION = 1
_DURATIONS = (5.0, 15.0)  # the profile's two anchors
_KEYED = {"text_encode_s": "encode_prompt", "media_encode_s": "_encode_local_media", "decode_s": "decode"}
_AUDIO = "audio_vae.decode_latent"
_DEFAULT_SPLIT = 0.41 / (0.41 + 0.28)  # preprocess : mux in the 950PR 5 s row


@dataclass(frozen=True)
class FitResult:
    """The fitted ``[sim]`` table, and what it came from."""

    table: dict[str, Any]
    source: str


def _median(values: Iterable[float | None]) -> float | None:
    found = [v for v in values if v is not None]
    return statistics.median(found) if found else None


def _stage(sample_stages: dict[str, float], name: str) -> float | None:
    return sample_stages.get(STAGE_PREFIX + name)


def _results(paths: Sequence[Path], arm: str) -> list[tuple[int, BlockResult]]:
    """(forwards per request, block) of every finished block of ``arm`` in the bundles."""
    out = []
    for path in paths:
        bundle = BundleReader.open(path)
        spec = parse_runspec(bundle.manifest.spec, source=f"{path}: manifest")
        if arm not in spec.arms:
            raise UsageError(f"{path}: its spec has no arm {arm!r} (arms: {', '.join(spec.arms)})")
        forwards = (spec.workload.steps or 50) - 1
        blocks = tuple(b for b in Schedule(spec).blocks if b.arm == arm)
        out += [(forwards, r) for r in load_results(bundle, blocks).values() if r.ok]
    return out


def fit_profile(paths: Sequence[Path], *, arm: str = BASELINE, time_scale: float = 1.0) -> FitResult:
    """Fit ``arm``'s profile from the sealed bundles at ``paths``; UsageError when they lack a 5 s and a 15 s block."""
    if not time_scale > 0:
        raise UsageError(f"--time-scale must be positive, got {time_scale!r}")
    results = _results(paths, arm)
    table: dict[str, Any] = {"time_scale": time_scale}
    anchors: dict[str, list[float]] = {}
    cvs, first_ratios = [], []
    for duration in _DURATIONS:
        found = [(f, r) for f, r in results if r.block.duration == duration]
        samples = [(f, s) for f, r in found for s in r.measured if s.ok and s.e2e_s is not None]
        if not samples:
            raise UsageError(f"no measured request of arm {arm!r} at {duration:g} s in {len(paths)} bundle(s): "
                             "a profile's anchors need both 5 s and 15 s")
        diffuse = [d / f for f, s in samples if (d := _stage(s.stage_durations, "diffuse")) is not None]
        step = _median(diffuse)
        anchors.setdefault("step_s", []).append((step or 0.0) / time_scale)
        for field, key in _KEYED.items():
            value = _median(_stage(s.stage_durations, key) for _, s in samples) or 0.0
            anchors.setdefault(field, []).append(value / time_scale)
        # Per request, what no key holds (the medians of parts do not add up to the median of the whole).
        rest = max(0.0, _median((s.e2e_s or 0.0) - sum(_stage(s.stage_durations, key) or 0.0
                                                       for key in (*_KEYED.values(), "diffuse"))
                                for _, s in samples) or 0.0)
        anchors.setdefault("preprocess_s", []).append(rest * _DEFAULT_SPLIT / time_scale)
        anchors.setdefault("mux_s", []).append(rest * (1 - _DEFAULT_SPLIT) / time_scale)
        audio = [a / d for _, s in samples if (a := _stage(s.stage_durations, _AUDIO)) is not None
                 and (d := _stage(s.stage_durations, "decode"))]
        if audio:
            table["audio_decode_share"] = round(statistics.median(audio), 5)
        if len(diffuse) > 1 and step:
            cvs.append(statistics.stdev(diffuse) / statistics.mean(diffuse))
        for forwards, result in found:
            warm = [w for w in result.warmups if w.ok and _stage(w.stage_durations, "diffuse") is not None]
            steady = _median(d for s in result.measured if (d := _stage(s.stage_durations, "diffuse")) is not None)
            if warm and steady:
                first_ratios.append((_stage(warm[0].stage_durations, "diffuse") or 0.0, steady, forwards))
    table.update({name: [round(a, 4) for a in values] for name, values in anchors.items()})
    if cvs:
        table["jitter_cv"] = round(min(0.99, statistics.median(cvs)), 4)
    _first_request(table, first_ratios, time_scale)
    _start_up(table, results, time_scale)
    source = f"fitted by h3bench sim fit from {len(paths)} bundle(s), arm {arm}: " + ", ".join(str(p) for p in paths)
    return FitResult(table, source)


def _first_request(table: dict[str, Any], ratios: list[tuple[float, float, int]], time_scale: float) -> None:
    """A first request faster than steady is a cold card; a slower one pays a compile in its first step."""
    if not ratios:
        return
    ratio = statistics.median(first / steady for first, steady, _ in ratios)
    if ratio < 1:
        table["thermal_boost"] = round(1 - ratio, 4)
    else:
        extra = statistics.median(first - steady for first, steady, _ in ratios)
        table.update(compile="first_request", compile_s=round(extra / time_scale, 4))


def _start_up(table: dict[str, Any], results: list[tuple[int, BlockResult]], time_scale: float) -> None:
    phases = [p for _, r in results if (p := r.lifecycle.startup_phases) is not None]
    load = _median(p.weight_load_s for p in phases if p.weight_load_s is not None)
    if load is not None:
        table["load_s"] = round(load / time_scale, 4)
    compiled = _median(p.compile_s for p in phases if p.compile_s is not None)
    if compiled is not None and table.get("compile") != "first_request":
        table.update(compile="startup", compile_s=round(compiled / time_scale, 4))


def profile_toml(result: FitResult) -> str:
    """The versioned profile document: ``version``, ``source`` and the ``[sim]`` table."""
    def value(v: Any) -> str:
        if isinstance(v, list):
            return "[" + ", ".join(value(x) for x in v) + "]"
        if isinstance(v, str):
            return '"' + v.replace("\\", "\\\\").replace('"', '\\"') + '"'
        return repr(v)

    lines = ["# A simulator profile fitted from evidence; read it with h3bench sim --profile FILE --profile-table sim",
             f"version = {PROFILE_VERSION}", f"source = {value(result.source)}", "", "[sim]"]
    lines += [f"{name} = {value(v)}" for name, v in sorted(result.table.items())]
    return "\n".join(lines) + "\n"
