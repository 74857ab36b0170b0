"""The plan of a campaign, before anything runs: its blocks, its cost, and what would stop it.

``h3bench plan --runspec FILE [--arm ...] [-m MARKEXPR]`` prints, per
duration, the blocks in order with their warmup, measured and audit
requests; the number of server starts; the estimated wall time and where the
estimate comes from; the disk the bundle will need; and every problem found
before launch (unpinned fields, input files that fail their pins, missing
LPIPS weights, a device lock held by another campaign, busy or missing NPUs).

Estimates, best source first:

1. the medians of earlier bundles of the same spec id (per duration and arm:
   startup, warmup, request E2E, shutdown; output sizes), and the plan names
   those bundles;
2. the spec's ``[hints]`` (for the NPU specs, the 950PR and 910B1 figures of
   the campaign and the recipe);
3. for simulator arms, the arm's own profile (its modelled stage times).

Blocks only: the quality comparisons run on top, on the CPU.
"""

from __future__ import annotations

import statistics
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path

from h3bench.errors import H3BenchError
from h3bench.evidence import Bundle
from h3bench.h3 import expected_shape, workload_marker
from h3bench.host.devices import DEFAULT_LOCK_PATH, DeviceLock
from h3bench.plan.design import design_problems, design_warnings
from h3bench.run.records import load_results
from h3bench.runspec import UNPINNED, RunSpec
from h3bench.runspec.schedule import Block, spec_blocks

__all__ = ["BYTES_PER_PIXEL_FRAME", "Cost", "Plan", "bundle_bytes", "cost_of", "make_plan", "plan_lines"]

# Measured on the simulator's H.264 crf 18 outputs (0.2 bit per pixel and frame), plus 128 kbit/s of AAC.
BYTES_PER_PIXEL_FRAME = 0.2 / 8
AUDIO_BYTES_PER_S = 16_000
_SIM_STARTUP_S = 1.5  # spawn the API process and its workers
_SIM_SHUTDOWN_S = 0.5


@dataclass(frozen=True)
class Cost:
    """Seconds of one block's phases and bytes of one output, for one duration and arm."""

    startup_s: float
    request_s: float
    first_request_extra_s: float
    shutdown_s: float
    output_bytes: float

    def block_s(self, requests: int) -> float:
        return self.startup_s + requests * self.request_s + self.first_request_extra_s + self.shutdown_s


@dataclass(frozen=True)
class Plan:
    spec: RunSpec
    blocks: tuple[Block, ...]
    requests_per_block: tuple[int, int, int]  # warmup, measured, audit
    seconds: float | None  # None when some block has no estimate
    disk_bytes: float
    source: str
    problems: tuple[str, ...] = field(default=())

    @property
    def server_starts(self) -> int:
        return len(self.blocks)


def _history(spec: RunSpec, roots: Iterable[Path]) -> list[Bundle]:
    found = []
    for root in roots:
        for manifest in sorted(Path(root).glob("*/manifest.json")):
            try:
                bundle = Bundle.open(manifest.parent)
            except H3BenchError:
                continue
            if bundle.spec_id == spec.spec_id:
                found.append(bundle)
    return found


def _measured_costs(spec: RunSpec, bundles: list[Bundle]) -> dict[tuple[float, str], Cost]:
    """Medians of what earlier bundles of this spec measured, per (duration, arm)."""
    seen: dict[tuple[float, str], dict[str, list[float]]] = {}
    for bundle in bundles:
        for result in load_results(bundle, spec_blocks(spec)).values():
            values = seen.setdefault((result.block.duration, result.block.arm), {})
            for name in ("startup_s", "warmup_s", "shutdown_s"):
                seconds = getattr(result.lifecycle, name)
                if seconds is not None:
                    values.setdefault(name, []).append(seconds)
            values.setdefault("request_s", []).extend(result.latencies)
            for sample in result.measured:
                if sample.output_sha256 and (bundle.path / "outputs" / f"{sample.output_sha256}.mp4").is_file():
                    size = (bundle.path / "outputs" / f"{sample.output_sha256}.mp4").stat().st_size
                    values.setdefault("bytes", []).append(float(size))
    costs = {}
    for key, values in seen.items():
        if values.get("request_s") and values.get("startup_s"):
            request = statistics.median(values["request_s"])
            warmup = statistics.median(values.get("warmup_s", [request]))
            costs[key] = Cost(statistics.median(values["startup_s"]), request, max(0.0, warmup - request),
                              statistics.median(values.get("shutdown_s", [0.0])),
                              statistics.median(values.get("bytes", [0.0])))
    return costs


