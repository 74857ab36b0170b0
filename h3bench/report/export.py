"""A campaign's results in the formats dashboards and CI benchmark tools read: one record set, three writers.

:func:`export_of` turns the verdict a run wrote (``verdict.json``, read,
never recomputed) into :class:`Export`: one :class:`ExportRecord` per
candidate and duration, each carrying the bundle's seal (its ``final.json``
SHA-256) and the spec id, so a number on a dashboard leads back to the
evidence that ``h3bench verify BUNDLE --expect SEAL`` checks. The writers:

- ``json``: h3bench's own, the :class:`Export` itself (its JSON Schema ships
  as ``h3bench/data/schemas/export.schema.json``);
- ``bmf``: Bencher Metric Format (https://bencher.dev/docs/reference/bencher-metric-format):
  ``{benchmark: {measure: {value, lower_value, upper_value}}}``. A benchmark
  is ``<spec name>@<spec id[:12]>/<workload marker>/<candidate>`` (bundles
  of different spec ids are never one series). Measures: ``ratio``
  (candidate/control with the verdict's bounds), ``device-hours`` and each
  quality gate's worst finite value; and under ``.../<candidate>/<arm>``,
  ``latency``: each arm's median E2E in nanoseconds (Bencher's built-in
  measure) over the series' blocks. Each metric also carries ``h3bench_final_sha256`` and
  ``h3bench_spec_id``: Bencher's schema allows further keys and its reader
  (``JsonNewMetric``: value, lower_value, upper_value) ignores them. Its
  schema (https://bencher.dev/bmf.json) takes numbers only, so a bound the
  verdict left unbounded is left out and named in ``h3bench_unbounded``. A
  shard's benchmarks carry the shard (``<spec>@<id>/shard-1-of-2/...``): one
  host's share is never charted as the campaign;
- ``github-benchmark``: github-action-benchmark's ``customSmallerIsBetter``,
  a list of ``{name, unit, value, range, extra}``; only figures where smaller
  is better (the ratio, E2E, device-hours, LPIPS), ``extra`` naming the
  verdict, the seal and the spec id.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from h3bench.evidence.codec import to_json
from h3bench.verdict.verdicts import CandidateVerdict, GateValue, VerdictDocument, key_marker

__all__ = ["FORMATS", "FORMAT_VERSION", "ArmRecord", "Export", "ExportRecord", "Provenance", "export_of", "write"]

FORMAT_VERSION = "h3bench-export/1"
_SMALLER_IS_BETTER = {"lpips"}  # the gates whose worst value a customSmallerIsBetter chart can draw


@dataclass(frozen=True)
class Provenance:
    """Which sealed bundle the records come from: what ``h3bench verify BUNDLE --expect final_sha256`` checks."""

    bundle: str  # the bundle's directory name
    final_sha256: str  # its seal: the SHA-256 of its last final.json
    spec_id: str
    spec_name: str
    hardware: str  # "sim", "8x910b1", ...
    started_at: str
    h3bench: str  # the version that wrote the bundle
    run: str  # FORMAL or DIAGNOSTIC
    interrupted: str | None
    shard: str | None = None  # "shard 1/2": one host's share of a campaign over several hosts, not its verdict


@dataclass(frozen=True)
class ArmRecord:
    """One arm's measured requests at one duration: descriptive, never the effect."""

    arm: str
    n: int
    median_e2e_s: float
    p90_e2e_s: float | None  # None: n is too small for an observed p90


@dataclass(frozen=True)
class ExportRecord:
    """One candidate at one duration, with the seal and spec id of the bundle it comes from."""

    final_sha256: str
    spec_id: str
    candidate: str
    duration: str  # "5s"
    workload: str  # "ref2va_5s": the marker that selects it
    control: str
    verdict: str  # the candidate's verdict at the duration (CandidateVerdict.outcome_at): PASS, FAIL or INCONCLUSIVE
    speed: str
    ratio: float | None
    ratio_lower: float | None  # one-sided, at lower_level
    ratio_upper: float | None  # one-sided, at upper_level
    lower_level: float | None
    upper_level: float | None
    pairs: int
    quality: str
    quality_pairs: int
    worst: tuple[GateValue, ...]
    lossless: str  # "-" when the lossless test is off
    lossless_p: float | None
    design: str | None  # "sequential" or "fixed"; None for a candidate-only run's anchored design
    stopped: str | None  # why the series stopped ("faster", "futility", ...), None when it ran to its last look
    device_s: float | None  # what the series' blocks cost on their devices
    fixed_device_s: float | None  # what the fixed design's blocks would have cost
    arms: tuple[ArmRecord, ...]


@dataclass(frozen=True)
class Export:
    """h3bench's own export: the provenance once, then every record (each carrying the seal and spec id again)."""

    format: str
    provenance: Provenance
    records: tuple[ExportRecord, ...]


