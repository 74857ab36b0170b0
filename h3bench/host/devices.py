"""The campaign's NPUs: which chips it reserves, who holds them, and the device lock.

Device identity
---------------
``npu-smi`` numbers NPUs (:mod:`h3bench.host.npusmi`); the runtime (ACL,
``ASCEND_RT_VISIBLE_DEVICES``, ``npu:N``) numbers chips, as logical devices.
On a 910B host the two agree, one chip per NPU. On an A3 host ``npu-smi``
lists NPUs 0–7 with two chips each, and the runtime sees 16 logical devices:
NPU n's chips 0 and 1 are logical devices 2n and 2n+1, which is also what
its Phy-ID column prints. A RunSpec's ``hardware.device_ids`` are logical
devices; :func:`logical_devices` maps them to npu-smi's (NPU, chip).

Who owns a process
------------------
A process on a reserved chip is either the campaign's own (``allowed_pids``,
e.g. LPIPS on an NPU), one of our server's processes (its tree, asked
through :class:`Owner`), or another process:

- before the start, any process that is not the campaign's refuses the
  start (resource interference);
- while the server runs, another process is interference: the block is
  invalid, and the comparison INCONCLUSIVE;
- after the stop, one of our server's processes still listed is incomplete
  cleanup (the candidate's own failure); another process is interference.

Inside a container, drivers before 26.x print the host's PIDs with empty
names, which this PID namespace cannot attribute; such a process counts as
another one, and its description says so. The CI job therefore shares the
host's PID namespace.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import os
import time
from collections.abc import Callable, Collection, Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType
from typing import Any, Protocol

import psutil

from h3bench.errors import InterferenceError, UsageError
from h3bench.host.npusmi import NpuDevice, NpuProcess, NpuReport, read_npu_smi
from h3bench.host.telemetry import Sampler, telemetry_records

__all__ = [
    "DeviceCheck",
    "DeviceFindings",
    "DeviceLock",
    "NpuSmiCheck",
    "Owner",
    "device_checks",
    "logical_devices",
    "processes_on",
]

Chip = tuple[int, int]  # (npu_id, chip_id) as npu-smi prints them


class Owner(Protocol):
    """Whoever can tell whether a PID is one of its processes (a ServerProcess)."""

    def owns(self, pid: int) -> bool:
        """Whether ``pid`` is, or was, one of this server's processes."""


@dataclass(frozen=True)
class DeviceFindings:
    """What a device check found while a server ran and after its stop."""

    leftovers: tuple[str, ...] = ()  # our processes still on the devices: incomplete cleanup
    interference: tuple[str, ...] = ()  # other processes on them: the block is invalid
    notes: tuple[str, ...] = ()  # what could not be watched (npu-smi failing during the block)


class DeviceCheck(Protocol):
    """A device-level check around one server's life (devices.NpuSmiCheck is one).

    The server is its :class:`Owner`: the check asks it which processes on
    the devices are its own.
    """

    def before_start(self) -> None:
        """Raise InterferenceError if the devices are not free for the server."""

    def started(self, owner: Owner) -> None:
        """The server was launched; watch the devices (in the background) until ``stopping``."""

    def stopping(self) -> None:
        """The server is about to be stopped; stop watching."""

    def after_stop(self, owner: Owner) -> DeviceFindings:
        """What the stopped server left on the devices, and what else was on them."""


def logical_devices(report: NpuReport) -> dict[int, NpuDevice]:
    """The runtime's logical device id of every chip: the chips in NPU, then chip order, from 0.

    This is the numbering of a host whose chips are all visible (``npu-smi
    info -m`` prints it as Chip Logic ID): on a 910B host logical device n is
    NPU n; on an A3 host NPU n's chips are logical devices 2n and 2n+1.
    """
    chips = sorted(report.devices, key=lambda d: (d.npu_id, d.chip_id))
    return dict(enumerate(chips))


def processes_on(report: NpuReport, chips: Collection[Chip], allowed_pids: Collection[int] = ()) -> tuple[NpuProcess, ...]:
    """Processes on ``chips`` that are not the campaign's own (``allowed_pids``, by either PID)."""
    return tuple(
        p for p in report.processes
        if (p.npu_id, p.chip_id) in chips and p.pid not in allowed_pids and p.pid_in_container not in allowed_pids
    )


