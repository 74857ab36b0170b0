"""Records of what ran: one :class:`Sample` per request, one :class:`BlockResult` per server process.

Both are written to the evidence bundle as they happen (``samples.jsonl``,
``lifecycle.jsonl``) and read back from it by :func:`load_results`, so a
stored bundle, an xdist worker and ``h3bench validate`` see exactly what the
run saw.
"""

from __future__ import annotations

import enum
import statistics
from collections.abc import Sequence
from dataclasses import dataclass, field, fields
from typing import TYPE_CHECKING, Any

from h3bench.course.cases import Block
from h3bench.errors import H3BenchError
from h3bench.evidence import LIFECYCLE, SAMPLES, SERVERS, BundleReader
from h3bench.evidence.codec import FLAT, from_json, to_json
from h3bench.outcome import Outcome
from h3bench.run.contract import ServerContract
from h3bench.server.record import ExitCheck, ServerRecord
from h3bench.server.startup import StartupPhases
from h3bench.stats.blockstat import BlockBudget
from h3bench.stats.sequential import SeriesBlock

if TYPE_CHECKING:
    from h3bench.run.phases import RequestPhases
    from h3bench.run.server_metrics import RequestMetrics

__all__ = [
    "BlockFailed",
    "BlockResult",
    "CandidateStopped",
    "ExitCheck",
    "Failure",
    "FailureKind",
    "Lifecycle",
    "Sample",
    "Stop",
    "finished_attempts",
    "headline",
    "incomplete_attempts",
    "load_results",
    "series_blocks",
]


@dataclass(frozen=True)
class Sample:
    """One request of one block, as recorded in samples.jsonl."""

    block_id: str
    kind: str  # "warmup", "measured", "audit" or "profile"
    index: int
    seed: int
    ok: bool
    e2e_s: float | None = None
    request_id: str | None = None
    inference_time_s: float | None = None
    stage_durations: dict[str, float] = field(default_factory=dict)
    peak_memory_mb: float | None = None
    output_sha256: str | None = None
    error: str | None = None
    phase: str = "formal"  # "formal", "heldout" or "profile"; only formal requests enter statistics
    # What the server's /metrics gained over this request (RequestMetrics.to_dict), and the scrapes it came from
    # ({"before": relpath, "after": relpath}); None in bundles written before they were recorded.
    server_metrics: dict[str, Any] | None = None
    scrapes: dict[str, str | None] | None = None
    phases: dict[str, float | None] | None = None  # the client's split of E2E (RequestPhases.to_dict)

    def to_dict(self) -> dict[str, Any]:
        return dict(self.__dict__)

    @property
    def metrics(self) -> RequestMetrics | None:
        """The request's /metrics delta, typed; None when the sample has none."""
        from h3bench.run.server_metrics import RequestMetrics  # httpx stays out of the plugin's imports

        return RequestMetrics.from_dict(self.server_metrics) if self.server_metrics else None

    @property
    def request_phases(self) -> RequestPhases | None:
        from h3bench.run.phases import RequestPhases

        return RequestPhases.from_dict(self.phases) if self.phases else None

    @classmethod
    def from_record(cls, record: dict[str, Any]) -> Sample:
        """A sample from its samples.jsonl line (which also carries the block's arm and position)."""
        return cls(**{k: v for k, v in record.items() if k in _SAMPLE_FIELDS})


_SAMPLE_FIELDS = frozenset(f.name for f in fields(Sample))


class FailureKind(str, enum.Enum):
    """What ended a block; the value opens the failure's text, as the summary and the bundle show it."""

    START = "server did not start"
    REQUEST = "request failed"
    CLEANUP = "incomplete process cleanup"
    SHUTDOWN = "shutdown beyond the shared budget"
    INTERFERENCE = "resource interference"
    ATTENTION = "attention backend mismatch"
    AUDIT = "anti-shortcut audit"
    INTERRUPTED = "interrupted"
    ERROR = "error"

    def __str__(self) -> str:
        return self.value


