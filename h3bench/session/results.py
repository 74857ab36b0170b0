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
import statistics
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path

from h3bench import __version__
from h3bench.errors import EvidenceError, UsageError
from h3bench.evidence import Bundle, require_verified
from h3bench.host import telemetry
from h3bench.outcome import Outcome, combine
from h3bench.plan.design import design_warnings
from h3bench.plan.preflight import diagnostic_reasons, is_diagnostic
from h3bench.quality import VALIDATOR_VERSION
from h3bench.run.records import BlockFailed, BlockResult, CandidateStopped, Sample, Stop, load_results
from h3bench.runspec import BASELINE, RunSpec, parse_runspec, require_same_spec
from h3bench.runspec.schedule import Block, CandidateWorkload, MatchedPair, OutputRef, Schedule, series_of
from h3bench.session.settings import Settings
from h3bench.stats import intervals, speed
from h3bench.stats.stages import stage_median_values
from h3bench.stats.warmup import warmup_checks
from h3bench.verdict.judge import Judge, LosslessOutcome
from h3bench.verdict.verdicts import (
    Acceptance,
    ArmStats,
    BaselineLevel,
    BlockRecord,
    CandidateVerdict,
    DurationVerdict,
    HeldoutVerdict,
    LosslessSummary,
    VerdictDocument,
    duration_key,
)

__all__ = ["Results", "Supply"]

#: How a live campaign makes a block that has not run yet (it runs it and gives the result to :meth:`Results.take`).
Supply = Callable[[Block], object]


class Results:
    """The blocks of one campaign that ran, the stop rules that fired, and the judgement of the outputs."""

    def __init__(
        self, spec: RunSpec, settings: Settings, *, bundle_path: Path | None = None, session: str | None = None,
        supply: Supply | None = None, bundle: Bundle | None = None,
    ) -> None:
        self.spec = spec
        self.settings = settings
        # A candidate-only run runs the anchored orders; the rest of its schedule is the stored bundle's.
        self.schedule = Schedule(spec, settings.arm, anchored=settings.baseline_evidence is not None)
        self.stored_baseline: Results | None = None  # set for a candidate-only run
        self._supply = supply
        self._bundle_path = bundle_path
        self._session = session  # a run's own id: its bundle is found by it, even under another name
        self._bundle = bundle
        # A live run starts with nothing; a bundle that exists (stored, or resumed) is read on first use.
        self._ran: dict[str, BlockResult] | None = {} if supply is not None and bundle is None else None
        self._stopped: dict[str, Stop] = {}  # candidate → the stop rule that fired
        self._telemetry: tuple[int, dict[str, telemetry.BlockTelemetry]] = (-1, {})  # (file size, per block)
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
        return cls(spec, settings, bundle_path=bundle.path, bundle=bundle)

    def attach_baseline(self, path: Path) -> None:
        """A candidate-only run: the stored bundle of the same spec gives everything but today's anchored blocks."""
        if self.settings.arm != "candidate":
            raise UsageError("--baseline-evidence runs only the candidate's blocks: add --arm candidate")
        stored = Results.from_bundle(path, dataclasses.replace(self.settings, arm="all", baseline_evidence=None))
        require_same_spec(stored.spec.spec_id, self.spec.spec_id)
        if is_diagnostic(stored.bundle.manifest):
            raise EvidenceError(
                f"{path} is a DIAGNOSTIC run ({'; '.join(diagnostic_reasons(stored.bundle.manifest))}): it is not a "
                "campaign result and can never be --baseline-evidence; run the baseline formally", path=str(path))
        if not any(r.block.letter == "A" and r.ok for r in stored.ran.values()):
            raise EvidenceError(f"{path} holds no successful baseline block", path=str(path))
        self.stored_baseline = stored

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
        """Each block of the candidate's series with the warmup check, pooled over every block of the duration."""
        ran = [r for r in self.ran.values() if r.block.duration == duration and r.ok]
        checks = {c.block_id: c for c in warmup_checks([(r.block.id, r.latencies) for r in ran])}
        return [BlockRecord(r.block.id, r.median_e2e_s, checks.get(r.block.id)) for r in self.series(duration, candidate)]

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
                                      tuple(speed.percentile(e2e, q) for q in speed.PERCENTILES), stages, negative))
        return tuple(found)

    # -- the verdict ---------------------------------------------------------------------

    def _lossless(self, candidate: str, duration: float) -> LosslessSummary | None:
        found: LosslessOutcome | None = self.judge.lossless_results.get(CandidateWorkload(candidate, duration).id)
        if found is None:
            return None
        return LosslessSummary(found.outcome, found.exact, found.reasons, found.result.get("p_value"),
                               int(found.result.get("baseline_processes", 0)),
                               int(found.result.get("candidate_processes", 0)))

    def verdicts(self) -> dict[str, CandidateVerdict]:
        """Per candidate: speed, quality and lossless at each duration, and the stop rule that fired."""
        out = {}
        for series in series_of(self.spec):
            candidate = series.name
            durations = {}
            for d in self.spec.workload.durations:
                report = self.speed(d, candidate)
                reasons: tuple[str, ...] = ("no complete AB/BA pair was measured",)
                outcome, estimate = Outcome.INCONCLUSIVE, None
                if report is not None:
                    outcome, reasons, estimate = report.verdict.outcome, report.verdict.reasons, report.estimate
                pairs = self.judge.pairs_of(candidate, d)
                durations[duration_key(d)] = DurationVerdict(
                    series.control, outcome, tuple(reasons), estimate,
                    self.judge.quality_outcome(pairs), len(pairs), self.judge.lossless_enabled,
                    self._lossless(candidate, d) if self.judge.lossless_enabled else None,
                    tuple(self.block_records(d, candidate)), self.arm_stats(self.series(d, candidate)),
                    self.judge.worst_values(pairs))
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
            lpips_required=self.spec.gates.lpips_required, baseline=self.baseline_levels())

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
        return self.bundle.write_quality(VALIDATOR_VERSION, self.judge.quality_document())

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
        if VALIDATOR_VERSION in self.bundle.quality_versions():
            raise UsageError(
                f"{self.bundle.path} is already validated with {VALIDATOR_VERSION}; its result is frozen, "
                "and only a newer validator version writes a new one beside it"
            )
        pairs = [p for p in self.schedule.cases("matched_pair")
                 if isinstance(p, MatchedPair) and self.available(p.baseline) and self.available(p.candidate)]
        if not pairs:
            raise UsageError(f"{self.bundle.path} holds no matched baseline and candidate outputs: nothing to validate")
        self.judge_all()
        return combine(v.outcome for v in self.verdicts().values())
