"""Server lifecycle: launch, readiness, logs, graceful stop and the process-tree exit check.

One ``ServerProcess`` is one server process of one block: it is started
once, stopped once, and then proven gone. The stop follows upstream's harness
(vLLM-Omni's ``tests/helpers/runtime.py``: SIGTERM to the parent, wait, then
kill the children and the parent) with changes made so that the check can be
trusted: the server runs in its own session, so SIGTERM and SIGKILL reach the
whole process group at once, and every process of its life is recorded and
proven gone (:mod:`h3bench.server.proctree`). A harness that is killed cannot
stop its server: the server gets a parent-death signal, and a guard that
outlives the harness stops what is left of it (:mod:`h3bench.server.guard`).

Typical use::

    with ServerProcess(argv, port=port, log_path=log) as srv:
        ...                          # requests; srv.snapshot() after each
        srv.record_warmup(seconds)
    srv.verify_exited().check()      # CleanupError if anything survived
    srv.record()                     # the ServerRecord of a lifecycle line
"""

from __future__ import annotations

import enum
import os
import signal
import subprocess
import time
import uuid
import weakref
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from types import TracebackType

import httpx

from h3bench import interrupts
from h3bench.errors import InterferenceError, ServerStartError, UsageError
from h3bench.host.devices import DeviceCheck
from h3bench.server import localhttp
from h3bench.server.guard import Guard
from h3bench.server.ports import port_free, port_holder
from h3bench.server.proctree import SERVER_ID_ENV, ProcessInfo, ProcessTree, become_subreaper, describe_exit, die_with_parent
from h3bench.server.record import ExitReport, ServerRecord
from h3bench.server.startup import LogWatch, StartupPhases

__all__ = [
    "LOG_TAIL_LINES",
    "SERVER_ID_ENV",
    "DeviceCheck",
    "ExitReport",
    "ProcessInfo",
    "ServerProcess",
    "ServerRecord",
    "ServerState",
    "kill_live_servers",
]

LOG_TAIL_LINES = 50
_LIVE: weakref.WeakSet[ServerProcess] = weakref.WeakSet()  # servers launched and not yet stopped
# After SIGKILL the kernel needs a moment to tear a process down; this bounds it.
_KILL_WAIT_S = 5.0
_TAIL_BYTES = 256 * 1024


class ServerState(enum.Enum):
    NEW = "new"
    RUNNING = "running"
    STOPPED = "stopped"


def _read_tail(path: Path, lines: int) -> str:
    try:
        with path.open("rb") as fh:
            fh.seek(0, os.SEEK_END)
            fh.seek(max(0, fh.tell() - _TAIL_BYTES))
            data = fh.read()
    except FileNotFoundError:
        return ""
    return "\n".join(data.decode("utf-8", "replace").splitlines()[-lines:])


def kill_live_servers() -> None:
    """SIGKILL the tree of every server of this process that has not stopped yet."""
    for server in list(_LIVE):
        server.kill_now()


interrupts.on_second_signal(kill_live_servers)


