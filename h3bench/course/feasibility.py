"""Whether a spec's design can reach the verdicts it asks for, decided before anything runs.

A design that cannot reach its verdict only spends hours to end INCONCLUSIVE.
When the spec loads for a campaign, two questions are answered, by the same
verdict code the campaign uses:

Speed
    Per duration the order gives k AB/BA pairs. One pair gives no interval at
    all: refused. Beyond that, the power to call a true 10 % speedup PASS at
    every duration is simulated under reference noise (2 % per request, 1 %
    per server process, the noise of the error-rate tests); a design below
    80 % can reach a verdict, but rarely the one it is built for, and the plan
    and the report header say so (:func:`design_warnings`).
Lossless
    The exact relabelling test needs enough baseline processes for its floor
    and its power against a 3x degradation
    (:func:`h3bench.quality.lossless.lossless_feasibility`).

In the sequential design (:mod:`h3bench.stats.sequential`) every look has at
least two pairs and the control blocks its lossless test needs are part of
the schedule, so nothing is refused; its power is simulated through the
campaign's own decisions (:func:`h3bench.course.designsim.simulate_campaigns`)
and a design below 80 % is named in the plan and the report header.

Each refusal names the smallest design that can, such as ``order = "ABBAABBA"``
or ``protocol.lossless_baseline_blocks = 2``. ``--allow-underpowered`` runs the
spec anyway, as a DIAGNOSTIC run.
"""

from __future__ import annotations

import functools
import math

import numpy as np

from h3bench.course import designsim
from h3bench.course.cases import CandidateWorkload
from h3bench.course.design import Design, control_blocks, looks_of, lossless_level, run_order, series_of
from h3bench.course.schedule import Schedule
from h3bench.quality import lossless
from h3bench.runspec import RunSpec, parse_runspec
from h3bench.stats import intervals

__all__ = ["REFERENCE_NOISE", "TARGET_RATIO", "design_problems", "design_warnings", "speed_power"]

REFERENCE_NOISE = (0.02, 0.01)  # coefficient of variation per request, per server process
TARGET_RATIO = 0.90  # the speedup the suite's designs are built to show
REQUIRED_POWER = 0.80
_CAMPAIGNS = 4000  # simulated campaigns per design: the power's standard error is below 0.7 %
_DRAWN_REQUESTS = 64  # up to this many requests per block the medians come from drawn requests


def _block_medians(rng: np.random.Generator, sd: float, k: int, shape: tuple[int, ...]) -> np.ndarray:
    """Medians of ``k`` normal(0, ``sd``) requests per block, in memory that does not grow with ``k``.

    Up to :data:`_DRAWN_REQUESTS` the requests are drawn (the figures the
    project pins). Beyond, the median's own exact distribution is drawn: the
    m-th of k uniforms is Beta(m, k - m + 1), and, given it is u, the next one
    is u + (1 - u) Beta(1, k - m); the normal quantile of each is an order
    statistic. A spec with a billion requests per block is then planned (and
    refused for its disk) instead of asking for terabytes of memory.
    """
    if k <= _DRAWN_REQUESTS:
        return np.median(rng.normal(0.0, sd, (*shape, k)), axis=-1)
    from scipy.special import ndtri

    m = (k + 1) // 2
    lower = rng.beta(m, k - m + 1, shape)
    if k % 2:
        return sd * ndtri(lower)
    upper = lower + (1.0 - lower) * rng.beta(1, k - m, shape)
    return sd * (ndtri(lower) + ndtri(upper)) / 2


@functools.lru_cache(maxsize=64)
def speed_power(order: str, requests_per_block: int, margin: float, n_durations: int, n_candidates: int,
                ratio: float = TARGET_RATIO) -> float:
    """P(PASS at every duration) for a true ``ratio`` under :data:`REFERENCE_NOISE`, through the verdict's bounds."""
    pairs = len(order) // 2
    if pairs < 2:
        return 0.0
    rng = np.random.default_rng(0)  # seeded: the same spec always gets the same answer
    request_cv, process_cv = REFERENCE_NOISE
    shape = (_CAMPAIGNS, n_durations, len(order))
    log_medians = _block_medians(rng, request_cv, requests_per_block, shape) + rng.normal(0.0, process_cv, shape)
    log_medians += np.array([math.log(ratio) if arm == "B" else 0.0 for arm in order])
    levels = intervals.error_levels(n_durations, n_candidates)
    _, lower, upper, _ = intervals.t_bounds(intervals.paired_log_ratios(log_medians, order),
                                            levels.pass_level, levels.fail_level)
    codes = intervals.combine_codes(intervals.outcome_codes(lower, upper, margin))
    return float(np.mean(codes == intervals.PASS))


def _orders(order: str) -> list[str]:
    """Longer designs of the same kind, up to 8 pairs: ABBA repeated (or the order itself repeated)."""
    unit = order if intervals.is_paired_order(order) and len(order) >= 4 else "ABBA"
    longer = [(unit * 8)[:n] for n in range(len(order) + 2, 17, 2)]
    return [o for o in longer if intervals.is_paired_order(o)]


def _smallest_order(spec: RunSpec) -> str | None:
    protocol = spec.protocol
    return next((o for o in _orders(protocol.order) if _power(spec, o) >= REQUIRED_POWER), None)


def _power(spec: RunSpec, order: str) -> float:
    return speed_power(order, spec.protocol.requests_per_block, spec.gates.speed_margin,
                       len(spec.workload.durations), max(1, len(spec.candidates)))


