"""The device time a campaign design costs: simulated campaigns priced per block, in wall hours and device-hours.

A block costs ``startup + shutdown + (warmups + measured + audit) × request
+ compile`` seconds of its arm's devices (:class:`ArmCost`); blocks run one
after another on one node, so a campaign's wall time is the sum over the
blocks it ran (:class:`h3bench.course.designsim.CampaignRun`: pairs per candidate
and duration, control blocks per duration) and its device time the sum of
each block's seconds times its arm's devices. A candidate's request takes
the baseline's times its true ratio in the scenario simulated (no effect, a
true 10 %, the effect the spec's hints expect).

:func:`device_time` gives every simulated campaign's figures and their
parts (server starts and stops, warmups, measured requests, audits, lossless
control blocks); :meth:`DeviceTime.summary` the mean, the 90th percentile
(nearest rank) and the maximum; :func:`worst_seconds` the dearest campaign a
design can run at all, which the plan holds against the fixed design's
(:func:`worst_seconds` too: the fixed design runs every block whatever the
data, so its dearest campaign is its only one). :func:`costs_from_spec` reads a RunSpec's
``[hints]``. Held-out seeds and profiling requests are not priced here: they
run after the formal blocks and do not depend on the design.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping
from dataclasses import dataclass

import numpy as np

from h3bench.course.course import Course
from h3bench.course.designsim import CampaignRun
from h3bench.errors import UsageError
from h3bench.stats.blockstat import BlockBudget

__all__ = ["DEFAULT_SHUTDOWN_S", "DEFAULT_STARTUP_S", "ArmCost", "CampaignCosts", "DeviceTime", "DeviceTimeSummary",
           "costs_from_spec", "device_time", "sharded_time", "worst_seconds"]

DEFAULT_STARTUP_S = 600.0  # one NPU server start (weight load), the issue-26 assumption when hints give none
DEFAULT_SHUTDOWN_S = 60.0
PARTS = ("starts", "warmups", "measured", "audits", "controls")


@dataclass(frozen=True)
class ArmCost:
    """Seconds of one block's phases for one arm at one duration, and the devices the arm holds."""

    request_s: float
    startup_s: float = DEFAULT_STARTUP_S
    shutdown_s: float = DEFAULT_SHUTDOWN_S
    compile_s: float = 0.0  # what the first request adds
    devices: int = 1
    warmup_share: float = 1.0  # what one warmup costs, as a share of a request (a cheap warmup's fewer steps)

    def __post_init__(self) -> None:
        if not (self.request_s > 0 and self.startup_s >= 0 and self.shutdown_s >= 0 and self.compile_s >= 0
                and self.devices >= 1 and 0 < self.warmup_share <= 1):
            raise UsageError(f"an arm's costs must be positive (request) or ≥ 0, devices ≥ 1 and a warmup a share "
                             f"of a request in (0, 1]: {self}")

    def scaled(self, ratio: float) -> ArmCost:
        """The same arm with requests ``ratio`` times as long (a candidate's true effect)."""
        return dataclasses.replace(self, request_s=self.request_s * ratio)

    def parts(self, budget: BlockBudget) -> dict[str, float]:
        """Seconds of one block by part: starts (start + stop), warmups (with compilation), measured, audits."""
        return {"starts": self.startup_s + self.shutdown_s,
                "warmups": budget.warmups * self.request_s * self.warmup_share + self.compile_s,
                "measured": budget.measured * self.request_s,
                "audits": float(budget.audit) * self.request_s}

    def block_s(self, budget: BlockBudget) -> float:
        return sum(self.parts(budget).values())


@dataclass(frozen=True)
class CampaignCosts:
    """Per duration (run order): the baseline's costs, and each candidate's devices and startup (its own arm)."""

    durations: tuple[float, ...]
    baseline: tuple[ArmCost, ...]
    candidates: tuple[ArmCost, ...] = ()  # one per candidate: its devices and start/stop; request_s unused
    source: str = ""

    def candidate(self, index: int, duration: int, ratio: float) -> ArmCost:
        base = self.baseline[duration]
        own = self.candidates[index] if index < len(self.candidates) else base
        return ArmCost(base.request_s * ratio, own.startup_s, own.shutdown_s, own.compile_s, own.devices,
                       base.warmup_share)


