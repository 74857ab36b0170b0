"""The plan of a campaign, before anything runs: its blocks, its cost, and what would stop it.

``h3bench plan --runspec FILE [--arm ...] [-m MARKEXPR]`` prints
(:mod:`h3bench.plan.summary`), per duration, the blocks in order with their warmup, measured and audit
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

A cheap warmup (``protocol.warmup_steps``) costs a share of a request
(:func:`warmup_share`: the stages around the DiT, and its fewer forwards); the
plan prices every warmup at it, and says what it saves per block against a full
warmup, or, for a spec without one, what upstream's 2-step dummy run would save.

A race spec is planned as its sequential counterpart, the race priced beside
it (:func:`h3bench.plan.race.race_plan`) and the live run's refusal listed.

Blocks only: the quality comparisons run on top, on the CPU.
"""

from __future__ import annotations

import dataclasses
import statistics
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path

from h3bench.course.cases import Block
from h3bench.course.course import Course
from h3bench.course.design import RACE_NOT_RUN_LIVE, Design, run_order, sequential_counterpart, series_of
from h3bench.course.designsim import SIMULATED_REQUESTS, simulate_campaigns
from h3bench.course.devicetime import ArmCost, CampaignCosts, DeviceTimeSummary, device_time, sharded_time, worst_seconds
from h3bench.course.schedule import spec_blocks
from h3bench.course.shards import check_shards
from h3bench.errors import H3BenchError, UsageError
from h3bench.evidence import BundleReader
from h3bench.h3 import expected_shape
from h3bench.plan.problems import launch_problems
from h3bench.plan.race import RacePlan, race_plan
from h3bench.run.records import Lifecycle, load_results
from h3bench.runspec import BASELINE, RunSpec
from h3bench.server.startup import StartupPhases, typical
from h3bench.stats.intervals import PASS

__all__ = ["BYTES_PER_PIXEL_FRAME", "Cost", "DeviceEstimate", "Plan", "WarmupPrice", "bundle_bytes", "campaign_costs",
           "cost_of", "device_estimates", "make_plan", "measured_start_up", "scenarios", "shard_estimates",
           "warmup_prices", "warmup_share"]

# Measured on the simulator's H.264 crf 18 outputs (0.2 bit per pixel and frame), plus 128 kbit/s of AAC.
BYTES_PER_PIXEL_FRAME = 0.2 / 8
AUDIO_BYTES_PER_S = 16_000
_SIM_STARTUP_S = 1.5  # spawn the API process and its workers
_SIM_SHUTDOWN_S = 0.5
# Upstream's start-up dummy run (num_inference_steps=2), which H3 skips: the cheap warmup a plan prices by default.
UPSTREAM_DUMMY_STEPS = 2


@dataclass(frozen=True)
class Cost:
    """Seconds of one block's phases and bytes of one output, for one duration and arm."""

    startup_s: float
    request_s: float
    first_request_extra_s: float
    shutdown_s: float
    output_bytes: float
    warmup_share: float = 1.0  # one warmup's seconds as a share of a request's (a cheap warmup's, warmup_share())

    def block_s(self, counts: tuple[int, int, int]) -> float:
        """Seconds of a block of ``counts`` (warmups, measured, audit) requests."""
        warmups, measured, audit = counts
        requests = warmups * self.warmup_share + measured + audit
        return self.startup_s + requests * self.request_s + self.first_request_extra_s + self.shutdown_s


@dataclass(frozen=True)
class WarmupPrice:
    """What a cheap warmup of ``steps`` inference steps saves per block at one duration, against a full warmup."""

    duration: float
    steps: int
    share: float  # one warmup's seconds as a share of a full request's
    saved_s: float  # wall seconds per block
    saved_device_s: float  # the same times the baseline's devices


@dataclass(frozen=True)
class DeviceEstimate:
    """The device time of the spec's design (and of the fixed design) in one scenario, over simulated campaigns."""

    scenario: str
    design: DeviceTimeSummary
    fixed_h: float  # wall hours of the fixed design, whose course is the same for every campaign (every block runs)
    extra_h: float  # wall hours of what runs beyond the formal blocks (held-out, profiling), at most
    pass_rate: float  # campaigns in which every candidate passes
    worst_h: float = 0.0  # wall hours of the dearest campaign the design can run (h3bench.course.devicetime.worst_seconds)


