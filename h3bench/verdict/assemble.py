"""A campaign's verdict, assembled once from what ran: latency figures, the look decision, quality, lossless.

For a live run and a stored bundle alike: :func:`candidate_verdicts` and
:func:`document` read a campaign's records through :class:`RunRecords`, a
small read-only view (the session's :class:`~h3bench.session.results.Results`
is one), and never start a server or write a file. The document is the
:class:`~h3bench.verdict.verdicts.VerdictDocument` that ``verdict.json``
holds and every presentation reads.

Per candidate and duration (:class:`~h3bench.verdict.verdicts.DurationVerdict`):

- the latency estimate (:func:`speed`): paired AB/BA ratios at the
  campaign's error levels; in a candidate-only run, against today's anchors,
  with the stored baseline's shift. Its outcome and interval are the look
  decision's (:mod:`h3bench.course.looks`) where the series reached a look;
- each block with its warmup check and the reconciliation of its requests'
  three accounts (:func:`block_records`), each arm's figures
  (:func:`arm_stats`) and which stage moved (attribution only);
- the quality and lossless judgements (:class:`~h3bench.verdict.judge.Judge`);
- where the series stood and what it cost (:mod:`h3bench.verdict.device`).

A stop rule that fired stays with its candidate, and the verdict says why
(FAIL for the candidate's own failures, INCONCLUSIVE when the comparison
itself is invalid: a broken baseline or interference).
"""

from __future__ import annotations

import dataclasses
import statistics
from collections import Counter
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Protocol

from h3bench import __version__
from h3bench.course.cases import Block, CandidateWorkload
from h3bench.course.design import design_text, series_of
from h3bench.course.feasibility import design_warnings
from h3bench.course.schedule import Schedule
from h3bench.course.shards import ShardRun
from h3bench.evidence import BundleReader
from h3bench.evidence.manifest import DIAGNOSTIC, FORMAL, RunKind
from h3bench.host import telemetry
from h3bench.outcome import Outcome
from h3bench.run.records import BlockResult, Stop
from h3bench.runspec import BASELINE, RunSpec
from h3bench.server.startup import StartupPhases, compile_differs
from h3bench.stats import intervals, sequential
from h3bench.stats import speed as speeds
from h3bench.stats.sequential import LookDecision
from h3bench.stats.speed import RatioEstimate, SpeedReport
from h3bench.stats.stages import stage_median_values
from h3bench.stats.warmup import warmup_checks
from h3bench.verdict import attribution
from h3bench.verdict.device import device_time, look_record
from h3bench.verdict.judge import Judge, LosslessOutcome
from h3bench.verdict.stage_effects import StageEffects
from h3bench.verdict.verdicts import (
    Acceptance,
    ArmStats,
    BaselineLevel,
    BlockRecord,
    CandidateVerdict,
    DurationVerdict,
    HeldoutVerdict,
    LosslessSummary,
    VerdictDocument,
    duration_key,
)

__all__ = ["RunRecords", "arm_stats", "baseline_levels", "block_records", "candidate_verdicts", "document", "run_notes",
           "speed"]


class RunRecords(Protocol):
    """What the verdict reads of a campaign: its spec and schedule, the blocks that ran, the stop rules, the judge."""

    @property
    def spec(self) -> RunSpec: ...

    @property
    def schedule(self) -> Schedule: ...

    @property
    def judge(self) -> Judge: ...

    @property
    def ran(self) -> Mapping[str, BlockResult]: ...

    @property
    def bundle(self) -> BundleReader: ...

    @property
    def not_selected(self) -> Mapping[str, tuple[str, ...]]: ...

    @property
    def stored_baseline(self) -> RunRecords | None:
        """A candidate-only run's stored baseline bundle, read the same way."""

    def series(self, duration: float, candidate: str) -> list[BlockResult]:
        """The blocks of one candidate's speed comparison that ran, in order."""

    def decision(self, duration: float, series: str) -> LookDecision | None:
        """The series' look decision from its blocks so far (:func:`h3bench.course.looks.decision`)."""

    def stopped(self, candidate: str) -> Stop | None: ...

    def block_telemetry(self, block: Block) -> telemetry.BlockTelemetry | None: ...


# -- latency ------------------------------------------------------------------------


def speed(records: RunRecords, duration: float, candidate: str) -> SpeedReport | None:
    """The latency estimate for one candidate at one duration; None without a block to compare.

    Paired AB/BA ratios at the campaign's error levels; in a
    candidate-only run, against today's anchors, with the stored
    baseline's shift.
    """
    spec = records.spec
    series = [r for r in records.series(duration, candidate) if r.ok]
    if records.stored_baseline is None and not records.schedule.anchored:
        # Only whole AB/BA pairs: a block that failed inside a series (a shard's, when pooled) leaves its partner out,
        # so the blocks after it still pair up as they ran.
        whole = Counter(r.block.pair for r in series)
        series = [r for r in series if whole[r.block.pair] == 2]
    blocks = [speeds.BlockSamples(r.block.letter, r.latencies) for r in series]
    levels = intervals.error_levels(len(spec.workload.durations), len(series_of(spec)))
    margin = spec.gates.speed_margin
    roles = {b.role for b in blocks}
    stored = records.stored_baseline
    if stored is not None and "B" in roles:
        medians = [m for b in records.schedule.stored_series(duration, candidate)
                   if (r := stored.ran.get(b.id)) is not None and r.ok and (m := r.median_e2e_s) is not None]
        return speeds.anchored_speed_report(blocks, medians, margin=margin, levels=levels,
                                            stored=str(stored.bundle.path))
    if roles != {"A", "B"}:
        return None
    return speeds.speed_report(blocks, margin=margin, levels=levels)


