"""What a campaign says about itself: the report header, the terminal summary, pytest-benchmark's extra_info.

The header says what is needed to repeat the run (spec id, arms, server
commands, where the evidence goes); the summary gives, per duration and
candidate, each arm's samples, the percentiles its n supports and the stage
medians, the paired ratio, the speed, quality and lossless outcomes with
every reason (not only the first), any block whose warmup looks too short,
then every verdict.
"""

from __future__ import annotations

import statistics
from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

from h3bench.evidence.scrub import Scrubber
from h3bench.h3 import TOP_LEVEL_STAGES, mux_and_transfer_s
from h3bench.quality.lossless import DEVIATIONS
from h3bench.run.records import BlockResult, Sample
from h3bench.runspec import RunSpec
from h3bench.server.ports import LOCALHOST
from h3bench.stats.speed import PERCENTILES, percentile

if TYPE_CHECKING:
    from h3bench.session.results import Review
    from h3bench.verdict.judge import PairOutcome

__all__ = ["extra_info", "report_header", "stage_medians", "summary_lines"]


def report_header(review: Review, arms: str, evidence: str) -> list[str]:
    spec = review.spec
    lines = [
        f"h3bench runspec: {spec.name}, id {spec.spec_id[:16]}",
        f"h3bench arms: {arms}; order {spec.protocol.order}; "
        f"{spec.protocol.warmups_per_block} warmup + {spec.protocol.requests_per_block} measured per block; "
        f"shutdown budget {spec.protocol.shutdown_budget_s:g} s for every arm",
    ]
    for name, arm in spec.arms.items():
        command = arm.command(LOCALHOST, 0, spec.model.path)
        lines.append(f"h3bench {name}: {' '.join(Scrubber.for_command(command, arm.env).argv(command))}")
    lines.append(f"h3bench evidence: {evidence}")
    if review.stored_baseline is not None:
        lines.append(f"h3bench baseline evidence: {review.stored_baseline.bundle_path} (quality references, the "
                     f"day's shift and lossless processes; speed against today's anchors, order "
                     f"{spec.protocol.anchored_order})")
    return lines


DERIVED_STAGE = "mux+transfer (derived)"


def worst_gate_values(pairs: Iterable[PairOutcome]) -> str:
    """Each gate's worst measured value over the matched pairs, with its threshold: ``lpips 0.0123 (<= 0.2)``."""
    # The worst value deviates most from its baseline, as the lossless test measures deviations.
    checks = [c for p in pairs for c in p.result.get("checks", ()) if c.get("name") in DEVIATIONS]
    parts = []
    for name, badness in DEVIATIONS.items():
        found = [(c["value"], c.get("threshold", "")) for c in checks
                 if c["name"] == name and isinstance(c.get("value"), (int, float))]
        if found:
            value, threshold = max(found, key=lambda item: badness(item[0]))
            parts.append(f"{name} {value:.4g} ({threshold})")
    return ", ".join(parts)


def stage_median_values(samples: Iterable[Sample]) -> tuple[dict[str, float], int]:
    """Median seconds of each top-level stage and of the derived remainder; and in how many requests it is negative.

    E2E is measured around the stages, so a negative remainder means the
    samples are inconsistent: it is a data error, never a median.
    """
    samples = list(samples)
    medians: dict[str, float] = {}
    for stage in TOP_LEVEL_STAGES:
        values = [v for s in samples for k, v in s.stage_durations.items()
                  if k.count(".") <= 1 and k.rpartition(".")[2] == stage]
        if values:
            medians[stage] = statistics.median(values)
    rest = [r for s in samples if s.e2e_s is not None
            if (r := mux_and_transfer_s(s.e2e_s, s.stage_durations)) is not None]
    negative = sum(1 for r in rest if r < 0)
    if rest and not negative:
        medians[DERIVED_STAGE] = statistics.median(rest)
    return medians, negative


def stage_medians(samples: Iterable[Sample]) -> str:
    """The stage medians as one terminal line, with a negative remainder reported as the data error it is."""
    samples = list(samples)
    medians, negative = stage_median_values(samples)
    parts = [f"{stage} {value:.3f}" for stage, value in medians.items()]
    if negative:
        parts.append(f"{DERIVED_STAGE}: DATA ERROR, E2E shorter than its stages in {negative} request(s)")
    return ", ".join(parts)


