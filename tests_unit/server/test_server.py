"""ServerProcess against a real stand-alone server with worker processes (tests_unit/fakes/fake_server.py)."""

from __future__ import annotations

import _thread
import contextlib
import json
import os
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import psutil
import pytest

from h3bench.errors import CleanupError, InterferenceError, ServerStartError, UsageError
from h3bench.host.devices import DeviceFindings
from h3bench.server.ports import find_free_port
from h3bench.server.process import (
    LOG_TAIL_LINES,
    SERVER_ID_ENV,
    ExitReport,
    ServerProcess,
    ServerState,
)
from h3bench.server.startup import CompileWhere

FAKE_SERVER = Path(__file__).parents[1] / "fakes" / "fake_server.py"


@pytest.fixture
def make_server(tmp_path: Path):
    """Build (not start) a ServerProcess running the fake server with the given flags."""
    made: list[ServerProcess] = []

    def make(*flags: str, startup_budget_s: float = 20.0, stop_budget_s: float = 5.0, **kwargs) -> ServerProcess:
        port = find_free_port()
        argv = [sys.executable, str(FAKE_SERVER), "--port", str(port), *flags]
        made.append(ServerProcess(
            argv,
            port=port,
            log_path=tmp_path / f"server{len(made)}.log",
            startup_budget_s=startup_budget_s,
            stop_budget_s=stop_budget_s,
            **kwargs,
        ))
        return made[-1]

    yield make
    for srv in made:  # a failed test must not leak its server
        if srv.state is ServerState.RUNNING:
            srv.stop(0)


def gone(pid: int, create_time: float) -> bool:
    try:
        return abs(psutil.Process(pid).create_time() - create_time) > 0.01
    except psutil.NoSuchProcess:
        return True


def test_ready_within_budget_then_graceful_stop_leaves_nothing(make_server) -> None:
    srv = make_server(env={"VLLM_WORKER_MULTIPROC_METHOD": "spawn"})
    assert srv.state is ServerState.NEW
    srv.start()
    assert srv.state is ServerState.RUNNING
    assert 0 < srv.startup_s < srv.startup_budget_s

    tree = srv.snapshot()
    assert [p.found_by for p in tree].count("tree") == 3  # the server and its two workers
    assert {p.ppid for p in tree if p.pid != srv.pid} == {srv.pid}
    srv.record_warmup(1.25, 2)

    srv.stop()
    assert srv.state is ServerState.STOPPED
    assert srv.graceful is True
    assert srv.exit_code == 0
    assert srv.exited_before_stop is False
    assert 0 <= srv.shutdown_s < srv.stop_budget_s

    report = srv.verify_exited().check()
    assert report.ok and report.port_free and not report.escaped
    assert {p.pid for p in report.pids_seen} == {p.pid for p in tree}
    assert all(gone(p.pid, p.create_time) for p in report.pids_seen)

    record = json.loads(json.dumps(srv.record().to_dict()))
    assert record["env"] == {"VLLM_WORKER_MULTIPROC_METHOD": "spawn"}  # only what the caller set
    assert (record["warmup_s"], record["warmup_steps"]) == (1.25, 2)
    assert record["graceful"] is True and record["survivors"] == [] and record["port_free"] is True
    assert record["stop_budget_s"] == 5.0
    assert len(record["pids_seen"]) == 3


def test_startup_failure_reports_exit_code_and_last_50_log_lines(make_server) -> None:
    srv = make_server("--exit-at-startup", "conflicting offload settings", "--log-lines", "80")
    with pytest.raises(ServerStartError) as info:
        srv.start()
    err = info.value
    assert err.exit_code == 3
    lines = err.log_tail.splitlines()
    assert len(lines) == LOG_TAIL_LINES
    assert lines[0] == "startup log line 31"  # 80 lines + the error: the last 50 start at 31
    assert lines[-1] == "ERROR conflicting offload settings"
    assert "exit code 3" in str(err) and err.log_tail in str(err)
    assert err.log_path == str(srv.log_path)
    assert srv.state is ServerState.STOPPED
    assert srv.exited_before_stop is True
    srv.verify_exited().check()


