"""The server of one block: its command, port and environment, and its start shown as a step.

:func:`block_server` builds the :class:`~h3bench.server.process.ServerProcess`
of one block (every arm's server gets the same profiler flags when profiling
is on, the campaign and block ids in its environment, and the device checks
of the host); :func:`started` runs it for the block's requests;
:func:`engine_help` records a vllm arm's accepted options before its start.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from pathlib import Path

from h3bench.course.cases import Block
from h3bench.evidence import Bundle
from h3bench.evidence.files import now
from h3bench.host.devices import device_checks
from h3bench.host.staging import STAGED_ENV, staged_path
from h3bench.run.contract import ContractPart, record_help
from h3bench.run.pace import Pace
from h3bench.run.profiling import server_args
from h3bench.runspec import RunSpec, VllmArm
from h3bench.server.ports import LOCALHOST, find_free_port
from h3bench.server.process import ServerProcess
from h3bench.server.proctree import CAMPAIGN_ID_ENV

__all__ = ["BLOCK_ID_ENV", "block_server", "engine_help", "served_model", "started"]

# Every server learns the block it serves (the simulator names the same variable; a test holds both).
BLOCK_ID_ENV = "H3BENCH_BLOCK_ID"


def block_server(
    spec: RunSpec, block: Block, log_path: Path, bundle: Bundle, campaign_id: str | None, profile_dir: Path | None
) -> ServerProcess:
    """The block's server, not started: its arm's command on a free port, its launch recorded before readiness."""
    arm, protocol = spec.arms[block.arm], spec.protocol
    # With profiling on, every server of every arm gets the same profiler flags (h3bench.run.profiling).
    extra = server_args(profile_dir) if profile_dir is not None else []
    port = find_free_port(LOCALHOST)
    env = arm.launch_env()
    if campaign_id:
        env[CAMPAIGN_ID_ENV] = campaign_id
    env[BLOCK_ID_ENV] = block.id  # the simulator draws its process seed from it (h3bench/sim/app.py)
    if spec.staging is not None:  # every arm reads the staged checkpoint (the simulator shortens its load)
        env[STAGED_ENV] = spec.staging.mode

    def launched(server: ServerProcess) -> None:
        # Before readiness: what a resume must sweep if this run is killed now.
        bundle.append_server({"block": block.id, "pid": server.pid, "port": server.port,
                              "server_id": server.server_id, "started_at": now()})

    return ServerProcess(
        [*arm.command(LOCALHOST, port, served_model(spec)), *extra],
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


def served_model(spec: RunSpec) -> str:
    """The checkpoint path every server is given and serves under: the staged copy's, else the spec's."""
    staging = spec.staging
    return spec.model.path if staging is None else staged_path(spec.model.path, staging.mode, staging.target)


@contextlib.contextmanager
def started(server: ServerProcess, pace: Pace, block: Block) -> Iterator[ServerProcess]:
    """``with server:``, the start shown as a step of its own (on an NPU it takes minutes)."""
    with pace.step(block, "start"):
        server.start()
    try:
        yield server
    finally:
        server.stop()


def engine_help(spec: RunSpec, block: Block, bundle: Bundle) -> ContractPart | None:
    """A vllm arm's ``vllm serve --omni --help=all``, run in its environment once per run; None for other arms."""
    arm = spec.arms[block.arm]
    if not isinstance(arm, VllmArm):
        return None
    return record_help(arm.launcher, arm.launch_env(), bundle)
