"""``summary.md``: the verdict and one table per duration, short enough for a pull-request comment.

A run that did not end normally says so on the line after the heading, as
``report.html`` does: the pull-request comment never reads as a complete
campaign when it was interrupted, and one shard of a campaign over several
hosts says so in its heading and on each candidate's line.
Per duration, one row per candidate: n and median E2E of each arm, the
paired ratio and its interval, and the speed, quality and lossless outcomes;
below it, each gate's worst candidate value against its threshold, and
which stages moved (attribution, not a verdict) with the DiT per-step time
and the real-time factor. The last line is the path of the full report.
"""

from __future__ import annotations

import statistics
from pathlib import Path

from h3bench.course.shards import ShardRun
from h3bench.report.contents import Contents, Series, gate_rows
from h3bench.report.page import overall_outcome
from h3bench.report.terminal import part_ratio_text
from h3bench.verdict.acceptance import shard_alone
from h3bench.verdict.stage_effects import DIT_PER_FORWARD, E2E
from h3bench.verdict.verdicts import key_marker

__all__ = ["MAX_LINES", "STEP_SUMMARY_BYTES", "fit_summary", "render_summary"]

MAX_LINES = 60  # what fits a pull-request comment without scrolling past it
# A GitHub job's step summary holds at most 1 MiB (a larger one is refused, and the step's summary lost); a little
# under, for what the job appends beside it. summary.md itself (MAX_LINES) fits a pull-request comment's 64 kB.
STEP_SUMMARY_BYTES = 1024 * 1024 - 4096
_STOP_CHARS = 200


def _median(series: Series, arm: str) -> str:
    values = [s.e2e_s for s in series.measured(arm) if s.e2e_s is not None]
    return f"{statistics.median(values):.3f}" if values else "-"


def _cell(text: object) -> str:
    return str(text).replace("|", "\\|").replace("\n", " ")


def _row(series: Series) -> str:
    n = f"{len(series.measured('baseline'))} / {len(series.measured(series.candidate))}"
    medians = f"{_median(series, 'baseline')} → {_median(series, series.candidate)}"
    ratio = interval = "-"
    est = series.estimate
    if est is not None:
        ratio = "-" if est.geomean is None else f"{est.geomean:.4f}"
        interval = "no interval" if est.ci_low is None else (
            f"[{est.ci_low:.4f}, {est.ci_high:.4f}] at {est.levels.fail_level * 100:.3g} % / "
            f"{est.levels.pass_level * 100:.3g} %")
    d = series.verdict
    cells = [series.candidate, n, medians, ratio, interval, d.speed if d else "-",
             f"{d.quality_label} ({d.quality_pairs} pairs)" if d else "- (0 pairs)", d.lossless_label if d else "-"]
    return "| " + " | ".join(_cell(c) for c in cells) + " |"


def _selection(candidate: str, keys: tuple[str, ...]) -> str:
    return f"{candidate}: {', '.join(map(key_marker, keys))} not selected"


def _gates_line(series: Series) -> str:
    parts = []
    for row in gate_rows(series):
        if row.worst is not None:
            parts.append(f"{row.metric} {row.worst:.4g} ({row.threshold}, {row.passed}/{row.pairs})")
        elif row.pairs:
            parts.append(f"{row.metric} not measured")
    return (f"- {series.candidate} gates (worst value over the matched pairs, threshold, pairs passing): "
            + ("; ".join(parts) if parts else "no pair compared"))


def _stages_line(series: Series) -> str | None:
    """Which stage moved, DiT per step and RTF, on one line: attribution at its own level, never a verdict."""
    d = series.verdict
    if d is None or d.stages is None:
        return None
    stages = d.stages
    moved = ", ".join(f"{p.part} {part_ratio_text(p)}" for p in stages.parts if p.moved and p.part != E2E) or "none"
    text = (f"- {series.candidate} stages (attribution, not a verdict; two-sided {1 - 2 * stages.level:.0%} per "
            f"part): interval excludes 1: {moved}")
    step = next((p for p in stages.parts if p.part == DIT_PER_FORWARD), None)
    if step is not None and step.baseline_median_s is not None and step.candidate_median_s is not None:
        text += (f"; DiT per step {step.baseline_median_s:.4g} → {step.candidate_median_s:.4g} s "
                 f"({part_ratio_text(step)})")
    if d.recipe_steps:
        text += "; recipe " + ", ".join(f"{r.arm} {r.seconds:g} s" for r in d.recipe_steps)
    rtf = {r.arm: r.rtf_e2e for r in stages.rtf}
    if "A" in rtf and "B" in rtf:
        text += f"; RTF {rtf['A']:.3f} → {rtf['B']:.3f}"
    findings = sum(len(b.reconciliation) for b in d.blocks)
    if findings:
        text += f"; {findings} reconciliation finding(s) (full report)"
    return _cell(text)


