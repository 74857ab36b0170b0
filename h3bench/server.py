"""Server lifecycle: launch, readiness, logs, graceful stop and the process-tree exit check.

One ``ServerProcess`` is one server process of one block (DESIGN.md): it is
started once, stopped once, and then proven gone. The stop follows upstream's
harness (vllm-omni tests/helpers/runtime.py, REFERENCE §6: SIGTERM to the
parent, wait, then kill the children and the parent) with three changes made
so that the check can be trusted:

- the server runs in its own session, so SIGTERM and SIGKILL reach the whole
  process group at once;
- every process of the server's life is recorded (PID plus create time, so a
  reused PID is never mistaken for a survivor), including workers that escaped
  the tree by re-parenting or by starting their own session: the server's
  environment carries a marker (``H3BENCH_SERVER_ID``) that workers inherit;
- the calling process becomes a child subreaper (Linux), so orphaned workers
  are re-parented to it and reaped here, instead of lingering as zombies under
  an init that does not reap (containers without ``--init``).

Typical use::

    with ServerProcess(argv, port=port, log_path=log) as srv:
        ...                          # requests; srv.snapshot() after each
        srv.record_warmup(seconds)
    srv.verify_exited().check()      # CleanupError if anything survived
    write(srv.record().to_dict())
"""

from __future__ import annotations

import contextlib
import ctypes
import dataclasses
import enum
import errno
import os
import signal
import socket
import subprocess
import sys
import time
import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType
from typing import Any, Protocol

import httpx
import psutil

from h3bench.errors import CleanupError, InterferenceError, ServerStartError, UsageError

__all__ = [
    "LOG_TAIL_LINES",
    "SERVER_ID_ENV",
    "DeviceCheck",
    "ExitReport",
    "LifecycleRecord",
    "ProcessInfo",
    "ServerProcess",
    "ServerState",
    "find_free_port",
    "port_holder",
]

SERVER_ID_ENV = "H3BENCH_SERVER_ID"
LOG_TAIL_LINES = 50
# After SIGKILL the kernel needs a moment to tear a process down; this bounds it.
_KILL_WAIT_S = 5.0
_TAIL_BYTES = 256 * 1024
_PR_SET_CHILD_SUBREAPER = 36


class ServerState(enum.Enum):
    NEW = "new"
    RUNNING = "running"
    STOPPED = "stopped"


class DeviceCheck(Protocol):
    """A device-level check around one server's life (devices.NpuSmiCheck is one)."""

    def before_start(self) -> None:
        """Raise InterferenceError if the devices are not free for the server."""

    def after_stop(self) -> tuple[str, ...]:
        """Describe what the stopped server left on the devices; empty when clean."""


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


@dataclass(frozen=True)
class ExitReport:
    """What ``verify_exited`` found after the stop; ``check()`` turns it into an assertion."""

    port: int
    pids_seen: tuple[ProcessInfo, ...]
    escaped: tuple[ProcessInfo, ...]  # seen outside the tree while the server ran
    survivors: tuple[str, ...]  # processes still running or zombies
    port_free: bool
    port_holder: str | None
    device_leftovers: tuple[str, ...]

    @property
    def problems(self) -> tuple[str, ...]:
        port = ()
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
class LifecycleRecord:
    """The lifecycle evidence of one server process (one line of lifecycle.jsonl)."""

    argv: tuple[str, ...]
    env: dict[str, str]  # only the variables the caller set, not the inherited ones
    pid: int | None
    host: str
    port: int
    log_path: str
    startup_budget_s: float
    startup_s: float | None  # launch → first 200 from /health
    warmup_s: float | None
    stop_budget_s: float | None
    shutdown_s: float | None  # SIGTERM → no recorded process still running
    graceful: bool | None  # False when SIGKILL was needed
    exit_code: int | None  # Popen convention: -N means killed by signal N
    exited_before_stop: bool | None  # the server died on its own (a crash, or a failed start)
    pids_seen: tuple[ProcessInfo, ...]
    escaped: tuple[ProcessInfo, ...]
    survivors: tuple[str, ...] | None  # None until verify_exited ran
    port_free: bool | None
    device_leftovers: tuple[str, ...] | None

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


