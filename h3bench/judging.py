"""Judging a campaign's outputs: matched pairs through every gate, the lossless envelope, LPIPS status.

Results travel as records (plain JSON, so xdist workers can send theirs to
the controller on their test reports) and are kept typed:
:class:`PairOutcome` for each matched pair, :class:`LosslessOutcome` for each
candidate and duration. A matched pair that fails a gate stops its candidate
(the stop rule of the campaign protocol).
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from h3bench import lossless, media, quality
from h3bench.errors import H3BenchError
from h3bench.outcome import Outcome
from h3bench.progress import Progress
from h3bench.quality import QualityReport, Status
from h3bench.records import Stop
from h3bench.runspec import RunSpec
from h3bench.schedule import CandidateWorkload, MatchedPair, OutputRef, Schedule

if TYPE_CHECKING:  # torch loads only when LPIPS is measured
    from h3bench.metrics.lpips import LpipsWeights

__all__ = ["Judge", "LosslessOutcome", "LpipsStatus", "PairOutcome"]

_LPIPS_HOW = ("Put alexnet-owt-7be5be79.pth (and alex.pth) in a directory and pass --lpips-dir DIR or set "
              "H3BENCH_LPIPS_DIR; they are hash-checked against the pins shipped with h3bench.")


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
    outcome: str  # EXACT, PASS, FAIL or INCONCLUSIVE
    reasons: tuple[str, ...]
    result: dict[str, Any]

    @property
    def as_outcome(self) -> Outcome:
        """EXACT is the strongest PASS."""
        return Outcome.PASS if self.outcome == "EXACT" else Outcome(self.outcome)

    @classmethod
    def from_record(cls, record: dict[str, Any]) -> LosslessOutcome:
        result = record["result"]
        return cls(record["id"], record["candidate"], float(record["duration"]), result["outcome"],
                   tuple(result["reasons"]), result)


class Judge:
    """Compares outputs, once each, and keeps every quality and lossless result of the campaign.

    ``locate`` gives an output's path (running its block first in a live
    campaign); ``available`` says whether an output can be had at all (a
    stored bundle has only what it holds); ``stop`` applies the stop rule of
    a failed gate to the candidate.
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
        self._new_records: list[dict[str, Any]] = []
        self._lpips: LpipsStatus | None = None  # authenticated once, on first use
        self._lpips_weights: LpipsWeights | None = None
        self.progress = Progress()  # a live campaign shows each comparison
        self._took: list[float] = []  # seconds per comparison, for the next one's ETA

    # -- LPIPS -----------------------------------------------------------------

    def lpips_status(self) -> LpipsStatus:
        """Authenticate the LPIPS weights once; the reason travels into every report."""
        if self._lpips is None:
            from h3bench.metrics.lpips import authenticate_weights

            required = self.spec.gates.lpips_required
            try:
                self._lpips_weights = authenticate_weights(self.lpips_dir)
                self._lpips = LpipsStatus(required, True, f"weights authenticated in {self._lpips_weights.directory}")
            except H3BenchError as exc:
                self._lpips = LpipsStatus(required, False, f"{exc} {_LPIPS_HOW}")
        return self._lpips

    def optional_checks(self) -> tuple[str, ...]:
        """Checks the spec allows to stay unmeasured: LPIPS when it is declared not required."""
        return () if self.spec.gates.lpips_required else ("lpips",)

    # -- matched pairs -----------------------------------------------------------

    def compare(self, pair: MatchedPair) -> QualityReport:
        if pair.id not in self._reports:
            report = self._compare_outputs(pair.baseline, pair.candidate)
            self._reports[pair.id] = report
            self._record({"kind": "quality", "id": pair.id, "candidate": pair.candidate.block.candidate,
                          "duration": pair.duration, "result": report.to_dict()})
        return self._reports[pair.id]

    def _compare_outputs(self, baseline: OutputRef, candidate: OutputRef) -> QualityReport:
        paths = self.locate(baseline), self.locate(candidate)
        return self.compare_files(paths, candidate.duration, f"{candidate.id} against {baseline.id}")

    def compare_files(self, paths: tuple[Path, Path], duration: float, label: str) -> QualityReport:
        """Every gate on a baseline and a candidate MP4 of ``duration`` seconds (also the held-out phase's)."""
        self.lpips_status()
        eta = statistics.median(self._took) if self._took else None
        with self.progress.step(f"quality {label}", eta_s=eta) as step:
            # Without authenticated weights, compare() tries again and carries the reason into the report.
            report = quality.compare(
                *paths,
                thresholds=self.spec.gates,
                expect_seconds=duration,
                lpips_weights=self._lpips_weights,
                lpips_dir=self.lpips_dir,
                lpips_device=self.lpips_device,
            )
        self._took.append(time.monotonic() - step.started)
        return report

    # -- lossless ------------------------------------------------------------------

    def lossless(self, case: CandidateWorkload) -> lossless.LosslessVerdict:
        """The candidate's deviations against the control envelope, with exact-equality diagnostics."""
        if case.id not in self._verdicts:
            usable = [(a, b) for a, b in self.schedule.control_pairs(case) if self.available(a) and self.available(b)]
            controls = [self._compare_outputs(a, b) for a, b in usable]
            processes = len({(a.block.id, b.block.id) for a, b in usable})
            pairs = [p for p in self.schedule.matched_pairs(case)
                     if self.available(p.baseline) and self.available(p.candidate)]
            candidates = [(self.compare(p), self._digests_equal(p.baseline, p.candidate)) for p in pairs]
            metrics = [m for m in lossless.DEVIATIONS if m not in self.optional_checks()]
            gates = self.spec.gates
            verdict = lossless.judge(candidates, controls, tolerance=gates.control_envelope_tolerance,
                                     min_controls=gates.min_control_pairs, independent_controls=processes,
                                     metrics=metrics)
            self._verdicts[case.id] = verdict
            # Exact-equality diagnostics for every pair, controls included (decoded frames and PCM hashed).
            bitwise = {f"control:{a.id}~{b.id}": self._digests_equal(a, b) for a, b in usable}
            bitwise.update({f"candidate:{p.id}": equal for p, (_, equal) in zip(pairs, candidates, strict=True)})
            self._record({"kind": "lossless", "id": case.id, "candidate": case.candidate, "duration": case.duration,
                          "result": {**verdict.to_dict(), "decoded_bitwise_equal": bitwise}})
        return self._verdicts[case.id]

    def digest(self, ref: OutputRef) -> media.DecodedDigest:
        path = self.locate(ref)
        if path.stem not in self.digests:  # outputs are named by their SHA-256
            self.digests[path.stem] = media.decoded_digest(path)
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
