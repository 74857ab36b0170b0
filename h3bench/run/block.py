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
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from h3bench.course.cases import Block
from h3bench.errors import DiskFullError
from h3bench.evidence import Bundle
from h3bench.evidence.codec import to_json
from h3bench.evidence.scrub import Scrubber
from h3bench.host.devices import DeviceLock
from h3bench.outcome import Outcome
from h3bench.run.client import VideoClient
from h3bench.run.contract import ServerContract, record_openapi
from h3bench.run.failures import audit_problem, classify, failure_outcome, interrupt_name, stops_the_campaign
from h3bench.run.launch import block_server, engine_help, served_model, started
from h3bench.run.measure import Measure, PlainMeasure
from h3bench.run.pace import Pace
from h3bench.run.progress import Progress
from h3bench.run.recorder import Recorder
from h3bench.run.records import BlockResult, FailureKind, Lifecycle
from h3bench.run.script import Script, formal
from h3bench.runspec import RunSpec
from h3bench.server.log import read_attention_backends, require_attention_backend
from h3bench.server.process import ServerProcess
from h3bench.server.record import ExitCheck, ExitReport

__all__ = ["run_block"]


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
    server = block_server(spec, block, log_path, bundle, campaign_id, profile_dir)
    recorder = Recorder(spec, block, bundle, inputs, scratch, pace, phase)
    raised: BaseException | None = None
    contract: ServerContract | None = None
    try:
        lock = DeviceLock(device_lock) if device_lock is not None else contextlib.nullcontext()
        with lock:
            help_part = engine_help(spec, block, bundle)
            with started(server, pace, block):
                # What the engine says it accepts, before anything else talks to it.
                contract = ServerContract(record_openapi(server.base_url, bundle), help_part)
                # Before any request: a server on the wrong attention backend measures something else.
                require_attention_backend(spec.arms[block.arm].expected_attention_backend, log_path)
                recorder.ready(server.base_url)
                with VideoClient(server.base_url, model=served_model(spec),
                                 timeout=protocol.request_timeout_s) as client:
                    (script or formal)(recorder, client, server, measure)
                    if profile and profile_dir is not None:
                        recorder.profiled(client, profile_dir)
    except BaseException as exc:  # the server is stopped; what ended the block is classified below
        raised = exc
    # An interrupt, a signal or a full disk is recorded, then raised again: the campaign cannot go on.
    interruption = raised if raised is not None and stops_the_campaign(raised) else None
    exit_report = server.verify_exited() if server.pid is not None else None
    failure = classify(raised, exit_report, graceful=server.graceful, shutdown_budget_s=protocol.shutdown_budget_s,
                       audit=audit_problem(recorder.samples) if protocol.audit else None)
    outcome = failure_outcome(block, failure[0] if failure is not None else None)
    # Nothing recorded keeps a secret: not the log, the failure (log tails), argv, env or command lines.
    scrubber = Scrubber.for_command(server.argv, server.env)
    if log_path.exists():
        scrubber.file(log_path)
    text = scrubber.text(failure[1]) if failure is not None else None
    attention = {**to_json(read_attention_backends(log_path)),
                 "expected": spec.arms[block.arm].expected_attention_backend}
    try:
        lifecycle = _record_block(spec, block, bundle, server, exit_report, log_path, scrubber, text, attention,
                                  failure, outcome, interruption, contract)
    except DiskFullError:
        if not isinstance(interruption, DiskFullError):
            raise
        raise interruption from None  # the block's record cannot be kept either; --resume finds it incomplete
    if interruption is not None:
        raise interruption
    return BlockResult(block, server.pid, tuple(recorder.samples), lifecycle, lifecycle.recorded_failure)


def _record_block(spec: RunSpec, block: Block, bundle: Bundle, server: ServerProcess, exit_report: ExitReport | None,
                  log_path: Path, scrubber: Scrubber, text: str | None, attention: dict[str, Any],
                  failure: tuple[FailureKind, str] | None, outcome: Outcome,
                  interruption: BaseException | None, contract: ServerContract | None) -> Lifecycle:
    """Store the server log and append the block's lifecycle record (with the contract its server recorded at
    its start, None when it never answered); the record, as the bundle keeps it (scrubbed)."""
    log_rel = bundle.store_log(log_path, f"{block.id}.log") if log_path.exists() else ""
    if text is not None and log_rel:
        text += f"\n(the server log is kept in the bundle: {bundle.path / log_rel})"
    lifecycle = Lifecycle(
        block=block.id,
        arm=block.arm,
        duration=block.duration,
        position=block.position,
        server=server.record(),
        shutdown_budget_s=spec.protocol.shutdown_budget_s,
        exit=ExitCheck.of(exit_report),
        log_relpath=log_rel,
        attention_backend=attention,
        failure=text,
        failure_kind=failure[0] if failure is not None else None,
        failure_outcome=outcome,
        interrupted=interrupt_name(interruption) if interruption is not None else None,
        contract=contract,
    )
    record = scrubber.record(lifecycle.to_record())
    bundle.append_lifecycle(record)
    return Lifecycle.from_record(record)
