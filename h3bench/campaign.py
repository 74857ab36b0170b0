"""The campaign: the RunSpec's schedule of AB/BA blocks, run and recorded.

One block is one fresh server process of one arm at one duration::

    start → ready → warmup request(s) → k measured requests → audit request
          → stop (shared budget) → verify every worker exited → evidence

Blocks run at most once per session, in schedule order, under the device
lock. Whoever needs a block first runs it: normally the perf test, through
pytest-benchmark; a lifecycle or quality test only when perf tests were not
selected. Everything a block produces goes into the evidence bundle as it
happens, so a failure later never loses what was already measured.

Stop rules (REFERENCE §8): a failed request, a failed quality gate,
resource interference, an incomplete cleanup (a shutdown beyond the shared
budget included) or a failed anti-shortcut audit stops the candidate; the
rest of its series is skipped with the reason, and the verdict says why
(FAIL for the candidate's own failures, INCONCLUSIVE when the comparison
itself is invalid: a broken baseline or interference).
"""

from __future__ import annotations

import dataclasses
import itertools
import json
import os
import shutil
import statistics
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import TYPE_CHECKING, Any

from h3bench import __version__, lossless, media, quality, stats
from h3bench import quality as gates
from h3bench.client import GenerationRequest, GenerationResult, Reference, VideoClient
from h3bench.h3 import TOP_LEVEL_STAGES, mux_and_transfer_s
from h3bench.devices import DEFAULT_LOCK_PATH, DeviceLock, NpuSmiCheck
from h3bench.errors import (
    CleanupError,
    EvidenceError,
    H3BenchError,
    InterferenceError,
    RequestError,
    ServerStartError,
    UsageError,
)
from h3bench.evidence import Bundle
from h3bench.outcome import Outcome
from h3bench.runspec import RunSpec, load_runspec, parse_runspec, require_same_spec
from h3bench.ports import find_free_port
from h3bench.server import ExitReport, ServerProcess
from h3bench.sim import PROFILE_ENV as SIM_PROFILE_ENV

if TYPE_CHECKING:  # torch loads only when LPIPS is measured
    from h3bench.metrics.lpips import LpipsWeights

__all__ = ["Block", "BlockFailed", "BlockResult", "Campaign", "CandidateStopped", "MatchedPair", "OutputRef", "Sample", "Settings", "plan"]

HOST = "127.0.0.1"
# Perf blocks on one host never overlap: every campaign takes this file lock (its path can be moved).
DEVICE_LOCK_ENV = "H3BENCH_DEVICE_LOCK"
AUDIT_SLACK_S = 0.25


@dataclass(frozen=True)
class Settings:
    """The session's options, resolved once (by the pytest plugin or the CLI)."""

    runspec: Path | None
    arm: str = "all"
    evidence_root: Path = Path("h3bench-evidence")
    baseline_evidence: Path | None = None
    lossless: bool = False
    lpips_dir: Path | None = None
    lpips_device: str = "cpu"

    @classmethod
    def for_bundle(cls, bundle: Path, *, lossless: bool, lpips_dir: str | None, lpips_device: str) -> Settings:
        """Settings to re-validate a stored bundle: its own spec, every arm."""
        lpips = lpips_dir or os.environ.get("H3BENCH_LPIPS_DIR")
        return cls(None, "all", bundle.parent, None, lossless, Path(lpips) if lpips else None, lpips_device)


@dataclass(frozen=True)
class Block:
    """One server process of one arm, at one position of the AB/BA order."""

    duration: float
    candidate: str  # the candidate this block's series compares with the baseline
    arm: str  # "baseline" or the candidate's name
    position: int  # 1-based position in the order string
    letter: str  # "A" (baseline) or "B" (candidate)

    @property
    def pair(self) -> int:
        """Adjacent blocks form AB/BA pairs: positions 1-2 are pair 0, 3-4 pair 1, ..."""
        return (self.position - 1) // 2

    @property
    def id(self) -> str:
        return f"{self.duration:g}s-{self.candidate}-{self.position}{self.letter}-{self.arm}"


def plan(spec: RunSpec, arms: str = "all") -> tuple[Block, ...]:
    """Per duration, per candidate, the blocks in the spec's order; ``arms`` filters them."""
    blocks = []
    for duration in spec.workload.durations:
        for candidate in spec.candidates:
            for position, letter in enumerate(spec.protocol.order, start=1):
                arm = "baseline" if letter == "A" else candidate
                if arms == "all" or (arms == "baseline") == (arm == "baseline"):
                    blocks.append(Block(duration, candidate, arm, position, letter))
    return tuple(blocks)


@dataclass(frozen=True)
class Sample:
    """One request of one block, as recorded in samples.jsonl."""

    block_id: str
    kind: str  # "warmup", "measured" or "audit"
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

    def to_dict(self) -> dict[str, Any]:
        return dict(self.__dict__)


@dataclass(frozen=True)
class BlockResult:
    block: Block
    server_pid: int | None
    samples: tuple[Sample, ...]
    lifecycle: dict[str, Any]
    log_relpath: str
    failure: str | None
    failure_outcome: Outcome = Outcome.FAIL

    @property
    def warmups(self) -> tuple[Sample, ...]:
        return tuple(s for s in self.samples if s.kind == "warmup")

    @property
    def measured(self) -> tuple[Sample, ...]:
        return tuple(s for s in self.samples if s.kind == "measured")

    @property
    def median_e2e_s(self) -> float | None:
        values = [s.e2e_s for s in self.measured if s.ok and s.e2e_s is not None]
        return statistics.median(values) if values else None