@dataclass(frozen=True)
class Plan:
    spec: RunSpec
    blocks: tuple[Block, ...]
    requests_per_block: tuple[int, int, int]  # warmup, measured, audit
    seconds: float | None  # None when some block has no estimate
    disk_bytes: float
    source: str
    problems: tuple[str, ...] = field(default=())
    device: tuple[DeviceEstimate, ...] = ()  # per scenario; empty when some arm or duration has no cost
    anchored: bool = False  # a candidate-only run
    warmup: tuple[WarmupPrice, ...] = ()  # per duration: what the cheap warmup saves per block (warmup_prices)
    race: RacePlan | None = None  # a race spec: priced beside its sequential counterpart (this plan's spec)

    @property
    def server_starts(self) -> int:
        return len(self.blocks)


def _history(spec: RunSpec, roots: Iterable[Path]) -> list[BundleReader]:
    found = []
    for root in roots:
        for manifest in sorted(Path(root).glob("*/manifest.json")):
            try:
                bundle = BundleReader.open(manifest.parent)
            except H3BenchError:
                continue
            if bundle.spec_id == spec.spec_id:
                found.append(bundle)
    return found


def _measured_costs(spec: RunSpec, bundles: list[BundleReader]) -> dict[tuple[float, str], Cost]:
    """Medians of what earlier bundles of this spec measured, per (duration, arm)."""
    seen: dict[tuple[float, str], dict[str, list[float]]] = {}
    for bundle in bundles:
        for result in load_results(bundle, spec_blocks(spec)).values():
            values = seen.setdefault((result.block.duration, result.block.arm), {})
            for name in ("startup_s", "warmup_s", "shutdown_s"):
                seconds = getattr(result.lifecycle.server, name)
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
            # A cheap warmup is priced as it measured; a full one as a request, and what it took beyond one.
            share = min(1.0, warmup / request) if spec.protocol.warmup_steps is not None and warmup > 0 else 1.0
            costs[key] = Cost(statistics.median(values["startup_s"]), request, max(0.0, warmup - request),
                              statistics.median(values.get("shutdown_s", [0.0])),
                              statistics.median(values.get("bytes", [0.0])), share)
    return costs


def _output_model(spec: RunSpec, duration: float) -> float:
    frames = expected_shape(duration).frames
    return frames * spec.workload.width * spec.workload.height * BYTES_PER_PIXEL_FRAME + duration * AUDIO_BYTES_PER_S


def warmup_share(spec: RunSpec, duration: float, arm: str, steps: int) -> float | None:
    """One request of ``steps`` inference steps as a share of one at ``workload.steps``; None when nothing prices it.

    From the hints, where they give the arm's DiT per-step time (else the baseline's): the DiT runs
    ``steps - 1`` forwards (H3's loop), every other stage is the same. Else from a simulator arm's
    profile, both requests modelled.
    """
    full = spec.workload.steps
    hints = spec.hints
    key = f"{duration:g}"
    if hints is not None and key in hints.e2e_s.get(arm, {}):
        step = hints.dit_step_s.get(arm, hints.dit_step_s.get(BASELINE, {})).get(key)
        if step is None:
            return None
        e2e = hints.e2e_s[arm][key]
        dit = min(step * (full - 1), e2e)
        return (e2e - dit * (1 - (steps - 1) / (full - 1))) / e2e
    profile_table = spec.arms[arm].sim
    if profile_table is None:
        return None
    import numpy as np

    from h3bench.sim.profile import parse_profile  # the simulator's model, only for simulator arms

    profile = parse_profile({**profile_table, "jitter_cv": 0.0}, source=f"arms.{arm}.sim")
    frames = expected_shape(duration).frames
    cheap, whole = (profile.plan(frames, np.random.default_rng(0), num_inference_steps=n).total_s for n in (steps, full))
    return cheap / whole


def _share(spec: RunSpec, duration: float, arm: str) -> float:
    """One warmup's share of a request in this spec: 1 for a full warmup, or for a cheap one nothing prices."""
    steps = spec.protocol.warmup_steps
    return 1.0 if steps is None else warmup_share(spec, duration, arm, steps) or 1.0


