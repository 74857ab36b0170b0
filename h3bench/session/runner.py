"""The live campaign's runner: the selected blocks, run in schedule order when first needed, and the bundle sealed.

- the schedule (:mod:`h3bench.course.schedule`) gives the blocks and the test cases;
- :meth:`Runner.select` keeps only the blocks that the selected tests read,
  so ``-k`` and ``-m`` decide what runs, with or without xdist;
- blocks run at most once per session, in schedule order, under the device
  lock (:func:`h3bench.run.block.run_block`). Whoever needs a block first runs
  it: normally the perf test, timed by pytest-benchmark; a lifecycle or
  quality test only when the perf tests were not selected;
- the bundle is created when the first block runs, at a path that is known
  from the start (the report header shows it), so a run that runs nothing,
  such as ``--collect-only``, writes nothing;
- every result goes to the bundle as it happens and to the session's
  :class:`~h3bench.session.results.Results`, which judges them;
- :meth:`Runner.finish` writes the quality results, runs the held-out phase,
  writes ``verdict.json`` (the :class:`~h3bench.verdict.verdicts.VerdictDocument`
  that every presentation reads) and seals the bundle as completed, or as
  interrupted with the reason;
- a full disk (:class:`~h3bench.errors.DiskFullError`) halts the runner at the
  first failed write: no later block starts, the verdict of what ran is
  still computed and summarised, and the bundle is sealed as interrupted
  when the seal fits, else left as it is for ``--resume``.

What must hold before the first server starts (the pins, the host, the
design, the disk) is checked by :func:`h3bench.session.campaign.start_campaign`,
which then makes the runner.
"""

from __future__ import annotations

import shutil
import tempfile
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from typing import Any

from h3bench.course.cases import Block, Case
from h3bench.course.preflight import DIAGNOSTIC, Preflight
from h3bench.course.schedule import Schedule
from h3bench.course.shards import ShardHost, ShardRun
from h3bench.errors import DiskFullError
from h3bench.evidence import Bundle
from h3bench.evidence.codec import from_json
from h3bench.evidence.layout import planned_path
from h3bench.evidence.manifest import ArmLaunch, Manifest
from h3bench.evidence.verify import final_sha256
from h3bench.host.environment import environment
from h3bench.host.inventory import host_identity
from h3bench.run.block import run_block
from h3bench.run.failures import interrupt_name
from h3bench.run.heldout import heldout_cases, run_heldout
from h3bench.run.measure import Measure, PlainMeasure, block_info
from h3bench.run.pace import Pace
from h3bench.run.profiling import profiled_blocks
from h3bench.run.records import BlockFailed, BlockResult, CandidateStopped
from h3bench.run.resume import Resumed
from h3bench.runspec import Arm, RunSpec, VllmArm
from h3bench.session.results import Results
from h3bench.session.revalidation import write_quality
from h3bench.session.settings import Settings
from h3bench.verdict.acceptance import acceptance, heldout_candidates
from h3bench.verdict.assemble import candidate_verdicts, document
from h3bench.verdict.device import device_time
from h3bench.verdict.heldout import judge_heldout
from h3bench.verdict.verdicts import HeldoutVerdict, VerdictDocument, duration_key

__all__ = ["Runner"]


def _launch_record(arm: Arm) -> ArmLaunch:
    """What the manifest says of an arm's launch: the built command and environment, and what checked them."""
    return ArmLaunch(tuple(arm.argv), arm.launch_env(), arm.checked_against if isinstance(arm, VllmArm) else None)