@dataclass(frozen=True)
class ArmWorkload:
    """One arm at one duration: the unit of the lifecycle tests."""

    arm: str
    duration: float

    @property
    def id(self) -> str:
        return f"{self.duration:g}s-{self.arm}"


@dataclass(frozen=True)
class CandidateWorkload:
    """One candidate at one duration: the unit of the lossless judgement."""

    candidate: str
    duration: float

    @property
    def id(self) -> str:
        return f"{self.duration:g}s-{self.candidate}"


@dataclass(frozen=True)
class OutputRef:
    """The output of one measured request of one block."""

    block: Block
    index: int

    @property
    def duration(self) -> float:
        return self.block.duration

    @property
    def id(self) -> str:
        return f"{self.block.id}-r{self.index}"


@dataclass(frozen=True)
class MatchedPair:
    """A candidate output and its baseline output: same inputs and seed, paired blocks."""

    baseline: OutputRef
    candidate: OutputRef

    @property
    def duration(self) -> float:
        return self.candidate.duration

    @property
    def id(self) -> str:
        b = self.candidate.block
        return f"{b.duration:g}s-{b.candidate}-pair{b.pair}-r{self.candidate.index}"


@dataclass(frozen=True)
class Stop:
    """Why a candidate stopped, and what that makes its verdict."""

    reason: str
    outcome: Outcome  # FAIL for the candidate's own failures, INCONCLUSIVE when the comparison is invalid


class CandidateStopped(H3BenchError):
    """A block of a candidate that a stop rule has already stopped; the plugin skips it."""


@dataclass(frozen=True)
class LpipsStatus:
    required: bool
    ok: bool
    detail: str




