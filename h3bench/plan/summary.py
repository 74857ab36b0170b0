"""The plan as the terminal shows it: ``h3bench plan``'s lines from a :class:`~h3bench.plan.estimate.Plan`.

Per duration the blocks in order, grouped by series; the server starts; the
estimated wall time and its source; the expected device time of the design
over simulated campaigns (and over several hosts with ``--shards``); the
lossless test's error rate and where its controls go; the disk; and every
problem found before launch. A race spec: the same for the sequential design
of the spec, the race's own device time, PASS rates and family-wise error
rates beside it (:func:`race_lines`), and the live run's refusal as a problem.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from pathlib import Path

import numpy as np

from h3bench.course.cases import Block
from h3bench.course.course import Course
from h3bench.course.design import Design, control_blocks, design_text, lossless_level, run_order
from h3bench.course.designsim import SIMULATED_REQUESTS
from h3bench.h3 import workload_marker
from h3bench.plan.estimate import Plan, shard_estimates
from h3bench.plan.race import RacePlan
from h3bench.quality import lossless_design
from h3bench.runspec import RunSpec
from h3bench.stats.intervals import ALPHA

__all__ = ["block_groups", "control_lines", "dearer_than_fixed", "lossless_rate_line", "plan_lines", "race_lines",
           "shard_lines", "warmup_line"]


def _duration(seconds: float) -> str:
    minutes, secs = divmod(round(seconds), 60)
    hours, minutes = divmod(minutes, 60)
    return f"{hours} h {minutes:02d} min" if hours else f"{minutes} min {secs:02d} s"


def block_groups(blocks: Iterable[Block]) -> str:
    """Blocks in order, grouped by what they are: the lossless controls, then each series under its name.

    Positions restart in each group (each series has its own AB/BA order), so
    the group's name keeps "1A baseline" of the controls apart from "1A
    baseline" of a series.
    """
    groups: list[tuple[str, list[str]]] = []
    for b in blocks:
        if b.kind == "controls":
            name, label = "lossless controls", f"{b.position} {b.arm}"
        else:
            name = b.candidate + (" (anchored)" if b.kind == "anchored" else "")
            label = f"{b.position}{b.letter} {b.arm}"
        if not groups or groups[-1][0] != name:
            groups.append((name, []))
        groups[-1][1].append(label)
    return "; ".join(f"{name}: {', '.join(labels)}" for name, labels in groups)


def _three(hours: tuple[float, float, float], unit: str) -> str:
    """Mean / p90 / max in hours, or in minutes when even the maximum is under an hour (the simulator)."""
    if max(hours) < 1:
        return " / ".join(f"{h * 60:.1f}" for h in hours) + f" {unit} min"
    return " / ".join(f"{h:.1f}" for h in hours) + f" {unit} h"


def _one(hours: float, unit: str) -> str:
    """One figure in :func:`_three`'s unit."""
    return _three((hours,) * 3, unit).split(" / ")[-1]


def lossless_rate_line(spec: RunSpec) -> str:
    """How often a truly lossless candidate is rejected by the lossless test over its durations."""
    levels = [lossless_level(spec, d) for d in run_order(spec)]
    if not Design.of(spec).sequential:  # the exact level of the fixed design's processes
        pairs = len(spec.protocol.order) // 2
        course = Course.of(spec)  # a candidate against the baseline: the controls and every such series' A blocks
        baseline = int(course.baseline_processes(np.full(course.n_series, pairs), control_blocks(spec))[0])
        rate = lossless_design.false_reject_per_candidate([(baseline, pairs)] * len(levels), levels)
        how = f"exactly, with {baseline} baseline + {pairs} candidate processes per duration"
    else:  # each duration's exact test is at most its level
        rate = 1 - math.prod(1 - a for a in levels)
        how = "at most: " + ", ".join(f"{a:g} at {d:g} s" for a, d in zip(levels, run_order(spec), strict=True))
    n = len(spec.candidates)
    some = f"; one of the {n} candidates in at most {1 - (1 - rate) ** n:.1%}" if n > 1 else ""
    return f"lossless: a truly lossless candidate is rejected in {rate:.2%} of campaigns ({how}){some}"