def _percentiles(samples: list[float]) -> str:
    """Each supported percentile's value; the smallest n of the first one that is not supported."""
    parts = []
    for q in PERCENTILES:
        found = percentile(samples, q)
        if found.value is None:
            parts.append(f"p{q * 100:g} needs n ≥ {found.min_n}")
            break
        parts.append(f"p{q * 100:g} {found.value:.3f} s")
    return ", ".join(parts)


def _reasons(head: str, reasons: tuple[str, ...]) -> list[str]:
    """The first reason on the headline, every other one below it."""
    return [f"  {head}: {reasons[0]}", *(f"      {reason}" for reason in reasons[1:])]


def summary_lines(review: Review) -> list[str]:
    spec = review.spec
    lines = [f"runspec {spec.name} (id {spec.spec_id[:16]}), order {spec.protocol.order}, "
             f"shutdown budget {spec.protocol.shutdown_budget_s:g} s for every arm"]
    verdicts = review.verdicts()
    for duration in spec.workload.durations:
        for candidate in verdicts:
            series = review.series(duration, candidate)
            if not series:
                continue
            arms = sorted({r.block.arm: r.block.letter for r in series}.items(), key=lambda item: item[1])
            lines.append(f"ref2va {duration:g}s, {candidate} against {series[0].block.control}:")
            for arm, _ in arms:
                samples = [s for r in series if r.block.arm == arm for s in r.measured if s.ok and s.e2e_s is not None]
                if samples:
                    e2e = [s.e2e_s for s in samples if s.e2e_s is not None]
                    lines.append(f"  {arm:<12} n={len(samples):<3} median E2E {statistics.median(e2e):8.3f} s   "
                                 f"{_percentiles(e2e)}   {stage_medians(samples)}")
            d = verdicts[candidate].durations[f"{duration:g}s"]
            est = d.estimate
            if est is not None and est.geomean is not None:
                bounds = f"[{est.ci_low:.4f}, {est.ci_high:.4f}]" if est.ci_low is not None else "no interval"
                lines.append(f"  ratio {est.geomean:.4f} {bounds} over {est.k} {est.design}")
            lines += _reasons(f"speed {d.speed}", d.speed_reasons)
            lines += [f"  warmup: {check.describe()}" for check in d.warmup_flags]
            lines.append(f"  quality {d.to_dict()['quality']} over {d.quality_pairs} matched pairs")
            worst = worst_gate_values(review.judge.pairs_of(candidate, duration))
            if worst:
                lines.append(f"      worst over the pairs: {worst}")
            if d.lossless is not None:
                lines += _reasons(f"lossless {d.lossless.outcome}", d.lossless.reasons)
    anchored = " (candidate-only run: speed against today's anchor blocks)" if review.stored_baseline else ""
    for candidate, verdict in verdicts.items():
        stopped = f" (stopped: {verdict.stopped.reason})" if verdict.stopped else ""
        lines.append(f"verdict {candidate}: {review.verdict_label(verdict.outcome)}{anchored}{stopped}")
        lines += [f"  note: {note}" for note in verdict.notes]
    if not spec.gates.lpips_required:
        lines.append("LPIPS is not required by this RunSpec: quality verdicts do not include it.")
    lines += review.run_notes()
    lines.append(f"evidence bundle: {review.bundle_path}")
    return lines


def extra_info(spec: RunSpec, result: BlockResult) -> dict[str, Any]:
    """What pytest-benchmark records with a block's timings (``extra_info``)."""
    block = result.block
    return {
        "arm": block.arm,
        "candidate": block.candidate,
        "block_index": block.position,
        "order_position": f"{block.position}/{len(spec.protocol.order)} ({spec.protocol.order})",
        "server_pid": result.server_pid,
        "client_e2e_s": [s.e2e_s for s in result.measured],
        "server_inference_time_s": [s.inference_time_s for s in result.measured],
        "stage_durations": [s.stage_durations for s in result.measured],
        "output_sha256": [s.output_sha256 for s in result.measured],
        "startup_s": result.lifecycle.get("startup_s"),
        "warmup_s": result.lifecycle.get("warmup_s"),
        "shutdown_s": result.lifecycle.get("shutdown_s"),
        "spec_id": spec.spec_id,
    }
