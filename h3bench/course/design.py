"""A spec's design, decided once: its mode, series, durations in run order, looks and levels, blocks, lossless levels.

:meth:`Design.of` reads a RunSpec's protocol into one frozen :class:`Design`,
the same for the live run, the pool's rounds and the plan's simulation
(:mod:`h3bench.course.course` walks it). :meth:`Design.boundaries` is the
one place where a duration's looks get their calibrated levels
(:func:`h3bench.stats.sequential.boundaries`).

Three modes (:class:`~h3bench.runspec.tables.DesignMode`):

- **fixed**: every duration runs the spec's ``order`` (``ABBAABBA``), judged
  once at the end, after ``lossless_baseline_blocks`` control blocks (2 when
  the lossless test is on);
- **sequential** (every shipped spec): AB/BA pairs round-robin, judged at
  looks (:data:`~h3bench.stats.sequential.FIRST_LOOKS` at the cheapest
  duration, :data:`~h3bench.stats.sequential.DEARER_LOOKS` at the others),
  the dearer durations only for a candidate that passed the cheaper ones,
  bounds widened for a step inside one pair
  (:data:`~h3bench.stats.sequential.STEP_ALLOWANCE`);
- **race** (issue 44): the candidates share baseline anchors in rounds
  (:mod:`h3bench.course.race`) at the looks, budget and margin the spec
  would run sequentially (:func:`sequential_counterpart`); ``h3bench plan``
  prices it beside that sequential design (:mod:`h3bench.course.racesim`),
  and the live run refuses it before any server starts
  (:data:`RACE_NOT_RUN_LIVE`): no session, pool or report reads a race yet.

What the sequential design saves is measured against :meth:`Design.fixed_of`:
the fixed design the project documents (1 warmup + 3 measured + 1 audit per
block, the spec's ``order``, its control blocks), which is what a spec with
``design = "fixed"`` and the protocol's defaults runs.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from h3bench.errors import UsageError
from h3bench.quality import lossless_design
from h3bench.quality.lossless import ALPHA as LOSSLESS_ALPHA
from h3bench.quality.lossless import lossless_feasibility
from h3bench.runspec.arms import BASELINE
from h3bench.runspec.spec import RunSpec
from h3bench.runspec.tables import DesignMode, Protocol
from h3bench.stats import intervals
from h3bench.stats.blockstat import LEAK_LEVEL, BlockBudget
from h3bench.stats.cache_audit import CACHE_RATIO
from h3bench.stats.sequential import (
    DEARER_GAMMA,
    DEARER_LOOKS,
    FIRST_LOOKS,
    ONLY_LOOKS,
    STEP_ALLOWANCE,
    Boundaries,
    boundaries,
)

__all__ = [
    "DEFAULT_ANCHORED_ORDER",
    "DEFAULT_CONTROL_BLOCKS",
    "RACE_NOT_RUN_LIVE",
    "Design",
    "DesignMode",
    "Series",
    "anchored_order",
    "budget_of",
    "control_blocks",
    "default_looks",
    "design_text",
    "fixed_design",
    "in_order_of_cost",
    "looks_of",
    "lossless_level",
    "run_order",
    "sequential_counterpart",
    "sequential_design",
    "series_of",
    "spread",
]

DEFAULT_CONTROL_BLOCKS = 2  # 4 + 2 baseline processes against 4 candidate ones: see h3bench.quality.lossless
DEFAULT_ANCHORED_ORDER = "BABBAB"  # a candidate-only run without the lossless test: two anchors, four candidate blocks
_ANCHORED_CANDIDATES = 4  # candidate blocks of a default anchored order
RACE_NOT_RUN_LIVE = ("protocol.design = \"race\": design 'race' is not run by h3bench yet: `h3bench plan` prices it "
                     "(h3bench.course.racesim) beside the sequential design, but no live run, pool or report reads a "
                     "race; use design = \"sequential\", which runs every candidate's AB/BA pairs round-robin")


@dataclass(frozen=True)
class Series:
    """One comparison: ``arm`` (B blocks) against ``control`` (A blocks), named ``name`` in ids and verdicts."""

    name: str
    arm: str
    control: str = BASELINE


def series_of(spec: RunSpec) -> tuple[Series, ...]:
    """Every candidate against the baseline, then the final combination against a different original baseline."""
    found = [Series(candidate, candidate) for candidate in spec.candidates]
    if spec.final is not None and spec.final_control != BASELINE:
        found.append(Series(f"{spec.final}-vs-{spec.final_control}", spec.final, spec.final_control))
    return tuple(found)


def budget_of(spec: RunSpec) -> BlockBudget:
    """What each block measures: the spec's warmups, measured requests and audit."""
    p = spec.protocol
    return BlockBudget(p.warmups_per_block, p.requests_per_block, p.audit, p.audit and p.audit_counts)