class Runner:
    """Runs one session's blocks into its bundle and its results, then seals the bundle with the verdict."""

    def __init__(self, spec: RunSpec, settings: Settings, *, inputs: Mapping[str, Path], preflight: Preflight,
                 session: str, started_at: str, pace: Pace, resumed: Resumed | None = None) -> None:
        self.spec = spec
        self.settings = settings
        self.inputs = inputs
        self.preflight = preflight
        self.session = session  # the run's own id, recorded in the manifest
        self.started_at = started_at
        self.pace = pace
        self.resumed = resumed  # what a resume found and stopped
        planned = planned_path(settings.evidence_root, spec.name, spec.spec_id, started_at)
        # A resume reads the finished blocks from its bundle, and runs the rest in the bundle's new segment.
        self._bundle: Bundle | None = resumed.bundle if resumed is not None else None
        self.results = Results(spec, settings, bundle_path=planned, supply=self.run_block, bundle=self._bundle)
        self._selected: set[str] | None = None  # block ids the session's tests read; None: every block
        self._scratch_dir: Path | None = None
        self._profiled = profiled_blocks(self.schedule.blocks) if spec.protocol.profile else set()
        self.interrupted: str | None = None  # why the session did not run to its end (set by finish)
        self.document: VerdictDocument | None = None  # what finish() wrote to verdict.json
        self.halted: DiskFullError | None = None  # the first write a full disk refused: nothing runs after it
        self.unsealed: str | None = None  # why finish() could not seal the bundle (it stays resumable)
        pace.status = self.status

    @property
    def schedule(self) -> Schedule:
        return self.results.schedule

    @property
    def bundle(self) -> Bundle:
        """The run's bundle, created when the first block runs."""
        if self._bundle is None:
            spec = self.spec
            self._bundle = Bundle.create(self.settings.evidence_root, Manifest.new(
                spec_id=spec.spec_id,
                spec=spec.model_dump(mode="json"),
                inputs={name: {"path": str(path), "sha256": getattr(spec.inputs, name).sha256}
                        for name, path in self.inputs.items()},
                source=spec.source.model_dump(mode="json") if spec.source else {"kind": "simulator"},
                model=spec.model.model_dump(mode="json"),
                started_at=self.started_at,
                session=self.session,
                run=self.preflight.run_kind(),
                host=self.preflight.host,
                shard=self._shard_record().get("shard"),
                arms={name: _launch_record(arm) for name, arm in spec.arms.items()},
                lpips_weights=self.results.judge.weights_record(),
                environment=environment(),
            ))
            self.results.attach(self._bundle)
        return self._bundle

    def _shard_record(self) -> dict[str, Any]:
        """A shard of a campaign over several hosts: which shard and round, and the host that ran it."""
        shard, window = self.schedule.shard, self.schedule.window
        if shard is None:
            return {}
        record = ShardRun(shard.index, shard.count, from_json(ShardHost, host_identity(), where="host"),
                          window.round if window else 1, window.sha256 if window and window.sha256 else None,
                          tuple(b.id for b in self.schedule.blocks))
        return {"shard": record.to_dict()}

    @property
    def device_lock(self) -> Path | None:
        """The host-wide lock around each block: only a spec with device checks takes it, never the simulator."""
        return self.settings.device_lock if self.spec.hardware.kind != "sim" else None

    @property
    def diagnostic(self) -> bool:
        return self.preflight.kind == DIAGNOSTIC

    @property
    def scratch(self) -> Path:
        """Where logs and outputs land before they are copied into the bundle; removed by finish()."""
        if self._scratch_dir is None:
            self._scratch_dir = Path(tempfile.mkdtemp(prefix="h3bench-"))
        return self._scratch_dir

    @property
    def wrote_anything(self) -> bool:
        return self._bundle is not None

    def status(self, block: Block) -> str:
        """Where the block's series stands (its latest look and interval) and the device time spent so far."""
        results = self.results
        parts = []
        found = results.decision(block.duration, block.candidate) if block.kind == "paired" else None
        if found is not None and found.look is not None and found.ratio is not None:
            parts.append(f"look {found.look}/{len(found.looks)}: {found.ratio:.3f} [{found.lower:.3f}, "
                         f"{found.upper:.3f}]")
        spent = sum(d.device_s for d in device_time(self.spec, self.schedule.blocks, results.ran).values())
        if spent:
            parts.append(f"{spent / 3600:.2f} device-h spent")
        return " · ".join(parts)

    # -- which blocks run ----------------------------------------------------------

    def select(self, cases: Iterable[Case]) -> None:
        """Run only the blocks that these test cases read (the session's selection)."""
        ids = {block.id for case in cases for block in self.schedule.blocks_of(case)}
        self.select_blocks(lambda block: block.id in ids)

    def select_blocks(self, selects: Callable[[Block], bool]) -> None:
        """Run only the blocks that ``selects`` keeps; the verdict then covers what they can judge."""
        self._selected = {block.id for block in self.schedule.blocks if selects(block)}
        chosen = [b for b in self.schedule.blocks if self._needed(b)]
        self.results.select(chosen)
        self.pace.expect(chosen)

    def _needed(self, block: Block) -> bool:
        return self._selected is None or block.id in self._selected

    @property
    def unfinished(self) -> list[Block]:
        """Selected blocks that neither ran nor were skipped by a stop rule."""
        return [b for b in self.schedule.blocks if self._needed(b) and self._to_run(b)]

    def _to_run(self, block: Block) -> bool:
        """Not run yet, its candidate not stopped, and not made unnecessary by a look."""
        results = self.results
        return (block.id not in results.ran and results.stopped(block.candidate) is None
                and results.not_needed(block) is None)

    # -- running blocks --------------------------------------------------------------

    def run_block(self, block: Block, measure: Measure | None = None) -> BlockResult:
        """Run one block once, timed by ``measure``; later calls give what it produced.

        Raises BlockFailed for a failed block and CandidateStopped for a block
        that a stop rule skipped.
        """
        results = self.results
        if self.halted is not None and block.id not in results.ran:
            raise DiskFullError(f"{block.id} not run: the campaign stopped at {self.halted}", path=self.halted.path)
        if block.id not in results.ran:
            self._run_earlier(block)
            stop = results.stopped(block.candidate)
            if stop is not None:
                raise CandidateStopped(f"candidate {block.candidate!r} was stopped: {stop.reason}")
            why = results.not_needed(block)
            if why is not None:
                self.pace.finished(block)  # the campaign's ETA no longer counts it
                raise CandidateStopped(f"{block.id}: {why}")
            measure = measure or PlainMeasure()
            try:
                result = run_block(self.spec, block, bundle=self.bundle, inputs=self.inputs, scratch=self.scratch,
                                   measure=measure, campaign_id=self.session, pace=self.pace,
                                   profile=block.id in self._profiled, device_lock=self.device_lock)
            except DiskFullError as exc:
                self.halted = exc
                raise
            self.pace.finished(block)
            results.take(result)
            measure.annotate(block_info(self.spec, result))
        return results.ensure(block)

    def _run_earlier(self, block: Block) -> None:
        """Blocks run in schedule order: every selected block before this one that has not run, runs first."""
        for earlier in self.schedule.blocks[: self.schedule.index(block)]:
            if self._needed(earlier) and self._to_run(earlier):
                try:
                    self.run_block(earlier)
                except BlockFailed:
                    pass

    def run_selected(self, progress: Callable[[str], None]) -> None:
        """Run every selected block, in order (the xdist controller and ``h3bench run`` do this first)."""
        announced: set[tuple[float, str]] = set()
        for block in self.schedule.blocks:
            if not self._needed(block) or block.id in self.results.ran or self.results.not_needed(block):
                continue
            progress(f"h3bench: block {block.id} ...")
            try:
                result = self.run_block(block)
                progress(f"h3bench: block {block.id}: median E2E {result.median_e2e_s:.3f} s")
            except BlockFailed as exc:
                assert exc.result.failure is not None
                progress(f"h3bench: block {block.id}: {exc.result.failure.headline}")
            except CandidateStopped as exc:
                progress(f"h3bench: block {block.id}: {exc}")
            except DiskFullError as exc:
                progress(f"h3bench: block {block.id}: stopped: {exc}; no later block runs")
                return
            key = (block.duration, block.candidate)
            found = self.results.decision(*key) if block.kind == "paired" else None
            if found is not None and found.stop and key not in announced:
                announced.add(key)
                progress(f"h3bench: {block.candidate} at {block.duration:g} s: {found.reason}")

    # -- the end -----------------------------------------------------------------------

    def anchor(self) -> str | None:
        """SHA-256 of the sealed bundle's final.json, or None before it is sealed (or when nothing ran)."""
        if self._bundle is None or not self._bundle.is_complete:
            return None
        return final_sha256(self._bundle.path)

    def _heldout(self) -> dict[str, dict[str, HeldoutVerdict]]:
        """Run and judge the held-out phase of every candidate the formal blocks did not reject."""
        spec, out = self.spec, {}
        cases = heldout_cases(spec)
        for index, candidate in enumerate(heldout_candidates(spec, candidate_verdicts(self.results))):
            ran = run_heldout(spec, candidate, index * len(spec.workload.durations), cases, bundle=self.bundle,
                              inputs=self.inputs, scratch=self.scratch, campaign_id=self.session, pace=self.pace,
                              device_lock=self.device_lock)
            out[candidate] = {duration_key(d): judge_heldout(self.results.judge, candidate, d, blocks, cases,
                                                             self.bundle.output_path)
                              for d, blocks in ran.items()}
        return out

    def finish(self, interrupted: str | None = None) -> VerdictDocument | None:
        """Write the quality results, run the held-out phase, write verdict.json and seal the bundle.

        The held-out phase runs for the candidates that passed, after an
        uninterrupted session of every arm and workload (a selection accepts
        nothing, so it needs none). Nothing is written if no block ran.
        """
        if interrupted is None and self.halted is not None:
            interrupted = f"stopped: {self.halted}"
        self.interrupted = interrupted
        if self._bundle is None:
            self._remove_scratch()
            return None
        try:
            write_quality(self.results.judge, self.bundle)
        except DiskFullError as exc:
            self.halted = self.halted or exc
            return self._unsealed(interrupted or f"stopped: {exc}", exc)
        heldout: dict[str, dict[str, HeldoutVerdict]] = {}
        full = self.settings.arm == "all" and not self.results.not_selected
        if interrupted is None and self.spec.heldout is not None and full:
            try:
                heldout = self._heldout()
            except BaseException as exc:  # Ctrl-C or a signal during the held-out phase: seal what was written
                interrupted = f"interrupted by {interrupt_name(exc)} during the held-out phase"
        self._remove_scratch()
        self.interrupted = interrupted
        verdicts = candidate_verdicts(self.results)
        accepted = acceptance(self.spec, verdicts, heldout, diagnostic=self.diagnostic,
                              not_selected=self.results.not_selected, shard=self.settings.shard)
        self.document = document(self.results, interrupted=interrupted, heldout=heldout, accepted=accepted,
                                 verdicts=verdicts)
        try:
            self.bundle.write_verdict(self.document.to_dict())
            self.bundle.close(interrupted=interrupted)
        except DiskFullError as exc:
            self.unsealed = f"the bundle could not be sealed ({exc}); it is left as it is for --resume"
        return self.document

    def _unsealed(self, interrupted: str, exc: DiskFullError) -> VerdictDocument:
        """The verdict of what ran, for the summary, when not even the quality results fit on the disk."""
        self._remove_scratch()
        self.interrupted = interrupted
        self.unsealed = f"the bundle could not be sealed ({exc}); it is left as it is for --resume"
        verdicts = candidate_verdicts(self.results)
        accepted = acceptance(self.spec, verdicts, {}, diagnostic=self.diagnostic,
                              not_selected=self.results.not_selected, shard=self.settings.shard)
        self.document = document(self.results, interrupted=interrupted, verdicts=verdicts, accepted=accepted)
        return self.document

    def _remove_scratch(self) -> None:
        if self._scratch_dir is not None:
            shutil.rmtree(self._scratch_dir, ignore_errors=True)
            self._scratch_dir = None