def warmup_prices(spec: RunSpec, history: Iterable[Path] = ()) -> tuple[WarmupPrice, ...]:
    """Per duration, what the spec's cheap warmup (else upstream's 2-step one) saves in each baseline block."""
    steps = spec.protocol.warmup_steps or UPSTREAM_DUMMY_STEPS
    out = []
    for duration in spec.workload.durations:
        share = warmup_share(spec, duration, BASELINE, steps)
        cost = cost_of(spec, duration, BASELINE, history)
        if share is None or cost is None:
            continue
        saved = spec.protocol.warmups_per_block * cost.request_s * (1 - share)
        devices = max(1, len(getattr(spec.arms[BASELINE], "device_ids", None) or spec.hardware.device_ids or ()))
        out.append(WarmupPrice(duration, steps, share, saved, saved * devices))
    return tuple(out)


def _modelled_cost(spec: RunSpec, duration: float, arm: str) -> Cost | None:
    """From the spec's hints, else from a simulator arm's profile; None when neither says."""
    hints = spec.hints
    if hints is not None and arm in hints.e2e_s and f"{duration:g}" in hints.e2e_s[arm]:
        return Cost(hints.of("startup_s", arm), hints.e2e_s[arm][f"{duration:g}"], hints.of("compile_s", arm),
                    hints.of("shutdown_s", arm), _output_model(spec, duration), _share(spec, duration, arm))
    profile_table = spec.arms[arm].sim
    if profile_table is None:
        return None
    from h3bench.sim.profile import parse_profile  # the simulator's model, only for simulator arms

    profile = parse_profile({**profile_table, "jitter_cv": 0.0}, source=f"arms.{arm}.sim")
    frames = expected_shape(duration).frames
    import numpy as np

    stages = profile.plan(frames, np.random.default_rng(0), num_inference_steps=spec.workload.steps)
    first = profile.plan(frames, np.random.default_rng(0), num_inference_steps=spec.workload.steps, nth=1)
    startup = profile.load_s + (profile.compile_s if profile.compile == "startup" else 0.0)
    return Cost(_SIM_STARTUP_S + startup * profile.time_scale, stages.total_s,
                max(0.0, first.total_s - stages.total_s), _SIM_SHUTDOWN_S, _output_model(spec, duration),
                _share(spec, duration, arm))


def cost_of(spec: RunSpec, duration: float, arm: str, history: Iterable[Path] = ()) -> Cost | None:
    """The best estimate of one block's phases: earlier bundles of the spec, else its hints or profile.

    A candidate that nothing prices is priced as the baseline (no effect).
    """
    measured = _measured_costs(spec, _history(spec, history))
    found = measured.get((duration, arm)) or _modelled_cost(spec, duration, arm)
    if found is None and arm != BASELINE:
        return cost_of(spec, duration, BASELINE, history)
    return found


def measured_start_up(path: Path) -> StartupPhases:
    """The typical server start of a stored bundle, by phase (any spec: the same engine and checkpoint on a host)."""
    lines = [Lifecycle.from_record(r) for r in BundleReader.open(path).lifecycle()]
    found = typical(p for line in lines if (p := line.startup_phases) is not None and p.ready_s is not None)
    if found is None:
        raise UsageError(f"bundle {path} records no server start by phase (it was written before h3bench recorded "
                         "startup_phases, or no server became ready); price from the hints instead")
    return found


def campaign_costs(spec: RunSpec, history: Iterable[Path], startup_s: float | None = None,
                   ) -> tuple[CampaignCosts, dict[str, list[float]]] | None:
    """Each duration's baseline block costs and each candidate's, from the best source; None when one is unknown."""
    order = run_order(spec)
    known = {(d, arm): cost_of(spec, d, arm, history) for d in order for arm in spec.arms}
    if any(cost is None for cost in known.values()):
        return None

    def arm_cost(arm: str, duration: float) -> ArmCost:
        cost = known[(duration, arm)]
        assert cost is not None
        devices = getattr(spec.arms[arm], "device_ids", None) or spec.hardware.device_ids
        start = cost.startup_s if startup_s is None else startup_s
        return ArmCost(cost.request_s, start, cost.shutdown_s, cost.first_request_extra_s,
                       max(1, len(devices or ())), cost.warmup_share)

    baseline = tuple(arm_cost(BASELINE, d) for d in order)
    candidates = tuple(arm_cost(arm, order[0]) for arm in spec.candidates)
    ratios = {arm: [arm_cost(arm, d).request_s / baseline[i].request_s for i, d in enumerate(order)]
              for arm in spec.candidates}
    return CampaignCosts(order, baseline, candidates), ratios