class Campaign:
    """The session's campaign: spec, schedule, evidence bundle and what each block produced."""

    def __init__(self, spec: RunSpec, settings: Settings, bundle: Bundle | None = None) -> None:
        self.spec = spec
        self.settings = settings
        # A stored bundle already recorded its input hashes; a new run must match its pins.
        self.inputs = spec.input_files() if bundle is not None else spec.verify_inputs()
        self.schedule = plan(spec, settings.arm)
        self._bundle = bundle
        self._stored = bundle is not None  # blocks come from the bundle; none is ever run
        self._stored_baseline: Campaign | None = None  # set for a candidate-only run
        self._results: dict[str, BlockResult] = {}
        self._stopped: dict[str, Stop] = {}  # candidate → the stop rule that fired
        self._reports: dict[str, gates.QualityReport] = {}  # this process's comparisons
        self._verdicts: dict[str, lossless.LosslessVerdict] = {}
        # Results as records, also those absorbed from xdist workers: they make the verdict and the evidence.
        self._quality: dict[str, dict[str, Any]] = {}
        self._lossless: dict[str, dict[str, Any]] = {}
        self._new_records: list[dict[str, Any]] = []
        self._digests: dict[str, media.DecodedDigest] = {}
        self._scratch_dir: Path | None = None
        self._lpips: LpipsStatus | None = None  # authenticated once, on first use
        self._lpips_weights: LpipsWeights | None = None

    @classmethod
    def from_settings(cls, settings: Settings) -> Campaign:
        campaign = cls(load_runspec(settings.runspec), settings)
        if settings.baseline_evidence is not None:
            campaign._attach_baseline(settings.baseline_evidence)
        return campaign

    def _attach_baseline(self, path: Path) -> None:
        """A candidate-only run: baseline outputs and samples come from a stored bundle of the same spec."""
        if self.settings.arm != "candidate":
            raise UsageError("--baseline-evidence runs only the candidate's blocks: add --arm candidate")
        stored = Campaign.from_bundle(path, dataclasses.replace(self.settings, arm="all", baseline_evidence=None))
        require_same_spec(stored.spec.spec_id, self.spec.spec_id)
        if not any(r.block.arm == "baseline" and r.failure is None for r in stored._results.values()):
            raise EvidenceError(f"{path} holds no successful baseline block", path=str(path))
        self._stored_baseline = stored

    def _source(self, block: Block) -> Campaign:
        """The campaign that holds a block: the stored baseline bundle for baseline blocks of a candidate-only run."""
        return self._stored_baseline if block.arm == "baseline" and self._stored_baseline else self

    def _baseline_blocks(self) -> list[Block]:
        source = self._stored_baseline or self
        return [b for b in source.schedule if b.arm == "baseline"]

    @classmethod
    def from_bundle(cls, path: str | Path, settings: Settings) -> Campaign:
        """A campaign whose blocks were run earlier and stored in a bundle (for validate and xdist workers)."""
        bundle = Bundle.open(path)
        spec = parse_runspec(bundle.manifest["spec"], source=f"{path}/manifest.json")
        campaign = cls(spec, settings, bundle=bundle)
        names = {f.name for f in fields(Sample)}
        samples: dict[str, list[Sample]] = {}
        for line in bundle.samples():
            samples.setdefault(line["block_id"], []).append(Sample(**{k: v for k, v in line.items() if k in names}))
        lifecycles = {event["block"]: event for event in bundle.lifecycle()}
        for block in campaign.schedule:
            event = lifecycles.get(block.id)
            if event is not None:
                campaign._take(BlockResult(
                    block, event.get("pid"), tuple(samples.get(block.id, ())), event,
                    event.get("log_relpath", ""), event.get("failure"),
                    Outcome(event.get("failure_outcome", Outcome.FAIL)),
                ))
        return campaign

    @property
    def _scratch(self) -> Path:
        """Where logs and outputs land before they are copied into the bundle; removed by finish()."""
        if self._scratch_dir is None:
            self._scratch_dir = Path(tempfile.mkdtemp(prefix="h3bench-"))
        return self._scratch_dir

    def _stop(self, candidate: str, reason: str, outcome: Outcome) -> None:
        """Apply a stop rule: the first reason stays, later blocks of the candidate are skipped."""
        self._stopped.setdefault(candidate, Stop(reason, outcome))

    # -- evidence ------------------------------------------------------------

    @property
    def bundle(self) -> Bundle:
        """The run's bundle, created on first use so that a collect-only run writes nothing."""
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
            )
        return self._bundle

    @property
    def ran_anything(self) -> bool:
        return bool(self._results)

    def output_path(self, ref: OutputRef) -> Path:
        source = self._source(ref.block)
        return source.bundle.output_path(source._sample_for(ref).output_sha256)

    # -- collection ----------------------------------------------------------

    def cases(self, fixture: str) -> list[Any]:
        """The parametrization of each campaign fixture, in schedule order."""
        if fixture == "block":
            return list(self.schedule)
        if fixture == "arm_workload":
            return list(dict.fromkeys(ArmWorkload(b.arm, b.duration) for b in self.schedule))
        if fixture == "candidate_workload":
            return list(dict.fromkeys(CandidateWorkload(b.candidate, b.duration) for b in self.schedule))
        k = self.spec.protocol.requests_per_block
        if fixture == "baseline_output":
            return [OutputRef(b, i) for b in self._baseline_blocks() for i in range(k)]
        if fixture == "matched_pair":
            return [MatchedPair(OutputRef(self._partner(b), i), OutputRef(b, i))
                    for b in self.schedule if b.arm != "baseline" for i in range(k)]
        raise ValueError(f"no campaign cases for fixture {fixture!r}")

    def _partner(self, block: Block) -> Block:
        """The baseline block of the same AB/BA pair."""
        position = block.position + (1 if block.position % 2 else -1)
        return Block(block.duration, block.candidate, "baseline", position, "A")

    def report_header(self) -> list[str]:
        spec = self.spec
        lines = [
            f"h3bench runspec: {spec.name}, id {spec.spec_id[:16]}",
            f"h3bench arms: {self.settings.arm}; order {spec.protocol.order}; "
            f"{spec.protocol.warmups_per_block} warmup + {spec.protocol.requests_per_block} measured per block; "
            f"shutdown budget {spec.protocol.shutdown_budget_s:g} s for every arm",
        ]
        for name, arm in spec.arms.items():
            lines.append(f"h3bench {name}: {' '.join(arm.command('127.0.0.1', 0, spec.model.path))}")
        lines.append(f"h3bench evidence: {self.bundle.path}")
        if self._stored_baseline is not None:
            lines.append(f"h3bench baseline evidence: {self._stored_baseline.bundle.path} (latency NOT interleaved)")
        return lines

    # -- blocks --------------------------------------------------------------

    def run_block(self, block: Block, benchmark: Any = None) -> BlockResult:
        """Run one block once; later calls give what it produced (BlockFailed for a failed block).

        With a pytest-benchmark fixture, the measured requests are timed by
        it in pedantic mode (one request per round) and the block's details go
        to its ``extra_info``.
        """
        result = self._results.get(block.id)
        if result is None:
            stop = self._stopped.get(block.candidate)
            if stop is not None:
                raise CandidateStopped(f"candidate {block.candidate!r} was stopped: {stop.reason}")
            if self._stored:
                raise EvidenceError(f"{block.id}: the bundle holds no such block", path=str(self.bundle.path))
            result = self._executed(block, benchmark)
        if result.failure is not None:
            raise BlockFailed(result)
        return result

    def _executed(self, block: Block, benchmark: Any) -> BlockResult:
        result = self._execute(block, benchmark)
        self._take(result)
        if benchmark is not None:
            benchmark.group = f"ref2va_{block.duration:g}s"
            benchmark.extra_info.update(self._extra_info(result))
        return result

    def _take(self, result: BlockResult) -> None:
        """Keep a block's result; a failed block stops its candidate's series."""
        self._results[result.block.id] = result
        if result.failure is not None:
            block = result.block
            self._stop(block.candidate, f"{block.id}: {_headline(result.failure)}", result.failure_outcome)

    def run_schedule(self, durations: set[float], progress: Callable[[str], None]) -> None:
        """Run every block of the given durations, in order (the xdist controller does this first)."""
        for block in self.schedule:
            if block.duration in durations and block.id not in self._results:
                progress(f"h3bench: block {block.id} ...")
                try:
                    result = self.run_block(block)
                    progress(f"h3bench: block {block.id}: median E2E {result.median_e2e_s:.3f} s")
                except (BlockFailed, CandidateStopped) as exc:
                    progress(f"h3bench: block {block.id}: {_headline(str(exc))}")

    def results_for(self, case: ArmWorkload) -> list[BlockResult]:
        """Every block of one arm at one duration that ran (failed ones included), running those not yet run.

        Blocks that a stop rule skipped are left out; if none ran at all, the stop is raised.
        """
        blocks = [b for b in self.schedule if b.arm == case.arm and b.duration == case.duration]
        results, stopped = [], None
        for block in blocks:
            try:
                results.append(self._ensure(block))
            except BlockFailed as exc:
                results.append(exc.result)
            except CandidateStopped as exc:
                stopped = exc
        if not results and stopped is not None:
            raise stopped
        return results

    def _ensure(self, block: Block) -> BlockResult:
        """Run, in schedule order, every block before this one that has not run yet; then this one."""
        if not self._stored:
            for earlier in self.schedule[: self.schedule.index(block)]:
                if earlier.id not in self._results and earlier.candidate not in self._stopped:
                    try:
                        self.run_block(earlier)
                    except BlockFailed:
                        pass
        return self.run_block(block)

    def _execute(self, block: Block, benchmark: Any) -> BlockResult:
        spec, protocol = self.spec, self.spec.protocol
        arm = spec.arms[block.arm]
        port = find_free_port(HOST)
        log_path = self._scratch / f"{block.id}.log"
        env = dict(arm.env)
        if arm.sim is not None:
            env[SIM_PROFILE_ENV] = json.dumps(arm.sim)
        server = ServerProcess(
            arm.command(HOST, port, spec.model.path),
            port=port,
            host=HOST,
            log_path=log_path,
            env=env,
            startup_budget_s=protocol.startup_budget_s,
            stop_budget_s=protocol.shutdown_budget_s,
            device_checks=self._device_checks(),
        )
        recorder = _Recorder(self, block)
        failure: str | None = None
        try:
            with DeviceLock(os.environ.get(DEVICE_LOCK_ENV, DEFAULT_LOCK_PATH)), server:
                with VideoClient(server.base_url, model=spec.model.path, timeout=protocol.request_timeout_s) as client:
                    t0 = time.perf_counter()
                    for i in range(protocol.warmups_per_block):
                        recorder.request(client, "warmup", i, spec.workload.seed)
                    server.record_warmup(time.perf_counter() - t0)
                    server.snapshot()
                    self._measure(recorder, client, benchmark)
                    server.snapshot()
                    if protocol.audit:
                        recorder.request(client, "audit", 0, protocol.audit_seed)
                    server.snapshot()
        except H3BenchError as exc:
            failure = _describe_failure(exc)
        exit_report = None
        if server.pid is not None:
            exit_report = server.verify_exited()
            if failure is None and not exit_report.ok:
                failure = f"{_FAILURE_KINDS[CleanupError]}: " + "; ".join(exit_report.problems)
            if failure is None and server.graceful is False:
                failure = (f"{_FAILURE_KINDS[CleanupError]}: the server did not exit within the shared shutdown "
                           f"budget of {protocol.shutdown_budget_s:g} s after SIGTERM and was killed")
        if failure is None and protocol.audit:
            failure = audit_problem(recorder.samples, protocol.audit_latency_tolerance)
        # A broken baseline or a foreign process invalidates the comparison; it does not fail the candidate.
        invalid = block.arm == "baseline" or (failure or "").startswith(_FAILURE_KINDS[InterferenceError])
        failure_outcome = Outcome.INCONCLUSIVE if invalid else Outcome.FAIL
        log_rel = self.bundle.store_log(log_path, f"{block.id}.log") if log_path.exists() else ""
        if failure is not None and log_rel:
            failure += f"\n(the server log is kept in the bundle: {self.bundle.path / log_rel})"
        lifecycle = {
            "block": block.id,
            "arm": block.arm,
            "duration": block.duration,
            "position": block.position,
            **server.record().to_dict(),
            "shutdown_budget_s": protocol.shutdown_budget_s,
            "exit": _exit_dict(exit_report),
            "log_relpath": log_rel,
            "failure": failure,
            "failure_outcome": str(failure_outcome),
        }
        self.bundle.append_lifecycle(lifecycle)
        return BlockResult(block, server.pid, tuple(recorder.samples), lifecycle, log_rel, failure, failure_outcome)

    def _device_checks(self) -> tuple[NpuSmiCheck, ...]:
        """On NPU hosts, npu-smi must show the spec's devices healthy and free before, and released after."""
        hardware = self.spec.hardware
        return () if hardware.kind == "sim" else (NpuSmiCheck(hardware.device_ids),)

    def _measure(self, recorder: _Recorder, client: VideoClient, benchmark: Any) -> None:
        k, seed = self.spec.protocol.requests_per_block, self.spec.workload.seed
        counter = iter(range(k))

        def one_request() -> None:
            recorder.send(client, "measured", next(counter), seed)

        if benchmark is None or getattr(benchmark, "disabled", False):
            for i in range(k):
                recorder.request(client, "measured", i, seed)
        else:
            # Only the request is timed; storing its evidence happens in teardown.
            benchmark.pedantic(one_request, teardown=recorder.flush, rounds=k, iterations=1, warmup_rounds=0)

    # -- quality -------------------------------------------------------------

    def _sample_for(self, ref: OutputRef) -> Sample:
        result = self._ensure(ref.block)
        measured = [s for s in result.measured if s.index == ref.index]
        if not measured or measured[0].output_sha256 is None:
            raise H3BenchError(f"{ref.id}: the block has no output for measured request {ref.index}")
        return measured[0]

    def thresholds(self) -> gates.Thresholds:
        # The RunSpec's gates table names the six thresholds as gates.Thresholds does.
        return gates.Thresholds(**{f.name: getattr(self.spec.gates, f.name) for f in fields(gates.Thresholds)})

    def lpips_status(self) -> LpipsStatus:
        """Authenticate the LPIPS weights once; the reason travels into every report."""
        if self._lpips is None:
            from h3bench.metrics.lpips import authenticate_weights

            required = self.spec.gates.lpips_required
            try:
                self._lpips_weights = authenticate_weights(self.settings.lpips_dir)
                self._lpips = LpipsStatus(required, True, f"weights authenticated in {self._lpips_weights.directory}")
            except H3BenchError as exc:
                how = ("Put alexnet-owt-7be5be79.pth (and alex.pth) in a directory and pass "
                       "--lpips-dir DIR or set H3BENCH_LPIPS_DIR; they are hash-checked against fixtures/lpips_pins.toml.")
                self._lpips = LpipsStatus(required, False, f"{exc} {how}")
        return self._lpips

    def optional_checks(self) -> tuple[str, ...]:
        """Checks the spec allows to stay unmeasured: LPIPS when it is declared not required."""
        return () if self.spec.gates.lpips_required else ("lpips",)

    def compare(self, pair: MatchedPair) -> gates.QualityReport:
        if pair.id not in self._reports:
            report = self._compare_outputs(pair.baseline, pair.candidate)
            self._reports[pair.id] = report
            self._record({"kind": "quality", "id": pair.id, "candidate": pair.candidate.block.candidate,
                          "result": report.to_dict()})
        return self._reports[pair.id]

    def _record(self, record: dict[str, Any]) -> None:
        self._new_records.append(record)
        self.absorb(record)

    def drain_records(self) -> list[dict[str, Any]]:
        """Records made since the last call; the plugin sends them to the xdist controller."""
        records, self._new_records = self._new_records, []
        return records

    def absorb(self, record: dict[str, Any]) -> None:
        """Take a quality or lossless result (from this process or an xdist worker); a failed gate stops the candidate."""
        result = record["result"]
        if record["kind"] == "lossless":
            self._lossless[record["id"]] = result
            return
        self._quality[record["id"]] = result
        if result["verdict"] == str(Outcome.FAIL):
            failing = "; ".join(f"{c['name']} {c['value']}" for c in result["checks"] if c["status"] == "fail")
            self._stop(record["candidate"], f"{record['id']}: failed quality gates ({failing})", Outcome.FAIL)

    @property
    def lossless_enabled(self) -> bool:
        return bool(self.settings.lossless or self.spec.gates.lossless)

    def control_pairs(self, case: CandidateWorkload) -> list[tuple[OutputRef, OutputRef]]:
        """Baseline outputs of the same inputs from different server processes: every two baseline blocks."""
        baselines = [b for b in self._baseline_blocks() if b.candidate == case.candidate and b.duration == case.duration]
        k = self.spec.protocol.requests_per_block
        return [(OutputRef(a, i), OutputRef(b, i)) for a, b in itertools.combinations(baselines, 2) for i in range(k)]

    def lossless(self, case: CandidateWorkload) -> lossless.LosslessVerdict:
        """The candidate's deviations against the control envelope, with exact-equality diagnostics."""
        if case.id not in self._verdicts:
            usable = [(a, b) for a, b in self.control_pairs(case) if self._available(a) and self._available(b)]
            controls = [self._compare_outputs(a, b) for a, b in usable]
            processes = len({(a.block.id, b.block.id) for a, b in usable})
            pairs = [p for p in self.cases("matched_pair")
                     if p.candidate.block.candidate == case.candidate and p.duration == case.duration
                     and self._available(p.baseline) and self._available(p.candidate)]
            candidates = [(self.compare(p), self._digests_equal(p.baseline, p.candidate)) for p in pairs]
            metrics = [m for m in lossless.DEVIATIONS if m not in self.optional_checks()]
            gates_spec = self.spec.gates
            verdict = lossless.judge(candidates, controls, tolerance=gates_spec.control_envelope_tolerance,
                                     min_controls=gates_spec.min_control_pairs, independent_controls=processes,
                                     metrics=metrics)
            self._verdicts[case.id] = verdict
            # Exact-equality diagnostics for every pair, controls included (decoded frames and PCM hashed).
            bitwise = {f"control:{a.id}~{b.id}": self._digests_equal(a, b) for a, b in usable}
            bitwise.update({f"candidate:{p.id}": equal for p, (_, equal) in zip(pairs, candidates)})
            self._record({"kind": "lossless", "id": case.id,
                          "result": {**verdict.to_dict(), "decoded_bitwise_equal": bitwise}})
        return self._verdicts[case.id]

    def _compare_outputs(self, baseline: OutputRef, candidate: OutputRef) -> gates.QualityReport:
        self.lpips_status()
        # Without authenticated weights, compare() tries again and carries the reason into the report.
        return gates.compare(
            self.output_path(baseline),
            self.output_path(candidate),
            thresholds=self.thresholds(),
            expect_seconds=candidate.duration,
            lpips_weights=self._lpips_weights,
            lpips_dir=self.settings.lpips_dir,
            lpips_device=self.settings.lpips_device,
        )

    def digest(self, ref: OutputRef) -> media.DecodedDigest:
        path = self.output_path(ref)
        if path.stem not in self._digests:  # outputs are named by their SHA-256
            self._digests[path.stem] = media.decoded_digest(path)
        return self._digests[path.stem]

    def _digests_equal(self, a: OutputRef, b: OutputRef) -> bool:
        return self.digest(a) == self.digest(b)

    def _available(self, ref: OutputRef) -> bool:
        """A live campaign runs what is missing; a stored one has only what its bundle holds."""
        source = self._source(ref.block)
        result = source._results.get(ref.block.id)
        return not source._stored or (result is not None and result.failure is None)

    def validate(self) -> Outcome:
        """Run every quality comparison (and the lossless judgement) over stored outputs; the overall outcome."""
        if gates.VALIDATOR_VERSION in self.bundle.quality_versions():
            raise UsageError(
                f"{self.bundle.path} is already validated with {gates.VALIDATOR_VERSION}; its result is frozen, "
                "and only a newer validator version writes a new one beside it"
            )
        pairs = [p for p in self.cases("matched_pair") if self._available(p.baseline) and self._available(p.candidate)]
        if not pairs:
            raise UsageError(f"{self.bundle.path} holds no matched baseline and candidate outputs: nothing to validate")
        for pair in pairs:
            self.compare(pair)
        if self.lossless_enabled:
            for case in self.cases("candidate_workload"):
                self.lossless(case)
        return _combine([entry["verdict"] for entry in self.verdicts().values()])

    # -- reporting -----------------------------------------------------------

    def series(self, duration: float, candidate: str) -> list[BlockResult]:
        """The blocks of one candidate's series that have run (stored baseline blocks first in a candidate-only run)."""
        blocks = [b for b in self._baseline_blocks() if self._stored_baseline] + list(self.schedule)
        return [self._source(b)._results[b.id] for b in blocks
                if b.duration == duration and b.candidate == candidate and b.id in self._source(b)._results]

    def speed(self, duration: float, candidate: str) -> stats.SpeedReport | None:
        """The latency estimate for one candidate at one duration; None without both arms.

        Paired AB/BA ratios normally; in a candidate-only run, an unpaired
        comparison with the stored baseline blocks, which the report says is
        not interleaved.
        """
        blocks = [
            stats.BlockSamples(r.block.letter, tuple(s.e2e_s for s in r.measured if s.ok))
            for r in self.series(duration, candidate)
            if r.failure is None
        ]
        if {b.role for b in blocks} != {"A", "B"}:
            return None
        if self._stored_baseline is not None:
            return stats.unpaired_speed_report(blocks, margin=self.spec.gates.speed_margin,
                                               baseline_source=str(self._stored_baseline.bundle.path))
        return stats.speed_report(blocks, margin=self.spec.gates.speed_margin)

    def verdicts(self) -> dict[str, dict[str, Any]]:
        """Per candidate: the speed and quality outcome at each duration, and the overall one, with reasons."""
        out: dict[str, dict[str, Any]] = {}
        for candidate in self.spec.candidates:
            stop = self._stopped.get(candidate)
            entry: dict[str, Any] = {"durations": {}, "stopped": stop.reason if stop else None}
            outcomes = []
            for duration in self.spec.workload.durations:
                speed = self.speed(duration, candidate)
                quality = [r for key, r in self._quality.items()
                           if key.startswith(f"{duration:g}s-{candidate}-")]
                d = {
                    "speed": str(speed.verdict.outcome) if speed else str(Outcome.INCONCLUSIVE),
                    "speed_reasons": list(speed.verdict.reasons) if speed else ["no complete AB/BA pair was measured"],
                    "quality": _quality_outcome(quality, self.optional_checks()),
                    "quality_pairs": len(quality),
                }
                outcomes += [d["speed"], d["quality"]]
                verdict = self._lossless.get(CandidateWorkload(candidate, duration).id)
                if self.lossless_enabled:
                    d["lossless"] = verdict or "NOT_EVALUATED"
                    lossless_outcome = verdict["outcome"] if verdict else "INCONCLUSIVE"
                    outcomes.append("PASS" if lossless_outcome == "EXACT" else lossless_outcome)
                entry["durations"][f"{duration:g}s"] = d
            if stop is not None:
                outcomes.append(str(stop.outcome))
            entry["verdict"] = str(_combine(outcomes))
            out[candidate] = entry
        return out

    def summary_lines(self) -> list[str]:
        lines = [f"runspec {self.spec.name} (id {self.spec.spec_id[:16]}), order {self.spec.protocol.order}, "
                 f"shutdown budget {self.spec.protocol.shutdown_budget_s:g} s for every arm"]
        verdicts = self.verdicts()
        for duration in self.spec.workload.durations:
            for candidate in self.spec.candidates:
                series = self.series(duration, candidate)
                if not series:
                    continue
                lines.append(f"ref2va {duration:g}s, {candidate} against baseline:")
                for arm in ("baseline", candidate):
                    samples = [s for r in series if r.block.arm == arm for s in r.measured if s.ok]
                    if samples:
                        median = statistics.median(s.e2e_s for s in samples)
                        stages = _stage_medians(samples)
                        lines.append(f"  {arm:<12} n={len(samples):<3} median E2E {median:8.3f} s   {stages}")
                speed = self.speed(duration, candidate)
                if speed is not None:
                    est = speed.estimate
                    interval = (f"[{est.ci_low:.4f}, {est.ci_high:.4f}]" if est.ci_low is not None else "no interval")
                    lines.append(f"  ratio {est.geomean:.4f} {interval} over {est.k} {est.design}")
                    if self._stored_baseline is not None:
                        lines.append(f"  latency comparison is NOT AB/BA-interleaved: baseline samples from "
                                     f"{self._stored_baseline.bundle.path}")
                d = verdicts[candidate]["durations"][f"{duration:g}s"]
                lines.append(f"  speed {d['speed']}: {d['speed_reasons'][0]}")
                lines.append(f"  quality {d['quality']} over {d['quality_pairs']} matched pairs")
                if isinstance(d.get("lossless"), dict):
                    lines.append(f"  lossless {d['lossless']['outcome']}: {d['lossless']['reasons'][0]}")
        for candidate, entry in verdicts.items():
            stopped = f" (stopped: {entry['stopped']})" if entry["stopped"] else ""
            lines.append(f"verdict {candidate}: {entry['verdict']}{stopped}")
        if not self.spec.gates.lpips_required:
            lines.append("LPIPS is not required by this RunSpec: quality verdicts do not include it.")
        lines.append(f"evidence bundle: {self.bundle.path}")
        return lines

    def finish(self) -> None:
        """Write verdict.json and seal the bundle; nothing is written if no block ran, or by a reader."""
        if self._scratch_dir is not None:
            shutil.rmtree(self._scratch_dir, ignore_errors=True)
        if self._bundle is None or self._stored:
            return
        self.bundle.close()
        self.write_quality()
        self.bundle.write_verdict({"spec_id": self.spec.spec_id, "h3bench": __version__,
                                   "candidates": self.verdicts()})

    def write_quality(self) -> str | None:
        """Record every quality result under this validator's version, beside any older one."""
        if not self._quality and not self._lossless:
            return None
        return self.bundle.write_quality(gates.VALIDATOR_VERSION, {
            "validator_version": gates.VALIDATOR_VERSION,
            "pairs": self._quality,
            "lossless": self._lossless,
            "decoded_digests": {sha: vars(d) for sha, d in self._digests.items()},
        })

    def _extra_info(self, result: BlockResult) -> dict[str, Any]:
        block = result.block
        return {
            "arm": block.arm,
            "candidate": block.candidate,
            "block_index": block.position,
            "order_position": f"{block.position}/{len(self.spec.protocol.order)} ({self.spec.protocol.order})",
            "server_pid": result.server_pid,
            "client_e2e_s": [s.e2e_s for s in result.measured],
            "server_inference_time_s": [s.inference_time_s for s in result.measured],
            "stage_durations": [s.stage_durations for s in result.measured],
            "output_sha256": [s.output_sha256 for s in result.measured],
            "startup_s": result.lifecycle.get("startup_s"),
            "warmup_s": result.lifecycle.get("warmup_s"),
            "shutdown_s": result.lifecycle.get("shutdown_s"),
            "spec_id": self.spec.spec_id,
        }


