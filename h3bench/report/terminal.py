"""What a campaign says on the terminal: the report header before it runs, and the summary with every reason after.

The header says what is needed to repeat the run (spec id, arms, server
commands, where the evidence goes). The summary is drawn from the verdict
document that the run wrote (:class:`~h3bench.verdict.verdicts.VerdictDocument`,
``verdict.json``), never recomputed: per duration and candidate, each arm's
n, median, the percentiles its n supports and the stage medians, the paired
ratio, the speed, quality and lossless outcomes with every reason (not only
the first), any block whose warmup looks too short, which stage moved
(per-part paired ratios: attribution, never a verdict), the DiT per-step
time, the real-time factor and any disagreement between the server's
accounts and the client's; then the research section (effects side by
side, held-out results, acceptance, profiles) and every verdict.
That is ``-v``; without it a campaign ends on one screen
(:mod:`h3bench.report.screen`).
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

from h3bench.course.cases import Block
from h3bench.course.design import anchored_order, design_text, series_of
from h3bench.evidence.scrub import Scrubber
from h3bench.h3 import DIFFUSION_EXEC_PER_STEP_S, STAGE_PREFIX, profiler_key
from h3bench.outcome import Outcome
from h3bench.runspec import RunSpec
from h3bench.server.ports import LOCALHOST
from h3bench.stats.speed import Percentile, RatioEstimate
from h3bench.stats.stages import DERIVED_STAGE
from h3bench.verdict.stage_effects import DIT_PER_FORWARD, PartEffect, RealTimeFactor
from h3bench.verdict.verdicts import (
    ArmStats,
    CandidateVerdict,
    DeviceTime,
    DurationVerdict,
    GateValue,
    VerdictDocument,
    duration_key,
    key_marker,
    saving,
)

__all__ = ["DERIVED_STAGE", "DIAGNOSTIC", "part_ratio_text", "ratio_text", "report_header", "shorten", "stage_lines",
           "stage_text", "summary_lines", "verdict_line", "worst_text"]

DIAGNOSTIC = "DIAGNOSTIC"


def report_header(spec: RunSpec, *, arms: str, evidence: str, baseline_evidence: Path | None = None,
                  blocks: Sequence[Block] = ()) -> list[str]:
    """What is needed to repeat the run: the spec, the design, the blocks it runs, the arms and their commands.

    ``blocks``: the session's schedule; the header shows, per duration and
    series, the order it runs (anchors included, or one arm's blocks alone).
    """
    anchored = baseline_evidence is not None
    lines = [
        f"h3bench runspec: {spec.name}, id {spec.spec_id[:16]}",
        f"h3bench arms: {arms}; {design_text(spec, anchored=anchored)}; "
        f"shutdown budget {spec.protocol.shutdown_budget_s:g} s for every arm",
    ]
    for duration in dict.fromkeys(b.duration for b in blocks):
        orders: dict[str, str] = {}
        for block in blocks:
            if block.duration == duration:
                name = "controls" if block.kind == "controls" else block.candidate
                orders[name] = orders.get(name, "") + block.letter
        lines.append(f"h3bench {duration:g} s runs: " + "; ".join(f"{name} {letters}" for name, letters in
                                                                  orders.items()))
    for name, arm in spec.arms.items():
        command = arm.command(LOCALHOST, 0, spec.model.path)
        lines.append(f"h3bench {name}: {' '.join(Scrubber.for_command(command, arm.env).argv(command))}")
    lines.append(f"h3bench evidence: {evidence}")
    if baseline_evidence is not None:
        lines.append(f"h3bench baseline evidence: {baseline_evidence} (quality references and the "
                     f"day's shift; speed and lossless against today's anchors, order "
                     f"{anchored_order(spec)})")
    return lines


def stage_text(stats: ArmStats) -> str:
    """The stage medians as one terminal line, with a negative remainder reported as the data error it is."""
    parts = [f"{stage} {value:.3f}" for stage, value in stats.stages]
    if stats.negative_remainders:
        parts.append(f"{DERIVED_STAGE}: DATA ERROR, E2E shorter than its stages in {stats.negative_remainders} "
                     "request(s)")
    return ", ".join(parts)


def _percentiles(percentiles: Iterable[Percentile]) -> str:
    """Each supported percentile's value; the smallest n of the first one that is not supported."""
    parts = []
    for found in percentiles:
        if found.value is None:
            parts.append(f"p{found.q * 100:g} needs n ≥ {found.min_n}")
            break
        parts.append(f"p{found.q * 100:g} {found.value:.3f} s")
    return ", ".join(parts)


def _reasons(head: str, reasons: Sequence[str]) -> list[str]:
    """The first reason on the headline, every other one below it."""
    return [f"  {head}: {reasons[0]}", *(f"      {reason}" for reason in reasons[1:])]


def worst_text(values: Iterable[GateValue]) -> str:
    return ", ".join(f"{v.name} {v.value:.4g} ({v.threshold})" for v in values)


def ratio_text(estimate: RatioEstimate | None) -> str | None:
    """``0.9000 [0.8900, 0.9100]``, or None without an estimate."""
    if estimate is None or estimate.geomean is None:
        return None
    bounds = f"[{estimate.ci_low:.4f}, {estimate.ci_high:.4f}]" if estimate.ci_low is not None else "no interval"
    return f"{estimate.geomean:.4f} {bounds}"


def part_ratio_text(part: PartEffect) -> str:
    """``0.702 [0.680, 0.724]``; the paired difference where no ratio is defined; the note without an estimate."""
    if part.ratio is not None and part.ratio_low is not None and part.ratio_high is not None:
        return f"{part.ratio:.3f} [{part.ratio_low:.3f}, {part.ratio_high:.3f}]"
    if part.difference_s is not None and part.difference_low_s is not None and part.difference_high_s is not None:
        return (f"difference {part.difference_s * 1e3:+.1f} ms "
                f"[{part.difference_low_s * 1e3:+.1f}, {part.difference_high_s * 1e3:+.1f}]")
    return part.note or "no estimate"


def _seconds(value: float | None) -> str:
    return "-" if value is None else f"{value:.4g} s"


def stage_lines(d: DurationVerdict, candidate: str, indent: str = "  ") -> list[str]:
    """Which stage moved (attribution, never a verdict), DiT per step, real-time factor and reconciliation findings."""
    lines: list[str] = []
    stages = d.stages
    if stages is not None and stages.parts:
        k = max(p.k for p in stages.parts)
        moved = [p for p in stages.parts if p.moved]
        still = [p.part for p in stages.parts if p.moved is False]
        unknown = [f"{p.part} ({p.note})" for p in stages.parts if p.moved is None]
        lines.append(f"{indent}stages (attribution, not a verdict: two-sided {1 - 2 * stages.level:.0%} per part over "
                     f"k = {k} AB/BA pairs, not adjusted for the {len(stages.parts)} parts; 1 = no change):")
        lines.append(f"{indent}    interval excludes 1: "
                     + (", ".join(f"{p.part} {part_ratio_text(p)}" for p in moved) or "none"))
        lines.append(f"{indent}    interval includes 1: {', '.join(still) or 'none'}")
        if unknown:
            lines.append(f"{indent}    not estimated: {'; '.join(unknown)}")
        step = next((p for p in stages.parts if p.part == DIT_PER_FORWARD), None)
        if step is not None:
            upstream = next((p for p in stages.parts if p.part == DIFFUSION_EXEC_PER_STEP_S), None)
            line = (f"{indent}DiT per step (profiler's diffuse / DiT forwards): {d.control} "
                    f"{_seconds(step.baseline_median_s)}, {candidate} {_seconds(step.candidate_median_s)}, "
                    f"ratio {part_ratio_text(step)}")
            if upstream is not None:
                line += (f"; upstream's {DIFFUSION_EXEC_PER_STEP_S} (exec / configured steps): "
                         f"{_seconds(upstream.baseline_median_s)}, {_seconds(upstream.candidate_median_s)}")
            lines.append(line)
        rtf: dict[str, RealTimeFactor] = {r.arm: r for r in stages.rtf}
        if rtf:
            shown = [f"{name} {r.rtf_e2e:.3f}" + (f" (server generation {r.rtf_server:.3f})" if r.rtf_server else "")
                     for role, name in (("A", d.control), ("B", candidate)) if (r := rtf.get(role)) is not None]
            lines.append(f"{indent}real-time factor (E2E per second of video): {', '.join(shown)}")
    if d.recipe_steps:
        lines.append(f"{indent}recipe's DiT per step: "
                     + ", ".join(f"{r.arm} {r.seconds:g} s" for r in d.recipe_steps)
                     + f" ({d.recipe_steps[0].source})")
    absent = {b.server_metrics for b in d.blocks if b.server_metrics and b.server_metrics != "available"}
    lines += [f"{indent}/metrics {why} (noted, not failed)" for why in sorted(absent)]
    for block in d.blocks:
        lines += [f"{indent}reconciliation {block.id}: {finding}" for finding in block.reconciliation]
    if any(block.reconciliation for block in d.blocks) and d.reconciliation_tolerance:
        lines.append(f"{indent}    (tolerance {d.reconciliation_tolerance})")
    return lines


def _duration_lines(duration: float, candidate: str, d: DurationVerdict) -> list[str]:
    lines = [f"ref2va {duration:g}s, {candidate} against {d.control}:"]
    for arm in d.arms:
        lines.append(f"  {arm.arm:<12} n={arm.n:<3} median E2E {arm.median_e2e_s:8.3f} s   "
                     f"{_percentiles(arm.percentiles)}   {stage_text(arm)}")
    ratio = ratio_text(d.estimate)
    if ratio is not None and d.estimate is not None:
        lines.append(f"  ratio {ratio} over {d.estimate.k} {d.estimate.design}")
    lines += _reasons(f"speed {d.speed}", d.speed_reasons)
    if d.looks is not None:
        lines.append(f"  design: {d.looks.describe()}")
    lines += [f"  warmup: {check.describe()}" for check in d.warmup_flags]
    lines.append(f"  quality {d.quality_label} over {d.quality_pairs} matched pairs")
    if d.worst:
        lines.append(f"      worst over the pairs: {worst_text(d.worst)}")
    if d.lossless is not None:
        lines += _reasons(f"lossless {d.lossless.label}", d.lossless.reasons)
    return lines + stage_lines(d, candidate)


def _device_line(key: str, device: DeviceTime) -> str:
    """One duration's device time, and what the fixed design would have spent."""
    fixed = ""
    if device.fixed_device_s:
        fixed = (f", against {device.fixed_device_s / 3600:.3f} for the fixed design "
                 f"({saving(device.device_s, device.fixed_device_s)})")
    return (f"device time {key}: {device.blocks_run} blocks run, {device.blocks_not_run} not run, "
            f"{device.wall_s / 3600:.3f} h of wall time, {device.device_s / 3600:.3f} device-h{fixed}")


def campaign_device_line(device: Mapping[str, DeviceTime]) -> str | None:
    """The whole campaign's device time against the fixed design's, when every duration could be priced.

    A duration none of whose blocks ran (no series passed the cheaper one)
    cannot price the fixed design's blocks there: then the durations' own
    lines say what can be said.
    """
    if len(device) < 2 or any(not d.fixed_device_s for d in device.values()):
        return None
    spent = sum(d.device_s for d in device.values())
    fixed = sum(d.fixed_device_s or 0.0 for d in device.values())
    return (f"device time, the campaign: {spent / 3600:.3f} device-h, against {fixed / 3600:.3f} for the fixed design "
            f"({saving(spent, fixed)})")


def _effect_lines(spec: RunSpec, document: VerdictDocument) -> list[str]:
    """Every effect measured directly against its own control, side by side; never added or multiplied."""
    lines = ["research: each effect measured directly in its own AB/BA blocks (ratio candidate/control with its "
             "bounds); effects from separate cohorts are never added or multiplied into a result"]

    def ratio(series: str, duration: float) -> float | None:
        verdict = document.candidates.get(series)
        d = verdict.durations.get(duration_key(duration)) if verdict else None
        return d.estimate.geomean if d is not None and d.estimate is not None else None

    for duration in spec.workload.durations:
        key = duration_key(duration)
        for series in series_of(spec):
            verdict = document.candidates.get(series.name)
            d = verdict.durations.get(key) if verdict is not None else None
            if verdict is None or d is None:  # not judged in this run
                continue
            role = " (final)" if series.arm == spec.final and series.control == spec.final_control else ""
            held = document.heldout.get(series.name, {}).get(key) if series.name == series.arm else None
            lines.append(f"  {key:>4} {series.arm + role:<22} vs {series.control:<12} "
                         f"ratio {ratio_text(d.estimate) or 'not measured':<28} formal {verdict.outcome_at(key)}"
                         + (f", held-out {held.outcome}" if held else ""))
        for name, arm in spec.arms.items():
            parts = [ratio(part, duration) for part in arm.combination_of]
            combined = ratio(name, duration)
            if arm.combination_of and combined is not None and all(p is not None for p in parts):
                product = math.prod(p for p in parts if p is not None)
                lines.append(f"  {duration:g}s interaction check (NOT a result): product of the individual ratios "
                             f"of {' × '.join(arm.combination_of)} = {product:.4f}, beside {name}'s measured "
                             f"{combined:.4f} ({combined / product - 1:+.1%} interaction)")
    return lines


def _profile_lines(profiles: Iterable[Mapping[str, Any]]) -> list[str]:
    lines = []
    for record in profiles:
        where = f"profile {record['duration']:g}s {record['arm']} ({record['block_id']}):"
        note = (record.get("profiler") or {}).get("note", "")
        if not record.get("ok"):
            lines.append(f"{where} not profiled: {record.get('error') or note}")
            continue
        stages = record.get("stage_durations") or {}
        shown = ", ".join(f"{key.removeprefix(STAGE_PREFIX)} {value:.3f}" for key, value in stages.items()
                          if profiler_key(key)) or "no stages"  # the API layer's own timings are milliseconds
        traces = record.get("traces") or []
        size = sum(t.get("size", 0) for t in traces)
        lines.append(f"{where} E2E {record.get('e2e_s', 0.0):.3f} s; stages [s]: {shown}; "
                     f"{len(traces)} trace file(s), {size} bytes ({note})")
    return lines


def _research_lines(spec: RunSpec, document: VerdictDocument, profiles: Sequence[Mapping[str, Any]]) -> list[str]:
    """The research section: effects side by side, held-out, acceptance, profiles."""
    lines = _effect_lines(spec, document)
    for candidate, per_duration in document.heldout.items():
        for duration, result in per_duration.items():
            lines.append(f"held-out {candidate} {duration}: {result.outcome}: {'; '.join(result.reasons)}")
    accepted = document.accepted
    if accepted is not None:
        for name, item in accepted.candidates.items():
            lines.append(f"candidate {name}: {item.describe()}")
        if accepted.final is not None:  # without a final combination there is no campaign to accept
            lines.append(f"campaign acceptance (final {accepted.final}): "
                         f"{'ACCEPTED' if accepted.accepted else 'NOT accepted'}: {'; '.join(accepted.reasons)}")
    return lines + _profile_lines(profiles)


def shorten(text: str, limit: int = 110) -> str:
    """One reason cut to a screen line: its first clause when it is long, the rest is in -v and the report."""
    if len(text) <= limit:
        return text
    head = text.split(": ")[0] if ": " in text[:limit] else text[:limit].rsplit(" ", 1)[0]
    return head + " … (-v)"


def verdict_line(document: VerdictDocument, candidate: str, verdict: CandidateVerdict) -> str:
    """``verdict clean: PASS``, with what stopped it, what was not selected, and what acceptance adds.

    The one verdict line: the screen (:mod:`h3bench.report.screen`) and ``-v`` (:func:`summary_lines`) both print it.
    """
    item = document.accepted.candidates.get(candidate) if document.accepted is not None else None
    if item is not None and not item.judged and item.describe().startswith("not judged alone"):  # a lone shard
        return f"verdict {candidate}: {item.describe()} (this host's pairs alone: {verdict.outcome})"
    judged = ", ".join(map(key_marker, verdict.durations)) if document.not_selected.get(candidate) else ""
    line = f"verdict {candidate}{' for ' + judged if judged else ''}: {document.label(verdict.outcome)}"
    if document.baseline_evidence:
        line += " (candidate-only run: speed against today's anchor blocks)"
    if verdict.stopped:
        line += f" (stopped: {verdict.stopped.reason})"
    skipped = document.not_selected.get(candidate, ())
    if skipped and verdict.outcome is not Outcome.FAIL:  # what was selected passed or could not decide
        line += f"; not judged: {', '.join(map(key_marker, skipped))} not selected"
    elif item is not None and not item.judged:
        line += f"; {item.describe()}"
    elif item is not None and item.accepted and document.heldout.get(candidate):
        line += "; held-out " + ", ".join(f"{k} {h.outcome}" for k, h in document.heldout[candidate].items())
    elif item is not None and not item.accepted and verdict.outcome is Outcome.PASS:
        line += f"; not accepted: {shorten('; '.join(item.reasons), 80)}"
    return line


def summary_lines(spec: RunSpec, document: VerdictDocument, *, bundle: Path | None,
                  profiles: Sequence[Mapping[str, Any]] = ()) -> list[str]:
    """The campaign summary with every reason (``-v``), from its verdict document; ``profiles``: profiled requests."""
    lines = [f"runspec {spec.name} (id {spec.spec_id[:16]}), {document.design or 'order ' + spec.protocol.order}, "
             f"shutdown budget {spec.protocol.shutdown_budget_s:g} s for every arm"]
    for duration in spec.workload.durations:
        for candidate, verdict in document.candidates.items():
            d = verdict.durations.get(duration_key(duration))
            if d is not None and d.arms:
                lines += _duration_lines(duration, candidate, d)
    for candidate, verdict in document.candidates.items():
        lines.append(verdict_line(document, candidate, verdict))
        lines += [f"  {key}: {d.estimate.headline()}" for key, d in verdict.durations.items() if d.estimate]
        lines += [f"  note: {note}" for note in verdict.notes]
    unjudged = [c for c in document.not_selected if c not in document.candidates]
    if unjudged:
        lines.append(f"not judged: {', '.join(unjudged)} (none of their blocks was selected)"
                     + (f"; this bundle is baseline evidence: pytest --arm candidate --baseline-evidence {bundle}"
                        if not document.candidates and bundle is not None else ""))
    if not document.lpips_required:
        lines.append("LPIPS is not required by this RunSpec: quality verdicts do not include it.")
    lines += document.run_notes
    lines += [_device_line(key, device) for key, device in document.device.items() if device.blocks_run]
    campaign = campaign_device_line(document.device)
    if campaign is not None:
        lines.append(campaign)
    lines += _research_lines(spec, document, profiles)
    lines.append(f"evidence bundle: {bundle}")
    if document.diagnostic:  # every line of a DIAGNOSTIC run's summary starts with the word
        lines = [line if line.startswith(DIAGNOSTIC) else f"{DIAGNOSTIC} {line}" for line in lines]
    return lines
