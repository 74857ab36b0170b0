"""Running one block: one fresh server process of one arm, from launch to proof of exit.

::

    start → ready → warmup request(s) → k measured requests → audit request
          → stop (shared budget) → verify every worker exited → evidence

Everything a block produces goes into the evidence bundle as it happens: each
sample when its request ends, the server log and the lifecycle record when
the block ends, so a failure later never loses what was already measured.

Only the measured requests are timed, by a :class:`Measure`: pytest-benchmark
in the perf tests (the plugin's :func:`~h3bench.plugin.timed_by`), or
:class:`PlainMeasure` for the CLI, xdist's controller and a resumed run.
Storing a request's evidence happens outside the timed part.

Failures are recorded, not raised: the returned :class:`BlockResult` says
what happened (a failed start with the log tail, a failed request, an
incomplete cleanup, a shutdown beyond the shared budget, a failed
anti-shortcut audit). A broken baseline block, or resource interference,
invalidates the comparison (INCONCLUSIVE); the candidate's own failure is a
FAIL.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import Any

from h3bench.errors import (
    AttentionBackendError,
    CleanupError,
    DiskFullError,
    H3BenchError,
    InterferenceError,
    RequestError,
    ServerStartError,
)
from h3bench.evidence import Bundle
from h3bench.evidence.files import now
from h3bench.evidence.scrub import Scrubber
from h3bench.host.devices import DeviceLock, device_checks
from h3bench.outcome import Outcome
from h3bench.run.client import GenerationRequest, GenerationResult, Reference, VideoClient
from h3bench.run.contract import ContractPart, ServerContract, record_help, record_openapi
from h3bench.run.measure import Measure, PlainMeasure
from h3bench.run.pace import Pace
from h3bench.run.profiling import PROFILE, profiled_request, server_args
from h3bench.run.progress import Progress
from h3bench.run.records import BlockResult, FailureKind, Lifecycle, Sample, failure_of
from h3bench.run.server_metrics import Scrape, metrics_delta, scrape
from h3bench.runspec import RunSpec, VllmArm
from h3bench.runspec.cases import Block
from h3bench.server.log import read_attention_backends, require_attention_backend
from h3bench.server.ports import LOCALHOST, find_free_port
from h3bench.server.process import ExitReport, ServerProcess
from h3bench.server.proctree import CAMPAIGN_ID_ENV
from h3bench.stats.cache_audit import output_problem

__all__ = ["BLOCK_ID_ENV", "Recorder", "Script", "audit_problem", "interrupt_name",
           "run_block", "warmups"]

# Every server learns the block it serves (the simulator names the same variable; a test holds both).
BLOCK_ID_ENV = "H3BENCH_BLOCK_ID"


class Recorder:
    """Sends a block's requests and writes each one's evidence outside the timed part.

    ``phase`` marks every sample it records (``formal``, or ``heldout`` for the
    held-out phase); a profiled request is marked ``profile``.
    """

    def __init__(
        self, spec: RunSpec, block: Block, bundle: Bundle, inputs: Mapping[str, Path], scratch: Path, pace: Pace,
        phase: str = "formal",
    ) -> None:
        self.spec = spec
        self.block = block
        self.bundle = bundle
        self.scratch = scratch
        self.pace = pace
        self.references = tuple(Reference.from_path(p) for p in inputs.values())
        self.phase = phase
        self.samples: list[Sample] = []
        self._pending: tuple[str, int, int, GenerationResult] | None = None
        self._held: list[Sample] | None = None  # the profiled request's sample waits for its traces
        self._base_url: str | None = None  # set by ready(): the server whose /metrics is scraped
        self._scrapes = 0
        self._last: tuple[Scrape, str | None] | None = None  # the latest scrape and its file in the bundle

    def ready(self, base_url: str) -> None:
        """Right after the server is ready: its first ``/metrics`` scrape, the start of the first request's delta."""
        self._base_url = base_url
        self._last = self._scrape()

    def _scrape(self) -> tuple[Scrape, str | None]:
        """One scrape, its raw text stored as ``metrics/<block>/<NN>.prom`` (nothing stored for a server without it)."""
        assert self._base_url is not None
        taken = scrape(self._base_url)
        relpath = self.bundle.store_scrape(self.block.id, self._scrapes, taken.text) if taken.text else None
        self._scrapes += 1
        return taken, relpath

    def _metrics(self) -> tuple[dict[str, Any] | None, dict[str, str | None] | None]:
        """The untimed scrape after a request: what ``/metrics`` gained over it, and the two scrapes' files."""
        if self._last is None:
            return None, None
        before, after = self._last, self._scrape()
        self._last = after
        return metrics_delta(before[0], after[0]).to_dict(), {"before": before[1], "after": after[1]}

    def _request(self, seed: int, references: tuple[Reference, ...] | None = None) -> GenerationRequest:
        w = self.spec.workload
        return GenerationRequest(
            prompt=self.spec.inputs.prompt,
            duration_s=self.block.duration,
            size=w.size,
            fps=w.fps,
            seed=seed,
            num_inference_steps=w.steps,
            flow_shift=w.flow_shift,
            audio_flow_shift=w.audio_flow_shift,
            references=references or self.references,
        )

    def send(
        self, client: VideoClient, kind: str, index: int, seed: int, references: tuple[Reference, ...] | None = None
    ) -> None:
        """The timed part: one request (``references``: other inputs than the spec's), its MP4 streamed to scratch."""
        output = self.scratch / f"{self.block.id}-{kind}{index}.mp4"
        request = self._request(seed, references)
        try:
            with self.pace.step(self.block, kind, index) as step:
                if self.spec.protocol.request_api == "async":
                    def polled(job: dict[str, Any]) -> None:
                        step.server_percent = job.get("progress")

                    result = client.generate_async(request, output, on_poll=polled)
                else:
                    result = client.generate_sync(request, output)
        except H3BenchError as exc:
            server_metrics, scrapes = self._metrics()  # what the server counted of the failed request
            self._record(Sample(self.block.id, kind, index, seed, ok=False, error=str(exc), phase=self._phase(kind),
                                server_metrics=server_metrics, scrapes=scrapes))
            raise
        self._pending = (kind, index, seed, result)

    def flush(self, *_: Any) -> None:
        """The untimed part: store the output and append the sample."""
        if self._pending is None:
            return
        kind, index, seed, result = self._pending
        self._pending = None
        sha = self.bundle.store_output(result.output_path, move=True)[0]
        server_metrics, scrapes = self._metrics()
        self._record(Sample(
            self.block.id, kind, index, seed, ok=True,
            e2e_s=result.e2e_s,
            request_id=result.request_id,
            inference_time_s=result.inference_time_s,
            stage_durations=dict(result.stage_durations),
            peak_memory_mb=result.peak_memory_mb,
            output_sha256=sha,
            phase=self._phase(kind),
            server_metrics=server_metrics,
            scrapes=scrapes,
            phases=result.phases.to_dict() if result.phases is not None else None,
        ))

    def request(
        self, client: VideoClient, kind: str, index: int, seed: int, references: tuple[Reference, ...] | None = None
    ) -> None:
        self.send(client, kind, index, seed, references)
        self.flush()

    def profiled(self, client: VideoClient, directory: Path) -> None:
        """One more request, between /start_profile and /stop_profile, recorded as ``profile`` with its traces."""
        held: list[Sample] = []
        info: dict[str, Any] = {"profiler": {"supported": None, "note": "the profiled request failed"}, "traces": []}
        self._held = held
        try:
            info = profiled_request(client, lambda: self.request(client, PROFILE, 0, self.spec.workload.seed),
                                    bundle=self.bundle, directory=directory, block=self.block)
        finally:
            self._held = None
            if not held:  # not sent: the server does not profile
                held.append(Sample(self.block.id, PROFILE, 0, self.spec.workload.seed, ok=False,
                                   error=info["profiler"]["note"], phase=PROFILE))
            for sample in held:
                self._record(sample, info)

    def _phase(self, kind: str) -> str:
        return PROFILE if kind == PROFILE else self.phase

    def _record(self, sample: Sample, extra: Mapping[str, Any] | None = None) -> None:
        if self._held is not None and sample.kind == PROFILE:
            self._held.append(sample)
            return
        self.samples.append(sample)
        block = self.block
        self.bundle.append_sample({
            **sample.to_dict(),
            **(extra or {}),
            "warmup": sample.kind == "warmup",
            "arm": block.arm,
            "candidate": block.candidate,
            "duration": block.duration,
            "position": block.position,
        })


