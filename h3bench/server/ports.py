"""TCP ports on the server's host: pick a free one, check one, and name who holds one."""

from __future__ import annotations

import contextlib
import errno
import socket
from typing import Any

import psutil

__all__ = ["LOCALHOST", "find_free_port", "port_free", "port_holder"]

LOCALHOST = "127.0.0.1"  # servers under test listen on loopback only


def find_free_port(host: str = LOCALHOST) -> int:
    """A port that was free a moment ago (the OS picks it)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((host, 0))
        return int(sock.getsockname()[1])


def port_free(host: str, port: int) -> bool:
    """Whether ``port`` can be bound now; TIME_WAIT leftovers do not count (SO_REUSEADDR, as uvicorn sets it)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind((host, port))
        except OSError as exc:
            if exc.errno == errno.EADDRINUSE:
                return False
            raise
    return True


def port_holder(port: int) -> str | None:
    """Name the process that holds a TCP port, e.g. ``"pid 812 (python3)"``, if it can be found."""
    conns: list[tuple[int | None, Any]]
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
