"""A campaign's results: the blocks that ran, the stop rules that fired, the judgement of the outputs, the verdict.

For a live run and a stored bundle alike: :class:`Results` reads records,
and only a ``supply`` makes a block that has not run yet. The live runner
(:class:`h3bench.session.runner.Runner`) supplies blocks by running them; a
stored bundle (``h3bench validate``, an xdist worker, the baseline of a
candidate-only run, the report) has none, and holds what it holds. Nothing
here starts a server.

Stop rules: a failed request, a failed quality gate, resource interference,
an incomplete cleanup (a shutdown beyond the shared budget included) or a
failed anti-shortcut audit stops the candidate; the rest of its series is
skipped with the reason, and the verdict says why (FAIL for the candidate's
own failures, INCONCLUSIVE when the comparison itself is invalid: a broken
baseline or interference).

:meth:`Results.document` computes the verdict once, as the
:class:`~h3bench.verdict.verdicts.VerdictDocument` that ``verdict.json``
holds and every presentation reads.
"""

from __future__ import annotations

import dataclasses
import hashlib
import statistics
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path

from h3bench import __version__, quality
from h3bench.errors import EvidenceError, UsageError
from h3bench.evidence import Bundle, require_verified
from h3bench.host import telemetry
from h3bench.outcome import Outcome, combine
from h3bench.plan.design import design_warnings
from h3bench.plan.preflight import diagnostic_reasons, is_diagnostic
from h3bench.run.contract import ArmContract, Contract, contract_changes, engine_help
from h3bench.run.records import BlockFailed, BlockResult, CandidateStopped, Sample, Stop, load_results
from h3bench.runspec import BASELINE, RunSpec, VllmArm, parse_runspec, require_same_spec
from h3bench.runspec.cases import Block, CandidateWorkload, MatchedPair, OutputRef
from h3bench.runspec.course import Course
from h3bench.runspec.design import Design, design_text, looks_of, series_of
from h3bench.runspec.schedule import Schedule
from h3bench.runspec.shards import Window, check_shards, read_window
from h3bench.session.settings import Settings
from h3bench.stats import intervals, sequential, speed
from h3bench.stats.sequential import LookDecision
from h3bench.stats.speed import RatioEstimate
from h3bench.stats.stages import stage_median_values
from h3bench.stats.warmup import warmup_checks
from h3bench.verdict import attribution, looks
from h3bench.verdict.judge import Judge, LosslessOutcome
from h3bench.verdict.stage_effects import StageEffects
from h3bench.verdict.verdicts import (
    Acceptance,
    ArmStats,
    BaselineLevel,
    BlockRecord,
    CandidateVerdict,
    DeviceTime,
    DurationVerdict,
    HeldoutVerdict,
    LookRecord,
    LosslessSummary,
    VerdictDocument,
    duration_key,
)

__all__ = ["Results", "Supply"]

#: How a live campaign makes a block that has not run yet (it runs it and gives the result to :meth:`Results.take`).
Supply = Callable[[Block], object]


def _window(spec: RunSpec, settings: Settings) -> Window | None:
    """A shard's round from the look file of the previous round (round 1 without one)."""
    if settings.shard is None:
        if settings.looks is not None:
            raise UsageError("--looks gives a round of a campaign over several hosts: add --shard I/N")
        return None
    check_shards(spec, settings.shard.count)
    if settings.looks is None:
        return None
    return read_window(settings.looks, spec_id=spec.spec_id, shards=settings.shard.count)


