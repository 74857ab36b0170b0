"""The process tree of one server: every process of its life, found and stopped for certain.

A process is identified by its PID and create time, so a reused PID is never
mistaken for a survivor. A server's processes are found three ways:

- ``tree``: descendants of the server process;
- ``session``: members of its session (it leads its own, so one signal to the
  group reaches all of them);
- ``marker``: processes whose environment carries the server's marker
  (``H3BENCH_SERVER_ID``), which workers inherit even after they re-parent or
  start a session of their own (unless they retitle themselves with
  ``setproctitle``, as vLLM-Omni's diffusion workers do: the marker can then
  not be read, and the session finds them).

The caller also becomes a child subreaper (Linux), so orphaned workers are
re-parented to it and reaped here, instead of lingering as zombies under an
init that does not reap (containers without ``--init``).
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import signal
import subprocess
import sys
import time
from dataclasses import dataclass

import psutil

from h3bench import interrupts

__all__ = [
    "CAMPAIGN_ID_ENV",
    "SERVER_ID_ENV",
    "ProcessInfo",
    "ProcessTree",
    "become_subreaper",
    "describe_exit",
    "die_with_parent",
    "marked_processes",
    "session_processes",
    "stop_processes",
]

SERVER_ID_ENV = "H3BENCH_SERVER_ID"
CAMPAIGN_ID_ENV = "H3BENCH_CAMPAIGN_ID"  # every server of one campaign run carries it, for the resume's sweep
_PR_SET_PDEATHSIG = 1
_PR_SET_CHILD_SUBREAPER = 36
# Resolved once, so that the forked child only makes the call (no lookup, no lock).
_prctl = ctypes.CDLL(None, use_errno=True).prctl if sys.platform.startswith("linux") else None

Key = tuple[int, float]  # (pid, create_time): a process's identity across PID reuse


def describe_exit(code: int | None) -> str:
    """A process exit code in words (Popen convention): ``exit code 1``, ``killed by SIGKILL``."""
    if code is None:
        return "still running"
    if code < 0:
        try:
            return f"killed by {signal.Signals(-code).name}"
        except ValueError:
            return f"killed by signal {-code}"
    return f"exit code {code}"


def become_subreaper() -> None:
    """Orphans of our children's trees are re-parented to this process, and reaped here (Linux only)."""
    if _prctl is not None:
        _prctl(_PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0)


def die_with_parent() -> None:
    """In a forked child before exec: SIGTERM when the parent dies, even by SIGKILL or the OOM killer (Linux).

    The signal survives exec, so the server stops its workers as at a normal stop.
    """
    if _prctl is not None:
        _prctl(_PR_SET_PDEATHSIG, signal.SIGTERM, 0, 0, 0)


def marked_processes(name: str, value: str) -> list[psutil.Process]:
    """Every process whose environment has ``name=value`` (the ones we may read)."""
    found = []
    for proc in psutil.process_iter():
        if proc.pid == os.getpid():
            continue
        try:
            if proc.environ().get(name) == value:
                found.append(proc)
        except (OSError, psutil.Error):
            continue  # gone, a zombie, or not ours to read
    return found


def session_processes(sid: int) -> list[psutil.Process]:
    """Every process of session ``sid`` (but this one): a server's own session, whatever its members' environments say.

    vLLM-Omni titles its diffusion workers with ``setproctitle``, which
    overwrites the memory ``/proc/<pid>/environ`` is read from: a worker's
    marker can no longer be read (seen by the real-engine conformance lane),
    but it stays in its server's session.
    """
    found = []
    for proc in psutil.process_iter():
        if proc.pid == os.getpid():
            continue
        with contextlib.suppress(OSError):
            if os.getsid(proc.pid) == sid:
                found.append(proc)
    return found


def stop_processes(procs: list[psutil.Process], budget_s: float) -> list[str]:
    """SIGTERM ``procs``, SIGKILL what is left after ``budget_s``; describe each process stopped."""
    described = []
    for proc in procs:
        with contextlib.suppress(psutil.Error):
            described.append(f"pid {proc.pid} ({proc.name()}: {' '.join(_cmdline(proc))[:200]})")
            proc.terminate()
    _, alive = psutil.wait_procs(procs, timeout=budget_s)
    for proc in alive:
        with contextlib.suppress(psutil.Error):
            proc.kill()
    psutil.wait_procs(alive, timeout=5.0)
    return described


@dataclass(frozen=True)
class ProcessInfo:
    """One process seen in the server's tree, identified by PID and create time."""

    pid: int
    ppid: int
    create_time: float
    name: str
    cmdline: tuple[str, ...]
    found_by: str  # "tree" (descendant of the server), "session" or "marker"

    def describe(self) -> str:
        command = " ".join(self.cmdline) or self.name
        return f"pid {self.pid} ({self.name}: {command[:200]})"


