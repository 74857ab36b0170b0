"""What one server process leaves as evidence: its own record, and what the exit check found after its stop.

:class:`ServerRecord` is what :meth:`~h3bench.server.process.ServerProcess.record`
knows of the process (command, timings, every process seen);
:class:`ExitReport` is what
:meth:`~h3bench.server.process.ServerProcess.verify_exited` found, and
:class:`ExitCheck` its form in the bundle. Both records are parts of one
``lifecycle.jsonl`` line (:class:`h3bench.run.records.Lifecycle`), written
and read by :mod:`h3bench.evidence.codec`. Every field has a default: a line
written by an older version, or by a test, lacks some of them.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any

from h3bench.errors import CleanupError
from h3bench.server.proctree import ProcessInfo
from h3bench.server.startup import StartupPhases

__all__ = ["ExitCheck", "ExitReport", "ServerRecord"]


@dataclass(frozen=True)
class ExitReport:
    """What ``verify_exited`` found after the stop; ``check()`` turns it into an assertion."""

    port: int
    pids_seen: tuple[ProcessInfo, ...]
    escaped: tuple[ProcessInfo, ...]  # seen outside the tree while the server ran
    survivors: tuple[str, ...]  # processes still running or zombies
    port_free: bool
    port_holder: str | None
    device_leftovers: tuple[str, ...]  # our processes still on the devices: incomplete cleanup
    device_interference: tuple[str, ...] = ()  # other processes on them while it ran or after: not cleanup
    device_notes: tuple[str, ...] = ()

    @property
    def problems(self) -> tuple[str, ...]:
        port: tuple[str, ...] = ()
        if not self.port_free:
            port = (f"port {self.port} still taken by {self.port_holder or 'an unknown process'}",)
        return self.survivors + port + self.device_leftovers

    @property
    def ok(self) -> bool:
        return not self.problems

    def check(self) -> ExitReport:
        """Return self if the server left nothing behind, else raise CleanupError."""
        if self.problems:
            raise CleanupError(
                f"the server on port {self.port} did not clean up: " + "; ".join(self.problems),
                survivors=self.problems,
            )
        return self


@dataclass(frozen=True)
class ExitCheck:
    """What the exit check found after the server stopped, as the bundle keeps it (``lifecycle.jsonl``'s ``exit``).

    ``verified`` is False when the check never ran (the server never launched).
    """

    pids_seen: tuple[int, ...] = ()
    escaped: tuple[str, ...] = ()
    survivors: tuple[str, ...] = ()
    port_free: bool | None = None
    port_holder: str | None = None
    device_leftovers: tuple[str, ...] = ()
    device_interference: tuple[str, ...] = ()
    device_notes: tuple[str, ...] = ()
    verified: bool = False

    @classmethod
    def of(cls, report: ExitReport | None) -> ExitCheck:
        """The bundle's form of ``report``: PIDs and one line per escaped process; unverified for None."""
        if report is None:
            return cls()
        return cls(
            pids_seen=tuple(p.pid for p in report.pids_seen),
            escaped=tuple(p.describe() for p in report.escaped),
            survivors=report.survivors,
            port_free=report.port_free,
            port_holder=report.port_holder,
            device_leftovers=report.device_leftovers,
            device_interference=report.device_interference,
            device_notes=report.device_notes,
            verified=True,
        )


@dataclass(frozen=True)
class ServerRecord:
    """What one server process recorded of itself, from launch to proof of exit (part of a lifecycle line)."""

    argv: tuple[str, ...] = ()
    env: dict[str, str] = field(default_factory=dict)  # only the variables the caller set, not the inherited ones
    pid: int | None = None
    host: str | None = None
    port: int | None = None
    log_path: str | None = None
    startup_budget_s: float | None = None
    startup_s: float | None = None  # launch → first 200 from /health
    startup_phases: StartupPhases | None = None  # from its log as it started; None in older lines
    warmup_s: float | None = None
    warmup_steps: int | None = None  # the inference steps each warmup request ran; None in older lines
    stop_budget_s: float | None = None
    shutdown_s: float | None = None  # SIGTERM → no recorded process still running
    graceful: bool | None = None  # False when SIGKILL was needed
    exit_code: int | None = None  # Popen convention: -N means killed by signal N
    exited_before_stop: bool | None = None  # the server died on its own (a crash, or a failed start)
    pids_seen: tuple[ProcessInfo, ...] = ()
    escaped: tuple[ProcessInfo, ...] = ()
    survivors: tuple[str, ...] | None = None  # None until verify_exited ran
    port_free: bool | None = None
    device_leftovers: tuple[str, ...] | None = None
    device_interference: tuple[str, ...] | None = None

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)