def _quality_outcome(results: list[dict[str, Any]], optional: tuple[str, ...]) -> str:
    if not results:
        return "NOT_EVALUATED"
    if any(r["verdict"] == str(Outcome.FAIL) for r in results):
        return str(Outcome.FAIL)
    missing = [c for r in results for c in r["checks"] if c["status"] == "not_measured" and c["name"] not in optional]
    return str(Outcome.INCONCLUSIVE if missing else Outcome.PASS)


def _combine(outcomes: list[str]) -> Outcome:
    if str(Outcome.FAIL) in outcomes:
        return Outcome.FAIL
    if all(o == str(Outcome.PASS) for o in outcomes):
        return Outcome.PASS
    return Outcome.INCONCLUSIVE


def _stage_medians(samples: list[Sample]) -> str:
    """Median seconds of each top-level stage, and the derived mux-and-transfer remainder."""
    parts = []
    for stage in TOP_LEVEL_STAGES:
        values = [v for s in samples for k, v in s.stage_durations.items()
                  if k.count(".") <= 1 and k.rpartition(".")[2] == stage]
        if values:
            parts.append(f"{stage} {statistics.median(values):.3f}")
    rest = [r for r in (mux_and_transfer_s(s.e2e_s, s.stage_durations) for s in samples) if r is not None]
    if rest:
        parts.append(f"mux+transfer (derived) {statistics.median(rest):.3f}")
    return ", ".join(parts)