def test_no_readiness_within_budget_kills_the_server(make_server) -> None:
    # Long enough for the fake and its two workers to start on a busy machine: it must be serving, never ready.
    srv = make_server("--never-ready", startup_budget_s=5.0)
    t0 = time.perf_counter()
    with pytest.raises(ServerStartError, match="within the startup budget of 5 s") as info:
        srv.start()
    assert time.perf_counter() - t0 >= 5.0
    assert info.value.exit_code is None
    assert "serving on" in info.value.log_tail
    assert srv.startup_s is None
    report = srv.verify_exited().check()
    assert len(report.pids_seen) == 3


def test_a_command_that_cannot_run_is_a_start_error(tmp_path: Path) -> None:
    srv = ServerProcess([str(tmp_path / "no-such-server")], port=find_free_port(), log_path=tmp_path / "log")
    with pytest.raises(ServerStartError, match="cannot launch"):
        srv.start()
    assert srv.state is ServerState.STOPPED


def test_port_taken_is_interference_naming_port_and_holder(make_server) -> None:
    srv = make_server()
    holder = subprocess.Popen(
        [sys.executable, "-c", "import socket,sys; s=socket.socket(); s.bind(('127.0.0.1', int(sys.argv[1])));"
         "s.listen(); print('listening', flush=True); sys.stdin.read()", str(srv.port)],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
    )
    try:
        assert holder.stdout.readline().strip() == "listening"
        with pytest.raises(InterferenceError) as info:
            srv.start()
    finally:
        holder.stdin.close()
        holder.wait()
        holder.stdout.close()
    assert info.value.port == srv.port
    assert info.value.holder.startswith(f"pid {holder.pid} (python")
    assert str(srv.port) in str(info.value) and info.value.holder in str(info.value)
    assert srv.state is ServerState.NEW and not srv.log_path.exists()  # nothing was launched


def test_worker_ignoring_sigterm_is_killed_after_the_budget(make_server) -> None:
    srv = make_server("--worker-ignores-sigterm")
    srv.start()
    srv.stop(budget_s=0.5)
    assert srv.graceful is False
    assert 0.5 <= srv.shutdown_s < 5.0
    assert srv.exit_code == -9  # the server waits on its stuck worker until the SIGKILL
    srv.verify_exited().check()
    assert srv.record().graceful is False


@pytest.mark.parametrize(
    ("delay", "budget", "graceful"),
    [(0.3, 3.0, True), (30.0, 0.4, False)],
    ids=["within-budget", "beyond-budget"],
)
def test_slow_shutdown(make_server, delay: float, budget: float, graceful: bool) -> None:
    srv = make_server("--shutdown-delay", str(delay))
    srv.start()
    srv.stop(budget)
    assert srv.graceful is graceful
    assert srv.exit_code == (0 if graceful else -9)
    assert min(delay, budget) <= srv.shutdown_s < budget + (0 if graceful else 5.0)
    assert srv.record().stop_budget_s == budget
    srv.verify_exited().check()


@pytest.mark.parametrize(("mode", "found_by"), [("session", "session"), ("detached", "marker")])
def test_orphaned_worker_is_found_killed_and_reported(make_server, mode: str, found_by: str) -> None:
    """A grandchild re-parented away from the server (and, detached, in a session of its own)."""
    srv = make_server("--orphan", mode)
    srv.start()
    orphans = [p for p in srv.snapshot() if "--as-orphan" in p.cmdline]
    assert len(orphans) == 1 and orphans[0].found_by == found_by
    assert orphans[0].ppid != srv.pid
    srv.stop(0.3)
    assert srv.graceful is False  # it ignores SIGTERM, so only the SIGKILL ended it
    report = srv.verify_exited().check()
    assert report.escaped == (orphans[0],)
    assert gone(orphans[0].pid, orphans[0].create_time)
    assert srv.record().to_dict()["escaped"][0]["pid"] == orphans[0].pid