def block_records(records: RunRecords, duration: float, candidate: str) -> list[BlockRecord]:
    """Each block of the candidate's series with the warmup check, pooled over every block of the duration,
    and the reconciliation of its measured requests' three accounts (:mod:`h3bench.verdict.attribution`)."""
    spec = records.spec
    ran = [r for r in records.ran.values() if r.block.duration == duration and r.ok]
    checks = {c.block_id: c for c in warmup_checks([(r.block.id, r.latencies) for r in ran])}
    tolerance = attribution.tolerance_for(spec)
    return [BlockRecord(r.block.id, r.median_e2e_s, checks.get(r.block.id),
                        *attribution.block_reconciliation(r, spec.workload.steps, tolerance))
            for r in records.series(duration, candidate)]


def _stage_effects(records: RunRecords, duration: float, candidate: str) -> StageEffects | None:
    """Which stage moved: the paired effect of every part over the blocks :func:`speed` uses (attribution only)."""
    if records.schedule.anchored:  # today's anchors against the candidate are not AB/BA pairs
        return None
    return attribution.series_effects([r for r in records.series(duration, candidate) if r.ok], duration,
                                      records.spec.workload.steps)


def arm_stats(series: Iterable[BlockResult]) -> tuple[ArmStats, ...]:
    """Each arm's measured requests that succeeded, in blocks that succeeded: n, median, percentiles, stages."""
    series = list(series)
    found = []
    for arm in sorted({r.block.arm: r.block.letter for r in series}.items(), key=lambda item: item[1]):
        samples = [s for r in series if r.block.arm == arm[0] and r.ok
                   for s in r.measured if s.ok and s.e2e_s is not None]
        e2e = [s.e2e_s for s in samples if s.e2e_s is not None]
        if e2e:
            stages, negative = stage_median_values((s.e2e_s, s.stage_durations) for s in samples)
            found.append(ArmStats(arm[0], len(e2e), statistics.median(e2e),
                                  tuple(speeds.percentile(e2e, q) for q in speeds.PERCENTILES),
                                  tuple(stages.items()), negative))
    return tuple(found)


def baseline_levels(records: RunRecords) -> dict[str, BaselineLevel]:
    """Per duration, the median of every successful baseline block's median (controls and anchors included)."""
    medians: dict[str, list[float]] = {}
    for result in records.ran.values():
        if result.block.arm == BASELINE and result.ok and result.median_e2e_s is not None:
            medians.setdefault(duration_key(result.block.duration), []).append(result.median_e2e_s)
    return {key: BaselineLevel(statistics.median(values), len(values)) for key, values in medians.items()}


# -- the verdict --------------------------------------------------------------------


def _speed(records: RunRecords, duration: float, candidate: str
           ) -> tuple[Outcome, tuple[str, ...], RatioEstimate | None, LookDecision | None]:
    """The duration's speed outcome, reasons and estimate: the look decision's, with the estimate's notes."""
    report = speed(records, duration, candidate)
    found = records.decision(duration, candidate)
    if found is None or found.look is None or report is None:
        if report is None:
            return Outcome.INCONCLUSIVE, ("no complete AB/BA pair was measured",), None, found
        return report.verdict.outcome, tuple(report.verdict.reasons), report.estimate, found
    levels = dataclasses.replace(report.estimate.levels, pass_level=found.pass_level or 0.0,
                                 fail_level=found.fail_level or 0.0)
    estimate = dataclasses.replace(report.estimate, geomean=found.ratio, ci_low=found.lower,
                                   ci_high=found.upper, levels=levels)
    plain = (len(found.looks) == 1 and not found.first_requests_left_out
             and found.reason_code in (sequential.PASSED, sequential.FAILED, sequential.LAST_LOOK))
    reasons = tuple(report.verdict.reasons) if plain else (found.reason, *report.estimate.notes)
    return found.outcome, (*reasons, *found.notes), estimate, found


def _lossless(judge: Judge, candidate: str, duration: float) -> LosslessSummary | None:
    found: LosslessOutcome | None = judge.lossless_results.get(CandidateWorkload(candidate, duration).id)
    if found is None:
        return None
    return LosslessSummary(found.outcome, found.exact, found.reasons, found.result.get("p_value"),
                           int(found.result.get("baseline_processes", 0)),
                           int(found.result.get("candidate_processes", 0)))