@dataclass(frozen=True)
class DeviceTimeSummary:
    """Mean, 90th percentile and maximum over simulated campaigns, wall hours and device-hours."""

    wall_h: tuple[float, float, float]
    device_h: tuple[float, float, float]
    parts_h: dict[str, float]  # mean wall hours per part


@dataclass(frozen=True)
class DeviceTime:
    """Seconds per simulated campaign: wall, device (× devices), and wall by part."""

    wall_s: np.ndarray
    device_s: np.ndarray
    parts_s: dict[str, np.ndarray]

    def summary(self) -> DeviceTimeSummary:
        def three(x: np.ndarray) -> tuple[float, float, float]:
            ranked = np.sort(x)
            p90 = float(ranked[math.ceil(round(0.9 * len(x), 9)) - 1])  # nearest rank, as h3bench.stats.speed.percentile
            return float(x.mean()) / 3600, p90 / 3600, float(x.max()) / 3600

        return DeviceTimeSummary(three(self.wall_s), three(self.device_s),
                                 {k: float(v.mean()) / 3600 for k, v in self.parts_s.items()})


def device_time(run: CampaignRun, costs: CampaignCosts) -> DeviceTime:
    """Price every simulated campaign of ``run`` (its scenario's true ratios set the candidates' request times)."""
    design = run.design
    if len(costs.baseline) != design.n_durations:
        raise UsageError(f"costs for {len(costs.baseline)} durations, the design has {design.n_durations}")
    n = run.pairs.shape[0]
    wall = np.zeros(n)
    device = np.zeros(n)
    parts = {k: np.zeros(n) for k in PARTS}
    for d, base in enumerate(costs.baseline):
        base_parts = base.parts(design.budget)
        controls = run.controls[:, d].astype(float)
        parts["controls"] += controls * base.block_s(design.budget)  # a control block counts whole, as a control
        wall += controls * base.block_s(design.budget)
        device += controls * base.block_s(design.budget) * base.devices
        for c in range(run.ratios.shape[0]):
            own = costs.candidate(c, d, float(run.ratios[c, d]))
            blocks = run.pairs[:, c, d].astype(float)  # one A and one B block per pair
            for name in base_parts:
                parts[name] += blocks * (base_parts[name] + own.parts(design.budget)[name])
            wall += blocks * (base.block_s(design.budget) + own.block_s(design.budget))
            device += blocks * (base.block_s(design.budget) * base.devices + own.block_s(design.budget) * own.devices)
    return DeviceTime(wall, device, parts)