def _unseen_here(process: NpuProcess) -> str:
    """Why a PID cannot be attributed, when it is not a process in this PID namespace."""
    if process.pid_in_container is not None or psutil.pid_exists(process.pid):
        return ""
    return (" (not a process in this PID namespace: inside a container, drivers before 26.x print the host's "
            "PIDs; run the container with --pid=host so that h3bench can tell its own processes)")


class NpuSmiCheck:
    """The ServerProcess device hook for Ascend hosts, with the block's telemetry.

    Before the start it refuses (InterferenceError) a reserved chip that is
    not healthy or that a process other than the campaign's holds. While the
    server runs it samples ``npu-smi`` every ``interval_s`` in a background
    thread: each sample's reserved chips go to ``telemetry`` as records
    (:func:`h3bench.host.telemetry.telemetry_records`), and any process that is
    not the server's is interference. After the stop it sorts what is still
    on the chips into our leftovers and other processes.

    Parameters
    ----------
    devices
        Logical device ids (:func:`logical_devices`) that the server will use.
    allowed_pids
        Processes of the campaign itself that may hold the devices.
    interval_s
        Seconds between telemetry samples; None samples nothing while the server runs.
    telemetry
        Receives each sample's records (one per reserved chip); ``block`` names them.
    """

    def __init__(
        self,
        devices: Sequence[int],
        *,
        allowed_pids: Collection[int] = (),
        executable: str = "npu-smi",
        interval_s: float | None = None,
        telemetry: Callable[[list[dict[str, Any]]], None] | None = None,
        block: str = "",
    ) -> None:
        if not devices:
            raise UsageError("NpuSmiCheck needs at least one logical device id to check")
        self.devices = tuple(devices)
        self.allowed_pids = frozenset(allowed_pids)
        self.executable = executable
        self.interval_s = interval_s
        self.telemetry = telemetry
        self.block = block
        self.reports: list[tuple[str, NpuReport]] = []  # ("before_start" | "after_stop", report)
        self._sampler: Sampler | None = None
        self._owner: Owner | None = None
        self._ours: set[int] = set()  # PIDs seen on the chips that were the server's
        self._interference: dict[tuple[int, int, int], str] = {}
        self._t_start = 0.0

    def _read(self, when: str | None) -> tuple[NpuReport, set[Chip]]:
        report = read_npu_smi(self.executable)
        if when is not None:
            self.reports.append((when, report))
        chips = logical_devices(report)
        missing = sorted(set(self.devices) - set(chips))
        if missing:
            listed = ", ".join(f"{i} (NPU {d.npu_id} chip {d.chip_id})" for i, d in chips.items())
            raise UsageError(f"logical device(s) {missing} not on this host; npu-smi lists {listed}")
        return report, {(chips[i].npu_id, chips[i].chip_id) for i in self.devices}

    def before_start(self) -> None:
        report, chips = self._read("before_start")
        sick = [d for d in report.devices if (d.npu_id, d.chip_id) in chips and not d.healthy]
        if sick:
            raise InterferenceError(
                "unhealthy device: "
                + "; ".join(f"NPU {d.npu_id} chip {d.chip_id} reports health {d.health!r}" for d in sick)
            )
        held = processes_on(report, chips, self.allowed_pids)
        if held:
            raise InterferenceError(
                "resource interference: a process the campaign did not start holds a device: "
                + "; ".join(p.describe() + _unseen_here(p) for p in held),
                holder=", ".join(f"pid {p.pid} ({p.name or 'no name'})" for p in held),
            )

    # -- while the server runs -------------------------------------------------

    def _is_ours(self, owner: Owner, process: NpuProcess) -> bool:
        pids = [process.pid] + ([process.pid_in_container] if process.pid_in_container is not None else [])
        if any(pid in self._ours or owner.owns(pid) for pid in pids):
            self._ours.update(pids)
            return True
        return False

    def _sample(self) -> None:
        t = time.time()
        report, chips = self._read(None)
        if self.telemetry is not None:
            self.telemetry(telemetry_records(t, self.block, (d for d in report.devices if (d.npu_id, d.chip_id) in chips)))
        assert self._owner is not None
        for p in processes_on(report, chips, self.allowed_pids):
            key = (p.pid, p.npu_id, p.chip_id)
            if key not in self._interference and not self._is_ours(self._owner, p):
                self._interference[key] = (f"{p.describe()} appeared while the server ran "
                                           f"({t - self._t_start:.1f} s after its launch){_unseen_here(p)}")

    def started(self, owner: Owner) -> None:
        """The server was launched: watch its devices until :meth:`stopping`."""
        self._owner, self._t_start = owner, time.time()
        if self.interval_s is not None:
            self._sampler = Sampler(self._sample, self.interval_s, name=f"npu-smi telemetry {self.block}")
            self._sampler.start()

    def stopping(self) -> None:
        """The server is about to be stopped: the sampler ends, its last sample written."""
        if self._sampler is not None:
            self._sampler.stop()

    # -- after the stop --------------------------------------------------------

    def after_stop(self, owner: Owner) -> DeviceFindings:
        report, chips = self._read("after_stop")
        leftovers, interference = [], dict(self._interference)
        for p in processes_on(report, chips, self.allowed_pids):
            if self._is_ours(owner, p):
                leftovers.append(f"{p.describe()} still holds the device after the stop")
            else:
                interference.setdefault((p.pid, p.npu_id, p.chip_id),
                                        f"{p.describe()} is on a reserved device after the stop, "
                                        f"and it is not a process of this server{_unseen_here(p)}")
        notes = tuple(self._sampler.errors) if self._sampler is not None else ()
        return DeviceFindings(tuple(leftovers), tuple(interference.values()), notes)