def test_verify_reports_a_process_of_the_server_that_appears_after_the_stop(make_server) -> None:
    srv = make_server()
    srv.start()
    srv.stop()
    # Late-spawned by the server's tree: it carries the server's marker.
    late = subprocess.Popen(
        [sys.executable, "-c", "import sys; sys.stdin.read()"],
        stdin=subprocess.PIPE,
        env={**os.environ, SERVER_ID_ENV: srv.server_id},
    )
    try:
        report = srv.verify_exited()
        assert not report.ok
        assert [s for s in report.survivors if f"pid {late.pid} " in s and "still running" in s]
        with pytest.raises(CleanupError) as info:
            report.check()
        assert info.value.survivors == report.problems
        assert srv.record().survivors == report.survivors
    finally:
        late.stdin.close()
        late.wait()


def test_verify_reports_a_zombie(make_server) -> None:
    """A process of the server that has exited but that its parent, not ours to kill, never reaps."""
    srv = make_server()
    srv.start()
    parent = subprocess.Popen(
        [sys.executable, "-c",
         "import os, subprocess, sys, time\n"
         "env = {**os.environ, sys.argv[1]: sys.argv[2]}\n"
         "child = subprocess.Popen([sys.executable, '-c', 'import sys; sys.stdin.read()'], stdin=subprocess.PIPE,"
         " env=env)\n"
         "print(child.pid, flush=True)\n"
         "sys.stdin.readline(); child.stdin.close()\n"  # the child exits; nobody waits for it
         "time.sleep(60)",
         SERVER_ID_ENV, srv.server_id],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
    )
    try:
        child_pid = int(parent.stdout.readline())
        seen = {p.pid for p in srv.snapshot()}
        assert child_pid in seen and parent.pid not in seen
        parent.stdin.write("exit\n")
        parent.stdin.flush()
        deadline = time.monotonic() + 10
        while psutil.Process(child_pid).status() != psutil.STATUS_ZOMBIE and time.monotonic() < deadline:
            time.sleep(0.01)
        srv.stop()
        assert srv.graceful is True  # a zombie has exited: nothing to wait for
        report = srv.verify_exited()
        assert [s for s in report.survivors if f"pid {child_pid} " in s and f"zombie (parent pid {parent.pid})" in s]
        assert not report.ok
    finally:
        parent.kill()
        parent.wait()
        parent.stdin.close()
        parent.stdout.close()
        with contextlib.suppress(ChildProcessError):
            os.waitpid(child_pid, 0)  # re-parented to us, the subreaper, when its parent died


def test_verify_reports_a_port_still_taken(make_server) -> None:
    srv = make_server()
    srv.start()
    srv.stop()
    with socket.socket() as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # past the health checks' TIME_WAIT
        sock.bind(("127.0.0.1", srv.port))
        sock.listen()
        report = srv.verify_exited()
    assert not report.port_free and report.port_holder.startswith(f"pid {os.getpid()} ")
    with pytest.raises(CleanupError, match=f"port {srv.port} still taken by pid {os.getpid()}"):
        report.check()


class RecordingCheck:
    """A DeviceCheck that records its calls and reports configured leftovers."""

    def __init__(self, refuse: bool = False, leftovers: tuple[str, ...] = ()) -> None:
        self.calls: list[str] = []
        self.refuse = refuse
        self.leftovers = leftovers

    def before_start(self) -> None:
        self.calls.append("before_start")
        if self.refuse:
            raise InterferenceError("NPU 3 is busy", holder="pid 1 (test)")

    def started(self, owner) -> None:
        self.calls.append("started" if owner.owns(owner.pid) else "started, not owning the server")

    def stopping(self) -> None:
        self.calls.append("stopping")

    def after_stop(self, owner) -> DeviceFindings:
        self.calls.append("after_stop")
        return DeviceFindings(leftovers=self.leftovers, interference=("pid 7 (other) was on NPU 1",))


def test_device_checks_run_before_the_launch_and_after_the_stop(make_server) -> None:
    refusing = make_server(device_checks=[RecordingCheck(refuse=True)])
    with pytest.raises(InterferenceError, match="NPU 3 is busy"):
        refusing.start()
    assert not refusing.log_path.exists()

    check = RecordingCheck(leftovers=("pid 9 (VLLMWorker) still holds NPU 0",))
    with make_server(device_checks=[check]) as srv:
        assert check.calls == ["before_start", "started"]
    report = srv.verify_exited()
    assert check.calls == ["before_start", "started", "stopping", "after_stop"]
    assert report.device_leftovers == check.leftovers and not report.ok
    assert report.device_interference == ("pid 7 (other) was on NPU 1",)
    with pytest.raises(CleanupError, match="still holds NPU 0"):
        report.check()