def control_lines(spec: RunSpec) -> list[str]:
    """Where a sequential lossless campaign's control blocks go, how many can run, and when they do not."""
    if not Design.of(spec).sequential or not spec.gates.lossless:
        return []
    course = Course.of(spec)
    lines = []
    for d, duration in enumerate(run_order(spec)):
        f, slots = course.first_pass(d), course.control_slots(d)
        needed = lossless_design.baseline_needed(f, course.design.lossless_alpha(d))
        if slots:
            lines.append(f"lossless controls at {duration:g} s: up to {slots} before round {f}, where PASS is first "
                         f"allowed; its test needs {needed} baseline processes with {f} candidate ones, and every "
                         f"series' A blocks count, so they run only for what the series still running leave short "
                         f"(none when {-(-needed // f)} or more series reach round {f}; a series against a distinct "
                         f"original baseline counts only its own A blocks, and no control block makes up for them)")
    return lines


def _device_lines(p: Plan) -> list[str]:
    if not p.device and p.requests_per_block[1] > SIMULATED_REQUESTS:
        return [f"expected device time: not simulated ({p.requests_per_block[1]} measured requests per block; the "
                f"campaign simulation draws at most {SIMULATED_REQUESTS})"]
    if not p.device:
        return ["expected device time: unknown (no cost for some arm or duration)"]
    design = p.spec.protocol.design
    lines = [f"expected device time of the {design} design (mean / p90 / max over {2000} simulated campaigns; "
             "starts, stops, warmups, measured requests, audits and lossless controls):"]
    for e in p.device:
        extra = f"; held-out and profiling add at most {_one(e.extra_h, 'wall')}" if e.extra_h else ""
        worst = f"; at worst {_one(e.worst_h, 'wall')}" if Design.of(p.spec).sequential else ""
        lines.append(f"  {e.scenario}: {_three(e.design.wall_h, 'wall')}, {_three(e.design.device_h, 'device')} "
                     f"(fixed design: {_one(e.fixed_h, 'wall')}{worst}; every candidate PASS in "
                     f"{e.pass_rate:.0%}){extra}")
    return lines


def warmup_line(p: Plan) -> str | None:
    """What the spec's cheap warmup saves per block, or what upstream's 2-step one would; None when nothing prices it."""
    if not p.warmup:
        return None
    steps, full = p.warmup[0].steps, p.spec.workload.steps
    saved = ", ".join(f"{w.duration:g} s: {w.share:.1%} of a request, {_duration(w.saved_s)} "
                      f"({w.saved_device_s / 3600:.2f} device-h)" for w in p.warmup)
    accepted = ("accepted only where the two-sided first-request check finds the first measured requests steady, "
                "else each bound they can bias is also judged without them")
    if p.spec.protocol.warmup_steps is not None:
        return (f"cheap warmup: {steps} of {full} inference steps (protocol.warmup_steps), priced in every block; "
                f"saved per block against a full warmup: {saved}; {accepted}")
    return (f"warmup: a full request ({full} steps); a {steps}-step warmup (protocol.warmup_steps = {steps}, upstream's "
            f"dummy run) would save per block: {saved}; {accepted}")


def dearer_than_fixed(p: Plan) -> list[str]:
    """Scenarios in which the dearest campaign the sequential design can run costs more than the fixed design."""
    if not Design.of(p.spec).sequential:
        return []
    return [f"the sequential design can cost up to {e.worst_h:.3g} h of wall time ({e.scenario}), more than the "
            f"fixed design's {e.fixed_h:.3g} h: end the dearer durations' looks at the fixed design's pairs "
            "(protocol.looks) or fewer pairs at the cheapest" for e in p.device if e.worst_h > e.fixed_h * 1.0005]