def device_estimates(spec: RunSpec, history: Iterable[Path] = (), *, n: int = 2000, startup_s: float | None = None,
                     ) -> tuple[DeviceEstimate, ...]:
    """Expected device time of the spec's design and of the fixed design: no effect, a true 10 %, the costs' own.

    Simulated through the campaign's own decision code
    (:func:`h3bench.course.designsim.simulate_campaigns`), priced by
    :func:`h3bench.course.devicetime.device_time`: server starts and stops,
    warmups, measured requests, audits and lossless control blocks. The
    held-out and profiling phases run on top (``extra_h``: when every
    candidate passes).
    """
    found = campaign_costs(spec, history, startup_s)
    if found is None or not spec.candidates or spec.protocol.requests_per_block > SIMULATED_REQUESTS:
        return ()
    costs, own = found
    course = Course.of(spec)
    design, fixed = course.design, Design.fixed_of(spec)
    lossless = spec.gates.lossless
    estimates = []
    for name, ratios in scenarios(spec, own, [series.arm for series in series_of(spec)]).items():
        run = simulate_campaigns(design, ratios, n=n, lossless=lossless, control_arms=course.control_arms)
        passed = float((run.outcome == PASS).all(-1).mean())
        # The fixed design runs every block of its course whatever the data: its dearest campaign is its only one.
        fixed_h = worst_seconds(dataclasses.replace(course, design=fixed), costs, ratios)[0] / 3600
        estimates.append(DeviceEstimate(name, device_time(run, costs).summary(), fixed_h, _extra_h(spec, costs),
                                        passed, worst_seconds(course, costs, ratios)[0] / 3600))
    return tuple(estimates)


def scenarios(spec: RunSpec, own: dict[str, list[float]], arms: list[str]) -> dict[str, list[list[float]]]:
    """True ratios ``[arm][duration]`` per scenario: no effect, a true 10 %, and the costs' own when they differ."""
    n_durations = len(spec.workload.durations)
    scenarios = {"no effect": [[1.0] * n_durations] * len(arms),
                 "a true 10 % speedup": [[0.9] * n_durations] * len(arms)}
    if any(abs(r - 1) > 1e-9 for ratios in own.values() for r in ratios):
        scenarios["the costs' own effect (" + ", ".join(f"{c} {'/'.join(f'{r:.3f}' for r in own[c])}"
                                                        for c in spec.candidates) + ")"] = [own[a] for a in arms]
    return scenarios


def _race(spec: RunSpec, history: Iterable[Path], startup_s: float | None) -> RacePlan:
    """The race priced at its sequential counterpart's costs (its history: that spec's bundles), in its scenarios."""
    found = campaign_costs(sequential_counterpart(spec), history, startup_s)
    if found is None or spec.protocol.requests_per_block > SIMULATED_REQUESTS:
        return race_plan(spec, None, {})
    return race_plan(spec, found[0], scenarios(spec, found[1], list(spec.candidates)))


def shard_estimates(spec: RunSpec, shards: int, history: Iterable[Path] = (), *, n: int = 2000
                    ) -> tuple[tuple[str, DeviceTimeSummary], ...]:
    """Per scenario (no effect, a true 10 %): one host's wall hours and every host's device-hours over ``shards`` hosts.

    The same simulated campaigns as :func:`device_estimates`, priced as a
    sharded campaign runs them (:func:`h3bench.course.devicetime.sharded_time`).
    """
    found = campaign_costs(spec, history)
    if found is None or not spec.candidates:
        return ()
    costs, _ = found
    check_shards(spec, shards)
    n_candidates = len(series_of(spec))
    out = []
    for name, ratio in (("no effect", 1.0), ("a true 10 % speedup", 0.9)):
        run = simulate_campaigns(Design.of(spec), [[ratio] * len(costs.durations)] * n_candidates, n=n,
                                 lossless=spec.gates.lossless, shards=shards,
                                 control_arms=Course.of(spec).control_arms)
        out.append((name, sharded_time(run, costs, shards).summary()))
    return tuple(out)