class InterruptingCheck(RecordingCheck):
    """Once the server is launched, Ctrl-C reaches the harness while the server is still loading."""

    def started(self, owner) -> None:
        super().started(owner)
        threading.Timer(0.5, _thread.interrupt_main).start()


class FailingCheck(RecordingCheck):
    """Once the server is launched, the device watcher itself fails."""

    def started(self, owner) -> None:
        super().started(owner)
        raise RuntimeError("npu-smi telemetry could not start")


@pytest.mark.parametrize(("check", "raised"), [(InterruptingCheck, KeyboardInterrupt), (FailingCheck, RuntimeError)],
                         ids=["ctrl-c-while-loading", "device-check-fails-once-launched"])
def test_whatever_ends_the_startup_early_stops_the_server_first(make_server, check, raised) -> None:
    # On an NPU host the server loads for minutes: the likeliest moment for Ctrl-C. The server must not be left
    # running behind the exception (the caller's `with` never entered, so nobody else would stop it).
    recording = check()
    srv = make_server("--never-ready", startup_budget_s=60.0, device_checks=[recording])
    with pytest.raises(raised):
        srv.start()
    assert srv.state is ServerState.STOPPED
    assert srv.startup_s is None and srv.graceful is True
    assert recording.calls == ["before_start", "started", "stopping"]
    report = srv.verify_exited()
    assert report.ok and report.pids_seen, report.problems  # every process it had started is gone


def test_context_manager_and_misuse(make_server, tmp_path: Path) -> None:
    srv = make_server()
    with pytest.raises(UsageError, match=r"stop\(\) needs a running server.*call start\(\) first"):
        srv.stop()
    with pytest.raises(UsageError, match=r"snapshot\(\) needs a running server"):
        srv.snapshot()
    with srv:
        with pytest.raises(UsageError, match=r"start\(\) needs a new server, but this one is running"):
            srv.start()
        with pytest.raises(UsageError, match=r"verify_exited\(\).*call stop\(\) first"):
            srv.verify_exited()
        with pytest.raises(UsageError, match="must be >= 0"):
            srv.record_warmup(-1.0)
    assert srv.state is ServerState.STOPPED
    first = srv.record()
    srv.stop()  # stopping twice is safe and changes nothing
    assert srv.record() == first
    with pytest.raises(UsageError, match="runs only once"):
        srv.start()
    with pytest.raises(UsageError, match=r"record_warmup\(\) needs a running server"):
        srv.record_warmup(1.0)

    log = tmp_path / "taken.log"
    log.write_text("old evidence\n")
    with pytest.raises(UsageError, match="already exists"):
        ServerProcess([sys.executable, str(FAKE_SERVER)], port=find_free_port(), log_path=log).start()
    assert log.read_text() == "old evidence\n"
    with pytest.raises(UsageError, match="argv is empty"):
        ServerProcess([], port=1, log_path=log)


def test_exit_report_check_passes_only_when_clean() -> None:
    clean = ExitReport(port=1, pids_seen=(), escaped=(), survivors=(), port_free=True, port_holder=None,
                       device_leftovers=())
    assert clean.check() is clean and clean.ok
    for dirty in (
        ExitReport(port=1, pids_seen=(), escaped=(), survivors=("pid 5 (x) is still running",), port_free=True,
                   port_holder=None, device_leftovers=()),
        ExitReport(port=1, pids_seen=(), escaped=(), survivors=(), port_free=False, port_holder=None,
                   device_leftovers=()),
    ):
        with pytest.raises(CleanupError):
            dirty.check()


FAKES = FAKE_SERVER.parent
VLLM_BASE = ["vllm", "serve", "MiniMaxAI/MiniMax-H3", "--omni", "--host", "127.0.0.1", "--task-type", "ref2va",
             "--num-gpus", "2", "--usp", "2", "--ring", "1", "--text-encoder-tp-size", "2",
             "--vae-parallel-mode", "tile", "--vae-use-tiling", "--vae-patch-parallel-size", "2",
             "--enable-diffusion-pipeline-profiler"]