@dataclass(frozen=True)
class Failure:
    """Why a block failed: its kind, the text with its context (log tail, cleanup problems), and the outcome it makes.

    ``outcome`` is FAIL for the candidate's own failures and INCONCLUSIVE when
    the comparison itself is invalid (a broken baseline block, interference,
    an interruption).
    """

    kind: FailureKind
    text: str
    outcome: Outcome = Outcome.FAIL

    def __str__(self) -> str:
        return self.text

    @property
    def headline(self) -> str:
        return headline(self.text)


@dataclass(frozen=True)
class Lifecycle:
    """One line of ``lifecycle.jsonl``: one block's server process from launch to proof of exit, and how it ended.

    :func:`~h3bench.run.block.run_block` writes it and every reader reads it
    back through :mod:`h3bench.evidence.codec`, so both see one type. The
    server's own fields (:class:`~h3bench.server.record.ServerRecord`) stand
    at the line's top level; a line written by an older version, or by a
    test, may lack any field after ``position``.
    """

    block: str
    arm: str
    duration: float
    position: int
    server: ServerRecord = field(default_factory=ServerRecord, metadata=FLAT)
    shutdown_budget_s: float | None = None
    exit: ExitCheck = field(default_factory=ExitCheck)
    log_relpath: str = ""
    attention_backend: dict[str, Any] = field(default_factory=dict)
    failure: str | None = None  # what ended the block, scrubbed, with its context; None: it did not fail
    failure_kind: FailureKind | None = None  # None in bundles written before the kind was recorded
    failure_outcome: Outcome = Outcome.FAIL  # what a failure of this block makes (recorded for every block)
    interrupted: str | None = None  # the signal or exception that interrupted the block
    contract: ServerContract | None = None  # what the server said it accepts (h3bench.run.contract); None: older

    # What the campaign's own tests read (tests_lifecycle/): the server's timings and stop, by their names.
    @property
    def startup_s(self) -> float | None:
        """Launch → first 200 from /health."""
        return self.server.startup_s

    @property
    def startup_phases(self) -> StartupPhases | None:
        """The start-up by phase, from the server's log (None in lines written before phases were recorded)."""
        return self.server.startup_phases

    @property
    def warmup_s(self) -> float | None:
        return self.server.warmup_s

    @property
    def shutdown_s(self) -> float | None:
        """SIGTERM → no recorded process still running."""
        return self.server.shutdown_s

    @property
    def graceful(self) -> bool | None:
        """False when SIGKILL was needed."""
        return self.server.graceful

    @property
    def exit_code(self) -> int | None:
        return self.server.exit_code

    @property
    def recorded_failure(self) -> Failure | None:
        """The failure this line records (an older line without ``failure_kind`` is read by its text)."""
        if not self.failure:
            return None
        kind = self.failure_kind
        if kind is None:
            kind = next((k for k in FailureKind if self.failure.startswith(k.value)), FailureKind.ERROR)
        return Failure(kind, self.failure, self.failure_outcome)

    def to_record(self) -> dict[str, Any]:
        """The line as JSON types, for ``lifecycle.jsonl``."""
        record: dict[str, Any] = to_json(self)
        return record

    @classmethod
    def from_record(cls, record: dict[str, Any]) -> Lifecycle:
        return from_json(cls, record, where=f"lifecycle of {record.get('block', '?')}")


@dataclass(frozen=True)
class BlockResult:
    """One block's server process: its samples, its lifecycle record and, if it failed, why."""

    block: Block
    server_pid: int | None
    samples: tuple[Sample, ...]
    lifecycle: Lifecycle
    failure: Failure | None

    @property
    def log_relpath(self) -> str:
        return self.lifecycle.log_relpath

    @property
    def warmups(self) -> tuple[Sample, ...]:
        return tuple(s for s in self.samples if s.kind == "warmup")

    @property
    def measured(self) -> tuple[Sample, ...]:
        """The formal measured requests: never a held-out or profiled one."""
        return tuple(s for s in self.samples if s.kind == "measured" and s.phase == "formal")

    @property
    def latencies(self) -> tuple[float, ...]:
        """E2E seconds of the measured requests that succeeded."""
        return tuple(s.e2e_s for s in self.measured if s.ok and s.e2e_s is not None)

    @property
    def median_e2e_s(self) -> float | None:
        return statistics.median(self.latencies) if self.latencies else None

    @property
    def ok(self) -> bool:
        return self.failure is None