class Results:
    """The blocks of one campaign that ran, the stop rules that fired, and the judgement of the outputs."""

    def __init__(
        self, spec: RunSpec, settings: Settings, *, bundle_path: Path | None = None, session: str | None = None,
        supply: Supply | None = None, bundle: Bundle | None = None,
    ) -> None:
        self.spec = spec
        self.settings = settings
        # A candidate-only run runs the anchored orders; the rest of its schedule is the stored bundle's.
        self.schedule = Schedule(spec, settings.arm, anchored=settings.baseline_evidence is not None,
                                 shard=settings.shard, window=_window(spec, settings),
                                 lossless=settings.lossless or spec.gates.lossless)
        self.stored_baseline: Results | None = None  # set for a candidate-only run
        self._stored_contract = Contract()  # the stored baseline's engine contract, per arm
        self._supply = supply
        self._bundle_path = bundle_path
        self._session = session  # a run's own id: its bundle is found by it, even under another name
        self._bundle = bundle
        # A live run starts with nothing; a bundle that exists (stored, or resumed) is read on first use.
        self._ran: dict[str, BlockResult] | None = {} if supply is not None and bundle is None else None
        self._stopped: dict[str, Stop] = {}  # candidate → the stop rule that fired
        self._telemetry: tuple[int, dict[str, telemetry.BlockTelemetry]] = (-1, {})  # (file size, per block)
        self.not_selected: dict[str, tuple[str, ...]] = {}  # a selection: per candidate, durations not judged
        self.judge = Judge(spec, self.schedule, locate=self.output_path, available=self.available, stop=self.stop,
                           lpips_dir=settings.lpips_dir, lpips_device=settings.lpips_device,
                           lossless_flag=settings.lossless)

    @classmethod
    def from_bundle(cls, path: str | Path, settings: Settings, *, verified: bool = False) -> Results:
        """The results of a stored bundle under its own spec, once it verifies (EvidenceError naming the files otherwise).

        ``verified``: the caller has just verified it (the report), so it is not hashed twice.
        """
        if not verified:
            require_verified(path, "it is not read")
        bundle = Bundle.open(path)
        spec = parse_runspec(bundle.manifest["spec"], source=f"{path}/manifest.json")
        results = cls(spec, settings, bundle_path=bundle.path, bundle=bundle)
        stored = bundle.read_verdict()
        if stored is not None:  # a selection is judged again as the run judged it
            results.not_selected = {k: tuple(v) for k, v in (stored.get("not_selected") or {}).items()}
        return results

    def attach_baseline(self, path: Path) -> None:
        """A candidate-only run: the stored bundle of the same spec gives everything but today's anchored blocks."""
        stored = Results.from_bundle(path, dataclasses.replace(self.settings, arm="all", baseline_evidence=None))
        require_same_spec(stored.spec.spec_id, self.spec.spec_id)
        if is_diagnostic(stored.bundle.manifest):
            raise EvidenceError(
                f"{path} is a DIAGNOSTIC run ({'; '.join(diagnostic_reasons(stored.bundle.manifest))}): it is not a "
                "campaign result and can never be --baseline-evidence; run the baseline formally", path=str(path))
        if not any(r.block.letter == "A" and r.ok for r in stored.ran.values()):
            raise EvidenceError(f"{path} holds no successful baseline block", path=str(path))
        # Before any server starts: each vllm arm's engine must still accept what it accepted then. A reader (an
        # xdist worker) runs no server, and leaves that to the process that does.
        today = self._engines_today() if self._supply is not None else Contract()
        changed = contract_changes(Contract.of(stored.bundle.lifecycle()), today)
        if changed:
            raise EvidenceError(f"{path}: the engine's contract differs from today's ({'; '.join(changed)}): its "
                                "baseline was measured on another engine, so it is refused as --baseline-evidence",
                                path=str(path))
        self.stored_baseline = stored
        self._stored_contract = Contract.of(stored.bundle.lifecycle())

    def _engines_today(self) -> Contract:
        """Today's ``vllm serve --help=all`` of every vllm arm (no server needed); the rest is known at a server's start."""
        arms = {}
        for name, arm in self.spec.arms.items():
            if isinstance(arm, VllmArm):
                data, _ = engine_help(arm.launcher, arm.launch_env())
                if data is not None:
                    arms[name] = ArmContract(help=(hashlib.sha256(data).hexdigest(),))
        return Contract(arms)

    def _contract_refused(self, result: BlockResult) -> str | None:
        """Why the stored baseline is refused once a server of today recorded another contract; None if it is not."""
        if self.stored_baseline is None or result.lifecycle.contract is None:
            return None
        changed = contract_changes(self._stored_contract,
                                   Contract.of_server(result.block.arm, result.lifecycle.contract))
        if not changed:
            return None
        return (f"--baseline-evidence {self.stored_baseline.bundle_path} refused: the engine's contract differs from "
                f"today's ({'; '.join(changed)}, seen at {result.block.id}'s start): its baseline was measured on "
                "another engine")

    # -- the bundle and its blocks ------------------------------------------------

    def attach(self, bundle: Bundle) -> None:
        """The live run's bundle, once its first block created it."""
        self._bundle = bundle

    @property
    def bundle(self) -> Bundle:
        if self._bundle is None:
            path = self._bundle_path
            if path is not None and self._session is not None:
                path = Bundle.locate(path, self._session)
            if path is None or not (path / "manifest.json").is_file():
                raise EvidenceError(f"{self._bundle_path}: no evidence bundle was written; no block ran",
                                    path=str(self._bundle_path))
            self._bundle = Bundle.open(path)
            require_same_spec(self._bundle.spec_id, self.spec.spec_id)
        return self._bundle

    @property
    def bundle_path(self) -> Path | None:
        return self._bundle.path if self._bundle is not None else self._bundle_path

    @property
    def has_bundle(self) -> bool:
        return self._bundle is not None

    @property
    def ran(self) -> dict[str, BlockResult]:
        """Every block that ran, by id (a stored bundle's are read on first use)."""
        if self._ran is None:
            self._ran = {}
            for result in load_results(self.bundle, self.schedule.blocks).values():
                self.take(result)
        return self._ran

    def take(self, result: BlockResult) -> None:
        """Keep a block's result; a failed block stops its candidate's series."""
        if self._ran is None:
            self._ran = {}
        self._ran[result.block.id] = result
        if result.failure is not None:
            block = result.block
            self.stop(block.candidate, Stop(f"{block.id}: {result.failure.headline}", result.failure.outcome))
        refused = self._contract_refused(result)
        if refused is not None:  # no candidate is compared with a baseline of another engine
            for series in series_of(self.spec):
                self.stop(series.name, Stop(refused, Outcome.INCONCLUSIVE))

    def stop(self, candidate: str, stop: Stop) -> None:
        """Apply a stop rule: the first reason stays, later blocks of the candidate are skipped."""
        self._stopped.setdefault(candidate, stop)

    def stopped(self, candidate: str) -> Stop | None:
        return self._stopped.get(candidate)

    def source(self, block: Block) -> Results:
        """The results that hold a block: the stored baseline's for a candidate-only run's stored blocks."""
        return self.stored_baseline if self.stored_baseline and block.design != "anchored" else self

    def ensure(self, block: Block) -> BlockResult:
        """The block's result, made first by the supply when there is one.

        BlockFailed for a failed block, CandidateStopped for one a stop rule skipped.
        """
        if block.id not in self.ran and self._supply is not None and self.source(block) is self:
            self._supply(block)
        result = self.ran.get(block.id)
        if result is None:
            stop = self.stopped(block.candidate)
            if stop is not None:
                raise CandidateStopped(f"candidate {block.candidate!r} was stopped: {stop.reason}")
            why = self.not_needed(block)
            if why is not None:
                raise CandidateStopped(f"{block.id}: {why}")
            raise EvidenceError(f"{block.id}: the bundle holds no such block", path=str(self.bundle_path))
        if result.failure is not None:
            raise BlockFailed(result)
        return result

    def lifecycle(self, block: Block) -> BlockResult:
        """The block's result, failed or not; CandidateStopped if a stop rule skipped it."""
        try:
            return self.ensure(block)
        except BlockFailed as exc:
            return exc.result

    def _sample_for(self, ref: OutputRef) -> Sample:
        result = self.source(ref.block).ensure(ref.block)
        measured = [s for s in result.measured if s.index == ref.index]
        if not measured or measured[0].output_sha256 is None:
            raise EvidenceError(f"{ref.id}: the block has no output for measured request {ref.index}")
        return measured[0]

    def output_path(self, ref: OutputRef) -> Path:
        sha = self._sample_for(ref).output_sha256
        assert sha is not None
        return self.source(ref.block).bundle.output_path(sha)

    def available(self, ref: OutputRef) -> bool:
        """Whether an output can be had: a stored bundle has only the blocks that it holds."""
        result = self.source(ref.block).ran.get(ref.block.id)
        return result is not None and result.ok

    # -- latency ----------------------------------------------------------------------

    def series(self, duration: float, candidate: str) -> list[BlockResult]:
        """The blocks of one candidate's speed comparison that ran, in order (today's in a candidate-only run)."""
        return [r for b in self.schedule.series(duration, candidate) if (r := self.ran.get(b.id)) is not None]

    def speed(self, duration: float, candidate: str) -> speed.SpeedReport | None:
        """The latency estimate for one candidate at one duration; None without a block to compare.

        Paired AB/BA ratios at the campaign's error levels; in a
        candidate-only run, against today's anchors, with the stored
        baseline's shift.
        """
        blocks = [speed.BlockSamples(r.block.letter, r.latencies) for r in self.series(duration, candidate) if r.ok]
        levels = intervals.error_levels(len(self.spec.workload.durations), len(series_of(self.spec)))
        margin = self.spec.gates.speed_margin
        roles = {b.role for b in blocks}
        if self.stored_baseline is not None and "B" in roles:
            stored = self.stored_baseline
            medians = [m for b in self.schedule.stored_series(duration, candidate)
                       if (r := stored.ran.get(b.id)) is not None and r.ok and (m := r.median_e2e_s) is not None]
            return speed.anchored_speed_report(blocks, medians, margin=margin, levels=levels,
                                               stored=str(stored.bundle_path))
        if roles != {"A", "B"}:
            return None
        return speed.speed_report(blocks, margin=margin, levels=levels)

    def block_records(self, duration: float, candidate: str) -> list[BlockRecord]:
        """Each block of the candidate's series with the warmup check, pooled over every block of the duration,
        and the reconciliation of its measured requests' three accounts (:mod:`h3bench.verdict.attribution`)."""
        ran = [r for r in self.ran.values() if r.block.duration == duration and r.ok]
        checks = {c.block_id: c for c in warmup_checks([(r.block.id, r.latencies) for r in ran])}
        tolerance = attribution.tolerance_for(self.spec)
        return [BlockRecord(r.block.id, r.median_e2e_s, checks.get(r.block.id),
                            *attribution.block_reconciliation(r, self.spec.workload.steps, tolerance))
                for r in self.series(duration, candidate)]

    def stage_effects(self, duration: float, candidate: str) -> StageEffects | None:
        """Which stage moved: the paired effect of every part over the blocks :meth:`speed` uses (attribution only)."""
        if self.schedule.anchored:  # today's anchors against the candidate are not AB/BA pairs
            return None
        return attribution.series_effects([r for r in self.series(duration, candidate) if r.ok], duration,
                                          self.spec.workload.steps)

    def arm_stats(self, series: Iterable[BlockResult]) -> tuple[ArmStats, ...]:
        """Each arm's measured requests that succeeded, in blocks that succeeded: n, median, percentiles, stages."""
        series = list(series)
        found = []
        for arm in sorted({r.block.arm: r.block.letter for r in series}.items(), key=lambda item: item[1]):
            samples = [s for r in series if r.block.arm == arm[0] and r.ok
                       for s in r.measured if s.ok and s.e2e_s is not None]
            e2e = [s.e2e_s for s in samples if s.e2e_s is not None]
            if e2e:
                stages, negative = stage_median_values((s.e2e_s, s.stage_durations) for s in samples)
                found.append(ArmStats(arm[0], len(e2e), statistics.median(e2e),
                                      tuple(speed.percentile(e2e, q) for q in speed.PERCENTILES),
                                      tuple(stages.items()), negative))
        return tuple(found)

    # -- the verdict ---------------------------------------------------------------------

    def _lossless(self, candidate: str, duration: float) -> LosslessSummary | None:
        found: LosslessOutcome | None = self.judge.lossless_results.get(CandidateWorkload(candidate, duration).id)
        if found is None:
            return None
        return LosslessSummary(found.outcome, found.exact, found.reasons, found.result.get("p_value"),
                               int(found.result.get("baseline_processes", 0)),
                               int(found.result.get("candidate_processes", 0)))

    @property
    def lossless_on(self) -> bool:
        return self.judge.lossless_enabled

    def decision(self, duration: float, series: str) -> LookDecision | None:
        """The series' look decision from its blocks so far (None in a candidate-only run, or before a pair)."""
        if self.schedule.anchored or self.schedule.shard is not None:  # a shard's looks are the pooled ones
            return None
        ran = []
        for block in self.schedule.campaign_series(duration, series):  # up to the first that did not run (-k, --arm)
            if (result := self.ran.get(block.id)) is None:
                break
            ran.append(result)
        return looks.decision(self.spec, duration, ran, lossless_on=self.lossless_on)

    def not_needed(self, block: Block) -> str | None:
        """Why a scheduled block need not run: the course's answer (:meth:`h3bench.runspec.course.Course.why_not`).

        None when it must run, or when that cannot be known yet. A
        candidate-only run's anchored blocks always run; a shard's round is
        its window.
        """
        if block.design == "anchored" or self.schedule.shard is not None:
            return None
        return self.course.why_not(self, block.duration, None if block.design == "controls" else block.candidate)

    @property
    def course(self) -> Course:
        return Course.of(self.spec, lossless=self.lossless_on)

    # -- what the course reads (h3bench.runspec.course.RunView) -------------------------------------------------

    def pairs_run(self, duration: float, series: str) -> int:
        """The series' highest pair that ran at the duration, plus one (0 before any)."""
        return max((r.block.pair + 1 for r in self.series(duration, series)), default=0)

    def baseline_run(self, duration: float) -> int:
        """The baseline processes that ran at the duration: every series' A blocks and the controls."""
        return sum(1 for r in self.ran.values() if r.block.duration == duration and r.block.letter == "A"
                   and r.block.arm == BASELINE and r.ok)

    def controls_run(self, duration: float) -> tuple[int, ...]:
        return tuple(sorted(r.block.position for r in self.ran.values()
                            if r.block.duration == duration and r.block.design == "controls"))

    def halted(self, series: str) -> tuple[str, str] | None:
        stop = self.stopped(series)
        return None if stop is None else (str(stop.outcome), stop.reason)

    def _speed(self, duration: float, candidate: str) -> tuple[Outcome, tuple[str, ...], RatioEstimate | None,
                                                               LookDecision | None]:
        """The duration's speed outcome, reasons and estimate: the look decision's, with the estimate's notes."""
        report = self.speed(duration, candidate)
        found = self.decision(duration, candidate)
        if found is None or found.look is None or report is None:
            if report is None:
                return Outcome.INCONCLUSIVE, ("no complete AB/BA pair was measured",), None, found
            return report.verdict.outcome, tuple(report.verdict.reasons), report.estimate, found
        levels = dataclasses.replace(report.estimate.levels, pass_level=found.pass_level or 0.0,
                                     fail_level=found.fail_level or 0.0)
        estimate = dataclasses.replace(report.estimate, geomean=found.ratio, ci_low=found.lower,
                                       ci_high=found.upper, levels=levels)
        plain = (len(found.looks) == 1 and not found.first_requests_left_out
                 and found.reason_code in (sequential.PASSED, sequential.FAILED, sequential.LAST_LOOK))
        reasons = tuple(report.verdict.reasons) if plain else (found.reason, *report.estimate.notes)
        return found.outcome, (*reasons, *found.notes), estimate, found

    def _block_seconds(self, result: BlockResult) -> float:
        """A block's wall time on its devices: start, warmup, the timed requests, stop."""
        life = result.lifecycle
        timed = sum(s.e2e_s for s in result.samples if s.phase != "heldout" and s.kind in ("measured", "audit")
                    and s.e2e_s is not None)
        return sum(v or 0.0 for v in (life.startup_s, life.warmup_s, life.shutdown_s)) + timed

    def _devices(self, arm: str) -> int:
        return max(1, len(getattr(self.spec.arms[arm], "device_ids", ()) or self.spec.hardware.device_ids))

    def _fixed_block_seconds(self, result: BlockResult) -> float:
        """What a block of the fixed design (:meth:`Design.fixed_of`) costs at this block's seconds per request.

        Its start and stop as measured, its warmups and timed requests (1 +
        3 + 1 by default) at this block's warmup and mean timed request.
        """
        life = result.lifecycle
        own, fixed = Design.of(self.spec).budget, Design.fixed_of(self.spec).budget
        timed = [s.e2e_s for s in result.samples if s.phase != "heldout" and s.kind in ("measured", "audit")
                 and s.e2e_s is not None]
        per_request = statistics.fmean(timed) if timed else 0.0
        return ((life.startup_s or 0.0) + (life.shutdown_s or 0.0) + (life.warmup_s or 0.0) * fixed.warmups / own.warmups
                + per_request * fixed.columns)

    def _fixed_s(self, ran: list[BlockResult], letters: str) -> float | None:
        """What the fixed design's ``letters`` blocks would cost at the seconds these blocks took, on their devices."""
        cost = {}
        for letter in set(letters):
            mine = [r for r in ran if r.block.letter == letter]
            if not mine:
                return None
            cost[letter] = statistics.fmean(self._fixed_block_seconds(r) * self._devices(r.block.arm) for r in mine)
        return sum(cost[letter] for letter in letters)

    def _look_record(self, duration: float, candidate: str, found: LookDecision | None) -> LookRecord:
        planned = self.schedule.series(duration, candidate)
        ran = [r for b in planned if (r := self.ran.get(b.id)) is not None]
        device = sum(self._block_seconds(r) * self._devices(r.block.arm) for r in ran)
        p = self.spec.protocol
        return LookRecord(
            str(p.design), looks_of(self.spec, duration), found.look if found else None, found.pairs if found else 0,
            bool(found and found.stop), sequential.REASONS[found.reason_code] if found else "continue",
            bool(found and found.first_requests_left_out), tuple(r.block.id for r in ran),
            tuple(b.id for b in planned if b.id not in self.ran), device, self._fixed_s(ran, p.order))

    def device_time(self) -> dict[str, DeviceTime]:
        """Per duration: the blocks that ran and did not, their wall and device time, and the fixed design's.

        The fixed design runs every series at every duration: a series that
        ran no block here (it did not pass a cheaper duration) is priced as
        the duration's baseline blocks, both arms, as the plan prices an arm
        with no figure of its own.
        """
        out = {}
        order = self.spec.protocol.order
        for duration in self.spec.workload.durations:
            planned = [b for b in self.schedule.blocks if b.duration == duration]
            ran = [r for b in planned if (r := self.ran.get(b.id)) is not None]
            baseline = [r for r in ran if r.block.letter == "A"]
            fixed = [self._fixed_s(own, order) if (own := [r for r in ran if r.block.candidate == s.name])
                     else self._fixed_s(baseline, "A" * len(order)) for s in series_of(self.spec)]
            controls = self._fixed_s(baseline, "A" * Design.fixed_of(self.spec).fixed_controls)
            total = None if None in fixed or controls is None else sum(f for f in fixed if f) + controls
            out[duration_key(duration)] = DeviceTime(
                len(ran), len(planned) - len(ran), sum(self._block_seconds(r) for r in ran),
                sum(self._block_seconds(r) * self._devices(r.block.arm) for r in ran), total)
        return out

    def select(self, selected: Iterable[Block]) -> None:
        """The session runs only ``selected``: a candidate is judged at the durations where its own blocks are."""
        judged = {(b.candidate, duration_key(b.duration)) for b in selected if b.letter == "B"}
        self.not_selected = {}
        for series in series_of(self.spec):
            left = tuple(k for k in map(duration_key, self.spec.workload.durations) if (series.name, k) not in judged)
            if left:
                self.not_selected[series.name] = left

    def verdicts(self) -> dict[str, CandidateVerdict]:
        """Per candidate: speed, quality and lossless at each selected duration, and the stop rule that fired."""
        out = {}
        for series in series_of(self.spec):
            candidate = series.name
            durations = {}
            skipped = self.not_selected.get(candidate, ())
            if len(skipped) == len(self.spec.workload.durations):
                continue
            for d in self.spec.workload.durations:
                if duration_key(d) in skipped:
                    continue
                outcome, reasons, estimate, found = self._speed(d, candidate)
                pairs = self.judge.pairs_of(candidate, d)
                durations[duration_key(d)] = DurationVerdict(
                    series.control, outcome, reasons, estimate,
                    self.judge.quality_outcome(pairs), len(pairs), self.judge.lossless_enabled,
                    self._lossless(candidate, d) if self.judge.lossless_enabled else None,
                    tuple(self.block_records(d, candidate)), self.arm_stats(self.series(d, candidate)),
                    self.judge.worst_values(pairs),
                    None if self.schedule.anchored else self._look_record(d, candidate, found),
                    self.stage_effects(d, candidate), attribution.recipe_steps(self.spec, d, series.control, candidate),
                    attribution.tolerance_for(self.spec).describe())
            out[candidate] = CandidateVerdict(durations, self.stopped(candidate), self.telemetry_notes(candidate))
        return out

    def block_telemetry(self, block: Block) -> telemetry.BlockTelemetry | None:
        """The block's device telemetry in a few numbers; None when none was sampled (the simulator)."""
        results = self.source(block)
        path = results.bundle.path / telemetry.TELEMETRY
        size = path.stat().st_size if path.is_file() else 0
        if results._telemetry[0] != size:  # read again only when the file grew
            results._telemetry = (size, telemetry.block_telemetry(telemetry.read_telemetry(results.bundle.path)))
        return results._telemetry[1].get(block.id)

    def telemetry_notes(self, candidate: str) -> tuple[str, ...]:
        """Blocks of the candidate's series whose telemetry stands out against the other blocks of their arm."""
        notes: list[str] = []
        for duration in self.spec.workload.durations:
            series = self.series(duration, candidate)
            for arm in dict.fromkeys(r.block.arm for r in series):
                found = [t for r in series if r.block.arm == arm and (t := self.block_telemetry(r.block)) is not None]
                notes += telemetry.outlier_notes(f"{arm} {duration:g} s", found)
        return tuple(notes)

    def run_notes(self) -> tuple[str, ...]:
        """What the manifest says about the run itself: a DIAGNOSTIC run, pins the host could not confirm."""
        manifest = self.bundle.manifest
        run = manifest.get("run") or {}
        lines = [f"DIAGNOSTIC run: not a campaign result; {reason}" for reason in diagnostic_reasons(manifest)]
        lines += [f"  underpowered: {problem}" for problem in run.get("underpowered", ())]
        lines += [f"design: {warning}" for warning in design_warnings(self.spec)]
        if shard := manifest.get("shard"):
            lines.append(f"shard {shard['index']}/{shard['count']}, round {shard['round']}, on host "
                         f"{shard['host']['name']}: this verdict covers this host's pairs only; the campaign's "
                         "verdict is h3bench pool's over every shard")
        return tuple(lines + [f"not verified: {item}" for item in run.get("unverified", ())])

    def document(self, *, interrupted: str | None = None,
                 heldout: Mapping[str, dict[str, HeldoutVerdict]] | None = None,
                 accepted: Acceptance | None = None, verdicts: Mapping[str, CandidateVerdict] | None = None,
                 ) -> VerdictDocument:
        """The verdict, as ``verdict.json`` holds it."""
        return VerdictDocument(
            spec_id=self.spec.spec_id, spec_name=self.spec.name, h3bench=__version__,
            run="DIAGNOSTIC" if is_diagnostic(self.bundle.manifest) else "FORMAL",
            interrupted=interrupted, candidates=dict(verdicts if verdicts is not None else self.verdicts()),
            run_notes=self.run_notes(), heldout=dict(heldout or {}), accepted=accepted,
            baseline_evidence=str(self.stored_baseline.bundle_path) if self.stored_baseline else None,
            lpips_required=self.spec.gates.lpips_required, baseline=self.baseline_levels(),
            design=design_text(self.spec, anchored=self.schedule.anchored), device=self.device_time(),
            not_selected=dict(self.not_selected))

    def baseline_levels(self) -> dict[str, BaselineLevel]:
        """Per duration, the median of every successful baseline block's median (controls and anchors included)."""
        medians: dict[str, list[float]] = {}
        for result in self.ran.values():
            if result.block.arm == BASELINE and result.ok and result.median_e2e_s is not None:
                medians.setdefault(duration_key(result.block.duration), []).append(result.median_e2e_s)
        return {key: BaselineLevel(statistics.median(values), len(values)) for key, values in medians.items()}

    def profiles(self) -> list[Sample]:
        """The profiled requests the bundle holds (``protocol.profile``), with their records."""
        return [Sample.from_record(record) for record in self.bundle.samples("profile")]

    # -- quality, and re-validation ---------------------------------------------------------

    def load_quality(self) -> str | None:
        """Take the quality results that the newest validator stored in the bundle; its version, or None."""
        versions = self.bundle.quality_versions()
        if not versions:
            return None
        stored = self.bundle.read_quality(versions[-1])
        cases = self.schedule.case_by_id()
        for kind, results in (("quality", stored.get("pairs", {})), ("lossless", stored.get("lossless", {}))):
            for case_id, result in results.items():
                case = cases.get(case_id)
                if isinstance(case, (MatchedPair, CandidateWorkload)):
                    candidate = case.candidate.block.candidate if isinstance(case, MatchedPair) else case.candidate
                    self.judge.absorb({"kind": kind, "id": case_id, "candidate": candidate,
                                       "duration": case.duration, "result": result})
        return versions[-1]

    def write_quality(self) -> str | None:
        """Record every quality result under this validator's version, beside any older one."""
        if not self.judge.pairs and not self.judge.lossless_results:
            return None
        return self.bundle.write_quality(quality.VALIDATOR_VERSION, self.judge.quality_document())

    def judge_all(self) -> None:
        """Every matched pair whose outputs can be had, then the lossless judgement of every candidate workload."""
        for pair in self.schedule.cases("matched_pair"):
            assert isinstance(pair, MatchedPair)
            if self.available(pair.baseline) and self.available(pair.candidate):
                self.judge.compare(pair)
        if self.judge.lossless_enabled:
            for case in self.schedule.cases("candidate_workload"):
                assert isinstance(case, CandidateWorkload)
                self.judge.lossless(case)

    def validate(self) -> Outcome:
        """Run every quality comparison (and the lossless judgement) over stored outputs; the overall outcome."""
        if quality.VALIDATOR_VERSION in self.bundle.quality_versions():
            raise UsageError(
                f"{self.bundle.path} is already validated with {quality.VALIDATOR_VERSION}; its result is frozen, "
                "and only a newer validator version writes a new one beside it"
            )
        pairs = [p for p in self.schedule.cases("matched_pair")
                 if isinstance(p, MatchedPair) and self.available(p.baseline) and self.available(p.candidate)]
        if not pairs:
            raise UsageError(f"{self.bundle.path} holds no matched baseline and candidate outputs: nothing to validate")
        self.judge_all()
        return combine(v.outcome for v in self.verdicts().values())