class BlockFailed(H3BenchError):
    """A block whose server or requests failed; its evidence is already written."""

    def __init__(self, result: BlockResult) -> None:
        super().__init__(f"{result.block.id}: {result.failure}")
        self.result = result


class _Recorder:
    """Sends a block's requests and writes each one's evidence outside the timed part."""

    def __init__(self, campaign: Campaign, block: Block) -> None:
        self.campaign = campaign
        self.block = block
        self.samples: list[Sample] = []
        self._pending: tuple[str, int, int, GenerationResult] | None = None

    def _request(self, seed: int) -> GenerationRequest:
        spec = self.campaign.spec
        w = spec.workload
        return GenerationRequest(
            prompt=spec.inputs.prompt,
            duration_s=self.block.duration,
            size=w.size,
            fps=w.fps,
            seed=seed,
            num_inference_steps=w.steps,
            flow_shift=w.flow_shift,
            audio_flow_shift=w.audio_flow_shift,
            references=tuple(Reference.from_path(p) for p in self.campaign.inputs.values()),
        )

    def send(self, client: VideoClient, kind: str, index: int, seed: int) -> None:
        """The timed part: one request, its MP4 streamed to a scratch file."""
        output = self.campaign._scratch / f"{self.block.id}-{kind}{index}.mp4"
        try:
            result = client.generate_sync(self._request(seed), output)
        except H3BenchError as exc:
            self._record(Sample(self.block.id, kind, index, seed, ok=False, error=str(exc)))
            raise
        self._pending = (kind, index, seed, result)

    def flush(self, *_: Any) -> None:
        """The untimed part: store the output and append the sample."""
        if self._pending is None:
            return
        kind, index, seed, result = self._pending
        self._pending = None
        sha, _ = self.campaign.bundle.store_output(result.output_path, move=True)
        self._record(Sample(
            self.block.id, kind, index, seed, ok=True,
            e2e_s=result.e2e_s,
            request_id=result.request_id,
            inference_time_s=result.inference_time_s,
            stage_durations=dict(result.stage_durations),
            peak_memory_mb=result.peak_memory_mb,
            output_sha256=sha,
        ))

    def request(self, client: VideoClient, kind: str, index: int, seed: int) -> None:
        self.send(client, kind, index, seed)
        self.flush()

    def _record(self, sample: Sample) -> None:
        self.samples.append(sample)
        block = self.block
        self.campaign.bundle.append_sample({
            **sample.to_dict(),
            "warmup": sample.kind == "warmup",
            "arm": block.arm,
            "candidate": block.candidate,
            "duration": block.duration,
            "position": block.position,
        })


