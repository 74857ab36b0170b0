"""A campaign's results and what follows from them, for a live run and for a stored bundle alike.

A :class:`Review` holds the blocks that ran (their :class:`BlockResult`), the
stop rules that fired, and the :class:`~h3bench.verdict.judge.Judge` of their
outputs; from those it gives the latency comparison, the verdict and the
summary. A stored bundle is reviewed as it is (``h3bench validate``, an
xdist worker, the baseline of a candidate-only run); the live campaign
(:class:`h3bench.session.runner.Campaign`) extends it by running what is missing.
Nothing here starts a server.

Stop rules: a failed request, a failed quality gate, resource interference,
an incomplete cleanup (a shutdown beyond the shared budget included) or a
failed anti-shortcut audit stops the candidate; the rest of its series is
skipped with the reason, and the verdict says why (FAIL for the candidate's
own failures, INCONCLUSIVE when the comparison itself is invalid: a broken
baseline or interference).
"""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

from h3bench import quality
from h3bench.errors import EvidenceError, UsageError
from h3bench.evidence import Bundle, require_verified
from h3bench.host import telemetry
from h3bench.outcome import Outcome, combine
from h3bench.plan.design import design_warnings
from h3bench.plan.preflight import diagnostic_reasons, is_diagnostic
from h3bench.quality import QualityReport, lossless
from h3bench.quality.files import Probed
from h3bench.run.measure import Measure
from h3bench.run.records import BlockFailed, BlockResult, CandidateStopped, Sample, Stop, headline, load_results
from h3bench.runspec import RunSpec, parse_runspec, require_same_spec
from h3bench.runspec.schedule import Block, CandidateWorkload, MatchedPair, OutputRef, Schedule, series_of
from h3bench.session.settings import Settings
from h3bench.stats import speed as stats
from h3bench.stats.intervals import error_levels
from h3bench.stats.warmup import warmup_checks
from h3bench.verdict.acceptance import DIAGNOSTIC_VERDICT, diagnostic_lines, research_lines
from h3bench.verdict.judge import Judge, LpipsStatus
from h3bench.verdict.verdicts import BlockRecord, CandidateVerdict, DurationVerdict

__all__ = ["Review"]