def costs_from_spec(spec: object, *, startup_s: float | None = None, shutdown_s: float | None = None,
                    scale: dict[str, float] | None = None, order: tuple[float, ...] | None = None) -> CampaignCosts:
    """Costs from a RunSpec's ``[hints]``, durations in order of cost (cheapest first, or ``order``).

    A duration without a baseline hint is scaled from the cheapest hinted
    one by ``scale[str(duration)]`` (say what it was scaled from in the
    spec's hint). ``startup_s``/``shutdown_s`` default to the hints', else
    :data:`DEFAULT_STARTUP_S` and :data:`DEFAULT_SHUTDOWN_S`.
    """
    from h3bench.runspec import BASELINE

    hints = getattr(spec, "hints", None)
    if hints is None:
        raise UsageError(f"spec {getattr(spec, 'name', '?')} has no [hints] to price a campaign from")
    durations = tuple(float(d) for d in spec.workload.durations)  # type: ignore[attr-defined]
    known = {float(k): float(v) for k, v in hints.e2e_s.get(BASELINE, {}).items()}
    if not known:
        raise UsageError("the hints give no baseline request time")
    cheapest = min(known, key=known.__getitem__)
    seconds = {}
    for d in durations:
        if d in known:
            seconds[d] = known[d]
        elif scale is not None and f"{d:g}" in scale:
            seconds[d] = known[cheapest] * scale[f"{d:g}"]
        else:
            raise UsageError(f"no baseline hint at {d:g} s and no scale to derive one")
    run_order = order or tuple(sorted(durations, key=seconds.__getitem__))

    def per_arm(value: object, arm: str, given: float | None, default: float) -> float:
        # A hint may be one figure for every arm or, per issue 26, a table by arm.
        if given is not None:
            return given
        found = value.get(arm) if isinstance(value, Mapping) else value
        return float(found) if isinstance(found, (int, float)) and found > 0 else default

    def arm_cost(arm: str, request_s: float) -> ArmCost:
        ids = getattr(spec.arms[arm], "device_ids", None) or spec.hardware.device_ids  # type: ignore[attr-defined]
        return ArmCost(request_s, per_arm(hints.startup_s, arm, startup_s, DEFAULT_STARTUP_S),
                       per_arm(hints.shutdown_s, arm, shutdown_s, DEFAULT_SHUTDOWN_S),
                       per_arm(hints.compile_s, arm, None, 0.0), max(1, len(ids or ())))

    base = tuple(arm_cost(BASELINE, seconds[d]) for d in run_order)
    candidates = tuple(arm_cost(arm, 1.0) for arm in spec.candidates)  # type: ignore[attr-defined]
    return CampaignCosts(run_order, base, candidates, hints.source)


def worst_seconds(course: Course, costs: CampaignCosts, ratios: np.ndarray | list[list[float]]) -> tuple[float, float]:
    """Wall and device seconds of the dearest campaign ``course`` can run: an upper bound of its maximum.

    Every series runs every pair of every duration, and every control block
    the schedule lists runs too (:meth:`h3bench.course.course.Course.control_slots`,
    what one series alone could need), whatever the data.
    """
    design = course.design
    if len(costs.baseline) != design.n_durations:
        raise UsageError(f"costs for {len(costs.baseline)} durations, the design has {design.n_durations}")
    truth = np.asarray(ratios, dtype=float)
    wall = device = 0.0
    for d, base in enumerate(costs.baseline):
        block = base.block_s(design.budget)
        wall += course.control_slots(d) * block
        device += course.control_slots(d) * block * base.devices
        for c in range(truth.shape[0]):
            own = costs.candidate(c, d, float(truth[c, d]))
            pairs = design.looks[d][-1]
            wall += pairs * (block + own.block_s(design.budget))
            device += pairs * (block * base.devices + own.block_s(design.budget) * own.devices)
    return wall, device


def sharded_time(run: CampaignRun, costs: CampaignCosts, shards: int) -> DeviceTime:
    """Price the campaigns of ``run`` as ``shards`` hosts run them: wall seconds of one host, device seconds of all.

    ``run`` is simulated over the same ``shards`` (:func:`h3bench.course.designsim.simulate_campaigns`),
    so its pairs are whole rounds: a round may run pairs past a look inside
    it. The busiest host runs ``ceil(pairs / 2N)`` units of each series,
    and that is its wall time (a duration with fewer units than hosts
    leaves the others idle); control blocks are spread over the hosts
    likewise. ``wall_s`` is one host's, ``device_s`` every host's devices
    together.
    """
    design = run.design
    n = run.pairs.shape[0]
    wall = np.zeros(n)
    device = np.zeros(n)
    for d, base in enumerate(costs.baseline):
        controls = run.controls[:, d].astype(float)
        wall += np.ceil(controls / shards) * base.block_s(design.budget)
        device += controls * base.block_s(design.budget) * base.devices
        for c in range(run.ratios.shape[0]):
            own = costs.candidate(c, d, float(run.ratios[c, d]))
            pairs = run.pairs[:, c, d].astype(float)
            pair_s = base.block_s(design.budget) + own.block_s(design.budget)
            wall += np.minimum(pairs, np.ceil(pairs / (2 * shards)) * 2) * pair_s  # the busiest host's units
            device += pairs * (base.block_s(design.budget) * base.devices + own.block_s(design.budget) * own.devices)
    return DeviceTime(wall, device, {})