def _record(provenance: Provenance, candidate: str, key: str, verdict: CandidateVerdict) -> ExportRecord:
    d = verdict.durations[key]
    est, look, lossless = d.estimate, d.looks, d.lossless
    bounded = est is not None and est.ci_low is not None
    return ExportRecord(
        provenance.final_sha256, provenance.spec_id, candidate, key, key_marker(key), d.control,
        str(verdict.outcome_at(key)),
        str(d.speed), est.geomean if est else None, est.ci_low if est else None, est.ci_high if est else None,
        est.levels.fail_level if est and bounded else None, est.levels.pass_level if est and bounded else None,
        est.k if est else 0, d.quality_label, d.quality_pairs, d.worst, d.lossless_label,
        lossless.p_value if lossless else None, look.design if look else None,
        look.reason if look and look.stopped else None, look.device_s if look else None,
        look.fixed_device_s if look else None,
        tuple(ArmRecord(a.arm, a.n, a.median_e2e_s, next((p.value for p in a.percentiles if p.q == 0.9), None))
              for a in d.arms))


def export_of(document: VerdictDocument, provenance: Provenance) -> Export:
    """Every candidate at every duration the run judged, in the document's order."""
    records = tuple(_record(provenance, candidate, key, verdict)
                    for candidate, verdict in document.candidates.items() for key in verdict.durations)
    return Export(FORMAT_VERSION, provenance, records)


def _benchmark(provenance: Provenance, record: ExportRecord, who: str) -> str:
    """``<spec>@<id>/<workload>/<who>``; a shard's carries its shard (``.../shard-1-of-2/...``), never the pool's name."""
    shard = f"/{provenance.shard.replace(' ', '-').replace('/', '-of-')}" if provenance.shard else ""
    return f"{provenance.spec_name}@{provenance.spec_id[:12]}{shard}/{record.workload}/{who}"


def _finite(value: float | None) -> bool:
    return value is not None and math.isfinite(value)


def _bmf(export: Export) -> dict[str, Any]:
    """Bencher Metric Format: benchmarks of measures, each metric with its bounds where it has them."""
    provenance = export.provenance
    carried = {"h3bench_final_sha256": provenance.final_sha256, "h3bench_spec_id": provenance.spec_id}
    out: dict[str, dict[str, dict[str, Any]]] = {}

    def metric(value: float, lower: float | None = None, upper: float | None = None) -> dict[str, Any]:
        # Bencher's schema takes numbers only: a side the verdict left unbounded (few pairs, a stopped candidate)
        # is left out and named, never written as "inf".
        bounds = {key: bound for key, bound in (("lower_value", lower), ("upper_value", upper)) if _finite(bound)}
        open_sides = [key for key, bound in (("lower_value", lower), ("upper_value", upper))
                      if bound is not None and not _finite(bound)]
        return {"value": value, **bounds, **({"h3bench_unbounded": open_sides} if open_sides else {}), **carried}

    for record in export.records:
        measures = out.setdefault(_benchmark(provenance, record, record.candidate), {})
        if record.ratio is not None and math.isfinite(record.ratio):
            measures["ratio"] = metric(record.ratio, record.ratio_lower, record.ratio_upper)
        if record.device_s is not None:
            measures["device-hours"] = metric(record.device_s / 3600)
        for gate in record.worst:
            if isinstance(gate.value, float) and gate.value == gate.value and abs(gate.value) != float("inf"):
                measures[f"{gate.name.replace('_', '-')}-worst"] = metric(gate.value)
        for arm in record.arms:  # each arm of the series, the control too: its blocks are this series'
            out.setdefault(_benchmark(provenance, record, f"{record.candidate}/{arm.arm}"), {})["latency"] = \
                metric(arm.median_e2e_s * 1e9)
    return out


def _github_benchmark(export: Export) -> list[dict[str, Any]]:
    """github-action-benchmark's customSmallerIsBetter: name, unit, value, range, extra."""
    provenance = export.provenance
    out: list[dict[str, Any]] = []
    seen: set[str] = set()

    def bench(name: str, unit: str, value: float, record: ExportRecord, range_: str | None = None) -> None:
        if name in seen:
            return
        seen.add(name)
        alone = f"{provenance.shard} of a campaign over several hosts, not its verdict; " if provenance.shard else ""
        extra = (f"{alone}verdict {record.verdict} ({record.candidate} vs {record.control}); spec {provenance.spec_id}; "
                 f"final.json sha256 {provenance.final_sha256}; bundle {provenance.bundle}")
        out.append({"name": name, "unit": unit, "value": value, **({"range": range_} if range_ else {}),
                    "extra": extra})

    for record in export.records:
        base = _benchmark(provenance, record, record.candidate)
        if record.ratio is not None and math.isfinite(record.ratio):
            bounds = (f"[{record.ratio_lower:.4f}, {record.ratio_upper:.4f}]"
                      if record.ratio_lower is not None and record.ratio_upper is not None else None)
            bench(f"{base} ratio", "candidate/control", record.ratio, record, bounds)
        for arm in record.arms:
            bench(f"{base}/{arm.arm} median E2E", "s", arm.median_e2e_s, record)
        if record.device_s is not None:
            bench(f"{base} device-hours", "device-h", record.device_s / 3600, record)
        for gate in record.worst:
            if gate.name in _SMALLER_IS_BETTER:
                bench(f"{base} worst {gate.name}", gate.name, gate.value, record)
    return out


FORMATS: dict[str, Callable[[Export], Any]] = {
    "json": to_json,
    "bmf": _bmf,
    "github-benchmark": _github_benchmark,
}


def write(export: Export, fmt: str) -> str:
    """The export in ``fmt`` (one of :data:`FORMATS`) as JSON text; non-finite floats as strings, as verdict.json."""
    return json.dumps(to_json(FORMATS[fmt](export)), indent=2, allow_nan=False) + "\n"