_FAILURE_KINDS = {
    InterferenceError: FailureKind.INTERFERENCE,
    ServerStartError: FailureKind.START,
    CleanupError: FailureKind.CLEANUP,
    RequestError: FailureKind.REQUEST,
    AttentionBackendError: FailureKind.ATTENTION,
}


_CLEANUPS = (FailureKind.CLEANUP, FailureKind.SHUTDOWN)


def _describe_failure(exc: H3BenchError) -> tuple[FailureKind, str]:
    """The failure's kind and one paragraph that says what happened, with the context the error carries."""
    kind = next((k for cls, k in _FAILURE_KINDS.items() if isinstance(exc, cls)), FailureKind.ERROR)
    label = kind.value if kind is not FailureKind.ERROR else type(exc).__name__
    text = str(exc) if str(exc).startswith(label) else f"{label}: {exc}"
    tail = getattr(exc, "log_tail", "")
    if tail and tail not in text:
        text += "\nlast log lines:\n" + tail
    return kind, text


def audit_problem(samples: list[Sample]) -> str | None:
    """The output half of the anti-shortcut audit (MLPerf TEST04, adapted); None when the block passes it.

    Every measured request repeats the same seed and inputs, so a server that
    caches outputs would look fast and perfect. The block's audit request uses
    another seed: its output must differ from every measured output. The
    latency half needs the blocks of both arms, and is judged over a series
    (:mod:`h3bench.stats.cache_audit`): one slow audit request is no evidence
    of a cache.
    """
    measured = [s.output_sha256 for s in samples if s.kind == "measured" and s.ok]
    audit = [s for s in samples if s.kind == "audit" and s.ok]
    return output_problem(measured, audit[0].output_sha256) if audit and measured else None


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
        "device_interference": list(report.device_interference),
        "device_notes": list(report.device_notes),
        "verified": True,
    }