def _output_model(spec: RunSpec, duration: float) -> float:
    frames = expected_shape(duration).frames
    return frames * spec.workload.width * spec.workload.height * BYTES_PER_PIXEL_FRAME + duration * AUDIO_BYTES_PER_S


def _modelled_cost(spec: RunSpec, duration: float, arm: str) -> Cost | None:
    """From the spec's hints, else from a simulator arm's profile; None when neither says."""
    hints = spec.hints
    if hints is not None and arm in hints.e2e_s and f"{duration:g}" in hints.e2e_s[arm]:
        return Cost(hints.startup_s, hints.e2e_s[arm][f"{duration:g}"], hints.compile_s, hints.shutdown_s,
                    _output_model(spec, duration))
    profile_table = spec.arms[arm].sim
    if profile_table is None:
        return None
    from h3bench.sim.profile import parse_profile  # the simulator's model, only for simulator arms

    profile = parse_profile({**profile_table, "jitter_cv": 0.0}, source=f"arms.{arm}.sim")
    frames = expected_shape(duration).frames
    import numpy as np

    stages = profile.plan(frames, np.random.default_rng(0), num_inference_steps=spec.workload.steps)
    first = profile.plan(frames, np.random.default_rng(0), num_inference_steps=spec.workload.steps, first=True)
    return Cost(_SIM_STARTUP_S + profile.load_s * profile.time_scale, stages.total_s,
                first.total_s - stages.total_s, _SIM_SHUTDOWN_S, _output_model(spec, duration))


def cost_of(spec: RunSpec, duration: float, arm: str, history: Iterable[Path] = ()) -> Cost | None:
    """The best estimate of one block's phases: earlier bundles of the spec, else its hints or profile."""
    measured = _measured_costs(spec, _history(spec, history))
    return measured.get((duration, arm)) or _modelled_cost(spec, duration, arm)


def _problems(spec: RunSpec, lpips_dir: Path | None, lock_path: str | Path) -> list[str]:
    problems = [f"{path} is {UNPINNED}: a formal campaign needs it pinned" for path in spec.unpinned]
    try:
        spec.verify_inputs()
    except H3BenchError as exc:
        problems.append(str(exc))
    if spec.gates.lpips_required:
        try:
            from h3bench.metrics.lpips_weights import authenticate_weights

            authenticate_weights(lpips_dir)
        except H3BenchError as exc:
            problems.append(f"LPIPS weights: {exc}")
    holder = DeviceLock(lock_path).holder()
    if holder is not None:
        problems.append(f"the device lock {lock_path} is held by {holder}: another campaign is running on this host")
    if spec.hardware.kind != "sim":
        problems += _device_problems(spec)
    return problems + design_problems(spec, lossless_on=spec.gates.lossless) + design_warnings(spec)


def _device_problems(spec: RunSpec) -> list[str]:
    from h3bench.host.devices import NpuSmiCheck

    try:
        NpuSmiCheck(spec.hardware.device_ids).before_start()
    except H3BenchError as exc:
        return [f"devices: {exc}"]
    return []