def control_blocks(spec: RunSpec) -> int:
    """The fixed design's lossless control blocks per duration: the spec's number, else 2 with ``gates.lossless``."""
    count = spec.protocol.lossless_baseline_blocks
    return count if count is not None else (DEFAULT_CONTROL_BLOCKS if spec.gates.lossless else 0)


def in_order_of_cost(spec: RunSpec) -> bool:
    """Whether a dearer duration runs only for a candidate that passed the cheaper ones (unset: the sequential design)."""
    chosen = spec.protocol.durations_in_order_of_cost
    return chosen if chosen is not None else spec.protocol.design is not DesignMode.FIXED


def run_order(spec: RunSpec) -> tuple[float, ...]:
    """The durations in the order their blocks run: by cost (the hinted baseline request, else the length) or as given."""
    durations = tuple(spec.workload.durations)
    if not in_order_of_cost(spec):
        return durations
    hinted = (spec.hints.e2e_s.get(BASELINE, {}) if spec.hints is not None else {})
    return tuple(sorted(durations, key=lambda d: (hinted.get(f"{d:g}", d), d)))


def default_looks(n_durations: int) -> tuple[tuple[int, ...], ...]:
    """The sequential design's looks per duration (run order) when the spec chooses none."""
    if n_durations == 1:
        return (ONLY_LOOKS,)
    return (FIRST_LOOKS, *([DEARER_LOOKS] * (n_durations - 1)))