def find_free_port(host: str = "127.0.0.1") -> int:
    """A port that was free a moment ago (the OS picks it)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((host, 0))
        return int(sock.getsockname()[1])


def port_holder(port: int) -> str | None:
    """Name the process that holds a TCP port, e.g. ``"pid 812 (python3)"``, if it can be found."""
    try:
        conns = [(c.pid, c) for c in psutil.net_connections(kind="inet")]
    except psutil.AccessDenied:  # not root on some systems: ask each process we may inspect
        conns = []
        for proc in psutil.process_iter():
            with contextlib.suppress(psutil.Error):
                conns.extend((proc.pid, c) for c in proc.net_connections(kind="inet"))
    # A listener is the holder; any other socket bound to the port comes second.
    pids = [pid for pid, c in sorted(conns, key=lambda pc: pc[1].status != psutil.CONN_LISTEN)
            if pid and c.laddr and c.laddr.port == port]
    if not pids:
        return None
    try:
        return f"pid {pids[0]} ({psutil.Process(pids[0]).name()})"
    except psutil.Error:
        return f"pid {pids[0]}"


def _port_free(host: str, port: int) -> bool:
    # SO_REUSEADDR as servers (uvicorn) set it: TIME_WAIT leftovers do not count.
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind((host, port))
        except OSError as exc:
            if exc.errno == errno.EADDRINUSE:
                return False
            raise
    return True


def _become_subreaper() -> None:
    # Orphans of the server tree are re-parented to us and reaped here (see module doc).
    if not sys.platform.startswith("linux"):
        return
    ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0)


def _describe_exit(code: int | None) -> str:
    if code is None:
        return "exit code None (still running; killed)"
    if code < 0:
        with contextlib.suppress(ValueError):
            return f"exit code {code} (killed by {signal.Signals(-code).name})"
    return f"exit code {code}"


def _read_tail(path: Path, lines: int) -> str:
    try:
        with path.open("rb") as fh:
            fh.seek(0, os.SEEK_END)
            fh.seek(max(0, fh.tell() - _TAIL_BYTES))
            data = fh.read()
    except FileNotFoundError:
        return ""
    return "\n".join(data.decode("utf-8", "replace").splitlines()[-lines:])


_HINTS = {
    ServerState.NEW: "call start() first",
    ServerState.RUNNING: "call stop() first",
    ServerState.STOPPED: "it has stopped, and a ServerProcess runs only once",
}

_Key = tuple[int, float]  # (pid, create_time): a process's identity across PID reuse


class ServerProcess:
    """One server process: launch, wait for readiness, stop, and verify that it is gone.

    Parameters
    ----------
    argv
        The command, e.g. ``["vllm", "serve", model, "--omni", "--port", "8000", ...]``.
    port, host
        Where the server listens; readiness is ``GET http://host:port/health`` → 200.
    log_path
        File for the server's stdout and stderr. It must not exist yet: each
        server process gets its own log, and logs are evidence.
    env
        Variables added to the inherited environment (and recorded).
    startup_budget_s
        Longest wait for readiness.
    stop_budget_s
        Default wait between SIGTERM and SIGKILL; disclose it, and keep it the
        same for both arms.
    device_checks
        Device-level checks run before the launch and after the stop.
    """

    def __init__(
        self,
        argv: Sequence[str],
        *,
        port: int,
        log_path: str | os.PathLike[str],
        host: str = "127.0.0.1",
        env: Mapping[str, str] | None = None,
        startup_budget_s: float = 600.0,
        stop_budget_s: float = 15.0,
        health_path: str = "/health",
        device_checks: Sequence[DeviceCheck] = (),
        cwd: str | os.PathLike[str] | None = None,
    ) -> None:
        if not argv:
            raise UsageError("ServerProcess needs a command to run; argv is empty")
        self.argv = tuple(str(a) for a in argv)
        self.host = host
        self.port = port
        self.log_path = Path(log_path)
        self.env = dict(env or {})
        self.startup_budget_s = startup_budget_s
        self.stop_budget_s = stop_budget_s
        self.health_url = f"http://{host}:{port}{health_path}"
        self.device_checks = tuple(device_checks)
        self.cwd = cwd
        self.server_id = uuid.uuid4().hex  # the SERVER_ID_ENV marker that its processes inherit
        self._state = ServerState.NEW
        self._proc: subprocess.Popen[bytes] | None = None
        self._t_launch = 0.0
        self._root: psutil.Process | None = None
        self._procs: dict[_Key, psutil.Process] = {}
        self._seen: dict[_Key, ProcessInfo] = {}
        self._escaped: set[_Key] = set()
        self.startup_s: float | None = None
        self.warmup_s: float | None = None
        self.shutdown_s: float | None = None
        self.stop_budget_used_s: float | None = None
        self.graceful: bool | None = None
        self.exit_code: int | None = None
        self.exited_before_stop: bool | None = None
        self._exit_report: ExitReport | None = None

    # -- state ---------------------------------------------------------------

    @property
    def state(self) -> ServerState:
        return self._state

    @property
    def pid(self) -> int | None:
        return None if self._proc is None else self._proc.pid

    @property
    def base_url(self) -> str:
        return f"http://{self.host}:{self.port}"

    def _require(self, state: ServerState, action: str) -> None:
        if self._state is not state:
            raise UsageError(
                f"ServerProcess.{action} needs a {state.value} server, but this one is {self._state.value}: "
                + _HINTS[self._state]
            )

    # -- start ---------------------------------------------------------------

    def start(self) -> ServerProcess:
        """Launch the server and wait for readiness; raises ServerStartError or InterferenceError."""
        self._require(ServerState.NEW, "start()")
        if not _port_free(self.host, self.port):
            holder = port_holder(self.port)
            raise InterferenceError(
                f"port {self.port} on {self.host} is already taken by {holder or 'an unknown process'}; "
                "another server on it would interfere with the measurement",
                port=self.port,
                holder=holder,
            )
        for check in self.device_checks:
            check.before_start()
        self._launch()
        self._wait_ready()
        return self

    def _launch(self) -> None:
        try:
            log = self.log_path.open("xb")
        except FileExistsError as exc:
            raise UsageError(
                f"server log {self.log_path} already exists; each server process needs its own log file"
            ) from exc
        _become_subreaper()
        env = {**os.environ, **self.env, SERVER_ID_ENV: self.server_id}
        self._t_launch = time.perf_counter()
        with log:
            try:
                self._proc = subprocess.Popen(
                    self.argv,
                    env=env,
                    cwd=self.cwd,
                    stdin=subprocess.DEVNULL,
                    stdout=log,
                    stderr=subprocess.STDOUT,
                    start_new_session=True,
                )
            except OSError as exc:
                self._state = ServerState.STOPPED
                raise ServerStartError(
                    f"cannot launch {self.argv[0]!r}: {exc}", log_path=str(self.log_path)
                ) from exc
        self._state = ServerState.RUNNING
        with contextlib.suppress(psutil.NoSuchProcess):
            self._root = psutil.Process(self._proc.pid)
        self._sample()

    def _wait_ready(self) -> None:
        deadline = self._t_launch + self.startup_budget_s
        delay = 0.005
        with httpx.Client(trust_env=False) as http:
            while True:
                code = self._proc.poll()
                if code is not None:
                    self._fail_start(code, f"exited before it was ready, {self._since_launch():.1f} s after launch")
                now = time.perf_counter()
                try:
                    ok = http.get(self.health_url, timeout=max(0.05, min(1.0, deadline - now))).status_code == 200
                except httpx.TransportError:
                    ok = False
                if ok:
                    self.startup_s = self._since_launch()
                    self._sample()
                    return
                if time.perf_counter() >= deadline:
                    budget = f"the startup budget of {self.startup_budget_s:g} s"
                    self._fail_start(None, f"did not answer 200 on {self.health_url} within {budget}")
                time.sleep(min(delay, max(0.0, deadline - time.perf_counter())))
                delay = min(delay * 2, 0.1)

    def _fail_start(self, code: int | None, why: str) -> None:
        # A dead parent can leave workers behind; a live one is killed outright.
        self._terminate(0.0)
        tail = self.log_tail()
        raise ServerStartError(
            f"server {self.argv[0]!r} {why}; {_describe_exit(code)}. "
            f"Last {LOG_TAIL_LINES} lines of {self.log_path}:\n{tail}",
            exit_code=code,
            log_tail=tail,
            log_path=str(self.log_path),
        )

    def _since_launch(self) -> float:
        return time.perf_counter() - self._t_launch

    def poll(self) -> int | None:
        """The server process's exit code if it has exited (a crash), else None."""
        return None if self._proc is None else self._proc.poll()

    def log_tail(self, lines: int = LOG_TAIL_LINES) -> str:
        """The last lines of the server's log."""
        return _read_tail(self.log_path, lines)

    # -- while running -------------------------------------------------------

    def snapshot(self) -> tuple[ProcessInfo, ...]:
        """Record the server's current process tree (call it after each request); return it."""
        self._require(ServerState.RUNNING, "snapshot()")
        return tuple(self._seen[key] for key in self._sample())

    def record_warmup(self, seconds: float) -> None:
        """Record how long the warmup request took; it is kept apart from measured requests."""
        self._require(ServerState.RUNNING, "record_warmup()")
        if not seconds >= 0:
            raise UsageError(f"record_warmup(): the warmup time must be >= 0 s, got {seconds!r}")
        self.warmup_s = float(seconds)

    def _sample(self) -> list[_Key]:
        """Scan for the server's processes, record new ones, and return the keys found."""
        # Running, not merely unreaped: a dead server's workers are orphans, not escapees.
        root_alive = self._root is not None and self._proc.poll() is None
        sid = self._proc.pid  # it leads its own session
        procs = list(psutil.process_iter(["ppid", "name"]))
        children: dict[int, list[psutil.Process]] = {}
        for proc in procs:
            children.setdefault(proc.info["ppid"], []).append(proc)
        found: dict[int, tuple[psutil.Process, str]] = {}
        if root_alive:
            stack = [self._root]
            while stack:
                proc = stack.pop()
                found[proc.pid] = (proc, "tree")
                stack.extend(children.get(proc.pid, ()))
        for proc in procs:
            if proc.pid in found or proc.pid == os.getpid():
                continue
            try:
                if os.getsid(proc.pid) == sid:
                    found[proc.pid] = (proc, "session")
                elif proc.environ().get(SERVER_ID_ENV) == self.server_id:
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
            except psutil.NoSuchProcess:
                continue
            if how != "tree" and root_alive:
                self._escaped.add(key)
            keys.append(key)
        return keys

    # -- stop ----------------------------------------------------------------

    def stop(self, budget_s: float | None = None) -> None:
        """SIGTERM the process group, wait up to the budget, then SIGKILL whatever is left.

        Stopping a stopped server does nothing.
        """
        if self._state is ServerState.STOPPED:
            return
        self._require(ServerState.RUNNING, "stop()")
        budget = self.stop_budget_s if budget_s is None else budget_s
        if not budget >= 0:
            raise UsageError(f"stop(): the budget must be >= 0 s, got {budget!r}")
        self._terminate(budget)

    def _terminate(self, budget: float) -> None:
        self.exited_before_stop = self._proc.poll() is not None
        self._sample()
        self.stop_budget_used_s = budget
        t0 = time.perf_counter()
        self._signal_group(signal.SIGTERM)
        graceful = self._wait_exited(t0 + budget)
        if not graceful:
            self._sample()
            for key in self._census()[0]:
                with contextlib.suppress(psutil.Error):
                    self._procs[key].kill()
            self._signal_group(signal.SIGKILL)
            self._wait_exited(time.perf_counter() + _KILL_WAIT_S)
        self.shutdown_s = time.perf_counter() - t0
        self.graceful = graceful
        self.exit_code = self._proc.poll()
        self._state = ServerState.STOPPED

    def _signal_group(self, sig: signal.Signals) -> None:
        # The server leads its own session, so its PID is the group id; the kernel
        # never hands that id to a new process while a member of the group lives.
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(self._proc.pid, sig)

    def _census(self) -> tuple[list[_Key], list[_Key]]:
        """Recorded processes that still exist: (running, zombies), after reaping ours."""
        self._proc.poll()
        running: list[_Key] = []
        zombies: list[_Key] = []
        for key, proc in self._procs.items():
            try:
                if not proc.is_running():
                    continue
                if proc.status() != psutil.STATUS_ZOMBIE:
                    running.append(key)
                    continue
                if proc.ppid() == os.getpid() and proc.pid != self._proc.pid:
                    os.waitpid(proc.pid, os.WNOHANG)  # an orphan re-parented to us: reap it
                    if not proc.is_running():
                        continue
            except (psutil.NoSuchProcess, ChildProcessError):
                continue
            zombies.append(key)  # only its parent can reap it; verify_exited reports it
        return running, zombies

    def _wait_exited(self, deadline: float) -> bool:
        delay = 0.002
        while True:
            # Exited means not running: a zombie has exited, and only its parent can reap it.
            if not self._census()[0]:
                self._sample()  # ...and a fresh scan finds nothing new running either
                if not self._census()[0]:
                    return True
            if time.perf_counter() >= deadline:
                return False
            time.sleep(max(0.0, min(delay, deadline - time.perf_counter())))
            delay = min(delay * 2, 0.05)

    # -- after the stop ------------------------------------------------------

    def verify_exited(self) -> ExitReport:
        """Check that every process seen is gone (no zombies), the port is free and the devices are released."""
        self._require(ServerState.STOPPED, "verify_exited()")
        self._sample()  # anything that appeared after the stop
        running, zombies = self._census()
        survivors = [f"{self._seen[k].describe()} is still running" for k in running]
        survivors += [f"{self._seen[k].describe()} is a zombie (parent pid {_ppid(self._procs[k])})" for k in zombies]
        free = _port_free(self.host, self.port)
        self._exit_report = ExitReport(
            port=self.port,
            pids_seen=tuple(self._seen.values()),
            escaped=self._escaped_infos(),
            survivors=tuple(survivors),
            port_free=free,
            port_holder=None if free else port_holder(self.port),
            device_leftovers=tuple(item for check in self.device_checks for item in check.after_stop()),
        )
        return self._exit_report

    def _escaped_infos(self) -> tuple[ProcessInfo, ...]:
        return tuple(sorted((self._seen[k] for k in self._escaped), key=lambda p: p.create_time))

    def record(self) -> LifecycleRecord:
        """The lifecycle evidence so far; verification fields stay None until verify_exited()."""
        report = self._exit_report
        return LifecycleRecord(
            argv=self.argv,
            env=dict(self.env),
            pid=self.pid,
            host=self.host,
            port=self.port,
            log_path=str(self.log_path),
            startup_budget_s=self.startup_budget_s,
            startup_s=self.startup_s,
            warmup_s=self.warmup_s,
            stop_budget_s=self.stop_budget_used_s,
            shutdown_s=self.shutdown_s,
            graceful=self.graceful,
            exit_code=self.exit_code,
            exited_before_stop=self.exited_before_stop,
            pids_seen=tuple(self._seen.values()),
            escaped=self._escaped_infos(),
            survivors=None if report is None else report.survivors,
            port_free=None if report is None else report.port_free,
            device_leftovers=None if report is None else report.device_leftovers,
        )

    # -- context manager -----------------------------------------------------

    def __enter__(self) -> ServerProcess:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()

    def __repr__(self) -> str:
        return f"<ServerProcess {self._state.value} pid={self.pid} {self.base_url}>"


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