_HINTS = {
    ServerState.NEW: "call start() first",
    ServerState.RUNNING: "call stop() first",
    ServerState.STOPPED: "it has stopped, and a ServerProcess runs only once",
}


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
    on_launch
        Called once the process exists, before readiness (the campaign records it for a resume).
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
        on_launch: Callable[[ServerProcess], None] | None = None,
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
        self.on_launch = on_launch
        self.server_id = uuid.uuid4().hex  # the SERVER_ID_ENV marker that its processes inherit
        self._state = ServerState.NEW
        self._proc: subprocess.Popen[bytes] | None = None
        self._tree: ProcessTree | None = None
        self._guard: Guard | None = None  # stops the server if this process dies before it does
        self._t_launch = 0.0
        self.startup_s: float | None = None
        self.startup_phases: StartupPhases | None = None  # read from the log while it started
        self.warmup_s: float | None = None
        self.warmup_steps: int | None = None
        self.shutdown_s: float | None = None
        self.stop_budget_used_s: float | None = None
        self.graceful: bool | None = None
        self.exit_code: int | None = None
        self.exited_before_stop: bool | None = None
        self._exit_report: ExitReport | None = None
        self._killed = False  # by kill_now(), not by the stop's own budget

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

    @property
    def _running(self) -> tuple[subprocess.Popen[bytes], ProcessTree]:
        """The launched process and its tree; only called once the server was launched."""
        assert self._proc is not None and self._tree is not None, "the server was never launched"
        return self._proc, self._tree

    # -- start ---------------------------------------------------------------

    def start(self) -> ServerProcess:
        """Launch the server and wait for readiness; raises ServerStartError or InterferenceError.

        Whatever ends the wait early (an interrupt included) stops the server before it is raised again.
        """
        self._require(ServerState.NEW, "start()")
        if not port_free(self.host, self.port):
            holder = port_holder(self.port)
            raise InterferenceError(
                f"port {self.port} on {self.host} is already taken by {holder or 'an unknown process'}; "
                "another server on it would interfere with the measurement",
                port=self.port,
                holder=holder,
            )
        for check in self.device_checks:
            check.before_start()
        try:
            self._launch()
            for check in self.device_checks:
                check.started(self)
            self._wait_ready()
        except BaseException:
            # Ctrl-C or a signal while a real server loads (minutes on an NPU), or a device check's error:
            # the server is stopped through its normal path, so that it is not left running for the caller.
            if self._state is ServerState.RUNNING:
                self.stop()
            raise
        return self

    def _launch(self) -> None:
        try:
            log = self.log_path.open("xb")
        except FileExistsError as exc:
            raise UsageError(
                f"server log {self.log_path} already exists; each server process needs its own log file"
            ) from exc
        become_subreaper()
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
                    preexec_fn=die_with_parent,  # the server dies with us, even if we are killed
                )
            except OSError as exc:
                self._state = ServerState.STOPPED
                raise ServerStartError(
                    f"cannot launch {self.argv[0]!r}: {exc}", log_path=str(self.log_path)
                ) from exc
        self._state = ServerState.RUNNING
        self._tree = ProcessTree(self._proc, self.server_id)
        self._tree.scan()
        _LIVE.add(self)
        try:
            self._guard = Guard(self._proc.pid, self.server_id, self.stop_budget_s)
        except OSError as exc:  # without a guard a killed harness could leave workers behind: no server runs
            self._terminate(0.0)
            raise ServerStartError(f"cannot start the guard of server {self.argv[0]!r}: {exc}",
                                   log_path=str(self.log_path)) from exc
        if self.on_launch is not None:
            self.on_launch(self)

    def _wait_ready(self) -> None:
        watch = LogWatch(self.log_path)  # each line stamped as it appears: the start-up by phase
        try:
            self._poll_ready(watch)
        finally:
            watch.poll(self._since_launch())
            self.startup_phases = watch.phases(self.startup_s)

    def _poll_ready(self, watch: LogWatch) -> None:
        proc, tree = self._running
        deadline = self._t_launch + self.startup_budget_s
        delay = 0.005
        with localhttp.client() as http:
            while True:
                watch.poll(self._since_launch())
                code = proc.poll()
                if code is not None:
                    self._fail_start(code, f"exited before it was ready, {self._since_launch():.1f} s after launch")
                now = time.perf_counter()
                try:
                    ok = http.get(self.health_url, timeout=max(0.05, min(1.0, deadline - now))).status_code == 200
                except httpx.TransportError:
                    ok = False
                if ok:
                    self.startup_s = self._since_launch()
                    tree.scan()
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
        exit_text = describe_exit(code) + (" when it was killed" if code is None else "")
        raise ServerStartError(
            f"server {self.argv[0]!r} {why}; {exit_text}. Last {LOG_TAIL_LINES} lines of {self.log_path}:\n{tail}",
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
        tree = self._running[1]
        return tuple(tree.info(key) for key in tree.scan())

    def owns(self, pid: int) -> bool:
        """Whether ``pid`` is, or was, one of this server's processes (safe from another thread)."""
        return self._tree is not None and self._tree.owns(pid)

    def record_warmup(self, seconds: float, steps: int | None = None) -> None:
        """Record how long the warmup took, and at how many inference steps; it is kept apart from measured requests."""
        self._require(ServerState.RUNNING, "record_warmup()")
        if not seconds >= 0:
            raise UsageError(f"record_warmup(): the warmup time must be >= 0 s, got {seconds!r}")
        self.warmup_s = float(seconds)
        self.warmup_steps = steps

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
        proc, tree = self._running
        for check in self.device_checks:
            check.stopping()
        self.exited_before_stop = proc.poll() is not None
        tree.scan()
        self.stop_budget_used_s = budget
        t0 = time.perf_counter()
        tree.signal_group(signal.SIGTERM)
        graceful = tree.wait_exited(t0 + budget)
        if not graceful:
            tree.kill_all()
            tree.wait_exited(time.perf_counter() + _KILL_WAIT_S)
        self.shutdown_s = time.perf_counter() - t0
        self.graceful = graceful and not self._killed
        # Reap our own child before anything checks the cleanup: on a busy host a killed server can still be
        # exiting here, and an unreaped child would be blamed as incomplete cleanup instead of the budget.
        try:
            self.exit_code = proc.wait(timeout=_KILL_WAIT_S)
        except subprocess.TimeoutExpired:
            self.exit_code = None  # still running after SIGKILL: verify_exited() reports it
        self._state = ServerState.STOPPED
        _LIVE.discard(self)
        if self._guard is not None:
            self._guard.release()

    def kill_now(self) -> None:
        """SIGKILL the whole tree at once (a second interrupt); a stop under way then finds it gone."""
        if self._tree is not None and self._state is ServerState.RUNNING:
            self._killed = True
            self._tree.kill_all()

    # -- after the stop ------------------------------------------------------

    def verify_exited(self) -> ExitReport:
        """Check that every process seen is gone (no zombies), the port is free and the devices are released."""
        self._require(ServerState.STOPPED, "verify_exited()")
        tree = self._running[1]
        survivors = tree.survivors()
        free = port_free(self.host, self.port)
        findings = [check.after_stop(self) for check in self.device_checks]
        self._exit_report = ExitReport(
            port=self.port,
            pids_seen=tree.seen,
            escaped=tree.escaped,
            survivors=tuple(survivors),
            port_free=free,
            port_holder=None if free else port_holder(self.port),
            device_leftovers=tuple(item for found in findings for item in found.leftovers),
            device_interference=tuple(item for found in findings for item in found.interference),
            device_notes=tuple(item for found in findings for item in found.notes),
        )
        return self._exit_report

    def record(self) -> ServerRecord:
        """The lifecycle evidence so far; verification fields stay None until verify_exited()."""
        report = self._exit_report
        return ServerRecord(
            argv=self.argv,
            env=dict(self.env),
            pid=self.pid,
            host=self.host,
            port=self.port,
            log_path=str(self.log_path),
            startup_budget_s=self.startup_budget_s,
            startup_s=self.startup_s,
            startup_phases=self.startup_phases,
            warmup_s=self.warmup_s,
            warmup_steps=self.warmup_steps,
            stop_budget_s=self.stop_budget_used_s,
            shutdown_s=self.shutdown_s,
            graceful=self.graceful,
            exit_code=self.exit_code,
            exited_before_stop=self.exited_before_stop,
            pids_seen=self._tree.seen if self._tree is not None else (),
            escaped=self._tree.escaped if self._tree is not None else (),
            survivors=None if report is None else report.survivors,
            port_free=None if report is None else report.port_free,
            device_leftovers=None if report is None else report.device_leftovers,
            device_interference=None if report is None else report.device_interference,
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