Script = Callable[[Recorder, VideoClient, ServerProcess, Measure], None]


def warmups(recorder: Recorder, client: VideoClient, server: ServerProcess) -> None:
    """The block's warmup requests (at the workload's seed), timed as the server's warmup."""
    t0 = time.perf_counter()
    for i in range(recorder.spec.protocol.warmups_per_block):
        recorder.request(client, "warmup", i, recorder.spec.workload.seed)
    server.record_warmup(time.perf_counter() - t0)
    server.snapshot()


def _formal(recorder: Recorder, client: VideoClient, server: ServerProcess, measure: Measure) -> None:
    """Warmups, the measured requests (timed by ``measure``), then the audit request."""
    protocol, seed = recorder.spec.protocol, recorder.spec.workload.seed
    warmups(recorder, client, server)
    counter = iter(range(protocol.requests_per_block))
    measure.time(lambda: recorder.send(client, "measured", next(counter), seed), recorder.flush,
                 protocol.requests_per_block)
    server.snapshot()
    if protocol.audit:
        recorder.request(client, "audit", 0, protocol.audit_seed)
    server.snapshot()


@contextlib.contextmanager
def _started(server: ServerProcess, pace: Pace, block: Block) -> Iterator[ServerProcess]:
    """``with server:``, the start shown as a step of its own (on an NPU it takes minutes)."""
    with pace.step(block, "start"):
        server.start()
    try:
        yield server
    finally:
        server.stop()


def _engine_help(spec: RunSpec, block: Block, bundle: Bundle) -> ContractPart | None:
    """A vllm arm's ``vllm serve --omni --help=all``, run in its environment once per run; None for other arms."""
    arm = spec.arms[block.arm]
    if not isinstance(arm, VllmArm):
        return None
    return record_help(arm.launcher, arm.launch_env(), bundle)


def interrupt_name(exc: BaseException) -> str:
    """``SIGTERM`` for a signal turned into an interrupt, else the exception's type (``KeyboardInterrupt``)."""
    return getattr(exc, "signame", None) or type(exc).__name__


