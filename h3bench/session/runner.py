"""The session's campaign: the RunSpec's blocks, run when first needed, and their evidence.

This is the facade that the pytest plugin and the CLI talk to. It is a
:class:`~h3bench.session.results.Review` of its own bundle that runs what is missing:

- the schedule (:mod:`h3bench.runspec.schedule`) gives the blocks and the test cases;
- :meth:`Campaign.select` keeps only the blocks that the selected tests read,
  so ``-k`` and ``-m`` decide what runs, with or without xdist;
- blocks run at most once per session, in schedule order, under the device
  lock (:func:`h3bench.run.block.run_block`). Whoever needs a block first runs
  it: normally the perf test, timed by pytest-benchmark; a lifecycle or
  quality test only when the perf tests were not selected;
- the bundle is created when the first block runs, at a path that is known
  from the start (the report header shows it), so a run that runs nothing,
  such as ``--collect-only``, writes nothing;
- :meth:`Campaign.finish` writes the quality results and the verdict, then
  seals the bundle as completed, or as interrupted with the reason.
"""

from __future__ import annotations

import shutil
import tempfile
import uuid
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

from h3bench import __version__
from h3bench.evidence import Bundle, files
from h3bench.evidence.files import now
from h3bench.evidence.verify import final_sha256
from h3bench.plan.estimate import bundle_bytes
from h3bench.plan.preflight import DIAGNOSTIC, preflight
from h3bench.report.terminal import extra_info, report_header
from h3bench.run.block import interrupt_name, run_block
from h3bench.run.heldout import run_heldout
from h3bench.run.measure import Measure, PlainMeasure
from h3bench.run.pace import Pace
from h3bench.run.profiling import profiled_blocks
from h3bench.run.progress import Progress
from h3bench.run.records import BlockFailed, BlockResult, CandidateStopped, headline
from h3bench.run.resume import Resumed, resume_bundle
from h3bench.runspec import Arm, RunSpec, VllmArm, load_runspec
from h3bench.runspec.schedule import Block, Case
from h3bench.session.results import Review
from h3bench.session.settings import Settings
from h3bench.verdict.acceptance import DIAGNOSTIC_VERDICT, acceptance, heldout_candidates

__all__ = ["Campaign"]


def _launch_record(arm: Arm) -> dict[str, Any]:
    """What the manifest says of an arm's launch: the built command and environment, and what checked them."""
    record: dict[str, Any] = {"argv": list(arm.argv), "env": arm.launch_env()}
    if isinstance(arm, VllmArm):
        record["rules_checked_against"] = arm.checked_against
    return record


