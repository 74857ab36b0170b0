"""NPU inventory and interference checks (``npu-smi info``), and the device lock.

``npu-smi info`` prints two tables (samples in ``samples/npu-smi/``, REFERENCE §6):

- devices: two rows per chip. The first has ``NPU  Name | Health | Power Temp
  Hugepages``, the second ``Chip [Phy-ID] | Bus-Id | AICore Memory-Usage
  HBM-Usage``. 910B hosts print one chip per NPU and no Phy-ID; dual-die
  910C/950 hosts print two chips per NPU (chip 0 and 1), each with its Phy-ID;
- processes: ``NPU  Chip | Process id | Process name | Process memory(MB)``,
  newer drivers add ``| Process id in container``, and an idle NPU prints
  ``No running processes found in NPU n``.

Devices are named by NPU id as ``npu-smi`` prints it; on a dual-die host a
check of an NPU covers both of its chips.

A process on one of the campaign's NPUs that the campaign did not start is
resource interference: the block must not be measured (campaign protocol,
REFERENCE §8). A process still on them after the server stopped means a worker
did not release its device: incomplete cleanup.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import os
import re
import shutil
import subprocess
import time
from collections.abc import Collection, Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType

import psutil

from h3bench.errors import InterferenceError, ServerError, UsageError

__all__ = [
    "DEFAULT_LOCK_PATH",
    "DeviceLock",
    "NpuDevice",
    "NpuProcess",
    "NpuReport",
    "NpuSmiCheck",
    "foreign_processes",
    "parse_npu_smi",
    "read_npu_smi",
]

DEFAULT_LOCK_PATH = Path("/tmp/h3bench-devices.lock")

_BUS_ID = re.compile(r"^[0-9A-Fa-f]{4,8}:[0-9A-Fa-f]{2}:[0-9A-Fa-f]{2}\.[0-9A-Fa-f]$")
_USAGE = re.compile(r"(\d+)\s*/\s*(\d+)")
_NPU_NAME = re.compile(r"^(\d+)\s+(\S.*)$")
_CHIP = re.compile(r"^(\d+)(?:\s+(\d+))?$")
_VERSION = re.compile(r"npu-smi\s+(\S+)")


@dataclass(frozen=True)
class NpuDevice:
    """One chip as ``npu-smi info`` lists it (a 910B NPU has one, a 910C/950 NPU two)."""

    npu_id: int
    chip_id: int
    phy_id: int | None  # only printed on dual-die hosts
    name: str
    health: str
    bus_id: str
    hbm_used_mb: int
    hbm_total_mb: int

    @property
    def healthy(self) -> bool:
        return self.health == "OK"


@dataclass(frozen=True)
class NpuProcess:
    npu_id: int
    chip_id: int
    pid: int
    name: str
    memory_mb: int
    pid_in_container: int | None = None  # newer drivers print both PIDs

    def describe(self) -> str:
        return f"pid {self.pid} ({self.name}) on NPU {self.npu_id} chip {self.chip_id}, {self.memory_mb} MB"


@dataclass(frozen=True)
class NpuReport:
    version: str
    devices: tuple[NpuDevice, ...]
    processes: tuple[NpuProcess, ...]

    @property
    def npu_ids(self) -> tuple[int, ...]:
        return tuple(sorted({d.npu_id for d in self.devices}))


def _cells(line: str) -> list[str]:
    return [cell.strip() for cell in line.strip().strip("|").split("|")]


def parse_npu_smi(text: str) -> NpuReport:
    """Parse the output of ``npu-smi info`` (910B and dual-die 910C/950 layouts)."""
    version = ""
    devices: list[NpuDevice] = []
    processes: list[NpuProcess] = []
    in_processes = False
    pending: tuple[int, str, str] | None = None  # (npu, name, health) from a chip's first row
    for line in (raw.strip() for raw in text.splitlines()):
        if not version and (m := _VERSION.search(line)):
            version = m.group(1)
        if not line.startswith("|"):
            continue
        cells = _cells(line)
        if len(cells) > 1 and cells[1].startswith("Process id"):
            in_processes = True
            continue
        if in_processes:
            if len(cells) >= 4 and (chip := _CHIP.match(cells[0])) and chip.group(2) and cells[1].isdigit():
                in_container = cells[4] if len(cells) > 4 else ""
                processes.append(
                    NpuProcess(
                        npu_id=int(chip.group(1)),
                        chip_id=int(chip.group(2)),
                        pid=int(cells[1]),
                        name=cells[2],
                        memory_mb=int(cells[3]) if cells[3].isdigit() else 0,
                        pid_in_container=int(in_container) if in_container.isdigit() else None,
                    )
                )
            continue
        if len(cells) < 3:
            continue
        if _BUS_ID.match(cells[1]) and (chip := _CHIP.match(cells[0])) and pending is not None:
            usage = _USAGE.findall(cells[2])
            if not usage:
                raise ServerError(f"npu-smi: no HBM usage in row {line!r}")
            used, total = usage[-1]  # Memory-Usage comes first, HBM-Usage last
            npu_id, name, health = pending
            devices.append(
                NpuDevice(
                    npu_id=npu_id,
                    chip_id=int(chip.group(1)),
                    phy_id=int(chip.group(2)) if chip.group(2) else None,
                    name=name,
                    health=health,
                    bus_id=cells[1],
                    hbm_used_mb=int(used),
                    hbm_total_mb=int(total),
                )
            )
            pending = None
        elif m := _NPU_NAME.match(cells[0]):
            pending = (int(m.group(1)), m.group(2), cells[1])
    if not devices:
        head = "\n".join(text.splitlines()[:8])
        raise ServerError(f"npu-smi info printed no device table that h3bench can read; it began:\n{head}")
    return NpuReport(version=version, devices=tuple(devices), processes=tuple(processes))


def read_npu_smi(executable: str = "npu-smi", *, timeout_s: float = 60.0) -> NpuReport:
    """Run ``npu-smi info`` and parse it."""
    path = shutil.which(executable)
    if path is None:
        raise UsageError(
            f"{executable!r} is not on PATH; device checks need the Ascend driver tools "
            "(on a host without NPUs, run against the simulator with no device checks)"
        )
    try:
        proc = subprocess.run([path, "info"], capture_output=True, text=True, timeout=timeout_s)
    except subprocess.TimeoutExpired as exc:
        raise ServerError(f"{path} info gave no answer within {timeout_s:g} s") from exc
    if proc.returncode != 0:
        raise ServerError(f"{path} info failed with exit code {proc.returncode}: {proc.stderr.strip()[:500]}")
    return parse_npu_smi(proc.stdout)


def foreign_processes(
    report: NpuReport, allowed_pids: Collection[int], devices: Iterable[int] | None = None
) -> tuple[NpuProcess, ...]:
    """Processes on ``devices`` (all NPUs if None) whose PID is not in ``allowed_pids``.

    Either PID counts: the host's, or the one inside the container, since
    ``npu-smi`` may run on either side of a container boundary.
    """
    wanted = None if devices is None else set(devices)
    return tuple(
        p
        for p in report.processes
        if (wanted is None or p.npu_id in wanted)
        and p.pid not in allowed_pids
        and p.pid_in_container not in allowed_pids
    )


class NpuSmiCheck:
    """The ServerProcess device hook for Ascend hosts.

    Before the start, it refuses (InterferenceError) when a process that the
    campaign did not start holds one of ``devices``, or when one of their
    chips is not healthy. After the stop, it reports every process still on
    ``devices``: the server's workers must have released them.

    Parameters
    ----------
    devices
        NPU ids (as ``npu-smi info`` prints them) that the server will use.
    allowed_pids
        Processes of the campaign itself that may hold the devices.
    """

    def __init__(
        self,
        devices: Sequence[int],
        *,
        allowed_pids: Collection[int] = (),
        executable: str = "npu-smi",
    ) -> None:
        if not devices:
            raise UsageError("NpuSmiCheck needs at least one NPU id to check")
        self.devices = tuple(devices)
        self.allowed_pids = frozenset(allowed_pids)
        self.executable = executable
        self.reports: list[tuple[str, NpuReport]] = []  # ("before_start" | "after_stop", report)

    def _read(self, when: str) -> NpuReport:
        report = read_npu_smi(self.executable)
        self.reports.append((when, report))
        missing = sorted(set(self.devices) - set(report.npu_ids))
        if missing:
            raise UsageError(f"NPU {missing} not on this host; npu-smi lists NPUs {list(report.npu_ids)}")
        return report

    def before_start(self) -> None:
        report = self._read("before_start")
        sick = [d for d in report.devices if d.npu_id in self.devices and not d.healthy]
        if sick:
            raise InterferenceError(
                "unhealthy device: "
                + "; ".join(f"NPU {d.npu_id} chip {d.chip_id} reports health {d.health!r}" for d in sick)
            )
        foreign = foreign_processes(report, self.allowed_pids, self.devices)
        if foreign:
            raise InterferenceError(
                "resource interference: a process the campaign did not start holds a device: "
                + "; ".join(p.describe() for p in foreign),
                holder=", ".join(f"pid {p.pid} ({p.name})" for p in foreign),
            )

    def after_stop(self) -> tuple[str, ...]:
        report = self._read("after_stop")
        return tuple(
            f"{p.describe()} still holds the device after the stop"
            for p in foreign_processes(report, self.allowed_pids, self.devices)
        )


class DeviceLock:
    """An exclusive lock so that perf blocks never run at the same time, across processes.

    ``fcntl.flock`` on ``path``; the holder writes its PID into the file so that
    a waiter can name it. The kernel drops the lock when its holder dies.
    ``acquire`` waits up to ``timeout_s`` (so concurrent perf blocks, e.g.
    under xdist, run one after the other), then raises InterferenceError.
    """

    def __init__(self, path: str | os.PathLike[str] = DEFAULT_LOCK_PATH, *, timeout_s: float = 600.0) -> None:
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
