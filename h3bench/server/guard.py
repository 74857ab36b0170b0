"""A watcher that outlives the harness and takes the server down if the harness dies first.

The parent-death signal (:func:`~h3bench.server.proctree.die_with_parent`)
reaches only the server process: a worker that ignores SIGTERM, and the
resource tracker beside it, are left behind when the server exits, and a
SIGKILLed harness cannot kill them any more. So each server gets a guard: a
small process in a session of its own, whose stdin is a pipe that only the
harness holds. A normal stop writes ``done`` and closes it, and the guard
exits. End of file without ``done`` means the harness is gone (SIGKILL, the
OOM killer, a crash): the guard SIGTERMs the server's process group, waits
the server's stop budget, and SIGKILLs every process that still carries the
server's marker (:data:`~h3bench.server.proctree.SERVER_ID_ENV`) or is still
in the server's session, as the harness would have done. (The session
matters: vLLM-Omni's workers retitle themselves, after which their marker
cannot be read.)

The guard carries neither the server's nor the campaign's marker, so it is
never counted as one of the server's processes.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
from pathlib import Path

__all__ = ["DONE", "Guard", "main"]

DONE = b"done"
_PACKAGE_ROOT = str(Path(__file__).resolve().parents[2])  # where ``import h3bench`` finds this checkout


class Guard:
    """The harness's end of one server's guard: start it after the launch, release it after the stop."""

    def __init__(self, pgid: int, marker: str, budget_s: float) -> None:
        from h3bench.server.proctree import CAMPAIGN_ID_ENV, SERVER_ID_ENV

        env = {k: v for k, v in os.environ.items() if k not in (SERVER_ID_ENV, CAMPAIGN_ID_ENV)}
        env["PYTHONPATH"] = os.pathsep.join(p for p in (_PACKAGE_ROOT, env.get("PYTHONPATH")) if p)
        self._proc = subprocess.Popen(
            [sys.executable, "-c", "from h3bench.server.guard import main; main()", str(pgid), marker, repr(budget_s)],
            stdin=subprocess.PIPE, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env,
            start_new_session=True,  # not in the harness's group: a signal to that group must not end it
        )

    @property
    def pid(self) -> int:
        return self._proc.pid

    def release(self) -> None:
        """The server was stopped by the harness: the guard exits without touching anything; safe twice."""
        stdin = self._proc.stdin
        if stdin is not None and not stdin.closed:
            with contextlib.suppress(OSError):  # a guard that already died: nothing to tell it
                stdin.write(DONE)
            with contextlib.suppress(OSError):
                stdin.close()
        try:
            self._proc.wait(timeout=5.0)
        except subprocess.TimeoutExpired:  # never expected; a guard must not outlive its server either
            self._proc.kill()
            self._proc.wait()


def main(argv: list[str] | None = None) -> None:
    """The guard process: wait for the harness to let go, then stop the server if it did not say ``done``."""
    pgid_text, marker, budget_text = sys.argv[1:] if argv is None else argv
    for sig in (signal.SIGINT, signal.SIGHUP):  # a terminal's signals are for the harness, which then says done
        signal.signal(sig, signal.SIG_IGN)
    said = sys.stdin.buffer.read()  # until the harness closes its end, or dies
    if said == DONE:
        return
    from h3bench.server.proctree import SERVER_ID_ENV, marked_processes, session_processes, stop_processes

    pgid = int(pgid_text)  # the server leads its own session and group: pgid and sid are its pid
    with contextlib.suppress(OSError):  # the group may be gone already
        os.killpg(pgid, signal.SIGTERM)
    left = {p.pid: p for p in (*marked_processes(SERVER_ID_ENV, marker), *session_processes(pgid))}
    stop_processes(list(left.values()), float(budget_text))
