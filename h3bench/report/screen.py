"""The end of a campaign on one screen, and the choice between it and every reason (``-v``).

:func:`screen_lines` shows, per candidate and duration, at most six lines:
the ratio with its bounds and the verdict, where the design stopped and the
device time spent and saved, the worst value of each quality gate,
lossless, and which stage moved (only when one did); then one line per
verdict. Every other reason is in ``-v``
(:func:`h3bench.report.terminal.summary_lines`), summary.md and the report.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from h3bench.outcome import Outcome
from h3bench.quality.lossless import DEVIATIONS
from h3bench.report.terminal import (
    DIAGNOSTIC,
    part_ratio_text,
    ratio_text,
    shorten,
    summary_lines,
    verdict_line,
    worst_text,
)
from h3bench.runspec import RunSpec
from h3bench.stats import intervals
from h3bench.stats.sequential import AUDIT, FAILED, FUTILITY, LAST_LOOK, PASSED, REASONS
from h3bench.verdict.stage_effects import DIT_PER_FORWARD, E2E
from h3bench.verdict.verdicts import NOT_EVALUATED, DeviceTime, DurationVerdict, VerdictDocument, duration_key, saving

__all__ = ["campaign_summary", "screen_lines"]

_PROFILER = "profiler:"  # the parts the server's own pipeline profiler timed


# What each stopping rule of the design says on the screen, by its stored reason code
# (:data:`h3bench.stats.sequential.REASONS`, ``LookRecord.reason``), and the speed outcome it makes.
_RULES: dict[str, tuple[Outcome, Callable[[float], str]]] = {
    REASONS[PASSED]: (Outcome.PASS, lambda m: f"faster: upper bound below 1 - margin = {1 - m:.2f}"),
    REASONS[FAILED]: (Outcome.FAIL, lambda m: f"slower: lower bound above 1 + margin = {1 + m:.2f}"),
    REASONS[FUTILITY]: (Outcome.INCONCLUSIVE, lambda m: "futility: the estimate can no longer reach PASS"),
    REASONS[AUDIT]: (Outcome.FAIL,
                     lambda m: "the anti-shortcut audit failed: a cache of repeated requests is suspected"),
    REASONS[LAST_LOOK]: (Outcome.INCONCLUSIVE, lambda m: f"the interval does not clear the {m:.0%} margin either way"),
}


def _speed_rule(d: DurationVerdict) -> str | None:
    """The stopping rule that decided speed, by its stored code; None where none did.

    Where no look was taken (a candidate-only run's anchored design, or pairs
    judged at once) the one interval decides, by the stored bounds. A rule
    that a later step overruled (a pool's missing shard) did not decide the
    outcome the verdict holds; a series still running has none.
    """
    if d.estimate is None:
        return None
    if d.looks is not None and d.looks.stopped:
        rule: str | None = d.looks.reason
    elif (d.looks is None or d.looks.look is None) and d.estimate.ci_low is not None and d.estimate.ci_high is not None:
        code = int(intervals.outcome_codes(d.estimate.ci_low, d.estimate.ci_high, d.estimate.margin))
        rule = {intervals.PASS: REASONS[PASSED], intervals.FAIL: REASONS[FAILED]}.get(code, REASONS[LAST_LOOK])
    else:
        rule = None
    return rule if rule in _RULES and _RULES[rule][0] is d.speed else None


def _speed_why(d: DurationVerdict) -> str:
    """Why speed is what it is, in a few words: the rule that decided, or the first reason's head."""
    rule = _speed_rule(d)
    if rule is not None and d.estimate is not None:
        why = _RULES[rule][1](d.estimate.margin)
    else:
        why = shorten(d.speed_reasons[0] if d.speed_reasons else "not evaluated")
    if d.looks is not None and d.looks.warmup_steps is not None and d.looks.look is not None:
        verdict = "refused: first requests not steady" if d.looks.first_requests_left_out else "proven steady"
        why += f" (the {d.looks.warmup_steps}-step warmup {verdict}, -v)"
    elif d.looks is not None and d.looks.first_requests_left_out:
        why += " (first requests flagged: both bounds in -v)"
    return why


def _lossless_screen(d: DurationVerdict) -> str | None:
    """The lossless outcome on one line: what was counted and the p-value, or what to change."""
    if not d.lossless_enabled:
        return None
    summary = d.lossless
    if summary is None:
        return f"  lossless {NOT_EVALUATED}"
    counted = f"{summary.baseline_processes} + {summary.candidate_processes} processes"
    p = f", p = {summary.p_value:.3g}" if summary.p_value is not None else ""
    if summary.exact:
        return "  lossless EXACT: every candidate output decodes bitwise equal to its matched baseline output"
    if summary.outcome is Outcome.PASS:
        return f"  lossless PASS: no deviation beyond the control variability ({counted}{p})"
    if summary.outcome is Outcome.FAIL:
        metrics = [r.split(":")[0] for r in summary.reasons if r.split(":")[0] in DEVIATIONS]
        return (f"  lossless FAIL: deviation beyond the control variability in {', '.join(metrics) or 'the max-T'} "
                f"({counted}{p})")
    first = summary.reasons[0] if summary.reasons else "no reason recorded"
    if "would be needed" in first:  # the feasibility refusal: what to change is its last clause
        return f"  lossless INCONCLUSIVE: {counted} cannot decide; {first.rsplit(': ', 1)[-1]}"
    return f"  lossless INCONCLUSIVE: {shorten(first)}"


def _moved_screen(d: DurationVerdict, limit: int = 3) -> str | None:
    """Which stage moved, only when one did: the largest effects first, at most ``limit`` named."""
    if d.stages is None:
        return None
    moved = [p for p in d.stages.parts if p.moved and p.part not in (E2E, DIT_PER_FORWARD)]
    if not moved:
        return None
    # The pipeline's own stages when one of them moved (the other clocks time the same work again), the largest
    # change in seconds first.
    shown = [p for p in moved if p.part.startswith(_PROFILER)] or moved
    shown.sort(key=lambda p: -abs((p.candidate_median_s or 0.0) - (p.baseline_median_s or 0.0)))
    shown = shown[:limit]
    more = f"; {len(moved) - len(shown)} more part(s) in -v" if len(moved) > len(shown) else ""
    return ("  stage moved (attribution, not a verdict): "
            + ", ".join(f"{p.part.removeprefix(_PROFILER)} {part_ratio_text(p)}" for p in shown) + more)


def _design_screen(d: DurationVerdict, device: DeviceTime | None) -> str | None:
    """Where the design stopped, and the device time spent and saved against the fixed design."""
    look = d.looks
    if look is None:
        return None
    where = (f"look {look.look} of {len(look.looks)} ({look.pairs} pairs)" if look.look is not None
             else f"before the first look ({look.pairs} pairs)")
    state = f"stopped at {where}: {look.reason}" if look.stopped else f"ran to {where}"
    spent, fixed = look.device_s, look.fixed_device_s
    if device is not None and device.fixed_device_s:  # the duration's blocks, lossless controls included
        spent, fixed = device.device_s, device.fixed_device_s
    cost = f"{spent / 3600:.3f} device-h"
    if fixed:
        cost += f", {saving(spent, fixed)} against the fixed design's {fixed / 3600:.3f}"
    return f"  {look.design} design {state}; {cost}"


def screen_lines(spec: RunSpec, document: VerdictDocument, *, bundle: Path | None) -> list[str]:
    """The end of a campaign on one screen: at most six lines per candidate and duration, then one per verdict.

    Per candidate and duration: the ratio with its bounds and the verdict;
    where the design stopped and the device time spent and saved; the worst
    value of each quality gate; lossless; which stage moved, only when one
    did. Every other reason is in ``-v`` (:func:`summary_lines`), summary.md
    and the report.
    """
    lines = [f"runspec {spec.name} (id {spec.spec_id[:16]}); every reason: -v, summary.md and the report"]
    for duration in spec.workload.durations:
        key = duration_key(duration)
        for candidate, verdict in document.candidates.items():
            d = verdict.durations.get(key)
            if d is None:
                continue
            ratio = ratio_text(d.estimate)
            over = f" over {d.estimate.k} {d.estimate.design}" if d.estimate is not None and ratio else ""
            lines.append(f"{candidate} {key} vs {d.control}: {document.label(verdict.outcome_at(key))}; "
                         f"ratio {ratio or 'not measured'}{over}; speed {d.speed}, {_speed_why(d)}")
            lines += [line for line in (_design_screen(d, document.device.get(key)),) if line]
            worst = f"; worst {worst_text(d.worst)}" if d.worst else ""
            lines.append(f"  quality {d.quality_label} over {d.quality_pairs} matched pairs{worst}")
            lines += [line for line in (_lossless_screen(d), _moved_screen(d)) if line]
    for candidate, verdict in document.candidates.items():
        lines.append(verdict_line(document, candidate, verdict))
    unjudged = [c for c in document.not_selected if c not in document.candidates]
    if unjudged:
        lines.append(f"not judged: {', '.join(unjudged)} (none of their blocks was selected)")
    accepted = document.accepted
    if accepted is not None and accepted.final is not None:
        lines.append(f"campaign acceptance (final {accepted.final}): "
                     f"{'ACCEPTED' if accepted.accepted else 'NOT accepted'}: {shorten(accepted.reasons[0])}")
    lines += document.run_notes  # what the run itself is (DIAGNOSTIC, a shard, unverified pins): never cut
    lines.append(f"evidence bundle: {bundle}")
    if document.diagnostic:
        lines = [line if line.startswith(DIAGNOSTIC) else f"{DIAGNOSTIC} {line}" for line in lines]
    return lines


def campaign_summary(spec: RunSpec, document: VerdictDocument, *, bundle: Path | None, verbose: bool,
                     profiles: Sequence[Mapping[str, Any]] = ()) -> list[str]:
    """What a campaign prints at its end: one screen (:func:`screen_lines`), or every reason with ``-v``."""
    if verbose:
        return summary_lines(spec, document, bundle=bundle, profiles=profiles)
    return screen_lines(spec, document, bundle=bundle)