def _speed_problem(spec: RunSpec) -> str | None:
    if Design.of(spec).sequential:
        return None  # every look has at least two pairs (the spec refuses fewer)
    order = spec.protocol.order
    if not intervals.is_paired_order(order) or len(order) >= 4:
        return None  # unpaired orders are refused by the spec itself; two pairs give an interval
    smallest = _smallest_order(spec)
    return (f"protocol.order = {order!r} cannot reach a speed verdict: one AB/BA pair gives no interval, so every "
            f'speed verdict would be INCONCLUSIVE; the smallest design with the power it is built for is order = '
            f'"{smallest}"')


_SEQUENTIAL_POWER: dict[str, float] = {}  # by spec id: a simulation of a few seconds, once per spec


def sequential_power(spec: RunSpec, ratio: float = TARGET_RATIO) -> float:
    """P(every candidate PASS at every duration) for a true ``ratio``, simulated through the campaign's decisions."""
    key = f"{spec.spec_id}:{ratio}"
    if key not in _SEQUENTIAL_POWER:
        n_series = len(series_of(spec))
        request_cv, process_cv = REFERENCE_NOISE
        run = designsim.simulate_campaigns(
            Design.of(spec), [[ratio] * len(spec.workload.durations)] * n_series,
            model=designsim.LatencyModel(request_cv, process_cv), n=_CAMPAIGNS, seed=0,
            lossless=spec.gates.lossless, control_arms=tuple(s.control for s in series_of(spec)))
        _SEQUENTIAL_POWER[key] = float((run.code == intervals.PASS).all(-1).all(-1).mean())
    return _SEQUENTIAL_POWER[key]


def design_warnings(spec: RunSpec) -> list[str]:
    """What a design that can reach a verdict still cannot show: the power figure, and the design that can."""
    if Design.of(spec).sequential:
        if spec.gates.lossless and _sequential_lossless_problem(spec):
            return []  # no power to state: design_problems refuses it
        if spec.protocol.requests_per_block > designsim.SIMULATED_REQUESTS:
            return []  # not simulated (the plan says so); more requests per block only add power
        found = sequential_power(spec)
        if found >= REQUIRED_POWER:
            return []
        return [f"underpowered: the sequential design calls a true {1 - TARGET_RATIO:.0%} speedup of every candidate "
                f"PASS in only {found:.0%} of campaigns (simulated at {REFERENCE_NOISE[0]:.0%} request and "
                f"{REFERENCE_NOISE[1]:.0%} process noise; {REQUIRED_POWER:.0%} is the design target): add looks, "
                "or fewer candidates per campaign"]
    order = spec.protocol.order
    if not intervals.is_paired_order(order) or len(order) < 4:
        return []
    found = _power(spec, order)
    if found >= REQUIRED_POWER:
        return []
    smallest = _smallest_order(spec)
    return [f"underpowered: order {order!r} calls a true {1 - TARGET_RATIO:.0%} speedup PASS in only {found:.0%} "
            f"of campaigns (simulated at {REFERENCE_NOISE[0]:.0%} request and {REFERENCE_NOISE[1]:.0%} process "
            f"noise; {REQUIRED_POWER:.0%} is the design target" +
            (f'; order = "{smallest}" reaches it)' if smallest else ")")]


def _lossless_problem(spec: RunSpec, lossless_on: bool) -> str | None:
    if not lossless_on or not spec.candidates:
        return None
    if Design.of(spec).sequential:
        return _sequential_lossless_problem(spec)
    schedule = Schedule(spec)
    baseline, candidate = schedule.lossless_processes(CandidateWorkload(spec.candidates[0],
                                                                        spec.workload.durations[0]))
    feasibility = lossless.lossless_feasibility(len(baseline), len(candidate))
    if feasibility.feasible:
        return None
    controls = control_blocks(spec) + feasibility.needed_baseline_blocks
    return (f"the lossless test cannot reach a verdict with {len(baseline)} baseline and {len(candidate)} "
            f"candidate processes per duration (power {feasibility.power:.0%} against a 3x degradation, "
            f"{lossless.REQUIRED_POWER:.0%} needed; smallest p {feasibility.min_p:.3g}); the smallest design that "
            f"can adds control blocks: protocol.lossless_baseline_blocks = {controls}")


def _sequential_lossless_problem(spec: RunSpec) -> str | None:
    """The sequential design runs the control blocks its lossless test needs, but PASS needs enough pairs too."""
    for duration in spec.workload.durations:
        needed, last = Design.of(spec).pass_from(run_order(spec).index(duration), True), looks_of(spec, duration)[-1]
        if needed > last:
            return (f"the lossless test at {duration:g} s cannot reach PASS by the last look ({last} pairs): at its "
                    f"level ({lossless_level(spec, duration):.3g}) it needs {needed} AB/BA pairs; make the last look "
                    f"of that duration at least {needed} pairs")
    return None


def design_problems(spec: RunSpec, *, lossless_on: bool) -> list[str]:
    """Why this spec's design cannot reach the verdicts it asks for; empty when it can."""
    speed = _speed_problem(spec)
    smallest = _smallest_order(spec) if speed else None
    if smallest is not None:  # the lossless advice for the order the speed advice gives
        data = spec.model_dump(mode="json")
        data["protocol"]["order"] = smallest
        spec = parse_runspec(data, source=spec.name)
    return [p for p in (speed, _lossless_problem(spec, lossless_on)) if p is not None]