def _server(
    spec: RunSpec, block: Block, log_path: Path, bundle: Bundle, campaign_id: str | None, profile_dir: Path | None
) -> ServerProcess:
    arm, protocol = spec.arms[block.arm], spec.protocol
    # With profiling on, every server of every arm gets the same profiler flags (h3bench.run.profiling).
    extra = server_args(profile_dir) if profile_dir is not None else []
    port = find_free_port(LOCALHOST)
    env = arm.launch_env()
    if campaign_id:
        env[CAMPAIGN_ID_ENV] = campaign_id
    env[BLOCK_ID_ENV] = block.id  # the simulator draws its process seed from it (h3bench/sim/app.py)

    def launched(server: ServerProcess) -> None:
        # Before readiness: what a resume must sweep if this run is killed now.
        bundle.append_server({"block": block.id, "pid": server.pid, "port": server.port,
                              "server_id": server.server_id, "started_at": now()})

    return ServerProcess(
        [*arm.command(LOCALHOST, port, spec.model.path), *extra],
        port=port,
        host=LOCALHOST,
        log_path=log_path,
        env=env,
        startup_budget_s=protocol.startup_budget_s,
        stop_budget_s=protocol.shutdown_budget_s,
        # On NPU hosts, npu-smi: devices healthy and free before, watched (telemetry) while it runs, released after.
        device_checks=device_checks(spec.hardware.kind, spec.hardware.device_ids, block=block.id,
                                    interval_s=protocol.telemetry_interval_s, telemetry=bundle.append_telemetry),
        on_launch=launched,
    )


def run_block(
    spec: RunSpec,
    block: Block,
    *,
    bundle: Bundle,
    inputs: Mapping[str, Path],
    scratch: Path,
    measure: Measure | None = None,
    campaign_id: str | None = None,
    pace: Pace | None = None,
    profile: bool = False,
    script: Script | None = None,
    phase: str = "formal",
    device_lock: Path | None = None,
) -> BlockResult:
    """Run one block and record everything it produced; a failure is in the result, not raised.

    An interrupt (Ctrl-C, SIGTERM, SIGHUP) stops the server through its normal
    path, records the block as interrupted, and is raised again. So does a
    full disk (:class:`~h3bench.errors.DiskFullError`): the campaign cannot
    keep evidence any more, so it must stop, not carry on block after block;
    what could not be written of this block is found incomplete by ``--resume``.
    ``campaign_id`` goes into the server's environment, so that a resume can
    find what a killed run left behind; ``pace`` shows each step's progress.
    ``profile``: this block also runs the profiled request (after the audit).
    ``script`` replaces the formal requests (warmups, measured, audit) with
    other ones, recorded under ``phase`` (the held-out phase, :mod:`h3bench.run.heldout`).
    ``device_lock``: a file lock held while the server lives, so that the
    blocks of two campaigns on one host's devices never overlap (None: no
    lock, the simulator's case).
    """
    measure = measure or PlainMeasure()
    pace = pace or Pace(spec, Progress())
    protocol = spec.protocol
    log_path = scratch / f"{block.id}.log"
    profile_dir = scratch / f"{block.id}-profile" if protocol.profile else None
    server = _server(spec, block, log_path, bundle, campaign_id, profile_dir)
    recorder = Recorder(spec, block, bundle, inputs, scratch, pace, phase)
    failure: tuple[FailureKind, str] | None = None
    interruption: BaseException | None = None
    contract: ServerContract | None = None
    try:
        lock = DeviceLock(device_lock) if device_lock is not None else contextlib.nullcontext()
        with lock:
            engine_help = _engine_help(spec, block, bundle)
            with _started(server, pace, block):
                # What the engine says it accepts, before anything else talks to it.
                contract = ServerContract(record_openapi(server.base_url, bundle), engine_help)
                # Before any request: a server on the wrong attention backend measures something else.
                require_attention_backend(spec.arms[block.arm].expected_attention_backend, log_path)
                recorder.ready(server.base_url)
                with VideoClient(server.base_url, model=spec.model.path,
                                 timeout=protocol.request_timeout_s) as client:
                    (script or _formal)(recorder, client, server, measure)
                    if profile and profile_dir is not None:
                        recorder.profiled(client, profile_dir)
    except DiskFullError as exc:  # nothing more can be kept: the server is stopped, the campaign stops
        interruption = exc
        failure = (FailureKind.INTERRUPTED, f"stopped: {exc}: the block did not finish and is not used")
    except H3BenchError as exc:
        failure = _describe_failure(exc)
    except BaseException as exc:  # Ctrl-C or a signal: the server is stopped, the block recorded as incomplete
        interruption = exc
        failure = (FailureKind.INTERRUPTED,
                   f"interrupted by {interrupt_name(exc)}: the block did not finish and is not used")
    exit_report = None
    if server.pid is not None:
        exit_report = server.verify_exited()
        if failure is None and not exit_report.ok:
            failure = (FailureKind.CLEANUP, f"{FailureKind.CLEANUP}: " + "; ".join(exit_report.problems))
        if failure is None and server.graceful is False:
            failure = (FailureKind.SHUTDOWN, f"{FailureKind.CLEANUP}: the server did not exit within the shared "
                       f"shutdown budget of {protocol.shutdown_budget_s:g} s after SIGTERM and was killed")
        # Another process on the devices invalidates the block, and may have caused its failed request.
        if exit_report.device_interference and (failure is None or failure[0] not in _CLEANUPS):
            earlier = f"\n(the block also failed: {failure[1]})" if failure else ""
            failure = (FailureKind.INTERFERENCE,
                       f"{FailureKind.INTERFERENCE}: " + "; ".join(exit_report.device_interference) + earlier)
    if failure is None and protocol.audit:
        problem = audit_problem(recorder.samples)
        failure = (FailureKind.AUDIT, problem) if problem else None
    # A broken baseline or a foreign process invalidates the comparison; it does not fail the candidate.
    invalid = block.letter == "A" or (failure is not None and failure[0] in (FailureKind.INTERRUPTED,
                                                                           FailureKind.INTERFERENCE))
    failure_outcome = Outcome.INCONCLUSIVE if invalid else Outcome.FAIL
    # Nothing recorded keeps a secret: not the log, the failure (log tails), argv, env or command lines.
    scrubber = Scrubber.for_command(server.argv, server.env)
    if log_path.exists():
        scrubber.file(log_path)
    text = scrubber.text(failure[1]) if failure is not None else None
    attention = {**read_attention_backends(log_path).to_dict(),
                 "expected": spec.arms[block.arm].expected_attention_backend}
    try:
        lifecycle = _record_block(spec, block, bundle, server, exit_report, log_path, scrubber, text, attention,
                                  failure, failure_outcome, interruption, contract)
    except DiskFullError:
        if not isinstance(interruption, DiskFullError):
            raise
        raise interruption from None  # the block's record cannot be kept either; --resume finds it incomplete
    if interruption is not None:
        raise interruption
    return BlockResult(block, server.pid, tuple(recorder.samples), Lifecycle.from_record(lifecycle),
                       failure_of(lifecycle))


