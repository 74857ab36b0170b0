"""The verdict: per candidate, speed, quality and lossless at each duration, and one overall outcome.

Every part is an :class:`~h3bench.outcome.Outcome`; a part that was never
evaluated counts as INCONCLUSIVE. The overall outcome combines them
(:func:`h3bench.outcome.combine`): FAIL if any part failed, PASS only if
every part passed; a stopped candidate adds its stop rule's outcome. For
speed that is the campaign's error control: PASS needs PASS at every
duration, one FAIL is enough to fail (:mod:`h3bench.stats.intervals`).

Everything here is computed once, when the campaign ends, and written to
``verdict.json`` as :class:`VerdictDocument`: the speed estimate with its
bounds, each arm's descriptive statistics, the quality and lossless outcomes,
the held-out results and the acceptance. The terminal summary, the report,
``summary.md``, the ledger and the history all read that document
(:meth:`VerdictDocument.read`), so they cannot disagree.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from h3bench.evidence import BundleReader
from h3bench.evidence.codec import from_json, to_json
from h3bench.h3 import workload_marker
from h3bench.outcome import Outcome, combine
from h3bench.run.records import Stop
from h3bench.stats.hosts import BaselineOutlier, HostEffect, Interaction
from h3bench.stats.speed import Percentile, RatioEstimate
from h3bench.stats.warmup import WarmupCheck
from h3bench.verdict.stage_effects import StageEffects

__all__ = [
    "DIAGNOSTIC_VERDICT",
    "NOT_EVALUATED",
    "Acceptance",
    "ArmStats",
    "BaselineLevel",
    "BlockRecord",
    "CandidateAcceptance",
    "CandidateVerdict",
    "DeviceTime",
    "DurationVerdict",
    "GateValue",
    "HeldoutVerdict",
    "LookRecord",
    "LosslessSummary",
    "PoolRecord",
    "PooledSeries",
    "RecipeStep",
    "ShardRecord",
    "VerdictDocument",
    "duration_key",
    "key_marker",
    "saving",
]

NOT_EVALUATED = "NOT_EVALUATED"
DIAGNOSTIC_VERDICT = "DIAGNOSTIC (not a campaign result)"


def duration_key(duration: float) -> str:
    """``"5s"``: how a duration is named in verdict.json."""
    return f"{duration:g}s"


def key_marker(key: str) -> str:
    """``ref2va_5s`` for the key ``5s``: the marker that selects that duration (:func:`h3bench.h3.workload_marker`)."""
    return workload_marker(float(key.removesuffix("s")))


def saving(spent_s: float, fixed_s: float) -> str:
    """What a run spent against the fixed design, as a user reads it: "42% saved" or "50% more"."""
    change = 1 - spent_s / fixed_s
    return f"{change:.0%} saved" if change >= 0 else f"{-change:.0%} more"


@dataclass(frozen=True)
class BlockRecord:
    """One block of a candidate's series, as the verdict reports it.

    ``reconciliation`` names each disagreement between the server's profiler,
    its ``/metrics`` and the client's E2E over the block's measured requests
    (:func:`h3bench.verdict.reconcile.block_findings`); ``server_metrics`` says
    whether the server had ``/metrics`` (None: the bundle predates it).
    """

    id: str
    median_e2e_s: float | None
    warmup: WarmupCheck | None  # None: the block has too few measured requests for the check
    reconciliation: tuple[str, ...] = ()
    server_metrics: str | None = None  # "available", or "not available: <why>"


@dataclass(frozen=True)
class RecipeStep:
    """A published DiT per-step time of one arm (the spec's ``hints.dit_step_s``), shown beside the measured one."""

    arm: str
    seconds: float
    source: str


@dataclass(frozen=True)
class ArmStats:
    """One arm's measured requests at one duration: descriptive, never an estimate of the effect."""

    arm: str
    n: int
    median_e2e_s: float
    percentiles: tuple[Percentile, ...]
    stages: tuple[tuple[str, float], ...]  # median seconds per top-level stage in pipeline order, the remainder last
    negative_remainders: int = 0  # requests whose E2E is shorter than their stages: a data error


@dataclass(frozen=True)
class GateValue:
    """A gate's worst value over a candidate's matched pairs, with its threshold."""

    name: str
    value: float
    threshold: str


@dataclass(frozen=True)
class LosslessSummary:
    """The lossless judgement of one candidate at one duration; the full record is in ``quality/``."""

    outcome: Outcome
    exact: bool  # every candidate output decodes bitwise equal to its matched baseline output: the strongest PASS
    reasons: tuple[str, ...]
    p_value: float | None = None
    baseline_processes: int = 0
    candidate_processes: int = 0

    @property
    def label(self) -> str:
        return "EXACT" if self.exact else str(self.outcome)


@dataclass(frozen=True)
class LookRecord:
    """Where a series stood when the run ended: its look, why it stopped, what ran, and the device time it cost.

    ``fixed_device_s`` is what the fixed design's blocks (``order`` at every
    duration) would have cost at the seconds these blocks took; None when an
    arm ran no block to price it from.

    ``warmup_steps``: the cheap warmup's inference steps (``protocol.warmup_steps``),
    None for a full warmup. A cheap warmup is accepted where the two-sided
    first-request check found the first measured requests steady; where it
    flagged (``first_requests_left_out``) it is refused, and the first
    measured request of every block is left out of each bound it can bias
    from that look on (:func:`h3bench.stats.blockstat.first_request_sides`).
    """

    design: str  # "fixed" or "sequential"
    looks: tuple[int, ...]
    look: int | None  # 1-based look of the decision; None before the first
    pairs: int
    stopped: bool
    reason: str  # faster, slower, futility, last look, audit, continue
    first_requests_left_out: bool
    blocks_run: tuple[str, ...]
    blocks_not_run: tuple[str, ...]
    device_s: float
    fixed_device_s: float | None = None
    warmup_steps: int | None = None

    @property
    def warmup(self) -> str | None:
        """What became of a cheap warmup, in a sentence; None for a full warmup or before the first look."""
        if self.warmup_steps is None or self.look is None:
            return None
        if self.first_requests_left_out:
            return (f"the {self.warmup_steps}-step warmup was refused: the two-sided first-request check found the "
                    "first measured requests not steady, so each bound they can bias is also judged without every "
                    "block's first measured request (the estimate is without them)")
        return (f"the {self.warmup_steps}-step warmup was accepted: the two-sided first-request check found the first "
                "measured requests steady both ways")

    def describe(self) -> str:
        where = (f"look {self.look} of {len(self.looks)} ({self.pairs} pairs)" if self.look is not None
                 else f"before the first look ({self.pairs} pairs)")
        state = f"stopped at {where}: {self.reason}" if self.stopped else f"ran to {where}"
        saved = ""
        if self.fixed_device_s:
            saved = (f"; the fixed design: {self.fixed_device_s / 3600:.2f} device-h "
                     f"({saving(self.device_s, self.fixed_device_s)})")
        warmup = f"; {self.warmup}" if self.warmup else ""
        return (f"{self.design} design, {state}; {len(self.blocks_run)} blocks run, {len(self.blocks_not_run)} not "
                f"run; {self.device_s / 3600:.2f} device-h{saved}{warmup}")


@dataclass(frozen=True)
class DeviceTime:
    """One duration's blocks, every series and control together: what they cost, and what the fixed design would.

    ``fixed_device_s``: the fixed design's blocks (every series' ``order``
    and its control blocks, 1 warmup + 3 measured + 1 audit each) at the
    seconds per request these blocks took, a series that ran none here priced
    as the duration's baseline blocks; None when no baseline block ran here.
    """

    blocks_run: int
    blocks_not_run: int
    wall_s: float
    device_s: float
    fixed_device_s: float | None


@dataclass(frozen=True)
class DurationVerdict:
    """One candidate at one duration."""

    control: str  # the arm of the series' A blocks
    speed: Outcome
    speed_reasons: tuple[str, ...]
    estimate: RatioEstimate | None  # None: no block pair or anchor to compare
    quality: Outcome | None  # None: no matched pair was evaluated
    quality_pairs: int
    lossless_enabled: bool
    lossless: LosslessSummary | None  # None: not evaluated (or lossless mode is off)
    blocks: tuple[BlockRecord, ...] = ()
    arms: tuple[ArmStats, ...] = ()
    worst: tuple[GateValue, ...] = ()
    looks: LookRecord | None = None  # None: a candidate-only run's anchored design
    # Which stage moved: every part's paired ratio with its bounds, and each arm's real-time factor
    # (h3bench.verdict.stage_effects). Attribution at its own stated level, never a second speed verdict;
    # None without an AB/BA pair (or in a candidate-only run's anchored design).
    stages: StageEffects | None = None
    recipe_steps: tuple[RecipeStep, ...] = ()
    reconciliation_tolerance: str = ""  # the tolerance every BlockRecord's reconciliation used

    @property
    def outcomes(self) -> list[Outcome]:
        parts = [self.speed, self.quality or Outcome.INCONCLUSIVE]
        if self.lossless_enabled:
            parts.append(self.lossless.outcome if self.lossless else Outcome.INCONCLUSIVE)
        return parts

    @property
    def outcome(self) -> Outcome:
        return combine(self.outcomes)

    @property
    def warmup_flags(self) -> tuple[WarmupCheck, ...]:
        return tuple(b.warmup for b in self.blocks if b.warmup is not None and b.warmup.flagged)

    @property
    def quality_label(self) -> str:
        return str(self.quality) if self.quality else NOT_EVALUATED

    @property
    def lossless_label(self) -> str:
        if not self.lossless_enabled:
            return "-"
        return self.lossless.label if self.lossless else NOT_EVALUATED

    def arm(self, name: str) -> ArmStats | None:
        return next((a for a in self.arms if a.arm == name), None)


@dataclass(frozen=True)
class CandidateVerdict:
    """One candidate over every duration, with the stop rule that fired, if any.

    ``notes`` say what a reader should know but does not change the outcome,
    such as a block whose device telemetry stands out (:mod:`h3bench.host.telemetry`).
    """

    durations: dict[str, DurationVerdict]
    stopped: Stop | None
    notes: tuple[str, ...] = ()

    @property
    def outcome(self) -> Outcome:
        parts = [o for d in self.durations.values() for o in d.outcomes]
        return combine(parts + ([self.stopped.outcome] if self.stopped else []))

    def outcome_at(self, key: str) -> Outcome:
        """The candidate's verdict at one duration: its parts there, and the stop rule that fired, which stops the
        candidate at every duration (a server that died makes each FAIL, not INCONCLUSIVE for lack of pairs)."""
        return combine([*self.durations[key].outcomes, *([self.stopped.outcome] if self.stopped else [])])


@dataclass(frozen=True)
class BaselineLevel:
    """The baseline's level at one duration: the median of its successful blocks' medians (the history's point)."""

    median_e2e_s: float
    blocks: int


@dataclass(frozen=True)
class HeldoutVerdict:
    """One candidate at one duration on the held-out inputs (:mod:`h3bench.verdict.heldout`)."""

    outcome: Outcome
    reasons: tuple[str, ...]


@dataclass(frozen=True)
class CandidateAcceptance:
    """Whether a candidate is accepted; ``judged`` False when the run could not say (a selection, a diagnostic run)."""

    accepted: bool
    reasons: tuple[str, ...]
    judged: bool = True

    @property
    def word(self) -> str:
        """``accepted``, ``rejected``, or ``not judged``: nothing was rejected by a run that judged only a part."""
        return "accepted" if self.accepted else "rejected" if self.judged else "not judged"

    def describe(self) -> str:
        """``rejected: formal verdict FAIL``, ``not judged: ref2va_15s not selected``: the word, then the reasons."""
        reasons = "; ".join(self.reasons)
        return reasons if reasons.startswith(self.word) else f"{self.word}: {reasons}"


@dataclass(frozen=True)
class Acceptance:
    """The research campaign's acceptance (:mod:`h3bench.verdict.acceptance`)."""

    final: str | None
    accepted: bool
    reasons: tuple[str, ...]
    candidates: dict[str, CandidateAcceptance] = field(default_factory=dict)


@dataclass(frozen=True)
class ShardRecord:
    """One shard bundle of a pooled campaign, named by its seal (the last segment's final.json SHA-256)."""

    index: int
    count: int
    round: int
    host: str
    bundle: str  # its directory name
    final_sha256: str
    blocks: int  # blocks it ran


@dataclass(frozen=True)
class PooledSeries:
    """One series at one duration over the hosts: each host's ratio, the interaction check, the hosts' interval."""

    hosts: tuple[HostEffect, ...]
    interaction: Interaction
    pooled_outcome: Outcome  # what the pooled look decided over every pair, before the interaction check
    hosts_ratio: float | None = None  # the hosts' interval (where the hosts disagree): h3bench.stats.hosts
    hosts_lower: float | None = None
    hosts_upper: float | None = None


@dataclass(frozen=True)
class PoolRecord:
    """What ``h3bench pool`` pooled: the shards by seal, those missing, and per series and duration the hosts."""

    shards: tuple[ShardRecord, ...]
    missing: tuple[str, ...]  # "shard 3/3 of round 1", each named
    series: dict[str, dict[str, PooledSeries]] = field(default_factory=dict)  # candidate → duration key →
    baseline_outliers: dict[str, tuple[BaselineOutlier, ...]] = field(default_factory=dict)  # duration key →


@dataclass(frozen=True)
class VerdictDocument:
    """``verdict.json``: everything a campaign concluded, computed once and read by every presentation."""

    spec_id: str
    spec_name: str
    h3bench: str
    run: str  # FORMAL or DIAGNOSTIC
    interrupted: str | None
    candidates: dict[str, CandidateVerdict]
    run_notes: tuple[str, ...] = ()  # why a run is DIAGNOSTIC, underpowered designs, pins not verified
    heldout: dict[str, dict[str, HeldoutVerdict]] = field(default_factory=dict)
    accepted: Acceptance | None = None
    baseline_evidence: str | None = None  # a candidate-only run: the stored bundle it is anchored to
    baseline: dict[str, BaselineLevel] = field(default_factory=dict)  # per duration, every baseline block
    design: str = ""  # how the blocks were run and judged
    device: dict[str, DeviceTime] = field(default_factory=dict)  # per duration
    lpips_required: bool = True
    # A selection (-m, -k, --arm): per candidate, the durations none of its blocks was selected at; the
    # verdict covers the rest, and a candidate with nothing selected has no entry in ``candidates``.
    not_selected: dict[str, tuple[str, ...]] = field(default_factory=dict)
    pool: PoolRecord | None = None  # a campaign over several hosts, pooled by h3bench pool

    @property
    def diagnostic(self) -> bool:
        return self.run == "DIAGNOSTIC"

    @property
    def partial(self) -> bool:
        """Whether the run judged only a selection of the campaign."""
        return bool(self.not_selected)

    @property
    def outcome(self) -> Outcome:
        return combine(v.outcome for v in self.candidates.values())

    def label(self, outcome: Outcome) -> str:
        """How a verdict reads: ``DIAGNOSTIC (not a campaign result); measured PASS`` for a diagnostic run."""
        return f"{DIAGNOSTIC_VERDICT}; measured {outcome}" if self.diagnostic else str(outcome)

    def to_dict(self) -> dict[str, Any]:
        data: dict[str, Any] = to_json(self)
        for name, verdict in self.candidates.items():  # the combined outcomes, for readers of the JSON alone
            data["candidates"][name]["verdict"] = str(verdict.outcome)
            for key, duration in verdict.durations.items():
                data["candidates"][name]["durations"][key]["outcome"] = str(duration.outcome)
                if duration.stages is not None:  # whether each part's interval excludes no change
                    for part, written in zip(duration.stages.parts,
                                             data["candidates"][name]["durations"][key]["stages"]["parts"],
                                             strict=True):
                        written["moved"] = part.moved
        if self.diagnostic:
            data["verdict"] = DIAGNOSTIC_VERDICT
        return data

    @classmethod
    def from_dict(cls, data: Mapping[str, Any], *, where: str = "verdict.json") -> VerdictDocument:
        return from_json(cls, dict(data), where=where)

    @classmethod
    def read(cls, bundle: BundleReader) -> VerdictDocument | None:
        """The bundle's verdict.json (its last segment's), or None when the run wrote none."""
        found = bundle.read_verdict()
        return None if found is None else cls.from_dict(found, where=f"{bundle.path}/verdict.json")