class Campaign(Review):
    """The live campaign of one session: its spec, schedule, bundle and what each block produced."""

    def __init__(self, spec: RunSpec, settings: Settings) -> None:
        self.inputs = spec.verify_inputs()
        # Pins and the host's own evidence, checked before any server starts (h3bench.plan.preflight).
        self.preflight = preflight(spec, spec_file=settings.runspec, allow_unpinned=settings.allow_unpinned)
        if settings.baseline_evidence is None:  # a candidate-only run has its own anchored design
            self.preflight = self.preflight.with_design(spec, lossless_on=settings.lossless or spec.gates.lossless,
                                                        allow_underpowered=settings.allow_underpowered)
        # Before any server starts: blocks whose evidence cannot be written would be lost.
        files.require_writable(settings.evidence_root.resolve() if settings.resume is None else settings.resume.parent,
                               bundle_bytes(spec, settings.arm, anchored=settings.baseline_evidence is not None))
        self.session = uuid.uuid4().hex  # the run's own id, recorded in the manifest
        self.started_at = now()
        planned = Bundle.planned_path(settings.evidence_root, spec.name, spec.spec_id, self.started_at)
        super().__init__(spec, settings, bundle_path=planned)
        self._results = {}  # a live campaign loads nothing: its blocks run here
        self._selected: set[str] | None = None  # block ids the session's tests read; None: every block
        self._scratch_dir: Path | None = None
        self.interrupted: str | None = None  # why the session did not run to its end (set by finish)
        self.resumed: Resumed | None = None  # what a resume found and stopped
        self.pace = Pace(spec, Progress(), (settings.evidence_root,))
        self._profiled = profiled_blocks(self.schedule.blocks) if spec.protocol.profile else set()
        self.heldout: dict[str, Any] | None = None  # the held-out phase's results, once finish() ran it
        self.accepted: dict[str, Any] | None = None

    def show_progress(self, progress: Progress) -> None:
        """Show every long wait (server starts, requests, quality comparisons) on ``progress``."""
        self.pace.progress = self.judge.progress = progress

    @classmethod
    def from_settings(cls, settings: Settings) -> Campaign:
        assert settings.runspec is not None, "a live campaign needs a RunSpec"
        campaign = cls(load_runspec(settings.runspec), settings)
        if settings.baseline_evidence is not None:
            campaign.attach_baseline(settings.baseline_evidence)
        if settings.resume is not None:
            campaign._resume(settings.resume)
        return campaign

    def _resume(self, path: Path) -> None:
        """Continue an interrupted bundle: its finished blocks count, the rest run again in a new segment."""
        self.resumed = resume_bundle(path, self.spec, self.session)
        self._bundle, self._bundle_path = self.resumed.bundle, self.resumed.bundle.path
        self._results = None  # the finished blocks are read from the bundle

    @property
    def bundle(self) -> Bundle:
        """The run's bundle, created when the first block runs."""
        if self._bundle is None:
            spec = self.spec
            self._bundle = Bundle.create(
                self.settings.evidence_root,
                spec_id=spec.spec_id,
                spec=spec.model_dump(mode="json"),
                inputs={name: {"path": str(path), "sha256": getattr(spec.inputs, name).sha256}
                        for name, path in self.inputs.items()},
                source=spec.source.model_dump(mode="json") if spec.source else {"kind": "simulator"},
                model=spec.model.model_dump(mode="json"),
                started_at=self.started_at,
                session=self.session,
                extra=self.preflight.manifest(),
                arms={name: _launch_record(arm) for name, arm in spec.arms.items()},
                lpips_weights=self.judge.weights_record(),
            )
        return self._bundle

    @property
    def diagnostic(self) -> bool:
        return self.preflight.kind == DIAGNOSTIC

    def research_results(self) -> tuple[dict[str, Any] | None, dict[str, Any] | None]:
        return self.heldout, self.accepted

    @property
    def scratch(self) -> Path:
        """Where logs and outputs land before they are copied into the bundle; removed by finish()."""
        if self._scratch_dir is None:
            self._scratch_dir = Path(tempfile.mkdtemp(prefix="h3bench-"))
        return self._scratch_dir

    @property
    def wrote_anything(self) -> bool:
        return self._bundle is not None

    def report_header(self) -> list[str]:
        where = f"{self.bundle_path}" + ("" if self._bundle is not None else " (created when the first block runs)")
        return report_header(self, self.settings.arm, where)

    # -- which blocks run ----------------------------------------------------------

    def select(self, cases: Iterable[Case]) -> None:
        """Run only the blocks that these test cases read (the session's selection)."""
        self._selected = {block.id for case in cases for block in self.schedule.blocks_of(case)}
        self.pace.plan([b for b in self.schedule.blocks if self._needed(b)])

    def _needed(self, block: Block) -> bool:
        return self._selected is None or block.id in self._selected

    @property
    def unfinished(self) -> list[Block]:
        """Selected blocks that neither ran nor were skipped by a stop rule."""
        return [b for b in self.schedule.blocks
                if self._needed(b) and b.id not in self.results and self.stopped(b.candidate) is None]

    # -- running blocks --------------------------------------------------------------

    def run_block(self, block: Block, measure: Measure | None = None) -> BlockResult:
        """Run one block once, timed by ``measure``; later calls give what it produced.

        Raises BlockFailed for a failed block and CandidateStopped for a block
        that a stop rule skipped.
        """
        if block.id not in self.results:
            self._run_earlier(block)
            stop = self.stopped(block.candidate)
            if stop is not None:
                raise CandidateStopped(f"candidate {block.candidate!r} was stopped: {stop.reason}")
            measure = measure or PlainMeasure()
            result = run_block(self.spec, block, bundle=self.bundle, inputs=self.inputs, scratch=self.scratch,
                               measure=measure, campaign_id=self.session, pace=self.pace,
                               profile=block.id in self._profiled)
            self.pace.finished(block)
            self.take(result)
            measure.annotate(extra_info(self.spec, result))
        return super().ensure(block)

    def ensure(self, block: Block) -> BlockResult:
        return self.run_block(block)

    def _run_earlier(self, block: Block) -> None:
        """Blocks run in schedule order: every selected block before this one that has not run, runs first."""
        for earlier in self.schedule.blocks[: self.schedule.index(block)]:
            if self._needed(earlier) and earlier.id not in self.results and self.stopped(earlier.candidate) is None:
                try:
                    self.run_block(earlier)
                except BlockFailed:
                    pass

    def run_selected(self, progress: Callable[[str], None]) -> None:
        """Run every selected block, in order (the xdist controller does this before any test)."""
        for block in self.schedule.blocks:
            if not self._needed(block) or block.id in self.results:
                continue
            progress(f"h3bench: block {block.id} ...")
            try:
                result = self.run_block(block)
                progress(f"h3bench: block {block.id}: median E2E {result.median_e2e_s:.3f} s")
            except (BlockFailed, CandidateStopped) as exc:
                progress(f"h3bench: block {block.id}: {headline(str(exc))}")

    # -- the end -----------------------------------------------------------------------

    def anchor(self) -> str | None:
        """SHA-256 of the sealed bundle's final.json, or None before it is sealed (or when nothing ran)."""
        if self._bundle is None or not self._bundle.is_complete:
            return None
        return final_sha256(self._bundle.path)

    def finish(self, interrupted: str | None = None) -> None:
        """Write the quality results, run the held-out phase, write verdict.json and seal the bundle.

        The held-out phase (:mod:`h3bench.run.heldout`) runs for the candidates that
        passed, after an uninterrupted session of every arm; final.json gets
        its results and the acceptance (:func:`h3bench.verdict.acceptance.acceptance`).
        Nothing happens if no block ran.
        """
        if self._bundle is None:
            self._remove_scratch()
            self.interrupted = interrupted
            return
        self.write_quality()
        self.heldout = {}
        if interrupted is None and self.spec.heldout is not None and self.settings.arm == "all":
            try:
                self.heldout = run_heldout(self, heldout_candidates(self))
            except BaseException as exc:  # Ctrl-C or a signal during the held-out phase: seal what was written
                interrupted = f"interrupted by {interrupt_name(exc)} during the held-out phase"
        self._remove_scratch()
        self.interrupted = interrupted
        self.accepted = acceptance(self, self.heldout, diagnostic=self.diagnostic)
        self.bundle.write_verdict({"spec_id": self.spec.spec_id, "h3bench": __version__,
                                   "interrupted": interrupted, "run": self.preflight.kind,
                                   **({"verdict": DIAGNOSTIC_VERDICT} if self.diagnostic else {}),
                                   "candidates": {c: v.to_dict() for c, v in self.verdicts().items()}})
        self.bundle.close(interrupted=interrupted, results={"heldout": self.heldout, "accepted": self.accepted})

    def _remove_scratch(self) -> None:
        if self._scratch_dir is not None:
            shutil.rmtree(self._scratch_dir, ignore_errors=True)
            self._scratch_dir = None