class ProcessTree:
    """Every process that one server process and its workers ever had, from launch to proof of exit."""

    def __init__(self, popen: subprocess.Popen[bytes], marker: str) -> None:
        self.popen = popen
        self.marker = marker
        self._seen: dict[Key, ProcessInfo] = {}
        self._procs: dict[Key, psutil.Process] = {}
        self._escaped: set[Key] = set()
        self._pids: set[int] = set()  # every PID recorded, for owns() from another thread
        self._root: psutil.Process | None = None
        # Every process the server made, or that carries its marker, started after it: an older one need not be
        # read (its environment is the costly read of a scan, and a busy host runs hundreds of processes).
        self._born: float | None = None
        with contextlib.suppress(psutil.NoSuchProcess):
            self._root = psutil.Process(popen.pid)
            self._born = self._root.create_time()

    @property
    def seen(self) -> tuple[ProcessInfo, ...]:
        return tuple(self._seen.values())

    @property
    def escaped(self) -> tuple[ProcessInfo, ...]:
        """Processes found outside the tree while the server ran (re-parented or detached workers)."""
        return tuple(sorted((self._seen[k] for k in self._escaped), key=lambda p: p.create_time))

    def owns(self, pid: int) -> bool:
        """Whether ``pid`` was recorded in this tree, or is a live process of this server now.

        Reads no state that :meth:`scan` changes in place, so another thread may ask.
        """
        if pid in self._pids:
            return True
        try:
            proc = psutil.Process(pid)
            return os.getsid(pid) == self.popen.pid or proc.environ().get(SERVER_ID_ENV) == self.marker
        except (OSError, psutil.Error):
            return False

    def info(self, key: Key) -> ProcessInfo:
        return self._seen[key]

    def scan(self) -> list[Key]:
        """Find the server's processes now, record new ones, and return the keys found."""
        with interrupts.deferred():  # an interrupt inside psutil would leave /proc files open
            return self._scan()

    def _scan(self) -> list[Key]:
        # Running, not merely unreaped: a dead server's workers are orphans, not escapees.
        root_alive = self._root is not None and self.popen.poll() is None
        sid = self.popen.pid  # it leads its own session
        procs = list(psutil.process_iter(["ppid", "name", "create_time"]))
        children: dict[int, list[psutil.Process]] = {}
        for proc in procs:
            children.setdefault(proc.info["ppid"], []).append(proc)
        found: dict[int, tuple[psutil.Process, str]] = {}
        if root_alive and self._root is not None:
            stack = [self._root]
            while stack:
                proc = stack.pop()
                found[proc.pid] = (proc, "tree")
                stack.extend(children.get(proc.pid, ()))
        for proc in procs:
            if proc.pid in found or proc.pid == os.getpid() or self._older(proc.info["create_time"]):
                continue
            try:
                if os.getsid(proc.pid) == sid:
                    found[proc.pid] = (proc, "session")
                elif proc.environ().get(SERVER_ID_ENV) == self.marker:
                    found[proc.pid] = (proc, "marker")
            except (OSError, psutil.Error):
                continue  # gone, a zombie (no environ) or not ours to read
        keys = []
        for proc, how in found.values():
            try:
                key = (proc.pid, proc.create_time())
                if key not in self._seen:
                    with proc.oneshot():
                        self._seen[key] = ProcessInfo(
                            pid=proc.pid,
                            ppid=proc.ppid(),
                            create_time=key[1],
                            name=proc.name(),
                            cmdline=tuple(_cmdline(proc)),
                            found_by=how,
                        )
                    self._procs[key] = proc
                    self._pids.add(proc.pid)
            except psutil.NoSuchProcess:
                continue
            if how != "tree" and root_alive:
                self._escaped.add(key)
            keys.append(key)
        return keys

    def _older(self, create_time: float | None) -> bool:
        """Started before the server (an unreadable start time is not)."""
        return self._born is not None and create_time is not None and create_time < self._born

    def census(self) -> tuple[list[Key], list[Key]]:
        """Recorded processes that still exist: (running, zombies), after reaping ours."""
        with interrupts.deferred():
            return self._census()

    def _census(self) -> tuple[list[Key], list[Key]]:
        self.popen.poll()
        running: list[Key] = []
        zombies: list[Key] = []
        for key, proc in self._procs.items():
            try:
                if not proc.is_running():
                    continue
                if proc.status() != psutil.STATUS_ZOMBIE:
                    running.append(key)
                    continue
                if proc.ppid() == os.getpid() and proc.pid != self.popen.pid:
                    os.waitpid(proc.pid, os.WNOHANG)  # an orphan re-parented to us: reap it
                    if not proc.is_running():
                        continue
            except (psutil.NoSuchProcess, ChildProcessError):
                continue
            zombies.append(key)  # only its parent can reap it; the exit check reports it
        return running, zombies

    def signal_group(self, sig: signal.Signals) -> None:
        # The server leads its own session, so its PID is the group id; the kernel
        # never hands that id to a new process while a member of the group lives.
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(self.popen.pid, sig)

    def kill_all(self) -> None:
        """SIGKILL every recorded process still running, and the whole group."""
        self.scan()
        for key in self.census()[0]:
            with contextlib.suppress(psutil.Error):
                self._procs[key].kill()
        self.signal_group(signal.SIGKILL)

    def wait_exited(self, deadline: float) -> bool:
        """Wait until no recorded process is running (zombies have exited); False at the deadline."""
        delay = 0.002
        while True:
            if not self.census()[0]:
                self.scan()  # ...and a fresh scan finds nothing new running either
                if not self.census()[0]:
                    return True
            if time.perf_counter() >= deadline:
                return False
            time.sleep(max(0.0, min(delay, deadline - time.perf_counter())))
            delay = min(delay * 2, 0.05)

    def survivors(self) -> list[str]:
        """One line per recorded process still running, or a zombie nobody reaped."""
        self.scan()  # anything that appeared after the stop
        running, zombies = self.census()
        lines = [f"{self._seen[k].describe()} is still running" for k in running]
        lines += [f"{self._seen[k].describe()} is a zombie (parent pid {_ppid(self._procs[k])})" for k in zombies]
        return lines


def _ppid(proc: psutil.Process) -> int | str:
    try:
        return proc.ppid()
    except psutil.Error:
        return "unknown"


def _cmdline(proc: psutil.Process) -> list[str]:
    try:
        return proc.cmdline()
    except psutil.Error:  # zombies have no command line
        return []