def _telemetry_notes(records: RunRecords, candidate: str) -> tuple[str, ...]:
    """Blocks of the candidate's series whose telemetry stands out against the other blocks of their arm."""
    notes: list[str] = []
    for duration in records.spec.workload.durations:
        series = records.series(duration, candidate)
        for arm in dict.fromkeys(r.block.arm for r in series):
            found = [t for r in series if r.block.arm == arm and (t := records.block_telemetry(r.block)) is not None]
            notes += telemetry.outlier_notes(f"{arm} {duration:g} s", found)
    return tuple(notes)


def _compile_notes(records: RunRecords, candidate: str) -> tuple[str, ...]:
    """Durations whose arms' servers compiled in different places (none, first request, start-up)."""
    notes = []
    for duration in records.spec.workload.durations:
        by_arm: dict[str, list[StartupPhases | None]] = {}
        for result in records.series(duration, candidate):
            by_arm.setdefault(result.block.arm, []).append(result.lifecycle.startup_phases)
        if note := compile_differs(by_arm):
            notes.append(f"{duration:g} s: {note}")
    return tuple(notes)


def candidate_verdicts(records: RunRecords) -> dict[str, CandidateVerdict]:
    """Per candidate: speed, quality and lossless at each selected duration, and the stop rule that fired."""
    spec, judge, schedule = records.spec, records.judge, records.schedule
    out = {}
    for series in series_of(spec):
        candidate = series.name
        durations = {}
        skipped = records.not_selected.get(candidate, ())
        if len(skipped) == len(spec.workload.durations):
            continue
        for d in spec.workload.durations:
            if duration_key(d) in skipped:
                continue
            outcome, reasons, estimate, found = _speed(records, d, candidate)
            pairs = judge.pairs_of(candidate, d)
            durations[duration_key(d)] = DurationVerdict(
                series.control, outcome, reasons, estimate,
                judge.quality_outcome(pairs), len(pairs), judge.lossless_enabled,
                _lossless(judge, candidate, d) if judge.lossless_enabled else None,
                tuple(block_records(records, d, candidate)), arm_stats(records.series(d, candidate)),
                judge.worst_values(pairs),
                None if schedule.anchored else look_record(spec, d, schedule.series(d, candidate), records.ran, found,
                                                           shard=schedule.shard,
                                                           stopped=records.stopped(candidate) is not None),
                _stage_effects(records, d, candidate), attribution.recipe_steps(spec, d, series.control, candidate),
                attribution.tolerance_for(spec).describe())
        out[candidate] = CandidateVerdict(durations, records.stopped(candidate),
                                          _telemetry_notes(records, candidate) + _compile_notes(records, candidate))
    return out


def run_notes(records: RunRecords) -> tuple[str, ...]:
    """What the manifest says about the run itself: a DIAGNOSTIC run, pins the host could not confirm."""
    manifest = records.bundle.manifest
    run = manifest.run or RunKind(FORMAL)
    lines = [f"DIAGNOSTIC run: not a campaign result; {reason}" for reason in manifest.diagnostic_reasons()]
    lines += [f"  underpowered: {problem}" for problem in run.underpowered]
    lines += [f"design: {warning}" for warning in design_warnings(records.spec)]
    if shard := ShardRun.of(manifest, where=f"{records.bundle.path}/manifest.json"):
        lines.append(f"shard {shard.index}/{shard.count}, round {shard.round}, on host {shard.host.name}: this "
                     "verdict covers this host's pairs only; the campaign's verdict is h3bench pool's over every shard")
    return tuple(lines + [f"not verified: {item}" for item in run.unverified])


def document(records: RunRecords, *, interrupted: str | None = None,
             heldout: Mapping[str, dict[str, HeldoutVerdict]] | None = None,
             accepted: Acceptance | None = None, verdicts: Mapping[str, CandidateVerdict] | None = None,
             ) -> VerdictDocument:
    """The verdict, as ``verdict.json`` holds it; ``verdicts`` already assembled, else assembled here."""
    spec, stored = records.spec, records.stored_baseline
    baseline_evidence: Path | None = stored.bundle.path if stored is not None else None
    return VerdictDocument(
        spec_id=spec.spec_id, spec_name=spec.name, h3bench=__version__,
        run=DIAGNOSTIC if records.bundle.manifest.diagnostic else FORMAL,
        interrupted=interrupted, candidates=dict(verdicts if verdicts is not None else candidate_verdicts(records)),
        run_notes=run_notes(records), heldout=dict(heldout or {}), accepted=accepted,
        baseline_evidence=str(baseline_evidence) if baseline_evidence is not None else None,
        lpips_required=spec.gates.lpips_required, baseline=baseline_levels(records),
        design=design_text(spec, anchored=records.schedule.anchored),
        device=device_time(spec, records.schedule.blocks, records.ran, shard=records.schedule.shard,
                           stopped={c for c in spec.candidates if records.stopped(c) is not None}),
        not_selected=dict(records.not_selected))
