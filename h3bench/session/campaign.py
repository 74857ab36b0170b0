"""What a pytest session or ``h3bench run`` holds: a campaign's results, and its runner where this process runs blocks.

:func:`start_campaign` checks everything that must hold before the first
server starts (the inputs against their pins, the host's evidence, whether
the design can reach its verdict, the disk) and makes the runner; an xdist
worker gets :func:`read_campaign`, which only reads the bundle that the
controller writes. Both give a :class:`Campaign`, so neither the plugin nor
the command line asks which one it has: a reader has no blocks to run, no
selection to make and no bundle to seal, and says so by doing nothing.
"""

from __future__ import annotations

import dataclasses
import uuid
from collections.abc import Callable, Iterable
from pathlib import Path

from h3bench.course.cases import Block, Case
from h3bench.course.preflight import preflight
from h3bench.course.schedule import Schedule
from h3bench.evidence import BundleReader, files
from h3bench.evidence.files import now
from h3bench.host.staging import stage_checkpoint
from h3bench.plan.estimate import bundle_bytes, cost_of
from h3bench.report.screen import campaign_summary
from h3bench.report.terminal import report_header
from h3bench.run.measure import Measure
from h3bench.run.pace import Pace
from h3bench.run.progress import Progress
from h3bench.run.records import BlockResult
from h3bench.run.resume import Resumed, resume_bundle
from h3bench.runspec import RunSpec, load_runspec
from h3bench.session.results import Results
from h3bench.session.runner import Runner
from h3bench.session.selection import require_runnable
from h3bench.session.settings import Settings
from h3bench.verdict.judge import Judge
from h3bench.verdict.verdicts import VerdictDocument

__all__ = ["Campaign", "read_campaign", "start_campaign"]


class Campaign:
    """One session's campaign: the results it reads, and the runner that makes them when this process runs blocks."""

    def __init__(self, results: Results, runner: Runner | None = None) -> None:
        self.results = results
        self.runner = runner

    @property
    def spec(self) -> RunSpec:
        return self.results.spec

    @property
    def settings(self) -> Settings:
        return self.results.settings

    @property
    def schedule(self) -> Schedule:
        return self.results.schedule

    @property
    def judge(self) -> Judge:
        """Compares outputs through every gate, and judges lossless (:mod:`h3bench.verdict.judge`)."""
        return self.results.judge

    @property
    def bundle(self) -> BundleReader:
        """The run's bundle: written by this process's runner, or read (an xdist worker)."""
        return self.runner.bundle if self.runner is not None else self.results.bundle

    @property
    def session(self) -> str | None:
        return self.runner.session if self.runner is not None else None

    @property
    def resumed(self) -> Resumed | None:
        return self.runner.resumed if self.runner is not None else None

    # -- what the campaign tests ask ----------------------------------------------------

    def run_block(self, block: Block, measure: Measure | None = None) -> BlockResult:
        """The block's result, run now (timed by ``measure``) if this process runs blocks and it has not run."""
        if self.runner is not None:
            return self.runner.run_block(block, measure)
        return self.results.ensure(block)

    def lifecycle(self, block: Block) -> BlockResult:
        """The block's result, failed or not (CandidateStopped if a stop rule skipped it)."""
        return self.results.lifecycle(block)

    # -- the session's course -------------------------------------------------------------

    def select(self, cases: Iterable[Case]) -> None:
        """Run only the blocks that these test cases read."""
        if self.runner is not None:
            self.runner.select(cases)

    def select_blocks(self, selects: Callable[[Block], bool]) -> None:
        """Run only the blocks that ``selects`` keeps (``h3bench run -m``)."""
        if self.runner is not None:
            self.runner.select_blocks(selects)

    def run_selected(self, progress: Callable[[str], None]) -> None:
        if self.runner is not None:
            self.runner.run_selected(progress)

    @property
    def unfinished(self) -> list[Block]:
        return self.runner.unfinished if self.runner is not None else []

    @property
    def wrote_anything(self) -> bool:
        return self.runner is not None and self.runner.wrote_anything

    def header(self) -> list[str]:
        """The report header: what is needed to repeat the run, and where its evidence goes."""
        where = f"{self.results.bundle_path}"
        if self.runner is not None and not self.runner.wrote_anything:
            where += " (created when the first block runs)"
        stored = self.results.stored_baseline
        lines = report_header(self.spec, arms=self.settings.arm, evidence=where,
                              baseline_evidence=stored.bundle_path if stored else None, blocks=self.schedule.blocks)
        return lines + (self.resumed.log_lines() if self.resumed else [])

    def finish(self, interrupted: str | None = None) -> VerdictDocument | None:
        """Seal this process's bundle with its verdict; None when this process wrote none."""
        return self.runner.finish(interrupted) if self.runner is not None else None

    @property
    def interrupted(self) -> str | None:
        return self.runner.interrupted if self.runner is not None else None

    @property
    def document(self) -> VerdictDocument | None:
        return self.runner.document if self.runner is not None else None

    def summary(self, *, verbose: bool = False) -> list[str]:
        """The verdict that finish() wrote, on one screen; ``verbose``: with every reason (empty before)."""
        if self.document is None:
            return []
        return campaign_summary(self.spec, self.document, bundle=self.bundle.path, verbose=verbose,
                                profiles=list(self.bundle.samples("profile")) if verbose else ())

    def anchor(self) -> str | None:
        """SHA-256 of the sealed bundle's final.json (None before it is sealed, or in a reader)."""
        return self.runner.anchor() if self.runner is not None else None

    def ending(self) -> list[str]:
        """How the bundle was left, after the summary: sealed as interrupted, or not sealed at all (and what then)."""
        runner = self.runner
        if runner is None:
            return []
        if runner.unsealed is not None:
            return [f"the bundle is NOT sealed: {runner.unsealed}",
                    f"free some space, then: pytest --resume {self.bundle.path} (or h3bench run --resume)"]
        if runner.interrupted:
            return [f"the bundle is sealed as INTERRUPTED: {runner.interrupted}"]
        return []