LAYER_WISE = '{"mode":"layer","components":["dit"]}'
INPUTS = Path(__file__).resolve().parents[2] / "fixtures" / "inputs"


def vllm_server(tmp_path: Path, *flags: str, env: dict[str, str] | None = None) -> ServerProcess:
    """The fake `vllm` on PATH, as the NPU code path will launch the real one."""
    port = find_free_port()
    path = os.pathsep.join([str(FAKES), str(Path(sys.executable).parent), os.environ["PATH"]])
    return ServerProcess([*VLLM_BASE, "--port", str(port), *flags], port=port, log_path=tmp_path / "vllm.log",
                         env={"PATH": path, "VLLM_WORKER_MULTIPROC_METHOD": "spawn", **(env or {})},
                         startup_budget_s=60)


@pytest.mark.parametrize(
    ("flags", "message"),
    [
        # The config resolves to plain layer-wise offload (rank-local is its default transfer), the flag to DLO.
        (["--enable-distributed-layerwise-offload", "--diffusion-offload-config", LAYER_WISE],
         "ValueError: diffusion_offload_config cannot be combined with legacy enable_*_offload flags"),
        (["--diffusion-offload-config", LAYER_WISE, "--dlo-no-use-allgather"],
         "ValueError: diffusion_offload_config cannot be combined with legacy DLO option(s): dlo_use_allgather"),
        (["--usp", "4"], "ValueError: WORLD size (2) must be divisible by non-DP parallel size (4)"),
        # Refused in the workers, after they spawned: the server gives up on them.
        (["--vae-patch-parallel-size", "3"], "RuntimeError: Initialization failed. Please see the error messages above."),
    ],
    ids=["dlo-and-offload-config", "offload-config-and-dlo-transfer", "usp-beyond-devices", "vae-patch-in-workers"],
)
def test_fake_vllm_dies_before_inference_on_bad_settings(tmp_path: Path, flags: list[str], message: str) -> None:
    srv = vllm_server(tmp_path, *flags)
    with pytest.raises(ServerStartError) as info:
        srv.start()
    assert info.value.exit_code == 1
    assert "exit code 1" in str(info.value)
    assert message in info.value.log_tail.splitlines()[-1]
    srv.verify_exited().check()


def test_fake_vllm_serves_the_simulator(tmp_path: Path) -> None:
    """A valid command becomes the simulator, with one worker per --num-gpus, and stops cleanly."""
    from h3bench.run.client import GenerationRequest, Reference, VideoClient

    srv = vllm_server(tmp_path, "--enable-distributed-layerwise-offload", "--dlo-no-use-allgather",
                      env={"FAKE_VLLM_SIM_ARGS": "--time-scale 0"})
    with srv:
        workers = [p for p in srv.snapshot() if "spawn_main" in " ".join(p.cmdline)]
        assert len(workers) == 2 and {p.ppid for p in workers} == {srv.pid}
        with VideoClient(srv.base_url, model="MiniMaxAI/MiniMax-H3", timeout=60) as client:
            result = client.generate_sync(GenerationRequest("a lamb", duration_s=4, size="256x160",
                                                            references=(Reference.from_path(INPUTS / "ref_video.mp4"),
                                                                        Reference.from_path(INPUTS / "ref_audio.wav"))),
                                          tmp_path / "out.mp4")
        assert result.model == "MiniMaxAI/MiniMax-H3" and result.size_bytes > 0
    assert srv.graceful is True and srv.exit_code == 0
    srv.verify_exited().check()
    assert "starting 2 diffusion workers" in srv.log_path.read_text()
    # The start-up by phase, from the lines the fake's workers and the simulator log as vLLM-Omni's do.
    phases = srv.startup_phases
    assert phases is not None and phases.device_init_s is not None and phases.weight_load_s is not None
    assert phases.compile is CompileWhere.NONE  # 0.30.0 on NPU: no inductor, no torch.compile