def _extra_h(spec: RunSpec, costs: CampaignCosts) -> float:
    """Wall hours of the held-out phase (every candidate, both arms) and of the profiled requests, at most."""
    seconds = 0.0
    for base in costs.baseline:
        if spec.heldout is not None:  # one AB or BA pair per candidate
            per_block = base.startup_s + base.shutdown_s + (spec.protocol.warmups_per_block + spec.heldout.cases) \
                * base.request_s
            seconds += 2 * len(spec.candidates) * per_block
        if spec.protocol.profile:  # one extra request per arm
            seconds += len(spec.arms) * base.request_s
    return seconds / 3600


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
    lock_path: Path | None = None,
    anchored: bool = False,
    evidence_root: Path | None = None,
    startup_bundle: Path | None = None,
) -> Plan:
    """The plan of the blocks that ``arms`` and ``selects`` keep, with costs from the best source at hand.

    ``anchored``: a candidate-only run, which runs the spec's anchored order.
    ``lock_path``: the device lock the campaign would take (:class:`h3bench.session.settings.Settings`);
    a spec with device checks cannot start while another campaign holds it.
    ``evidence_root``: where the bundle would go; a directory that cannot hold it is a problem, as it is
    for the campaign. ``startup_bundle``: a stored bundle whose measured server starts (their phases)
    price every start, in place of the hints' or the history's.
    """
    if Design.of(spec).race:  # planned as the sequential design it is priced beside, the race on top
        history = tuple(history)
        plan = make_plan(sequential_counterpart(spec), arms=arms, selects=selects, history=history,
                         lpips_dir=lpips_dir, lock_path=lock_path, anchored=anchored, evidence_root=evidence_root,
                         startup_bundle=startup_bundle)
        start = measured_start_up(startup_bundle) if startup_bundle is not None else None
        race = None if anchored else _race(spec, history, start.ready_s if start else None)
        return dataclasses.replace(plan, problems=(*plan.problems, RACE_NOT_RUN_LIVE), race=race)
    protocol = spec.protocol
    counts = (protocol.warmups_per_block, protocol.requests_per_block, int(protocol.audit))
    blocks = tuple(b for b in spec_blocks(spec, arms, anchored=anchored) if selects(b))
    bundles = _history(spec, history)
    measured = _measured_costs(spec, bundles)
    seconds: float | None = 0.0
    disk = 0.0
    used_history = False
    unpriced = sorted({b.arm for b in blocks if b.arm != BASELINE and measured.get((b.duration, b.arm)) is None
                       and _modelled_cost(spec, b.duration, b.arm) is None})
    start = measured_start_up(startup_bundle) if startup_bundle is not None else None
    for block in blocks:
        cost = measured.get((block.duration, block.arm))
        used_history |= cost is not None
        cost = cost or _modelled_cost(spec, block.duration, block.arm) or (
            _modelled_cost(spec, block.duration, BASELINE) if block.arm in unpriced else None)
        if cost is not None and start is not None and start.ready_s is not None:
            cost = dataclasses.replace(cost, startup_s=start.ready_s)
        if cost is None:
            seconds = None
        elif seconds is not None:
            seconds += cost.block_s(counts)
        disk += (cost.output_bytes if cost else _output_model(spec, block.duration)) * sum(counts)
    if used_history:
        source = "medians of earlier bundles of this spec: " + ", ".join(b.path.name for b in bundles)
    elif spec.hints is not None:
        source = f"the spec's hints ({spec.hints.source})"
        if not (spec.hints.of("startup_s", "baseline") or spec.hints.of("compile_s", "baseline")):
            source += "; server starts and compilation are not included, the hints give none"
    elif any(arm.sim is not None for arm in spec.arms.values()):
        source = "the simulator arms' own profiles (their modelled stage times)"
    else:
        source = "nothing: no earlier bundle of this spec and no [hints] in it"
    if unpriced:
        source += f"; {', '.join(unpriced)} priced as the baseline (no figure of their own)"
    if start is not None and startup_bundle is not None:
        source += f"; every server start as bundle {startup_bundle.name} measured it ({start.describe()})"
    evidence = (evidence_root.resolve(), disk) if evidence_root is not None else None
    return Plan(spec, blocks, counts, seconds, disk, source, tuple(launch_problems(spec, lpips_dir, lock_path, evidence)),
                device_estimates(spec, history, startup_s=start.ready_s if start else None) if not anchored else (),
                anchored, warmup_prices(spec, history))