def start_campaign(settings: Settings, progress: Progress | None = None) -> Campaign:
    """Check what must hold before the first server starts, and make the live campaign.

    The inputs are hashed against their pins, the host's evidence is recorded
    and checked against the spec's pins (:mod:`h3bench.course.preflight`), a
    design that cannot reach its verdict is refused (or marked DIAGNOSTIC),
    and the evidence directory must have the space the blocks need.
    """
    assert settings.runspec is not None, "a live campaign needs a RunSpec"
    spec = load_runspec(settings.runspec)
    require_runnable(spec, settings)
    settings = settings.with_round(spec)
    inputs = spec.verify_inputs()
    found = preflight(spec, spec_file=settings.runspec, allow_unpinned=settings.allow_unpinned)
    if spec.staging is not None:  # after the identity is verified, before any server starts; in the manifest
        staged = stage_checkpoint(spec.model.path, spec.model.content_identity, spec.staging.mode,
                                  spec.staging.target)
        found = dataclasses.replace(found, host={**found.host, "staging": staged.to_dict()})
    if settings.baseline_evidence is None:  # a candidate-only run has its own anchored design
        found = found.with_design(spec, lossless_on=settings.lossless or spec.gates.lossless,
                                  allow_underpowered=settings.allow_underpowered)
    # Before any server starts: blocks whose evidence cannot be written would be lost.
    files.require_writable(settings.evidence_root.resolve() if settings.resume is None else settings.resume.parent,
                           bundle_bytes(spec, settings.arm, anchored=settings.baseline_evidence is not None))
    session = uuid.uuid4().hex
    resumed = resume_bundle(settings.resume, spec, session) if settings.resume is not None else None
    history = (settings.evidence_root,)
    pace = Pace(spec, progress or Progress(), estimate=lambda duration, arm: cost_of(spec, duration, arm, history))
    runner = Runner(spec, settings, inputs=inputs, preflight=found, session=session, started_at=now(), pace=pace,
                    resumed=resumed)
    if progress is not None:
        runner.results.judge.progress = progress
    if settings.baseline_evidence is not None:
        runner.results.attach_baseline(settings.baseline_evidence)
    return Campaign(runner.results, runner)


def read_campaign(settings: Settings, planned: Path, session: str) -> Campaign:
    """What an xdist worker sees: the controller's bundle (at ``planned``, run ``session``), read when first needed."""
    assert settings.runspec is not None
    spec = load_runspec(settings.runspec)
    results = Results(spec, settings.with_round(spec), bundle_path=planned, session=session)
    if settings.baseline_evidence is not None:
        results.attach_baseline(settings.baseline_evidence)
    return Campaign(results)