def render_summary(contents: Contents, report: Path) -> str:
    """The Markdown summary, at most :data:`MAX_LINES` lines."""
    spec = contents.spec
    overall = overall_outcome(contents)
    shard = ShardRun.of(contents.manifest, where=f"{contents.path}/manifest.json")
    head = f"{shard.label}, not judged alone" if shard is not None else overall or "no verdict"
    lines = [f"## h3bench: {head} for `{spec.name}` (spec id `{spec.spec_id[:16]}`)", ""]
    if shard is not None:  # one host's share of a campaign over several hosts: never read as the campaign's verdict
        lines += [f"> **{shard.label.upper()}** of a campaign over {shard.count} hosts, run on host "
                  f"`{_cell(shard.host.name)}`: this host's pairs only; the campaign's verdict is `h3bench pool`'s "
                  "over every shard.", ""]
    interrupted = contents.document.interrupted if contents.document is not None else None
    if interrupted:
        lines += [f"> **INTERRUPTED**: {_cell(interrupted)[:_STOP_CHARS]}. Blocks that did not run are missing from "
                  "every table below; `--resume` the bundle to complete it.", ""]
    candidates = contents.document.candidates if contents.document is not None else {}
    for candidate, verdict in candidates.items():
        why = f" (stopped: {_cell(verdict.stopped.reason)[:_STOP_CHARS]})" if verdict.stopped else ""
        ratios = "; ".join(f"{key} {d.estimate.headline()}" for key, d in verdict.durations.items()
                           if d.estimate is not None)
        said = (f"{shard_alone(shard.index, shard.count)}** (this host's pairs alone: {verdict.outcome})"
                if shard is not None else f"{verdict.outcome}**")
        lines.append(f"- **{candidate}: {said}{why}" + (f": {ratios}" if ratios else ""))
    if contents.document is not None:
        lines += [f"- {_selection(c, keys)}" for c, keys in contents.document.not_selected.items()]
    if not candidates:
        lines.append("- the bundle holds no verdict.json")
    for duration in spec.workload.durations:
        rows = [s for s in contents.series if s.duration == duration]
        if not rows:  # not selected in this run
            continue
        lines += ["", f"### {duration:g} s", "",
                  "| candidate | n (base / cand) | median E2E s (base → cand) | ratio | bounds (one-sided lower / upper) "
                  "| speed | quality "
                  "| lossless |",
                  "|---|---|---|---|---|---|---|---|"]
        lines += [_row(s) for s in rows]
        lines.append("")
        lines += [_gates_line(s) for s in rows]
        lines += [f"- {s.candidate}: {s.verdict.looks.describe()}" for s in rows
                  if s.verdict is not None and s.verdict.looks is not None]
        lines += [line for s in rows if (line := _stages_line(s)) is not None]
    lines += ["", f"Full report: `{report}`"]
    if len(lines) > MAX_LINES:
        # Many candidates: keep the head and the path of the full report, which has everything.
        lines = [*lines[: MAX_LINES - 2], "- … (cut; every table is in the full report)", lines[-1]]
    return "\n".join(lines) + "\n"


def fit_summary(text: str, limit_bytes: int, where: str) -> str:
    """``text`` within ``limit_bytes`` of UTF-8: whole when it fits, else cut at a line with a last line naming ``where``.

    ``where`` says where the whole of it is (the run's artifact), so a cut
    summary never reads as complete.
    """
    data = text.encode("utf-8")
    if len(data) <= limit_bytes:
        return text
    note = f"\n> **Cut** at {{kept}} of {len(data)} bytes to fit GitHub's limit; the whole summary and report: {where}\n"
    room = limit_bytes - len(note.format(kept=limit_bytes).encode("utf-8"))
    kept = data[: max(0, room)].decode("utf-8", "ignore")
    kept = kept[: kept.rfind("\n") + 1] if "\n" in kept else ""
    return kept + note.format(kept=len(kept.encode("utf-8")))
