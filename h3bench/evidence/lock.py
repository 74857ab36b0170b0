"""The one process that writes a bundle: an exclusive ``flock`` on ``<bundle>/.writer.lock``.

:meth:`h3bench.evidence.bundle.Bundle.create` and
:meth:`~h3bench.evidence.bundle.Bundle.resume` hold it until
:meth:`~h3bench.evidence.bundle.Bundle.close` (or until the process dies: the
kernel releases it), and a second writer is refused at once, naming the first
one's pid.
"""

from __future__ import annotations

import fcntl
import json
import os
import socket
from pathlib import Path
from typing import Any

from h3bench.errors import BundleBusyError
from h3bench.evidence import files
from h3bench.evidence.layout import WRITER_LOCK

__all__ = ["WriterLock"]


class WriterLock:
    """The one process that writes a bundle: an exclusive ``flock`` on ``<bundle>/.writer.lock``.

    The lock file holds the writer's pid, host, run id and start, so a second
    writer is refused naming the first. ``flock`` belongs to the open file, so
    the kernel releases it when the writer exits, even by SIGKILL: a killed
    run never leaves a bundle locked. The descriptor is not inherited by
    child processes (servers), so none of them can keep it.
    """

    def __init__(self, fd: int, path: Path) -> None:
        self._fd: int | None = fd
        self.path = path

    @classmethod
    def acquire(cls, bundle: Path, session: str | None = None) -> WriterLock:
        """Take the lock of the bundle at ``bundle`` now; BundleBusyError naming the holder when another has it."""
        path = bundle / WRITER_LOCK
        while True:
            try:
                fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
            except OSError as exc:
                raise files.write_error(exc, path, "cannot open the bundle's writer lock") from exc
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                holder = _holder(fd)
                os.close(fd)
                raise _busy(bundle, holder) from None
            if _same_file(fd, path):
                break
            os.close(fd)  # the last holder removed that file as it let go: lock the one that is there now
        record = {"pid": os.getpid(), "host": socket.gethostname(), "session": session, "since": files.now()}
        os.ftruncate(fd, 0)
        files.write_all(fd, (json.dumps(record) + "\n").encode())
        return cls(fd, path)

    @property
    def held(self) -> bool:
        return self._fd is not None

    def release(self) -> None:
        """Let another writer in; safe to call twice.

        The file goes first, while the lock is still held: whoever opened it
        meanwhile sees that it is no longer the lock file and opens the new one.
        """
        if self._fd is not None:
            if _same_file(self._fd, self.path):
                self.path.unlink(missing_ok=True)
            os.close(self._fd)
            self._fd = None


def _same_file(fd: int, path: Path) -> bool:
    try:
        here = os.stat(path)
    except FileNotFoundError:
        return False
    mine = os.fstat(fd)
    return (here.st_dev, here.st_ino) == (mine.st_dev, mine.st_ino)


def _busy(bundle: Path, holder: dict[str, Any]) -> BundleBusyError:
    pid = holder.get("pid") if isinstance(holder.get("pid"), int) else None
    who = (f"pid {pid} on {holder.get('host', 'this host')}, run {holder.get('session')}, since {holder.get('since')}"
           if pid is not None else "a process that has not written its pid yet")
    return BundleBusyError(f"{bundle}: another campaign is writing this bundle ({who}); a bundle is written by one "
                           "campaign at a time: wait until it ends (or stop it), then --resume", path=str(bundle),
                           pid=pid)


def _holder(fd: int) -> dict[str, Any]:
    """What the lock file says of its holder; empty when it is not (yet) readable."""
    try:
        data = os.pread(fd, 4096, 0)
        found = json.loads(data) if data else {}
    except (OSError, ValueError):
        return {}
    return found if isinstance(found, dict) else {}