def bundle_bytes(spec: RunSpec, arms: str = "all", *, anchored: bool = False) -> float:
    """The disk the blocks of ``arms`` need for their outputs, by the output-size model of :func:`make_plan`."""
    protocol = spec.protocol
    requests = protocol.warmups_per_block + protocol.requests_per_block + int(protocol.audit)
    return sum(_output_model(spec, block.duration) * requests for block in spec_blocks(spec, arms, anchored=anchored))


def make_plan(
    spec: RunSpec,
    *,
    arms: str = "all",
    selects: Callable[[Block], bool] = lambda block: True,
    history: Iterable[Path] = (),
    lpips_dir: Path | None = None,
    lock_path: str | Path = DEFAULT_LOCK_PATH,
    anchored: bool = False,
) -> Plan:
    """The plan of the blocks that ``arms`` and ``selects`` keep, with costs from the best source at hand.

    ``anchored``: a candidate-only run, which runs the spec's anchored order.
    """
    protocol = spec.protocol
    counts = (protocol.warmups_per_block, protocol.requests_per_block, int(protocol.audit))
    blocks = tuple(b for b in spec_blocks(spec, arms, anchored=anchored) if selects(b))
    bundles = _history(spec, history)
    measured = _measured_costs(spec, bundles)
    seconds: float | None = 0.0
    disk = 0.0
    used_history = False
    for block in blocks:
        cost = measured.get((block.duration, block.arm))
        used_history |= cost is not None
        cost = cost or _modelled_cost(spec, block.duration, block.arm)
        if cost is None:
            seconds = None
        elif seconds is not None:
            seconds += cost.block_s(sum(counts))
        disk += (cost.output_bytes if cost else _output_model(spec, block.duration)) * sum(counts)
    if used_history:
        source = "medians of earlier bundles of this spec: " + ", ".join(b.path.name for b in bundles)
    elif spec.hints is not None:
        source = f"the spec's hints ({spec.hints.source})"
        if not (spec.hints.startup_s or spec.hints.compile_s):
            source += "; server starts and compilation are not included, the hints give none"
    elif any(arm.sim is not None for arm in spec.arms.values()):
        source = "the simulator arms' own profiles (their modelled stage times)"
    else:
        source = "nothing: no earlier bundle of this spec and no [hints] in it"
    return Plan(spec, blocks, counts, seconds, disk, source, tuple(_problems(spec, lpips_dir, lock_path)))


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
        if b.design == "controls":
            name, label = "lossless controls", f"{b.position} {b.arm}"
        else:
            name = b.candidate + (" (anchored)" if b.design == "anchored" else "")
            label = f"{b.position}{b.letter} {b.arm}"
        if not groups or groups[-1][0] != name:
            groups.append((name, []))
        groups[-1][1].append(label)
    return "; ".join(f"{name}: {', '.join(labels)}" for name, labels in groups)


def plan_lines(p: Plan) -> list[str]:
    """The plan as the terminal shows it."""
    warmups, measured, audit = p.requests_per_block
    lines = [f"plan of {p.spec.name} (id {p.spec.spec_id[:16]}), order {p.spec.protocol.order}: per block "
             f"{warmups} warmup + {measured} measured" + (f" + {audit} audit" if audit else "") + " requests"]
    for duration in p.spec.workload.durations:
        blocks = [b for b in p.blocks if b.duration == duration]
        if blocks:
            lines.append(f"  {workload_marker(duration)} ({len(blocks)} blocks): " + block_groups(blocks))
    lines.append(f"server starts: {p.server_starts}")
    if p.seconds is None:
        lines.append(f"estimated wall time: unknown (no hint for some arm or duration; source: {p.source})")
    else:
        lines.append(f"estimated wall time: {_duration(p.seconds)} for the blocks, quality on top "
                     f"(source: {p.source})")
    lines.append(f"estimated disk for the bundle: {p.disk_bytes / 1e6:.1f} MB")
    lines += [f"problem: {problem}" for problem in p.problems] or ["problems found before launch: none"]
    return lines
