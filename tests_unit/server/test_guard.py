"""No process outlives the harness: a SIGKILLed harness's server goes, a worker that ignores SIGTERM included (issue 27).

The harness is a real Python process that starts a real simulator server
through :class:`~h3bench.server.process.ServerProcess`, with its last worker
ignoring both the stop request and SIGTERM (``worker_ignores_sigterm``). The
test SIGKILLs the harness, as the OOM killer or ``kill -9`` would: the
parent-death signal stops the server process, which exits leaving the
stubborn worker and its resource tracker behind; before the guard
(:mod:`h3bench.server.guard`), they were re-parented to PID 1 and lived on.
Now every process of the server must be gone within the stop budget (plus a
margin for a busy machine; without the guard they never go).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest

from h3bench.server.proctree import SERVER_ID_ENV, marked_processes
from tests_unit.sim_server import FAST, free_port, running

BUDGET_S = 2.0
MARGIN_S = 10.0  # process teardown and the guard's own start on a busy machine; without the guard: forever

HARNESS = '''
import json, sys, time
from h3bench.server.process import ServerProcess
port, log, budget, *flags = sys.argv[1:]
srv = ServerProcess([sys.executable, "-m", "h3bench.sim", "--port", port, *flags], port=int(port), log_path=log,
                    startup_budget_s=120, stop_budget_s=float(budget))
srv.start()
print(json.dumps({"server_id": srv.server_id, "guard": srv._guard.pid, "pids": [p.pid for p in srv.snapshot()]}),
      flush=True)
time.sleep(600)
'''


def _harness(tmp_path: Path, *flags: str) -> tuple[subprocess.Popen[str], dict]:
    port = free_port()
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[2])}
    proc = subprocess.Popen([sys.executable, "-c", HARNESS, str(port), str(tmp_path / "server.log"), str(BUDGET_S),
                             *flags], stdout=subprocess.PIPE, text=True, env=env)
    assert proc.stdout is not None
    line = proc.stdout.readline()
    if not line:
        proc.wait(timeout=30)
        log = (tmp_path / "server.log").read_text() if (tmp_path / "server.log").exists() else ""
        pytest.fail(f"the harness ended before its server was ready ({proc.returncode}):\n{log}")
    return proc, json.loads(line)


@pytest.mark.parametrize("flags", [[], ["--worker-ignores-sigterm"]], ids=["ordinary", "worker-ignores-sigterm"])
def test_a_sigkilled_harness_leaves_no_process_of_its_server(tmp_path, flags):
    proc, found = _harness(tmp_path, *FAST, *flags)
    server = marked_processes(SERVER_ID_ENV, found["server_id"])
    assert len(server) >= 3, "the server, its two workers (and a resource tracker) carry the server's marker"

    os.kill(proc.pid, signal.SIGKILL)
    proc.wait(timeout=30)
    proc.stdout.close()  # type: ignore[union-attr]
    start = time.monotonic()
    while any(running(p.pid) for p in server) and time.monotonic() - start < BUDGET_S + MARGIN_S:
        time.sleep(0.05)
    took = time.monotonic() - start
    left = [p.pid for p in server if running(p.pid)]

    for pid in left:  # never leave them to the next test
        os.kill(pid, signal.SIGKILL)
    assert not left, f"outlived the SIGKILLed harness by {took:.1f} s: {left}"
    print(f"every process of the server gone {took:.2f} s after the harness's SIGKILL (budget {BUDGET_S:g} s)")
    assert not marked_processes(SERVER_ID_ENV, found["server_id"])
    deadline = time.monotonic() + MARGIN_S
    while running(found["guard"]) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not running(found["guard"]), "the guard exits once the server is gone"


# A server whose worker is as vLLM-Omni's look after setproctitle: its marker cannot be read (here: an empty
# environment), it stays in the server's session, and it ignores SIGTERM.
RETITLED_SERVER = """
import http.server, os, subprocess, sys
subprocess.Popen([sys.executable, "-c", "import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); "
                  "time.sleep(600)"], env={"PATH": os.environ.get("PATH", "")})
class Health(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        self.send_response(200); self.end_headers(); self.wfile.write(b"{}")
    def log_message(self, *args):
        pass
http.server.HTTPServer(("127.0.0.1", int(sys.argv[1])), Health).serve_forever()
"""
RETITLED_HARNESS = """
import json, sys, time
from h3bench.server.process import ServerProcess
port, log, budget, server = sys.argv[1:]
srv = ServerProcess([sys.executable, "-c", server, port], port=int(port), log_path=log, startup_budget_s=60,
                    stop_budget_s=float(budget))
srv.start()
time.sleep(1.0)  # the worker is started before the server listens; let it show up in the snapshot
print(json.dumps({"server_id": srv.server_id, "pids": [p.pid for p in srv.snapshot()]}), flush=True)
time.sleep(600)
"""


def test_a_worker_whose_marker_cannot_be_read_goes_with_its_session(tmp_path):
    port = free_port()
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[2])}
    proc = subprocess.Popen([sys.executable, "-c", RETITLED_HARNESS, str(port), str(tmp_path / "server.log"),
                             str(BUDGET_S), RETITLED_SERVER], stdout=subprocess.PIPE, text=True, env=env)
    assert proc.stdout is not None
    found = json.loads(proc.stdout.readline())
    marked = {p.pid for p in marked_processes(SERVER_ID_ENV, found["server_id"])}
    unmarked = [pid for pid in found["pids"] if pid not in marked]
    assert unmarked, "the worker is in the server's tree without a readable marker"

    os.kill(proc.pid, signal.SIGKILL)
    proc.wait(timeout=30)
    proc.stdout.close()
    start = time.monotonic()
    while any(running(pid) for pid in found["pids"]) and time.monotonic() - start < BUDGET_S + MARGIN_S:
        time.sleep(0.05)
    left = [pid for pid in found["pids"] if running(pid)]
    for pid in left:  # never leave them to the next test
        os.kill(pid, signal.SIGKILL)
    assert not left, f"outlived the SIGKILLed harness: {left}"


def test_a_normal_stop_releases_the_guard_and_the_guard_touches_nothing(tmp_path):
    from h3bench.server.process import ServerProcess

    port = free_port()
    srv = ServerProcess([sys.executable, "-m", "h3bench.sim", "--port", str(port), *FAST], port=port,
                        log_path=tmp_path / "server.log", startup_budget_s=120, stop_budget_s=BUDGET_S)
    srv.start()
    guard = psutil.Process(srv._guard.pid)  # type: ignore[union-attr]
    assert SERVER_ID_ENV not in guard.environ(), "the guard must never count as one of the server's processes"
    assert os.getsid(guard.pid) != os.getsid(0), "a signal to the harness's session must not end the guard"
    srv.stop()
    srv.verify_exited().check()
    assert not running(guard.pid)
    assert srv.graceful is True