class Review:
    """The blocks of one campaign that ran, the stop rules that fired, and the judgement of the outputs."""

    def __init__(
        self, spec: RunSpec, settings: Settings, *, bundle_path: Path | None = None, session: str | None = None
    ) -> None:
        self.spec = spec
        self.settings = settings
        # A candidate-only run runs the anchored orders; the rest of its schedule is the stored bundle's.
        self.schedule = Schedule(spec, settings.arm, anchored=settings.baseline_evidence is not None)
        self.stored_baseline: Review | None = None  # set for a candidate-only run
        self._bundle_path = bundle_path
        self._session = session  # a run's own id: its bundle is found by it, even under another name
        self._bundle: Bundle | None = None
        self._results: dict[str, BlockResult] | None = None  # loaded from the bundle on first use
        self._stopped: dict[str, Stop] = {}  # candidate → the stop rule that fired
        self._telemetry: tuple[int, dict[str, telemetry.BlockTelemetry]] = (-1, {})  # (file size, per block)
        self.judge = Judge(spec, self.schedule, locate=self.output_path, available=self.available, stop=self.stop,
                           lpips_dir=settings.lpips_dir, lpips_device=settings.lpips_device,
                           lossless_flag=settings.lossless)

    @classmethod
    def from_bundle(cls, path: str | Path, settings: Settings, *, verified: bool = False) -> Review:
        """Review a stored bundle under its own spec, once it verifies (EvidenceError naming the files otherwise).

        ``verified``: the caller has just verified it (the report), so it is not hashed twice.
        """
        if not verified:
            require_verified(path, "it is not read")
        bundle = Bundle.open(path)
        spec = parse_runspec(bundle.manifest["spec"], source=f"{path}/manifest.json")
        review = cls(spec, settings, bundle_path=bundle.path)
        review._bundle = bundle
        return review

    def attach_baseline(self, path: Path) -> None:
        """A candidate-only run: the stored bundle of the same spec gives everything but today's anchored blocks."""
        if self.settings.arm != "candidate":
            raise UsageError("--baseline-evidence runs only the candidate's blocks: add --arm candidate")
        stored = Review.from_bundle(path, dataclasses.replace(self.settings, arm="all", baseline_evidence=None))
        require_same_spec(stored.spec.spec_id, self.spec.spec_id)
        if is_diagnostic(stored.bundle.manifest):
            raise EvidenceError(
                f"{path} is a DIAGNOSTIC run ({'; '.join(diagnostic_reasons(stored.bundle.manifest))}): it is not a "
                "campaign result and can never be --baseline-evidence; run the baseline formally", path=str(path))
        if not any(r.block.letter == "A" and r.failure is None for r in stored.results.values()):
            raise EvidenceError(f"{path} holds no successful baseline block", path=str(path))
        self.stored_baseline = stored

    # -- the bundle and its blocks ------------------------------------------------

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
    def results(self) -> dict[str, BlockResult]:
        if self._results is None:
            self._results = {}
            for result in load_results(self.bundle, self.schedule.blocks).values():
                self.take(result)
        return self._results

    @property
    def ran_anything(self) -> bool:
        return self._results is not None and bool(self._results)

    def take(self, result: BlockResult) -> None:
        """Keep a block's result; a failed block stops its candidate's series."""
        if self._results is None:
            self._results = {}
        self._results[result.block.id] = result
        if result.failure is not None:
            block = result.block
            self.stop(block.candidate, Stop(f"{block.id}: {headline(result.failure)}", result.failure_outcome))

    def stop(self, candidate: str, stop: Stop) -> None:
        """Apply a stop rule: the first reason stays, later blocks of the candidate are skipped."""
        self._stopped.setdefault(candidate, stop)

    def stopped(self, candidate: str) -> Stop | None:
        return self._stopped.get(candidate)

    def source(self, block: Block) -> Review:
        """The review that holds a block: the stored baseline's for a candidate-only run's stored blocks."""
        return self.stored_baseline if self.stored_baseline and block.design != "anchored" else self

    def ensure(self, block: Block) -> BlockResult:
        """The block's result (BlockFailed for a failed block, CandidateStopped for one a stop rule skipped)."""
        result = self.results.get(block.id)
        if result is None:
            stop = self.stopped(block.candidate)
            if stop is not None:
                raise CandidateStopped(f"candidate {block.candidate!r} was stopped: {stop.reason}")
            raise EvidenceError(f"{block.id}: the bundle holds no such block", path=str(self.bundle_path))
        if result.failure is not None:
            raise BlockFailed(result)
        return result

    def run_block(self, block: Block, measure: Measure | None = None) -> BlockResult:
        """What the block produced when it ran; a review never runs one (``measure`` is not used)."""
        return self.ensure(block)

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
        """Whether an output can be had: a stored review has only the blocks that its bundle holds."""
        result = self.source(ref.block).results.get(ref.block.id)
        return result is not None and result.failure is None

    # -- judging --------------------------------------------------------------------

    def lpips_status(self) -> LpipsStatus:
        return self.judge.lpips_status()

    def optional_checks(self) -> tuple[str, ...]:
        return self.judge.optional_checks()

    @property
    def lossless_enabled(self) -> bool:
        return self.judge.lossless_enabled

    def compare(self, pair: MatchedPair) -> QualityReport:
        return self.judge.compare(pair)

    def probed(self, ref: OutputRef) -> Probed:
        """One output's probe, from the one decode of its comparisons."""
        return self.judge.probed(ref)

    def lossless(self, case: CandidateWorkload) -> lossless.LosslessVerdict:
        return self.judge.lossless(case)

    def absorb(self, record: dict[str, Any]) -> None:
        """A quality or lossless result from an xdist worker's test report."""
        self.judge.absorb(record)

    def drain_records(self) -> list[dict[str, Any]]:
        return self.judge.drain_records()

    # -- latency and the verdict -------------------------------------------------------

    def series(self, duration: float, candidate: str) -> list[BlockResult]:
        """The blocks of one candidate's speed comparison that ran, in order (today's in a candidate-only run)."""
        return [r for b in self.schedule.series(duration, candidate) if (r := self.results.get(b.id)) is not None]

    def speed(self, duration: float, candidate: str) -> stats.SpeedReport | None:
        """The latency estimate for one candidate at one duration; None without a block to compare.

        Paired AB/BA ratios at the campaign's error levels; in a
        candidate-only run, against today's anchors, with the stored
        baseline's shift.
        """
        blocks = [stats.BlockSamples(r.block.letter, r.latencies)
                  for r in self.series(duration, candidate) if r.failure is None]
        levels = error_levels(len(self.spec.workload.durations), len(series_of(self.spec)))
        margin = self.spec.gates.speed_margin
        roles = {b.role for b in blocks}
        if self.stored_baseline is not None and "B" in roles:
            stored = self.stored_baseline
            medians = [m for b in self.schedule.stored_series(duration, candidate)
                       if (r := stored.results.get(b.id)) is not None and r.failure is None
                       and (m := r.median_e2e_s) is not None]
            return stats.anchored_speed_report(blocks, medians, margin=margin, levels=levels,
                                               stored=str(stored.bundle_path))
        if roles != {"A", "B"}:
            return None
        return stats.speed_report(blocks, margin=margin, levels=levels)

    def block_records(self, duration: float, candidate: str) -> list[BlockRecord]:
        """Each block of the candidate's series with the warmup check, pooled over every block of the duration."""
        ran = [r for r in self.results.values() if r.block.duration == duration and r.failure is None]
        checks = {c.block_id: c for c in warmup_checks([(r.block.id, r.latencies) for r in ran])}
        return [BlockRecord(r.block.id, r.median_e2e_s, checks.get(r.block.id)) for r in self.series(duration, candidate)]

    def verdicts(self) -> dict[str, CandidateVerdict]:
        """Per candidate: speed, quality and lossless at each duration, and the stop rule that fired."""
        out = {}
        for candidate in (series.name for series in series_of(self.spec)):
            durations = {
                f"{d:g}s": DurationVerdict.of(
                    self.speed(d, candidate), self.judge.pairs_of(candidate, d), self.optional_checks(),
                    lossless_enabled=self.lossless_enabled,
                    lossless=self.judge.lossless_results.get(CandidateWorkload(candidate, d).id),
                    blocks=self.block_records(d, candidate),
                )
                for d in self.spec.workload.durations
            }
            out[candidate] = CandidateVerdict(durations, self.stopped(candidate), self.telemetry_notes(candidate))
        return out

    def block_telemetry(self, block: Block) -> telemetry.BlockTelemetry | None:
        """The block's device telemetry in a few numbers; None when none was sampled (the simulator)."""
        review = self.source(block)
        path = review.bundle.path / telemetry.TELEMETRY
        size = path.stat().st_size if path.is_file() else 0
        if review._telemetry[0] != size:  # read again only when the file grew
            review._telemetry = (size, telemetry.block_telemetry(telemetry.read_telemetry(review.bundle.path)))
        return review._telemetry[1].get(block.id)

    def telemetry_notes(self, candidate: str) -> tuple[str, ...]:
        """Blocks of the candidate's series whose telemetry stands out against the other blocks of their arm."""
        notes: list[str] = []
        for duration in self.spec.workload.durations:
            series = self.series(duration, candidate)
            for arm in dict.fromkeys(r.block.arm for r in series):
                found = [t for r in series if r.block.arm == arm and (t := self.block_telemetry(r.block)) is not None]
                notes += telemetry.outlier_notes(f"{arm} {duration:g} s", found)
        return tuple(notes)

    def outcome(self) -> Outcome:
        return combine(v.outcome for v in self.verdicts().values())

    @property
    def diagnostic(self) -> bool:
        """Whether this run is DIAGNOSTIC: never a campaign result (its manifest says so)."""
        return is_diagnostic(self.bundle.manifest)

    def verdict_label(self, outcome: Outcome) -> str:
        """How a verdict reads: ``DIAGNOSTIC (not a campaign result)`` for a diagnostic run, with what was measured."""
        return f"{DIAGNOSTIC_VERDICT}; measured {outcome}" if self.diagnostic else str(outcome)

    def research_results(self) -> tuple[dict[str, Any] | None, dict[str, Any] | None]:
        """The held-out results and the acceptance that the run sealed into final.json (None before)."""
        final = self.bundle.final() or {}
        return final.get("heldout"), final.get("accepted")

    def summary_lines(self) -> list[str]:
        from h3bench.report.terminal import summary_lines

        lines = summary_lines(self)
        lines[-1:-1] = research_lines(self, *self.research_results())
        return diagnostic_lines(lines) if self.diagnostic else lines

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
                    self.absorb({"kind": kind, "id": case_id, "candidate": candidate, "duration": case.duration,
                                 "result": result})
        return versions[-1]

    def run_notes(self) -> list[str]:
        """What the manifest says about the run itself: a DIAGNOSTIC run, pins the host could not confirm."""
        manifest = self.bundle.manifest
        run = manifest.get("run") or {}
        lines = [f"DIAGNOSTIC run: not a campaign result; {reason}" for reason in diagnostic_reasons(manifest)]
        lines += [f"  underpowered: {problem}" for problem in run.get("underpowered", ())]
        lines += [f"design: {warning}" for warning in design_warnings(self.spec)]
        return lines + [f"not verified: {item}" for item in run.get("unverified", ())]

    # -- re-validation -------------------------------------------------------------------

    def write_quality(self) -> str | None:
        """Record every quality result under this validator's version, beside any older one."""
        if not self.judge.pairs and not self.judge.lossless_results:
            return None
        return self.bundle.write_quality(quality.VALIDATOR_VERSION, self.judge.quality_document())

    def validate(self) -> Outcome:
        """Run every quality comparison (and the lossless judgement) over stored outputs; the overall outcome."""
        version = quality.VALIDATOR_VERSION
        if version in self.bundle.quality_versions():
            raise UsageError(
                f"{self.bundle.path} is already validated with {version}; its result is frozen, "
                "and only a newer validator version writes a new one beside it"
            )
        pairs = [p for p in self.schedule.cases("matched_pair")
                 if isinstance(p, MatchedPair) and self.available(p.baseline) and self.available(p.candidate)]
        if not pairs:
            raise UsageError(f"{self.bundle.path} holds no matched baseline and candidate outputs: nothing to validate")
        for pair in pairs:
            self.compare(pair)
        if self.lossless_enabled:
            for case in self.schedule.cases("candidate_workload"):
                assert isinstance(case, CandidateWorkload)
                self.lossless(case)
        return self.outcome()