def race_lines(race: RacePlan, p: Plan) -> list[str]:
    """The race's device time per scenario beside the sequential design's, each candidate's PASS rate, the family's
    error rates."""
    sequential = {e.scenario: e.design.wall_h[0] for e in p.device}
    errors = race.errors
    lines = [f"expected device time of the race (mean / p90 / max over {errors.n} simulated races; starts, stops, "
             "warmups, measured requests and audits; no lossless controls):"]
    for e in race.device:
        beside = f"; sequential design: {_one(sequential[e.scenario], 'wall')}" if e.scenario in sequential else ""
        each = ", ".join(f"{name} {rate:.0%}" for name, rate in zip(race.spec.candidates, e.pass_rates, strict=True))
        lines.append(f"  {e.scenario}: {_three(e.race.wall_h, 'wall')}, {_three(e.race.device_h, 'device')}"
                     f"{beside}; PASS per candidate: {each}")
    if not race.device:
        lines.append("  unknown (no cost for some arm or duration)")
    lines += [f"warning: the race costs more than the sequential design ({e.scenario}: {e.race.wall_h[0]:.3g} h against "
              f"{sequential[e.scenario]:.3g} h of mean wall time)" for e in race.device
              if e.race.wall_h[0] > sequential.get(e.scenario, float("inf"))]
    worst = (f", {errors.faster_worst:.2%} at the intersection-union worst case over durations"
             if errors.faster_worst is not None else "")
    lines.append(f"race's family-wise error rates ({errors.n} simulated races, budget {ALPHA / 2:.1%} each): false "
                 f"\"faster\" {errors.faster:.2%} with every candidate at 1 - margin{worst}; false \"slower\" "
                 f"{errors.slower:.2%} with every candidate at 1 + margin")
    return lines


def plan_lines(p: Plan) -> list[str]:
    """The plan as the terminal shows it."""
    shown = p.race.spec if p.race is not None else p.spec
    lines = [f"plan of {shown.name} (id {shown.spec_id[:16]}): {design_text(shown, anchored=p.anchored)}"]
    if p.race is not None:
        lines.append("blocks, wall time and device time below are the sequential design's (the same spec with "
                     "design = \"sequential\"), which the race is priced beside")
    for duration in p.spec.workload.durations:
        blocks = [b for b in p.blocks if b.duration == duration]
        if blocks:
            lines.append(f"  {workload_marker(duration)} ({len(blocks)} blocks): " + block_groups(blocks))
    lines.append(f"server starts: {p.server_starts}")
    if p.seconds is None:
        lines.append(f"estimated wall time: unknown (no hint for some arm or duration; source: {p.source})")
    else:
        every = ("every planned block; a sequential campaign stops most series earlier"
                 if Design.of(p.spec).sequential else "the blocks")
        lines.append(f"estimated wall time: {_duration(p.seconds)} for {every}, quality on top (source: {p.source})")
    lines += _device_lines(p)
    if p.race is not None:
        lines += race_lines(p.race, p)
    if (warmup := warmup_line(p)) is not None:
        lines.append(warmup)
    lines += [f"warning: {line}" for line in dearer_than_fixed(p)]
    if p.spec.gates.lossless:
        lines.append(lossless_rate_line(p.spec))
        lines += control_lines(p.spec)
    lines.append(f"estimated disk for the bundle: {p.disk_bytes / 1e6:.1f} MB")
    lines += [f"problem: {problem}" for problem in p.problems] or ["problems found before launch: none"]
    return lines


def shard_lines(spec: RunSpec, shards: int, history: Iterable[Path] = ()) -> list[str]:
    """What ``h3bench plan --shards N`` adds: each host's wall time and the campaign's device-hours."""
    found = shard_estimates(spec, shards, history)
    if not found:
        return [f"over {shards} hosts: unknown (no cost for some arm or duration)"]
    lines = [f"over {shards} hosts (shards of whole AB/BA units; mean / p90 / max over 2000 simulated campaigns):"]
    for name, summary in found:
        lines.append(f"  {name}: each host {_three(summary.wall_h, 'wall')}, the campaign "
                     f"{_three(summary.device_h, 'device')}")
    return lines