_FAILURE_KINDS = {
    InterferenceError: "resource interference",
    ServerStartError: "server did not start",
    CleanupError: "incomplete process cleanup",
    RequestError: "request failed",
}


def _describe_failure(exc: H3BenchError) -> str:
    """One paragraph that says what happened, with the context the error carries."""
    kind = next((label for cls, label in _FAILURE_KINDS.items() if isinstance(exc, cls)), type(exc).__name__)
    text = str(exc) if str(exc).startswith(kind) else f"{kind}: {exc}"
    tail = getattr(exc, "log_tail", "")
    if tail and tail not in text:
        text += "\nlast log lines:\n" + tail
    return text


def audit_problem(samples: list[Sample], tolerance: float) -> str | None:
    """The anti-shortcut audit (MLPerf TEST04, adapted); None when the block passes it.

    Every measured request repeats the same seed and inputs, so a server that
    caches outputs would look fast and perfect. The block's audit request uses
    another seed: its output must differ from every measured output, and its
    E2E must lie within ``tolerance`` (relative) of the block's median, or
    within ``AUDIT_SLACK_S`` of it, which absorbs scheduling noise when a
    simulated request takes well under a second.
    """
    measured = [s for s in samples if s.kind == "measured" and s.ok]
    audit = [s for s in samples if s.kind == "audit" and s.ok]
    if not audit or not measured:
        return None
    probe = audit[0]
    if probe.output_sha256 in {s.output_sha256 for s in measured}:
        return "anti-shortcut audit: the output for another seed equals a measured output (cached outputs?)"
    median = statistics.median(s.e2e_s for s in measured)
    if abs(probe.e2e_s - median) > max(tolerance * median, AUDIT_SLACK_S):
        return (f"anti-shortcut audit: the audit request took {probe.e2e_s:.3f} s against a block median of "
                f"{median:.3f} s, outside ±{tolerance:.0%} (are repeated requests served from a cache?)")
    return None


def _headline(failure: str) -> str:
    """First line of a failure, plus the last error line of the log tail that follows (it names the cause)."""
    lines = [line.strip() for line in failure.splitlines() if line.strip()]
    errors = [line for line in lines[1:] if "error" in line.lower() or "failed" in line.lower()]
    return f"{lines[0].rstrip(':. ')} … {errors[-1]}" if errors else lines[0]


def _exit_dict(report: ExitReport | None) -> dict[str, Any]:
    if report is None:
        return {"pids_seen": [], "survivors": [], "port_free": None, "port_holder": None, "verified": False}
    return {
        "pids_seen": [p.pid for p in report.pids_seen],
        "escaped": [p.describe() for p in report.escaped],
        "survivors": list(report.survivors),
        "port_free": report.port_free,
        "port_holder": report.port_holder,
        "device_leftovers": list(report.device_leftovers),
        "verified": True,
    }