def device_checks(
    kind: str, devices: Iterable[int], *, block: str, interval_s: float,
    telemetry: Callable[[list[dict[str, Any]]], None],
) -> tuple[NpuSmiCheck, ...]:
    """The checks of one block: none on the simulator; on NPU hosts npu-smi around and during the server's life.

    The campaign's own process may hold a device (LPIPS on an NPU).
    """
    if kind == "sim":
        return ()
    return (NpuSmiCheck(tuple(devices), allowed_pids={os.getpid()}, interval_s=interval_s, telemetry=telemetry,
                        block=block),)


class DeviceLock:
    """An exclusive lock so that perf blocks never run at the same time, across processes.

    ``fcntl.flock`` on ``path``; the holder writes its PID into the file so that
    a waiter can name it. The kernel drops the lock when its holder dies.
    ``acquire`` waits up to ``timeout_s`` (so concurrent perf blocks, e.g.
    under xdist, run one after the other), then raises InterferenceError.
    """

    def __init__(self, path: str | os.PathLike[str], *, timeout_s: float = 600.0) -> None:
        self.path = Path(path)
        self.timeout_s = timeout_s
        self._fd: int | None = None

    @property
    def locked(self) -> bool:
        return self._fd is not None

    def acquire(self) -> DeviceLock:
        if self._fd is not None:
            raise UsageError(f"DeviceLock {self.path} is already held by this object; release it first")
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o666)
        deadline = time.monotonic() + self.timeout_s
        delay = 0.01
        while True:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except OSError as exc:
                if exc.errno not in (errno.EAGAIN, errno.EACCES):
                    os.close(fd)
                    raise
            if time.monotonic() >= deadline:
                holder = self.holder()
                os.close(fd)
                raise InterferenceError(
                    f"device lock {self.path} is held by {holder or 'an unknown process'} and was not released "
                    f"within {self.timeout_s:g} s; perf blocks never run concurrently",
                    holder=holder,
                )
            time.sleep(delay)
            delay = min(delay * 2, 0.2)
        os.ftruncate(fd, 0)
        os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
        self._fd = fd
        return self

    def release(self) -> None:
        """Release the lock; releasing an unheld lock does nothing."""
        if self._fd is None:
            return
        fd, self._fd = self._fd, None
        with contextlib.suppress(OSError):
            os.ftruncate(fd, 0)
        os.close(fd)  # closing drops the flock

    def holder(self) -> str | None:
        """``"pid N (name)"`` of the current holder, from the PID it wrote into the lock file."""
        try:
            text = self.path.read_text().strip()
        except OSError:
            return None
        if not text.isdigit():
            return None
        try:
            return f"pid {text} ({psutil.Process(int(text)).name()})"
        except psutil.Error:
            return f"pid {text}"

    def __enter__(self) -> DeviceLock:
        return self.acquire()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.release()