def looks_of(spec: RunSpec, duration: float) -> tuple[int, ...]:
    """The AB/BA pairs after which the series of ``duration`` are judged: one look at the end in the fixed design."""
    protocol = spec.protocol
    if protocol.design is DesignMode.FIXED:
        return (len(protocol.order) // 2,)
    order = run_order(spec)
    index = order.index(duration)
    if protocol.looks is not None:
        return protocol.looks[min(index, len(protocol.looks) - 1)]
    return default_looks(len(order))[index]


def lossless_level(spec: RunSpec, duration: float) -> float:
    """The relabelling test's level at ``duration``: the spec's per-candidate level split over the durations."""
    if spec.protocol.design is DesignMode.FIXED:
        return LOSSLESS_ALPHA
    levels = lossless_design.lossless_levels(len(spec.workload.durations), spec.protocol.lossless_per_candidate)
    return levels[run_order(spec).index(duration)]


def anchored_order(spec: RunSpec, lossless: bool | None = None) -> str:
    """What a candidate-only run runs per duration: the spec's ``anchored_order``, else the default.

    The default is ``BABBAB`` (two anchors: enough for the speed verdict),
    and with the lossless test on, the fewest anchors beside the four
    candidate blocks that let that test decide at every duration's level
    (its controls are today's anchors only,
    :meth:`h3bench.course.schedule.Schedule.lossless_processes`), spread
    among the candidate blocks: ``AABAABAABAB`` at the sequential design's
    0.01. ``lossless``: the test is on (default: the spec's gate).
    """
    if spec.protocol.anchored_order is not None:
        return spec.protocol.anchored_order
    if not (spec.gates.lossless if lossless is None else lossless):
        return DEFAULT_ANCHORED_ORDER
    levels = [lossless_level(spec, d) for d in spec.workload.durations]
    anchors = next(a for a in range(2, 41) if all(
        lossless_feasibility(a, _ANCHORED_CANDIDATES, alpha=level).feasible for level in levels))
    return spread(anchors, _ANCHORED_CANDIDATES)


def spread(anchors: int, candidates: int) -> str:
    """``anchors`` A blocks and ``candidates`` B blocks, the Bs spread evenly among the As (a drift reaches both)."""
    n = anchors + candidates
    return "".join("B" if (i + 1) * candidates // n > i * candidates // n else "A" for i in range(n))


def design_text(spec: RunSpec, *, anchored: bool = False) -> str:
    """How the blocks are run and judged, as the header, the plan and the verdict name it."""
    p = spec.protocol
    budget = budget_of(spec).describe()
    if anchored:
        return (f"candidate-only run: anchored order {anchored_order(spec)} against a stored baseline, {budget} per "
                "block")
    if p.design is DesignMode.FIXED:
        return f"fixed design: order {p.order} at every duration, {budget} per block"
    gate = ", a dearer duration only after a PASS at the cheaper" if in_order_of_cost(spec) else ""
    if p.design is DesignMode.RACE:
        rounds = "; ".join(f"{d:g} s after {list(looks_of(spec, d))} rounds" for d in run_order(spec))
        return (f"race design (priced, not run live yet): each round one block per candidate still in, a baseline "
                f"anchor first and after every two, {budget} per block, looks {rounds}, linear spending, the family's "
                f"level split over the durations{', futility at 1 - margin' if p.futility else ''}{gate}")
    looks = "; ".join(f"{d:g} s after {list(looks_of(spec, d))} pairs" for d in run_order(spec))
    return (f"sequential design: AB/BA pairs round-robin, {budget} per block, looks {looks}, {p.spending} spending"
            f"{', futility at 1 - margin' if p.futility else ''}{gate}")


@dataclass(frozen=True)
class Design:
    """A campaign design; ``looks`` per duration in the order they run (cheapest first).

    ``gamma`` is the spending parameter of each duration (one figure: the
    same at every duration); ``fixed_controls`` the fixed design's control
    blocks per duration, all run first; ``allowance`` the step inside one
    pair the bounds allow for; ``lossless_last`` the durations whose PASS
    waits for the last look when the lossless test is on (a dearer duration:
    a PASS one look earlier would need one more control block before it, run
    for every series that gets there).
    """

    name: str
    looks: tuple[tuple[int, ...], ...]
    budget: BlockBudget
    spending: str = "hsd"
    gamma: float | tuple[float, ...] = 0.0
    futility: bool = True
    in_order_of_cost: bool = True
    leak_level: float | None = LEAK_LEVEL
    cache_ratio: float | None = CACHE_RATIO
    lossless_levels: tuple[float, ...] | None = None  # per duration; None: 0.05 at each (the fixed design's)
    fixed_controls: int = 0
    margin: float = 0.02
    allowance: float = 0.0
    mode: DesignMode = DesignMode.SEQUENTIAL
    lossless_last: tuple[int, ...] = ()

    @classmethod
    def of(cls, spec: RunSpec) -> Design:
        """The spec's design, durations in the order they run."""
        p = spec.protocol
        if p.design is DesignMode.RACE:  # the sequential design's looks, budget, margin and allowance, in rounds
            return dataclasses.replace(cls.of(sequential_counterpart(spec)), name=str(p.design), mode=p.design)
        order = run_order(spec)
        sequential = p.design is DesignMode.SEQUENTIAL
        # The default looks of a dearer (or the only) duration spend their levels mostly at the last look (see
        # DEARER_GAMMA); chosen looks and other spending functions keep the spec's parameter at every duration.
        default = p.looks is None and p.spending == "hsd"
        dearer = dearer_durations(len(order)) if default else ()
        gamma = tuple(DEARER_GAMMA if d in dearer else p.spending_gamma for d in range(len(order)))
        return cls(str(p.design), tuple(looks_of(spec, d) for d in order), budget_of(spec), p.spending, gamma,
                   futility=sequential and p.futility, in_order_of_cost=in_order_of_cost(spec),
                   leak_level=p.first_request_level, cache_ratio=p.audit_cache_ratio if p.audit else None,
                   lossless_levels=tuple(lossless_level(spec, d) for d in order) if sequential else None,
                   fixed_controls=0 if sequential else control_blocks(spec), margin=spec.gates.speed_margin,
                   allowance=STEP_ALLOWANCE if sequential else 0.0, mode=p.design, lossless_last=dearer)

    @classmethod
    def fixed_of(cls, spec: RunSpec) -> Design:
        """The fixed design a sequential spec's device time is measured against (a fixed spec: its own design)."""
        if spec.protocol.design is DesignMode.FIXED:
            return cls.of(spec)
        return fixed_design(len(spec.workload.durations), len(spec.protocol.order) // 2, controls=control_blocks(spec),
                            margin=spec.gates.speed_margin)

    @property
    def n_durations(self) -> int:
        return len(self.looks)

    @property
    def sequential(self) -> bool:
        return self.mode is DesignMode.SEQUENTIAL

    @property
    def race(self) -> bool:
        return self.mode is DesignMode.RACE

    def gamma_at(self, duration: int) -> float:
        return self.gamma[duration] if isinstance(self.gamma, tuple) else self.gamma

    def lossless_alpha(self, duration: int) -> float:
        """The relabelling test's level at the ``duration``-th duration (run order)."""
        if self.lossless_levels is None:
            return LOSSLESS_ALPHA
        return self.lossless_levels[duration]

    def pass_from(self, duration: int, lossless: bool) -> int:
        """The fewest pairs at which a series may PASS: where its lossless test can reach a verdict (sequential only)."""
        if not (lossless and self.sequential):
            return 0
        first = lossless_design.pass_from_pairs(self.lossless_alpha(duration))
        return max(first, self.looks[duration][-1]) if duration in self.lossless_last else first

    def boundaries(self, duration: int, n_candidates: int, *, lossless: bool = False) -> Boundaries:
        """The boundaries of the ``duration``-th duration (run order) of a campaign of ``n_candidates`` series."""
        levels = intervals.error_levels(self.n_durations, n_candidates)
        return boundaries(self.looks[duration], levels, self.margin, spending=self.spending,
                          gamma=self.gamma_at(duration), futility_ratio="margin" if self.futility else None,
                          pass_from=self.pass_from(duration, lossless), allowance=self.allowance)

    def describe(self) -> str:
        looks = "; ".join(f"duration {i + 1}: looks after {list(n)} pairs" for i, n in enumerate(self.looks))
        parts = [self.budget.describe(), looks]
        if self.mode is not DesignMode.FIXED:
            gammas = sorted({self.gamma_at(d) for d in range(self.n_durations)}, reverse=True)
            parts.append(f"{self.spending}{'' if self.spending != 'hsd' else ' γ = ' + ', '.join(f'{g:g}' for g in gammas)}"
                         " spending")
            parts.append("futility at 1 - margin" if self.futility else "no futility stop")
            if self.allowance:
                parts.append(f"bounds allow a {self.allowance:.2%} step inside one {'round' if self.race else 'pair'}")
        parts.append("dearer durations only after a PASS at the cheaper" if self.in_order_of_cost
                     else "every duration runs")
        return f"{self.name}: " + ", ".join(parts)


def sequential_counterpart(spec: RunSpec) -> RunSpec:
    """The spec with ``design = "sequential"``: what a race is priced beside, and whose looks, budget and margin it
    runs in rounds (its history: bundles of that sequential spec)."""
    if spec.protocol.design is not DesignMode.RACE:
        return spec
    return spec.model_copy(update={"protocol": spec.protocol.model_copy(update={"design": DesignMode.SEQUENTIAL})})


def sequential_design(n_durations: int = 2, *, budget: BlockBudget | None = None, name: str = "sequential",
                      lossless_per_candidate: float | None = lossless_design.PER_CANDIDATE_ALPHA,
                      **options: object) -> Design:
    """The shipped specs' design: :func:`default_looks`, the dearer durations' levels spent mostly at their last look.

    ``lossless_per_candidate`` is split over the durations by
    :func:`h3bench.quality.lossless_design.lossless_levels`; None keeps the fixed
    design's 0.05 per duration.
    """
    looks = default_looks(n_durations)
    levels = (None if lossless_per_candidate is None
              else lossless_design.lossless_levels(n_durations, lossless_per_candidate))
    dearer = dearer_durations(n_durations)
    chosen: dict[str, object] = {"gamma": tuple(DEARER_GAMMA if d in dearer else 0.0 for d in range(n_durations)),
                                 "allowance": STEP_ALLOWANCE, "lossless_last": dearer, **options}
    return Design(name, looks, budget or BlockBudget(1, 2, True, True), lossless_levels=levels,
                  **chosen)  # type: ignore[arg-type]


def dearer_durations(n_durations: int) -> tuple[int, ...]:
    """The durations (run order) whose default looks spend mostly at the last: every one after the cheapest, or the only."""
    return tuple(d for d in range(n_durations) if d > 0 or n_durations == 1)


def fixed_design(n_durations: int = 2, pairs: int = 4, *, controls: int = 0, name: str = "fixed",
                 margin: float = 0.02) -> Design:
    """The fixed design: ``pairs`` AB/BA pairs (ABBAABBA) at every duration, the protocol's default budget, one look."""
    defaults = Protocol.model_fields
    budget = BlockBudget(defaults["warmups_per_block"].default, defaults["requests_per_block"].default,
                         defaults["audit"].default, defaults["audit_counts"].default)
    if pairs < 1 or controls < 0:
        raise UsageError(f"a fixed design needs at least one pair and no negative control blocks: {pairs}, {controls}")
    return Design(name, ((pairs,),) * n_durations, budget, futility=False, in_order_of_cost=False, leak_level=None,
                  cache_ratio=None, fixed_controls=controls, margin=margin, mode=DesignMode.FIXED)

