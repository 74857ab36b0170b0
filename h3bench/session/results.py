"""A campaign's record store: the blocks that ran, the stop rules that fired, and what the course reads of them.

For a live run and a stored bundle alike, :class:`Results` is the one holder
of what ran: it reads records, and only a ``supply`` makes a block that has
not run yet. The live runner (:class:`h3bench.session.runner.Runner`)
supplies blocks by running them; a stored bundle (``h3bench validate``, an
xdist worker, the baseline of a candidate-only run, the report) has none,
and holds what it holds. Nothing here starts a server or writes a file.

Stop rules: a failed request, a failed quality gate, resource interference,
an incomplete cleanup (a shutdown beyond the shared budget included) or a
failed anti-shortcut audit stops the candidate; the rest of its series is
skipped with the reason. A block the course no longer needs is skipped too
(:meth:`Results.not_needed`).

What is made of the records lives beside them: the verdict
(:mod:`h3bench.verdict.assemble`, which reads a :class:`Results` as its
:class:`~h3bench.verdict.assemble.RunRecords`), the stored baseline's checks
(:mod:`h3bench.session.baseline`) and the quality results
(:mod:`h3bench.session.revalidation`).
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Callable, Iterable
from pathlib import Path

from h3bench.course.cases import Block, CandidateWorkload, OutputRef
from h3bench.course.course import Course
from h3bench.course.design import series_of
from h3bench.course.schedule import Schedule
from h3bench.errors import EvidenceError
from h3bench.evidence import BundleReader, require_verified
from h3bench.host import telemetry
from h3bench.outcome import Outcome
from h3bench.run.contract import Contract
from h3bench.run.records import BlockFailed, BlockResult, CandidateStopped, Sample, Stop, load_results, series_blocks
from h3bench.runspec import RunSpec, parse_runspec, require_same_spec
from h3bench.session.baseline import check_stored_baseline, contract_refused
from h3bench.session.settings import Settings
from h3bench.stats.sequential import LookDecision, SeriesBlock
from h3bench.verdict.judge import Judge
from h3bench.verdict.verdicts import duration_key

__all__ = ["Results", "Supply"]

#: How a live campaign makes a block that has not run yet (it runs it and gives the result to :meth:`Results.take`).
Supply = Callable[[Block], object]


class Results:
    """The blocks of one campaign that ran, the stop rules that fired, and the judge of their outputs."""

    def __init__(
        self, spec: RunSpec, settings: Settings, *, bundle_path: Path | None = None, session: str | None = None,
        supply: Supply | None = None, bundle: BundleReader | None = None,
    ) -> None:
        self.spec = spec
        self.settings = settings
        # A candidate-only run runs the anchored orders; the rest of its schedule is the stored bundle's. A shard's
        # round was read from its look file when the settings were resolved (Settings.with_round).
        assert settings.looks is None or settings.window is not None, "the shard's round is resolved first"
        self.schedule = Schedule(spec, settings.arm, anchored=settings.baseline_evidence is not None,
                                 shard=settings.shard, window=settings.window,
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
        bundle = BundleReader.open(path)
        spec = parse_runspec(bundle.manifest.spec, source=f"{path}/manifest.json")
        results = cls(spec, settings, bundle_path=bundle.path, bundle=bundle)
        stored = bundle.read_verdict()
        if stored is not None:  # a selection is judged again as the run judged it
            results.not_selected = {k: tuple(v) for k, v in (stored.get("not_selected") or {}).items()}
        return results

    def attach_baseline(self, path: Path) -> None:
        """A candidate-only run: the stored bundle of the same spec gives everything but today's anchored blocks.

        Refused (:func:`~h3bench.session.baseline.check_stored_baseline`) unless it can be this run's baseline.
        """
        stored = Results.from_bundle(path, dataclasses.replace(self.settings, arm="all", baseline_evidence=None))
        self._stored_contract = check_stored_baseline(self.spec, path, stored.spec, stored.bundle, stored.ran,
                                                      live=self._supply is not None)
        self.stored_baseline = stored

    # -- the bundle and its blocks ------------------------------------------------

    def attach(self, bundle: BundleReader) -> None:
        """The live run's bundle, once its first block created it."""
        self._bundle = bundle

    @property
    def bundle(self) -> BundleReader:
        if self._bundle is None:
            path = self._bundle_path
            if path is not None and self._session is not None:
                path = BundleReader.locate(path, self._session)
            if path is None or not (path / "manifest.json").is_file():
                raise EvidenceError(f"{self._bundle_path}: no evidence bundle was written; no block ran",
                                    path=str(self._bundle_path))
            self._bundle = BundleReader.open(path)
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
        refused = (contract_refused(self._stored_contract, self.stored_baseline.bundle_path, result)
                    if self.stored_baseline is not None else None)
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
        return self.stored_baseline if self.stored_baseline and block.kind != "anchored" else self

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

    def block_telemetry(self, block: Block) -> telemetry.BlockTelemetry | None:
        """The block's device telemetry in a few numbers; None when none was sampled (the simulator)."""
        results = self.source(block)
        path = results.bundle.path / telemetry.TELEMETRY
        size = path.stat().st_size if path.is_file() else 0
        if results._telemetry[0] != size:  # read again only when the file grew
            results._telemetry = (size, telemetry.block_telemetry(telemetry.read_telemetry(results.bundle.path)))
        return results._telemetry[1].get(block.id)

    def select(self, selected: Iterable[Block]) -> None:
        """The session runs only ``selected``: a candidate is judged at the durations where its own blocks are."""
        judged = {(b.candidate, duration_key(b.duration)) for b in selected if b.letter == "B"}
        self.not_selected = {}
        for series in series_of(self.spec):
            left = tuple(k for k in map(duration_key, self.spec.workload.durations) if (series.name, k) not in judged)
            if left:
                self.not_selected[series.name] = left

    # -- the course: which block still runs (h3bench.course.course.RunView) -----------------------------------

    def series(self, duration: float, candidate: str) -> list[BlockResult]:
        """The blocks of one candidate's speed comparison that ran, in order (today's in a candidate-only run)."""
        return [r for b in self.schedule.series(duration, candidate) if (r := self.ran.get(b.id)) is not None]

    @property
    def lossless_on(self) -> bool:
        return self.judge.lossless_enabled

    def series_blocks(self, duration: float, series: str) -> list[SeriesBlock]:
        """The series' blocks that ran, up to the first that did not (-k, --arm) or did not finish; none in a
        candidate-only run or a shard's (a shard's looks are the pooled ones)."""
        if self.schedule.anchored or self.schedule.shard is not None:
            return []
        ran = []
        for block in self.schedule.campaign_series(duration, series):
            if (result := self.ran.get(block.id)) is None:
                break
            ran.append(result)
        return series_blocks(ran, self.course.design.budget)

    def decision(self, duration: float, series: str) -> LookDecision | None:
        """The series' look decision, as the course takes it from its blocks (None before a complete pair)."""
        return self.course.decision(self, duration, series)

    def not_needed(self, block: Block) -> str | None:
        """Why a scheduled block need not run: the course's answer (:meth:`h3bench.course.course.Course.why_not`).

        None when it must run, or when that cannot be known yet. A
        candidate-only run's anchored blocks always run; a shard's round is
        its window.
        """
        if block.kind == "anchored" or self.schedule.shard is not None:
            return None
        return self.course.why_not(self, block.duration, None if block.kind == "controls" else block.candidate)

    @functools.cached_property
    def course(self) -> Course:
        """The campaign's course, made once for this store (it asks it at every block)."""
        return Course.of(self.spec, lossless=self.lossless_on)

    def pairs_run(self, duration: float, series: str) -> int:
        """The series' highest pair that ran at the duration, plus one (0 before any)."""
        return max((r.block.pair + 1 for r in self.series(duration, series)), default=0)

    def baseline_run(self, duration: float, series: str) -> int:
        """The control processes of the series' lossless test that ran: the judge's
        (:meth:`h3bench.course.schedule.Schedule.lossless_processes`)."""
        baseline, _ = self.schedule.lossless_processes(CandidateWorkload(series, duration))
        return sum(1 for b in baseline if (r := self.ran.get(b.id)) is not None and r.ok)

    def controls_run(self, duration: float) -> tuple[int, ...]:
        return tuple(sorted(r.block.position for r in self.ran.values()
                            if r.block.duration == duration and r.block.kind == "controls"))

    def halted(self, series: str) -> tuple[str, str] | None:
        stop = self.stopped(series)
        return None if stop is None else (str(stop.outcome), stop.reason)