@dataclass(frozen=True)
class Stop:
    """Why a candidate stopped, and what that makes its verdict."""

    reason: str
    outcome: Outcome  # FAIL for the candidate's own failures, INCONCLUSIVE when the comparison is invalid


class BlockFailed(H3BenchError):
    """A block whose server or requests failed; its evidence is already written."""

    def __init__(self, result: BlockResult) -> None:
        super().__init__(f"{result.block.id}: {result.failure}")
        self.result = result


class CandidateStopped(H3BenchError):
    """A block of a candidate that a stop rule has already stopped; the plugin skips it."""


def _finished(bundle: BundleReader) -> dict[str, tuple[str, dict[str, Any]]]:
    """Per block, the segment and lifecycle record of its last attempt that was not interrupted."""
    return {event["block"]: (segment, event) for segment, event in bundle.by_segment(LIFECYCLE)
            if not event.get("interrupted")}


def finished_attempts(bundle: BundleReader) -> dict[str, tuple[str, dict[str, Any]]]:
    """Per block id, the segment and lifecycle record of its last finished attempt (what :func:`load_results` counts)."""
    return _finished(bundle)


def load_results(bundle: BundleReader, blocks: tuple[Block, ...]) -> dict[str, BlockResult]:
    """The results of those ``blocks`` that the bundle holds a finished attempt of.

    A block that ran more than once (an interrupted attempt, then a resume)
    counts by its last finished attempt, with the samples of that attempt's
    segment; the samples of other attempts stay in the bundle, unused
    (:func:`incomplete_attempts` names them).
    """
    samples: dict[tuple[str, str], list[Sample]] = {}
    for segment, record in bundle.by_segment(SAMPLES):
        samples.setdefault((segment, record["block_id"]), []).append(Sample.from_record(record))
    finished = _finished(bundle)
    results = {}
    for block in blocks:
        if block.id in finished:
            segment, event = finished[block.id]
            life = Lifecycle.from_record(event)
            results[block.id] = BlockResult(block, event.get("pid"), tuple(samples.get((segment, block.id), ())),
                                             life, life.recorded_failure)
    return results


def incomplete_attempts(bundle: BundleReader) -> list[dict[str, Any]]:
    """Every started attempt of a block that did not finish: its segment, block, server and sample count."""
    finished = {(segment, block) for block, (segment, _) in _finished(bundle).items()}
    counts: dict[tuple[str, str], int] = {}
    for segment, record in bundle.by_segment(SAMPLES):
        counts[(segment, record["block_id"])] = counts.get((segment, record["block_id"]), 0) + 1
    attempts = []
    for segment, server in bundle.by_segment(SERVERS):
        key = (segment, server["block"])
        if key not in finished:
            attempts.append({"segment": segment, "block": server["block"], "pid": server.get("pid"),
                             "port": server.get("port"), "samples": counts.get(key, 0)})
    return attempts


def series_blocks(results: Sequence[BlockResult], budget: BlockBudget) -> list[SeriesBlock]:
    """The series' blocks in order, up to the first one that did not finish with every timed request.

    A failed block stops its candidate (a stop rule), so what follows it never runs.
    """
    blocks = []
    for result in results:
        measured = [s.e2e_s for s in result.measured if s.ok and s.e2e_s is not None]
        audit = [s.e2e_s for s in result.samples if s.kind == "audit" and s.phase == "formal" and s.ok]
        if not result.ok or len(measured) != budget.measured or (budget.audit and not audit):
            break
        blocks.append(SeriesBlock(result.block.letter, tuple(measured), audit[0] if audit else None))
    return blocks


def headline(failure: str) -> str:
    """First line of a failure, plus the last error line of the log tail that follows (it names the cause)."""
    lines = [line.strip() for line in failure.splitlines() if line.strip()]
    errors = [line for line in lines[1:] if "error" in line.lower() or "failed" in line.lower()]
    return f"{lines[0].rstrip(':. ')} … {errors[-1]}" if errors else lines[0]