def _record_block(spec: RunSpec, block: Block, bundle: Bundle, server: ServerProcess, exit_report: ExitReport | None,
                  log_path: Path, scrubber: Scrubber, text: str | None, attention: dict[str, Any],
                  failure: tuple[FailureKind, str] | None, failure_outcome: Outcome,
                  interruption: BaseException | None, contract: ServerContract | None) -> dict[str, Any]:
    """Store the server log and append the block's lifecycle record (with the contract its server recorded at
    its start, None when it never answered); the record."""
    protocol = spec.protocol
    log_rel = bundle.store_log(log_path, f"{block.id}.log") if log_path.exists() else ""
    if text is not None and log_rel:
        text += f"\n(the server log is kept in the bundle: {bundle.path / log_rel})"
    lifecycle = {
        "block": block.id,
        "arm": block.arm,
        "duration": block.duration,
        "position": block.position,
        **server.record().to_dict(),
        "shutdown_budget_s": protocol.shutdown_budget_s,
        "exit": _exit_dict(exit_report),
        "log_relpath": log_rel,
        "attention_backend": attention,
        "failure": text,
        "failure_kind": str(failure[0]) if failure is not None else None,
        "failure_outcome": str(failure_outcome),
        "interrupted": interrupt_name(interruption) if interruption is not None else None,
        "contract": contract.to_dict() if contract is not None else None,
    }
    lifecycle = scrubber.record(lifecycle)
    bundle.append_lifecycle(lifecycle)
    return lifecycle
